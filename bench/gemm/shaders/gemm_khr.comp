#version 450
// gemm_khr: C[M×N] = A[M×K]·B[K×N], fp16 inputs (row-major), fp32
// accumulators, fp32 C (row-major), on VK_KHR_cooperative_matrix
// (subgroup scope) with shared-memory staging. Benchmark kernel (bench/gemm):
// M, N, K must be multiples of BM, BN, BK (no tails).
//
// Workgroup tile BM×BN, WM×WN subgroups, each owning a (BM/WM)×(BN/WN)
// block of CM_M×CM_N accumulators. Per BK step the workgroup copies the A
// tile (BM×BK) and the B tile (BK×BN) into shared memory with 16-byte loads
// and stores; rows are padded by PAD×16 bytes against bank conflicts.
// STAGES 1: load → barrier → compute → barrier. STAGES 2: two shared
// buffers; the next tile is loaded into registers while the current one is
// multiplied, then stored into the other buffer (one barrier per step).
//
// Bindings: 0 A (uvec4 view of fp16), 1 B (same), 2 C (float).
// Push: M, N, K. Grid: (N/BN, M/BM, 1); workgroup WM·WN·SUBGROUP.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;
layout(constant_id = 4) const uint WM = 2;
layout(constant_id = 5) const uint WN = 2;
layout(constant_id = 6) const uint CM_M = 16;
layout(constant_id = 7) const uint CM_N = 16;
layout(constant_id = 8) const uint CM_K = 16;
layout(constant_id = 9) const uint STAGES = 2;
layout(constant_id = 10) const uint PAD = 1;

layout(push_constant) uniform P { uint M; uint N; uint K; } p;
layout(std430, binding = 0) readonly buffer ABuf { uvec4 a_vec[]; };
layout(std430, binding = 1) readonly buffer BBuf { uvec4 b_vec[]; };
layout(std430, binding = 2) writeonly buffer CBuf { float c_buf[]; };

const uint WG = gl_WorkGroupSize.x;
const uint LDA4 = BK / 8u + PAD;
const uint LDB4 = BN / 8u + PAD;
const uint A_T = BM * LDA4;
const uint B_T = BK * LDB4;
const uint STAGE4 = A_T + B_T;
shared uvec4 sm[STAGES * STAGE4];

const uint ACH = BM * BK / 8u; // 16-byte chunks of an A tile
const uint BCH = BK * BN / 8u;
const uint NRA = (ACH + WG - 1u) / WG;
const uint NRB = (BCH + WG - 1u) / WG;
const uint TM = BM / WM / CM_M;
const uint TN = BN / WN / CM_N;

#define ACC coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
#define MATA coopmat<float16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA>
#define MATB coopmat<float16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB>

uvec4 ra[NRA];
uvec4 rb[NRB];
uint m0, n0, tid;

void fetch(uint k0) {
	[[unroll]] for (uint i = 0u; i < NRA; ++i) {
		uint e = tid + i * WG;
		uint r = e / (BK / 8u);
		uint c = e % (BK / 8u);
		if (e < ACH) {
			ra[i] = a_vec[(m0 + r) * (p.K / 8u) + k0 / 8u + c];
		}
	}
	[[unroll]] for (uint i = 0u; i < NRB; ++i) {
		uint e = tid + i * WG;
		uint r = e / (BN / 8u);
		uint c = e % (BN / 8u);
		if (e < BCH) {
			rb[i] = b_vec[(k0 + r) * (p.N / 8u) + n0 / 8u + c];
		}
	}
}

void stash(uint s) {
	[[unroll]] for (uint i = 0u; i < NRA; ++i) {
		uint e = tid + i * WG;
		uint r = e / (BK / 8u);
		uint c = e % (BK / 8u);
		if (e < ACH) {
			sm[s * STAGE4 + r * LDA4 + c] = ra[i];
		}
	}
	[[unroll]] for (uint i = 0u; i < NRB; ++i) {
		uint e = tid + i * WG;
		uint r = e / (BN / 8u);
		uint c = e % (BN / 8u);
		if (e < BCH) {
			sm[s * STAGE4 + A_T + r * LDB4 + c] = rb[i];
		}
	}
}

void main() {
	tid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
	uint sg = gl_SubgroupID;
	m0 = gl_WorkGroupID.y * BM;
	n0 = gl_WorkGroupID.x * BN;
	uint sm0 = (sg % WM) * (BM / WM);
	uint sn0 = (sg / WM) * (BN / WN);

	ACC acc[TM * TN];
	[[unroll]] for (uint i = 0u; i < TM * TN; ++i) {
		acc[i] = ACC(0.0);
	}
	uint nk = p.K / BK;
	if (STAGES >= 2u) {
		fetch(0u);
		stash(0u);
		barrier();
	}
	for (uint kt = 0u; kt < nk; ++kt) {
		uint s = 0u;
		if (STAGES >= 2u) {
			s = kt & 1u;
			if (kt + 1u < nk) {
				fetch((kt + 1u) * BK);
			}
		} else {
			fetch(kt * BK);
			stash(0u);
			barrier();
		}
		[[unroll]] for (uint kk = 0u; kk < BK / CM_K; ++kk) {
			MATA a[TM];
			MATB b[TN];
			[[unroll]] for (uint i = 0u; i < TM; ++i) {
				coopMatLoad(a[i], sm, s * STAGE4 + (sm0 + i * CM_M) * LDA4 + kk * (CM_K / 8u), LDA4, gl_CooperativeMatrixLayoutRowMajor);
			}
			[[unroll]] for (uint j = 0u; j < TN; ++j) {
				coopMatLoad(b[j], sm, s * STAGE4 + A_T + (kk * CM_K) * LDB4 + (sn0 + j * CM_N) / 8u, LDB4, gl_CooperativeMatrixLayoutRowMajor);
			}
			[[unroll]] for (uint i = 0u; i < TM; ++i) {
				[[unroll]] for (uint j = 0u; j < TN; ++j) {
					acc[i * TN + j] = coopMatMulAdd(a[i], b[j], acc[i * TN + j]);
				}
			}
		}
		if (STAGES >= 2u) {
			if (kt + 1u < nk) {
				stash(s ^ 1u);
			}
		}
		barrier();
	}
	[[unroll]] for (uint i = 0u; i < TM; ++i) {
		[[unroll]] for (uint j = 0u; j < TN; ++j) {
			coopMatStore(acc[i * TN + j], c_buf, (m0 + sm0 + i * CM_M) * p.N + n0 + sn0 + j * CM_N, p.N, gl_CooperativeMatrixLayoutRowMajor);
		}
	}
}
