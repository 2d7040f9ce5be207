#version 450
// bwd_dq: FlashAttention-2 backward, dQ (deterministic: every dQ row is
// written by exactly one workgroup, no atomics, fixed loop order).
//
// Bindings (set 0): 0 Q, 1 K, 2 V, 3 dO, 4 LSE, 5 D as bwd_common.glsl;
//   6 dQ  [B,Nq,Hq,D]   STYPE, written (Q's strides)
//   7 Ext               uint32, readonly (ext.glsl; read when EXT = 1)
//   8 bias, 9 its summary, 10 dS target (written: dBias; ext.glsl, read
//   and written only with EXT's bias bits)
// ADDRESSED build: Q, K, V, dO, dQ at pc.addr[0 … 4] instead of bindings
//   0 1 2 3 6 (params.glsl, Operands); LSE, D, Ext and the bias bindings
//   stay bindings 4, 5, 7 … 10.
// Spec constants: 0 WG, 1 D, 2 DV, 3 BR (query rows per workgroup),
//   4 BC (key rows per inner tile) (5 SUBGROUP unused: no reductions),
//   8 EXT.
// Grid: (ceil(Nq/BR), Hq, B).
//
// Thread layout: TX = max(WG/BR, 1) threads per query row, TQ = WG/TX row
//   groups, QM = BR/TQ rows per thread (r = tq + TQ·m). A thread holds
//   dQ[r, d] for d = tx + TX·n in registers and computes S/P/dP/dS for its
//   rows × key columns c = tx + TX·n. Requires WG and BR powers of two.
//
// Shared memory (bytes): bwd_common.glsl's tiles (Q and dO resident, K and
// V per key tile):
//   4·( BR·(D+1) + BR·(DV+1)      Q and dO tiles
//     + BC·(D+1) + BC·(DV+1)      K and V tiles
//     + BR·(BC+1)                 dS
//     + 2·BR )                    LSE and D
// = shaders.BwdDQSharedBytes(BR, BC, D, DV, f16), plus with dropout the
// tile's keep bits (shaders.DropSharedBytes).
//
// For each key tile the query tile can see (causal: tiles wholly above the
// diagonal are skipped; with EXT a window also skips the tiles left of
// every row's window): P = exp(scale·Q Kᵀ − LSE) (with EXT, exp of
// ext_score − LSE), dP = dO Vᵀ, dS = P ∘ (dP − D) (with a softcap times its
// derivative ext_dsoft), dQ += dS K; finally dQ ·= scale. With dropout
// (keep bits drawn per key tile, ext.glsl) dS = P ∘ (keep·s·dP − D), s
// the kept elements' scale. With a bias, key tiles it hides from every row
// are skipped (bias_next_key_tile), and with dBias each dS (before the softcap's
// derivative) is stored (dbias_store).
#extension GL_GOOGLE_include_directive : require
#define EXT_BINDING 7
#define BIAS_BINDING 8
#define DBIAS_BINDING 10
#define DROP_ROWS BR
#define DROP_KEYS BC
#include "params.glsl"
#include "attn_params.glsl"
#include "ext.glsl"
#include "bwd_common.glsl"

OPERAND(4, 6, dQBuf, dq, writeonly)

const uint TX0 = WG / BR;
const uint TX = TX0 < 1u ? 1u : TX0;
const uint TQ = WG / TX;
const uint QM = BR / TQ;
const uint CN = (BC + TX - 1u) / TX;
const uint DN = (D + TX - 1u) / TX;

// DQ_ROW(CAREFUL): dS of row r against the thread's CN keys (with EXT: of
// the raw scores sacc through ext_score, and times ext_dsoft where
// visible, which leaves masked elements exactly 0; with dropout
// dS = P·(keep·scale·dP − D)).
#define DQ_ROW(CAREFUL) \
	[[unroll]] for (uint n = 0u; n < CN; ++n) { \
		uint c = min(tx + TX * n, BC - 1u); /* clamped; stored only if in range */ \
		bool cin = tx + TX * n < BC; \
		bool visible = lse != NEG_INF && !(need_mask && (c0 + c >= lim[m] || c0 + c < fst[m])); \
		float sv = sacc[m * CN + n]; \
		float x = EXT != 0u ? ext_score(sv, r0 + r, c0 + c) : sv * sl2; \
		float p = visible ? BWD_P(CAREFUL, x - lse2, lse2) : 0.0; \
		if (cin) { \
			float ds = BWD_DS(CAREFUL, visible, p, pacc[m * CN + n] * (drop_keep(r, c) * dscale) - drow); \
			if (r < rows) { \
				dbias_store(r0 + r, c0 + c, ds); \
			} \
			if (EXT != 0u && visible) { \
				ds *= ext_dsoft(sv); \
			} \
			sdS[r * LDP + c] = ds; \
		} \
	}

