// ext.glsl: the options of spec.Ext for the attention kernels — sliding
// window, softcap, ALiBi, per-sequence key counts, dropout and an
// additive bias. Include it after attn_params.glsl, with EXT_BINDING
// defined as the binding of the Ext buffer; a kernel that scores (calls
// ext_score) also defines BIAS_BINDING (the bias; BIAS_BINDING + 1 is
// its block summary), and the dQ kernels DBIAS_BINDING (where they write
// dS for dBias). It defines the masking helpers the kernels call
// (key_first, key_limit, query_first, query_limit, bias_next_key_tile,
// bias_next_query_tile) and the score helpers (ext_score, ext_dsoft,
// dbias_store).
//
// Specialization constant 8, EXT: 0 builds the plain kernel (the helpers
// reduce to pc.mask's causal rule, the Ext buffer is bound but never
// read); otherwise bit 0 (EXT_ON) builds the extended kernel, which reads
// its options from the Ext buffer, and bits 1 (EXT_ON_SOFTCAP) and 2
// (EXT_ON_ALIBI) compile in the score terms the call uses, bit 3
// (EXT_ON_DROPOUT) dropout, bit 4 (EXT_ON_BIAS) the bias with bit 5
// (EXT_ON_BIAS_F32) set when it is stored as float32 (else as STYPE),
// and bit 6 (EXT_ON_DBIAS) the dQ kernels' dS stores with bit 7
// (EXT_ON_DBIAS_F32) set when their target is float32 — a kernel without
// them carries none of their code (shaders.ExtSpec); bit 8
// (EXT_ON_PLAIN_BOUNDS, the forward kernels' only: shaders.ExtSpecFor)
// says the call's rows see the keys pc.mask gives them, as in the plain
// kernel: no window but the causal one, no key counts, no packed
// sequences (EXT_BOUNDS below). The Ext buffer holds the per-call values
// that do not fit the push-constant block (it already fills the 128
// bytes every Vulkan device offers in the addressed build), written by
// the call before its first dispatch (shaders.ExtWords mirrors the
// layout):
//   word 0 left, 1 right   window (int32; −1 unbounded; causal: right 0)
//   word 2 flags           EXT_* below
//   word 3 softcap c       (float32; used with EXT_SOFTCAP)
//   word 4 seqused offset  (words; [B] int32 key counts, EXT_SEQUSED)
//   word 5 slopes offset   (words; [Hq] or [B, Hq] float32, EXT_ALIBI)
//   word 6 cu offset       (words; CuQ then CuK, B+1 uint32 each,
//                           EXT_VARLEN)
//   word 7 Tq              (the packed query rows, EXT_VARLEN)
//   words 8, 9 seed        (dropout: the Philox key, low word first)
//   word 10 offset         (dropout: the counter's last word)
//   word 11 threshold      (dropout: a draw below it drops; 0: none)
//   word 12 first sequence (dropout: added to b in the counter)
//   words 13–15            bias strides: batch, head, row (elements; 0
//                          broadcasts; keys contiguous)
//   words 16–18            dS target strides of the dQ kernels (the
//                          dBias, or a float32 [P,Nq,Nk] scratch that
//                          bias_reduce folds into it: word 16 unused)
//   words 19–21            bias summary strides: batch, head, row block
//                          (words; bias_summary.comp)
//   words 22–24            dBias strides (bias_reduce.comp)
//   word 25 P              the scratch's planes (0: no scratch, the dQ
//                          kernels store into dBias): plane (b, h) at
//                          q mod P (shaders.DSChunks)
//   word 26 order          the planes' order: 0 q = b·Hq + h, 1 q = h·B + b
//   word 27 head group     the grid order of the kernels whose workgroups
//                          take query tiles (flash_cm, bwd_cm_dq;
//                          grid_tile): G > 1 runs the workgroups of G
//                          consecutive heads of one tile one after
//                          another (0, 1: a head's tiles first)
//   word 28 KV head group  the same for bwd_cm_dkdv (key tiles, KV heads)
// The host stores a window side wider than Nq + Nk as −1, so the int32
// arithmetic below cannot overflow (CheckProblem bounds Nq + Nk).
//
// A kernel calls ext_begin(b) once it knows its sequence (instead of
// seq_begin: it calls it) and ext_head(b, h) for each query head it works
// on (before the score helpers), both in uniform control flow; the state
// they set is per invocation. With EXT_VARLEN the sequence's rows are
// seq_nq and seq_nk (attn_params.glsl) — fewer than pc.Nq and pc.Nk, the
// longest — so the kernels bound rows and keys by those, and a workgroup
// whose tile lies past them has nothing to do.

layout(constant_id = 8) const uint EXT = 0u;
#define EXT_ON 1u
#define EXT_ON_SOFTCAP 2u
#define EXT_ON_ALIBI 4u
#define EXT_ON_DROPOUT 8u
#define EXT_ON_BIAS 16u
#define EXT_ON_BIAS_F32 32u
#define EXT_ON_DBIAS 64u
#define EXT_ON_DBIAS_F32 128u
#define EXT_ON_PLAIN_BOUNDS 256u
layout(std430, binding = EXT_BINDING) readonly buffer ExtBuf { uint ext_buf[]; };

