// cm_common.glsl: what the cooperative-matrix kernels (flash_cm,
// bwd_cm_dkdv, bwd_cm_dq) share: the coopmat spec constants (ids 10–21,
// 29 and 30–32,
// described in flash_cm.comp's header), the padded tile geometry, the
// matrix types, the element-layout decoders and the 16-byte global fetch
// and store, and the plane-pair products. Include after params.glsl; fp16
// or bf16 storage, or fp32 in bf16 planes (cm_types.glsl).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#include "cm_types.glsl"

layout(constant_id = 10) const uint CM_M = 16;
layout(constant_id = 11) const uint CM_N = 16;
layout(constant_id = 12) const uint CM_K = 16;
layout(constant_id = 13) const uint MODE = 0;      // 0 elementwise through shared memory, 1 in registers
layout(constant_id = 14) const uint CM_LEN = 8;    // accumulator components per invocation
layout(constant_id = 15) const uint RL = 1;        // (flash_cm; bwd_cm_dq's dropout)
layout(constant_id = 16) const uint SLOTROW_LO = 0; // (flash_cm; bwd_cm_dq's dropout)
layout(constant_id = 17) const uint SLOTROW_HI = 0; // (flash_cm; bwd_cm_dq's dropout)
layout(constant_id = 18) const uint XORMASK = 0;   // (flash_cm only)
layout(constant_id = 19) const uint APERM_LO = 0;  // A component j = accumulator component aperm(j)
layout(constant_id = 20) const uint APERM_HI = 0;
layout(constant_id = 21) const uint VEC = 1;       // 16-byte global access (D, DV, strides multiples of 8)
// 29 STAGGER: 1 starts each workgroup's walk over its key tiles (flash_cm,
// bwd_cm_dq) or query steps (bwd_cm_dkdv) at a place of its own, the
// walk's order rotated by 37 places per workgroup tile index. In order,
// every workgroup of a head reads the same K/V tile (Q/dO step) at the
// same moment: on an NVIDIA H200 a kernel whose loads wait between its
// barriers (no prefetch) lost 7–16% to that at N 16384 (bench/NOTES.md).
// The sums stay in a fixed order per workgroup: deterministic. Not with a
// bias, whose walk skips the tiles it hides in order (the host refuses
// the pair).
layout(constant_id = 29) const uint STAGGER = 0;
// 30 CM_COLS, 31 CM_COLD_LO, 32 CM_COLD_HI (MODE 1): CM_COLS is 1 when
// component i of every invocation lies coldelta(i) columns right of the
// smallest column the invocation holds, colmin (CM_LAYOUT_MAP; 4 bits
// each, LO = components 0–7, HI = 8–15; from flash_cm_probe, the host's
// CMLayout.ColDeltas). The backward kernels may write their columns in
// that form (CM_COLS_FORM). Dropout in flash_cm and bwd_cm_dq then shifts
// each keep word it reads right by colmin once per tile and finds
// component i's bit of accumulator t at (t·CM_N mod 32) + coldelta(i): a
// position known when the pipeline is built, one bit test and a select per
// element (ext.glsl drop_select).
layout(constant_id = 30) const uint CM_COLS = 0;
layout(constant_id = 31) const uint CM_COLD_LO = 0;
layout(constant_id = 32) const uint CM_COLD_HI = 0;

