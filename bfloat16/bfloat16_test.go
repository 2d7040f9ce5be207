package bfloat16

import (
	"math"
	"testing"
)

func TestFromFloat32(t *testing.T) {
	f := math.Float32frombits
	for _, c := range []struct {
		name string
		in   float32
		want uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3f80},
		{"minus two", -2, 0xc000},
		{"exact", f(0x3f810000), 0x3f81},
		{"below half ulp", f(0x3f807fff), 0x3f80},
		{"above half ulp", f(0x3f808001), 0x3f81},
		{"tie to even (down)", f(0x3f808000), 0x3f80},
		{"tie to even (up)", f(0x3f818000), 0x3f82},
		{"negative tie to even", f(0xbf818000), 0xbf82},
		{"carry into exponent", f(0x3fffffff), 0x4000},
		{"max finite", f(0x7f7f0000), 0x7f7f},
		{"below max tie stays", f(0x7f7f7fff), 0x7f7f},
		{"overflow tie to inf", f(0x7f7f8000), 0x7f80},
		{"float32 max to inf", math.MaxFloat32, 0x7f80},
		{"negative overflow", -math.MaxFloat32, 0xff80},
		{"+inf", float32(math.Inf(1)), 0x7f80},
		{"-inf", float32(math.Inf(-1)), 0xff80},
		{"smallest subnormal", f(0x00010000), 0x0001},
		{"subnormal tie to even (down)", f(0x00008000), 0x0000},
		{"subnormal tie to even (up)", f(0x00018000), 0x0002},
		{"subnormal above half", f(0x00008001), 0x0001},
		{"float32 subnormal rounds to zero", f(0x00000001), 0x0000},
		{"subnormal to normal", f(0x007fffff), 0x0080},
		{"negative subnormal", f(0x80010000), 0x8001},
	} {
		if got := FromFloat32(c.in); uint16(got) != c.want {
			t.Errorf("%s: FromFloat32(%#08x) = %#04x, want %#04x", c.name, math.Float32bits(c.in), uint16(got), c.want)
		}
	}
}

func TestNaN(t *testing.T) {
	for _, u := range []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0x7f8000ff, 0x7fa00000} {
		b := FromFloat32(math.Float32frombits(u))
		if !b.IsNaN() {
			t.Errorf("NaN %#08x → %#04x, not NaN", u, uint16(b))
		}
		if b&0x0040 == 0 {
			t.Errorf("NaN %#08x → %#04x, not quiet", u, uint16(b))
		}
		if uint32(b)>>15 != u>>31 {
			t.Errorf("NaN %#08x → %#04x: sign lost", u, uint16(b))
		}
		if !math.IsNaN(float64(b.Float32())) {
			t.Errorf("%#04x.Float32() is not NaN", uint16(b))
		}
	}
	if !NaN.IsNaN() || PositiveInfinity.IsNaN() || MaxValue.IsNaN() {
		t.Error("IsNaN")
	}
}

func TestFloat32Exact(t *testing.T) {
	// Every non-NaN bfloat16 converts to float32 and back unchanged.
	for u := range 1 << 16 {
		b := BFloat16(u)
		x := b.Float32()
		if math.Float32bits(x) != uint32(u)<<16 {
			t.Fatalf("%#04x.Float32() bits %#08x", u, math.Float32bits(x))
		}
		if b.IsNaN() {
			continue
		}
		if got := FromFloat32(x); got != b {
			t.Fatalf("round trip %#04x → %v → %#04x", u, x, uint16(got))
		}
		if b.Float64() != float64(x) {
			t.Fatalf("Float64(%#04x)", u)
		}
	}
}

// TestNearest checks FromFloat32 against the definition on random inputs:
// the result is a nearest bfloat16, and on a tie the even one.
func TestNearest(t *testing.T) {
	x := uint32(12345)
	for range 200000 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		in := math.Float32frombits(x)
		if math.IsNaN(float64(in)) {
			continue
		}
		got := FromFloat32(in)
		lo := BFloat16(x >> 16) // truncation toward zero
		hi := lo + 1            // next away from zero (may be Inf)
		dlo := math.Abs(float64(in) - lo.Float64())
		dhi := math.Abs(hi.Float64() - float64(in))
		if hi&0x7fff == 0x7f80 { // Inf: halfway point is 2^128 as if the format went on
			dhi = math.Abs(math.Ldexp(1, 128)*sign(in) - float64(in))
		}
		want := lo
		if dhi < dlo || dhi == dlo && lo&1 == 1 {
			want = hi
		}
		if got != want {
			t.Fatalf("FromFloat32(%#08x) = %#04x, want %#04x", x, uint16(got), uint16(want))
		}
	}
}

func sign(f float32) float64 {
	if f < 0 {
		return -1
	}
	return 1
}

func TestIsInfAndConstants(t *testing.T) {
	if !PositiveInfinity.IsInf(1) || !PositiveInfinity.IsInf(0) || PositiveInfinity.IsInf(-1) {
		t.Error("+Inf")
	}
	if !NegativeInfinity.IsInf(-1) || NegativeInfinity.IsInf(1) || MaxValue.IsInf(0) {
		t.Error("-Inf")
	}
	if got := MaxValue.Float32(); got != 3.3895314e38 {
		t.Errorf("MaxValue = %v", got)
	}
	if got := SmallestNonzero.Float64(); got != math.Ldexp(1, -133) {
		t.Errorf("SmallestNonzero = %v", got)
	}
	if s := FromFloat32(1.5).String(); s != "1.5" {
		t.Errorf("String = %q", s)
	}
	fs := []float32{1, -0.5, 3}
	if got := Float32s(Slice(fs)); got[0] != 1 || got[1] != -0.5 || got[2] != 3 {
		t.Errorf("Slice/Float32s: %v", got)
	}
	if FromBits(0x3f80).Bits() != 0x3f80 {
		t.Error("FromBits/Bits")
	}
}
