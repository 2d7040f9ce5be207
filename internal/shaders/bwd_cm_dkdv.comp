#version 450
// bwd_cm_dkdv: FlashAttention-2 backward, dK and dV, on cooperative
// matrices (VK_KHR_cooperative_matrix, subgroup scope). fp16 storage
// (-DSTORAGE_F16=1), bf16 (-DSTORAGE_BF16=1, glslang ≥ 16; cm_types.glsl)
// or fp32 (no define, glslang ≥ 16: K_j, V_j, Q_i, dO_i, Pᵀ and dSᵀ in
// CM_SPLIT bf16 planes — K_j's and V_j's held as A fragments in registers
// for the whole kernel, Q_i's and dO_i's in shared memory plane by plane —
// each product the plane pairs i + j < CM_SPLIT (CM_MMA), a step's Pᵀ·dO_i
// and dSᵀ·Q_i summed from zero and added to dV and dK in fp32, both stored
// as fp32; MODE 1 only, KVREG ignored; no operand is filled (cm_fill): a
// dead row's −Inf in Q is zeroed with its row, and the backward's contract
// has no other infinite operand), Vulkan 1.3. Deterministic like bwd_dkdv: every dK/dV
// row is written by one workgroup, no atomics, a fixed loop order (query
// heads of the group in order, then query tiles in order — with STAGGER
// rotated per workgroup).
//
// Bindings (set 0), as bwd_dkdv:
//   0 Q [B,Nq,Hq,D] f16|bf16|f32   1 K [B,Nk,Hkv,D]   2 V [B,Nk,Hkv,DV]
//   3 dO [B,Nq,Hq,DV] (O's strides)   4 LSE [B,Hq,Nq] f32   5 D [B,Hq,Nq]
//   f32 (bwd_pre)   6 dK (K's strides, written)   7 dV (V's strides,
//   written)   8 Ext uint32 (ext.glsl; read when EXT = 1)   9 bias,
//   10 its summary (ext.glsl; read only with EXT's bias bit)
// ADDRESSED build: Q, K, V, dO, dK, dV at pc.addr[0 … 5] instead of
//   bindings 0 1 2 3 6 7 (params.glsl, Operands; 16-byte aligned addresses
//   when VEC = 1); LSE, D, Ext and the bias bindings stay bindings 4, 5,
//   8 … 10.
// Push constants: Params. Grid: (ceil(Nk/BC), Hkv, B); LSE and D are [Hq,Tq]
//   for packed sequences, whose workgroups work on their own sequence's
//   rows and keys (seq_nq, seq_nk, read_keys(): ext.glsl).
// Spec constants: 0 WG = NSG·SUBGROUP; 1 D, 2 DV (≤ 256); 3 BR query rows
//   per step (a multiple of CM_N and CM_K); 4 BC = NSG·CM_M keys per
//   workgroup (each subgroup owns CM_M keys; with FHALVES NSG·CM_M/2, each
//   pair owns CM_M keys); 5 SUBGROUP; 8 EXT
//   (ext.glsl); 10–14, 19–21 as cm_common.glsl (MODE 1 needs CM_N == CM_K
//   and the probe's aperm); 22 PREFETCH, 23 KVREG, 25 PART, 26 FHALVES
//   (below); 29 STAGGER (cm_common.glsl: each workgroup's steps from a
//   place of its own).
//
// Per key tile (K_j, V_j resident in shared memory, or in registers) and
// query step i (the steps whose rows see a key of the tile:
// query_first(first key) … query_limit(last key)−1, so a window skips the
// steps outside it; only steps crossing a key's first or last row are
// masked):
//   Sᵀ = K_j Q_iᵀ, dPᵀ = V_j dO_iᵀ (fp32 accumulators, CM_M keys × BR
//   queries per subgroup); Pᵀ = exp2(Sᵀ·scale·log2e − LSE_i·log2e) (with
//   EXT the score is ext_score(Sᵀ) instead; 0 where masked or LSE = −inf),
//   dSᵀ = Pᵀ ∘ (dPᵀ − D_i) (with EXT times the softcap's derivative
//   ext_dsoft(Sᵀ)), both rounded (nearest even) to the storage type as A
//   operands (fp32: split into planes); dV_j += Pᵀ dO_i, dK_j += dSᵀ Q_i (fp32); finally dK ·= scale.
//   MODE 1 does the elementwise step in registers (the accumulator layout
//   from flash_cm_probe: component i at row rowOf[i], column colOf[i]; A
//   component j = accumulator component aperm(j)); MODE 0 through shared
//   memory (any layout).
//
// Shared memory (bytes; shaders.BwdCMSharedBytes mirrors it):
//   16·(KV + BR·LDK4 + BR·LDV4) + 8·BR, KV = max(BC·LDK4, CM_M·CM_N/4,
//   PART 1: BC·LDV4) + BC·LDV4 (not PART 1) — with KVREG 16·max(KV,
//   BR·LDK4 + BR·LDV4) + 8·BR (Q_i and dO_i over K_j and V_j: sM below),
//   where the dK-only parts (PART ≥ 2) and FHALVES have KV =
//   max(BC·LDK4, CM_M·CM_N/4, BC·LDV4) (V_j staged where K_j was), and
//   FHALVES adds X = NSG·2·(BR/CM_N)·CM_M·CM_N/4 (the pairs' partial Sᵀ
//   and dPᵀ) to the Q_i, dO_i term;
//   fp32: 16·max(max(BC·LDK4, BC·LDV4, CM_M·CM_N/4, FHALVES: X) +
//   CM_SPLIT·BR·(LDK4 + LDV4), BC·LDK4O, BC·LDV4O) + 8·BR (LDK4O, LDV4O
//   = DP/4 + 1, DVP/4 + 1: fp32 rows of dK and dV, staged over the whole
//   array after the last step). With FHALVES DP and DVP are multiples of
//   twice the chunk.
//   + MODE 0: NSG·CM_M·(8·(BR+4) + 4·(BR+8)), and with dropout the step's
//   keep bits (ext.glsl, shaders.DropSharedBytes).
#extension GL_GOOGLE_include_directive : require
#define EXT_BINDING 8
#define BIAS_BINDING 9
#define DROP_ROWS BR
#define DROP_KEYS BC
#define DROP_LANES // (thread_index() in full subgroups: ext.glsl drop_fill)
#define EXT_HALF_TANH 1   // (ext.glsl: the softcap's tanh in fp16 with bf16 storage,
#define EXT_SOFTCAP_PASS 1 // and taken once per tile element ahead of the loops)
#include "params.glsl"
#include "attn_params.glsl"
#include "ext.glsl"
// FHALVES (below) is declared here: with it D and DV pad to twice
// cm_common.glsl's quantum, so that each half of the features is whole
// chunks (d 80: 96).
layout(constant_id = 26) const uint FHALVES = 0;
#define CM_PAD_D (PAD * (FHALVES + 1u))
#define CM_PAD_DV (PAD * (FHALVES + 1u))
#include "cm_common.glsl"