const uint NSG = WG / SUBGROUP;
// Head dims padded with zero features to the coopmat K and N and to
// 16-byte chunks; tiles in shared memory are uvec4 rows with one chunk of
// padding (LDK4, LDV4) so that fragment loads of consecutive rows fall in
// different banks (the padded GEMM ran 2.4× faster than the unpadded one on
// the H200, bench/NOTES.md). The backward contracts over D and DV and
// produces both, so both pad to multiples of CM_K and CM_N; a kernel that
// needs another quantum defines CM_PAD_D and CM_PAD_DV (flash_cm less,
// the backward's pairs over the features twice) before including this
// file.
const uint PADK = CM_K > CM_N ? CM_K : CM_N;
const uint PAD = PADK > 8u ? PADK : 8u;
#ifndef CM_PAD_D
#define CM_PAD_D PAD
#endif
#ifndef CM_PAD_DV
#define CM_PAD_DV PAD
#endif
const uint DP = (D + CM_PAD_D - 1u) / CM_PAD_D * CM_PAD_D;
const uint DVP = (DV + CM_PAD_DV - 1u) / CM_PAD_DV * CM_PAD_DV;
const uint DP8 = DP / 8u;
const uint DVP8 = DVP / 8u;
const uint LDK4 = DP8 + 1u;
const uint LDV4 = DVP8 + 1u;

#define ACC coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
#define ACC16 coopmat<CM_T, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
#define MATA coopmat<CM_T, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA>
#define MATB coopmat<CM_T, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB>
CM_TYPE_FUNCS

// walk_at(i, n, x): the place of the i-th (0 ≤ i < n) of the n tiles
// (steps) that workgroup tile x walks — i itself, or with STAGGER the
// rotated order (where 37 divides n the rotations are fewer: n = 37 has
// one, the order itself; x·37 stays far below 2^32 for any tile index).
uint walk_at(uint i, uint n, uint x) { return STAGGER != 0u ? (i + x * 37u) % n : i; }

uint aperm(uint j) { return j < 8u ? (APERM_LO >> (4u * j)) & 15u : (APERM_HI >> (4u * (j - 8u))) & 15u; }
uint slotrow(uint i) { return i < 8u ? (SLOTROW_LO >> (4u * i)) & 15u : (SLOTROW_HI >> (4u * (i - 8u))) & 15u; }
uint coldelta(uint i) { return i < 8u ? (CM_COLD_LO >> (4u * i)) & 15u : (CM_COLD_HI >> (4u * (i - 8u))) & 15u; }

#ifdef CM_SPLIT
// fp32 storage: a chunk of 8 features is CM_SPLIT uvec4, plane i holding
// the features' bf16 planes xi (cm_types.glsl) as 8 packed bf16 bits.
struct CMChunk {
	uvec4 p[CM_SPLIT];
};
#define CM_CHUNK CMChunk
#define CM_PLANE(w, i) ((w).p[i])
CMChunk cm_chunk0() {
	CMChunk w;
	[[unroll]] for (uint i = 0u; i < CM_SPLIT; ++i) {
		w.p[i] = uvec4(0u);
	}
	return w;
}
#define CM_CHUNK0 cm_chunk0()

// cm_split returns the bf16 bits of the three planes of the fp32 whose bits
// are u: x0 its sign, exponent and top 7 fraction bits, x1 the next 8
// significant bits of x − x0, x2 the rest (x − x0 − x1 has at most 8
// significant bits, so x2 is exact for |x| ≥ 2^-103; all three carry x's
// sign). Inf and NaN go to x0, their lower planes zero (NaN stays NaN).
uvec3 cm_split(uint u) {
	if ((u & 0x7f800000u) == 0x7f800000u) {
		return uvec3((u >> 16u) | ((u & 0x7fffffu) != 0u ? 0x40u : 0u), 0u, 0u);
	}
	float r1 = uintBitsToFloat(u) - uintBitsToFloat(u & 0xffff0000u);
	uint u1 = floatBitsToUint(r1);
	float r2 = r1 - uintBitsToFloat(u1 & 0xffff0000u);
	return uvec3(u >> 16u, u1 >> 16u, floatBitsToUint(r2) >> 16u);
}

// cm_fill returns the planes s of the fp32 whose bits are u with a lower
// plane that is zero for a nonzero x made ±2^-126 (the smallest normal
// bf16: an error of at most 2^-125 for a finite x). An operand whose
// products meet an infinite one needs it: Inf·x is then ±Inf, as in fp32,
// not the NaN of Inf·0 (x = 0, all planes zero, still gives NaN); an
// infinite x is filled too, so that Inf·Inf stays ±Inf.
uvec3 cm_fill(uvec3 s, uint u) {
	if ((u & 0x7fffffffu) != 0u) {
		uint tiny = ((u >> 16u) & 0x8000u) | 0x80u;
		s.y = (s.y & 0x7fffu) == 0u ? tiny : s.y;
		s.z = (s.z & 0x7fffu) == 0u ? tiny : s.z;
	}
	return s;
}

