#version 450
// kv_append: copies the new_rows rows of new K and V of every sequence
// into the cache at the sequence's length (bit for bit).
//
// Bindings (set 0):
//   0 NEWK [B,new_rows,Hkv,D]  STYPE, readonly (pc.nk_*)
//   1 NEWV [B,new_rows,Hkv,DV] STYPE, readonly (pc.nv_*)
//   2 K    cache               STYPE, written  (pc.k_*)
//   3 V    cache               STYPE, written  (pc.v_*)
//   4 META uint32 (kv_params.glsl)
// Spec constants: 0 WG, 1 D, 2 DV (others unused).
// Grid: (new_rows, Hkv, B): one workgroup per appended row and head.
#extension GL_GOOGLE_include_directive : require
#include "params.glsl"
#include "kv_params.glsl"

OPERAND(0, 0, NKBuf, nk, readonly)
OPERAND(1, 1, NVBuf, nv, readonly)
OPERAND(2, 2, KBuf, k, writeonly)
OPERAND(3, 3, VBuf, v, writeonly)
layout(std430, binding = 4) readonly buffer MBuf { uint meta[]; };

void main() {
	const uint t = gl_WorkGroupID.x;
	const uint h = gl_WorkGroupID.y;
	const uint b = gl_WorkGroupID.z;
	const uint tid = gl_LocalInvocationID.x;
	uvec2 pr = CACHE_ROW(b, meta[b] + t);
	OFFSET src = WIDE(b) * pc.nk_b + WIDE(t) * pc.nk_s + WIDE(h) * pc.nk_h;
	OFFSET dst = WIDE(pr.x) * pc.k_b + WIDE(pr.y) * pc.k_s + WIDE(h) * pc.k_h;
	for (uint d = tid; d < D; d += WG) {
		EL(k, dst + d) = EL(nk, src + d);
	}
	src = WIDE(b) * pc.nv_b + WIDE(t) * pc.nv_s + WIDE(h) * pc.nv_h;
	dst = WIDE(pr.x) * pc.v_b + WIDE(pr.y) * pc.v_s + WIDE(h) * pc.v_h;
	for (uint d = tid; d < DV; d += WG) {
		EL(v, dst + d) = EL(nv, src + d);
	}
}
