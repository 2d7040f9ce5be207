#version 450
// bias_reduce: dBias of a bias broadcast over the batch, the heads or the
// queries (spec.Bias.GradFolds). The dQ kernels store dS of every (b, h,
// i, j) into a float32 scratch of P planes [P, Nq, Nk]: the (b, h) planes
// run in chunks of P consecutive planes in their order (shaders.DSChunks:
// q = b·Hq + h, or q = h·B + b — head-major — where dBias keeps the heads
// and folds the batch; plane q at q mod P), a dQ launch per chunk. After
// each, chunk c's part of this kernel's grid adds the chunk's planes to
// the dBias elements they fold into: each invocation sums one element's
// terms of the chunk in a fixed order (b, then h, then i), starting from
// 0 in the chunk of its first plane and from its float32 partial sum
// (acc) after that, and stores the sum into acc, or into dBias in the
// chunk of its last plane. Every element's terms are so added in the same
// order, whatever P: the result is the same bits every run and for every
// chunking.
//
// Bindings (set 0):
//   0 Ext    uint32, readonly (ext.glsl: dBias strides, words 22–24, a
//            zero stride folds that dimension; P and the order, words
//            25 and 26)
//   1 ds     float32 [P, Nq, Nk], readonly (zero where nothing
//            contributes)
//   2 dBias  float32 or STYPE (EXT bit EXT_ON_BIAS_F32), written
//   3 acc    float32, the partial sums, at dBias's element offsets (read
//            and written only when an element's planes span chunks)
// Push constants: Params (attn_params.glsl; B, Hq, Nq, Nk). Spec
//   constants: 0 WG, 8 EXT.
// Grid: (C·T, rows, Bb·Hb): T = ceil(Nk/WG) workgroups of keys for each of
//   the C chunks; rows 1 when the queries fold, else Nq; Bb, Hb the
//   batches and heads dBias keeps (1 where they fold). Chunk c's part is
//   x = c·T … c·T+T−1 and the kept planes (z) its planes fold into
//   (shaders.DSChunks.ReduceBox).
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
	bool hm = ext_buf[26] != 0u;
	uint heads = gh != 0u ? pc.Hq : 1u;
	uint bb = gl_WorkGroupID.z / heads;
	uint hb = gl_WorkGroupID.z - bb * heads;
	uint ib = gl_WorkGroupID.y;
	// The (b, h, i) this element sums: every one along a folded dimension.
	uint b0 = gb != 0u ? bb : 0u, b1 = gb != 0u ? bb + 1u : pc.B;
	uint h0 = gh != 0u ? hb : 0u, h1 = gh != 0u ? hb + 1u : pc.Hq;
	uint row0 = gr != 0u ? ib : 0u, rows = gr != 0u ? 1u : pc.Nq;
	// … as outer and inner indices of the planes' order (plane o·inner + i;
	// head-major only where one head is summed, so that the order of the
	// terms is b, then h, either way).
	uint inner = hm ? pc.B : pc.Hq;
	uint o0 = hm ? h0 : b0, o1 = hm ? h1 : b1;
	uint i0 = hm ? b0 : h0, i1 = hm ? b1 : h1;
	// This chunk's planes q0 … q1−1, and the element's first and last.
	uint q0 = c * planes, q1 = min(q0 + planes, pc.B * pc.Hq);
	uint first = o0 * inner + i0, last = (o1 - 1u) * inner + i1 - 1u;
	uint x = bb * gb + hb * gh + ib * gr + j;
	float s = 0.0;
	// Per outer index o, its inner indices is … ie−1 in the chunk and each
	// plane's rows, in that order: term t is (is + t / rows, row0 + t %
	// rows), at a fixed stride from the first (a plane's when rows is 1;
	// else a row's, the rows of consecutive planes being consecutive).
	uint stride = rows == 1u ? pc.Nq * pc.Nk : pc.Nk;
	bool any = false;
	for (uint o = max(o0, q0 / inner); o < o1 && o * inner < q1; ++o) {
		uint is = max(i0, max(q0, o * inner) - o * inner);
		uint ie = min(i1, q1 - o * inner);
		if (is >= ie) {
			continue; // (none of the planes of o the element sums)
		}
		if (!any && first < q0) {
			s = acc_buf[x]; // (bound only where an element's planes span chunks)
		}
		any = true;
		uint at = ((o * inner + is - q0) * pc.Nq + row0) * pc.Nk + j;
		UNROLLED_BEGIN(t, (ie - is) * rows)
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