// cm_fill_nonneg is cm_fill for an x ≥ 0 (P), whose planes are ≥ 0: a
// lower plane below 2^-126 (zero or subnormal) of a nonzero x becomes
// 2^-126.
uvec3 cm_fill_nonneg(uvec3 s, uint u) {
	uint tiny = (u & 0x7fffffffu) != 0u ? 0x80u : 0u;
	return uvec3(s.x, max(s.y, tiny), max(s.z, tiny));
}

// cm_nonfinite: does plane 0 of a chunk (8 bf16) hold an Inf or a NaN?
bool cm_nonfinite(uvec4 p0) {
	uvec4 lo = p0 & 0x7f80u;
	uvec4 hi = p0 & 0x7f800000u;
	return any(equal(lo, uvec4(0x7f80u))) || any(equal(hi, uvec4(0x7f800000u)));
}

// cm_split8: 8 fp32 (bits) → their chunk, filled (cm_fill) where fill.
CMChunk cm_split8(uint x[8], bool fill) {
	CMChunk w;
	uvec3 s[8];
	[[unroll]] for (uint u = 0u; u < 8u; ++u) {
		s[u] = cm_split(x[u]);
	}
	if (fill) {
		[[unroll]] for (uint u = 0u; u < 8u; ++u) {
			s[u] = cm_fill(s[u], x[u]);
		}
	}
	[[unroll]] for (uint i = 0u; i < CM_SPLIT; ++i) {
		w.p[i] = uvec4(s[0][i] | (s[1][i] << 16u), s[2][i] | (s[3][i] << 16u),
			s[4][i] | (s[5][i] << 16u), s[6][i] | (s[7][i] << 16u));
	}
	return w;
}

// CM_FETCH(name, op, BASE, DIM, FILL) defines CMChunk name(b, s, h, c4):
// features 8·c4 … 8·c4+7 of row (b, s, h) of operand op (OPERAND_V: VEC
// reads two 16-byte units, EL one element) whose row offset BASE gives,
// zero past DIM, split into their planes, filled (cm_fill) where the bool
// expression FILL holds.
#define CM_FETCH(name, op, BASE, DIM, FILL) \
	CMChunk name(uint b, uint s, uint h, uint c4) { \
		OFFSET base = BASE(b, s, h); \
		uint x[8]; \
		if (VEC != 0u) { \
			bool in_ = c4 < (DIM) / 8u; \
			uvec4 lo = in_ ? VEC(op, (base >> 2u) + 2u * c4) : uvec4(0u); \
			uvec4 hi = in_ ? VEC(op, (base >> 2u) + 2u * c4 + 1u) : uvec4(0u); \
			x = uint[8](lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w); \
		} else { \
			[[unroll]] for (uint u = 0u; u < 8u; ++u) { \
				uint d = c4 * 8u + u; \
				x[u] = d < (DIM) ? floatBitsToUint(EL(op, base + d)) : 0u; \
			} \
		} \
		return cm_split8(x, FILL); \
	}

// CM_OUT_EL: features per 16-byte unit of a stored result (4 fp32).
#define CM_OUT_EL 4u

// CM_PUT(buf, u, PL, w): chunk w into unit u of the shared tile buf, plane
// i at unit u + i·PL.
#define CM_PUT(buf, u, PL, w) \
	{ \
		CMChunk w_ = (w); \
		[[unroll]] for (uint pl_ = 0u; pl_ < CM_SPLIT; ++pl_) { \
			buf[(u) + pl_ * (PL)] = w_.p[pl_]; \
		} \
	}