// REGS: the elementwise step runs in registers (MODE 1), and M0_SCRATCH:
// MODE 0's shared scratch exists. The fp32 build has no MODE 0: it runs
// every MODE as 1.
#if CM_SPLIT > 1
#define REGS true
#define M0_SCRATCH false
#else
#define REGS (MODE == 1u)
#define M0_SCRATCH (MODE == 0u)
#endif

// 23 KVREG: 1 keeps the subgroup's K_j and V_j rows as A fragments in
// registers for the whole kernel (fewer shared-memory loads per step, more
// registers; the 16-bit builds then stage Q_i and dO_i where K_j and V_j
// were: sM), 0 reloads them from shared memory at every step.
layout(constant_id = 23) const uint KVREG = 0;
// 22 PREFETCH: 1 loads the next step's Q, dO, LSE and D into registers
// while the current step computes (global latency hidden behind the
// MMAs), 0 loads them between the step's barriers.
layout(constant_id = 22) const uint PREFETCH = 0;
// 25 PART: 0 computes dK and dV; 1 dV only (Sᵀ and dV: V is not read,
// dPᵀ not computed, dK not written); 2 dK only (dV is not written); 3 and
// 4 dK's first ⌈n/2⌉ of its n column blocks of CM_N, and the rest. At
// large head dims the two accumulators together pass the register file:
// two launches, PART 1 and PART 2, hold one each for one more Sᵀ product
// (5 products per step instead of 4); with K_j and V_j in registers as
// well, PART 1, 3 and 4 (7 products: Sᵀ and dPᵀ in both halves).
layout(constant_id = 25) const uint PART = 0;
// 26 FHALVES (declared above; MODE 1, and KVREG in the 16-bit builds): 1
// pairs the subgroups over the head dim — the two of a pair own the same
// CM_M keys, each holding half of K_j's and V_j's feature chunks in
// registers (NKFH, NVFH from KF0, VF0: the fp32 build's three planes of
// both would fill the register file at d 128, the 16-bit builds' beside
// whole dK and dV at d 256); each computes Sᵀ and dPᵀ over its half for
// the step, stores them, and after a barrier adds its partner's (a + b =
// b + a: both hold the same sums), takes the whole elementwise step and
// computes its half of dK's and dV's column blocks (NDKS, NDVS from JK0,
// JV0): one launch where the 16-bit builds otherwise take three above
// d 128 (PART). 0 one subgroup per CM_M keys. The host asks for it with
// an even NSG, MODE 1, PART 0 and, in the 16-bit builds, KVREG (A_PLANES'
// shared-memory loads and MODE 0's scratch take whole keys).
const uint FSPL = FHALVES + 1u;
const bool WANT_DV = PART <= 1u;
const bool WANT_DK = PART != 1u;

OPERAND_V(0, 0, QBuf, q, readonly)
OPERAND_V(1, 1, KBuf, k, readonly)
OPERAND_V(2, 2, VBuf, v, readonly)
OPERAND_V(3, 3, dOBuf, do, readonly)
layout(std430, binding = 4) readonly buffer LBuf { float lse_buf[]; };
layout(std430, binding = 5) readonly buffer DBuf { float d_buf[]; };
OPERAND_V(4, 6, dKBuf, dk, writeonly)
OPERAND_V(5, 7, dVBuf, dv, writeonly)

CM_FETCH(fetch_q, q, q_base, D, false)
CM_FETCH(fetch_k, k, k_base, D, false)
CM_FETCH(fetch_v, v, v_base, DV, false)
CM_FETCH(fetch_do, do, o_base, DV, false)
CM_STORE(store_dk, dk, k_base, D)
CM_STORE(store_dv, dv, v_base, DV)

// Prefetch registers: this invocation's share of one step's tiles.
const uint NPQ = (BR * DP8 + WG - 1u) / WG;
const uint NPO = (BR * DVP8 + WG - 1u) / WG;
const uint NPL = (BR + WG - 1u) / WG;

