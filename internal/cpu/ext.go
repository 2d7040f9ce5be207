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
// rewrites each visible element of a tile in float32 (capRow or biasRow)
// and c is 1.
type scoreRule struct {
	c       float32 // log2-domain score = c·(tile element)
	rewrite bool    // the tiles are rewritten by toLog2
	softcap bool    // the rewrite is capRow's (else biasRow's)
	k       float32 // raw product factor: Scale/softcap (tanh's argument), else Scale·log2e
	capL2   float32 // softcap·log2e
	slope   float32 // ALiBi slope·log2e of the sequence and head (0: none)
}

// newScoreRule returns the rule of sequence b, query head h. Its factors
// are rounded to float32 once each, as the shaders' ext_score rounds its
// (there in two steps: Scale, then 1/softcap).
func newScoreRule(p *spec.Problem, b, h int) scoreRule {
	r := scoreRule{c: p.Scale * math.Log2E, slope: p.Slope(b, h) * math.Log2E}
	switch {
	case softcapped(p):
		c := p.Ext.Softcap
		r.softcap, r.k, r.capL2 = true, p.Scale/c, c*math.Log2E
	case r.slope != 0:
		r.k = r.c
	default:
		return r
	}
	r.c, r.rewrite = 1, true
	return r
}

// softcapped reports whether p's scores pass through a softcap.
func softcapped(p *spec.Problem) bool { return p.Ext != nil && p.Ext.Softcap > 0 }

// toLog2 replaces the raw products r[x] by their scores times log2e
// (spec.Ext's rule in float32), the pair of r[x] having its row's
// diagonal off + x·step keys right of its key (d − j: step −1 along a
// row's keys, +1 along a key's rows). With a softcap and soft not nil,
// soft[x] gets the softcap's derivative 1 − tanh²(z/c) at z = Scale·r[x],
// which the backward multiplies dS by. Without rewrite the tiles are left
// as they are.
func (s *scoreRule) toLog2(r, soft []float32, off, step int) {
	switch {
	case s.softcap:
		capRow(r, soft, s.k, s.capL2, s.slope, off, step)
	case s.rewrite:
		biasRow(r, s.k, s.slope, off, step)
	}
}

// softGrad multiplies dS by the softcap's derivative that toLog2 stored
// in soft (len(soft) ≥ len(ds)): dS then is the gradient with respect to
// Scale·q·k. Without a softcap it leaves dS as it is.
func (s *scoreRule) softGrad(ds, soft []float32) {
	if s.softcap {
		mulRow(ds, soft)
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
