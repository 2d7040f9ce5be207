#version 450
// bwd_cm_dq: FlashAttention-2 backward, dQ, on cooperative matrices
// (VK_KHR_cooperative_matrix, subgroup scope). fp16 storage
// (-DSTORAGE_F16=1), bf16 (-DSTORAGE_BF16=1, glslang ≥ 16; cm_types.glsl)
// or fp32 (no define, glslang ≥ 16: Q_i, dO_i, K_j, V_j and dS in CM_SPLIT
// bf16 planes, each product the plane pairs i + j < CM_SPLIT (CM_MMA), a
// tile's dS·K_j summed from zero and added to dQ in fp32, dQ stored as
// fp32; MODE 1 only), Vulkan 1.3. Deterministic like bwd_dq: every dQ row
// is written by one workgroup, no atomics, key tiles in a fixed order (with
// STAGGER rotated per workgroup).
//
// Bindings (set 0), as bwd_dq:
//   0 Q [B,Nq,Hq,D] f16|bf16|f32   1 K [B,Nk,Hkv,D]   2 V [B,Nk,Hkv,DV]
//   3 dO [B,Nq,Hq,DV] (O's strides)   4 LSE [B,Hq,Nq] f32   5 D [B,Hq,Nq]
//   f32 (bwd_pre)   6 dQ (Q's strides, written)   7 Ext uint32 (ext.glsl;
//   read when EXT = 1)   8 bias, 9 its summary, 10 dS target (written:
//   dBias; ext.glsl, read and written only with EXT's bias bits)
// ADDRESSED build: Q, K, V, dO, dQ at pc.addr[0 … 4] instead of bindings
//   0 1 2 3 6 (params.glsl, Operands; 16-byte aligned addresses when
//   VEC = 1); LSE, D, Ext and the bias bindings stay bindings 4, 5, 7 …
//   10.
// Push constants: Params. Grid: (ceil(Nq/BR), Hq, B); LSE and D are [Hq,Tq]
//   for packed sequences, whose workgroups work on their own sequence's
//   rows and keys (seq_nq, seq_nk, read_keys(): ext.glsl).
// Spec constants: 0 WG = NSG·SUBGROUP; 1 D, 2 DV (≤ 256); 3 BR =
//   NSG·CM_M·ROWBLK query rows per workgroup (each subgroup owns ROWBLK
//   blocks of CM_M rows; with PAIRS or FHALVES NSG·CM_M/2, each pair owns
//   CM_M rows); 4 BC keys per
//   tile (a multiple of CM_N and CM_K); 5 SUBGROUP; 8 EXT (ext.glsl);
//   10–14, 19–21 as cm_common.glsl; 22 PREFETCH, 24 PAIRS, 26 FHALVES,
//   27 ROWBLK (below); 29 STAGGER (cm_common.glsl: each workgroup's key tiles from a
//   place of its own).
//
// Q_i and dO_i are held as A operands in registers; per key tile that some
// row of the workgroup sees (key_first(first row) … key_limit(last row)−1:
// a window skips the tiles outside it; only tiles crossing a row's first
// or last key are masked) (K_j, V_j through shared memory): S = Q_i K_jᵀ,
// dP = dO_i V_jᵀ (fp32), P = exp2(S·scale·log2e − LSE·log2e) (with EXT the
// score is ext_score(S) instead; 0 where masked or LSE = −inf), dS = P ∘
// (dP − D) (with EXT times the softcap's derivative ext_dsoft(S)) rounded
// (nearest even) to the storage type (fp32: split into planes), dQ_i +=
// dS K_j (fp32); finally dQ ·=
// scale. With PAIRS (MODE 1, 16-bit storage) two subgroups share CM_M
// rows (BR = NSG·CM_M/2): each computes S and dP for its half of the key
// tile and dQ for its half of the columns, and the pair exchanges dS
// through V_j's staging, which dP no longer needs (two more barriers per
// tile) — one subgroup's Q_i, dO_i and half of dQ fit the registers where
// a whole dQ beside Q_i and dO_i (d 256) does not. With FHALVES (fp32)
// two subgroups share CM_M rows the other way: each holds half of Q_i's
// and dO_i's features, the pair adds its partial S and dP through shared
// memory, and each computes dQ for half of the columns.
// With a bias, key tiles it hides from every row are skipped
// (bias_next_key_tile), and with dBias each dS (before the softcap's derivative)
// is stored (dbias_store). MODE 1 does the elementwise step in registers, MODE 0 through
// shared memory.
//
// Shared memory (bytes; shaders.BwdCMSharedBytes mirrors it):
//   16·max(BR·LDK4, BR·LDV4, BR·LDQ4, CM_SPLIT·BC·(LDK4+LDV4), CM_M·CM_N/4)
//   + 8·BR (LDQ4 = DP/CM_OUT_EL + 1: LDK4 for 16-bit storage)
//   + MODE 0: NSG·CM_M·(8·(BC+4) + 2·(BC+8)), and with dropout the tile's
//   keep bits (ext.glsl, shaders.DropSharedBytes). PAIRS needs BR·(BC+8)
//   ≤ BC·LDV4·8 (dS in V_j's place). FHALVES: the K/V tiles' part of the
//   max is 16·(CM_SPLIT·BC·(LDK4+LDV4) + NSG·2·(BC/CM_N)·CM_M·CM_N/4),
//   the pairs' partial S and dP after the tiles.
#extension GL_GOOGLE_include_directive : require
#define EXT_BINDING 7
#define BIAS_BINDING 8
#define DBIAS_BINDING 10
#define DROP_ROWS BR
#define DROP_KEYS BC
#define DROP_LANES // (thread_index() in full subgroups: ext.glsl drop_fill)
#define EXT_HALF_TANH 1   // (ext.glsl: the softcap's tanh in fp16 with bf16 storage,
#define EXT_SOFTCAP_PASS 1 // and taken once per tile element ahead of the loops)
#include "params.glsl"
#include "attn_params.glsl"
#include "ext.glsl"
#if !defined(STORAGE_F16) && !defined(STORAGE_BF16)
// The fp32 build's FHALVES (below) is declared here: with it D and DV pad
// to twice cm_common.glsl's quantum, so that each half of the features is
// whole chunks (d 80: 96).
layout(constant_id = 26) const uint FHALVES = 0;
#define CM_PAD_D (PAD * (FHALVES + 1u))
#define CM_PAD_DV (PAD * (FHALVES + 1u))
#endif
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