void main() {
	uint tid = gl_LocalInvocationIndex;
	uint tx = tid % TX;
	uint tq = tid / TX;
	uint h = gl_WorkGroupID.y;
	uint b = gl_WorkGroupID.z;
	uint kvh = kv_head(h);
	uint r0 = gl_WorkGroupID.x * BR;
	float sl2 = pc.scale * LOG2E;
	float dscale = drop_scale(); // (1 without dropout)
	ext_begin(b);
	ext_head(b, h);
	if (r0 >= seq_nq) {
		return; // past a packed sequence's queries (uniform)
	}
	uint rows = min(BR, seq_nq - r0);
	uint nkeys = read_keys(); // no key past a key count is read (ext.glsl)

	STAGE_QUERY_TILE(b, h, r0, rows)

	// Row r0 + r sees keys fst[m] … lim[m]−1 (none past the tail).
	float dq[QM * DN];
	uint lim[QM];
	uint fst[QM];
	[[unroll]] for (uint m = 0u; m < QM; ++m) {
		uint r = tq + TQ * m;
		lim[m] = r < rows ? key_limit(r0 + r) : 0u;
		fst[m] = r < rows ? key_first(r0 + r) : 0u;
		[[unroll]] for (uint n = 0u; n < DN; ++n) {
			dq[m * DN + n] = 0.0;
		}
	}

	// Keys visible to the tile: key_first(r0) … key_limit(last row)−1
	// (both bounds non-decreasing in the row).
	uint lim_lo = key_limit(r0);
	uint lim_hi = key_limit(r0 + rows - 1u);
	uint fst_lo = key_first(r0);
	uint fst_hi = key_first(r0 + rows - 1u);
	uint ntiles = (lim_hi + BC - 1u) / BC;

	// Key tiles from fst_lo's on, less those a bias hides from every row.
	uint rlast = r0 + rows - 1u;
	for (uint kt = bias_next_key_tile(r0, rlast, fst_lo / BC, ntiles, BC); kt < ntiles;
			kt = bias_next_key_tile(r0, rlast, kt + 1u, ntiles, BC)) {
		uint c0 = kt * BC;
		uint cols = min(BC, nkeys - c0);
		barrier(); // Q/dO/LSE/D staged; the previous tile is done with sK, sdS
		STAGE_KEY_TILE(b, kvh, c0, cols)
		drop_fill(r0, c0, tid, WG); // (dropout: the tile's keep bits)
		barrier();

		// need_mask is uniform: false for tiles every row of the tile sees
		// entirely (no causal diagonal, no window edge, no Nk tail).
		bool need_mask = c0 + BC > lim_lo || c0 < fst_hi;
		// S = Q Kᵀ and dP = dO Vᵀ for the thread's QM rows × CN key columns,
		// register-tiled: one pass over the features.
		float sacc[QM * CN];
		float pacc[QM * CN];
		[[unroll]] for (uint i = 0u; i < QM * CN; ++i) {
			sacc[i] = 0.0;
			pacc[i] = 0.0;
		}
		TILE_PRODUCT(sacc, D, LDK, sQ, tq, TQ, QM, sK, BC, CN)
		TILE_PRODUCT(pacc, DV, LDV, sdO, tq, TQ, QM, sV, BC, CN)
		[[unroll]] for (uint m = 0u; m < QM; ++m) {
			uint r = tq + TQ * m;
			float lse = sLSE[r];
			float lse2 = lse * LOG2E;
			float drow = sD[r];
			if (careful_l2(lse2)) { // rare: see params.glsl
				DQ_ROW(true)
			} else {
				DQ_ROW(false)
			}
		}
		barrier();

		// dQ += dS K (columns past the tail are 0 in dS and K).
		for (uint c = 0u; c < BC; ++c) { // not unrolled: the body is already unrolled
			[[unroll]] for (uint m = 0u; m < QM; ++m) {
				uint r = tq + TQ * m;
				float ds = sdS[r * LDP + c];
				[[unroll]] for (uint n = 0u; n < DN; ++n) {
					uint d = min(tx + TX * n, D - 1u);
					dq[m * DN + n] = fma(ds, sK[c * LDK + d], dq[m * DN + n]);
				}
			}
		}
	}

	[[unroll]] for (uint m = 0u; m < QM; ++m) {
		uint r = tq + TQ * m;
		if (r < rows) {
			OFFSET qb = q_base(b, r0 + r, h);
			bool dead = sLSE[r] == NEG_INF; // dQ exactly 0, even against ±Inf in K
			[[unroll]] for (uint n = 0u; n < DN; ++n) {
				uint d = tx + TX * n;
				if (d < D) {
					EL(dq, qb + d) = STORE(dead ? 0.0 : dq[m * DN + n] * pc.scale);
				}
			}
		}
	}
}
