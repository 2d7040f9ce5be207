// Package bfloat16 is the bfloat16 ("brain floating point") element type:
// the upper 16 bits of an IEEE binary32 — 1 sign bit, 8 exponent bits (the
// range of float32), 7 stored mantissa bits (8 bits of precision).
//
// Conversion to float32 is exact (the bits shifted left by 16). Conversion
// from float32 rounds to nearest, ties to even; values past the largest
// finite bfloat16 (≈3.39e38) round to ±Inf, NaN stays NaN (made quiet,
// sign and leading payload bits kept), subnormals round like any other
// value. It is a leaf package with no dependencies.
package bfloat16

import (
	"math"
	"strconv"
)

// BFloat16 holds the bits of a bfloat16 value.
type BFloat16 uint16

// Special values.
const (
	PositiveInfinity BFloat16 = 0x7f80
	NegativeInfinity BFloat16 = 0xff80
	// NaN is the canonical quiet NaN.
	NaN BFloat16 = 0x7fc0
	// MaxValue is the largest finite value, (2 − 2^−7)·2^127 ≈ 3.3895e38.
	MaxValue BFloat16 = 0x7f7f
	// SmallestNonzero is the smallest positive subnormal, 2^−133.
	SmallestNonzero BFloat16 = 0x0001
)

// FromBits returns the value with bits u.
func FromBits(u uint16) BFloat16 { return BFloat16(u) }

// Bits returns the bits of b.
func (b BFloat16) Bits() uint16 { return uint16(b) }

// FromFloat32 rounds f to the nearest bfloat16, ties to even. NaN gives a
// quiet NaN of the same sign; overflow gives ±Inf.
func FromFloat32(f float32) BFloat16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep the top bits, force quiet
		return BFloat16(u>>16 | 0x0040)
	}
	u += 0x7fff + (u>>16)&1 // round to nearest even (carries into the exponent; Inf on overflow)
	return BFloat16(u >> 16)
}

// Float32 returns b as a float32 (exact).
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// Float64 returns b as a float64 (exact).
func (b BFloat16) Float64() float64 { return float64(b.Float32()) }

// IsNaN reports whether b is a NaN.
func (b BFloat16) IsNaN() bool { return b&0x7fff > 0x7f80 }

// IsInf reports whether b is an infinity: sign > 0 +Inf, sign < 0 −Inf,
// sign == 0 either.
func (b BFloat16) IsInf(sign int) bool {
	return (sign >= 0 && b == PositiveInfinity) || (sign <= 0 && b == NegativeInfinity)
}

// String formats b as its float32 value.
func (b BFloat16) String() string {
	return strconv.FormatFloat(float64(b.Float32()), 'g', -1, 32)
}

// Slice converts fs to bfloat16 (RNE) into a new slice.
func Slice(fs []float32) []BFloat16 {
	out := make([]BFloat16, len(fs))
	for i, f := range fs {
		out[i] = FromFloat32(f)
	}
	return out
}

// Float32s converts bs to float32 (exact) into a new slice.
func Float32s(bs []BFloat16) []float32 {
	out := make([]float32, len(bs))
	for i, b := range bs {
		out[i] = b.Float32()
	}
	return out
}
