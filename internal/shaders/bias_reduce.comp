#version 450
// bias_reduce: dBias of a bias broadcast over the batch, the heads or the
// queries (spec.Bias.GradFolds). The dQ kernels store dS of every (b, h,
// i, j) into a float32 scratch of P planes [P, Nq, Nk]: the (b, h) planes
// q = b·Hq + h run in chunks of P consecutive planes (shaders.DSChunks;
// plane q at q mod P), a dQ launch per chunk. After each, chunk c's part
// of this kernel's grid adds the chunk's planes to the dBias elements they
// fold into: each invocation sums one element's terms of the chunk in a
// fixed order (b, then h, then i), starting from 0 in the chunk of its
// first plane and from its float32 partial sum (acc) after that, and
// stores the sum into acc, or into dBias in the chunk of its last plane.
// Every element's terms are so added in the same order, whatever P: the
// result is the same bits every run and for every chunking.
//
// Bindings (set 0):
//   0 Ext    uint32, readonly (ext.glsl: dBias strides, words 22–24, a
//            zero stride folds that dimension; P, word 25)
//   1 ds     float32 [P, Nq, Nk], readonly (zero where nothing
//            contributes)
//   2 dBias  float32 or STYPE (EXT bit EXT_ON_BIAS_F32), written
//   3 acc    float32, the partial sums, at dBias's element offsets (read
//            and written only when an element's planes span chunks)
// Push constants: Params (attn_params.glsl; B, Hq, Nq, Nk). Spec
//   constants: 0 WG, 8 EXT.
// Grid: (C·T, rows, Bb·Hb): T = ceil(Nk/WG) workgroups of keys for each of
//   the C chunks (chunk c's part is x = c·T … c·T+T−1); rows 1 when the
//   queries fold, else Nq; Bb, Hb the batches and heads dBias keeps (1
//   where they fold).
// Shared memory: none.
#extension GL_GOOGLE_include_directive : require
#define EXT_BINDING 0
#include "params.glsl"
#include "attn_params.glsl"
#include "ext.glsl"

layout(std430, binding = 1) readonly buffer DSBuf { float ds_buf[]; };
layout(std430, binding = 2) writeonly buffer DBiasF32 { float dbias_f32[]; };
layout(std430, binding = 2) writeonly buffer DBiasST { STYPE dbias_st[]; };
layout(std430, binding = 3) buffer AccBuf { float acc_buf[]; };

void main() {
	uint tiles = (pc.Nk + WG - 1u) / WG;
	uint c = gl_WorkGroupID.x / tiles;
	uint j = (gl_WorkGroupID.x - c * tiles) * WG + gl_LocalInvocationID.x;
	if (j >= pc.Nk) {
		return;
	}
	uint gb = ext_buf[22], gh = ext_buf[23], gr = ext_buf[24], planes = ext_buf[25];
	uint heads = gh != 0u ? pc.Hq : 1u;
	uint bb = gl_WorkGroupID.z / heads;
	uint hb = gl_WorkGroupID.z - bb * heads;
	uint ib = gl_WorkGroupID.y;
	// The (b, h, i) this element sums: every one along a folded dimension.
	uint b0 = gb != 0u ? bb : 0u, b1 = gb != 0u ? bb + 1u : pc.B;
	uint h0 = gh != 0u ? hb : 0u, h1 = gh != 0u ? hb + 1u : pc.Hq;
	uint row0 = gr != 0u ? ib : 0u, rows = gr != 0u ? 1u : pc.Nq;
	// This chunk's planes q0 … q1−1, and the element's first and last.
	uint q0 = c * planes, q1 = min(q0 + planes, pc.B * pc.Hq);
	uint first = b0 * pc.Hq + h0, last = (b1 - 1u) * pc.Hq + h1 - 1u;
	uint x = bb * gb + hb * gh + ib * gr + j;
	float s = 0.0;
	if (first < q0) {
		s = acc_buf[x]; // (bound only when some element's planes span chunks)
	}
	// Per sequence b, its heads hs … he−1 of the chunk and each head's
	// rows, in that order: term t is (hs + t / rows, row0 + t % rows), at a
	// fixed stride from the first (a plane's when rows is 1; else a row's,
	// the rows of consecutive planes being consecutive).
	uint stride = rows == 1u ? pc.Nq * pc.Nk : pc.Nk;
	bool any = false;
	for (uint b = max(b0, q0 / pc.Hq); b < b1 && b * pc.Hq < q1; ++b) {
		uint hs = max(h0, max(q0, b * pc.Hq) - b * pc.Hq);
		uint he = min(h1, q1 - b * pc.Hq);
		if (hs >= he) {
			continue; // (none of the heads of b the element sums)
		}
		any = true;
		uint at = ((b * pc.Hq + hs - q0) * pc.Nq + row0) * pc.Nk + j;
		UNROLLED_BEGIN(t, (he - hs) * rows)
			s += ds_buf[at + t * stride];
		UNROLLED_END
	}
	if (!any) {
		return; // none of the element's planes is in this chunk
	}
	if (last >= q1) {
		acc_buf[x] = s;
	} else if ((EXT & EXT_ON_BIAS_F32) != 0u) {
		dbias_f32[x] = s;
	} else {
		dbias_st[x] = STORE(s);
	}
}