// PREFETCH_STEP(s) loads step s's Q and dO chunks, LSE·log2e and D into
// pq, po, pl, pd (zero / −inf past Nq).
#define PREFETCH_STEP(s) \
	{ \
		uint pg = (s) / nqs; \
		uint ph = kvh * pc.group + pg; \
		uint pr0 = (qt0 + walk_at((s) - pg * nqs, nqs, tile.x)) * BR; \
		uint prows = min(BR, seq_nq - pr0); \
		[[unroll]] for (uint i = 0u; i < NPQ; ++i) { \
			uint e = tid + i * WG; \
			uint r = e / DP8; \
			pq[i] = (e < BR * DP8 && r < prows) ? fetch_q(b, pr0 + r, ph, e - r * DP8) : CM_CHUNK0; \
		} \
		[[unroll]] for (uint i = 0u; i < NPO; ++i) { \
			uint e = tid + i * WG; \
			uint r = e / DVP8; \
			po[i] = (e < BR * DVP8 && r < prows) ? fetch_do(b, pr0 + r, ph, e - r * DVP8) : CM_CHUNK0; \
		} \
		[[unroll]] for (uint i = 0u; i < NPL; ++i) { \
			uint r = tid + i * WG; \
			float l = r < prows ? lse_in(lse_buf[lse_index(b, ph, pr0 + r)]) : NEG_INF; \
			pl[i] = l == NEG_INF ? NEG_INF : l * LOG2E; \
			pd[i] = r < prows ? d_buf[lse_index(b, ph, pr0 + r)] : 0.0; \
		} \
	}

// SOFTMAX_M1(CAREFUL, MASKED), SOFTMAX_M0(CAREFUL): Pᵀ and dSᵀ of the
// subgroup's keys against the step's query rows, in registers (MODE 1, into
// pA and dsA) or through shared memory (MODE 0, into sP and sdS); CAREFUL as
// in params.glsl. MODE 1 without MASKED takes every element as visible: only
// for a step whose rows all see the whole key tile, none careful, none past
// the sequence's. With EXT the score is ext_score of the raw product Sᵀ and
// dPᵀ − D is scaled by ext_dsoft(Sᵀ) (dSᵀ is w.r.t. the capped score; a
// masked element's dSᵀ stays 0), both taken before MODE 1's P overwrites Sᵀ
// (MODE 1: ext_score_d, ALiBi's distance by ext_alibi_dist, and
// ext_dsoft_t of Sᵀ after EXT_SOFTCAP_TILE).
// With dropout Pᵀ·keep is dV's operand and dSᵀ = Pᵀ ∘ (keep·s·dPᵀ − D), s
// the kept elements' scale (dV's store applies it). MODE 1 writes only the A
// operands its PART uses (an unused one, written and dropped, crashed Mesa
// 26 lavapipe's shader compiler).
// DROP_KW (dropout in MODE 1, 32 mod CM_M = 0): a subgroup's CM_M keys
// (from sgk, a multiple of CM_M) lie in one keep word of each query row,
// at bits (sgk mod 32) + row: an element tests its bit of that word, which
// the components of one column share (with CM_COLS the compiler sees
// them: cm_common.glsl), where drop_keep reads a word per element and
// converts its bit.
#define SOFTMAX_M1(CAREFUL, MASKED) \
	[[unroll]] for (uint t = 0u; t < NST; ++t) { \
		[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) { \
			uint col = t * CM_N + colOf[i]; \
			uint kj = c0 + sgk + rowOf[i]; \
			float l2 = sL[col]; \
			bool vis = !(MASKED) || (l2 != NEG_INF && !(kj >= key_limit(r0 + col) || kj < key_first(r0 + col))); \
			float x = EXT != 0u ? ext_score_d(S[t][i], ext_alibi_dist(int(kj) - int(r0) - ext_off, col), BIAS_AT(bv, t, i)) : S[t][i] * sl2; \
			float keep = DROP_KW != 0u ? 1.0 : drop_keep(col, sgk + rowOf[i]); \
			bool kept = DROP_KW == 0u || (sDrop[col * DROP_WPR + (sgk >> 5u)] & (1u << ((sgk & 31u) + rowOf[i]))) != 0u; \
			float g = (kept ? dP[t][i] * (keep * dscale) : 0.0) - sDr[col]; \
			if (EXT != 0u) { \
				g *= ext_dsoft_t(S[t][i]); \
			} \
			float p = vis ? BWD_P(CAREFUL, x - l2, l2) : 0.0; \
			S[t][i] = kept ? p * keep : 0.0; \
			dP[t][i] = BWD_DS(CAREFUL, vis, p, g); \
		} \
		[[unroll]] for (uint j = 0u; j < CM_LEN; ++j) { \
			if (WANT_DV) { \
				CM_TO_A_PB(pA, NKC, t, j, S[t][aperm(j)]) \
			} \
			if (WANT_DK) { \
				CM_TO_A(dsA, NKC, t, j, dP[t][aperm(j)]) \
			} \
		} \
	}
#define SOFTMAX_M0(CAREFUL) \
	for (uint e = lane; e < CM_M * BR; e += SUBGROUP) { \
		uint kr = e / BR; \
		uint col = e - kr * BR; \
		uint kj = c0 + sgk + kr; \
		float l2 = sL[col]; \
		bool vis = l2 != NEG_INF && !(need_mask && (kj >= key_limit(r0 + col) || kj < key_first(r0 + col))); \
		uint si = (sgk + kr) * LDS + col; \
		float x = EXT != 0u ? ext_score(sS[si], r0 + col, kj) : sS[si] * sl2; \
		float keep = drop_keep(col, sgk + kr); \
		float g = sdP[si] * (keep * dscale) - sDr[col]; \
		if (EXT != 0u) { \
			g *= ext_dsoft(sS[si]); \
		} \
		float p = vis ? BWD_P(CAREFUL, x - l2, l2) : 0.0; \
		uint pi = (sgk + kr) * LDP + col; \
		sP[pi] = CM_TO_PB(p * keep); \
		sdS[pi] = CM_TO(BWD_DS(CAREFUL, vis, p, g)); \
	}