OPERAND_V(0, 0, QBuf, q, readonly)
OPERAND_V(1, 1, KBuf, k, readonly)
OPERAND_V(2, 2, VBuf, v, readonly)
OPERAND_V(3, 3, dOBuf, do, readonly)
layout(std430, binding = 4) readonly buffer LBuf { float lse_buf[]; };
layout(std430, binding = 5) readonly buffer DBuf { float d_buf[]; };
OPERAND_V(4, 6, dQBuf, dq, writeonly)

CM_FETCH(fetch_q, q, q_base, D, false)
CM_FETCH(fetch_k, k, k_base, D, false)
CM_FETCH(fetch_v, v, v_base, DV, false)
CM_FETCH(fetch_do, do, o_base, DV, false)
CM_STORE(store_dq, dq, q_base, D)

// 22 PREFETCH: 1 loads the next key tile's K_j and V_j into registers
// while the current tile computes (global latency hidden behind the MMAs,
// as bwd_cm_dkdv's steps), 0 loads each tile between its barriers.
layout(constant_id = 22) const uint PREFETCH = 0;

// 24 PAIRS: 1 pairs the subgroups (above; the host asks for it with MODE 1,
// 16-bit storage, BC/CM_N and DP/CM_N even, and dS fitting V_j's place),
// 0 one subgroup per CM_M rows.
// NSPL subgroups share a row block, each with NSTH S/dP accumulators (key
// tiles TH0 …), NDQH dQ accumulators (column blocks JH0 …) and NQFH (NOFH)
// of Q_i's (dO_i's) feature chunks (from QF0, OF0).
layout(constant_id = 24) const uint PAIRS = 0;
// 27 ROWBLK: row blocks of CM_M query rows per subgroup (BR =
// NSG·CM_M·ROWBLK; the host asks for more than one with MODE 1, 16-bit
// storage, no pairs and no bias). Each K fragment a subgroup loads from
// shared memory (Kᵀ for S, K for dQ) and each V fragment (Vᵀ for dP)
// then feeds one MMA per block — half the fragment loads per MMA with two
// blocks, as flash_cm's row blocks — for the registers of the extra
// blocks' Q_i, dO_i, S, dP and dQ. (RB, below, is 1 wherever the host
// never asks for more: the fp32 build, MODE 0, the pairs.)
layout(constant_id = 27) const uint ROWBLK = 1;
// 26 FHALVES (the fp32 build, whose three planes of Q_i and dO_i would
// fill the register file at d 128): 1 pairs the subgroups over the head
// dim — each holds half of Q_i's and dO_i's feature chunks (NQFH, NOFH
// from QF0, OF0), computes S and dP over them for the whole key tile,
// stores them, and after a barrier adds its partner's (a + b = b + a:
// both hold the same sums); each then takes the whole elementwise step
// (one of them stores dS for dBias) and dQ's half of the columns. 0 one
// subgroup per CM_M rows. (The 16-bit builds ignore FHALVES, the fp32
// build PAIRS; its FHALVES is declared above.)
#if CM_SPLIT == 1
layout(constant_id = 26) const uint FHALVES = 0;
#endif
#if CM_SPLIT > 1
const uint PAIRED = 0u;
const uint FSPL = FHALVES + 1u;
const uint NSPL = FSPL;
const uint RB = 1u;
#else
const uint PAIRED = MODE == 1u ? PAIRS : 0u; // (not in MODE 0)
const uint FSPL = 1u;
const uint NSPL = PAIRED + 1u;
const uint RB = MODE == 1u && PAIRED == 0u && ROWBLK > 1u ? ROWBLK : 1u;
#endif