// EXT_BOUNDS: the extended kernel's own bounds — the window, key counts
// and packed sequences read from the Ext buffer. Without them (a plain
// kernel, or EXT_ON_PLAIN_BOUNDS) every sequence has pc.Nq queries and
// pc.Nk keys and pc.mask says which each row sees: the bounds below are
// the plain kernel's, from push constants, and the loops keep no
// per-invocation copy of them. Measured on an NVIDIA H200 (fp16, N
// 16384, causal; bench/NOTES.md): flash_cm's own bounds alone (key
// counts on plain's tile) cost it 3–7%, and at d 128 its softcap and
// ALiBi variants spilled registers; with EXT_ON_PLAIN_BOUNDS both run
// 5–6% faster there and ALiBi 3.5% faster at d 64, but the backward
// kernels ran 0–4.5% slower with it, so they keep their own.
const uint EXT_BOUNDS_ON = (EXT != 0u ? 1u : 0u) * ((EXT & EXT_ON_PLAIN_BOUNDS) == 0u ? 1u : 0u); // (a product: see SOFTCAP_POLY_ON)
const bool EXT_BOUNDS = EXT_BOUNDS_ON != 0u;

#define EXT_BOTTOM_RIGHT 1u
#define EXT_SOFTCAP 2u
#define EXT_ALIBI 4u
#define EXT_ALIBI_BATCH 8u
#define EXT_SEQUSED 16u
#define EXT_VARLEN 32u
#define EXT_DROPOUT 64u

int ext_nk = 0;          // keys of the sequence (Keys(b))
int ext_off = 0;         // row i's diagonal is key i + ext_off
int ext_left = -1;       // window (−1 unbounded)
int ext_right = -1;
float ext_tk = 0.0;      // softcap: scale·2·log2e/c (tanh2's argument per unit of s)
float ext_tn = 0.0;      // softcap: scale/c (tanh's argument per unit of s)
float ext_tc = 0.0;      // softcap: c·log2e
float ext_poly_lim = 0.0; // softcap: TANH_POLY_MAX·c/scale, the |s| of tanh_poly's range
#ifdef EXT_SCORE_ONLY
vec4 ext_cpl = vec4(0.0); // softcap (SOFTCAP_POLY's tiles): ext_capped's coefficients 0 … 3
vec3 ext_cph = vec3(0.0); // and 4 … 6
void ext_capped_begin(); // (below, with the softcap)
#endif
bool ext_poly = false;    // softcap: take tanh_poly (EXT_SOFTCAP_POLY, below)
float ext_slope = 0.0;   // ALiBi slope·log2e of the current head (0: none)
uint ext_bh = 0u;        // dropout: (first sequence + b)·Hq + h
uvec2 ext_seed = uvec2(0u); // dropout: the Philox key
uint ext_ctr3 = 0u;      // dropout: the counter's last word (offset)
uint ext_thr = 0u;       // dropout: the 8-bit threshold (1 … 255)
uint ext_bias0 = 0u;     // bias: element offset of (b, h, 0, 0)
uint ext_brow = 0u;      // bias: row stride (elements)
uint ext_dbias0 = 0u;    // dS target: element offset of (b, h, 0, 0)
uint ext_sum0 = 0u;      // bias summary: word offset of (b, h, 0, 0)

void ext_begin(uint b) {
	seq_begin(b);
	if (EXT == 0u) {
		return;
	}
	uint flags = ext_buf[2];
	if (EXT_BOUNDS && (flags & EXT_VARLEN) != 0u) {
		uint cq = ext_buf[6] + b;    // CuQ[b]
		uint ck = cq + pc.B + 1u;    // CuK[b]
		seq_q0 = ext_buf[cq];
		seq_nq = ext_buf[cq + 1u] - seq_q0;
		seq_k0 = ext_buf[ck];
		seq_nk = ext_buf[ck + 1u] - seq_k0;
		seq_lse0 = seq_q0;
		seq_lse_h = ext_buf[7];
	}
	ext_nk = EXT_BOUNDS && (flags & EXT_SEQUSED) != 0u ? int(ext_buf[ext_buf[4] + b]) : int(seq_nk);
	ext_off = (flags & EXT_BOTTOM_RIGHT) != 0u ? ext_nk - int(seq_nq) : 0;
	ext_left = EXT_BOUNDS ? int(ext_buf[0]) : -1;
	ext_right = EXT_BOUNDS ? int(ext_buf[1]) : -1;
	float cap = (flags & EXT_SOFTCAP) != 0u ? uintBitsToFloat(ext_buf[3]) : 0.0;
	ext_tk = cap > 0.0 ? pc.scale * (2.0 * LOG2E) / cap : 0.0;
	ext_tn = cap > 0.0 ? pc.scale / cap : 0.0;
	ext_tc = cap * LOG2E;
	ext_poly_lim = cap > 0.0 ? TANH_POLY_MAX * cap / pc.scale : 0.0;
#ifdef EXT_SCORE_ONLY
	ext_capped_begin();
#endif
	ext_slope = 0.0;
	if ((EXT & EXT_ON_DROPOUT) != 0u) {
		ext_seed = uvec2(ext_buf[8], ext_buf[9]);
		ext_ctr3 = ext_buf[10];
		ext_thr = ext_buf[11];
	}
}

void ext_head(uint b, uint h) {
	if (EXT == 0u) {
		return;
	}
	uint flags = ext_buf[2];
	ext_slope = 0.0;
	ext_bh = (ext_buf[12] + b) * pc.Hq + h;
	if ((flags & EXT_ALIBI) != 0u) {
		uint idx = (flags & EXT_ALIBI_BATCH) != 0u ? b * pc.Hq + h : h;
		ext_slope = uintBitsToFloat(ext_buf[ext_buf[5] + idx]) * LOG2E;
	}
	if ((EXT & EXT_ON_BIAS) != 0u) {
		ext_bias0 = b * ext_buf[13] + h * ext_buf[14];
		ext_brow = ext_buf[15];
		uint planes = ext_buf[25];
		uint q = ext_buf[26] != 0u ? h * pc.B + b : b * pc.Hq + h;
		ext_dbias0 = planes != 0u ? (q % planes) * ext_buf[17] : b * ext_buf[16] + h * ext_buf[17];
		ext_sum0 = b * ext_buf[19] + h * ext_buf[20];
	}
}