const uint KB = NSG / FSPL * CM_M;           // keys per workgroup (= BC)
const uint NST = BR / CM_N;                  // Sᵀ/dPᵀ accumulators per subgroup
const uint DROP_KW = ((EXT & EXT_ON_DROPOUT) != 0u ? 1u : 0u) * (REGS ? 1u : 0u) * (32u % CM_M == 0u ? 1u : 0u); // (SOFTMAX_M1)
const uint NKC = BR / CM_K;                  // query chunks of the dV/dK products
const uint NDK_ALL = DP / CM_N;              // dK's column blocks (PART 3, 4: at least 2)
const uint DK_J0 = PART == 4u ? (NDK_ALL + 1u) / 2u : 0u; // the first one this PART computes
const uint NDK = PART == 3u ? (NDK_ALL + 1u) / 2u : NDK_ALL - DK_J0; // dK accumulators
const uint NDV = DVP / CM_N;                 // dV accumulators
const uint NKF = DP / CM_K;                  // feature chunks of Sᵀ
const uint NVF = DVP / CM_K;                 // feature chunks of dPᵀ
const uint NKFH = NKF / FSPL;                // the subgroup's (FHALVES)
const uint NVFH = NVF / FSPL;
const uint NDKS = NDK / FSPL;                // its dK and dV accumulators
const uint NDVS = NDV / FSPL;
// Q_i and dO_i in CM_SPLIT planes (fp32 storage; one otherwise), plane i
// at unit i·QPL (i·OPL).
const uint QPL = BR * LDK4;
const uint OPL = BR * LDV4;
const uint MAP4 = CM_M * CM_N / 4u;
// One shared array, sM: K_j's staging at unit 0 (SK_N units: the layout
// map's scratch too, and where dK — PART 1: dV — leaves; fp32: K_j and
// V_j pass through it one plane at a time into registers, and dK, then
// dV, leave from unit 0 as fp32, LDK4O, LDV4O 16-byte units per row, over
// Q_i's and dO_i's planes as well, after the last step), V_j's
// at SV0 (SV_N units; dV leaves there; none in PART 1 and fp32), then
// Q_i's and dO_i's planes at SQ0 and SO0. With KVREG (16-bit) K_j and V_j
// are read from shared memory only at the kernel's start and dK and dV
// staged there only at its end, after the last step: Q_i and dO_i lie
// over them (SQ0 = 0), so that a step of more query rows fits; the parts
// that write dK only, and the pairs over the features, stage V_j in K_j's
// place once K_j is in registers (KV_SEQ: SV0 = 0, SV_N = 0; the pairs
// then let dK, then dV, leave through unit 0). The pairs' partial Sᵀ and
// dPᵀ lie at XOFF: in K_j's staging (fp32), after Q_i's and dO_i's planes
// (16-bit).
#if CM_SPLIT > 1
const uint LDK4O = DP / CM_OUT_EL + 1u;
const uint LDV4O = DVP / CM_OUT_EL + 1u;
const uint SK_IN = KB * LDK4 > KB * LDV4 ? KB * LDK4 : KB * LDV4;
const uint SK_OUT = KB * LDK4O > KB * LDV4O ? KB * LDK4O : KB * LDV4O;
const uint SK_INM = SK_IN > MAP4 ? SK_IN : MAP4;
// FHALVES: every subgroup's partial Sᵀ and dPᵀ (MAP4 units per
// accumulator) at unit 0, between the first step and the last.
const uint SK_X = FSPL > 1u ? NSG * 2u * NST * MAP4 : 0u;
const uint SK_N = SK_INM > SK_X ? SK_INM : SK_X;
const uint SV_N = 0u;
const bool KV_ALIAS = false;
const bool KV_SEQ = false;
#else
const uint SK_A = KB * LDK4 > MAP4 ? KB * LDK4 : MAP4;
const uint SK_B = SK_A > KB * LDV4 ? SK_A : KB * LDV4;
const uint KV_SEQ_N = (KVREG != 0u ? 1u : 0u) * ((WANT_DV ? 0u : 1u) + FHALVES); // (no && or || here: glslang 15 then emits a use before its definition)
const bool KV_SEQ = KV_SEQ_N != 0u;
const uint SK_N = PART == 1u || KV_SEQ ? SK_B : SK_A; // (PART 1 stages dV in K_j's place)
const uint SV_N = WANT_DK && !KV_SEQ ? KB * LDV4 : 0u;
const bool KV_ALIAS = KVREG != 0u;
#endif
const uint SV0 = KV_SEQ ? 0u : SK_N;
const uint SKV_N = SK_N + SV_N;
const uint SQO_N = CM_SPLIT * (QPL + OPL);
const uint SQ0 = KV_ALIAS ? 0u : SKV_N;
const uint SO0 = SQ0 + CM_SPLIT * QPL;
#if CM_SPLIT > 1
const uint XOFF = 0u;
const uint SM_KQ = SKV_N + SQO_N;
const uint SM_N = SM_KQ > SK_OUT ? SM_KQ : SK_OUT;
#else
const uint XOFF = SQ0 + SQO_N;
const uint SM_QX = SQO_N + (FSPL > 1u ? NSG * 2u * NST * MAP4 : 0u);
const uint SM_N = KV_ALIAS ? (SKV_N > SM_QX ? SKV_N : SM_QX) : SKV_N + SM_QX;
#endif
shared uvec4 sM[SM_N];
shared float sL[BR];  // LSE·log2e of the step's rows (−inf past Nq)
shared float sDr[BR]; // D of the step's rows

// MODE 0 scratch, per subgroup: Sᵀ and dPᵀ (fp32), Pᵀ and dSᵀ (CM_T).
const uint LDS = BR + 4u;
const uint LDP = BR + 8u;
const uint S0_N = M0_SCRATCH ? NSG * CM_M * LDS : 1u;
const uint P0_N = M0_SCRATCH ? NSG * CM_M * LDP : 1u;
shared float sS[S0_N];
shared float sdP[S0_N];
shared CM_T sP[P0_N];
shared CM_T sdS[P0_N];

