#version 450
// bwd_pre: the backward's preprocessing, D = rowsum(dO ∘ O) per query row,
// in compensated fp32 arithmetic: the gradients take dP − D, which cancels
// where a row's probability sits on few keys, and an error of D is
// amplified there by the cancellation; each product's rounding error (an
// FMA's residual, where the device fuses it) and each addition's (Knuth's
// two-sum, lanes and butterfly alike) is carried beside the sum and added
// once at the end — D to within about one rounding of itself, where a
// plain fp32 sum errs by rounding of its terms Σ|dO·O|, which random
// signs make about √DV times |D|.
//
// Bindings (set 0):
//   0 O  [B,Nq,Hq,DV] STYPE, readonly (pc.o_* strides)
//   1 dO [B,Nq,Hq,DV] STYPE, readonly (O's strides)
//   2 D  [B,Hq,Nq]    float32, written ([Hq,Tq] when packed)
//   3 Ext             uint32, readonly (ext.glsl; read when EXT = 1: only
//                     packed sequences matter here)
// ADDRESSED build: O, dO at pc.addr[0], pc.addr[1] instead of bindings 0, 1
//   (params.glsl, Operands); D stays binding 2.
// Spec constants: 0 WG, 2 DV, 3 BR (rows per workgroup), 5 SUBGROUP, 8 EXT;
//   TPR = WG/BR threads share a row and must be a power of two ≤ SUBGROUP
//   (rows are reduced with subgroupShuffleXor); WG a multiple of SUBGROUP.
// Grid: (ceil(Nq/BR), Hq, B).
// Shared memory: none.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define EXT_BINDING 3
#include "params.glsl"
#include "attn_params.glsl"
#include "ext.glsl"

OPERAND(0, 0, OBuf, o, readonly)
OPERAND(1, 1, dOBuf, do, readonly)
layout(std430, binding = 2) writeonly buffer DBuf { float d_buf[]; };

const uint TPR = WG / BR;

// sum2 adds b to the compensated sum (s, c): s += b, c += the rounding
// error of that addition (Knuth's two-sum; precise, so never reassociated).
void sum2(inout float s, inout float c, float b) {
	precise float t = s + b;
	precise float bv = t - s;
	precise float e = (s - (t - bv)) + (b - bv);
	s = t;
	c += e;
}

void main() {
	uint tid = thread_index();
	uint lane = tid % TPR;
	uint h = gl_WorkGroupID.y;
	uint b = gl_WorkGroupID.z;
	ext_begin(b);
	uint i = gl_WorkGroupID.x * BR + tid / TPR;
	float x = 0.0; // the sum …
	float c = 0.0; // … and its carried rounding errors
	if (i < seq_nq) {
		OFFSET ob = o_base(b, i, h);
		[[unroll]] for (uint d0 = 0u; d0 < DV; d0 += TPR) {
			uint d = d0 + lane;
			if (d < DV) {
				float g = LOAD(EL(do, ob + d));
				float y = LOAD(EL(o, ob + d));
				precise float p = g * y;
				precise float pe = fma(g, y, -p);
				sum2(x, c, p);
				c += pe;
			}
		}
	}
	[[unroll]] for (uint m = 1u; m < TPR; m <<= 1u) {
		float xo = subgroupShuffleXor(x, m);
		float co = subgroupShuffleXor(c, m);
		sum2(x, c, xo);
		c += co;
	}
	if (i < seq_nq && lane == 0u) {
		// (An Inf or NaN among the terms makes x Inf or NaN and the
		// carried errors NaN: D is x then, as the plain sum's.)
		d_buf[lse_index(b, h, i)] = isinf(x) || isnan(x) ? x : x + c;
	}
}
