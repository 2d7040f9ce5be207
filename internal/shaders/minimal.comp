#version 450
// minimal: a readable FlashAttention-1-style fused forward (educational).
//
// Bindings (set 0): 0 Q, 1 K, 2 V, 3 O (STYPE), 4 LSE (float32) — as flash.
// Spec constants: 0 WG, 1 D, 2 DV, 3 BR, 4 BC (5 SUBGROUP unused).
// Grid: (ceil(Nq/BR), Hq, B); requires WG ≥ BR (threads 0 … BR−1 each own
//   one query row; all threads help load the K/V tiles).
// Shared memory (bytes): 4·(BC·(D + DV) + BR·DV)  = shaders.MinimalSharedBytes.
//
// Each thread keeps its output row in shared memory (sO, only ever touched
// by its owner; a private o[DV] array made lavapipe return NaN at
// D = DV = 256 and would spill on GPUs), reads its query row from global
// memory (caches serve the repeats) and, for every tile of BC keys:
// computes the tile's scores,
// the tile's max and the new running max, rescales its running sum and
// output once, then adds the tile's exp(s − m)·v.
#extension GL_GOOGLE_include_directive : require
#include "params.glsl"
#include "attn_params.glsl"

layout(std430, binding = 0) readonly buffer QBuf { STYPE q_buf[]; };
layout(std430, binding = 1) readonly buffer KBuf { STYPE k_buf[]; };
layout(std430, binding = 2) readonly buffer VBuf { STYPE v_buf[]; };
layout(std430, binding = 3) writeonly buffer OBuf { STYPE o_buf[]; };
layout(std430, binding = 4) writeonly buffer LBuf { float lse_buf[]; };

shared float sK[BC * D];
shared float sV[BC * DV];
shared float sO[BR * DV]; // row tid of the tile at sO[tid·DV …]

void main() {
	uint tid = gl_LocalInvocationIndex;
	uint h = gl_WorkGroupID.y;
	uint b = gl_WorkGroupID.z;
	seq_begin(b);
	uint kvh = kv_head(h);
	uint i = gl_WorkGroupID.x * BR + tid; // this thread's query row
	bool live = tid < BR && i < pc.Nq;

	uint ob = tid * DV; // this thread's output row in sO
	if (tid < BR) {
		UNROLLED_BEGIN(d, DV)
			sO[ob + d] = 0.0;
		UNROLLED_END
	}
	uint lim = live ? key_limit(i) : 0u;
	uint qb = live ? q_base(b, i, h) : 0u;
	float m = NEG_INF; // running max of the scores seen
	float l = 0.0;     // running sum of exp(score − m)

	// The workgroup walks the keys its last row can see (causal skipping).
	uint last = min(gl_WorkGroupID.x * BR + BR, pc.Nq) - 1u;
	uint nkeys = key_limit(last);
	for (uint c0 = 0u; c0 < nkeys; c0 += BC) {
		uint cols = min(BC, pc.Nk - c0);
		barrier();
		STRIDED_BEGIN(e, BC * D)
			uint c = e / D;
			sK[e] = c < cols ? LOAD(k_buf[k_base(b, c0 + c, kvh) + e - c * D]) : 0.0;
		STRIDED_END
		STRIDED_BEGIN(e, BC * DV)
			uint c = e / DV;
			sV[e] = c < cols ? LOAD(v_buf[v_base(b, c0 + c, kvh) + e - c * DV]) : 0.0;
		STRIDED_END
		barrier();
		if (!live) {
			continue;
		}
		uint n = lim > c0 ? min(lim - c0, cols) : 0u; // keys of this tile the row sees
		if (n == 0u) {
			continue;
		}
		// 1. scores and the tile's max
		float sc[BC];
		float mt = NEG_INF;
		for (uint c = 0u; c < n; ++c) {
			float x = 0.0;
			UNROLLED_BEGIN(d, D)
				x += LOAD(q_buf[qb + d]) * sK[c * D + d];
			UNROLLED_END
			x *= pc.scale;
			sc[c] = x;
			mt = max(mt, x);
		}
		// 2. rescale what was accumulated against the old max
		float mnew = max(m, mt);
		// While every score is −inf, exponentiate against 0: exp(−inf − 0)
		// = 0, never exp(−inf + inf) = NaN (a NaN score still gives NaN).
		float muse = mnew == NEG_INF ? 0.0 : mnew;
		float alpha = exp(m - muse); // exp(−inf) = 0 on the first tile
		l *= alpha;
		UNROLLED_BEGIN(d, DV)
			sO[ob + d] *= alpha;
		UNROLLED_END
		m = mnew;
		// 3. add this tile
		for (uint c = 0u; c < n; ++c) {
			float p = exp(sc[c] - muse);
			l += p;
			UNROLLED_BEGIN(d, DV)
				sO[ob + d] += p * sV[c * DV + d];
			UNROLLED_END
		}
	}

	if (live) {
		float inv = l == 0.0 ? 0.0 : 1.0 / l; // a row that saw no key: O = 0
		UNROLLED_BEGIN(d, DV)
			o_buf[o_base(b, i, h) + d] = STORE(sO[ob + d] * inv);
		UNROLLED_END
		lse_buf[lse_index(b, h, i)] = l == 0.0 ? NEG_INF : m + log(l);
	}
}
