#version 450
// flash: FlashAttention-2 forward (the default forward kernel).
//
// Bindings (set 0):
//   0 Q   [B,Nq,Hq,D]  STYPE, readonly   (pc.q_* strides)
//   1 K   [B,Nk,Hkv,D] STYPE, readonly   (pc.k_*)
//   2 V   [B,Nk,Hkv,DV] STYPE, readonly  (pc.v_*)
//   3 O   [B,Nq,Hq,DV] STYPE, written    (pc.o_*)
//   4 LSE [B,Hq,Nq]    float32, written  (natural log; −inf for a row that
//                                         sees no key, whose O row is 0;
//                                         [Hq,Tq] when packed)
//   5 Ext              uint32, readonly  (ext.glsl; read when EXT = 1)
//   6 bias, 7 its summary (ext.glsl; read only with EXT's bias bit)
// ADDRESSED build (flash.addr.DTYPE.spv): Q, K, V, O at pc.addr[0 … 3]
//   instead of bindings 0 … 3 (params.glsl, Operands); LSE, Ext and the
//   bias bindings stay bindings 4 … 7.
// Spec constants: 0 WG, 1 D, 2 DV, 3 BR, 4 BC, 5 SUBGROUP, 8 EXT.
// Grid: (ceil(Nq/BR), Hq, B); workgroup (x, y, z) computes query rows
//   x·BR … x·BR+BR−1 of head y of batch z (with EXT: of the sequence's
//   seq_nq rows — packed sequences are shorter than Nq — reading only its
//   read_keys() keys; ext.glsl).
//
// Thread layout (derived from the spec constants; shaders.FlashFwdLayout
// computes and checks the same):
//   TC = clamp(BC/4, 1, SUBGROUP)  threads sharing a query row (a power of
//                                  two inside one subgroup, so the row max and
//                                  sum are subgroupShuffleXor butterflies; a
//                                  row is never split across subgroups, so no
//                                  shared-memory reduction is needed)
//   TR = WG/TC                     row groups,  RM = BR/TR rows per thread
//   CN = BC/TC                     key columns per thread (c = tc + TC·j)
//   DVN = ceil(DV/TC)              output columns per thread (dv = tc + TC·j)
// Requirements: WG, BC, SUBGROUP powers of two, WG a multiple of SUBGROUP
// and of TC, BR a multiple of TR.
//
// Shared memory (bytes), staged as fp32 for both storage types:
//   4·( BR·(D+1)               Q tile (row stride D+1: no bank conflicts)
//     + BC·max(D+1, DV)         K tile, then V tile (one buffer, reused)
//     + BR·(BC+1) )             P tile
// = shaders.FlashFwdSharedBytes(BR, BC, D, DV, f16), plus with dropout
// the tile's keep bits (ext.glsl sDrop, shaders.DropSharedBytes).
//
// Algorithm per workgroup: Q tile → shared; for each key tile that some row
// of the tile can see (causal: tiles wholly above the diagonal are neither
// loaded nor computed; only tiles that cross the diagonal or the Nk tail are
// masked; with EXT a window also skips the tiles left of every row's
// window, and a bias the tiles it hides from every row: bias_next_key_tile): K tile → shared, S = Q·Kᵀ (fp32, in the exp2 domain:
// S·scale·log2 e), online softmax (running row max m and partial row sums l,
// the sums reduced across the row's threads once at the end, FA2), P →
// shared (with dropout, P·keep: the tile's keep bits are drawn with the K
// tile), V tile → shared, O += P·V with O in registers. Finally
// O /= l (with dropout O ·= scale/l) and LSE = ln2·(m + log2 l).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define EXT_BINDING 5
#define BIAS_BINDING 6
#define DROP_ROWS BR
#define DROP_KEYS BC
#include "params.glsl"
#include "attn_params.glsl"
#include "ext.glsl"

OPERAND(0, 0, QBuf, q, readonly)
OPERAND(1, 1, KBuf, k, readonly)
OPERAND(2, 2, VBuf, v, readonly)
OPERAND(3, 3, OBuf, o, writeonly)
layout(std430, binding = 4) writeonly buffer LBuf { float lse_buf[]; };