// Prefetch registers: this invocation's share of one tile's K and V.
const uint NPK = (BC * DP8 + WG - 1u) / WG;
const uint NPV = (BC * DVP8 + WG - 1u) / WG;

// PREFETCH_TILE(kt) loads key tile kt's K and V chunks into pk and pv
// (zero past the keys read).
#define PREFETCH_TILE(kt) \
	{ \
		uint pc0 = KTILE(kt) * BC; \
		[[unroll]] for (uint i = 0u; i < NPK; ++i) { \
			uint e = tid + i * WG; \
			uint r = e / DP8; \
			pk[i] = (e < BC * DP8 && pc0 + r < nkeys) ? fetch_k(b, pc0 + r, kvh, e - r * DP8) : CM_CHUNK0; \
		} \
		[[unroll]] for (uint i = 0u; i < NPV; ++i) { \
			uint e = tid + i * WG; \
			uint r = e / DVP8; \
			pv[i] = (e < BC * DVP8 && pc0 + r < nkeys) ? fetch_v(b, pc0 + r, kvh, e - r * DVP8) : CM_CHUNK0; \
		} \
	}

const uint NQF = DP / CM_K;   // Q fragments (A)
const uint NOF = DVP / CM_K;  // dO fragments (A)
const uint NST = BC / CM_N;   // S/dP accumulators per subgroup
const uint NKC = BC / CM_K;   // key chunks of dS·K
const uint NDQ = DP / CM_N;   // dQ column blocks
#if CM_SPLIT > 1
const uint NSTH = NST;        // the subgroup's S/dP accumulators
#else
const uint NSTH = NST / NSPL;
#endif
const uint NDQH = NDQ / NSPL; // the subgroup's dQ accumulators
// DROP_COLS (dropout, MODE 1, CM_COLS; 32 mod CM_N = 0 so that no
// accumulator's keys straddle a keep word, and with PAIRS NSTH·CM_N a
// multiple of 32 so that each half of the key tile starts a word): each
// invocation reads its RL rows' keep words of its NSTH accumulators once
// per tile (DROP_NW per row, shifted right by colmin) and tests each
// element's bit at a position known when the pipeline is built
// (cm_common.glsl), instead of reading a word per element.
const uint DROP_COLS = ((EXT & EXT_ON_DROPOUT) != 0u ? 1u : 0u) * (REGS ? 1u : 0u) * CM_COLS * (32u % CM_N == 0u ? 1u : 0u) * (NSPL == 1u ? 1u : ((NSTH * CM_N) % 32u == 0u ? 1u : 0u));
const uint DROP_NW = DROP_COLS != 0u ? (NSTH * CM_N + 31u) / 32u : 1u;
// COLS_FORM: the columns in the form the compiler sees (CM_COLS_FORM)
// with dropout and above d 64; plain's d 64 kernel ran 2.8% slower with
// it and d 128's 4.2% faster (NVIDIA H200, bench/NOTES.md).
const bool COLS_FORM = DROP_COLS != 0u || D > 64u;
#if CM_SPLIT > 1
const uint NQFH = NQF / FSPL; // its Q_i fragments (per plane)
const uint NOFH = NOF / FSPL; // its dO_i fragments
#else
const uint NQFH = NQF;
const uint NOFH = NOF;
#endif
// DS_M1(BK, CAREFUL, MASKED), DS_M0(CAREFUL): dS of the subgroup's rows
// (MODE 1: of its row block BK) against the key tile, in registers (MODE
// 1, into dsA) or through shared memory (MODE 0, into sdS); CAREFUL as in
// params.glsl. MODE 1 works on the block's NSTH key tiles (tile TH0 + t of
// the key tile is S[BK·NSTH + t]; dS is left in dP, and without PAIRS
// also put in dsA[BK·NKC + t]). MODE 1 without MASKED
// takes every element as visible: only for a tile every row of the workgroup sees
// whole, no row careful, none past the sequence's. With EXT the score is
// ext_score of the raw product S and dP − D is scaled by ext_dsoft(S) (dS is
// w.r.t. the capped score; a masked element's dS stays 0); MODE 1 takes
// them as ext_score_d (ALiBi's distance by ext_alibi_dist) and ext_dsoft_t
// of S after EXT_SOFTCAP_TILE. With dropout dS =
// P ∘ (keep·s·dP − D), s the kept elements' scale.
#define DS_M1(BK, CAREFUL, MASKED) \
	[[unroll]] for (uint t = 0u; t < NSTH; ++t) { \
		uint sgrb_ = sgr + (BK) * CM_M; /* the block's first row */ \
		uint st_ = (BK) * NSTH + t;     /* its accumulator */ \
		[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) { \
			uint tc = (TH0 + t) * CM_N + colOf[i]; \
			uint c = c0 + tc; \
			uint ci_ = (BK) * CM_LEN + i; \
			bool vis = !(MASKED) || (lOf[ci_] != NEG_INF && c - fstOf[ci_] < widOf[ci_]); \
			float x = EXT != 0u ? ext_score_d(S[st_][i], ext_alibi_dist(int(r0 + sgrb_ + rowOf[i]) + ext_off - int(c0), tc), BIAS_AT(bv, st_, i)) : S[st_][i] * sl2; \
			float g = (DROP_COLS != 0u ? drop_select(dw[((BK) * RL + slotrow(i)) * DROP_NW + (t * CM_N) / 32u], (t * CM_N) % 32u + coldelta(i), dP[st_][i] * dscale) : dP[st_][i] * (drop_keep(sgrb_ + rowOf[i], tc) * dscale)) - dOf[ci_]; \
			float p = vis ? BWD_P(CAREFUL, x - lOf[ci_], lOf[ci_]) : 0.0; \
			DBIAS_STORE(r0 + sgrb_ + rowOf[i], c, BWD_DS(CAREFUL, vis, p, g)) \
			if (EXT != 0u) { \
				g *= ext_dsoft_t(S[st_][i]); \
			} \
			dP[st_][i] = BWD_DS(CAREFUL, vis, p, g); \
		} \
		if (PAIRED == 0u) { \
			[[unroll]] for (uint j = 0u; j < CM_LEN; ++j) { \
				CM_TO_A(dsA, NKC, (BK) * NKC + t, j, dP[st_][aperm(j)]) \
			} \
		} \
	}
