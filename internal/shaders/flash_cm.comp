#version 450
// flash_cm: FlashAttention-2 forward on cooperative matrices
// (VK_KHR_cooperative_matrix, subgroup scope). fp16 storage (compile with
// -DSTORAGE_F16=1), bf16 storage (-DSTORAGE_BF16=1: uint16 buffers of
// bfloat16 bits, bfloat16_t operands, glslang ≥ 16; see cm_types.glsl) or
// fp32 storage (below),
// target Vulkan 1.3; S = Q·Kᵀ and O += P·V on the matrix units with fp32
// accumulators, online softmax in fp32 (exp2 domain), P rounded to the
// storage type (nearest even) for P·V, LSE out.
//
// fp32 storage (no STORAGE_* define; bf16 operands, glslang ≥ 16): Q, K,
// V and P are each split into CM_SPLIT = 3 bf16 planes (cm_types.glsl,
// cm_split), S and each tile's P·V are the six plane products i + j < 3
// (grouped by K/V plane, the smaller planes first); each chunk of CM_K
// features of S and a tile's P·V are summed from zero and added to S and
// O in fp32 (CM_ADD_TILE, O_ADD_TILE); O is stored as fp32. The Q tile is staged plane by plane; the K/V tiles hold all three
// planes. Inf·0 inside a plane product would be NaN where fp32 gives ±Inf,
// so an operand that can meet an infinite one has its zero lower planes
// filled (cm_fill): Q always (staged once), K only in a workgroup whose Q
// tile holds an Inf or NaN (k_fill), P always (cm_fill_nonneg: its products
// meet V's), V never (P is finite).
//
// Bindings (set 0), as the scalar flash kernel:
//   0 Q [B,Nq,Hq,D] f16|bf16|f32   1 K [B,Nk,Hkv,D]   2 V [B,Nk,Hkv,DV]
//   3 O [B,Nq,Hq,DV] (written)   4 LSE [B,Hq,Nq] f32 ([Hq,Tq] packed;
//   written; −inf and an O row of 0 for a row that sees no key)   5 Ext u32 (ext.glsl;
//   read when EXT = 1)   6 bias, 7 its summary (ext.glsl; read only with
//   EXT's bias bit)
// ADDRESSED build: Q, K, V, O at pc.addr[0 … 3] instead of bindings
//   0 … 3 (params.glsl, Operands; 16-byte aligned addresses when VEC = 1);
//   LSE, Ext and the bias bindings stay bindings 4 … 7.
// Push constants: Params (attn_params.glsl). Grid: (ceil(Nq/BR), Hq, B)
//   (with EXT a workgroup works on its sequence's seq_nq rows — packed
//   sequences are shorter than Nq — and reads only its read_keys() keys).
//
// Spec constants (params.glsl ids 0–5, 8 EXT (ext.glsl), plus 10–22, 24,
// 27, 28 and 29):
//   0 WG = NSG·SUBGROUP (NSG subgroups, each owning CM_M query rows; two
//     sharing them with PAIRS; ROWBLK blocks of them each with ROWBLK)
//   1 D, 2 DV (any ≤ 256; padded with zeros to multiples of 16 inside)
//   3 BR = NSG·CM_M·ROWBLK query rows per workgroup (NSG·CM_M/2 with
//     PAIRS), 4 BC
//     key rows per tile
//     (a multiple of CM_N and CM_K)   5 SUBGROUP (the subgroup size; the
//     pipeline must require it and full subgroups)
//   10 CM_M, 11 CM_N, 12 CM_K: the coopmat shape, one the device reports
//     for f16·f16+f32→f32 (bf16: bf16·bf16+f32→f32) at subgroup scope
//     (CM_N, CM_K multiples of 8)
//   13 MODE: 0 softmax through shared memory (any device); 1 softmax in
//     registers (needs the element layout conditions below)
//   14 CM_LEN: components per invocation of the fp32 CM_M×CM_N accumulator
//     (flash_cm_probe reports it; ≤ 16)
//   15 RL, 16 SLOTROW_LO, 17 SLOTROW_HI, 18 XORMASK, 19 APERM_LO,
//     20 APERM_HI: the element layout (MODE 1), from flash_cm_probe:
//     every invocation holds the same number RL of distinct rows of an
//     accumulator; component i lies in the invocation's local row
//     slotrow(i) (4 bits each, LO = components 0–7, HI = 8–15), the same
//     for all invocations; the invocations holding a row are lane ^ s for
//     every subset s of the bits of XORMASK, each at the same local row;
//     CM_N == CM_K and component j of the 16-bit CM_M×CM_K A matrix is
//     component aperm(j) of the accumulator in the same invocation.
//   21 VEC: 1 when D, DV and every Q/K/V/O stride are multiples of 8
//     (16-byte global loads and stores), else 0 (scalar, any stride)
//   22 PREFETCH: 1 loads the next K/V tile into registers while the
//     current one is computed (VEC only), 0 loads it between barriers.
//   24 PAIRS: subgroup pairs (below, at its declaration).
//   27 ROWBLK: row blocks per subgroup (below, at its declaration).
//   29 STAGGER: each workgroup walks its key tiles from a place of its own
//     (cm_common.glsl).
//   30 CM_COLS, 31 CM_COLD_LO, 32 CM_COLD_HI: the accumulator's columns
//     (MODE 1; cm_common.glsl).
//
// Why the layout: KHR cooperative matrices do not say which invocation holds
// which element, but all matrices of one type share one mapping. The kernel
// reads it at start (it loads a matrix whose elements encode their own row
// and column) and uses it to rescale O's rows by the softmax correction
// (O[j][i] *= alpha[row of component i]) without leaving registers. In MODE 1
// the row max, the exponentials and the conversion of P into an A operand
// happen in registers too; MODE 0 stores S to shared memory, does the
// softmax with scalar code, and loads P back as an A matrix.
//
// Key tiles: the workgroup walks the tiles from the first key any of its
// rows sees (key_first; 0 unless EXT has a left window) to the last
// (key_limit), so a sliding window costs only the tiles it covers (with
// STAGGER in a rotated order: cm_common.glsl). In
// MODE 1 a subgroup skips the tiles none of its rows sees (not with
// dropout or a bias, whose loops meet subgroup barriers, nor in pairs,
// which meet a workgroup barrier in every tile); masking is
// per element only on tiles that cross a row's visible range (causal
// diagonal, window edge, key-count tail). With EXT the scores come from
// ext_score (softcap, ALiBi, bias) instead of S·scale·log2 e; the tiles
// a bias hides from every row of the workgroup are never visited
// (bias_next_key_tile: neither loaded nor prefetched); MODE 1 stages the
// bias values through shared memory (bias_stage.glsl). With dropout
// each subgroup (in pairs: each of the two, half of the pair's rows)
// draws its own rows' keep bits of the tile right after
// issuing S's MMAs (ext.glsl drop_fill_rows: integer work that overlaps
// them; no subgroup skips a tile then), P·keep meets V and the final
// normalisation applies the kept elements' scale.
//
// Shared memory (bytes; shaders.FlashCMSharedBytes mirrors it):
// 16·max(BR·LDK4, CM_SPLIT·BC·(LDK4+LDV4), OR·LDO4, CM_M·CM_N/4) for the
// Q, K/V and O staging (LDK4 = DP/8+1, LDV4 = DVP/8+1 16-byte units per
// row; LDO4 = LDV4 and OR = BR, fp32: DVP/4+1 and OR = OSG·CM_M·ROWBLK) + PAIRS:
// 16·BR·(BC/4+1) (the pairs' S) + 4·BR (row buffer) + MODE 0:
// 4·BR·(BC+4) (S) + CM_SPLIT·2·BR·(BC+8) (P) + fp32: 4·NSG (sQNonfinite).
// At d = 128, BR = 128, BC = 64, MODE 1: ≈ 35.3 KB (fp32, BC = 16: ≈ 35.4
// KB); at d = 256, NSG = 8 in pairs (BR = 64), BC = 32: ≈ 43.3 KB. Dropout adds the keep bits
// (shaders.DropSharedBytes), a bias in MODE 1 its stage (bias_stage.glsl,
// shaders.BiasStageBytes: 10 KiB at d = 128, BC = 64).
#extension GL_GOOGLE_include_directive : require
#define EXT_BINDING 5
#define BIAS_BINDING 6
#define DROP_ROWS BR
#define DROP_KEYS BC
#define DROP_LANES // (thread_index() in full subgroups: ext.glsl drop_fill)
#define EXT_HALF_TANH 1 // (ext.glsl: the softcap's tanh in fp16 with bf16 storage)
#define EXT_SOFTCAP_POLY 1 // (ext.glsl: tiles within tanh_poly's range take it)
#define EXT_SCORE_ONLY 1 // (ext.glsl: a forward; the softcap's constants folded into its score)
#include "params.glsl"
#include "attn_params.glsl"
#include "ext.glsl"
// S = Q·Kᵀ contracts over D only and O = P·V produces DV only: D pads to
// CM_K and DV to CM_N (cm_common.glsl's default, for the backward, pads
// both to both).
#define CM_PAD_D (CM_K > 8u ? CM_K : 8u)
#define CM_PAD_DV (CM_N > 8u ? CM_N : 8u)
#include "cm_common.glsl"
// Dropout in MODE 1: DROP_FW is 1 when no fragment's keys straddle a keep
// word (32 mod CM_N = 0), and then each invocation reads its RL rows'
// words once per tile (DROP_RW of them) instead of a word per element.
const uint DROP_FW = ((EXT & EXT_ON_DROPOUT) != 0u ? 1u : 0u) * (32u % CM_N == 0u ? 1u : 0u);
const uint DROP_RW = DROP_FW != 0u ? RL * DROP_WPR : 1u;