// grid_tile is the workgroup's (tile, head): gl_WorkGroupID.xy, or with
// a head group G > 1 in Ext word w (27 or 28; G a divisor of the grid's
// y) the tile and head of its place in the order that runs the G heads of
// a group one after another for each tile, the groups in order — so that
// workgroups reading the same rows of a bias broadcast over heads run
// together and read them once from the device's cache. nx is the whole
// grid's x (the kernel's tiles): a call split into submissions records
// parts of the grid (a base and fewer workgroups: gl_NumWorkGroups is the
// part's), and the map, a bijection of the whole grid onto itself (each z
// apart) on its absolute workgroup IDs, keeps every tile once over the
// parts. A launch that runs a part of its grid as a grid of its own (the
// dQ kernel's dBias chunks) takes no group.
uvec2 grid_tile(uint w, uint nx) {
	uvec2 id = gl_WorkGroupID.xy;
	uint g = EXT != 0u ? ext_buf[w] : 0u;
	if (g <= 1u) {
		return id;
	}
	uint span = nx * g; // workgroups per head group
	uint l = id.x + nx * id.y;
	uint hg = l / span;
	uint rem = l - hg * span;
	uint x = rem / g;
	return uvec2(x, hg * g + (rem - x * g));
}

// read_keys is how many of the sequence's leading key rows a kernel may
// read: seq_nk, or with EXT_BOUNDS its key count (SeqUsedK), so that
// padding past it — which may hold anything, NaN included — is never
// loaded (a masked key's probability is 0, but 0·NaN is NaN).
uint read_keys() { return EXT_BOUNDS ? uint(ext_nk) : seq_nk; }

// The bias (EXT_ON_BIAS; spec.Bias): element (i, j) of the current
// (b, h) is bias_f32 or bias_st at ext_bias0 + i·row stride + j (two
// views of one binding; EXT_ON_BIAS_F32 picks one). Its summary (written
// by bias_summary.comp before the kernel) has a bit per block of 16 rows
// and 16 keys: set when some element of the block is not −Inf; the
// kernels walk their tiles with bias_next_key_tile / bias_next_query_tile
// and so never visit a tile the bias hides entirely. dbias_store writes
// dS of (i, j) to the dQ kernels' dS target (DBIAS_BINDING; two views).
#ifdef BIAS_BINDING
layout(std430, binding = BIAS_BINDING) readonly buffer BiasF32 { float bias_f32[]; };
layout(std430, binding = BIAS_BINDING) readonly buffer BiasST { STYPE bias_st[]; };
layout(std430, binding = BIAS_BINDING + 1) readonly buffer BiasSum { uint bias_sum[]; };

// ext_bias is bias element (i, j) of the current (b, h), as float; 0 for
// a row past the sequence's or a key past its key count (as dbias_store:
// such elements are masked or discarded, and the bias is never read
// outside its extent — a tile's tail rows and keys included).
float ext_bias(uint i, uint j) {
	if (i >= seq_nq || j >= read_keys()) {
		return 0.0;
	}
	uint x = ext_bias0 + i * ext_brow + j;
	return (EXT & EXT_ON_BIAS_F32) != 0u ? bias_f32[x] : LOAD(bias_st[x]);
}

// bias_word is the OR of summary word w over row blocks rb0 … rb1 of the
// plane at word sum0: eight independent loads at a time, so that a scan
// pays one memory latency per eight row blocks.
uint bias_word(uint sum0, uint rb0, uint rb1, uint w) {
	uint rs = ext_buf[21]; // words per row block (0: one row shared by every query)
	uint m = 0u;
	for (uint rb = rb0; rb <= rb1; rb += 8u) {
		uint t[8];
		[[unroll]] for (uint q = 0u; q < 8u; ++q) {
			t[q] = rb + q <= rb1 ? bias_sum[sum0 + (rb + q) * rs + w] : 0u;
		}
		[[unroll]] for (uint q = 0u; q < 8u; ++q) {
			m |= t[q];
		}
	}
	return m;
}

// bias_kw, bias_km: the summary word bias_next_key_tile read last (its
// index and its bits over the row range): a word covers 512 keys, several
// tiles, and each kernel walks one row range, so the walk loads a word
// once, not once per tile.
uint bias_kw = 0xFFFFFFFFu;
uint bias_km = 0u;

// bias_next_key_tile is the first key tile kt' ≥ kt (tiles of bc keys,
// kt' < ntiles; else ntiles) in which some element of query rows r0 … r1
// of the current (b, h) is not −Inf — the tile itself without a bias.
// One summary word covers 512 keys, so a run of hidden tiles costs one
// load (of each row block) per 512 keys, and a walk over visible tiles
// as much (the word is kept: bias_kw). Call it with workgroup-uniform
// arguments, the same rows r0 … r1 at every call of a kernel: its answer
// is uniform, and the kernels walk their key tiles with it (no K/V loads
// for a tile the bias hides).
uint bias_next_key_tile(uint r0, uint r1, uint kt, uint ntiles, uint bc) {
	if ((EXT & EXT_ON_BIAS) == 0u) {
		return kt;
	}
	uint rb0 = r0 >> 4u;
	uint rb1 = ext_buf[21] == 0u ? rb0 : r1 >> 4u;
	uint kb = (kt * bc) >> 4u;
	uint kbend = min((ntiles * bc + 15u) >> 4u, (read_keys() + 15u) >> 4u);
	while (kb < kbend) {
		uint w = kb >> 5u;
		if (w != bias_kw) {
			bias_km = bias_word(ext_sum0, rb0, rb1, w);
			bias_kw = w;
		}
		uint m = bias_km & (0xFFFFFFFFu << (kb & 31u));
		if (m != 0u) {
			return min(max(kt, (((w << 5u) + uint(findLSB(m))) << 4u) / bc), ntiles);
		}
		kb = (w + 1u) << 5u;
	}
	return ntiles;
}

