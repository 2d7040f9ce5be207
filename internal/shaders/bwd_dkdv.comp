#version 450
// bwd_dkdv: FlashAttention-2 backward, dK and dV (deterministic: every dK/dV
// row is written by exactly one workgroup, no atomics, fixed loop order).
//
// Bindings (set 0): 0 Q, 1 K, 2 V, 3 dO, 4 LSE, 5 D as bwd_common.glsl;
//   6 dK  [B,Nk,Hkv,D]  STYPE, written (K's strides)
//   7 dV  [B,Nk,Hkv,DV] STYPE, written (V's strides)
//   8 Ext               uint32, readonly (ext.glsl; read when EXT = 1)
//   9 bias, 10 its summary (ext.glsl; read only with EXT's bias bit)
// ADDRESSED build: Q, K, V, dO, dK, dV at pc.addr[0 … 5] instead of
//   bindings 0 1 2 3 6 7 (params.glsl, Operands); LSE, D, Ext and the bias
//   bindings stay bindings 4, 5, 8 … 10.
// Spec constants: 0 WG, 1 D, 2 DV, 3 BR (query rows per inner tile),
//   4 BC (key rows per workgroup) (5 SUBGROUP unused: no reductions),
//   8 EXT.
// Grid: (ceil(Nk/BC), Hkv, B); workgroup (x, y, z) owns keys x·BC … x·BC+BC−1
//   of key/value head y of batch z.
//
// Thread layout: TX = max(WG/BC, 1) threads per key row, TK = WG/TX key-row
//   groups, KM = BC/TK key rows per thread (c = tk + TK·m). A thread holds
//   dK[c, d] and dV[c, dv] for d, dv = tx + TX·n in registers, and computes
//   S/P/dP/dS for its key rows × query rows r = tx + TX·n.
//   Requires WG and BC powers of two.
//
// Shared memory (bytes): bwd_common.glsl's tiles (K and V resident, Q and
// dO per query tile) and sP:
//   4·( BC·(D+1) + BC·(DV+1)      K and V tiles
//     + BR·(D+1) + BR·(DV+1)      Q and dO tiles
//     + 2·BR·(BC+1)               P and dS
//     + 2·BR )                    LSE and D of the query tile
// = shaders.BwdDKDVSharedBytes(BR, BC, D, DV, f16), plus with dropout
// the tile's keep bits (shaders.DropSharedBytes).
//
// For each query head of the group (in order) and each query tile that can
// see the key tile (causal: tiles wholly above the diagonal are skipped;
// with EXT a window also skips the tiles below every key's window, and a
// bias the tiles it hides entirely: bias_next_query_tile):
//   P = exp(scale·Q Kᵀ − LSE) (with EXT, exp of ext_score − LSE; 0 where
//   masked or LSE = −inf), dV += Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D) (with
//   a softcap times its derivative ext_dsoft), dK += dSᵀ Q; finally
//   dK ·= scale. With dropout (keep bits drawn per query tile, ext.glsl)
//   dV += (P·keep)ᵀ dO and dS = P ∘ (keep·s·dP − D), s the kept
//   elements' scale, which dV's store applies.
#extension GL_GOOGLE_include_directive : require
#define EXT_BINDING 8
#define BIAS_BINDING 9
#define DROP_ROWS BR
#define DROP_KEYS BC
#include "params.glsl"
#include "attn_params.glsl"
#include "ext.glsl"
#include "bwd_common.glsl"

OPERAND(4, 6, dKBuf, dk, writeonly)
OPERAND(5, 7, dVBuf, dv, writeonly)

const uint TX0 = WG / BC;
const uint TX = TX0 < 1u ? 1u : TX0;
const uint TK = WG / TX;
const uint KM = BC / TK;
const uint RN = (BR + TX - 1u) / TX;
const uint DN = (D + TX - 1u) / TX;
const uint DVN = (DV + TX - 1u) / TX;

shared float sP[BR * LDP];

// DKDV_ROW(CAREFUL): P and dS of row r against the thread's KM keys (with
// EXT: of the raw scores sacc through ext_score, dS times ext_dsoft where
// visible, which leaves masked elements exactly 0; with dropout P·keep
// for dV, whose scale the store applies, and dS = P·(keep·scale·dP − D)).
#define DKDV_ROW(CAREFUL) \
	[[unroll]] for (uint mm = 0u; mm < KM; ++mm) { \
		uint c = tk + TK * mm; \
		bool visible = lse != NEG_INF && !(need_mask && (c0 + c >= lim || c0 + c < fst)); \
		float sv = sacc[mm * RN + n]; \
		float x = EXT != 0u ? ext_score(sv, r0 + r, c0 + c) : sv * sl2; \
		float p = visible ? BWD_P(CAREFUL, x - lse2, lse2) : 0.0; \
		if (rin) { \
			float keep = drop_keep(r, c); \
			float ds = BWD_DS(CAREFUL, visible, p, pacc[mm * RN + n] * (keep * dscale) - drow); \
			if (EXT != 0u && visible) { \
				ds *= ext_dsoft(sv); \
			} \
			sP[r * LDP + c] = p * keep; \
			sdS[r * LDP + c] = ds; \
		} \
	}