layout(constant_id = 22) const uint PREFETCH = 0;

// 24 PAIRS: 1 pairs the subgroups (MODE 1, 16-bit storage; the host asks
// for it with NSG, BC/CM_N and DVP/CM_N even and no bias): two subgroups
// share CM_M query rows (BR = NSG·CM_M/2). Each computes S for half of the
// key tile (NSTH accumulators from key block TH0), the pair exchanges its
// halves through shared memory (SOFF, fp32, one barrier), both run the
// softmax on the whole tile, and each adds P·V to half of O's columns
// (NOTH accumulators from column block JH0): half the MMAs and half of O's
// registers per subgroup, the elementwise work twice. 0: one subgroup per
// CM_M rows.
layout(constant_id = 24) const uint PAIRS = 0;
#if CM_SPLIT > 1
const uint PAIRED = 0u; // (the fp32 build has no pairs)
#else
const uint PAIRED = MODE == 1u ? PAIRS : 0u; // (nor has MODE 0)
#endif
const uint NSPL = PAIRED + 1u;

// 27 ROWBLK: row blocks per subgroup (MODE 1, 16-bit storage, no pairs and
// no bias; the host refuses other tiles with ROWBLK > 1): a subgroup owns
// ROWBLK·CM_M query rows (BR = NSG·CM_M·ROWBLK), holds ROWBLK blocks of Q
// fragments, S and O, and feeds each K and V fragment it loads from
// shared memory to ROWBLK MMAs — fewer fragment loads, barriers and K/V
// staging per MMA, for the registers of the extra blocks.
layout(constant_id = 27) const uint ROWBLK = 1;
const uint RB = ROWBLK;

// Dropout's keep bits at positions known when the pipeline is built
// (cm_common.glsl: CM_COLS).
const uint DROP_COLS = DROP_FW * CM_COLS; // (CM_COLS is 0 or 1)