// bias_qs, bias_qr, bias_qm: the window of row blocks bias_next_query_tile
// read last — the plane's summary offset, its first row block and a bit
// per row block (BIAS_QW of them) set where some key of the caller's
// c0 … c1 is not −Inf. A kernel walks one key range over query tiles in
// order, a step at a time, and would wait for a summary load at every
// step; it loads a window's words at once and then steps through its
// bits.
const uint BIAS_QW = 8u;
uint bias_qs = 0xFFFFFFFFu;
uint bias_qr = 0u;
uint bias_qm = 0u;

// bias_next_query_tile is the first query tile qt' ≥ qt (tiles of br
// rows, qt' < nqt; else nqt) of head h of sequence b in which some
// element of keys c0 … c1 (c1 − c0 < 512) is not −Inf — qt itself
// without a bias. Row blocks are read BIAS_QW per memory latency and
// kept (bias_qm): call it with the same c0, c1 and nqt at every call of a
// kernel (a window keeps no bits past the rows nqt covers).
// Workgroup-uniform arguments give a uniform answer.
uint bias_next_query_tile(uint b, uint h, uint qt, uint nqt, uint br, uint c0, uint c1) {
	if ((EXT & EXT_ON_BIAS) == 0u) {
		return qt;
	}
	if (qt >= nqt) {
		return nqt; // (no tile left: c1 may precede c0, the tile's keys empty)
	}
	uint sum0 = b * ext_buf[19] + h * ext_buf[20];
	uint rs = ext_buf[21];
	uint rb = rs == 0u ? 0u : (qt * br) >> 4u;
	uint rbend = rs == 0u ? 1u : min((nqt * br + 15u) >> 4u, (seq_nq + 15u) >> 4u);
	while (rb < rbend) {
		if (sum0 != bias_qs || rb < bias_qr || rb >= bias_qr + BIAS_QW) {
			uint kb0 = c0 >> 4u, kb1 = c1 >> 4u;
			uint w0 = kb0 >> 5u, w1 = kb1 >> 5u;
			uint hi = 0xFFFFFFFFu >> (31u - (kb1 & 31u));
			uint m0 = (0xFFFFFFFFu << (kb0 & 31u)) & (w0 == w1 ? hi : 0xFFFFFFFFu);
			uint m1 = w0 == w1 ? 0u : hi;
			uint t[BIAS_QW];
			[[unroll]] for (uint q = 0u; q < BIAS_QW; ++q) {
				uint x = sum0 + (rb + q) * rs;
				t[q] = rb + q < rbend ? (bias_sum[x + w0] & m0) | (bias_sum[x + w1] & m1) : 0u;
			}
			bias_qs = sum0;
			bias_qr = rb;
			bias_qm = 0u;
			[[unroll]] for (uint q = 0u; q < BIAS_QW; ++q) {
				bias_qm |= t[q] != 0u ? 1u << q : 0u;
			}
		}
		uint m = bias_qm >> (rb - bias_qr);
		if (m != 0u) {
			return rs == 0u ? qt : min(max(qt, ((rb + uint(findLSB(m))) << 4u) / br), nqt);
		}
		rb = bias_qr + BIAS_QW;
	}
	return nqt;
}
#endif


#ifdef DBIAS_BINDING
layout(std430, binding = DBIAS_BINDING) writeonly buffer DBiasF32 { float dbias_f32[]; };
layout(std430, binding = DBIAS_BINDING) writeonly buffer DBiasST { STYPE dbias_st[]; };

// dbias_store writes v = dS of row i, key j of the current (b, h) to the
// dS target (EXT_ON_DBIAS; nothing for rows past the sequence's or keys
// past its key count, whose dBias the call zeroed).
void dbias_store(uint i, uint j, float v) {
	if ((EXT & EXT_ON_DBIAS) == 0u || i >= seq_nq || j >= read_keys()) {
		return;
	}
	uint x = ext_dbias0 + i * ext_buf[18] + j;
	if ((EXT & EXT_ON_DBIAS_F32) != 0u) {
		dbias_f32[x] = v;
	} else {
		dbias_st[x] = STORE(v);
	}
}
#endif

// key_first: query row i sees keys key_first(i) … key_limit(i)−1 (mirrors
// spec.Problem.KeyRange); both are non-decreasing in i, and key_first(i)
// ≤ key_limit(i).
uint key_first(uint i) {
	if (!EXT_BOUNDS || ext_left < 0) {
		return 0u;
	}
	return uint(clamp(int(i) + ext_off - ext_left, 0, ext_nk));
}

uint key_limit(uint i) {
	if (EXT_BOUNDS) {
		int hi = ext_right < 0 ? ext_nk : min(int(i) + ext_off + ext_right + 1, ext_nk);
		return uint(max(hi, int(key_first(i))));
	}
	return mask_key_limit(i);
}

// query_first … query_limit(j)−1 are the query rows that see key j
// (query_first(j) ≥ query_limit(j) when none; both may exceed seq_nq).
uint query_first(uint j) {
	if (EXT_BOUNDS) {
		if (int(j) >= ext_nk) {
			return seq_nq;
		}
		return ext_right < 0 ? 0u : uint(max(int(j) - ext_off - ext_right, 0));
	}
	return mask_query_first(j);
}

uint query_limit(uint j) {
	if (!EXT_BOUNDS || ext_left < 0) {
		return seq_nq;
	}
	return uint(clamp(int(j) + ext_left - ext_off + 1, 0, int(seq_nq)));
}

