// cm_types.glsl: the storage-type-dependent pieces of the
// cooperative-matrix kernels (flash_cm, bwd_cm_dkdv, bwd_cm_dq), so that one
// source serves fp16 and bf16 (and fp32 storage, split into bf16
// planes). Include after params.glsl (STYPE, LOAD/STORE,
// bf16.glsl's roundings). For fp16 nothing here emits code.
//
//   CM_T          element type of the A/B operands and of the 16-bit
//                 accumulators used to store results (float16_t, bfloat16_t)
//   CM_TO(x)      fp32 → CM_T, rounded to nearest: fp16 by the conversion
//                 (ties to even); bf16 in integer arithmetic first, ties
//                 away from zero, NaN kept (bf16.glsl's
//                 bf16_nearest_away_kept), so that the conversion itself
//                 is exact whatever rounding the driver's OpFConvert uses
//                 (an H200's truncates). The backward's dS (its P:
//                 CM_TO_PB); the
//                 fp32 split to nearest even it replaced cost bf16's
//                 backward 2.6–4.2% at d 64, N 16384 on an H200
//                 (bench/NOTES.md)
//   CM_TO_P(p)    fp32 → CM_T for the forward's probability p (0 ≤ p ≤ 1,
//                 or NaN) before P·V: for bf16 to nearest, ties away from
//                 zero, in two integer operations (bf16.glsl's
//                 bf16_nearest_away; an fp32 split's three fp32 operations
//                 cost bf16's forward 7–11% more time at d 64 on an H200,
//                 see bench/NOTES.md). A NaN p may enter P·V as a zero;
//                 flash_cm sums its row's l from the unrounded p, so the
//                 row still comes out NaN
//   CM_TO_PB(p)   fp32 → CM_T for the backward's probability p (≥ 0 or
//                 NaN) before dV = Pᵀ·dO: CM_TO's value in fewer
//                 operations for bf16 (bf16_nearest_away_nonneg: the
//                 sign is never put back, and a NaN stays a NaN, since no
//                 unrounded sum of P stands beside dV; one operation
//                 fewer ran bf16's dK/dV kernel 2.1–2.6% faster at d 64
//                 on an H200, bench/NOTES.md)
//   CM_RAWT       type of one raw 16-bit element in a function-local array
//                 (fp16: float16_t; bf16: its bits in a uint, since a
//                 function-local uint16_t would need the Int16 capability)
//   CM_RAW(v)     a storage element → CM_RAWT;  CM_RAW0: a zero CM_RAWT
//   CM_PACK2(a, b) two CM_RAWT → one uint (a in the low half)
//   CM_UNPACK2(w) declares the pair of 16-bit elements held in uint w;
//                 CM_LO / CM_HI are its low / high element as STYPE
//   CM_NARROW(a)  fp32 accumulator (ACC) → CM_T accumulator (ACC16; bf16:
//                 every component rounded to nearest even first)
//   CM_TYPE_FUNCS defines the functions the macros above use; expand it
//                 once, after the coopmat constants and ACC/ACC16.
//   CM_SPLIT      (fp32 storage only) bf16 planes per operand; the 16-bit
//                 types define none (cm_common.glsl makes it 1)
// bf16 and fp32 modules need GL_EXT_bfloat16 (glslang ≥ 16; SPV_KHR_bfloat16,
// capabilities BFloat16TypeKHR and BFloat16CooperativeMatrixKHR).

#if defined(STORAGE_F16)
#define CM_T float16_t
#define CM_TO(x) float16_t(x)
#define CM_TO_P(x) float16_t(x)
#define CM_TO_PB(x) float16_t(x)
#define CM_RAWT float16_t
#define CM_RAW(v) (v)
#define CM_RAW0 float16_t(0.0)
#define CM_PACK2(a, b) packFloat2x16(f16vec2(a, b))
#define CM_UNPACK2(w) f16vec2 pr = unpackFloat2x16(w)
#define CM_LO pr.x
#define CM_HI pr.y
#define CM_NARROW(a) ACC16(a)
#define CM_TYPE_FUNCS
#elif defined(STORAGE_BF16)
#extension GL_EXT_bfloat16 : require
#define CM_T bfloat16_t
#define CM_TO(x) bfloat16_t(bf16_nearest_away_kept(x))
#define CM_TO_P(x) bfloat16_t(bf16_nearest_away(x))
#define CM_TO_PB(x) bfloat16_t(bf16_nearest_away_nonneg(x))
#define CM_RAWT uint
#define CM_RAW(v) uint(v)
#define CM_RAW0 0u
#define CM_PACK2(a, b) ((a) | ((b) << 16u))
#define CM_UNPACK2(w) uint pr = (w)
#define CM_LO uint16_t(pr & 0xffffu)
#define CM_HI uint16_t(pr >> 16u)
#define CM_NARROW(a) acc_to_bf16(a)
#define CM_TYPE_FUNCS \
	ACC16 acc_to_bf16(ACC a) { \
		[[unroll]] for (uint i = 0u; i < CM_LEN; ++i) { \
			a[i] = bf16_rne(a[i]); \
		} \
		return ACC16(a); \
	}
#else
// fp32 storage: the matrix units multiply bf16, so every
// fp32 operand x is held as CM_SPLIT = 3 bf16 planes, x = x0 + x1 + x2
// (cm_split: each plane the next 8 significant bits, by truncation, exact
// but for |x| < 2^-103 and where cm_fill makes a zero lower plane ±2^-126;
// Inf and NaN in x0), and a product A·B is Σ_{i+j<3} Ai·Bj,
// six MMAs with fp32 accumulation; the dropped terms are below 2^-22 of
// |A|·|B| (cm_common.glsl). CM_TO only ever meets values a
// plane holds exactly.
#extension GL_EXT_bfloat16 : require
#define CM_SPLIT 3
#define CM_T bfloat16_t
#define CM_TO(x) bfloat16_t(x)
#define CM_TYPE_FUNCS
#endif