OPERAND_V(0, 0, QBuf, q, readonly)
OPERAND_V(1, 1, KBuf, k, readonly)
OPERAND_V(2, 2, VBuf, v, readonly)
OPERAND_V(3, 3, OBuf, o, writeonly)
layout(std430, binding = 4) writeonly buffer LBuf { float lse_buf[]; };

#if CM_SPLIT > 1
// k_fill: does this workgroup's Q tile hold an Inf or a NaN (then K's
// planes are filled)? sQNonfinite: each subgroup's share of the answer;
// Q_NONFINITE(w): does a chunk of Q's plane 0 hold one?
bool k_fill = false;
shared uint sQNonfinite[NSG];
#define K_FILL k_fill
#define Q_NONFINITE(w) cm_nonfinite(w)
#else
#define K_FILL false
#define Q_NONFINITE(w) false
#endif
CM_FETCH(fetch_q, q, q_base, D, true)
CM_FETCH(fetch_k, k, k_base, D, K_FILL)
CM_FETCH(fetch_v, v, v_base, DV, false)
CM_STORE(store_o, o, o_base, DV)

const uint NQF = DP / CM_K;                  // Q fragments (A) per subgroup
const uint NOT = DVP / CM_N;                 // O column blocks
const uint NST = BC / CM_N;                  // S accumulators per subgroup
const uint NOTH = NOT / NSPL;                // the subgroup's O accumulators
const uint NSTH = NST / NSPL;                // the subgroup's S products
const uint NKC = BC / CM_K;                  // key chunks of P·V
// MODE 1's bias values through shared memory (bias_stage.glsl).
#define BIAS_NT NST
#define BIAS_REGS (MODE == 1u)
#include "bias_stage.glsl"
// SG_SKIPS: MODE 1's subgroups skip the tiles none of their rows sees
// (not with dropout, a bias or pairs: main's loop says why).
const uint SG_SKIPS = (MODE == 1u ? 1u : 0u) * ((EXT & EXT_ON_DROPOUT) == 0u ? 1u : 0u) * (1u - BIAS_ON) * (1u - PAIRED);
// K/V tiles: CM_SPLIT planes each (fp32 storage; one otherwise), K's
// planes first. The Q tile is staged one plane at a time; O leaves through
// LDO4 16-byte units per row (CM_OUT_EL features each).
const uint KOFF = 0u;
const uint KPL = BC * LDK4; // units per K plane
const uint VPL = BC * LDV4;
const uint VOFF = CM_SPLIT * KPL;
const uint LDO4 = DVP / CM_OUT_EL + 1u;
const uint SKV_Q = BR * LDK4;
const uint SKV_KV = CM_SPLIT * (KPL + VPL);
// O is staged OSG subgroups' rows at a time: all of them for 16-bit
// storage; fp32 rows take twice the shared memory of 16-bit ones, so the
// fp32 build stages at most four subgroups' (with eight, O would need
// twice Q's tile).
#if CM_SPLIT > 1
const uint OSG = NSG > 4u ? 4u : NSG;
#else
const uint OSG = NSG;
#endif
const uint OROWS = OSG * CM_M * RB / NSPL;
const uint SKV_O = OROWS * LDO4;
const uint SKV_MAP = CM_M * CM_N / 4u;
const uint SKV4a = SKV_Q > SKV_KV ? SKV_Q : SKV_KV;
const uint SKV4b = SKV_O > SKV_MAP ? SKV_O : SKV_MAP;
const uint SKV4 = SKV4a > SKV4b ? SKV4a : SKV4b;
// Pairs: the pair's S (fp32, BR rows of BC keys, LDS4 16-byte units per
// row) after the staging, which the partner may still read when it is
// written.
const uint LDS4 = BC / 4u + 1u;
const uint SOFF = SKV4;
const uint SKV_S = PAIRED != 0u ? BR * LDS4 : 0u;
shared uvec4 sKV[SKV4 + SKV_S];

// MODE 0 buffers (one element in MODE 1).
const uint LDS = BC + 4u;
const uint LDP = BC + 8u;
const uint SS_N = MODE == 0u ? NSG * CM_M * LDS : 1u;
const uint SP_N = MODE == 0u ? NSG * CM_M * LDP : 1u; // per plane
shared float sS[SS_N];
shared CM_T sP[CM_SPLIT * SP_N];
shared float sRow[BR]; // (MODE 0; BR = NSG·CM_M there)

// Prefetch registers.
const uint KCH = BC * DP8;
const uint VCH = BC * DVP8;
const uint NPK = (KCH + WG - 1u) / WG;
const uint NPV = (VCH + WG - 1u) / WG;

// MODE 0 thread layout of the scalar softmax: LPR lanes per row.
const uint LPR = SUBGROUP >= CM_M ? SUBGROUP / CM_M : 1u;
const uint RSTEP = SUBGROUP / LPR;
const uint RPL = CM_M > RSTEP ? CM_M / RSTEP : 1u;
const uint CPL = BC / LPR;

// SCORE_TILE(MASKED) (MODE 1) turns S into the tile's scores in log2
// units and keeps each local row's maximum in mloc; where MASKED (a
// constant, or need_mask) keys outside a row's visible range score −inf
// (c − fstOf wraps past widOf below the range: one unsigned comparison
// for both ends). A staged bias's values pass through the subgroup's area
// a stage at a time (BIAS_PUT of bu, bias_at).
#define SCORE_TILE(MASKED) \
	[[unroll]] for (uint blk = 0u; blk < RB; ++blk) { \
		[[unroll]] for (uint t = 0u; t < NST; ++t) { \
			if (BIAS_ON != 0u && t % BIAS_G == 0u) { \
				BIAS_PUT(bu, t / BIAS_G) \
			} \
			[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) { \
				uint k_ = slotrow(i); \
				uint q_ = blk * RL + k_; \
				uint c = c0 + t * CM_N + colOf[i]; \
				float x = EXT != 0u ? ext_score_d(S[blk * NST + t][i], ext_alibi_dist(int(r0 + sgr + blk * CM_M + lrow[k_]) + ext_off - int(c0), t * CM_N + colOf[i]), bias_at(lrow[k_], (t % BIAS_G) * CM_N + colOf[i])) : S[blk * NST + t][i] * sl2; \
				if (MASKED && c - fstOf[q_] >= widOf[q_]) { \
					x = NEG_INF; \
				} \
				S[blk * NST + t][i] = x; \
				mloc[q_] = max(mloc[q_], x); \
			} \
		} \
	}