// The softcap's tanh: ext_softcap(s) is t = tanh(scale·s/c) of raw
// product s. In fp32 arithmetic (tanh2: a few fp32 ulps of 1) except in
// the cooperative-matrix kernels' bf16 builds (the kernels define
// EXT_HALF_TANH; their devices have shaderFloat16, vkattn.cmLayout), which
// take it in fp16: t within about 2^-11 of tanh — 8 times finer than
// bf16's own resolution, and the fp16 range is no limit (tanh saturates
// at |x| ≈ 9; beyond fp16's range x converts to ±Inf, whose tanh is ±1
// on NVIDIA's driver and in Mesa's lowering — GLSL leaves it open) — one fp16
// operation for two elements on NVIDIA GPUs, where tanh2's exp2 and
// division cost several times its issue slots (bench/NOTES.md). fp16 and
// fp32 storage keep tanh2: with fp16 storage the fp16 tanh's error
// measured 3 times PyTorch's own fp16 error in the backward's gradients,
// beyond the suite's bound of 2.
// ext_softcap2 takes two products at once.
#if defined(EXT_HALF_TANH) && defined(STORAGE_BF16)
#define EXT_TANH16 1
#endif
// EXT_TILE_PASS: EXT_SOFTCAP_TILE (below) takes the tanh of a tile's
// products ahead of the score loop — with EXT_TANH16, and in kernels that
// define EXT_SOFTCAP_PASS (the backward's: their loops read the tanh
// twice, for the score and for its derivative). A kernel that defines
// EXT_HALF_TANH or EXT_SOFTCAP_PASS must pass every tile its ext_score_d
// and ext_dsoft_t read through EXT_SOFTCAP_TILE: they take its values as
// tanh.
#if defined(EXT_TANH16) || defined(EXT_SOFTCAP_PASS)
#define EXT_TILE_PASS 1
#endif
// EXT_SOFTCAP_POLY (a kernel defines it; not with EXT_TANH16): where a
// kernel has found every product of a tile within tanh_poly's range
// (SOFTCAP_SMALL) it sets ext_poly for that tile's scores, and
// ext_softcap takes tanh_poly instead of tanh2 — FMAs instead of an exp2
// and a division per element, as accurate; other tiles (and NaN or ±Inf
// beyond the range) take tanh2 (in flash_cm's fp16 and fp32 builds
// ext_capped, below, takes both with the constants folded into the
// score). SOFTCAP_POLY is whether the kernel has
// it: at 64 < D ≤ 128, without a bias (whose staging loop would run in
// two copies, with subgroup barriers in each). Measured on an NVIDIA H200 (flash_cm, fp16, N
// 16384, causal; bench/NOTES.md): d 128 5.66–5.76 → 5.49 ms, but d 64
// 6.38–6.40 → 6.80, on its tanh2 tiles as well (the loops' second copy);
// d 256 was not timed.
#if defined(EXT_SOFTCAP_POLY) && !defined(EXT_TANH16)
const uint SOFTCAP_POLY_ON = ((EXT & EXT_ON_SOFTCAP) != 0u ? 1u : 0u) * ((EXT & EXT_ON_BIAS) == 0u ? 1u : 0u) *
	(D > 64u ? 1u : 0u) * (D <= 128u ? 1u : 0u); // (as a product: glslang mis-built the chain of &&)
const bool SOFTCAP_POLY = SOFTCAP_POLY_ON != 0u;
#else
const bool SOFTCAP_POLY = false;
#endif
float ext_softcap(float s) {
#ifdef EXT_TANH16
	return float(tanh(float16_t(s * ext_tn)));
#else
	if (SOFTCAP_POLY && ext_poly) {
		return tanh_poly(s * ext_tn);
	}
	return tanh2(s * ext_tk);
#endif
}

// SOFTCAP_SMALL(S, NT, OUT): OUT = whether every product of the
// subgroup's NT accumulators S lies within tanh_poly's range
// (subgroup-uniform; max may keep or drop a NaN, and either way the NaN
// stays NaN: tanh_poly and tanh2 both keep it).
#define SOFTCAP_SMALL(S, NT, OUT) \
	{ \
		float am_ = 0.0; \
		[[unroll]] for (uint t_ = 0u; t_ < (NT); ++t_) { \
			[[unroll]] for (uint i_ = 0u; i_ < CM_LEN; ++i_) { \
				am_ = max(am_, abs(S[t_][i_])); \
			} \
		} \
		OUT = subgroupAll(am_ <= ext_poly_lim); \
	}

vec2 ext_softcap2(vec2 s) {
#ifdef EXT_TANH16
	return vec2(tanh(f16vec2(s * ext_tn)));
#else
	return vec2(tanh2(s.x * ext_tk), tanh2(s.y * ext_tk));
#endif
}

