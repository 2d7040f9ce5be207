// bf16.glsl: rounding fp32 to bfloat16 to nearest, the ways the kernels do
// it (ties to even but in bf16_nearest_away). Included by params.glsl (bf16
// builds) and flash_cm_probe (which checks on the device the arithmetic the
// split rests on). Defines functions only: a module that calls none of them
// is unchanged by them.
//
//   bf16_round(x)  the bits (in the low 16) of the bfloat16 nearest to x,
//                  in integer arithmetic (six operations): overflow carries
//                  into the exponent and gives ±Inf, NaN stays NaN (made
//                  quiet, sign kept) — bfloat16.FromFloat32 on the host does
//                  the same. It returns a uint, not a uint16_t: a 16-bit
//                  return value would need the Int16 capability.
//   bf16_rne(x)    the same value as a float32 (exactly a bfloat16).
//   bf16_split(x)  Veltkamp's split at 8 significant bits: c = x·(2^16 +
//                  1), hi = c − (c − x), three fp32 operations (precise:
//                  neither fused nor reassociated), at the fp32 rate where
//                  bf16_round's integer operations run at half of it on
//                  NVIDIA GPUs. With fp32 additions and multiplications that
//                  round to nearest even, hi is bf16_rne(x) bit for bit for
//                  every normal x with |x| < 2^111 of either sign, ties
//                  included (TestBF16SplitRounding: every tie and a
//                  stride through the rest up to 2^111, both signs). Vulkan
//                  lets an implementation round those operations toward
//                  zero instead: flash_cm_probe checks the device, and the
//                  coopmat kernels take the split only where it passed
//                  (cm_types.glsl, CM_RNE). A subnormal x keeps bits that
//                  the conversion then drops (within 2^-133 of x where
//                  subnormals are kept); NaN stays NaN; from about 2^112 c
//                  overflows and hi is NaN.
//   bf16_nearest_away(x)  the bfloat16 nearest to x, ties away from zero,
//                  as a float32: half a bfloat16 unit (0x8000) added to the
//                  bits and the low 16 bits cleared, two integer operations
//                  (where the conversion truncates, as it does on an NVIDIA
//                  H200, a compiler may drop the clearing). Sign and
//                  magnitude: the sum carries into the exponent where it
//                  should; ±Inf stays itself and a finite value overflows
//                  to ±Inf exactly where bf16_round's does. It differs from
//                  bf16_round only on ties (one unit up in magnitude), and
//                  on quiet NaNs whose bits are 0x7fff8000 and up (or
//                  0xffff8000 and up): those wrap to a zero. So a NaN stays
//                  a NaN only for the other bit patterns — enough for the
//                  forward's P, whose row sum is taken unrounded, so that
//                  a NaN there still makes its row's l, O and LSE NaN
//                  (TestBF16ProbabilityRounding). Needs no probe: integer
//                  arithmetic is exact everywhere.
//   bf16_split_guarded(x)  bf16_split for |x| < 2^111; from there on, and
//                  for ±Inf, x unchanged, for the conversion to round by
//                  the device's own rule (±Inf exact; a finite value within
//                  one bfloat16 unit). NaN comes out a NaN of the split's
//                  arithmetic, which every conversion keeps a NaN. Five fp32
//                  operations.
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

float bf16_split(float x) {
	precise float c = x * 65537.0;
	precise float t = c - x;
	precise float hi = c - t;
	return hi;
}

float bf16_split_guarded(float x) {
	float hi = bf16_split(x);
	return abs(x) >= 2596148429267413814265248164610048.0 ? x : hi; // (2^111)
}
#endif