void main() {
	uint tid = gl_LocalInvocationIndex;
	uint tx = tid % TX;
	uint tk = tid / TX;
	uint kvh = gl_WorkGroupID.y;
	uint b = gl_WorkGroupID.z;
	uint c0 = gl_WorkGroupID.x * BC;
	float sl2 = pc.scale * LOG2E;
	float dscale = drop_scale(); // (1 without dropout)
	ext_begin(b);
	if (c0 >= seq_nk) {
		return; // past a packed sequence's keys (uniform)
	}
	// The tile's keys: cols stored (dK and dV written, 0 for a key no row
	// sees), the first lcols read (none past a key count: ext.glsl).
	uint cols = min(BC, seq_nk - c0);
	uint lcols = min(BC, max(read_keys(), c0) - c0);

	STAGE_KEY_TILE(b, kvh, c0, lcols)


	float dk[KM * DN];
	float dv[KM * DVN];
	[[unroll]] for (uint i = 0u; i < KM * DN; ++i) {
		dk[i] = 0.0;
	}
	[[unroll]] for (uint i = 0u; i < KM * DVN; ++i) {
		dv[i] = 0.0;
	}

	// Query rows that see at least one key of the tile: query_first(c0) …
	// query_limit(last key)−1 (both bounds non-decreasing in the key; the
	// masking does not depend on the head).
	uint qfirst = query_first(c0);
	uint qt0 = qfirst / BR;
	uint nqt = (query_limit(c0 + lcols - 1u) + BR - 1u) / BR;
	if (lcols == 0u || qfirst >= seq_nq) {
		nqt = 0u; // no query row sees these keys: dK = dV = 0
	}

	for (uint g = 0u; g < pc.group; ++g) {
		uint h = kvh * pc.group + g;
		ext_head(b, h);
		// Query tiles qt0 … nqt−1, less those a bias hides from every key.
		uint clast = c0 + lcols - 1u;
		for (uint qt = bias_next_query_tile(b, h, qt0, nqt, BR, c0, clast); qt < nqt;
				qt = bias_next_query_tile(b, h, qt + 1u, nqt, BR, c0, clast)) {
			uint r0 = qt * BR;
			uint rows = min(BR, seq_nq - r0);
			barrier(); // the previous tile is done with sQ, sdO, sP, sdS
			STAGE_QUERY_TILE(b, h, r0, rows)
			drop_fill(r0, c0, tid, WG); // (dropout: the tile's keep bits)
			barrier();

			// No mask needed when even the tile's first row sees all its keys
			// up to the last, and even its last row all from the first.
			bool need_mask = key_limit(r0) < c0 + BC || key_first(r0 + rows - 1u) > c0;
			// S = Q Kᵀ and dP = dO Vᵀ for the thread's RN query rows × KM key
			// rows, register-tiled: one pass over the features.
			float sacc[KM * RN];
			float pacc[KM * RN];
			[[unroll]] for (uint i = 0u; i < KM * RN; ++i) {
				sacc[i] = 0.0;
				pacc[i] = 0.0;
			}
			TILE_PRODUCT(sacc, D, LDK, sK, tk, TK, KM, sQ, BR, RN)
			TILE_PRODUCT(pacc, DV, LDV, sV, tk, TK, KM, sdO, BR, RN)
			[[unroll]] for (uint n = 0u; n < RN; ++n) {
				uint r = min(tx + TX * n, BR - 1u); // clamped; stored only if in range
				bool rin = tx + TX * n < BR;
				float lse = sLSE[r];
				uint lim = r < rows ? key_limit(r0 + r) : 0u; // row r sees keys fst … lim−1
				uint fst = r < rows ? key_first(r0 + r) : 0u;
				float lse2 = lse * LOG2E;
				float drow = sD[r];
				if (careful_l2(lse2)) { // rare: see params.glsl
					DKDV_ROW(true)
					if (rin && r < rows && lse == NEG_INF) {
						// A dead row: zero its Q and dO for dK and dV. Only
						// this row's own S and dP (discarded) may still be
						// reading them.
						for (uint d = tk; d < D; d += TK) {
							sQ[r * LDK + d] = 0.0;
						}
						for (uint d = tk; d < DV; d += TK) {
							sdO[r * LDV + d] = 0.0;
						}
					}
				} else {
					DKDV_ROW(false)
				}
			}
			barrier();

			// dV += Pᵀ dO, dK += dSᵀ Q (rows past the tail are 0 in P, dS).
			for (uint r = 0u; r < BR; ++r) { // not unrolled: the body is already unrolled
				[[unroll]] for (uint mm = 0u; mm < KM; ++mm) {
					uint c = tk + TK * mm;
					float p = sP[r * LDP + c];
					float ds = sdS[r * LDP + c];
					[[unroll]] for (uint n = 0u; n < DVN; ++n) {
						uint d = min(tx + TX * n, DV - 1u);
						dv[mm * DVN + n] = fma(p, sdO[r * LDV + d], dv[mm * DVN + n]);
					}
					[[unroll]] for (uint n = 0u; n < DN; ++n) {
						uint d = min(tx + TX * n, D - 1u);
						dk[mm * DN + n] = fma(ds, sQ[r * LDK + d], dk[mm * DN + n]);
					}
				}
			}
		}
	}

	[[unroll]] for (uint mm = 0u; mm < KM; ++mm) {
		uint c = tk + TK * mm;
		if (c < cols) {
			OFFSET kb = k_base(b, c0 + c, kvh);
			OFFSET vb = v_base(b, c0 + c, kvh);
			[[unroll]] for (uint n = 0u; n < DN; ++n) {
				uint d = tx + TX * n;
				if (d < D) {
					EL(dk, kb + d) = STORE(dk[mm * DN + n] * pc.scale);
				}
			}
			[[unroll]] for (uint n = 0u; n < DVN; ++n) {
				uint d = tx + TX * n;
				if (d < DV) {
					EL(dv, vb + d) = STORE(dv[mm * DVN + n] * dscale);
				}
			}
		}
	}
}