// cm_bf16 is the bf16 whose bits are the low 16 of b (a plane).
CM_T cm_bf16(uint b) { return CM_T(uintBitsToFloat(b << 16u)); }

// CM_PLANES_TO(D, s): each plane i of the planes s (uvec3, cm_split) as a
// bf16 into the lvalue D, an expression of the plane index pl_.
#define CM_PLANES_TO(D, s) \
	{ \
		uvec3 s_ = (s); \
		[[unroll]] for (uint pl_ = 0u; pl_ < CM_SPLIT; ++pl_) { \
			D = cm_bf16(s_[pl_]); \
		} \
	}

// CM_TO_A(A, PS, T, j, x): component j of the A fragments of the fp32 x,
// plane i into A[i·PS + T] (cm_split, no fill: the backward's P and dS
// meet no infinite operand, bwd_cm_dkdv.comp).
#define CM_TO_A(A, PS, T, j, x) CM_PLANES_TO(A[pl_ * (PS) + (T)][j], cm_split(floatBitsToUint(x)))

// CM_TO_A_PB(A, PS, T, j, p): the backward's probability p (≥ 0) as
// CM_TO_A takes any value (the 16-bit builds round it by CM_TO_PB).
#define CM_TO_A_PB(A, PS, T, j, p) CM_TO_A(A, PS, T, j, p)

// cm_split_p is cm_split of a probability x ≥ 0 whose products meet V,
// which may be infinite: filled (cm_fill_nonneg).
uvec3 cm_split_p(float x) {
	uint u = floatBitsToUint(x);
	return cm_fill_nonneg(cm_split(u), u);
}

// CM_TO_A_P(A, PS, T, j, p), CM_PUT_P(buf, u, PL, p): the planes of a
// probability p (cm_split_p) into component j of A fragments (as CM_TO_A)
// or into unit u + i·PL of the shared array buf of CM_T.
#define CM_TO_A_P(A, PS, T, j, p) CM_PLANES_TO(A[pl_ * (PS) + (T)][j], cm_split_p(p))
#define CM_PUT_P(buf, u, PL, p) CM_PLANES_TO(buf[(u) + pl_ * (PL)], cm_split_p(p))

// CM_MMA(acc, A, PS, T, buf, u, PL, LD, LAYOUT): acc += A·B over the plane
// pairs i + j < CM_SPLIT, A's plane i in A[i·PS + T], B's plane j loaded
// from the shared tile buf at unit u + j·PL (row stride LD, LAYOUT),
// grouped by B plane, the smaller planes first (as flash_cm's products).
#define CM_MMA(acc, A, PS, T, buf, u, PL, LD, LAYOUT) \
	[[unroll]] for (uint bp_ = CM_SPLIT; bp_ > 0u; --bp_) { \
		MATB b_; \
		coopMatLoad(b_, buf, (u) + (bp_ - 1u) * (PL), LD, LAYOUT); \
		[[unroll]] for (uint ap_ = CM_SPLIT - bp_ + 1u; ap_ > 0u; --ap_) { \
			acc = coopMatMulAdd(A[(ap_ - 1u) * (PS) + (T)], b_, acc); \
		} \
	}

// CM_STORE_ACC(a, buf, u, LD): the fp32 accumulator a, as it is, into
// the shared tile buf at unit u (row stride LD units of CM_OUT_EL).
#define CM_STORE_ACC(a, buf, u, LD) \
	coopMatStore(a, buf, u, LD, gl_CooperativeMatrixLayoutRowMajor);


// CM_STORE(name, op, BASE, DIM) defines void name(b, s, h, c4, w): writes
// the 4 fp32 features of unit c4 held in w to row (b, s, h) of operand op
// (OPERAND_V), those < DIM.
#define CM_STORE(name, op, BASE, DIM) \
	void name(uint b, uint s, uint h, uint c4, uvec4 w) { \
		OFFSET base = BASE(b, s, h); \
		if (VEC != 0u) { \
			if (c4 < (DIM) / 4u) { \
				VEC(op, (base >> 2u) + c4) = w; \
			} \
			return; \
		} \
		[[unroll]] for (uint u = 0u; u < 4u; ++u) { \
			uint d = c4 * 4u + u; \
			if (d < (DIM)) { \
				EL(op, base + d) = uintBitsToFloat(w[u]); \
			} \
		} \
	}
