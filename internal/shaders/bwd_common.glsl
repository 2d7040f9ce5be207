// bwd_common.glsl: what the scalar backward kernels (bwd_dkdv, bwd_dq)
// share: the input bindings, the fp32 tiles they stage in shared memory,
// the macros that stage them and the register-tiled products S = Q Kᵀ and
// dP = dO Vᵀ. Include after params.glsl; the kernel declares its output
// operands (bindings 6, 7; address slots 4, 5) after it.
//
// Input bindings (set 0):
//   0 Q   [B,Nq,Hq,D]   STYPE, readonly (pc.q_*)
//   1 K   [B,Nk,Hkv,D]  STYPE, readonly (pc.k_*)
//   2 V   [B,Nk,Hkv,DV] STYPE, readonly (pc.v_*)
//   3 dO  [B,Nq,Hq,DV]  STYPE, readonly (O's strides, pc.o_*)
//   4 LSE [B,Hq,Nq]     float32, readonly (from the forward)
//   5 D   [B,Hq,Nq]     float32, readonly (from bwd_pre)
// (ADDRESSED build: Q, K, V, dO at address slots 0 … 3, params.glsl.)
//
// Shared memory, staged as fp32 for every storage type (rows padded by one
// float):
//   sQ, sdO    BR query rows of Q and dO
//   sK, sV     BC key rows of K and V
//   sdS        dS, BR × BC
//   sLSE, sD   LSE and D of the BR query rows
OPERAND(0, 0, QBuf, q, readonly)
OPERAND(1, 1, KBuf, k, readonly)
OPERAND(2, 2, VBuf, v, readonly)
OPERAND(3, 3, dOBuf, do, readonly)
layout(std430, binding = 4) readonly buffer LBuf { float lse_buf[]; };
layout(std430, binding = 5) readonly buffer DBuf { float d_buf[]; };

const uint LDK = D + 1u;  // row stride of sQ and sK
const uint LDV = DV + 1u; // of sdO and sV
const uint LDP = BC + 1u; // of sdS (and bwd_dkdv's sP)

shared float sQ[BR * LDK];
shared float sdO[BR * LDV];
shared float sK[BC * LDK];
shared float sV[BC * LDV];
shared float sdS[BR * LDP];
shared float sLSE[BR];
shared float sD[BR];

// STAGE_ROWS(tile, LD, N, DIM, op, BASE, b, s0, h, KEEP): rows s0 …
// s0+N−1 of head h of batch b of operand op (row offsets BASE,
// features 0 … DIM−1) into the fp32 tile (row stride LD); rows r for which
// the expression KEEP is false are 0. The whole workgroup runs it (tid in
// scope) between barriers.
#define STAGE_ROWS(tile, LD, N, DIM, op, BASE, b, s0, h, KEEP) \
	STRIDED_BEGIN(e, (N) * (DIM)) \
		uint r = e / (DIM); \
		uint d = e - r * (DIM); \
		tile[r * (LD) + d] = (KEEP) ? LOAD(EL(op, BASE(b, (s0) + r, h) + d)) : 0.0; \
	STRIDED_END

// STAGE_QUERY_TILE(b, h, r0, rows): query rows r0 … r0+BR−1 of head h of
// batch b into sQ, sdO, sLSE and sD; rows past rows are 0 (LSE −inf).
#define STAGE_QUERY_TILE(b, h, r0, rows) \
	STAGE_ROWS(sQ, LDK, BR, D, q, q_base, b, r0, h, r < (rows)) \
	STAGE_ROWS(sdO, LDV, BR, DV, do, o_base, b, r0, h, r < (rows)) \
	for (uint r = tid; r < BR; r += WG) { \
		sLSE[r] = r < (rows) ? lse_in(lse_buf[lse_index(b, h, (r0) + r)]) : NEG_INF; \
		sD[r] = r < (rows) ? d_buf[lse_index(b, h, (r0) + r)] : 0.0; \
	}

// STAGE_KEY_TILE(b, kvh, c0, cols): key rows c0 … c0+BC−1 of key/value
// head kvh of batch b into sK and sV; rows past cols are 0.
#define STAGE_KEY_TILE(b, kvh, c0, cols) \
	STAGE_ROWS(sK, LDK, BC, D, k, k_base, b, c0, kvh, r < (cols)) \
	STAGE_ROWS(sV, LDV, BC, DV, v, v_base, b, c0, kvh, r < (cols))

// TILE_PRODUCT(acc, DIM, LD, sOwn, t, T, M, sSpread, SPREAD, N): the
// register-tiled acc[m·N + n] += Σ_d sOwn[(t + T·m)·LD + d] ·
// sSpread[min(tx + TX·n, SPREAD − 1)·LD + d] over the DIM features, one
// pass: the thread's M own rows t + T·m of tile sOwn against its N rows
// tx + TX·n (clamped to SPREAD − 1; the caller discards those past it) of
// tile sSpread (tx and TX in scope). S = Q Kᵀ is TILE_PRODUCT over sQ, sK
// and D; dP = dO Vᵀ over sdO, sV and DV.
#define TILE_PRODUCT(acc, DIM, LD, sOwn, t, T, M, sSpread, SPREAD, N) \
	UNROLLED_BEGIN(d, DIM) \
		float xs[N]; \
		[[unroll]] for (uint n = 0u; n < (N); ++n) { \
			xs[n] = sSpread[min(tx + TX * n, (SPREAD) - 1u) * (LD) + d]; \
		} \
		[[unroll]] for (uint m = 0u; m < (M); ++m) { \
			float xo = sOwn[((t) + (T) * m) * (LD) + d]; \
			[[unroll]] for (uint n = 0u; n < (N); ++n) { \
				acc[m * (N) + n] = fma(xs[n], xo, acc[m * (N) + n]); \
			} \
		} \
	UNROLLED_END
