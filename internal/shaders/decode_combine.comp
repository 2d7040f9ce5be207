#version 450
// decode_combine: merges decode's per-split partial results (splits > 1)
// by their log-sum-exp, in split order (deterministic):
//   M = max_s lse_s,  w_s = 2^(lse_s − M),  O = Σ w_s·O_s / Σ w_s,
//   LSE = ln 2·(M + log2 Σ w_s);  a row no split saw gives O = 0, LSE = −inf.
//
// Bindings (set 0):
//   0 O    [B,Nq,Hq,DV]  STYPE, written (pc.o_*)
//   1 LSE  [B,Hq,Nq]     float32, written
//   2 PART float32, decode's partials (see decode.comp)
// Spec constants: 0 WG, 2 DV (others unused).
// Grid: (Nq, Hq, B): one workgroup per output row; thread t computes
//   columns t, t+WG, …
#extension GL_GOOGLE_include_directive : require
#include "params.glsl"
#include "kv_params.glsl"

OPERAND(0, 0, OBuf, o, writeonly)
layout(std430, binding = 1) writeonly buffer LBuf { float lse_buf[]; };
layout(std430, binding = 2) readonly buffer PBuf { float part[]; };

void main() {
	const uint qi = gl_WorkGroupID.x;
	const uint h = gl_WorkGroupID.y;
	const uint b = gl_WorkGroupID.z;
	const uint tid = gl_LocalInvocationID.x;
	const uint rowsAll = pc.B * pc.Hq * pc.Nq;
	const uint row = (b * pc.Hq + h) * pc.Nq + qi;
	const uint lbase = pc.splits * rowsAll * DV;

	float mx = NEG_INF;
	for (uint s = 0u; s < pc.splits; ++s) {
		mx = max(mx, part[lbase + s * rowsAll + row]);
	}
	float muse = mx == NEG_INF ? 0.0 : mx;
	float lsum = 0.0;
	for (uint s = 0u; s < pc.splits; ++s) {
		lsum += exp2(part[lbase + s * rowsAll + row] - muse);
	}
	float inv = lsum == 0.0 ? 0.0 : 1.0 / lsum;
	OFFSET ob = WIDE(b) * pc.o_b + WIDE(qi) * pc.o_s + WIDE(h) * pc.o_h;
	for (uint dv = tid; dv < DV; dv += WG) {
		float x = 0.0;
		for (uint s = 0u; s < pc.splits; ++s) {
			float w = exp2(part[lbase + s * rowsAll + row] - muse);
			// An empty split (w = 0) wrote O_s = 0: it adds nothing.
			x = fma(w, part[(s * rowsAll + row) * DV + dv], x);
		}
		EL(o, ob + dv) = STORE(x * inv);
	}
	if (tid == 0u) {
		lse_buf[row] = lsum == 0.0 ? NEG_INF : (mx + log2(lsum)) * LN2;
	}
}
