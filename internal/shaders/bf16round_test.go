package shaders

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/bfloat16"
)

// bf16NearestAway is bf16.glsl's bf16_nearest_away: half a bfloat16 unit
// added to the bits, the low 16 bits cleared.
func bf16NearestAway(x float32) float32 {
	return math.Float32frombits((math.Float32bits(x) + 0x8000) &^ 0xffff)
}

// bf16NearestAwayKept is bf16.glsl's bf16_nearest_away_kept: the same on
// the magnitude, capped at the quiet NaN's bits, the sign put back.
func bf16NearestAwayKept(x float32) float32 {
	u := math.Float32bits(x)
	m := min(u&0x7fffffff+0x8000, 0x7fc00000)
	return math.Float32frombits(m&^0xffff | u&0x80000000)
}

// bf16NearestAwayNonneg is bf16.glsl's bf16_nearest_away_nonneg: the
// magnitude plus half a unit, capped at the quiet NaN's bits, the low 16
// bits cleared; no sign.
func bf16NearestAwayNonneg(x float32) float32 {
	m := min(math.Float32bits(x)&0x7fffffff+0x8000, 0x7fc00000)
	return math.Float32frombits(m &^ 0xffff)
}

// TestBF16NearestAwaySource ties bf16NearestAway, bf16NearestAwayKept and
// bf16NearestAwayNonneg to the shader's source.
func TestBF16NearestAwaySource(t *testing.T) {
	src, err := os.ReadFile("bf16.glsl")
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		"float bf16_nearest_away(float x) { return uintBitsToFloat((floatBitsToUint(x) + 0x8000u) & 0xffff0000u); }",
		`float bf16_nearest_away_kept(float x) {
	uint u = floatBitsToUint(x);
	uint m = min((u & 0x7fffffffu) + 0x8000u, 0x7fc00000u);
	return uintBitsToFloat((m & 0xffff0000u) | (u & 0x80000000u));
}`,
		`float bf16_nearest_away_nonneg(float x) {
	uint m = min((floatBitsToUint(x) & 0x7fffffffu) + 0x8000u, 0x7fc00000u);
	return uintBitsToFloat(m & 0xffff0000u);
}`,
	} {
		if !strings.Contains(string(src), body) {
			t.Errorf("bf16.glsl no longer defines\n%s\n(its Go mirror and the tests that use it must follow)", body)
		}
	}
}

// nearestAway is the bfloat16 (as float32 bits) nearest to the non-NaN
// float32 with bits u, ties away from zero: bfloat16.FromFloat32's
// rounding but on a tie, where it takes the one above in magnitude.
func nearestAway(u uint32) uint32 {
	if u&0xffff == 0x8000 {
		return u + 0x8000
	}
	return uint32(bfloat16.FromFloat32(math.Float32frombits(u)).Bits()) << 16
}

// TestBF16ProbabilityRounding checks the claim the bf16 cooperative-matrix
// forward rests on when it rounds P (flash_cm's CM_TO_P, bf16_nearest_away)
// in integer arithmetic: for every float32 from 0 to 1, subnormals
// included, the result is the nearest bfloat16 — bfloat16.FromFloat32's,
// but on a tie the one above it, ties away from zero — and +Inf and every
// finite value of either sign up to bf16's overflow round the same way.
// The quiet NaNs from 0x7fc00000 to 0x7fff7fff stay NaN; those from
// 0x7fff8000 up wrap to −0 (bf16.glsl says why the forward may accept
// that). Under -short it takes every 61st value and every tie.
func TestBF16ProbabilityRounding(t *testing.T) {
	step := uint32(1)
	if testing.Short() {
		step = 61
	}
	check := func(u uint32) bool {
		x := math.Float32frombits(u)
		if got, want := math.Float32bits(bf16NearestAway(x)), nearestAway(u); got != want {
			t.Errorf("x = %#08x (%g): got %#08x, want %#08x", u, x, got, want)
			return false
		}
		return true
	}
	hi := math.Float32bits(1)
	for u := uint32(0); u <= hi; u += step {
		if !check(u) {
			return
		}
	}
	for _, sign := range []uint32{0, 1 << 31} {
		for u := uint32(0x8000); u < 0x7f800000; u += 0x10000 { // every tie
			if !check(sign | u) {
				return
			}
		}
		for _, u := range []uint32{0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0x7f800000, 0x3f7fffff, 0x00ff8000} {
			if !check(sign | u) {
				return
			}
		}
	}
	for _, u := range []uint32{0x7fc00000, 0x7fc00001, 0x7fff7fff, 0xffc00000} {
		if got := bf16NearestAway(math.Float32frombits(u)); !math.IsNaN(float64(got)) {
			t.Errorf("NaN %#08x: got %#08x, want a NaN", u, math.Float32bits(got))
		}
	}
	for _, u := range []uint32{0x7fff8000, 0x7fffffff} {
		if got := math.Float32bits(bf16NearestAway(math.Float32frombits(u))); got != 0x80000000 {
			t.Errorf("NaN %#08x: got %#08x, want −0 (the documented wrap)", u, got)
		}
	}
}

