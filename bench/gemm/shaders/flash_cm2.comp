#version 450
// flash_cm2: FlashAttention-2 forward on NVIDIA cooperative matrix 2
// (VK_NV_cooperative_matrix2: workgroup-scope matrices, tensor addressing,
// row reductions, per-element operations, accumulator→A conversion).
// fp16 storage only (-DSTORAGE_F16=1, target Vulkan 1.3). Same interface as
// flash and flash_cm: bindings 0 Q, 1 K, 2 V, 3 O (f16), 4 LSE (f32);
// push constants Params; grid (ceil(Nq/BR), Hq, B).
//
// Spec constants: 0 WG (workgroup size, ≤ the device's
// cooperativeMatrixWorkgroupScopeMaxWorkgroupSize), 1 D, 2 DV (padded to
// multiples of 16 inside, zero-filled by the tensor loads' clamp mode),
// 3 BR, 4 BC (the workgroup matrices are BR×DP, DP×BC, BR×BC, BC×DVP,
// BR×DVP; multiples of the device's flexible-dimension granularity, 16 on
// NVIDIA), 5 SUBGROUP (unused).
// Device requirements: cooperativeMatrixWorkgroupScope, FlexibleDimensions,
// Reductions, Conversions, PerElementOperations, TensorAddressing.
//
// Per workgroup: Q (BR×DP) is loaded once through a tensor layout over
// q_buf (rows Nq, row stride q_s, clamp to zero). For each key tile that
// some row sees: Kᵀ (DP×BC) via a transposing tensor view, S = Q·Kᵀ,
// scale into the exp2 domain, mask (causal diagonal or Nk tail) with a
// per-element op, row max by coopMatReduceNV, P = exp2(S − m), row sums by
// reduction, O rescaled by the correction smeared across BR×DVP, P → fp16 A
// matrix, O += P·V. Finally O /= l, LSE written by a per-element op on
// column 0, O stored through a clamped tensor layout (rows ≥ Nq and
// columns ≥ DV are dropped).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#ifndef STORAGE_F16
#error flash_cm2 is fp16-only: compile with -DSTORAGE_F16=1
#endif
#include "params.glsl"
#include "attn_params.glsl"

layout(std430, binding = 0) readonly buffer QBuf { float16_t q_buf[]; };
layout(std430, binding = 1) readonly buffer KBuf { float16_t k_buf[]; };
layout(std430, binding = 2) readonly buffer VBuf { float16_t v_buf[]; };
layout(std430, binding = 3) writeonly buffer OBuf { float16_t o_buf[]; };
layout(std430, binding = 4) writeonly buffer LBuf { float lse_buf[]; };

const uint DP = (D + 15u) / 16u * 16u;
const uint DVP = (DV + 15u) / 16u * 16u;

#define SMAT coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>
#define OMAT coopmat<float, gl_ScopeWorkgroup, BR, DVP, gl_MatrixUseAccumulator>

float maxf(const in float a, const in float b) { return max(a, b); }
float addf(const in float a, const in float b) { return a + b; }
float firstf(const in float a, const in float b) { return a; }

float maskS(const in uint row, const in uint col, const in float e, const in uint r0, const in uint c0) {
	return c0 + col < key_limit(r0 + row) ? e : NEG_INF;
}
float max2(const in uint row, const in uint col, const in float a, const in float b) { return max(a, b); }
float zinf(const in uint row, const in uint col, const in float e) { return e == NEG_INF ? 0.0 : e; }
float ex2(const in uint row, const in uint col, const in float e) { return exp2(e); }
float recip(const in uint row, const in uint col, const in float e) { return e > 0.0 ? 1.0 / e : 0.0; }
float storeLse(const in uint row, const in uint col, const in float l, const in float m, const in uint r0, const in uint b, const in uint h) {
	if (col == 0u && r0 + row < pc.Nq) {
		lse_buf[lse_index(b, h, r0 + row)] = l > 0.0 ? (m + log2(l)) * LN2 : NEG_INF;
	}
	return l;
}