const uint TC0 = BC / 4u;
const uint TC = TC0 < 1u ? 1u : (TC0 < SUBGROUP ? TC0 : SUBGROUP);
const uint TR = WG / TC;
const uint RM = BR / TR;
const uint CN = BC / TC;
const uint DVN = (DV + TC - 1u) / TC;

const uint LDQ = D + 1u;  // row stride of Q and K in shared
const uint LDP = BC + 1u; // row stride of P in shared
const uint KV_ELEMS = BC * LDQ > BC * DV ? BC * LDQ : BC * DV;

shared float sQ[BR * LDQ];
shared float sKV[KV_ELEMS];
shared float sP[BR * LDP];

void main() {
	uint tid = thread_index();
	uint tc = tid % TC;
	uint tr = tid / TC;
	uint h = gl_WorkGroupID.y;
	uint b = gl_WorkGroupID.z;
	uint kvh = kv_head(h);
	uint r0 = gl_WorkGroupID.x * BR;
	ext_begin(b);
	ext_head(b, h);
	if (r0 >= seq_nq) {
		return; // past a packed sequence's queries (uniform)
	}
	uint rows = min(BR, seq_nq - r0);
	uint nkeys = read_keys();
	float sl2 = pc.scale * LOG2E;

	// Q tile → shared (coalesced along the feature dimension; tail rows 0).
	STRIDED_BEGIN(e, BR * D)
		uint r = e / D;
		uint d = e - r * D;
		float x = 0.0;
		if (r < rows) {
			x = LOAD(EL(q, q_base(b, r0 + r, h) + d));
		}
		sQ[r * LDQ + d] = x;
	STRIDED_END

	// Keys visible to the tile: rows see key_first(row) … key_limit(row)−1,
	// both non-decreasing in the row.
	uint lim_lo = key_limit(r0);
	uint lim_hi = key_limit(r0 + rows - 1u);
	uint fst_lo = key_first(r0);
	uint fst_hi = key_first(r0 + rows - 1u);
	uint ntiles = (lim_hi + BC - 1u) / BC;

	float m[RM];
	float l[RM];
	uint lim[RM];
	uint fst[RM];
	float acc[RM * DVN];
	float s[RM * CN];
	[[unroll]] for (uint i = 0u; i < RM; ++i) {
		uint r = tr + TR * i;
		m[i] = NEG_INF;
		l[i] = 0.0;
		lim[i] = r < rows ? key_limit(r0 + r) : 0u;
		fst[i] = r < rows ? key_first(r0 + r) : 0u;
		[[unroll]] for (uint j = 0u; j < DVN; ++j) {
			acc[i * DVN + j] = 0.0;
		}
	}

	// Key tiles from fst_lo's on, less those a bias hides from every row.
	uint rlast = r0 + rows - 1u;
	for (uint kt = bias_next_key_tile(r0, rlast, fst_lo / BC, ntiles, BC); kt < ntiles;
			kt = bias_next_key_tile(r0, rlast, kt + 1u, ntiles, BC)) {
		uint c0 = kt * BC;
		uint cols = min(BC, nkeys - c0);

		barrier(); // the previous tile's P·V is done with sKV and sP
		STRIDED_BEGIN(e, BC * D)
			uint c = e / D;
			uint d = e - c * D;
			float x = 0.0;
			if (c < cols) {
				x = LOAD(EL(k, k_base(b, c0 + c, kvh) + d));
			}
			sKV[c * LDQ + d] = x;
		STRIDED_END
		drop_fill(r0, c0, tid, WG); // (dropout: the tile's keep bits)
		barrier();

		// S = Q·Kᵀ for the thread's RM rows × CN columns.
		[[unroll]] for (uint i = 0u; i < RM * CN; ++i) {
			s[i] = 0.0;
		}
		UNROLLED_BEGIN(d, D)
			float kv[CN];
			[[unroll]] for (uint j = 0u; j < CN; ++j) {
				kv[j] = sKV[(tc + TC * j) * LDQ + d];
			}
			[[unroll]] for (uint i = 0u; i < RM; ++i) {
				float qv = sQ[(tr + TR * i) * LDQ + d];
				[[unroll]] for (uint j = 0u; j < CN; ++j) {
					s[i * CN + j] = fma(qv, kv[j], s[i * CN + j]);
				}
			}
		UNROLLED_END

		// Online softmax. need_mask is uniform: false for tiles every row of
		// the tile sees entirely (no causal diagonal, no window edge, no Nk
		// tail).
		bool need_mask = c0 + BC > lim_lo || c0 < fst_hi;
		[[unroll]] for (uint i = 0u; i < RM; ++i) {
			float mloc = NEG_INF;
			[[unroll]] for (uint j = 0u; j < CN; ++j) {
				uint c = c0 + tc + TC * j;
				float x = EXT != 0u ? ext_score(s[i * CN + j], r0 + tr + TR * i, c) : s[i * CN + j] * sl2;
				if (need_mask && (c >= lim[i] || c < fst[i])) {
					x = NEG_INF;
				}
				s[i * CN + j] = x;
				mloc = max(mloc, x);
			}
			BUTTERFLY(max, mloc, TC)
			float mnew = max(m[i], mloc);
			// A row that has seen no key yet keeps m = −inf; exponentiate
			// against 0 then, so that exp2(−inf − 0) = 0 and never NaN.
			float muse = mnew == NEG_INF ? 0.0 : mnew;
			float alpha = exp2(m[i] - muse);
			m[i] = mnew;
			float lsum = 0.0;
			uint prow = (tr + TR * i) * LDP;
			[[unroll]] for (uint j = 0u; j < CN; ++j) {
				float p = exp2(s[i * CN + j] - muse);
				lsum += p;
				sP[prow + tc + TC * j] = p * drop_keep(tr + TR * i, tc + TC * j);
			}
			l[i] = l[i] * alpha + lsum;
			[[unroll]] for (uint j = 0u; j < DVN; ++j) {
				acc[i * DVN + j] *= alpha;
			}
		}
		barrier(); // all reads of the K tile done, P complete

		STRIDED_BEGIN(e, BC * DV)
			uint c = e / DV;
			uint d = e - c * DV;
			float x = 0.0;
			if (c < cols) {
				x = LOAD(EL(v, v_base(b, c0 + c, kvh) + d));
			}
			sKV[c * DV + d] = x;
		STRIDED_END
		barrier();

		// O += P·V (P is 0 for masked and tail columns, V tail rows are 0).
		for (uint c = 0u; c < BC; ++c) { // not unrolled: the body is already unrolled
			float pv[RM];
			[[unroll]] for (uint i = 0u; i < RM; ++i) {
				pv[i] = sP[(tr + TR * i) * LDP + c];
			}
			[[unroll]] for (uint j = 0u; j < DVN; ++j) {
				uint dv = min(tc + TC * j, DV - 1u); // clamped read; never stored
				float vv = sKV[c * DV + dv];
				[[unroll]] for (uint i = 0u; i < RM; ++i) {
					acc[i * DVN + j] = fma(pv[i], vv, acc[i * DVN + j]);
				}
			}
		}
	}

	[[unroll]] for (uint i = 0u; i < RM; ++i) {
		float lt = l[i];
		BUTTERFLY(add2, lt, TC)
		uint r = tr + TR * i;
		if (r < rows) {
			// l ≥ 1 whenever the row saw a key (its max contributes 1).
			// (Dropout: O = scale·Σ P·keep·V / l, the kept elements' scale
			// applied once here.)
			float inv = lt == 0.0 ? 0.0 : drop_scale() / lt;
			OFFSET ob = o_base(b, r0 + r, h);
			[[unroll]] for (uint j = 0u; j < DVN; ++j) {
				uint dv = tc + TC * j;
				if (dv < DV) {
					EL(o, ob + dv) = STORE(acc[i * DVN + j] * inv);
				}
			}
			if (tc == 0u) {
				lse_buf[lse_index(b, h, r0 + r)] = lt == 0.0 ? NEG_INF : (m[i] + log2(lt)) * LN2;
			}
		}
	}
}