// sweepStep is the stride of the rounding sweeps below: every 7th
// float32, every 613th under -short.
func sweepStep() uint32 {
	if testing.Short() {
		return 613
	}
	return 7
}

// eachMagnitude calls check on the float32 bits from +0 to +Inf a step
// apart, on every tie (bits ending in 0x8000) and on the edges of bf16's
// overflow, and reports whether check accepted them all (it stops at the
// first it refuses).
func eachMagnitude(step uint32, check func(u uint32) bool) bool {
	for u := uint32(0); u <= 0x7f800000; u += step {
		if !check(u) {
			return false
		}
	}
	for u := uint32(0x8000); u < 0x7f800000; u += 0x10000 { // every tie
		if !check(u) {
			return false
		}
	}
	for _, u := range []uint32{0, 0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0x7f800000} {
		if !check(u) {
			return false
		}
	}
	return true
}

// eachQuietNaN calls check on the positive quiet NaNs' bits a step apart
// and on 0x7fffffff, as eachMagnitude.
func eachQuietNaN(step uint32, check func(u uint32) bool) bool {
	for u := uint32(0x7fc00000); u <= 0x7fffffff-step; u += step {
		if !check(u) {
			return false
		}
	}
	return check(0x7fffffff)
}

// TestBF16NearestAwayKept checks the claim the bf16 cooperative-matrix
// backward rests on when it rounds dS (CM_TO, bf16_nearest_away_kept):
// every float32 of either sign that is not a NaN, ±0, subnormals and ±Inf
// included, goes to the nearest bfloat16, ties away from zero,
// overflowing to ±Inf where bf16_round does; and every quiet NaN of
// either sign stays a NaN. It takes every tie and a stride through the
// rest (sweepStep).
func TestBF16NearestAwayKept(t *testing.T) {
	for _, sign := range []uint32{0, 1 << 31} {
		ok := eachMagnitude(sweepStep(), func(u uint32) bool {
			u |= sign
			if got, want := math.Float32bits(bf16NearestAwayKept(math.Float32frombits(u))), nearestAway(u); got != want {
				t.Errorf("x = %#08x: got %#08x, want %#08x", u, got, want)
				return false
			}
			return true
		})
		ok = ok && eachQuietNaN(sweepStep(), func(u uint32) bool {
			if got := bf16NearestAwayKept(math.Float32frombits(sign | u)); !math.IsNaN(float64(got)) {
				t.Errorf("NaN %#08x: got %#08x, want a NaN", sign|u, math.Float32bits(got))
				return false
			}
			return true
		})
		if !ok {
			return
		}
	}
}

// TestBF16NearestAwayNonneg checks the claim the bf16 cooperative-matrix
// backward rests on when it rounds P for dV (CM_TO_PB,
// bf16_nearest_away_nonneg): every float32 from +0 up, subnormals and +Inf
// included, goes where bf16_nearest_away_kept takes it (the nearest
// bfloat16, ties away from zero, overflowing to +Inf where bf16_round
// does); −0 goes to +0; every quiet NaN of either sign to the quiet NaN
// 0x7fc00000. It takes every tie and a stride through the rest
// (sweepStep).
func TestBF16NearestAwayNonneg(t *testing.T) {
	ok := eachMagnitude(sweepStep(), func(u uint32) bool {
		if got, want := math.Float32bits(bf16NearestAwayNonneg(math.Float32frombits(u))), math.Float32bits(bf16NearestAwayKept(math.Float32frombits(u))); got != want {
			t.Errorf("x = %#08x: got %#08x, want %#08x", u, got, want)
			return false
		}
		return true
	})
	if got := math.Float32bits(bf16NearestAwayNonneg(math.Float32frombits(0x80000000))); got != 0 {
		t.Errorf("−0: got %#08x, want +0", got)
	}
	for _, sign := range []uint32{0, 1 << 31} {
		ok = ok && eachQuietNaN(sweepStep(), func(u uint32) bool {
			if got := math.Float32bits(bf16NearestAwayNonneg(math.Float32frombits(sign | u))); got != 0x7fc00000 {
				t.Errorf("NaN %#08x: got %#08x, want 0x7fc00000", sign|u, got)
				return false
			}
			return true
		})
	}
}