#if CM_SPLIT > 1
#define DBIAS_STORE(r, c, x) \
	if (half_ == 0u) { \
		dbias_store(r, c, x); /* (FHALVES: both halves hold the same dS) */ \
	}
#else
#define DBIAS_STORE(r, c, x) dbias_store(r, c, x);
#endif
#define DS_M0(CAREFUL) \
	for (uint e = lane; e < CM_M * BC; e += SUBGROUP) { \
		uint rr = e / BC; \
		uint col = e - rr * BC; \
		uint r = sgr + rr; \
		float l2 = sL[r]; \
		uint lim = r < rows ? key_limit(r0 + r) : 0u; \
		uint fst = r < rows ? key_first(r0 + r) : 0u; \
		bool vis = l2 != NEG_INF && !(need_mask && (c0 + col >= lim || c0 + col < fst)); \
		uint si = r * LDS + col; \
		float x = EXT != 0u ? ext_score(sS[si], r0 + r, c0 + col) : sS[si] * sl2; \
		float g = sdP[si] * (drop_keep(r, col) * dscale) - sDr[r]; \
		float p = vis ? BWD_P(CAREFUL, x - l2, l2) : 0.0; \
		dbias_store(r0 + r, c0 + col, BWD_DS(CAREFUL, vis, p, g)); \
		if (EXT != 0u) { \
			g *= ext_dsoft(sS[si]); \
		} \
		sdS[r * LDP + col] = CM_TO(BWD_DS(CAREFUL, vis, p, g)); \
	}

