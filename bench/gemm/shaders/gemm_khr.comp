#version 450
// gemm_khr: C[M×N] = A[M×K]·B[K×N], fp16 inputs (row-major), fp32
// accumulators, fp32 C (row-major), on VK_KHR_cooperative_matrix
// (subgroup scope) with shared-memory staging. Benchmark kernel (bench/gemm):
// M, N, K must be multiples of BM, BN, BK (no tails; K/BK even with PF 2).
//
// Workgroup tile BM×BN, WM×WN subgroups, each owning a (BM/WM)×(BN/WN)
// block of CM_M×CM_N accumulators. Per BK step the workgroup copies the A
// tile (BM×BK) and the B tile (BK×BN) into shared memory with 16-byte loads
// and stores; rows are padded by PAD×16 bytes against bank conflicts.
// The pipeline is STAGES shared buffers and PF register sets:
//   STAGES 1, PF 0: load → barrier → compute → barrier.
//   STAGES 1, PF 1: the next tile is loaded into registers while the
//     current one is multiplied; barrier, store, barrier (one buffer: half
//     the shared memory of STAGES 2, two barriers a step).
//   STAGES 2, PF 1: two shared buffers; the next tile is loaded into
//     registers while the current one is multiplied, then stored into the
//     other buffer (one barrier a step).
//   STAGES 2, PF 2: as PF 1 with two register sets: the loads are issued
//     two steps ahead of their use, so a step's multiply covers two steps'
//     worth of their latency.
// PROBE (timing probes, not GEMMs: their C is wrong by design) takes
// tile 0 into shared buffer 0 once and then, for every step: 1 only the
// MMAs, on fragments loaded once (the matrix units' rate through this
// API); 2 the fragment loads and MMAs of COMPUTE (no barrier, no global
// load); 3 the same with a barrier a step; 4 STAGES 2, PF 1's whole step
// with every step's loads from tile 0's addresses (the device's L1 keeps
// them: the staging's instructions without the L2's traffic).
// DIRECT 1 (a GEMM, checked) stages nothing: every subgroup loads its A
// and B fragments straight from the buffers (the device's caches share
// them between subgroups), the next CM_K step's fragments while the
// current step's MMAs run; no shared memory, no barrier. BK plays no part.
// RASTER G > 0 orders the workgroups in bands of G tile rows, the tiles of
// a band column by column, so that the workgroups running at one time read
// G tile rows of A and a few tile columns of B (0: row by row).
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
layout(constant_id = 11) const uint PF = 1;
layout(constant_id = 12) const uint RASTER = 0;
layout(constant_id = 13) const uint PROBE = 0;
layout(constant_id = 14) const uint DIRECT = 0;

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
shared uvec4 sm[DIRECT != 0u ? 1u : STAGES * STAGE4];

const uint ACH = BM * BK / 8u; // 16-byte chunks of an A tile
const uint BCH = BK * BN / 8u;
const uint NRA = (ACH + WG - 1u) / WG;
const uint NRB = (BCH + WG - 1u) / WG;
const uint TM = BM / WM / CM_M;
const uint TN = BN / WN / CM_N;

#define ACC coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
#define MATA coopmat<float16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA>
#define MATB coopmat<float16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB>

// Register sets 0 and 1 of the tiles in flight (set 1 used with PF 2
// only; unused, the compiler drops it).
uvec4 ra0[NRA];
uvec4 rb0[NRB];
uvec4 ra1[NRA];
uvec4 rb1[NRB];
uint m0, n0, tid;

// fetch loads the A and B tiles of step k0/BK into register set `set`
// (a constant at every call).
void fetch(uint k0, uint set) {
	[[unroll]] for (uint i = 0u; i < NRA; ++i) {
		uint e = tid + i * WG;
		uint r = e / (BK / 8u);
		uint c = e % (BK / 8u);
		if (e < ACH) {
			uvec4 w = a_vec[(m0 + r) * (p.K / 8u) + k0 / 8u + c];
			if (set == 0u) {
				ra0[i] = w;
			} else {
				ra1[i] = w;
			}
		}
	}
	[[unroll]] for (uint i = 0u; i < NRB; ++i) {
		uint e = tid + i * WG;
		uint r = e / (BN / 8u);
		uint c = e % (BN / 8u);
		if (e < BCH) {
			uvec4 w = b_vec[(k0 + r) * (p.N / 8u) + n0 / 8u + c];
			if (set == 0u) {
				rb0[i] = w;
			} else {
				rb1[i] = w;
			}
		}
	}
}

