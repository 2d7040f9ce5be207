#version 450
// naive: the unfused forward in three passes through a scratch score matrix.
//
// Bindings (set 0):
//   0 Q, 1 K, 2 V (STYPE, readonly), 3 O (STYPE), 4 LSE (float32),
//   5 S scratch [B,Hq,Nq,Nk] float32 (B·Hq·Nq·Nk·4 bytes; < 2^32 elements)
// Spec constants: 0 WG (a power of two), 1 D, 2 DV, 6 PASS (0, 1, 2);
//   3 BR, 4 BC, 5 SUBGROUP unused. One pipeline per pass; dispatch the three
//   passes in order with a compute→compute barrier between them.
// Grid (every pass): (Nq, Hq, B); workgroup (i, h, b) handles query row i.
//   Nq must not exceed maxComputeWorkGroupCount[0] (≥ 65535 guaranteed).
// Shared memory (bytes): 4·(D + WG)  = shaders.NaiveSharedBytes.
//
//   PASS 0: S[i, j] = scale·q_i·k_j, or −inf where key j is masked.
//   PASS 1: m = max_j S, l = Σ exp(S − m); S ← P = exp(S − m)/l in place;
//           LSE = m + log l (−inf and P = 0 for a row that sees no key).
//   PASS 2: O[i, :] = Σ_j P[i, j]·v_j.
#extension GL_GOOGLE_include_directive : require
#include "params.glsl"
#include "attn_params.glsl"

layout(constant_id = 6) const uint PASS = 0;

layout(std430, binding = 0) readonly buffer QBuf { STYPE q_buf[]; };
layout(std430, binding = 1) readonly buffer KBuf { STYPE k_buf[]; };
layout(std430, binding = 2) readonly buffer VBuf { STYPE v_buf[]; };
layout(std430, binding = 3) writeonly buffer OBuf { STYPE o_buf[]; };
layout(std430, binding = 4) buffer LBuf { float lse_buf[]; };
layout(std430, binding = 5) buffer SBuf { float s_buf[]; };

shared float sq[D];
shared float red[WG];

// block_reduce combines one value per thread (max when is_max, else sum)
// with a shared-memory tree; WG must be a power of two.
float block_reduce(float x, bool is_max) {
	uint tid = gl_LocalInvocationIndex;
	barrier();
	red[tid] = x;
	barrier();
	for (uint o = WG / 2u; o > 0u; o >>= 1u) {
		if (tid < o) {
			float y = red[tid + o];
			red[tid] = is_max ? max(red[tid], y) : red[tid] + y;
		}
		barrier();
	}
	return red[0];
}

void main() {
	uint tid = gl_LocalInvocationIndex;
	uint i = gl_WorkGroupID.x;
	uint h = gl_WorkGroupID.y;
	uint b = gl_WorkGroupID.z;
	seq_begin(b);
	uint kvh = kv_head(h);
	uint row = lse_index(b, h, i) * pc.Nk; // start of S row (b, h, i)
	uint lim = key_limit(i);

	if (PASS == 0u) {
		for (uint d = tid; d < D; d += WG) {
			sq[d] = LOAD(q_buf[q_base(b, i, h) + d]);
		}
		barrier();
		for (uint j = tid; j < pc.Nk; j += WG) {
			float x = NEG_INF;
			if (j < lim) {
				uint kb = k_base(b, j, kvh);
				x = 0.0;
				UNROLLED_BEGIN(d, D)
					x += sq[d] * LOAD(k_buf[kb + d]);
				UNROLLED_END
				x *= pc.scale;
			}
			s_buf[row + j] = x;
		}
	} else if (PASS == 1u) {
		float mx = NEG_INF;
		for (uint j = tid; j < pc.Nk; j += WG) {
			mx = max(mx, s_buf[row + j]);
		}
		mx = block_reduce(mx, true);
		float mu = mx == NEG_INF ? 0.0 : mx;
		float sum = 0.0;
		for (uint j = tid; j < pc.Nk; j += WG) {
			sum += exp(s_buf[row + j] - mu);
		}
		sum = block_reduce(sum, false);
		float inv = sum == 0.0 ? 0.0 : 1.0 / sum;
		for (uint j = tid; j < pc.Nk; j += WG) {
			s_buf[row + j] = exp(s_buf[row + j] - mu) * inv;
		}
		if (tid == 0u) {
			lse_buf[lse_index(b, h, i)] = sum == 0.0 ? NEG_INF : mx + log(sum);
		}
	} else {
		uint n = min(lim, pc.Nk); // P is 0 past the row's key limit
		for (uint d = tid; d < DV; d += WG) {
			float x = 0.0;
			UNROLLED_BEGIN(j, n)
				x += s_buf[row + j] * LOAD(v_buf[v_base(b, j, kvh) + d]);
			UNROLLED_END
			o_buf[o_base(b, i, h) + d] = STORE(x);
		}
	}
}
