package reference

import (
	"fmt"
	"math"
)

// Dropout drops attention probabilities (see the package doc, Dropout):
// each is kept with probability 1 − P and then scaled by 1/(1 − P).
type Dropout struct {
	// P is the probability of dropping an element, 0 ≤ P < 1, applied at
	// a resolution of 2⁻⁸ (Threshold).
	P      float64
	Seed   uint64
	Offset uint32
	// Batch0 is added to the sequence index b in the counter: the index
	// of Params' first sequence in a larger batch (one sequence of a
	// packed batch checked alone, say).
	Batch0 int
}

// Threshold is round(P·256), at most 255: an element is kept when its
// 8-bit draw is at least this.
func (d *Dropout) Threshold() uint32 { return uint32(min(math.Round(d.P*256), 255)) }

// Scale is the factor of a kept element, 256/(256 − Threshold).
func (d *Dropout) Scale() float64 { return 256 / float64(256-d.Threshold()) }

func (d *Dropout) validate() error {
	if d != nil && !(d.P >= 0 && d.P < 1) {
		return fmt.Errorf("%w: Dropout.P = %v, want 0 ≤ P < 1", ErrShape, d.P)
	}
	if d != nil && d.Batch0 < 0 {
		return fmt.Errorf("%w: Dropout.Batch0 = %d, want ≥ 0", ErrShape, d.Batch0)
	}
	return nil
}

// Keep reports whether the probability of query row i and key j of
// sequence b, head h (of hq) survives: byte j mod 4 of word (j mod 16)/4
// of the Philox4x32-10 block of counter (j/16, i, (Batch0 + b)·hq + h,
// Offset) and key (Seed's low and high words) is at least Threshold.
func (d *Dropout) Keep(hq, b, h, i, j int) bool {
	w := philox4x32([4]uint32{uint32(j / 16), uint32(i), uint32((d.Batch0+b)*hq + h), d.Offset},
		[2]uint32{uint32(d.Seed & 0xffffffff), uint32(d.Seed >> 32)})
	u := w[(j%16)/4] >> (8 * (j % 4))
	return u&0xff >= d.Threshold()
}

// DropFactor is the factor dropout applies to the probability of query
// row i and key j of (b, h): 0 when dropped, Scale when kept, 1 without
// Dropout (or with P = 0).
func (p Params) DropFactor(b, h, i, j int) float64 {
	d := p.Dropout
	if d == nil || d.Threshold() == 0 {
		return 1
	}
	if d.Keep(p.Hq, b, h, i, j) {
		return d.Scale()
	}
	return 0
}

// philox4x32 is the Philox4x32-10 block function: ten rounds, each two
// 32×32 → 64-bit products of counter words with the multipliers, their
// high halves xored with the other counter words and the round key; the
// key is bumped by the Weyl constants (the golden ratio's and √3 − 1's
// first 32 fraction bits) before every round but the first.
func philox4x32(c [4]uint32, k [2]uint32) [4]uint32 {
	for r := 0; r < 10; r++ {
		if r > 0 {
			k[0] += 0x9E3779B9
			k[1] += 0xBB67AE85
		}
		hi0, lo0 := mul32(0xD2511F53, c[0])
		hi1, lo1 := mul32(0xCD9E8D57, c[2])
		c = [4]uint32{hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0}
	}
	return c
}

func mul32(a, b uint32) (hi, lo uint32) {
	x := uint64(a) * uint64(b)
	return uint32(x >> 32), uint32(x)
}
