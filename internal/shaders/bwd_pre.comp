#version 450
// bwd_pre: the backward's preprocessing, D = rowsum(dO ∘ O) per query row.
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

void main() {
	uint tid = thread_index();
	uint lane = tid % TPR;
	uint h = gl_WorkGroupID.y;
	uint b = gl_WorkGroupID.z;
	ext_begin(b);
	uint i = gl_WorkGroupID.x * BR + tid / TPR;
	float x = 0.0;
	if (i < seq_nq) {
		OFFSET ob = o_base(b, i, h);
		[[unroll]] for (uint d0 = 0u; d0 < DV; d0 += TPR) {
			uint d = d0 + lane;
			if (d < DV) {
				x += LOAD(EL(do, ob + d)) * LOAD(EL(o, ob + d));
			}
		}
	}
	BUTTERFLY(add2, x, TPR)
	if (i < seq_nq && lane == 0u) {
		d_buf[lse_index(b, h, i)] = x;
	}
}