#else
#define CM_SPLIT 1
#define CM_CHUNK uvec4
#define CM_PLANE(w, i) (w)
#define CM_CHUNK0 uvec4(0u)

uvec4 pack8(CM_RAWT x[8]) {
	return uvec4(CM_PACK2(x[0], x[1]), CM_PACK2(x[2], x[3]),
		CM_PACK2(x[4], x[5]), CM_PACK2(x[6], x[7]));
}

// CM_FETCH(name, op, BASE, DIM, FILL) defines uvec4 name(b, s, h, c4):
// features 8·c4 … 8·c4+7 of row (b, s, h) of operand op (declared with
// OPERAND_V: VEC reads 16 bytes at once, EL one element) whose row offset
// BASE gives, zero past DIM (FILL is for the fp32 planes only).
#define CM_FETCH(name, op, BASE, DIM, FILL) \
	uvec4 name(uint b, uint s, uint h, uint c4) { \
		OFFSET base = BASE(b, s, h); \
		if (VEC != 0u) { \
			return c4 < (DIM) / 8u ? VEC(op, (base >> 3u) + c4) : uvec4(0u); \
		} \
		CM_RAWT x[8]; \
		[[unroll]] for (uint u = 0u; u < 8u; ++u) { \
			uint d = c4 * 8u + u; \
			x[u] = d < (DIM) ? CM_RAW(EL(op, base + d)) : CM_RAW0; \
		} \
		return pack8(x); \
	}

// CM_STORE(name, op, BASE, DIM) defines void name(b, s, h, c4, w): writes
// the 8 features of chunk c4 held in w to row (b, s, h) of operand op
// (OPERAND_V), those < DIM.
#define CM_STORE(name, op, BASE, DIM) \
	void name(uint b, uint s, uint h, uint c4, uvec4 w) { \
		OFFSET base = BASE(b, s, h); \
		if (VEC != 0u) { \
			if (c4 < (DIM) / 8u) { \
				VEC(op, (base >> 3u) + c4) = w; \
			} \
			return; \
		} \
		[[unroll]] for (uint u = 0u; u < 4u; ++u) { \
			CM_UNPACK2(w[u]); \
			uint d = c4 * 8u + 2u * u; \
			if (d < (DIM)) { \
				EL(op, base + d) = CM_LO; \
			} \
			if (d + 1u < (DIM)) { \
				EL(op, base + d + 1u) = CM_HI; \
			} \
		} \
	}

// CM_OUT_EL: features per 16-byte unit of a stored result (8 16-bit).
#define CM_OUT_EL 8u

// CM_PUT, CM_TO_A, CM_TO_A_P, CM_TO_A_PB, CM_PUT_P, CM_MMA as in the
// split build, for one plane (the forward's probability P through CM_TO_P,
// the backward's through CM_TO_PB); CM_STORE_ACC rounds
// to CM_T (CM_NARROW) first.
#define CM_PUT(buf, u, PL, w) buf[u] = (w);
#define CM_TO_A(A, PS, T, j, x) A[T][j] = CM_TO(x);
#define CM_TO_A_P(A, PS, T, j, p) A[T][j] = CM_TO_P(p);
#define CM_TO_A_PB(A, PS, T, j, p) A[T][j] = CM_TO_PB(p);
#define CM_PUT_P(buf, u, PL, p) buf[u] = CM_TO_P(p);
#define CM_MMA(acc, A, PS, T, buf, u, PL, LD, LAYOUT) \
	{ \
		MATB b_; \
		coopMatLoad(b_, buf, u, LD, LAYOUT); \
		acc = coopMatMulAdd(A[T], b_, acc); \
	}