// ext_capped(s) is the softcapped score c·log2e·tanh(scale·s/c) of raw
// product s with the constants folded — tanh2c, or on the tiles
// SOFTCAP_SMALL admits tanh_poly's polynomial in s itself (coefficient k,
// in ext_cpl and ext_cph, c·log2e·(scale/c)^(2k+1)·TANH_Pk: s² and seven
// FMA-unit operations where tanh_poly and the products around it take
// ten) — in the kernels that define EXT_SCORE_ONLY (a forward: no softcap
// derivative, which the backward's loops read from the same tanh as the
// score) and have SOFTCAP_POLY. Measured on an NVIDIA H200 (flash_cm, fp16, N 16384,
// causal; bench/NOTES.md): d 128 2.5–3% less time on the polynomial's
// tiles, 1–3% on tanh2c's; at d 64 (no SOFTCAP_POLY) tanh2c alone took
// 1–1.5% more than ext_tc·tanh2, which those kernels keep.
#ifdef EXT_SCORE_ONLY
void ext_capped_begin() {
	if (SOFTCAP_POLY) {
		float tn2 = ext_tn * ext_tn;
		float w[7]; // c·log2e·(scale/c)^(2k+1)
		w[0] = ext_tc * ext_tn;
		[[unroll]] for (uint k = 1u; k < 7u; ++k) {
			w[k] = w[k - 1u] * tn2;
		}
		ext_cpl = vec4(w[0], w[1], w[2], w[3]) * vec4(TANH_P0, TANH_P1, TANH_P2, TANH_P3);
		ext_cph = vec3(w[4], w[5], w[6]) * vec3(TANH_P4, TANH_P5, TANH_P6);
		// The last coefficient carries (scale/c)^13: a cap far above the
		// scale (at d 128 from c ≈ 68) takes it below fp32's normal range,
		// where it loses its precision or flushes to 0, and one far below
		// it (c below about scale/1000) past fp32's range, where a product
		// of 0 would meet Inf. Then no tile takes the polynomial (tanh2c
		// everywhere); 2^-126 is the smallest normal fp32.
		float top = abs(ext_cph.z);
		if (!(top >= uintBitsToFloat(0x00800000u)) || isinf(top)) {
			ext_poly_lim = -1.0;
		}
	}
}

float ext_capped(float s) {
	if (SOFTCAP_POLY && ext_poly) {
		float s2 = s * s;
		float p = fma(s2, ext_cph.z, ext_cph.y);
		p = fma(s2, p, ext_cph.x);
		p = fma(s2, p, ext_cpl.w);
		p = fma(s2, p, ext_cpl.z);
		p = fma(s2, p, ext_cpl.y);
		p = fma(s2, p, ext_cpl.x);
		return s * p;
	}
	return tanh2c(s * ext_tk, ext_tc);
}
#endif

float ext_tile_tanh(float v) {
#ifdef EXT_TILE_PASS
	return v;
#else
	return ext_softcap(v);
#endif
}

// ext_alibi_dist is ALiBi's distance |i + off − j| = |a − cc|, split by
// the caller so that its element loop converts no integer per element
// (NVIDIA GPUs issue an int-to-float conversion at the special functions'
// rate, 16 a clock per SM against fp32 arithmetic's 128): a is the part
// the loop keeps per row (per key in the dK/dV kernel, which takes −(i +
// off − j)), whose float(a) + 2^23 the compiler converts once per row, and
// cc (0 … 2^23−1) the part that varies along the loop's tile, whose 2^23 +
// cc is the bits of 2^23 with cc as the mantissa. Exact while |a| < 2^23;
// beyond, within an fp32 ulp or two (CheckProblem keeps Nq + Nk below 2^30),
// as float(i + off − j) itself rounds from 2^24 on.
float ext_alibi_dist(int a, uint cc) { return abs((float(a) + 8388608.0) - uintBitsToFloat(cc | 0x4B000000u)); }

// ext_score_d is the score in log2 units from v, the product s as
// EXT_SOFTCAP_TILE leaves it (below: its softcap's tanh t = ext_softcap(s)
// with EXT_TILE_PASS, else s itself), and dist, ALiBi's |i + off − j| for
// query row i and key j (ext_alibi_dist; read only with ALiBi): z =
// scale·s, or c·t with a softcap, times log2e, minus slope·log2e·dist,
// plus bias·log2e (−Inf where the bias x of (i, j) is −Inf, whatever z:
// the key is hidden), each term compiled in only when EXT asks for it. The plain kernel's is
// scale·log2e·s (kernels keep that product as sl2). x is the bias value,
// already loaded: the coopmat kernels' MODE 1 loops load their
// components' values before issuing the products, so that the loads'
// latency overlaps the MMAs (the backward kernels: BIAS_FRAG; flash_cm
// stages them through shared memory: bias_stage.glsl), pass their tiles
// through EXT_SOFTCAP_TILE and then call ext_score_d and ext_dsoft_t.
// ext_score_t takes row i and key j instead of dist; ext_score takes the
// raw product and loads x itself (ext_score_b: the raw product and x).
float ext_score_d(float v, float dist, float x) {
	float z;
	if ((EXT & EXT_ON_SOFTCAP) != 0u) {
#if defined(EXT_SCORE_ONLY) && !defined(EXT_TILE_PASS)
		z = SOFTCAP_POLY ? ext_capped(v) : ext_tc * ext_tile_tanh(v);
#else
		z = ext_tc * ext_tile_tanh(v);
#endif
	} else {
		z = v * (pc.scale * LOG2E);
	}
	if ((EXT & EXT_ON_ALIBI) != 0u) {
		z = fma(-ext_slope, dist, z);
	}
	if ((EXT & EXT_ON_BIAS) != 0u) {
		z = x == NEG_INF ? NEG_INF : fma(x, LOG2E, z);
	}
	return z;
}

float ext_score_t(float v, uint i, uint j, float x) {
	float dist = 0.0;
	if ((EXT & EXT_ON_ALIBI) != 0u) {
		dist = abs(float(int(i) + ext_off - int(j)));
	}
	return ext_score_d(v, dist, x);
}

// ext_tile_v is v for ext_score_t and ext_dsoft_t from raw product s (as
// EXT_SOFTCAP_TILE makes it), ext_tile_tanh the softcap's tanh from v.
float ext_tile_v(float s) {
#ifdef EXT_TILE_PASS
	return (EXT & EXT_ON_SOFTCAP) != 0u ? ext_softcap(s) : s;
#else
	return s;
#endif
}

float ext_score_b(float s, uint i, uint j, float x) { return ext_score_t(ext_tile_v(s), i, j, x); }