// stash stores register set `set` into shared buffer s.
void stash(uint s, uint set) {
	[[unroll]] for (uint i = 0u; i < NRA; ++i) {
		uint e = tid + i * WG;
		uint r = e / (BK / 8u);
		uint c = e % (BK / 8u);
		if (e < ACH) {
			sm[s * STAGE4 + r * LDA4 + c] = set == 0u ? ra0[i] : ra1[i];
		}
	}
	[[unroll]] for (uint i = 0u; i < NRB; ++i) {
		uint e = tid + i * WG;
		uint r = e / (BN / 8u);
		uint c = e % (BN / 8u);
		if (e < BCH) {
			sm[s * STAGE4 + A_T + r * LDB4 + c] = set == 0u ? rb0[i] : rb1[i];
		}
	}
}

// COMPUTE(s): acc += the A and B tiles in shared buffer s.
#define COMPUTE(s) \
	[[unroll]] for (uint kk = 0u; kk < BK / CM_K; ++kk) { \
		MATA a[TM]; \
		MATB b[TN]; \
		[[unroll]] for (uint i = 0u; i < TM; ++i) { \
			coopMatLoad(a[i], sm, (s) * STAGE4 + (sm0 + i * CM_M) * LDA4 + kk * (CM_K / 8u), LDA4, gl_CooperativeMatrixLayoutRowMajor); \
		} \
		[[unroll]] for (uint j = 0u; j < TN; ++j) { \
			coopMatLoad(b[j], sm, (s) * STAGE4 + A_T + (kk * CM_K) * LDB4 + (sn0 + j * CM_N) / 8u, LDB4, gl_CooperativeMatrixLayoutRowMajor); \
		} \
		[[unroll]] for (uint i = 0u; i < TM; ++i) { \
			[[unroll]] for (uint j = 0u; j < TN; ++j) { \
				acc[i * TN + j] = coopMatMulAdd(a[i], b[j], acc[i * TN + j]); \
			} \
		} \
	}

// tile_of is the workgroup's (tile column, tile row) in the RASTER order.
uvec2 tile_of() {
	uvec2 id = gl_WorkGroupID.xy;
	if (RASTER == 0u) {
		return id;
	}
	uint nx = gl_NumWorkGroups.x;
	uint l = id.x + id.y * nx;
	uint band = l / (RASTER * nx);
	uint r = l - band * RASTER * nx;
	return uvec2(r / RASTER, band * RASTER + r % RASTER);
}