#define CM_STORE_ACC(a, buf, u, LD) \
	{ \
		ACC16 o16_ = CM_NARROW(a); \
		coopMatStore(o16_, buf, u, LD, gl_CooperativeMatrixLayoutRowMajor); \
	}
#endif

// CM_ADD_TILE(acc, tile): acc += tile in fp32 arithmetic, component by
// component: the split build's steps sum their products from zero on the
// matrix units and add them here (the units' own accumulation over a long
// chain of products is less accurate than fp32 adds: flash_cm's
// O_ADD_TILE, and its S chunk by chunk of features); the backward's pairs
// over the features add their partner's partial S and dP so.
#define CM_ADD_TILE(acc, tile) \
	[[unroll]] for (uint i_ = 0u; i_ < CM_LEN; ++i_) { \
		acc[i_] += tile[i_]; \
	}

// CM_PAIR_SUM(S, P, NT, buf, X0, sg): subgroup sg of a pair over the
// features (sg and sg ^ 1; the backward kernels' FHALVES) adds its
// partner's partial S and P (NT fp32 accumulators each, over the other
// half of the features) to its own: it stores its own at unit X0 of the
// shared array buf (CM_M·CM_N/4 units per accumulator, two per subgroup
// and t), and after a barrier loads and adds the partner's — a + b = b + a,
// so both hold the same sums bit for bit. Uniform control flow; the
// region must not be read again before the next barrier of the caller.
#define CM_PAIR_SUM(S, P, NT, buf, X0, sg) \
	{ \
		const uint u_ = CM_M * CM_N / 4u; \
		[[unroll]] for (uint t_ = 0u; t_ < (NT); ++t_) { \
			coopMatStore(S[t_], buf, (X0) + (2u * (sg) * (NT) + t_) * u_, CM_N / 4u, gl_CooperativeMatrixLayoutRowMajor); \
			coopMatStore(P[t_], buf, (X0) + ((2u * (sg) + 1u) * (NT) + t_) * u_, CM_N / 4u, gl_CooperativeMatrixLayoutRowMajor); \
		} \
		barrier(); \
		uint pg_ = (sg) ^ 1u; \
		[[unroll]] for (uint t_ = 0u; t_ < (NT); ++t_) { \
			ACC x_; \
			coopMatLoad(x_, buf, (X0) + (2u * pg_ * (NT) + t_) * u_, CM_N / 4u, gl_CooperativeMatrixLayoutRowMajor); \
			CM_ADD_TILE(S[t_], x_) \
			coopMatLoad(x_, buf, (X0) + ((2u * pg_ + 1u) * (NT) + t_) * u_, CM_N / 4u, gl_CooperativeMatrixLayoutRowMajor); \
			CM_ADD_TILE(P[t_], x_) \
		} \
	}

// CM_STAGE(buf, U0, LD4, N, C8, W): unit c4 < C8 of rows r < N of the
// shared tile at unit U0 of buf (row stride LD4 units) set to W, an
// expression of r and c4; the whole workgroup runs it (tid in scope),
// between barriers.
#define CM_STAGE(buf, U0, LD4, N, C8, W) \
	for (uint e = tid; e < (N) * (C8); e += WG) { \
		uint r = e / (C8); \
		uint c4 = e - r * (C8); \
		buf[(U0) + r * (LD4) + c4] = (W); \
	}

// CM_LOAD_A(A, A0, NF, buf, R0, LD4): the A fragments A[A0 + kk], kk < NF,
// of rows R0 … R0+CM_M−1 of the shared tile buf (row stride LD4 units),
// features kk·CM_K … ; CM_LOAD_A_AT the same from unit U0 of buf (the
// first row's first feature: a half of the features from its middle).
#define CM_LOAD_A_AT(A, A0, NF, buf, U0, LD4) \
	[[unroll]] for (uint kk = 0u; kk < (NF); ++kk) { \
		coopMatLoad(A[(A0) + kk], buf, (U0) + kk * (CM_K / 8u), LD4, gl_CooperativeMatrixLayoutRowMajor); \
	}
