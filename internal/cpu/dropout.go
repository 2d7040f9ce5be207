package cpu

import (
	"math"

	"github.com/flashvk/flashvk/internal/spec"
)

// dropper draws one (sequence, query head)'s dropout mask: the keep bits
// of spec.Dropout.KeepBlock, one Philox4x32-10 block per 16 keys of a
// row, handed out as groups of 8 keys (group g is half g mod 2 of block
// g/2), with the counter words that do not change along the pair (sequence and
// head, Offset) and the round keys precomputed. The zero value (on
// false) is a problem without dropout.
type dropper struct {
	on     bool
	thr    uint32
	c2, c3 uint32        // counter words: (Batch0+b)·Hq + h, Offset
	k      [10][2]uint32 // round keys
	// keep and keepScale are the factors of a dropped ([0]) and a kept
	// ([1]) element: −0 and 1, −0 and Scale. A dropped element is
	// multiplied by −0, not skipped, so that 0·NaN = NaN reaches the
	// result as in the reference; the sign tells the portable
	// accumulation kernel (which skips +0, masked, probabilities) to
	// multiply it.
	keep, keepScale [2]float32
	scale           float64 // Scale, for O's and dV's one multiplication
}

// negZero is −0 in float32.
var negZero = float32(math.Copysign(0, -1))

// newDropper returns the dropper of sequence b, query head h of p (off
// when p has no dropout).
func newDropper(p *spec.Problem, b, h int) dropper {
	if !dropping(p) {
		return dropper{}
	}
	d := p.Ext.Dropout
	r := dropper{on: true, thr: d.Threshold, c2: uint32((d.Batch0+b)*p.Hq + h), c3: d.Offset, scale: d.Scale()}
	k0, k1 := uint32(d.Seed), uint32(d.Seed>>32)
	for i := range r.k {
		r.k[i] = [2]uint32{k0, k1}
		k0 += 0x9E3779B9
		k1 += 0xBB67AE85
	}
	r.keep = [2]float32{negZero, 1}
	r.keepScale = [2]float32{negZero, float32(r.scale)}
	return r
}

// dropping reports whether p has dropout.
func dropping(p *spec.Problem) bool { return p.Ext != nil && p.Ext.Dropout != nil }

// philoxRound is one round of Philox4x32 with round key (k0, k1).
func philoxRound(c0, c1, c2, c3, k0, k1 uint32) (uint32, uint32, uint32, uint32) {
	p0 := uint64(0xD2511F53) * uint64(c0)
	p1 := uint64(0xCD9E8D57) * uint64(c2)
	return uint32(p1>>32) ^ c1 ^ k0, uint32(p1), uint32(p0>>32) ^ c3 ^ k1, uint32(p0)
}

// group returns the keep bits of keys 8g … 8g+7 of query row i (bit e
// set when key 8g+e survives): half g mod 2 of block g/2.
func (d *dropper) group(i, g int) uint8 {
	return uint8(d.block(i, g>>1) >> (8 * uint(g&1)))
}

// block returns the keep bits of keys 16g … 16g+15 of query row i (bit e
// set when key 16g+e survives): spec.Dropout.KeepBlock, unrolled.
func (d *dropper) block(i, g int) uint16 {
	c0, c1, c2, c3 := uint32(g), uint32(i), d.c2, d.c3
	k := &d.k
	c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, k[0][0], k[0][1])
	c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, k[1][0], k[1][1])
	c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, k[2][0], k[2][1])
	c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, k[3][0], k[3][1])
	c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, k[4][0], k[4][1])
	c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, k[5][0], k[5][1])
	c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, k[6][0], k[6][1])
	c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, k[7][0], k[7][1])
	c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, k[8][0], k[8][1])
	c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, k[9][0], k[9][1])
	t := d.thr
	return keptBytes(c0, t) | keptBytes(c1, t)<<4 | keptBytes(c2, t)<<8 | keptBytes(c3, t)<<12
}

// keptBytes returns bit b set when byte b of w (low byte first) is at
// least t.
func keptBytes(w, t uint32) uint16 {
	return kept(w&0xff, t) | kept(w>>8&0xff, t)<<1 | kept(w>>16&0xff, t)<<2 | kept(w>>24, t)<<3
}

// kept is 1 when the 8-bit draw u is at least t (u − t does not wrap:
// bit 31 clear), else 0.
func kept(u, t uint32) uint16 { return uint16(^(u-t)>>31) & 1 }

// draw sets bits[x] to the keep bits of group g+x of query row i for x <
// n ≤ 8: the blocks they lie in (at most five) eight at once with the
// vector kernels, else one at a time.
func (d *dropper) draw(bits *[8]uint32, i, g, n int) {
	b0 := g >> 1
	var blocks [8]uint32
	if !philoxSIMD(&blocks, &d.k, uint32(b0), uint32(i), d.c2, d.c3, d.thr) {
		for x := range (g+n-1)>>1 - b0 + 1 {
			blocks[x] = uint32(d.block(i, b0+x))
		}
	}
	for x := range n {
		bits[x] = blocks[(g+x)>>1-b0] >> (8 * uint((g+x)&1)) & 0xff
	}
}

// apply multiplies r[x], the element of query row i and key j+x, by f[1]
// where it is kept and f[0] where it is dropped: key k is bit k&7 of
// group k>>3 (the first and last group of r possibly partial), the
// groups drawn eight at a time and the whole ones among them applied by
// the vector kernel.
func (d *dropper) apply(r []float32, i, j int, f *[2]float32) {
	var bits [8]uint32
	for x := 0; x < len(r); {
		g := (j + x) >> 3
		n := min(8, (j+len(r)-1)>>3-g+1)
		d.draw(&bits, i, g, n)
		end := min(8*(g+n)-j, len(r)) // r's keys in these groups: x … end−1
		for a := min(x+(-(j+x))&7, end); x < a; x++ {
			k := j + x
			r[x] *= f[bits[(k>>3-g)&7]>>(k&7)&1]
		}
		if m := (end - x) &^ 7; m > 0 && dropRowSIMD(r[x:x+m], bits[(j+x)>>3-g:], f) {
			x += m
		}
		for ; x < end; x++ {
			k := j + x
			r[x] *= f[bits[(k>>3-g)&7]>>(k&7)&1]
		}
	}
}

// groups sets bits[(g−g0)·ld + r] to the keep bits of group g of query
// row i0+r, for the rows r0 … r0+n−1 of a tile and the groups of the keys
// each row sees among keys j0 … j0+nk−1 (rowKeys): the backward's dK/dV
// pass draws a transposed tile's groups row by row and reads them per key
// (dropCol), one byte per row.
func (d *dropper) groups(bits []uint8, ld int, p *spec.Problem, b, i0, r0, n, j0, nk, g0 int) {
	var w [8]uint32
	for r := r0; r < r0+n; r++ {
		lo, hi := rowKeys(p, b, i0+r, j0, nk)
		if lo == hi {
			continue
		}
		last := (j0 + hi - 1) >> 3
		for g := (j0 + lo) >> 3; g <= last; g += 8 {
			n := min(8, last-g+1)
			d.draw(&w, i0+r, g, n)
			for x, y := range w[:n] {
				bits[(g-g0+x)*ld+r] = uint8(y)
			}
		}
	}
}