// next_step is the first step s' ≥ s (of nsteps: the group's query heads
// in order, query tiles qt0 … qt0+nqs−1 within each) in which the bias
// leaves some key c0 … clast visible to some row (s itself without a
// bias; nsteps if none): the steps walked, so that a hidden step is
// neither loaded nor prefetched. Uniform arguments, uniform answer.
uint next_step(uint s, uint b, uint kvh, uint qt0, uint nqs, uint nsteps, uint c0, uint clast) {
	if ((EXT & EXT_ON_BIAS) == 0u) {
		return s;
	}
	while (s < nsteps) {
		uint g = s / nqs;
		uint qt = qt0 + s - g * nqs;
		uint q = bias_next_query_tile(b, kvh * pc.group + g, qt, qt0 + nqs, BR, c0, clast);
		if (q < qt0 + nqs) {
			return g * nqs + (q - qt0);
		}
		s = (g + 1u) * nqs;
	}
	return nsteps;
}

// A_PLANES(A, REG, NF, U0, LD): the subgroup's A fragments of key rows
// sgk … sgk+CM_M−1, features kk·CM_K …, of K_j or V_j: fp32, plane i held
// in REG[i·NF + kk], into A[i]; 16-bit, with KVREG the one held in
// REG[kk], else loaded from the tile at unit U0 of sM (row stride LD).
#if CM_SPLIT > 1
#define A_PLANES(A, REG, NF, U0, LD) \
	[[unroll]] for (uint pl_ = 0u; pl_ < CM_SPLIT; ++pl_) { \
		A[pl_] = REG[pl_ * (NF) + kk]; \
	}
#else
#define A_PLANES(A, REG, NF, U0, LD) \
	if (KVREG != 0u) { \
		A[0] = REG[kk]; \
	} else { \
		coopMatLoad(A[0], sM, (U0) + sgk * LD + kk * (CM_K / 8u), LD, gl_CooperativeMatrixLayoutRowMajor); \
	}
#endif

