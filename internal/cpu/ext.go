package cpu

import (
	"math"

	"github.com/flashvk/flashvk/internal/spec"
)

// scoreRule turns one (sequence, query head)'s raw products q·k into the
// scores the softmax exponentiates, in log2 units. Without a softcap or an
// ALiBi slope (a plain problem, or a spec.Ext one with only a window or
// key counts) the tiles keep the raw products and the softmax multiplies
// them by c = Scale·log2e, as in a plain problem; otherwise toLog2
// rewrites each visible element of a tile (scale, softcap, ALiBi, log2e)
// and c is 1.
type scoreRule struct {
	c       float32 // log2-domain score = c·(tile element)
	rewrite bool    // the tiles are rewritten by toLog2
	scale   float64 // Scale
	softcap float64 // softcap (0: none)
	slope   float64 // ALiBi slope of the sequence and head (0: none)
}

func newScoreRule(p *spec.Problem, b, h int) scoreRule {
	r := scoreRule{c: p.Scale * math.Log2E, scale: float64(p.Scale), slope: float64(p.Slope(b, h))}
	if p.Ext != nil {
		r.softcap = float64(p.Ext.Softcap)
	}
	if r.softcap > 0 || r.slope != 0 {
		r.c, r.rewrite = 1, true
	}
	return r
}

// softcapped reports whether p's scores pass through a softcap.
func softcapped(p *spec.Problem) bool { return p.Ext != nil && p.Ext.Softcap > 0 }

// toLog2 replaces the raw products r[x] by their scores times log2e
// (spec.Ext's rule, in float64, rounded once), the pair of r[x] having
// its row's diagonal off + x·step keys right of its key (d − j: step −1
// along a row's keys, +1 along a key's rows). With a softcap and soft not
// nil, soft[x] gets the softcap's derivative 1 − tanh²(z/c) at z =
// Scale·r[x], which the backward multiplies dS by. Without rewrite the
// tiles are left as they are.
func (s *scoreRule) toLog2(r, soft []float32, off, step int) {
	if !s.rewrite {
		return
	}
	for x, v := range r {
		z := s.scale * float64(v)
		if s.softcap > 0 {
			t := math.Tanh(z / s.softcap) // ±Inf gives ±1: a finite score
			if soft != nil {
				soft[x] = float32((1 - t) * (1 + t))
			}
			z = s.softcap * t
		}
		z -= s.slope * math.Abs(float64(off+x*step))
		r[x] = float32(z * math.Log2E)
	}
}

// softGrad multiplies dS by the softcap's derivative that toLog2 stored
// in soft (len(soft) ≥ len(ds)): dS then is the gradient with respect to
// Scale·q·k. Without a softcap it leaves dS as it is.
func (s *scoreRule) softGrad(ds, soft []float32) {
	if s.softcap <= 0 {
		return
	}
	soft = soft[:len(ds)]
	for x := range ds {
		ds[x] *= soft[x]
	}
}

// clip clamps the half-open range lo … hi−1 to 0 … n−1: it returns a ≤ e
// in [0, n] when lo ≤ hi.
func clip(lo, hi, n int) (a, e int) {
	return min(max(lo, 0), n), min(max(hi, 0), n)
}

// rowKeys returns the keys among j0 … j0+n−1 that row i of sequence b
// sees: j0+a … j0+e−1 (a = e when none).
func rowKeys(p *spec.Problem, b, i, j0, n int) (a, e int) {
	lo, hi := p.KeyRange(b, i)
	return clip(lo-j0, hi-j0, n)
}

// tileKeys returns keys begin … end−1, which hold every key that a row of
// the query tile i0 … i0+nr−1 of sequence b sees: KeyRange's bounds are
// non-decreasing in the row, so its first row starts and its last row ends
// the range. The key tiles outside it are skipped.
func tileKeys(p *spec.Problem, b, i0, nr int) (begin, end int) {
	begin, _ = p.KeyRange(b, i0)
	_, end = p.KeyRange(b, i0+nr-1)
	return begin, end
}

// tileRow returns elements a … e−1 of row r of tile t (row stride ld), nil
// when t is nil.
func tileRow(t []float32, r, ld, a, e int) []float32 {
	if t == nil {
		return nil
	}
	return t[r*ld+a : r*ld+e]
}