// SCORE_TILES: SCORE_TILE, the tiles that cross no row's visible range
// taking the copy without the mask (with a bias one copy, masked under
// need_mask: two copies ran within 1% of it on an NVIDIA H200, both ~20%
// slower at d 128 than the loop before the split, for a cause not found;
// bench/NOTES.md).
#define SCORE_TILES \
	if ((EXT & EXT_ON_BIAS) != 0u) { \
		SCORE_TILE(need_mask) \
	} else if (need_mask) { \
		SCORE_TILE(true) \
	} else { \
		SCORE_TILE(false) \
	}

// put_k, put_v: a chunk of K (V) into unit u of every plane of the tile.
void put_k(uint u, CM_CHUNK w) {
	[[unroll]] for (uint pl = 0u; pl < CM_SPLIT; ++pl) {
		sKV[KOFF + pl * KPL + u] = CM_PLANE(w, pl);
	}
}
void put_v(uint u, CM_CHUNK w) {
	[[unroll]] for (uint pl = 0u; pl < CM_SPLIT; ++pl) {
		sKV[VOFF + pl * VPL + u] = CM_PLANE(w, pl);
	}
}

// O_ADD_TILE(o, pv, A) (fp32 storage): o = o·A + pv, component by
// component (A an expression of the component index i: its row's alpha) —
// a tile's P·V is summed from zero on the matrix units and added to O in
// fp32 arithmetic, since the units' own accumulation, whose error grows
// with the number of products chained into one accumulator, made O's
// error grow with Nk (rel_l2 1.6e-5 at 2048 keys, d 128, on an NVIDIA
// H200, against the fp32 bound of 1e-5).
#define O_ADD_TILE(o, pv, A) \
	[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) { \
		o[i] = fma(o[i], A, pv[i]); \
	}

// PV_PRODUCT(o, PA, PS, PT, t, j): o += P·V over key chunk t and O column
// block j, the plane pairs i + j < CM_SPLIT (P's plane i in
// PA[i·PS + PT]; CM_MMA).
#define PV_PRODUCT(o, PA, PS, PT, t, j) \
	CM_MMA(o, PA, PS, PT, sKV, VOFF + ((t) * CM_K) * LDV4 + (j) * (CM_N / 8u), VPL, LDV4, gl_CooperativeMatrixLayoutRowMajor)