void main() {
	tid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
	uint sg = gl_SubgroupID;
	uvec2 t = tile_of();
	m0 = t.y * BM;
	n0 = t.x * BN;
	uint sm0 = (sg % WM) * (BM / WM);
	uint sn0 = (sg / WM) * (BN / WN);

	ACC acc[TM * TN];
	[[unroll]] for (uint i = 0u; i < TM * TN; ++i) {
		acc[i] = ACC(0.0);
	}
	uint nk = p.K / BK;
	if (DIRECT != 0u) {
		// Fragment sets 0 and 1 alternate over the CM_K steps (K/CM_K even).
		uint LA = p.K / 8u; // row strides in 16-byte units
		uint LB = p.N / 8u;
		uint abase = (m0 + sm0) * LA;
		uint bbase = n0 / 8u + sn0 / 8u;
		MATA a0[TM], a1[TM];
		MATB b0[TN], b1[TN];
		[[unroll]] for (uint i = 0u; i < TM; ++i) {
			coopMatLoad(a0[i], a_vec, abase + i * CM_M * LA, LA, gl_CooperativeMatrixLayoutRowMajor);
		}
		[[unroll]] for (uint j = 0u; j < TN; ++j) {
			coopMatLoad(b0[j], b_vec, bbase + j * (CM_N / 8u), LB, gl_CooperativeMatrixLayoutRowMajor);
		}
		uint nks = p.K / CM_K;
		for (uint ks = 0u; ks < nks; ks += 2u) {
			uint k1 = (ks + 1u) * CM_K;
			[[unroll]] for (uint i = 0u; i < TM; ++i) {
				coopMatLoad(a1[i], a_vec, abase + i * CM_M * LA + k1 / 8u, LA, gl_CooperativeMatrixLayoutRowMajor);
			}
			[[unroll]] for (uint j = 0u; j < TN; ++j) {
				coopMatLoad(b1[j], b_vec, bbase + k1 * LB + j * (CM_N / 8u), LB, gl_CooperativeMatrixLayoutRowMajor);
			}
			[[unroll]] for (uint i = 0u; i < TM; ++i) {
				[[unroll]] for (uint j = 0u; j < TN; ++j) {
					acc[i * TN + j] = coopMatMulAdd(a0[i], b0[j], acc[i * TN + j]);
				}
			}
			if (ks + 2u < nks) {
				uint k2 = (ks + 2u) * CM_K;
				[[unroll]] for (uint i = 0u; i < TM; ++i) {
					coopMatLoad(a0[i], a_vec, abase + i * CM_M * LA + k2 / 8u, LA, gl_CooperativeMatrixLayoutRowMajor);
				}
				[[unroll]] for (uint j = 0u; j < TN; ++j) {
					coopMatLoad(b0[j], b_vec, bbase + k2 * LB + j * (CM_N / 8u), LB, gl_CooperativeMatrixLayoutRowMajor);
				}
			}
			[[unroll]] for (uint i = 0u; i < TM; ++i) {
				[[unroll]] for (uint j = 0u; j < TN; ++j) {
					acc[i * TN + j] = coopMatMulAdd(a1[i], b1[j], acc[i * TN + j]);
				}
			}
		}
	} else if (PROBE == 4u) {
		fetch(0u, 0u);
		stash(0u, 0u);
		barrier();
		for (uint kt = 0u; kt < nk; ++kt) {
			uint s = kt & 1u;
			fetch(0u, 0u);
			COMPUTE(s)
			stash(s ^ 1u, 0u);
			barrier();
		}
	} else if (PROBE != 0u) {
		fetch(0u, 0u);
		stash(0u, 0u);
		barrier();
		MATA a[TM];
		MATB b[TN];
		[[unroll]] for (uint i = 0u; i < TM; ++i) {
			coopMatLoad(a[i], sm, (sm0 + i * CM_M) * LDA4, LDA4, gl_CooperativeMatrixLayoutRowMajor);
		}
		[[unroll]] for (uint j = 0u; j < TN; ++j) {
			coopMatLoad(b[j], sm, A_T + sn0 / 8u, LDB4, gl_CooperativeMatrixLayoutRowMajor);
		}
		for (uint kt = 0u; kt < nk; ++kt) {
			if (PROBE == 1u) {
				[[unroll]] for (uint kk = 0u; kk < BK / CM_K; ++kk) {
					[[unroll]] for (uint i = 0u; i < TM; ++i) {
						[[unroll]] for (uint j = 0u; j < TN; ++j) {
							acc[i * TN + j] = coopMatMulAdd(a[i], b[j], acc[i * TN + j]);
						}
					}
				}
			} else {
				COMPUTE(0u)
				if (PROBE == 3u) {
					barrier();
				}
			}
		}
	} else if (STAGES == 1u && PF == 0u) {
		for (uint kt = 0u; kt < nk; ++kt) {
			fetch(kt * BK, 0u);
			stash(0u, 0u);
			barrier();
			COMPUTE(0u)
			barrier();
		}
	} else if (STAGES == 1u) {
		fetch(0u, 0u);
		for (uint kt = 0u; kt < nk; ++kt) {
			stash(0u, 0u);
			barrier();
			if (kt + 1u < nk) {
				fetch((kt + 1u) * BK, 0u);
			}
			COMPUTE(0u)
			barrier();
		}
	} else if (PF == 1u) {
		fetch(0u, 0u);
		stash(0u, 0u);
		barrier();
		for (uint kt = 0u; kt < nk; ++kt) {
			uint s = kt & 1u;
			if (kt + 1u < nk) {
				fetch((kt + 1u) * BK, 0u);
			}
			COMPUTE(s)
			if (kt + 1u < nk) {
				stash(s ^ 1u, 0u);
			}
			barrier();
		}
	} else {
		// Two steps at a time: buffer 0 and set 0 hold even steps, buffer 1
		// and set 1 odd ones (nk even).
		fetch(0u, 0u);
		stash(0u, 0u);
		fetch(BK, 1u);
		barrier();
		for (uint kt = 0u; kt < nk; kt += 2u) {
			if (kt + 2u < nk) {
				fetch((kt + 2u) * BK, 0u);
			}
			COMPUTE(0u)
			stash(1u, 1u);
			barrier();
			if (kt + 3u < nk) {
				fetch((kt + 3u) * BK, 1u);
			}
			COMPUTE(1u)
			if (kt + 2u < nk) {
				stash(0u, 0u);
			}
			barrier();
		}
	}
	[[unroll]] for (uint i = 0u; i < TM; ++i) {
		[[unroll]] for (uint j = 0u; j < TN; ++j) {
			coopMatStore(acc[i * TN + j], c_buf, (m0 + sm0 + i * CM_M) * p.N + n0 + sn0 + j * CM_N, p.N, gl_CooperativeMatrixLayoutRowMajor);
		}
	}
}