// K/V tiles: CM_SPLIT planes each (fp32 storage; one otherwise), K's
// planes first. Q_i and dO_i are staged one plane at a time; dQ leaves
// through LDQ4 16-byte units per row (CM_OUT_EL features each).
const uint KOFF = 0u;
const uint KPL = BC * LDK4; // units per K plane
const uint VPL = BC * LDV4;
const uint VOFF = CM_SPLIT * KPL;
const uint LDQ4 = DP / CM_OUT_EL + 1u;
const uint SKV_Q = BR * LDK4 > BR * LDV4 ? BR * LDK4 : BR * LDV4;
const uint SKV_A = SKV_Q > BR * LDQ4 ? SKV_Q : BR * LDQ4;
const uint SKV_B = CM_SPLIT * (KPL + VPL);
const uint SKV_C = CM_M * CM_N / 4u;
// FHALVES: every subgroup's partial S and dP, SKV_C units per accumulator,
// after the K/V tiles.
const uint XOFF = SKV_B;
#if CM_SPLIT > 1
const uint SKV_X = SKV_B + (FSPL > 1u ? NSG * 2u * NST * SKV_C : 0u);
#else
const uint SKV_X = SKV_B;
#endif
const uint SKV_AB = SKV_A > SKV_X ? SKV_A : SKV_X;
const uint SKV_N = SKV_AB > SKV_C ? SKV_AB : SKV_C;
shared uvec4 sKV[SKV_N];
shared float sL[BR];  // LSE·log2e of the workgroup's rows (−inf past Nq)
shared float sDr[BR]; // D of the rows

// MODE 0 scratch, per subgroup: S and dP (fp32), dS (CM_T). PAIRS: the
// pairs' dS rows in V_j's place in sKV, LDP8 16-byte units apart. (Not in
// sdS: on an NVIDIA H200, driver 580, MODE 1's pairs read back from sdS
// what they had not written there, at any size of it — it then follows
// two one-element arrays, 8 bytes in, the likely cause; through sKV they
// are right.)
const uint LDS = BC + 4u;
const uint LDP = BC + 8u;
const uint LDP8 = LDP / 8u;
const uint S0_N = M0_SCRATCH ? NSG * CM_M * LDS : 1u;
const uint P0_N = M0_SCRATCH ? NSG * CM_M * LDP : 1u;
shared float sS[S0_N];
shared float sdP[S0_N];
shared CM_T sdS[P0_N];

