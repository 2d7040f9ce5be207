package cpu

import (
	"math"

	"github.com/flashvk/flashvk/internal/spec"
)

// scoreRule turns one (sequence, query head)'s raw products q·k into the
// elements of the tiles the softmax exponentiates as 2^(c·element − …).
// Without a softcap, an ALiBi slope or a bias (a plain problem, or a
// spec.Ext one with only a window or key counts) the tiles keep the raw
// products and c is Scale·log2e, as in a plain problem; otherwise
// scoresBias replaces each visible element by spec.Ext's score (capRow or
// biasRow, then addBias, in float32) and c is log2e.
type scoreRule struct {
	c       float32 // the softmax's factor: log2-domain score = c·(tile element)
	rewrite bool    // the tiles are rewritten by scores
	softcap bool    // the rewrite is capRow's (else biasRow's)
	k       float32 // raw product factor: Scale/softcap (tanh's argument), else Scale
	cap     float32 // softcap
	slope   float32 // ALiBi slope of the sequence and head (0: none)
	bias    bool    // the problem has a bias (scoresBias adds it)
}

// newScoreRule returns the rule of sequence b, query head h. The shaders'
// ext_score computes the same scores in log2 units (log2e·softcap·tanh,
// minus slope·log2e·distance); here log2e is the softmax's factor c, as
// Scale·log2e is a plain problem's, so no finite softcap or slope
// overflows a factor, and Scale/softcap is one factor (subnormal, with
// fewer bits, only for a softcap beyond Scale·2^126).
func newScoreRule(p *spec.Problem, b, h int) scoreRule {
	r := scoreRule{c: p.Scale * math.Log2E, k: p.Scale, slope: p.Slope(b, h), bias: biased(p)}
	switch {
	case softcapped(p):
		r.softcap, r.cap, r.k = true, p.Ext.Softcap, p.Scale/p.Ext.Softcap
	case r.slope == 0 && !r.bias:
		return r
	}
	r.c, r.rewrite = math.Log2E, true
	return r
}

// biased reports whether p's scores have a bias (spec.Ext.Bias).
func biased(p *spec.Problem) bool { return p.Ext != nil && p.Ext.Bias != nil }

// softcapped reports whether p's scores pass through a softcap.
func softcapped(p *spec.Problem) bool { return p.Ext != nil && p.Ext.Softcap > 0 }

// scores replaces the raw products r[x] by their scores (spec.Ext's rule
// in float32), the pair of r[x] having its row's diagonal off + x·step
// keys right of its key (d − j: step −1 along a row's keys, +1 along a
// key's rows), and returns the largest score (capRow's and biasRow's
// maximum). With a softcap and soft not nil, soft[x] gets the softcap's
// derivative 1 − tanh²(z/c) at z = Scale·r[x], which the backward
// multiplies dS by. Without rewrite the tiles are left as they are and it
// returns −Inf.
func (s *scoreRule) scores(r, soft []float32, off, step int) float32 {
	switch {
	case s.softcap:
		return capRow(r, soft, s.k, s.cap, s.slope, off, step)
	case s.rewrite:
		return biasRow(r, s.k, s.slope, off, step)
	}
	return negInf
}

// scoresBias is scores followed by the bias: with bias set (the row's bias
// elements, at least as long as r; not nil for a problem with a bias, even
// when empty) each r[x] becomes its score plus bias[x] (addBias: −Inf where
// bias[x] is −Inf, masking the pair), and it returns the largest result.
// A bias without a softcap or a slope takes one pass, Scale·q·k + bias.
func (s *scoreRule) scoresBias(r, soft, bias []float32, off, step int) float32 {
	switch {
	case bias == nil:
		return s.scores(r, soft, off, step)
	case s.softcap || s.slope != 0:
		s.scores(r, soft, off, step)
		return addBias(r, bias, 1)
	}
	return addBias(r, bias, s.k)
}

// dsRow sets dp[x] = p[x]·(dp[x] − d) (dS from P and dP), times the
// softcap's derivative soft[x] that scores stored when there is a softcap:
// dS then is the gradient with respect to Scale·q·k. dp and soft are at
// least as long as p.
func (s *scoreRule) dsRow(p, dp, soft []float32, d float32) {
	if s.softcap {
		dsRowSoft(p, dp, soft, d)
		return
	}
	dsRow(p, dp, d)
}

// dsRowVec is dsRow with a D per element: dp[x] = p[x]·(dp[x] − d[x]),
// times soft[x] with a softcap.
func (s *scoreRule) dsRowVec(p, dp, d, soft []float32) {
	if s.softcap {
		dsRowVecSoft(p, dp, d, soft)
		return
	}
	dsRowVec(p, dp, d)
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