void main() {
	uint tid = thread_index();
	uint sg = gl_SubgroupID;
	uint lane = gl_SubgroupInvocationID;
	uvec2 tile = grid_tile(27u, (pc.Nq + BR - 1u) / BR); // (query tile, head)
	uint h = tile.y;
	uint b = gl_WorkGroupID.z;
	uint kvh = kv_head(h);
	uint r0 = tile.x * BR;
	uint half_ = sg % NSPL;  // (PAIRS: which half of the keys and columns)
	uint sgr = sg / NSPL * CM_M * RB; // first row of the subgroup within the tile
	uint TH0 = half_ * NSTH; // its first S product of a key tile
	uint JH0 = half_ * NOTH; // its first O column block
	float sl2 = pc.scale * LOG2E;
	ext_begin(b);
	ext_head(b, h);
	if (r0 >= seq_nq) {
		return; // past a packed sequence's queries (uniform)
	}
	uint rows = min(BR, seq_nq - r0);
	uint nkeys = read_keys(); // no key past a key count is read (ext.glsl)

	// Q tile → shared (rows past Nq are zero), then into A fragments, one
	// plane at a time (qA[pl·NQF + kk]; row block blk's at (blk·CM_SPLIT +
	// pl)·NQF).
	MATA qA[CM_SPLIT * NQF * RB];
	[[unroll]] for (uint pl = 0u; pl < CM_SPLIT; ++pl) {
		bool nonfinite = false; // (fp32: for k_fill)
		for (uint e = tid; e < BR * DP8; e += WG) {
			uint r = e / DP8;
			uint c4 = e - r * DP8;
			uvec4 w = r < rows ? CM_PLANE(fetch_q(b, r0 + r, h, c4), pl) : uvec4(0u);
			nonfinite = nonfinite || (pl == 0u && Q_NONFINITE(w));
			sKV[r * LDK4 + c4] = w;
		}
#if CM_SPLIT > 1
		if (pl == 0u) {
			sQNonfinite[sg] = subgroupAny(nonfinite) ? 1u : 0u;
		}
#endif
		barrier();
		[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
			CM_LOAD_A(qA, (blk * CM_SPLIT + pl) * NQF, NQF, sKV, sgr + blk * CM_M, LDK4)
		}
		barrier();
	}
#if CM_SPLIT > 1
	[[unroll]] for (uint i = 0u; i < NSG; ++i) {
		k_fill = k_fill || sQNonfinite[i] != 0u;
	}
#endif

	// Element layout of the accumulator type: component i of this
	// invocation holds row rowOf[i], column colOf[i] of every CM_M×CM_N
	// accumulator.
	uint rowOf[CM_LEN];
	uint colOf[CM_LEN];
	uint colmin; // (DROP_COLS)
	CM_LAYOUT_MAP(sKV, rowOf, colOf, colmin)

	// Keys visible to the tile and to the subgroup: row i sees key_first(i)
	// … key_limit(i)−1, both non-decreasing in i. The workgroup walks key
	// tiles kt0 … ntiles−1.
	uint sg_rows = rows > sgr ? min(CM_M * RB, rows - sgr) : 0u;
	uint sg_lim_lo = sg_rows > 0u ? key_limit(r0 + sgr) : 0u;
	uint sg_lim_hi = sg_rows > 0u ? key_limit(r0 + sgr + sg_rows - 1u) : 0u;
	uint sg_fst_lo = sg_rows > 0u ? key_first(r0 + sgr) : 0u;
	uint sg_fst_hi = sg_rows > 0u ? key_first(r0 + sgr + sg_rows - 1u) : 0u;
	uint lim_hi = key_limit(r0 + rows - 1u);
	uint ntiles = (lim_hi + BC - 1u) / BC;
	uint kt0 = EXT != 0u ? key_first(r0) / BC : 0u;

	// MODE 1 per-local-row state: local row k of the invocation is row
	// lrow[k] of each of its row blocks (so component i's row is
	// lrow[slotrow(i)]); in block blk it is subgroup row blk·CM_M + lrow[k],
	// whose state is at q = blk·RL + k: it sees keys fstOf[q] …
	// fstOf[q]+widOf[q]−1.
	uint lrow[RL];
	CM_LOCAL_ROWS(rowOf, lrow)
	uint fstOf[RB * RL];
	uint widOf[RB * RL];
	float m1[RB * RL];
	float l1[RB * RL];
	[[unroll]] for (uint q = 0u; q < RB * RL; ++q) {
		uint sr = q / RL * CM_M + lrow[q % RL];
		fstOf[q] = sr < sg_rows ? key_first(r0 + sgr + sr) : 0u;
		widOf[q] = sr < sg_rows ? key_limit(r0 + sgr + sr) - fstOf[q] : 0u;
		m1[q] = NEG_INF;
		l1[q] = 0.0;
	}
	// MODE 0 per-lane row state.
	uint lr = lane % LPR;
	uint rb = lane / LPR;
	float m0[RPL];
	float l0[RPL];
	[[unroll]] for (uint q = 0u; q < RPL; ++q) {
		m0[q] = NEG_INF;
		l0[q] = 0.0;
	}

	ACC O[RB * NOTH]; // (row block blk's at blk·NOTH)
	[[unroll]] for (uint j = 0u; j < RB * NOTH; ++j) {
		O[j] = ACC(0.0);
	}

	// The key tiles walked: kt0 on, less those a bias hides from every row
	// (ktn is the next one; kt + 1 without a bias).
	uint rlast = r0 + rows - 1u;
	uint ktn = bias_next_key_tile(r0, rlast, kt0, ntiles, BC);
	kt0 = ktn;
	// The tiles' places in the walk (STAGGER: cm_common.glsl; a bias walks
	// in order).
	uint nwalk = ntiles > kt0 ? ntiles - kt0 : 1u;
#define KTILE(k) (kt0 + walk_at((k) - kt0, nwalk, tile.x))

	CM_CHUNK pk[NPK];
	CM_CHUNK pv[NPV];
	if (PREFETCH != 0u && kt0 < ntiles) {
		[[unroll]] for (uint i = 0u; i < NPK; ++i) {
			uint e = tid + i * WG;
			uint r = e / DP8;
			uint s = KTILE(kt0) * BC + r;
			pk[i] = (e < KCH && s < nkeys) ? fetch_k(b, s, kvh, e - r * DP8) : CM_CHUNK0;
		}
		[[unroll]] for (uint i = 0u; i < NPV; ++i) {
			uint e = tid + i * WG;
			uint r = e / DVP8;
			uint s = KTILE(kt0) * BC + r;
			pv[i] = (e < VCH && s < nkeys) ? fetch_v(b, s, kvh, e - r * DVP8) : CM_CHUNK0;
		}
	}

	for (uint kt = kt0; kt < ntiles; kt = ktn) {
		uint c0 = KTILE(kt) * BC;
		ktn = bias_next_key_tile(r0, rlast, kt + 1u, ntiles, BC);
		barrier(); // every subgroup is done with the previous K/V tile
		if (PREFETCH != 0u) {
			[[unroll]] for (uint i = 0u; i < NPK; ++i) {
				uint e = tid + i * WG;
				uint r = e / DP8;
				if (e < KCH) {
					put_k(r * LDK4 + (e - r * DP8), pk[i]);
				}
			}
			[[unroll]] for (uint i = 0u; i < NPV; ++i) {
				uint e = tid + i * WG;
				uint r = e / DVP8;
				if (e < VCH) {
					put_v(r * LDV4 + (e - r * DVP8), pv[i]);
				}
			}
		} else {
			for (uint e = tid; e < KCH; e += WG) {
				uint r = e / DP8;
				uint c4 = e - r * DP8;
				put_k(r * LDK4 + c4, c0 + r < nkeys ? fetch_k(b, c0 + r, kvh, c4) : CM_CHUNK0);
			}
			for (uint e = tid; e < VCH; e += WG) {
				uint r = e / DVP8;
				uint c4 = e - r * DVP8;
				put_v(r * LDV4 + c4, c0 + r < nkeys ? fetch_v(b, c0 + r, kvh, c4) : CM_CHUNK0);
			}
		}
		barrier();
		if (PREFETCH != 0u && ktn < ntiles) {
			uint n0 = KTILE(ktn) * BC;
			[[unroll]] for (uint i = 0u; i < NPK; ++i) {
				uint e = tid + i * WG;
				uint r = e / DP8;
				pk[i] = (e < KCH && n0 + r < nkeys) ? fetch_k(b, n0 + r, kvh, e - r * DP8) : CM_CHUNK0;
			}
			[[unroll]] for (uint i = 0u; i < NPV; ++i) {
				uint e = tid + i * WG;
				uint r = e / DVP8;
				pv[i] = (e < VCH && n0 + r < nkeys) ? fetch_v(b, n0 + r, kvh, e - r * DVP8) : CM_CHUNK0;
			}
		}

		// Subgroup-uniform: does any row of this subgroup see this tile
		// (keys sg_fst_lo … sg_lim_hi−1 at most)? In MODE 1 a subgroup that
		// sees none skips it. MODE 0 computes it (fully masked) anyway: its
		// subgroupBarrier()s must be reached by every subgroup on
		// implementations that treat them as workgroup barriers (seen on
		// lavapipe, Mesa 26). need_mask is false for tiles every row of the
		// subgroup sees entirely (no causal diagonal, window edge or
		// key-count tail).
		// With dropout or a bias no subgroup skips: each draws its own rows'
		// keep bits or stages its bias values (below) between subgroup
		// barriers; nor in pairs, which exchange S across a workgroup
		// barrier in every tile.
		if (SG_SKIPS != 0u && (c0 >= sg_lim_hi || (EXT != 0u && c0 + BC <= sg_fst_lo))) {
			continue;
		}
		bool need_mask = c0 + BC > sg_lim_lo || (EXT != 0u && c0 < sg_fst_hi);

		// MODE 1 with a bias: the subgroup's bias rows of the tile, loaded
		// before S's MMAs are issued (their latency overlaps them).
		uvec4 bu[BIAS_ON != 0u ? BIAS_NS * BIAS_NUL : 1u];
		if (BIAS_ON != 0u) {
			BIAS_FETCH(bu, r0 + sgr, c0 + s * BIAS_SC)
		}

		// S = Σ Q_i·K_jᵀ over the plane pairs i + j < CM_SPLIT (CM_MMA; one
		// product without a split); with pairs the subgroup's NSTH products,
		// then the pair's whole S through shared memory.
		ACC S[RB * NST]; // (row block blk's at blk·NST)
		if (PAIRED != 0u) {
			ACC SH[NSTH];
			[[unroll]] for (uint t = 0u; t < NSTH; ++t) {
				SH[t] = ACC(0.0);
				[[unroll]] for (uint kk = 0u; kk < NQF; ++kk) {
					CM_MMA(SH[t], qA, NQF, kk, sKV, KOFF + ((TH0 + t) * CM_N) * LDK4 + kk * (CM_K / 8u), KPL, LDK4, gl_CooperativeMatrixLayoutColumnMajor)
				}
			}
			// Dropout: each of the pair draws half of its rows' keep bits
			// (read after the barrier below).
			drop_fill_rows(r0, sgr + half_ * (CM_M / 2u), CM_M / 2u, c0, lane, SUBGROUP);
			[[unroll]] for (uint t = 0u; t < NSTH; ++t) {
				coopMatStore(SH[t], sKV, SOFF + sgr * LDS4 + (TH0 + t) * (CM_N / 4u), LDS4, gl_CooperativeMatrixLayoutRowMajor);
			}
			barrier(); // (uniform: no subgroup skips a tile with pairs)
			[[unroll]] for (uint t = 0u; t < NST; ++t) {
				coopMatLoad(S[t], sKV, SOFF + sgr * LDS4 + t * (CM_N / 4u), LDS4, gl_CooperativeMatrixLayoutRowMajor);
			}
		} else if (RB == 1u) {
			[[unroll]] for (uint t = 0u; t < NST; ++t) {
				S[t] = ACC(0.0);
				[[unroll]] for (uint kk = 0u; kk < NQF; ++kk) {
#if CM_SPLIT > 1
					// fp32 planes: each chunk of CM_K features summed from
					// zero on the matrix units and added to S in fp32 (as
					// O_ADD_TILE): chained through one accumulator, the
					// small planes' products met the running sum of the
					// chunks before, whose alignment in the units'
					// accumulation dropped their low bits every MMA.
					ACC sc = ACC(0.0);
					CM_MMA(sc, qA, NQF, kk, sKV, KOFF + (t * CM_N) * LDK4 + kk * (CM_K / 8u), KPL, LDK4, gl_CooperativeMatrixLayoutColumnMajor)
					if (kk == 0u) {
						S[t] = sc;
					} else {
						CM_ADD_TILE(S[t], sc)
					}
#else
					CM_MMA(S[t], qA, NQF, kk, sKV, KOFF + (t * CM_N) * LDK4 + kk * (CM_K / 8u), KPL, LDK4, gl_CooperativeMatrixLayoutColumnMajor)
#endif
				}
			}
			// Dropout: the subgroup draws its rows' keep bits while the MMAs
			// run (independent work), read after the subgroup barrier below
			// (MODE 1) or after S's store (MODE 0).
			drop_fill_rows(r0, sgr, CM_M, c0, lane, SUBGROUP);
		} else {
			// Row blocks (16-bit): each K fragment feeds every block's MMA.
			[[unroll]] for (uint t = 0u; t < NST; ++t) {
				[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
					S[blk * NST + t] = ACC(0.0);
				}
				[[unroll]] for (uint kk = 0u; kk < NQF; ++kk) {
					MATB kB;
					coopMatLoad(kB, sKV, KOFF + (t * CM_N) * LDK4 + kk * (CM_K / 8u), LDK4, gl_CooperativeMatrixLayoutColumnMajor);
					[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
						S[blk * NST + t] = coopMatMulAdd(qA[blk * NQF + kk], kB, S[blk * NST + t]);
					}
				}
			}
			drop_fill_rows(r0, sgr, CM_M * RB, c0, lane, SUBGROUP);
		}

		if (MODE == 1u) {
			float mloc[RB * RL];
			[[unroll]] for (uint q = 0u; q < RB * RL; ++q) {
				mloc[q] = NEG_INF;
			}
			// The scores, and the row maxima of the tile (SCORE_TILES);
			// with a softcap, a tile whose products all lie within
			// tanh_poly's range takes it (ext.glsl: EXT_SOFTCAP_POLY), in a
			// copy of the loops of its own.
			EXT_SOFTCAP_TILE(S, RB * NST)
			bool poly = false;
			if (SOFTCAP_POLY) {
				SOFTCAP_SMALL(S, RB * NST, poly)
			}
			if (poly) {
				ext_poly = true;
				SCORE_TILES
			} else {
				ext_poly = false;
				SCORE_TILES
			}
			float muse[RB * RL];
			float alpha[RB * RL];
			float lsum[RB * RL];
			[[unroll]] for (uint q = 0u; q < RB * RL; ++q) {
				[[unroll]] for (uint bit = 0u; bit < 8u; ++bit) {
					if (((XORMASK >> bit) & 1u) != 0u) {
						mloc[q] = max(mloc[q], subgroupShuffleXor(mloc[q], 1u << bit));
					}
				}
				float mnew = max(m1[q], mloc[q]);
				// A row that has seen no key yet keeps m = −inf; exponentiate
				// against 0 then, so that exp2(−inf − 0) = 0 and never NaN.
				muse[q] = mnew == NEG_INF ? 0.0 : mnew;
				alpha[q] = exp2(m1[q] - muse[q]);
				m1[q] = mnew;
				lsum[q] = 0.0;
			}
			uint dw[RB * DROP_RW]; // (DROP_FW: the rows' keep words, block blk's at blk·DROP_RW)
			dw[0] = 0u;
			if ((EXT & EXT_ON_DROPOUT) != 0u) {
				subgroupMemoryBarrierShared();
				subgroupBarrier(); // (the keep bits are drawn)
				if (DROP_FW != 0u) {
					[[unroll]] for (uint k = 0u; k < RB * DROP_RW; ++k) {
						uint kb = k % DROP_RW;
						dw[k] = sDrop[(sgr + k / DROP_RW * CM_M + lrow[kb / DROP_WPR]) * DROP_WPR + kb % DROP_WPR];
						if (DROP_COLS != 0u) {
							dw[k] >>= colmin;
						}
					}
				}
			}
			MATA pA[CM_SPLIT * NKC * RB]; // (row block blk's at blk·NKC)
			[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
				[[unroll]] for (uint t = 0u; t < NST; ++t) {
					uint st = blk * NST + t;
					[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) {
						uint q = blk * RL + slotrow(i);
						float p = exp2(S[st][i] - muse[q]);
						lsum[q] += p;
						uint kc = t * CM_N + colOf[i];
						uint kw = blk * DROP_RW + slotrow(i) * DROP_WPR + (t * CM_N) / 32u; // (DROP_FW: kc's keep word in dw)
						if (DROP_COLS != 0u) {
							S[st][i] = drop_select(dw[kw], (t * CM_N) % 32u + coldelta(i), p);
						} else {
							S[st][i] = p * (DROP_FW != 0u ? drop_bit(dw[kw], kc) : drop_keep(sgr + blk * CM_M + lrow[slotrow(i)], kc));
						}
					}
					[[unroll]] for (uint j = 0u; j < CM_LEN; ++j) {
						CM_TO_A_P(pA, NKC, blk * NKC + t, j, S[st][aperm(j)])
					}
				}
			}
			[[unroll]] for (uint q = 0u; q < RB * RL; ++q) {
				l1[q] = l1[q] * alpha[q] + lsum[q];
			}
#if CM_SPLIT > 1
			[[unroll]] for (uint j = 0u; j < NOTH; ++j) {
				ACC pv = ACC(0.0);
				[[unroll]] for (uint t = 0u; t < NKC; ++t) {
					PV_PRODUCT(pv, pA, NKC, t, t, j)
				}
				O_ADD_TILE(O[j], pv, alpha[slotrow(i)])
			}
#else
			[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
				[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) {
					float a = alpha[blk * RL + slotrow(i)];
					[[unroll]] for (uint j = 0u; j < NOTH; ++j) {
						O[blk * NOTH + j][i] *= a;
					}
				}
			}
			[[unroll]] for (uint t = 0u; t < NKC; ++t) {
				[[unroll]] for (uint j = 0u; j < NOTH; ++j) {
					if (RB == 1u) {
						PV_PRODUCT(O[j], pA, NKC, t, t, JH0 + j)
					} else {
						// Row blocks: each V fragment feeds every block's MMA.
						MATB vB;
						coopMatLoad(vB, sKV, VOFF + (t * CM_K) * LDV4 + (JH0 + j) * (CM_N / 8u), LDV4, gl_CooperativeMatrixLayoutRowMajor);
						[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
							O[blk * NOTH + j] = coopMatMulAdd(pA[blk * NKC + t], vB, O[blk * NOTH + j]);
						}
					}
				}
			}
#endif
		} else {
			[[unroll]] for (uint t = 0u; t < NST; ++t) {
				coopMatStore(S[t], sS, sgr * LDS + t * CM_N, LDS, gl_CooperativeMatrixLayoutRowMajor);
			}
			subgroupMemoryBarrierShared();
			subgroupBarrier();
			[[unroll]] for (uint q = 0u; q < RPL; ++q) {
				uint row = rb + q * RSTEP;
				uint lim = row < sg_rows ? key_limit(r0 + sgr + row) : 0u;
				uint fst = row < sg_rows ? key_first(r0 + sgr + row) : 0u;
				uint sbase = (sgr + row) * LDS;
				float x[CPL];
				float mloc = NEG_INF;
				[[unroll]] for (uint j = 0u; j < CPL; ++j) {
					uint c = lr + LPR * j;
					uint key = c0 + c;
					float v = EXT != 0u ? ext_score(sS[sbase + c], r0 + sgr + row, key) : sS[sbase + c] * sl2;
					if (need_mask && (key >= lim || (EXT != 0u && key < fst))) {
						v = NEG_INF;
					}
					x[j] = v;
					mloc = max(mloc, v);
				}
				[[unroll]] for (uint o = LPR / 2u; o > 0u; o >>= 1u) {
					mloc = max(mloc, subgroupShuffleXor(mloc, o));
				}
				float mnew = max(m0[q], mloc);
				float muse = mnew == NEG_INF ? 0.0 : mnew;
				float alpha = exp2(m0[q] - muse);
				m0[q] = mnew;
				float lsum = 0.0;
				uint pbase = (sgr + row) * LDP;
				[[unroll]] for (uint j = 0u; j < CPL; ++j) {
					float p = exp2(x[j] - muse);
					lsum += p;
					CM_PUT_P(sP, pbase + lr + LPR * j, SP_N, p * drop_keep(sgr + row, lr + LPR * j))
				}
				l0[q] = l0[q] * alpha + lsum;
				if (lr == 0u) {
					sRow[sgr + row] = alpha;
				}
			}
			subgroupMemoryBarrierShared();
			subgroupBarrier();
#if CM_SPLIT > 1
			[[unroll]] for (uint j = 0u; j < NOTH; ++j) {
				ACC pv = ACC(0.0);
				[[unroll]] for (uint t = 0u; t < NKC; ++t) {
					MATA pA[CM_SPLIT];
					[[unroll]] for (uint pl = 0u; pl < CM_SPLIT; ++pl) {
						coopMatLoad(pA[pl], sP, pl * SP_N + sgr * LDP + t * CM_K, LDP, gl_CooperativeMatrixLayoutRowMajor);
					}
					PV_PRODUCT(pv, pA, 1u, 0u, t, j)
				}
				O_ADD_TILE(O[j], pv, sRow[sgr + rowOf[i]])
			}
#else
			[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) {
				float a = sRow[sgr + rowOf[i]];
				[[unroll]] for (uint j = 0u; j < NOTH; ++j) {
					O[j][i] *= a;
				}
			}
			[[unroll]] for (uint t = 0u; t < NKC; ++t) {
				MATA pA[1];
				coopMatLoad(pA[0], sP, sgr * LDP + t * CM_K, LDP, gl_CooperativeMatrixLayoutRowMajor);
				[[unroll]] for (uint j = 0u; j < NOTH; ++j) {
					PV_PRODUCT(O[j], pA, 1u, 0u, t, j)
				}
			}
#endif
		}
	}

	// Final normalisation O /= l and LSE = ln2·(m + log2 l).
	if (MODE == 1u) {
		float inv[RB * RL];
		[[unroll]] for (uint q = 0u; q < RB * RL; ++q) {
			float lt = l1[q];
			[[unroll]] for (uint bit = 0u; bit < 8u; ++bit) {
				if (((XORMASK >> bit) & 1u) != 0u) {
					lt += subgroupShuffleXor(lt, 1u << bit);
				}
			}
			// l ≥ 1 whenever the row saw a key (its max contributes 1).
			// (With dropout O = scale·Σ P·keep·V / l.)
			inv[q] = lt == 0.0 ? 0.0 : drop_scale() / lt;
			uint sr = q / RL * CM_M + lrow[q % RL];
			if ((lane & XORMASK) == 0u && sr < sg_rows && half_ == 0u) {
				lse_buf[lse_index(b, h, r0 + sgr + sr)] = lt == 0.0 ? NEG_INF : (m1[q] + log2(lt)) * LN2;
			}
		}
		[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
			[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) {
				float a = inv[blk * RL + slotrow(i)];
				[[unroll]] for (uint j = 0u; j < NOTH; ++j) {
					O[blk * NOTH + j][i] *= a;
				}
			}
		}
	} else {
		// Every lane has read the last tile's alpha from sRow before 1/l
		// overwrites it.
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		[[unroll]] for (uint q = 0u; q < RPL; ++q) {
			uint row = rb + q * RSTEP;
			float lt = l0[q];
			[[unroll]] for (uint o = LPR / 2u; o > 0u; o >>= 1u) {
				lt += subgroupShuffleXor(lt, o);
			}
			if (lr == 0u) {
				sRow[sgr + row] = lt == 0.0 ? 0.0 : drop_scale() / lt;
				if (row < sg_rows) {
					lse_buf[lse_index(b, h, r0 + sgr + row)] = lt == 0.0 ? NEG_INF : (m0[q] + log2(lt)) * LN2;
				}
			}
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) {
			float a = sRow[sgr + rowOf[i]];
			[[unroll]] for (uint j = 0u; j < NOTH; ++j) {
				O[j][i] *= a;
			}
		}
	}

	// O → storage type (fp32: as it is) → shared → global, OSG subgroups'
	// rows at a time (16-bit: all at once).
	barrier(); // all subgroups are done with the K/V tiles
	const uint OCH = DVP / CM_OUT_EL; // units per O row
	for (uint g = 0u; g < NSG; g += OSG) {
		uint gr = g / NSPL * CM_M * RB; // (the first row of subgroup g)
		if (sg >= g && sg < g + OSG) {
			[[unroll]] for (uint blk = 0u; blk < RB; ++blk) {
				[[unroll]] for (uint j = 0u; j < NOTH; ++j) {
					CM_STORE_ACC(O[blk * NOTH + j], sKV, (sgr + blk * CM_M - gr) * LDO4 + (JH0 + j) * (CM_N / CM_OUT_EL), LDO4)
				}
			}
		}
		barrier();
		for (uint e = tid; e < OROWS * OCH; e += WG) {
			uint r = e / OCH;
			uint c4 = e - r * OCH;
			if (gr + r < rows) {
				store_o(b, r0 + gr + r, h, c4, sKV[r * LDO4 + c4]);
			}
		}
		if (g + OSG < NSG) {
			barrier(); // the next subgroups' rows overwrite these
		}
	}
}