void main() {
	uint h = gl_WorkGroupID.y;
	uint b = gl_WorkGroupID.z;
	seq_begin(b);
	uint kvh = kv_head(h);
	uint r0 = gl_WorkGroupID.x * BR;
	uint rows = min(BR, pc.Nq - r0);
	float sl2 = pc.scale * LOG2E;

	tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tQ = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
	tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tK = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
	tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tV = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
	tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tO = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
	tQ = setTensorLayoutDimensionNV(tQ, pc.Nq, D);
	tK = setTensorLayoutDimensionNV(tK, pc.Nk, D);
	tV = setTensorLayoutDimensionNV(tV, pc.Nk, DV);
	tO = setTensorLayoutDimensionNV(tO, pc.Nq, DV);
	tQ = setTensorLayoutStrideNV(tQ, pc.q_s, 1);
	tK = setTensorLayoutStrideNV(tK, pc.k_s, 1);
	tV = setTensorLayoutStrideNV(tV, pc.v_s, 1);
	tO = setTensorLayoutStrideNV(tO, pc.o_s, 1);
	tensorViewNV<2, false, 1, 0> tT = createTensorViewNV(2, false, 1, 0);

	uint qoff = q_base(b, 0u, h);
	uint koff = k_base(b, 0u, kvh);
	uint voff = v_base(b, 0u, kvh);
	uint ooff = o_base(b, 0u, h);

	coopmat<float16_t, gl_ScopeWorkgroup, BR, DP, gl_MatrixUseA> Qm;
	coopMatLoadTensorNV(Qm, q_buf, qoff, sliceTensorLayoutNV(tQ, r0, BR, 0, DP));

	uint lim_lo = key_limit(r0);
	uint lim_hi = key_limit(r0 + rows - 1u);
	uint ntiles = (lim_hi + BC - 1u) / BC;

	OMAT O = OMAT(0.0);
	SMAT M = SMAT(NEG_INF);
	SMAT L = SMAT(0.0);

	for (uint kt = 0u; kt < ntiles; ++kt) {
		uint c0 = kt * BC;
		coopmat<float16_t, gl_ScopeWorkgroup, DP, BC, gl_MatrixUseB> KT;
		coopMatLoadTensorNV(KT, k_buf, koff, sliceTensorLayoutNV(tK, c0, BC, 0, DP), tT);
		SMAT S = coopMatMulAdd(Qm, KT, SMAT(0.0));
		S = S * sl2;
		if (c0 + BC > lim_lo) {
			coopMatPerElementNV(S, S, maskS, r0, c0);
		}
		SMAT rowmax;
		coopMatReduceNV(rowmax, S, gl_CooperativeMatrixReduceRowNV, maxf);
		SMAT Mold = M;
		coopMatPerElementNV(M, rowmax, max2, Mold);
		SMAT Muse;
		coopMatPerElementNV(Muse, M, zinf);
		SMAT P;
		coopMatPerElementNV(P, S - Muse, ex2);
		SMAT eM;
		coopMatPerElementNV(eM, Mold - Muse, ex2);
		SMAT rowsum;
		coopMatReduceNV(rowsum, P, gl_CooperativeMatrixReduceRowNV, addf);
		L = eM * L + rowsum;
		OMAT eMd;
		coopMatReduceNV(eMd, eM, gl_CooperativeMatrixReduceRowNV, firstf);
		O = O * eMd;
		coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA> PA =
			coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(P);
		coopmat<float16_t, gl_ScopeWorkgroup, BC, DVP, gl_MatrixUseB> Vm;
		coopMatLoadTensorNV(Vm, v_buf, voff, sliceTensorLayoutNV(tV, c0, BC, 0, DVP));
		O = coopMatMulAdd(PA, Vm, O);
	}

	coopMatPerElementNV(L, L, storeLse, M, r0, b, h);
	OMAT Ld;
	coopMatReduceNV(Ld, L, gl_CooperativeMatrixReduceRowNV, firstf);
	coopMatPerElementNV(Ld, Ld, recip);
	O = O * Ld;
	coopmat<float16_t, gl_ScopeWorkgroup, BR, DVP, gl_MatrixUseAccumulator> O16 =
		coopmat<float16_t, gl_ScopeWorkgroup, BR, DVP, gl_MatrixUseAccumulator>(O);
	coopMatStoreTensorNV(O16, o_buf, ooff, sliceTensorLayoutNV(tO, r0, BR, 0, DVP));
}