float ext_score(float s, uint i, uint j) {
#ifdef BIAS_BINDING
	if ((EXT & EXT_ON_BIAS) != 0u) {
		return ext_score_b(s, i, j, ext_bias(i, j));
	}
#endif
	return ext_score_b(s, i, j, 0.0);
}

// EXT_SOFTCAP_TILE(S, NT): with a softcap and EXT_TILE_PASS, replaces
// every component of accumulators S[0] … S[NT−1] — raw products — by its
// tanh, two at a time (ext_softcap2), for ext_score_d and ext_dsoft_t;
// nothing otherwise (they take the raw products and tanh2 each: with
// fp32's tanh the pass ran flash_cm's fp16 forward up to 3% slower on an
// NVIDIA H200, and the backward 2–3% faster at d 64).
#ifdef EXT_TILE_PASS
#define EXT_TILE_PASS_ON 1u
#else
#define EXT_TILE_PASS_ON 0u
#endif
#define EXT_SOFTCAP_TILE(S, NT) \
	if ((EXT & EXT_ON_SOFTCAP) != 0u && EXT_TILE_PASS_ON != 0u) { \
		[[unroll]] for (uint t_ = 0u; t_ < NT; ++t_) { \
			[[unroll]] for (uint i_ = 0u; i_ + 1u < CM_LEN; i_ += 2u) { \
				vec2 th_ = ext_softcap2(vec2(S[t_][i_], S[t_][i_ + 1u])); \
				S[t_][i_] = th_.x; \
				S[t_][i_ + 1u] = th_.y; \
			} \
			if (CM_LEN % 2u != 0u) { \
				S[t_][CM_LEN - 1u] = ext_softcap(S[t_][CM_LEN - 1u]); \
			} \
		} \
	}

#ifdef BIAS_BINDING
// BIAS_FRAG(BV, NT, ROW, COL): with a bias, BV[t·CM_LEN + i] = the bias of
// component i of accumulator t (t < NT) of a MODE 1 kernel, whose query
// row and key are the expressions ROW and COL of t and i; nothing without
// one (BV then has one element, 0, which BIAS_AT reads). Declare BV with
// BIAS_FRAG_N(NT) elements. The backward kernels take their values so
// (bias_stage.glsl says why).
#define BIAS_FRAG(BV, NT, ROW, COL) \
	if ((EXT & EXT_ON_BIAS) != 0u) { \
		[[unroll]] for (uint t = 0u; t < NT; ++t) { \
			[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) { \
				BV[t * CM_LEN + i] = ext_bias(ROW, COL); \
			} \
		} \
	} else { \
		BV[0] = 0.0; \
	}
#define BIAS_FRAG_N(NT) ((EXT & EXT_ON_BIAS) != 0u ? (NT) * CM_LEN : 1u)
#define BIAS_AT(BV, t, i) BV[(EXT & EXT_ON_BIAS) != 0u ? (t) * CM_LEN + (i) : 0u]
#endif

// ext_dsoft_t is the softcap's derivative d(c·tanh(z/c)) / dz = 1 − t²
// at z = scale·s, from v as ext_score_d takes it (1 without a softcap);
// ext_dsoft takes the raw product s. The backward multiplies dS by it
// before dS meets K or Q.
float ext_dsoft_t(float v) {
	if ((EXT & EXT_ON_SOFTCAP) != 0u) {
		float t = ext_tile_tanh(v);
		return 1.0 - t * t;
	}
	return 1.0;
}

float ext_dsoft(float s) { return ext_dsoft_t(ext_tile_v(s)); }

// Dropout (EXT_ON_DROPOUT; spec.Dropout is the definition). The element
// of query row i and key j of the sequence is kept when its 8-bit draw —
// byte j mod 4 (low byte first) of word (j mod 16)/4 of the Philox4x32-10
// block of counter (j/16, i, ext_bh, offset) and key seed — is at least
// the threshold; kept elements are scaled by drop_scale(). One block
// covers 16 keys, so the kernels draw a tile's keep bits once per tile
// into shared memory (drop_fill) — whatever the layout of the threads
// or cooperative-matrix fragments that then read them (drop_keep) — at
// about 70 integer operations per 16 elements.
//
// A kernel that drops defines DROP_ROWS and DROP_KEYS, its drop tile
// (query rows × keys; DROP_KEYS is 8, 16 or a multiple of 32 — tiles
// start at multiples of it), before including ext.glsl; sDrop then holds
// a tile's bits, DROP_WPR words per row (bit c mod 32 of word c/32 for
// key c of the tile), and one word without EXT_ON_DROPOUT.

// philox is the Philox4x32-10 block function: ten rounds of two 32×32 →
// 64-bit products, the key bumped by the Weyl constants between rounds.
uvec4 philox(uvec4 c, uvec2 k) {
	[[unroll]] for (uint r = 0u; r < 10u; ++r) {
		if (r > 0u) {
			k += uvec2(0x9E3779B9u, 0xBB67AE85u);
		}
		uint hi0, lo0, hi1, lo1;
		umulExtended(0xD2511F53u, c.x, hi0, lo0);
		umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
		c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
	}
	return c;
}

// drop_ge4 compares the four bytes of x with the threshold byte t (tb =
// t·0x01010101) at once: bit b of the result is byte b ≥ t. Per byte, the
// high bit of (x | 0x80) − (t & 0x7f) is whether x's low seven bits are at
// least t's (no borrow crosses a byte); the byte is ≥ t when its high bit
// is above t's, or equal to it with the low bits at least t's. A multiply
// gathers the four high bits (7, 15, 23, 31) into bits 28 … 31 without
// carries.
uint drop_ge4(uint x, uint tb) {
	const uint H = 0x80808080u;
	uint lo = (x | H) - (tb & ~H);
	uint ge = ((x & ~tb) | (~(x ^ tb) & lo)) & H;
	return (ge * 0x00204081u) >> 28u;
}

