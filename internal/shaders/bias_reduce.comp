#version 450
// bias_reduce: dBias of a bias broadcast over the batch, the heads or the
// queries (spec.Bias.GradFolds): the dQ kernels store dS of every (b, h,
// i, j) into a float32 [B, Hq, Nq, Nk] scratch; each invocation here sums
// one dBias element's terms in a fixed order (b, then h, then i: the
// result is the same bits every run) and stores it.
//
// Bindings (set 0):
//   0 Ext    uint32, readonly (ext.glsl: dBias strides, words 22–24; a
//            zero stride folds that dimension)
//   1 acc    float32 [B, Hq, Nq, Nk], readonly (zero where nothing
//            contributes)
//   2 dBias  float32 or STYPE (EXT bit EXT_ON_BIAS_F32), written
// Push constants: Params (attn_params.glsl; B, Hq, Nq, Nk). Spec
//   constants: 0 WG, 8 EXT.
// Grid: (ceil(Nk/WG), rows, Bb·Hb): rows 1 when the queries fold, else
//   Nq; Bb, Hb the batches and heads dBias keeps (1 where they fold).
// Shared memory: none.
#extension GL_GOOGLE_include_directive : require
#define EXT_BINDING 0
#include "params.glsl"
#include "attn_params.glsl"
#include "ext.glsl"

layout(std430, binding = 1) readonly buffer AccBuf { float acc_buf[]; };
layout(std430, binding = 2) writeonly buffer DBiasF32 { float dbias_f32[]; };
layout(std430, binding = 2) writeonly buffer DBiasST { STYPE dbias_st[]; };

void main() {
	uint j = gl_GlobalInvocationID.x;
	if (j >= pc.Nk) {
		return;
	}
	uint gb = ext_buf[22], gh = ext_buf[23], gr = ext_buf[24];
	uint heads = gh != 0u ? pc.Hq : 1u;
	uint bb = gl_WorkGroupID.z / heads;
	uint hb = gl_WorkGroupID.z - bb * heads;
	uint ib = gl_WorkGroupID.y;
	// The (b, h, i) this element sums: every one along a folded dimension.
	uint b0 = gb != 0u ? bb : 0u, b1 = gb != 0u ? bb + 1u : pc.B;
	uint h0 = gh != 0u ? hb : 0u, h1 = gh != 0u ? hb + 1u : pc.Hq;
	uint row0 = gr != 0u ? ib : 0u, rows = gr != 0u ? 1u : pc.Nq;
	float s = 0.0;
	for (uint b = b0; b < b1; ++b) {
		for (uint h = h0; h < h1; ++h) {
			uint row = (b * pc.Hq + h) * pc.Nq + row0;
			UNROLLED_BEGIN(i, rows)
				s += acc_buf[(row + i) * pc.Nk + j];
			UNROLLED_END
		}
	}
	uint x = bb * gb + hb * gh + ib * gr + j;
	if ((EXT & EXT_ON_BIAS_F32) != 0u) {
		dbias_f32[x] = s;
	} else {
		dbias_st[x] = STORE(s);
	}
}
