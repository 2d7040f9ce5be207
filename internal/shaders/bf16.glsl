// bf16.glsl: rounding fp32 to bfloat16 to nearest, the ways the kernels do
// it, all in integer arithmetic (exact on every device, so no kernel
// depends on how the device rounds fp32 operations or conversions; an
// NVIDIA H200's fp32 → bf16 conversion truncates, bench/NOTES.md).
// Included by params.glsl (bf16 builds). Defines functions only: a module
// that calls none of them is unchanged by them.
//
//   bf16_round(x)  the bits (in the low 16) of the bfloat16 nearest to x,
//                  ties to even (six operations): overflow carries into
//                  the exponent and gives ±Inf, NaN stays NaN (made quiet,
//                  sign kept) — bfloat16.FromFloat32 on the host does the
//                  same. It returns a uint, not a uint16_t: a 16-bit
//                  return value would need the Int16 capability. The
//                  kernels' stores round so.
//   bf16_rne(x)    the same value as a float32 (exactly a bfloat16).
//   bf16_nearest_away(x)  the bfloat16 nearest to x, ties away from zero,
//                  as a float32: half a bfloat16 unit (0x8000) added to the
//                  bits and the low 16 bits cleared, two operations (where
//                  the conversion truncates, a compiler may drop the
//                  clearing). Sign and magnitude: the sum carries into the
//                  exponent where it should; ±Inf stays itself and a
//                  finite value overflows to ±Inf exactly where
//                  bf16_round's does. It differs from bf16_round only on
//                  ties (one unit up in magnitude), and on quiet NaNs whose
//                  bits are 0x7fff8000 and up (or 0xffff8000 and up): those
//                  wrap to a zero. So a NaN stays a NaN only for the other
//                  bit patterns — enough for the forward's P, whose row sum
//                  is taken unrounded, so that a NaN there still makes its
//                  row's l, O and LSE NaN (TestBF16ProbabilityRounding).
//   bf16_nearest_away_kept(x)  bf16_nearest_away on the magnitude, the
//                  sign put back, and the sum capped at 0x7fc00000 (the
//                  quiet NaN) so that it cannot wrap: the same value for
//                  every x but the NaNs, and every quiet NaN of either
//                  sign stays a NaN (a signalling one whose payload lies
//                  in its low 15 bits becomes ±Inf; arithmetic makes
//                  none). Five operations. The backward's dS, which
//                  feeds dK and dQ with no unrounded sum beside it
//                  (TestBF16NearestAwayKept).
//   bf16_nearest_away_nonneg(x)  bf16_nearest_away_kept for an x that is
//                  +0, −0 or above, or a NaN (the backward's P): the
//                  magnitude's rounding without putting the sign back —
//                  three operations. −0 gives +0; a quiet NaN of either
//                  sign gives the positive quiet NaN 0x7fc00000 (a
//                  signalling one whose payload lies in its low 15 bits
//                  +Inf, as in bf16_nearest_away_kept; a negative x would
//                  give its magnitude's bfloat16: never asked). The
//                  backward's P, which feeds dV (TestBF16NearestAwayNonneg).
#ifndef FLASHVK_BF16_GLSL
#define FLASHVK_BF16_GLSL
uint bf16_round(float x) {
	uint u = floatBitsToUint(x);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (u >> 16) | 0x40u;
	}
	u += 0x7fffu + ((u >> 16) & 1u);
	return u >> 16;
}

float bf16_rne(float x) { return uintBitsToFloat(bf16_round(x) << 16u); }

float bf16_nearest_away(float x) { return uintBitsToFloat((floatBitsToUint(x) + 0x8000u) & 0xffff0000u); }

float bf16_nearest_away_nonneg(float x) {
	uint m = min((floatBitsToUint(x) & 0x7fffffffu) + 0x8000u, 0x7fc00000u);
	return uintBitsToFloat(m & 0xffff0000u);
}

float bf16_nearest_away_kept(float x) {
	uint u = floatBitsToUint(x);
	uint m = min((u & 0x7fffffffu) + 0x8000u, 0x7fc00000u);
	return uintBitsToFloat((m & 0xffff0000u) | (u & 0x80000000u));
}
#endif