#define CM_LOAD_A(A, A0, NF, buf, R0, LD4) CM_LOAD_A_AT(A, A0, NF, buf, (R0) * (LD4), LD4)

// CM_AT_CHUNK(F0): "+ F0·CM_K features" in shared-tile units, for the
// split build's halves of the features (bwd_cm_dq, bwd_cm_dkdv: FHALVES);
// nothing in the 16-bit builds, whose bwd_cm_dq has no such halves (their
// bwd_cm_dkdv writes its offsets out: do not use this macro there).
#if CM_SPLIT > 1
#define CM_AT_CHUNK(F0) + (F0) * (CM_K / 8u)
#else
#define CM_AT_CHUNK(F0)
#endif

// CM_LAYOUT_MAP(scratch, rowOf, colOf, colmin) fills rowOf/colOf:
// component i of this invocation holds row rowOf[i], column colOf[i] of
// every CM_M×CM_N accumulator; colmin is the smallest of its columns. It
// loads a matrix whose elements encode their own coordinates from scratch
// (≥ CM_M·CM_N/4 uvec4), which it overwrites; call in uniform control
// flow between barriers.
#define CM_LAYOUT_MAP(scratch, rowOf, colOf, colmin) \
	{ \
		for (uint e = tid; e < CM_M * CM_N / 4u; e += WG) { \
			uvec4 w; \
			[[unroll]] for (uint u = 0u; u < 4u; ++u) { \
				uint x = e * 4u + u; \
				w[u] = floatBitsToUint(float((x / CM_N) * 256u + x % CM_N)); \
			} \
			scratch[e] = w; \
		} \
		barrier(); \
		ACC mapM; \
		coopMatLoad(mapM, scratch, 0u, CM_N / 4u, gl_CooperativeMatrixLayoutRowMajor); \
		[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) { \
			uint v = uint(mapM[i]); \
			rowOf[i] = v >> 8u; \
			colOf[i] = v & 255u; \
		} \
		colmin = colOf[0]; \
		[[unroll]] for (uint i = 1u; i < CM_LEN; ++i) { \
			colmin = min(colmin, colOf[i]); \
		} \
		barrier(); \
	}

// CM_COLS_FORM(colOf, colmin) (CM_COLS) rewrites colOf[i] as colmin +
// coldelta(i): the same values in a form the compiler sees, so components
// of one column share their loads and address arithmetic. bwd_cm_dkdv
// takes it, bwd_cm_dq with dropout or above d 64 (its COLS_FORM), and
// flash_cm not at all: where they do not, it measured slower
// (bench/NOTES.md).
#define CM_COLS_FORM(colOf, colmin) \
	if (CM_COLS != 0u) { \
		[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) { \
			colOf[i] = colmin + coldelta(i); \
		} \
	}

// CM_LOCAL_ROWS(rowOf, lrow) (MODE 1): lrow[k] is the row of the
// invocation's local row k (component i's row is lrow[slotrow(i)]).
#define CM_LOCAL_ROWS(rowOf, lrow) \
	[[unroll]] for (uint k = 0u; k < RL; ++k) { \
		lrow[k] = 0u; \
		[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) { \
			if (slotrow(i) == k) { \
				lrow[k] = rowOf[i]; \
			} \
		} \
	}

// CAREFUL_ROWS(res, sL, n): res = whether any of rows 0 … n−1, whose
// LSE·log2e the shared array sL holds, is careful (careful_l2,
// params.glsl). The rows are split across the subgroup's lanes and voted
// on, so every subgroup of the workgroup sets the same value: a branch on
// it is uniform.
#define CAREFUL_ROWS(res, sL, n) \
	{ \
		bool c_ = false; \
		for (uint r_ = gl_SubgroupInvocationID; r_ < (n); r_ += gl_SubgroupSize) { \
			c_ = c_ || careful_l2(sL[r_]); \
		} \
		res = subgroupAny(c_); \
	}
