#version 450
// bias_summary: the per-block summary of an additive bias (spec.Bias)
// that the attention kernels read to skip the tiles it hides (ext.glsl's
// bias_next_key_tile, bias_next_query_tile): one bit per block of 16
// query rows and 16 keys, set when some element of the block is not −Inf
// (NaN counts as not).
//
// Bindings (set 0):
//   0 Ext      uint32, readonly (ext.glsl: bias strides, words 13–15;
//              summary strides, words 19–21)
//   1 bias     float32 or STYPE (EXT bit EXT_ON_BIAS_F32), readonly
//   2 summary  uint32, written: word w of row block rb of plane (b, h) at
//              b·word19 + h·word20 + rb·word21 + w, bit k for key block
//              32w + k (shaders.BiasSumWords)
// Push constants: Params (attn_params.glsl; B, Hq, Nq, Nk). Spec
//   constants: 0 WG (a multiple of 32), 8 EXT.
// Grid: (words per row block, row blocks, Bb·Hb planes), Bb and Hb the
//   bias's batches and heads (1 where it broadcasts: a zero stride);
//   workgroup (w, rb, z) computes one word: 16 rows × 512 keys.
// Shared memory: one word.
#extension GL_GOOGLE_include_directive : require
#define EXT_BINDING 0
#include "params.glsl"
#include "attn_params.glsl"
#include "ext.glsl"

layout(std430, binding = 1) readonly buffer BiasF32 { float bias_f32[]; };
layout(std430, binding = 1) readonly buffer BiasST { STYPE bias_st[]; };
layout(std430, binding = 2) writeonly buffer SumBuf { uint sum_buf[]; };

shared uint sWord;

void main() {
	uint tid = gl_LocalInvocationIndex;
	uint w = gl_WorkGroupID.x;
	uint rb = gl_WorkGroupID.y;
	uint heads = ext_buf[14] != 0u ? pc.Hq : 1u;
	uint bb = gl_WorkGroupID.z / heads;
	uint hb = gl_WorkGroupID.z - bb * heads;
	uint nrows = ext_buf[15] != 0u ? pc.Nq : 1u;
	if (tid == 0u) {
		sWord = 0u;
	}
	barrier();
	// Thread tid reads key block kb = 32w + tid mod 32, rows tid/32,
	// tid/32 + WG/32, … of the row block.
	uint kb = w * 32u + tid % 32u;
	uint k0 = kb * 16u;
	uint base = bb * ext_buf[13] + hb * ext_buf[14];
	bool live = false;
	if (k0 < pc.Nk) {
		uint kn = min(16u, pc.Nk - k0);
		for (uint r = rb * 16u + tid / 32u; r < min(rb * 16u + 16u, nrows) && !live; r += WG / 32u) {
			uint x0 = base + r * ext_buf[15] + k0;
			for (uint c = 0u; c < kn; ++c) {
				float x = (EXT & EXT_ON_BIAS_F32) != 0u ? bias_f32[x0 + c] : LOAD(bias_st[x0 + c]);
				live = live || x != NEG_INF;
			}
		}
	}
	if (live) {
		atomicOr(sWord, 1u << (kb % 32u));
	}
	barrier();
	if (tid == 0u) {
		sum_buf[bb * ext_buf[19] + hb * ext_buf[20] + rb * ext_buf[21] + w] = sWord;
	}
}
