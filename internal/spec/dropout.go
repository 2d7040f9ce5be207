package spec

import "math"

// Dropout is a call's attention dropout: each probability P(i, j) is
// kept with probability 1 − p and then scaled by 1/(1 − p), so that the
// output's expectation is the undropped one. The keep decision comes from
// a counter-based generator, so the forward and the backward (and every
// backend) drop the same elements without storing a mask:
//
//	w = Philox4x32-10(counter (j/16, i, b·Hq + h, Offset), key (Seed mod 2³², Seed / 2³²))
//	u = byte (j mod 16) of w (w[0]'s low byte for j mod 16 = 0, its next for 1, …, w[1]'s low byte for 4, …)
//	keep(b, h, i, j) = u ≥ Threshold
//
// for query row i and key j of sequence b (Batch0 + b of a problem that
// is a chunk of a larger batch) (rows and keys counted within
// the sequence, also when packed) and query head h. One 8-bit draw per
// element, as FlashAttention's, so that a block covers 16 keys: p is
// applied at a resolution of 2⁻⁸, Threshold = round(p·256), and kept
// elements are scaled by Scale() = 256 / (256 − Threshold), so that the
// expectation stays exact for the p that is applied.
type Dropout struct {
	// Threshold is round(p·256), 1 … 255 (0 is no dropout).
	Threshold uint32
	Seed      uint64
	Offset    uint32
	// Batch0 is the index of the problem's first sequence in the call's
	// batch (Problem.Batches sets it), so that a chunk draws its
	// sequences' masks.
	Batch0 int
}

// DropLevels is the number of levels of a draw: p is applied as
// Threshold/DropLevels.
const DropLevels = 256

// DropThreshold is the threshold of probability p (0 ≤ p < 1): round(p·2⁸),
// at most 255. p below 2⁻⁹ gives 0: no dropout.
func DropThreshold(p float64) uint32 {
	return uint32(min(math.Round(p*DropLevels), DropLevels-1))
}

// Scale is 1/(1 − Threshold/256), the factor of kept elements.
func (d *Dropout) Scale() float64 { return DropLevels / float64(DropLevels-d.Threshold) }

// Keep reports whether element (i, j) of sequence b, query head h (of
// hq) survives.
func (d *Dropout) Keep(hq, b, h, i, j int) bool {
	return d.KeepBlock(hq, b, h, i, j>>4)>>(j&15)&1 == 1
}

// KeepBlock is Keep for the 16 keys 16g … 16g+15 of row i, one Philox
// block: bit e set when key 16g+e survives.
func (d *Dropout) KeepBlock(hq, b, h, i, g int) uint16 {
	w := Philox([4]uint32{uint32(g), uint32(i), uint32((d.Batch0+b)*hq + h), d.Offset},
		[2]uint32{uint32(d.Seed), uint32(d.Seed >> 32)})
	var bits uint16
	for e := range 16 {
		if w[e>>2]>>(8*uint(e&3))&0xff >= d.Threshold {
			bits |= 1 << e
		}
	}
	return bits
}

// Philox is the Philox4x32-10 block function of counter ctr and key
// (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1,
// 2, 3", SC 2011): ten rounds of two 32×32→64-bit products, the key
// bumped by the Weyl constants between rounds.
func Philox(ctr [4]uint32, key [2]uint32) [4]uint32 {
	const (
		m0, m1 = 0xD2511F53, 0xCD9E8D57
		w0, w1 = 0x9E3779B9, 0xBB67AE85
	)
	for r := range 10 {
		if r > 0 {
			key[0] += w0
			key[1] += w1
		}
		p0 := uint64(m0) * uint64(ctr[0])
		p1 := uint64(m1) * uint64(ctr[2])
		ctr = [4]uint32{
			uint32(p1>>32) ^ ctr[1] ^ key[0], uint32(p1),
			uint32(p0>>32) ^ ctr[3] ^ key[1], uint32(p0),
		}
	}
	return ctr
}