void main() {
	uint tid = thread_index();
	uint sg = gl_SubgroupID;
	uint lane = gl_SubgroupInvocationID;
	uvec2 tile = grid_tile(28u, (pc.Nk + KB - 1u) / KB); // (key tile, KV head)
	uint kvh = tile.y;
	uint b = gl_WorkGroupID.z;
	uint c0 = tile.x * KB;
	uint half_ = sg % FSPL; // (FHALVES: which half of the features)
	uint sgk = sg / FSPL * CM_M; // the subgroup's first key within the tile
	uint KF0 = half_ * NKFH; // its first K_j and V_j chunks (per plane)
	uint VF0 = half_ * NVFH;
	uint JK0 = half_ * NDKS; // its first dK and dV column blocks
	uint JV0 = half_ * NDVS;
	float sl2 = pc.scale * LOG2E;
	float dscale = drop_scale(); // (1 without dropout)
	ext_begin(b);
	if (c0 >= seq_nk) {
		return; // past a packed sequence's keys (uniform)
	}
	// The tile's keys: cols stored (dK and dV written, 0 for a key no row
	// sees), the first kn read (with EXT, SeqUsedK may end the sequence
	// inside the tile; no key past it is read: ext.glsl).
	uint cols = min(KB, seq_nk - c0);
	uint kn = min(cols, max(read_keys(), c0) - c0);

	uint rowOf[CM_LEN];
	uint colOf[CM_LEN];
	uint colmin = 0u; // (the layout map's, for CM_COLS_FORM)
	if (REGS) {
		CM_LAYOUT_MAP(sM, rowOf, colOf, colmin)
		CM_COLS_FORM(colOf, colmin)
	}

#if CM_SPLIT > 1
	// fp32: K_j's and V_j's planes, one at a time through sM, into A
	// fragments held for the whole kernel (kR[pl·NKFH + kk], vR[pl·NVFH +
	// kk]: with FHALVES the subgroup's half of the features).
	MATA kR[CM_SPLIT * NKFH];
	MATA vR[WANT_DK ? CM_SPLIT * NVFH : 1u];
	[[unroll]] for (uint pl = 0u; pl < CM_SPLIT; ++pl) {
		barrier(); // (sM is free: the layout map, the previous plane)
		CM_STAGE(sM, 0u, LDK4, KB, DP8, r < kn ? CM_PLANE(fetch_k(b, c0 + r, kvh, c4), pl) : uvec4(0u))
		barrier();
		CM_LOAD_A_AT(kR, pl * NKFH, NKFH, sM, sgk * LDK4 CM_AT_CHUNK(KF0), LDK4)
		if (WANT_DK) {
			barrier();
			CM_STAGE(sM, 0u, LDV4, KB, DVP8, r < kn ? CM_PLANE(fetch_v(b, c0 + r, kvh, c4), pl) : uvec4(0u))
			barrier();
			CM_LOAD_A_AT(vR, pl * NVFH, NVFH, sM, sgk * LDV4 CM_AT_CHUNK(VF0), LDV4)
		}
	}
#else
	// K_j and V_j into shared memory: there for the whole kernel, or with
	// KVREG into registers, and the steps' Q_i and dO_i over them after the
	// first step's barrier.
	CM_STAGE(sM, 0u, LDK4, KB, DP8, r < kn ? fetch_k(b, c0 + r, kvh, c4) : uvec4(0u))
	if (WANT_DK && !KV_SEQ) {
		CM_STAGE(sM, SV0, LDV4, KB, DVP8, r < kn ? fetch_v(b, c0 + r, kvh, c4) : uvec4(0u))
	}

	MATA kR[KVREG != 0u ? NKFH : 1u];
	MATA vR[KVREG != 0u && WANT_DK ? NVFH : 1u];
	if (KVREG != 0u) {
		barrier();
		[[unroll]] for (uint kk = 0u; kk < NKFH; ++kk) {
			coopMatLoad(kR[kk], sM, sgk * LDK4 + (KF0 + kk) * (CM_K / 8u), LDK4, gl_CooperativeMatrixLayoutRowMajor);
		}
		if (KV_SEQ) { // V_j in K_j's place, once every subgroup holds K_j
			barrier();
			CM_STAGE(sM, 0u, LDV4, KB, DVP8, r < kn ? fetch_v(b, c0 + r, kvh, c4) : uvec4(0u))
			barrier();
		}
		if (WANT_DK) {
			[[unroll]] for (uint kk = 0u; kk < NVFH; ++kk) {
				coopMatLoad(vR[kk], sM, SV0 + sgk * LDV4 + (VF0 + kk) * (CM_K / 8u), LDV4, gl_CooperativeMatrixLayoutRowMajor);
			}
		}
	}
#endif

	ACC dK[WANT_DK ? NDKS : 1u];
	ACC dV[WANT_DV ? NDVS : 1u];
	[[unroll]] for (uint j = 0u; j < (WANT_DK ? NDKS : 1u); ++j) {
		dK[j] = ACC(0.0);
	}
	[[unroll]] for (uint j = 0u; j < (WANT_DV ? NDVS : 1u); ++j) {
		dV[j] = ACC(0.0);
	}

	// Query rows that see a key of the tile: query_first(c0) …
	// query_limit(last)−1 (both non-decreasing in the key), last the tile's
	// last key read.
	uint qfirst = query_first(c0);
	uint qt0 = qfirst / BR;
	uint nqt = 0u; // no query row sees these keys: dK = dV = 0
	if (kn > 0u && qfirst < seq_nq) {
		nqt = (query_limit(c0 + kn - 1u) + BR - 1u) / BR;
	}

	// Steps: query heads of the group in order, query tiles qt0 … nqt−1 in
	// order within each, or with STAGGER from a place of the workgroup's
	// own (walk_at; a fixed order either way: the sums are deterministic).
	uint nqs = nqt > qt0 ? nqt - qt0 : 0u;
	uint nsteps = pc.group * nqs;
	CM_CHUNK pq[NPQ];
	CM_CHUNK po[NPO];
	float pl[NPL];
	float pd[NPL];
	// The steps walked skip those the bias hides from every key of the
	// tile (stn is the next one; st + 1 without a bias).
	uint clast = c0 + kn - 1u;
	uint stn = next_step(0u, b, kvh, qt0, nqs, nsteps, c0, clast);
	if (PREFETCH != 0u && stn < nsteps) {
		PREFETCH_STEP(stn)
	}
	for (uint st = stn; st < nsteps; st = stn) {
		uint g = st / nqs;
		uint h = kvh * pc.group + g;
		uint r0 = (qt0 + walk_at(st - g * nqs, nqs, tile.x)) * BR;
		uint rows = min(BR, seq_nq - r0);
		ext_head(b, h);
		stn = next_step(st + 1u, b, kvh, qt0, nqs, nsteps, c0, clast);
		{
			barrier(); // every subgroup is done with the previous step's tiles
			if (PREFETCH != 0u) {
				[[unroll]] for (uint i = 0u; i < NPQ; ++i) {
					uint e = tid + i * WG;
					uint r = e / DP8;
					if (e < BR * DP8) {
						CM_PUT(sM, SQ0 + r * LDK4 + (e - r * DP8), QPL, pq[i])
					}
				}
				[[unroll]] for (uint i = 0u; i < NPO; ++i) {
					uint e = tid + i * WG;
					uint r = e / DVP8;
					if (e < BR * DVP8) {
						CM_PUT(sM, SO0 + r * LDV4 + (e - r * DVP8), OPL, po[i])
					}
				}
				[[unroll]] for (uint i = 0u; i < NPL; ++i) {
					uint r = tid + i * WG;
					if (r < BR) {
						sL[r] = pl[i];
						sDr[r] = pd[i];
					}
				}
			} else {
				for (uint e = tid; e < BR * DP8; e += WG) {
					uint r = e / DP8;
					uint c4 = e - r * DP8;
					CM_PUT(sM, SQ0 + r * LDK4 + c4, QPL, r < rows ? fetch_q(b, r0 + r, h, c4) : CM_CHUNK0)
				}
				for (uint e = tid; e < BR * DVP8; e += WG) {
					uint r = e / DVP8;
					uint c4 = e - r * DVP8;
					CM_PUT(sM, SO0 + r * LDV4 + c4, OPL, r < rows ? fetch_do(b, r0 + r, h, c4) : CM_CHUNK0)
				}
				for (uint r = tid; r < BR; r += WG) {
					float l = r < rows ? lse_in(lse_buf[lse_index(b, h, r0 + r)]) : NEG_INF;
					sL[r] = l == NEG_INF ? NEG_INF : l * LOG2E;
					sDr[r] = r < rows ? d_buf[lse_index(b, h, r0 + r)] : 0.0;
				}
			}
			drop_fill(r0, c0, tid, WG); // (dropout: the step's keep bits)
			barrier();
			// A step with a careful row (dead, or a huge LSE; params.glsl)
			// takes the careful softmax, and a dead row's Q and dO are zeroed
			// so that 0·(±Inf or NaN) cannot reach dK and dV (in plane 0:
			// the lower planes of an Inf or NaN are 0, of a finite value
			// finite). Rare.
			bool careful;
			CAREFUL_ROWS(careful, sL, rows)
			if (careful) {
				for (uint e = tid; e < BR * LDK4; e += WG) {
					uint r = e / LDK4;
					if (r < rows && sL[r] == NEG_INF) {
						sM[SQ0 + e] = uvec4(0u);
					}
				}
				for (uint e = tid; e < BR * LDV4; e += WG) {
					uint r = e / LDV4;
					if (r < rows && sL[r] == NEG_INF) {
						sM[SO0 + e] = uvec4(0u);
					}
				}
				barrier();
			}
			// The next step's tiles load into registers while this one computes.
			if (PREFETCH != 0u && stn < nsteps) {
				PREFETCH_STEP(stn)
			}

			// No mask needed when the step's first row sees every key of the
			// tile up to its end and its last row from its start, and the
			// step has BR rows (rows past the sequence's have LSE −inf).
			bool need_mask = key_limit(r0) < c0 + KB || key_first(r0 + rows - 1u) > c0 || rows < BR;

			// MODE 1 with a bias: the subgroup's bias values (Sᵀ's
			// component i of accumulator t: query r0 + t·CM_N + colOf[i],
			// key c0 + sgk + rowOf[i]), loaded before the MMAs are issued.
			float bv[REGS ? BIAS_FRAG_N(NST) : 1u];
			if (REGS) {
				BIAS_FRAG(bv, NST, r0 + t * CM_N + colOf[i], c0 + sgk + rowOf[i])
			}

			ACC S[NST];
			ACC dP[NST];
			[[unroll]] for (uint t = 0u; t < NST; ++t) {
				S[t] = ACC(0.0);
				dP[t] = ACC(0.0);
			}
			// Sᵀ = K_j Q_iᵀ, dPᵀ = V_j dO_iᵀ (fp32: over the plane pairs,
			// CM_MMA; K_j's and V_j's planes held in registers).
			[[unroll]] for (uint kk = 0u; kk < NKFH; ++kk) {
				MATA kA[CM_SPLIT];
				A_PLANES(kA, kR, NKFH, 0u, LDK4)
				[[unroll]] for (uint t = 0u; t < NST; ++t) {
					CM_MMA(S[t], kA, 1u, 0u, sM, SQ0 + (t * CM_N) * LDK4 + (KF0 + kk) * (CM_K / 8u), QPL, LDK4, gl_CooperativeMatrixLayoutColumnMajor)
				}
			}
			[[unroll]] for (uint kk = 0u; kk < (WANT_DK ? NVFH : 0u); ++kk) {
				MATA vA[CM_SPLIT];
				A_PLANES(vA, vR, NVFH, SV0, LDV4)
				[[unroll]] for (uint t = 0u; t < NST; ++t) {
					CM_MMA(dP[t], vA, 1u, 0u, sM, SO0 + (t * CM_N) * LDV4 + (VF0 + kk) * (CM_K / 8u), OPL, LDV4, gl_CooperativeMatrixLayoutColumnMajor)
				}
			}
			if (FSPL > 1u) {
				// The pair's partial Sᵀ and dPᵀ (each over its half of the
				// features) summed.
				CM_PAIR_SUM(S, dP, NST, sM, XOFF, sg)
			}

			MATA pA[CM_SPLIT * NKC];
			MATA dsA[CM_SPLIT * NKC];
#if CM_SPLIT > 1
			{ // (the fp32 build runs MODE 1 only: the host never asks for 0)
#else
			if (MODE == 1u) {
#endif
				EXT_SOFTCAP_TILE(S, NST)
				if (careful) {
					SOFTMAX_M1(true, true)
				} else if (need_mask) {
					SOFTMAX_M1(false, true)
				} else {
					SOFTMAX_M1(false, false)
				}
			}
#if CM_SPLIT == 1
			else {
				[[unroll]] for (uint t = 0u; t < NST; ++t) {
					coopMatStore(S[t], sS, sgk * LDS + t * CM_N, LDS, gl_CooperativeMatrixLayoutRowMajor);
					coopMatStore(dP[t], sdP, sgk * LDS + t * CM_N, LDS, gl_CooperativeMatrixLayoutRowMajor);
				}
				subgroupMemoryBarrierShared();
				subgroupBarrier();
				if (careful) {
					SOFTMAX_M0(true)
				} else {
					SOFTMAX_M0(false)
				}
				subgroupMemoryBarrierShared();
				subgroupBarrier();
				[[unroll]] for (uint t = 0u; t < NKC; ++t) {
					coopMatLoad(pA[t], sP, sgk * LDP + t * CM_K, LDP, gl_CooperativeMatrixLayoutRowMajor);
					coopMatLoad(dsA[t], sdS, sgk * LDP + t * CM_K, LDP, gl_CooperativeMatrixLayoutRowMajor);
				}
			}
#endif

			// dV_j += Pᵀ dO_i, dK_j += dSᵀ Q_i; fp32: each column block's
			// step summed from zero and added in fp32 (CM_ADD_TILE).
#if CM_SPLIT > 1
			[[unroll]] for (uint j = 0u; j < (WANT_DV ? NDVS : 0u); ++j) {
				ACC tile = ACC(0.0);
				[[unroll]] for (uint t = 0u; t < NKC; ++t) {
					CM_MMA(tile, pA, NKC, t, sM, SO0 + (t * CM_K) * LDV4 + (JV0 + j) * (CM_N / 8u), OPL, LDV4, gl_CooperativeMatrixLayoutRowMajor)
				}
				CM_ADD_TILE(dV[j], tile)
			}
			[[unroll]] for (uint j = 0u; j < (WANT_DK ? NDKS : 0u); ++j) {
				ACC tile = ACC(0.0);
				[[unroll]] for (uint t = 0u; t < NKC; ++t) {
					CM_MMA(tile, dsA, NKC, t, sM, SQ0 + (t * CM_K) * LDK4 + (DK_J0 + JK0 + j) * (CM_N / 8u), QPL, LDK4, gl_CooperativeMatrixLayoutRowMajor)
				}
				CM_ADD_TILE(dK[j], tile)
			}
#else
			[[unroll]] for (uint t = 0u; t < NKC; ++t) {
				[[unroll]] for (uint j = 0u; j < (WANT_DV ? NDVS : 0u); ++j) {
					CM_MMA(dV[j], pA, NKC, t, sM, SO0 + (t * CM_K) * LDV4 + (JV0 + j) * (CM_N / 8u), OPL, LDV4, gl_CooperativeMatrixLayoutRowMajor)
				}
				[[unroll]] for (uint j = 0u; j < (WANT_DK ? NDKS : 0u); ++j) {
					CM_MMA(dK[j], dsA, NKC, t, sM, SQ0 + (t * CM_K) * LDK4 + (DK_J0 + JK0 + j) * (CM_N / 8u), QPL, LDK4, gl_CooperativeMatrixLayoutRowMajor)
				}
			}
#endif
		}
	}

#if CM_SPLIT > 1
	// dK·scale, then dV, as fp32 → shared (sM) → global.
	// The units of the part's column blocks of dK, from KCH0 (all of DP
	// but in PART 3 and 4, which the host never asks of this build).
	const uint KCH0 = DK_J0 * (CM_N / CM_OUT_EL);
	const uint KCH = NDK * (CM_N / CM_OUT_EL); // units per dK row
	const uint VCH = DVP / CM_OUT_EL;
	if (WANT_DK) {
		barrier();
		[[unroll]] for (uint j = 0u; j < NDKS; ++j) {
			coopMatStore(dK[j] * pc.scale, sM, sgk * LDK4O + (JK0 + j) * (CM_N / CM_OUT_EL), LDK4O, gl_CooperativeMatrixLayoutRowMajor);
		}
		barrier();
		for (uint e = tid; e < KB * KCH; e += WG) {
			uint r = e / KCH;
			uint c4 = e - r * KCH;
			if (r < cols) {
				store_dk(b, c0 + r, kvh, KCH0 + c4, sM[r * LDK4O + c4]);
			}
		}
	}
	if (WANT_DV) {
		barrier();
		[[unroll]] for (uint j = 0u; j < NDVS; ++j) {
			coopMatStore(dV[j] * dscale, sM, sgk * LDV4O + (JV0 + j) * (CM_N / CM_OUT_EL), LDV4O, gl_CooperativeMatrixLayoutRowMajor);
		}
		barrier();
		for (uint e = tid; e < KB * VCH; e += WG) {
			uint r = e / VCH;
			uint c4 = e - r * VCH;
			if (r < cols) {
				store_dv(b, c0 + r, kvh, c4, sM[r * LDV4O + c4]);
			}
		}
	}
#else
	if (FSPL > 1u) {
		// The pairs over the features (V_j had no place of its own:
		// KV_SEQ): dK·scale, then dV, → storage type → shared at unit 0,
		// each subgroup its half of the columns → global.
		const uint DKU0 = DK_J0 * (CM_N / 8u);
		const uint DKU = NDK * (CM_N / 8u);
		if (WANT_DK) {
			barrier();
			[[unroll]] for (uint j = 0u; j < NDKS; ++j) {
				ACC16 o16 = CM_NARROW(dK[j] * pc.scale);
				coopMatStore(o16, sM, sgk * LDK4 + (JK0 + j) * (CM_N / 8u), LDK4, gl_CooperativeMatrixLayoutRowMajor);
			}
			barrier();
			for (uint e = tid; e < KB * DKU; e += WG) {
				uint r = e / DKU;
				uint c4 = e - r * DKU;
				if (r < cols) {
					store_dk(b, c0 + r, kvh, DKU0 + c4, sM[r * LDK4 + c4]);
				}
			}
		}
		if (WANT_DV) {
			barrier();
			[[unroll]] for (uint j = 0u; j < NDVS; ++j) {
				ACC16 o16 = CM_NARROW(dV[j] * dscale);
				coopMatStore(o16, sM, sgk * LDV4 + (JV0 + j) * (CM_N / 8u), LDV4, gl_CooperativeMatrixLayoutRowMajor);
			}
			barrier();
			for (uint e = tid; e < KB * DVP8; e += WG) {
				uint r = e / DVP8;
				uint c4 = e - r * DVP8;
				if (r < cols) {
					store_dv(b, c0 + r, kvh, c4, sM[r * LDV4 + c4]);
				}
			}
		}
		return;
	}
	// dK·scale, dV → storage type → shared (over K_j, V_j — with KVREG
	// where the last step's Q_i, dO_i were; PART 1: dV over K_j) → global.
	barrier();
	if (WANT_DK) {
		[[unroll]] for (uint j = 0u; j < NDK; ++j) {
			ACC16 o16 = CM_NARROW(dK[j] * pc.scale);
			coopMatStore(o16, sM, sgk * LDK4 + j * (CM_N / 8u), LDK4, gl_CooperativeMatrixLayoutRowMajor);
		}
	}
	if (WANT_DV) {
		[[unroll]] for (uint j = 0u; j < NDV; ++j) {
			ACC16 o16 = CM_NARROW(dV[j] * dscale);
			if (WANT_DK) {
				coopMatStore(o16, sM, SV0 + sgk * LDV4 + j * (CM_N / 8u), LDV4, gl_CooperativeMatrixLayoutRowMajor);
			} else {
				coopMatStore(o16, sM, sgk * LDV4 + j * (CM_N / 8u), LDV4, gl_CooperativeMatrixLayoutRowMajor);
			}
		}
	}
	barrier();
	if (WANT_DK) {
		// The units of the part's column blocks, from DKU0 (DP8 of them
		// but in PART 3 and 4).
		const uint DKU0 = DK_J0 * (CM_N / 8u);
		const uint DKU = NDK * (CM_N / 8u);
		for (uint e = tid; e < KB * DKU; e += WG) {
			uint r = e / DKU;
			uint c4 = e - r * DKU;
			if (r < cols) {
				store_dk(b, c0 + r, kvh, DKU0 + c4, sM[r * LDK4 + c4]);
			}
		}
	}
	if (WANT_DV) {
		for (uint e = tid; e < KB * DVP8; e += WG) {
			uint r = e / DVP8;
			uint c4 = e - r * DVP8;
			if (r < cols) {
				store_dv(b, c0 + r, kvh, c4, sM[(WANT_DK ? SV0 : 0u) + r * LDV4 + c4]);
			}
		}
	}
#endif
}
