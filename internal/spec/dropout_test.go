package spec

import (
	"math"
	"testing"
)

// The known-answer vectors of the Philox4x32-10 reference implementation
// (counter, key → output).
func TestPhiloxKnownAnswers(t *testing.T) {
	for _, c := range []struct {
		ctr  [4]uint32
		key  [2]uint32
		want [4]uint32
	}{
		{[4]uint32{}, [2]uint32{}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{^uint32(0), ^uint32(0), ^uint32(0), ^uint32(0)}, [2]uint32{^uint32(0), ^uint32(0)},
			[4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, [2]uint32{0xa4093822, 0x299f31d0},
			[4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	} {
		if got := Philox(c.ctr, c.key); got != c.want {
			t.Errorf("Philox(%08x, %08x) = %08x, want %08x", c.ctr, c.key, got, c.want)
		}
	}
}

func TestDropThreshold(t *testing.T) {
	for _, c := range []struct {
		p    float64
		want uint32
	}{{0, 0}, {0.1, 26}, {0.5, 128}, {1.0 / 256, 1}, {0.99 / 512, 0}, {1.01 / 512, 1}, {0.998, 255}, {0.9999999, 255}} {
		if got := DropThreshold(c.p); got != c.want {
			t.Errorf("DropThreshold(%v) = %d, want %d", c.p, got, c.want)
		}
	}
}

// The keep rate over many elements is 1 − p within six standard
// deviations (of the p applied, Threshold/256), KeepBlock agrees with
// Keep and the definition, and streams differ by seed,
// offset and head.
func TestDropoutKeep(t *testing.T) {
	for _, p := range []float64{0.1, 0.5, 0.9} {
		d := &Dropout{Threshold: DropThreshold(p), Seed: 0x1234_5678_9abc_def0, Offset: 7}
		p = float64(d.Threshold) / DropLevels
		n, kept := 0, 0
		for h := range 3 {
			for i := range 64 {
				for g := range 32 {
					bits := d.KeepBlock(3, 1, h, i, g)
					for e := range 16 {
						w := Philox([4]uint32{uint32(g), uint32(i), uint32(1*3 + h), 7}, [2]uint32{0x9abc_def0, 0x1234_5678})
						k := w[e/4]>>(8*(e%4))&0xff >= d.Threshold
						if k != (bits>>e&1 == 1) || k != d.Keep(3, 1, h, i, 16*g+e) {
							t.Fatalf("p %v: KeepBlock or Keep disagrees with the definition at h %d i %d j %d", p, h, i, 16*g+e)
						}
						n++
						if k {
							kept++
						}
					}
				}
			}
		}
		rate := float64(kept) / float64(n)
		sd := math.Sqrt(p * (1 - p) / float64(n))
		if math.Abs(rate-(1-p)) > 6*sd {
			t.Errorf("p %v: keep rate %.4f over %d elements, want %.4f ± %.4f", p, rate, n, 1-p, 6*sd)
		}
		if s := d.Scale() * (1 - float64(d.Threshold)/DropLevels); math.Abs(s-1) > 1e-15 {
			t.Errorf("p %v: Scale·(1 − T/256) = %v, want 1", p, s)
		}
	}
	base := Dropout{Threshold: 128, Seed: 1}
	differs := func(a, b Dropout, ha, hb int) bool {
		for i := range 16 {
			if a.KeepBlock(4, 0, ha, i, 0) != b.KeepBlock(4, 0, hb, i, 0) {
				return true
			}
		}
		return false
	}
	seed, off := base, base
	seed.Seed, off.Offset = 2, 1
	if !differs(base, seed, 0, 0) || !differs(base, off, 0, 0) || !differs(base, base, 0, 1) {
		t.Error("a different seed, offset or head gives the same mask")
	}
}