void main() {
	uint tid = thread_index();
	uint sg = gl_SubgroupID;
	uint lane = gl_SubgroupInvocationID;
	uvec2 tile = grid_tile(27u, (pc.Nq + BR - 1u) / BR); // (query tile, head)
	uint h = tile.y;
	uint b = gl_WorkGroupID.z;
	uint kvh = kv_head(h);
	uint r0 = tile.x * BR;
	uint half_ = sg % NSPL; // (PAIRS: which half of the keys and columns; FHALVES: of the features and columns)
	uint sgr = sg / NSPL * CM_M * RB; // the subgroup's first row within the tile
#if CM_SPLIT > 1
	const uint TH0 = 0u; // (no key pairs)
#else
	uint TH0 = half_ * NSTH; // its first S/dP tile of a key tile
#endif
	uint JH0 = half_ * NDQH; // its first dQ column block
#if CM_SPLIT > 1
	uint QF0 = half_ * NQFH; // (FHALVES: its first Q_i and dO_i chunks)
	uint OF0 = half_ * NOFH;
#endif
	float sl2 = pc.scale * LOG2E;
	float dscale = drop_scale(); // (1 without dropout)
	ext_begin(b);
	ext_head(b, h);
	if (r0 >= seq_nq) {
		return; // past a packed sequence's queries (uniform)
	}
	uint rows = min(BR, seq_nq - r0);
	uint nkeys = read_keys(); // no key past a key count is read (ext.glsl)

	uint rowOf[CM_LEN];
	uint colOf[CM_LEN];
	uint colmin = 0u; // (DROP_COLS)
	if (REGS) {
		CM_LAYOUT_MAP(sKV, rowOf, colOf, colmin)
		if (COLS_FORM) {
			CM_COLS_FORM(colOf, colmin)
		}
	}
	uint lrow[RL]; // (DROP_COLS: the local rows, cm_common.glsl)
	CM_LOCAL_ROWS(rowOf, lrow)

	// Q_i, then dO_i: → shared (zero past Nq) → A fragments, one plane at
	// a time (qA[(pl·RB + blk)·NQFH + kk], oA[(pl·RB + blk)·NOFH + kk]
	// for row block blk: with FHALVES the subgroup's half of the features).
	for (uint r = tid; r < BR; r += WG) {
		float l = r < rows ? lse_in(lse_buf[lse_index(b, h, r0 + r)]) : NEG_INF;
		sL[r] = l == NEG_INF ? NEG_INF : l * LOG2E;
		sDr[r] = r < rows ? d_buf[lse_index(b, h, r0 + r)] : 0.0;
	}
	MATA qA[CM_SPLIT * RB * NQFH]; // (plane pl, row block blk: from (pl·RB + blk)·NQFH)
	MATA oA[CM_SPLIT * RB * NOFH];
	[[unroll]] for (uint pl = 0u; pl < CM_SPLIT; ++pl) {
		if (pl > 0u) {
			barrier(); // every subgroup has loaded the previous plane
		}
		CM_STAGE(sKV, 0u, LDK4, BR, DP8, r < rows ? CM_PLANE(fetch_q(b, r0 + r, h, c4), pl) : uvec4(0u))
		barrier();
		[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
			CM_LOAD_A_AT(qA, (pl * RB + blk) * NQFH, NQFH, sKV, (sgr + blk * CM_M) * LDK4 CM_AT_CHUNK(QF0), LDK4)
		}
		barrier();
		CM_STAGE(sKV, 0u, LDV4, BR, DVP8, r < rows ? CM_PLANE(fetch_do(b, r0 + r, h, c4), pl) : uvec4(0u))
		barrier();
		[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
			CM_LOAD_A_AT(oA, (pl * RB + blk) * NOFH, NOFH, sKV, (sgr + blk * CM_M) * LDV4 CM_AT_CHUNK(OF0), LDV4)
		}
	}

	// A workgroup with a careful row (dead, or a huge LSE; params.glsl)
	// takes the careful softmax. Rare.
	bool careful;
	CAREFUL_ROWS(careful, sL, rows)

	// MODE 1: LSE·log2e, D and visible keys (fstOf … fstOf+widOf−1) of
	// each accumulator component's row (row block blk's at blk·CM_LEN).
	float lOf[RB * CM_LEN];
	float dOf[RB * CM_LEN];
	uint fstOf[RB * CM_LEN];
	uint widOf[RB * CM_LEN];
	if (REGS) {
		[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
			[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) {
				uint r = sgr + blk * CM_M + rowOf[i];
				uint ci = blk * CM_LEN + i;
				lOf[ci] = sL[r];
				dOf[ci] = sDr[r];
				fstOf[ci] = r < rows ? key_first(r0 + r) : 0u;
				widOf[ci] = r < rows ? key_limit(r0 + r) - fstOf[ci] : 0u;
			}
		}
	}

	ACC dQ[RB * NDQH]; // (row block blk's at blk·NDQH)
	[[unroll]] for (uint j = 0u; j < RB * NDQH; ++j) {
		dQ[j] = ACC(0.0);
	}

	// Keys visible to the workgroup: rows see key_first(row) …
	// key_limit(row)−1, both non-decreasing in the row.
	uint lim_lo = key_limit(r0);
	uint fst_hi = key_first(r0 + rows - 1u);
	uint ntiles = (key_limit(r0 + rows - 1u) + BC - 1u) / BC;
	// Key tiles from key_first(r0)'s on, less those a bias hides from
	// every row.
	uint rlast = r0 + rows - 1u;
	CM_CHUNK pk[NPK];
	CM_CHUNK pv[NPV];
	uint kt = bias_next_key_tile(r0, rlast, key_first(r0) / BC, ntiles, BC);
	// The tiles' places in the walk (STAGGER: cm_common.glsl; a bias walks
	// in order).
	uint kt0 = key_first(r0) / BC;
	uint nwalk = ntiles > kt0 ? ntiles - kt0 : 1u;
#define KTILE(k) (kt0 + walk_at((k) - kt0, nwalk, tile.x))
	if (PREFETCH != 0u && kt < ntiles) {
		PREFETCH_TILE(kt)
	}
	while (kt < ntiles) {
		uint ktn = bias_next_key_tile(r0, rlast, kt + 1u, ntiles, BC);
		uint c0 = KTILE(kt) * BC;
		barrier(); // every subgroup is done with the previous tile (and with dO_i)
		if (PREFETCH != 0u) {
			[[unroll]] for (uint i = 0u; i < NPK; ++i) {
				uint e = tid + i * WG;
				uint r = e / DP8;
				if (e < BC * DP8) {
					CM_PUT(sKV, KOFF + r * LDK4 + (e - r * DP8), KPL, pk[i])
				}
			}
			[[unroll]] for (uint i = 0u; i < NPV; ++i) {
				uint e = tid + i * WG;
				uint r = e / DVP8;
				if (e < BC * DVP8) {
					CM_PUT(sKV, VOFF + r * LDV4 + (e - r * DVP8), VPL, pv[i])
				}
			}
		} else {
			for (uint e = tid; e < BC * DP8; e += WG) {
				uint r = e / DP8;
				uint c4 = e - r * DP8;
				CM_PUT(sKV, KOFF + r * LDK4 + c4, KPL, c0 + r < nkeys ? fetch_k(b, c0 + r, kvh, c4) : CM_CHUNK0)
			}
			for (uint e = tid; e < BC * DVP8; e += WG) {
				uint r = e / DVP8;
				uint c4 = e - r * DVP8;
				CM_PUT(sKV, VOFF + r * LDV4 + c4, VPL, c0 + r < nkeys ? fetch_v(b, c0 + r, kvh, c4) : CM_CHUNK0)
			}
		}
		drop_fill(r0, c0, tid, WG); // (dropout: the tile's keep bits)
		barrier();
		// The next tile's K and V load into registers while this one computes.
		if (PREFETCH != 0u && ktn < ntiles) {
			PREFETCH_TILE(ktn)
		}
		// Masking (causal, a window edge, or the tail past Nk) is needed
		// when the workgroup's first row does not see every key of the tile
		// up to its end or its last row not from its start; and in a
		// workgroup of fewer than BR rows (its rows past the sequence's
		// have LSE −inf).
		bool need_mask = c0 + BC > lim_lo || c0 < fst_hi || rows < BR;

		// MODE 1 with a bias: the subgroup's bias values, loaded before the
		// MMAs are issued (their latency overlaps them).
		float bv[REGS ? BIAS_FRAG_N(RB * NSTH) : 1u];
		if (REGS) {
			BIAS_FRAG(bv, RB * NSTH, r0 + sgr + (t / NSTH) * CM_M + rowOf[i], c0 + (TH0 + t % NSTH) * CM_N + colOf[i])
		}

		// S = Q_i K_jᵀ, dP = dO_i V_jᵀ (fp32: over the plane pairs, CM_MMA;
		// row blocks: each K and V fragment loaded once for every block).
		ACC S[RB * NSTH]; // (row block blk's at blk·NSTH)
		ACC dP[RB * NSTH];
		[[unroll]] for (uint t = 0u; t < NSTH; ++t) {
			uint tk = (TH0 + t) * CM_N; // the accumulator's first key in the tile
			[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
				S[blk * NSTH + t] = ACC(0.0);
				dP[blk * NSTH + t] = ACC(0.0);
			}
#if CM_SPLIT > 1
			[[unroll]] for (uint kk = 0u; kk < NQFH; ++kk) {
				CM_MMA(S[t], qA, NQFH, kk, sKV, KOFF + tk * LDK4 + kk * (CM_K / 8u) CM_AT_CHUNK(QF0), KPL, LDK4, gl_CooperativeMatrixLayoutColumnMajor)
			}
			[[unroll]] for (uint kk = 0u; kk < NOFH; ++kk) {
				CM_MMA(dP[t], oA, NOFH, kk, sKV, VOFF + tk * LDV4 + kk * (CM_K / 8u) CM_AT_CHUNK(OF0), VPL, LDV4, gl_CooperativeMatrixLayoutColumnMajor)
			}
#else
			[[unroll]] for (uint kk = 0u; kk < NQF; ++kk) {
				MATB kB;
				coopMatLoad(kB, sKV, KOFF + tk * LDK4 + kk * (CM_K / 8u), LDK4, gl_CooperativeMatrixLayoutColumnMajor);
				[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
					S[blk * NSTH + t] = coopMatMulAdd(qA[blk * NQF + kk], kB, S[blk * NSTH + t]);
				}
			}
			[[unroll]] for (uint kk = 0u; kk < NOF; ++kk) {
				MATB vB;
				coopMatLoad(vB, sKV, VOFF + tk * LDV4 + kk * (CM_K / 8u), LDV4, gl_CooperativeMatrixLayoutColumnMajor);
				[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
					dP[blk * NSTH + t] = coopMatMulAdd(oA[blk * NOF + kk], vB, dP[blk * NSTH + t]);
				}
			}
#endif
		}
#if CM_SPLIT > 1
		if (FSPL > 1u) {
			// The pair's partial S and dP (each over its half of the
			// features) summed.
			CM_PAIR_SUM(S, dP, NST, sKV, XOFF, sg)
		}
#endif

		MATA dsA[CM_SPLIT * RB * NKC]; // (row block blk's at blk·NKC)
#if CM_SPLIT > 1
		{ // (the fp32 build runs MODE 1 only: the host never asks for 0)
#else
		if (MODE == 1u) {
#endif
			EXT_SOFTCAP_TILE(S, RB * NSTH)
			uint dw[RB * RL * DROP_NW]; // (DROP_COLS: block blk's local row k's words at (blk·RL + k)·DROP_NW)
			dw[0] = 0u;
			if (DROP_COLS != 0u) {
				[[unroll]] for (uint k = 0u; k < RB * RL * DROP_NW; ++k) {
					uint lr = k / DROP_NW; // (blk·RL + local row)
					dw[k] = sDrop[(sgr + (lr / RL) * CM_M + lrow[lr % RL]) * DROP_WPR + (TH0 * CM_N) / 32u + k % DROP_NW] >> colmin;
				}
			}
			[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
				if (careful) {
					DS_M1(blk, true, true)
				} else if (need_mask) {
					DS_M1(blk, false, true)
				} else {
					DS_M1(blk, false, false)
				}
			}
#if CM_SPLIT == 1
			if (PAIRED != 0u) {
				// The pair's dS, both halves of the keys, as A fragments,
				// through V_j's place.
				barrier(); // every subgroup is done with V_j
				[[unroll]] for (uint t = 0u; t < NSTH; ++t) {
					CM_STORE_ACC(dP[t], sKV, VOFF + sgr * LDP8 + (TH0 + t) * (CM_N / 8u), LDP8)
				}
				barrier();
				[[unroll]] for (uint t = 0u; t < NKC; ++t) {
					coopMatLoad(dsA[t], sKV, VOFF + sgr * LDP8 + t * (CM_K / 8u), LDP8, gl_CooperativeMatrixLayoutRowMajor);
				}
			}
#endif
		}
#if CM_SPLIT == 1
		else {
			[[unroll]] for (uint t = 0u; t < NST; ++t) {
				coopMatStore(S[t], sS, sgr * LDS + t * CM_N, LDS, gl_CooperativeMatrixLayoutRowMajor);
				coopMatStore(dP[t], sdP, sgr * LDS + t * CM_N, LDS, gl_CooperativeMatrixLayoutRowMajor);
			}
			subgroupMemoryBarrierShared();
			subgroupBarrier();
			if (careful) {
				DS_M0(true)
			} else {
				DS_M0(false)
			}
			subgroupMemoryBarrierShared();
			subgroupBarrier();
			[[unroll]] for (uint t = 0u; t < NKC; ++t) {
				coopMatLoad(dsA[t], sdS, sgr * LDP + t * CM_K, LDP, gl_CooperativeMatrixLayoutRowMajor);
			}
		}
#endif

		// dQ_i += dS K_j; fp32: each column block's tile summed from zero
		// and added in fp32 (CM_ADD_TILE).
#if CM_SPLIT > 1
		[[unroll]] for (uint j = 0u; j < NDQH; ++j) {
			ACC tile = ACC(0.0);
			[[unroll]] for (uint t = 0u; t < NKC; ++t) {
				CM_MMA(tile, dsA, NKC, t, sKV, KOFF + (t * CM_K) * LDK4 + (JH0 + j) * (CM_N / 8u), KPL, LDK4, gl_CooperativeMatrixLayoutRowMajor)
			}
			CM_ADD_TILE(dQ[j], tile)
		}
#else
		[[unroll]] for (uint t = 0u; t < NKC; ++t) {
			[[unroll]] for (uint j = 0u; j < NDQH; ++j) {
				MATB kB;
				coopMatLoad(kB, sKV, KOFF + (t * CM_K) * LDK4 + (JH0 + j) * (CM_N / 8u), LDK4, gl_CooperativeMatrixLayoutRowMajor);
				[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
					dQ[blk * NDQH + j] = coopMatMulAdd(dsA[blk * NKC + t], kB, dQ[blk * NDQH + j]);
				}
			}
		}
#endif
		kt = ktn;
	}

	// dQ·scale → storage type (fp32: as it is) → shared → global.
	barrier();
	[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
		[[unroll]] for (uint j = 0u; j < NDQH; ++j) {
			CM_STORE_ACC(dQ[blk * NDQH + j] * pc.scale, sKV, (sgr + blk * CM_M) * LDQ4 + (JH0 + j) * (CM_N / CM_OUT_EL), LDQ4)
		}
	}
	barrier();
	const uint QCH = DP / CM_OUT_EL; // units per dQ row
	for (uint e = tid; e < BR * QCH; e += WG) {
		uint r = e / QCH;
		uint c4 = e - r * QCH;
		if (r < rows) {
			// A dead row's dQ is exactly 0, even against ±Inf in K.
			store_dq(b, r0 + r, h, c4, sL[r] == NEG_INF ? uvec4(0u) : sKV[r * LDQ4 + c4]);
		}
	}
}
