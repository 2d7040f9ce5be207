package shaders

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/bfloat16"
)

// bf16Split is bf16.glsl's bf16_split in float32 arithmetic
// (each operation rounded on its own: the conversions keep Go from fusing
// them, as precise keeps the shader's compiler from it).
func bf16Split(x float32) float32 {
	c := float32(x * 65537)
	t := float32(c - x)
	return float32(c - t)
}

// nearestEvenCheck returns a check of round on the float32 with bits u:
// the nearest bfloat16, ties to even (bfloat16.FromFloat32), or an error
// and false.
func nearestEvenCheck(t *testing.T, round func(float32) float32) func(u uint32) bool {
	return func(u uint32) bool {
		x := math.Float32frombits(u)
		got := math.Float32bits(round(x))
		want := uint32(bfloat16.FromFloat32(x).Bits()) << 16
		if got != want {
			t.Errorf("x = %#08x (%g): split %#08x, nearest even %#08x", u, x, got, want)
			return false
		}
		return true
	}
}

// bf16NearestAway is bf16.glsl's bf16_nearest_away: half a bfloat16 unit
// added to the bits, the low 16 bits cleared.
func bf16NearestAway(x float32) float32 {
	return math.Float32frombits((math.Float32bits(x) + 0x8000) &^ 0xffff)
}

// TestBF16NearestAwaySource ties bf16NearestAway to the shader's source.
func TestBF16NearestAwaySource(t *testing.T) {
	src, err := os.ReadFile("bf16.glsl")
	if err != nil {
		t.Fatal(err)
	}
	const body = "float bf16_nearest_away(float x) { return uintBitsToFloat((floatBitsToUint(x) + 0x8000u) & 0xffff0000u); }"
	if !strings.Contains(string(src), body) {
		t.Errorf("bf16.glsl no longer defines %s\n(the Go mirror bf16NearestAway and the tests that use it must follow)", body)
	}
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
		want := uint32(bfloat16.FromFloat32(x).Bits()) << 16
		if u&0xffff == 0x8000 { // a tie: away from zero
			want = u + 0x8000
		}
		if got := math.Float32bits(bf16NearestAway(x)); got != want {
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

// bf16RoundSplit is bf16.glsl's bf16_split_guarded: the split with its
// range guard (from 2^111 in magnitude, and for ±Inf, x itself).
func bf16RoundSplit(x float32) float32 {
	if hi := bf16Split(x); !(math.Abs(float64(x)) >= 0x1p111) {
		return hi
	}
	return x
}

// TestBF16SplitRounding checks the claim the bf16 cooperative-matrix
// backward rests on when it rounds P and dS in fp32 arithmetic: for normal
// float32 of either sign below 2^111 in magnitude the guarded split gives
// the nearest bfloat16, ties to even (every tie, and a stride through the
// rest: every 7th value, every 613th under -short); NaN stays NaN; from
// 2^111 on, ±Inf included, the value passes unchanged.
func TestBF16SplitRounding(t *testing.T) {
	step := uint32(7)
	if testing.Short() {
		step = 613
	}
	check := nearestEvenCheck(t, bf16RoundSplit)
	lo, hi := math.Float32bits(0x1p-126), math.Float32bits(0x1p111)
	for _, sign := range []uint32{0, 1 << 31} {
		for u := lo; u < hi; u += step {
			if !check(sign | u) {
				return
			}
		}
		for u := lo&^0xffff | 0x8000; u < hi; u += 0x10000 { // every tie
			if !check(sign | u) {
				return
			}
		}
	}
	for _, x := range []float32{0x1p111, -0x1p111, math.MaxFloat32, -0x1.fffffep120,
		float32(math.Inf(1)), float32(math.Inf(-1))} {
		if got := bf16RoundSplit(x); math.Float32bits(got) != math.Float32bits(x) {
			t.Errorf("%g: got %g, want it unchanged", x, got)
		}
	}
	for _, x := range []float32{0, float32(math.Copysign(0, -1))} {
		if got := bf16RoundSplit(x); math.Float32bits(got) != math.Float32bits(x) {
			t.Errorf("%g: got %g", x, got)
		}
	}
	if got := bf16RoundSplit(float32(math.NaN())); !math.IsNaN(float64(got)) {
		t.Errorf("NaN: got %g", got)
	}
}

// TestFlashCMProbeRounds: flash_cm_probe.comp's ROUNDS is
// FlashCMProbeRounds, the length the host writes and reads.
func TestFlashCMProbeRounds(t *testing.T) {
	src, err := os.ReadFile("flash_cm_probe.comp")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const uint ROUNDS = (\d+)u;`).FindSubmatch(src)
	if m == nil {
		t.Fatal("flash_cm_probe.comp declares no ROUNDS")
	}
	if n, _ := strconv.Atoi(string(m[1])); n != FlashCMProbeRounds {
		t.Errorf("flash_cm_probe.comp's ROUNDS is %d, FlashCMProbeRounds %d", n, FlashCMProbeRounds)
	}
}