// drop_bits16 is the keep bits of the 16 keys 16g … 16g+15 of row i (bit
// e for key 16g+e).
uint drop_bits16(uint i, uint g) {
	uvec4 w = philox(uvec4(g, i, ext_bh, ext_ctr3), ext_seed);
	uint tb = ext_thr * 0x01010101u;
	return drop_ge4(w.x, tb) | (drop_ge4(w.y, tb) << 4u) | (drop_ge4(w.z, tb) << 8u) | (drop_ge4(w.w, tb) << 12u);
}

// drop_scale is the factor of a kept element, 256/(256 − threshold) (1
// without dropout).
float drop_scale() {
	if ((EXT & EXT_ON_DROPOUT) != 0u) {
		return 256.0 / float(256u - ext_buf[11]); // (callable before ext_begin)
	}
	return 1.0;
}

#ifdef DROP_ROWS
const uint DROP_WPR = (DROP_KEYS + 31u) / 32u;
shared uint sDrop[(EXT & EXT_ON_DROPOUT) != 0u ? DROP_ROWS * DROP_WPR : 1u];

// drop_word is the keep word of row i for the DROP_KEYS < 32 keys k … (k
// a multiple of DROP_KEYS) or the 32 keys k … k+31 (k a multiple of 32):
// one or two blocks, or half of one for 8 keys.
uint drop_word(uint i, uint k) {
	if (DROP_KEYS >= 32u) {
		return drop_bits16(i, k >> 4u) | (drop_bits16(i, (k >> 4u) + 1u) << 16u);
	}
	return (drop_bits16(i, k >> 4u) >> (k & 8u)) & (DROP_KEYS >= 16u ? 0xFFFFu : 0xFFu);
}

// drop_fill_rows draws the keep bits of tile rows rfirst … rfirst+nr−1
// (global rows r0 + those) and keys c0 … c0+DROP_KEYS−1 into sDrop. When
// the rows hold fewer words than there are threads and a word is two
// blocks (DROP_KEYS ≥ 32), each thread draws one Philox block (16 keys of
// a row) at a time — block g goes to thread g mod nthreads, and the two
// threads of a word (g, g+1, adjacent lanes of one subgroup) merge their
// halves with a shuffle before one of them stores it — so that no thread
// idles; otherwise each draws a word. The two threads of a word must be
// lanes of one subgroup (tid = thread_index() in full subgroups, or the
// lane with nthreads = SUBGROUP): kernels that guarantee it define
// DROP_LANES; others (and subgroups of one) always draw a word per
// thread. Call it in uniform control flow (over the threads that share
// the work), then make the words visible to the readers (a barrier);
// nothing without EXT_ON_DROPOUT. Rows and keys past the sequence's are
// drawn too (never read as kept: they are masked).
void drop_fill_rows(uint r0, uint rfirst, uint nr, uint c0, uint tid, uint nthreads) {
	if ((EXT & EXT_ON_DROPOUT) == 0u) {
		return;
	}
	uint nw = nr * DROP_WPR; // words
#ifdef DROP_LANES
	const bool lanes = SUBGROUP >= 2u && DROP_KEYS >= 32u;
#else
	const bool lanes = false;
#endif
	if (!lanes || nw >= nthreads) { // (a word per thread keeps every thread busy)
		for (uint w = tid; w < nw; w += nthreads) {
			uint r = w / DROP_WPR;
			sDrop[rfirst * DROP_WPR + w] = drop_word(r0 + rfirst + r, c0 + 32u * (w - r * DROP_WPR));
		}
		return;
	}
	for (uint base = 0u; base < 2u * nw; base += nthreads) { // (uniform)
		uint g = base + tid;
		uint r = g / (2u * DROP_WPR);
		uint bits = g < 2u * nw ? drop_bits16(r0 + rfirst + r, (c0 >> 4u) + (g - r * 2u * DROP_WPR)) << (16u * (g & 1u)) : 0u;
		bits |= subgroupShuffleXor(bits, 1u);
		if ((g & 1u) == 0u && g < 2u * nw) {
			sDrop[rfirst * DROP_WPR + (g >> 1u)] = bits;
		}
	}
}

// drop_fill draws the whole tile's keep bits (drop_fill_rows), its
// threads tid of nthreads: call it between barriers.
void drop_fill(uint r0, uint c0, uint tid, uint nthreads) {
	drop_fill_rows(r0, 0u, DROP_ROWS, c0, tid, nthreads);
}

// drop_keep is 1.0 when the element of tile row r and tile key c is
// kept, 0.0 when dropped (1.0 without EXT_ON_DROPOUT).
float drop_keep(uint r, uint c) {
	if ((EXT & EXT_ON_DROPOUT) != 0u) {
		return float((sDrop[r * DROP_WPR + (c >> 5u)] >> (c & 31u)) & 1u);
	}
	return 1.0;
}

// drop_bit is drop_keep's factor from a keep word w already read (bit c
// mod 32), for kernels that read a row's word once for many keys. It is a
// select; drop_keep keeps its conversion (with the select the backward
// kernels measured up to 3% slower on an NVIDIA H200: bench/NOTES.md).
float drop_bit(uint w, uint c) { return ((w >> (c & 31u)) & 1u) != 0u ? 1.0 : 0.0; }

// drop_select is p when bit b of keep word w is set (the element is kept),
// else 0: one bit test and a select where b is known when the pipeline is
// built (flash_cm's DROP_COLS).
float drop_select(uint w, uint b, float p) { return (w & (1u << b)) != 0u ? p : 0.0; }
#endif
