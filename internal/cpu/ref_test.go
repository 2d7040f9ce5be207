package cpu

import (
	"math"

	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/internal/spec/spectest"
)

// Naive float64 attention, independent of the tiled code: it materialises
// the full score matrix of each (batch, head) and softmaxes it row by row,
// following spec.Ext's definition through the problem's methods (KeyRange,
// Diag, Slope), and with dropout package reference's mask (its own Philox,
// not spec's). Dense operands are [B, H, N, W] with W contiguous.

type dense struct {
	x          []float64
	b, h, n, w int
}

func newDense(b, h, n, w int) dense {
	return dense{make([]float64, b*h*n*w), b, h, n, w}
}

func (d dense) row(b, h, i int) []float64 {
	o := ((b*d.h+h)*d.n + i) * d.w
	return d.x[o : o+d.w]
}

// refResult holds the naive forward and backward outputs.
type refResult struct {
	o, dq, dk, dv dense
	lse           []float64 // [B, Hq, Nq]
}

// refForward computes O and LSE in float64.
func refForward(p *spec.Problem, q, k, v dense) (o dense, lse []float64) {
	o = newDense(p.B, p.Hq, p.Nq, p.Dv)
	lse = make([]float64, p.B*p.Hq*p.Nq)
	refRows(p, q, k, func(b, h, kvh, i int, pr []float64, l float64) {
		lse[(b*p.Hq+h)*p.Nq+i] = l
		or := o.row(b, h, i)
		for j, pj := range pr {
			if pj == 0 {
				continue
			}
			z := pj * refDrop(p, b, h, i, j)
			vr := v.row(b, kvh, j)
			for c := range or {
				or[c] += z * vr[c]
			}
		}
	})
	return o, lse
}

// refDrop is the dropout factor Z of query row i and key j of sequence b
// (Batch0 + b of the call), head h: 1 without dropout, else Scale where
// package reference keeps the element and 0 where it drops it.
func refDrop(p *spec.Problem, b, h, i, j int) float64 {
	d := spectest.Dropout(p)
	if d == nil {
		return 1
	}
	if d.Keep(p.Hq, p.Ext.Dropout.Batch0+b, h, i, j) {
		return d.Scale()
	}
	return 0
}

// refRows calls f for every query row i of every (batch b, head h), in
// order, with kvh the head's kv head, pr the row's probabilities over the
// Nk keys (0 where masked; the slice is reused) and l its log-sum-exp.
func refRows(p *spec.Problem, q, k dense, f func(b, h, kvh, i int, pr []float64, l float64)) {
	s := make([]float64, p.Nq*p.Nk)
	for b := range p.B {
		for h := range p.Hq {
			kvh := h / (p.Hq / p.Hkv)
			refScores(p, q, k, b, h, kvh, s)
			for i := range p.Nq {
				pr := s[i*p.Nk : (i+1)*p.Nk]
				f(b, h, kvh, i, pr, refSoftmax(pr))
			}
		}
	}
}

// refScores fills s (Nq×Nk) with the scores of spec.Ext's rule (a plain
// problem's are scale·q_i·k_j), −Inf where masked.
func refScores(p *spec.Problem, q, k dense, b, h, kvh int, s []float64) {
	for i := range p.Nq {
		lo, hi := p.KeyRange(b, i)
		qr := q.row(b, h, i)
		for j := range p.Nk {
			if j < lo || j >= hi {
				s[i*p.Nk+j] = math.Inf(-1)
				continue
			}
			z := refZ(p, qr, k.row(b, kvh, j))
			if c := refCap(p); c > 0 {
				z = c * math.Tanh(z/c)
			}
			s[i*p.Nk+j] = z - float64(p.Slope(b, h))*math.Abs(float64(p.Diag(b, i)-j))
		}
	}
}

// refZ returns scale·q·k.
func refZ(p *spec.Problem, q, k []float64) float64 {
	var acc float64
	for c := range q {
		acc += q[c] * k[c]
	}
	return float64(p.Scale) * acc
}

// refCap returns p's softcap (0: none).
func refCap(p *spec.Problem) float64 {
	if p.Ext == nil {
		return 0
	}
	return float64(p.Ext.Softcap)
}

// refSoftGrad returns the derivative of the score with respect to z =
// scale·q·k: 1 − tanh²(z/c) with a softcap c, else 1.
func refSoftGrad(p *spec.Problem, q, k []float64) float64 {
	c := refCap(p)
	if c <= 0 {
		return 1
	}
	t := math.Tanh(refZ(p, q, k) / c)
	return 1 - t*t
}

// refSoftmax replaces the row by its softmax and returns its log-sum-exp
// (−Inf, with a zero row, when every entry is masked).
func refSoftmax(r []float64) float64 {
	m := math.Inf(-1)
	for _, x := range r {
		m = math.Max(m, x)
	}
	if math.IsInf(m, -1) {
		clear(r)
		return m
	}
	var l float64
	for j, x := range r {
		r[j] = math.Exp(x - m)
		l += r[j]
	}
	for j := range r {
		r[j] /= l
	}
	return m + math.Log(l)
}

// refBackward computes the forward and the gradients in float64.
func refBackward(p *spec.Problem, q, k, v, do dense) refResult {
	o, lse := refForward(p, q, k, v)
	r := refResult{o: o, lse: lse,
		dq: newDense(p.B, p.Hq, p.Nq, p.D),
		dk: newDense(p.B, p.Hkv, p.Nk, p.D),
		dv: newDense(p.B, p.Hkv, p.Nk, p.Dv),
	}
	sc := float64(p.Scale)
	refRows(p, q, k, func(b, h, kvh, i int, pr []float64, _ float64) {
		dor, or := do.row(b, h, i), o.row(b, h, i)
		var dsum float64
		for c := range dor {
			dsum += dor[c] * or[c]
		}
		qr, dqr := q.row(b, h, i), r.dq.row(b, h, i)
		for j, pij := range pr {
			if pij == 0 {
				continue
			}
			vr := v.row(b, kvh, j)
			var dp float64
			for c := range dor {
				dp += dor[c] * vr[c]
			}
			z := refDrop(p, b, h, i, j)
			kr, dkr, dvr := k.row(b, kvh, j), r.dk.row(b, kvh, j), r.dv.row(b, kvh, j)
			ds := pij * (z*dp - dsum) * refSoftGrad(p, qr, kr)
			for c := range dqr {
				dqr[c] += sc * ds * kr[c]
				dkr[c] += sc * ds * qr[c]
			}
			for c := range dvr {
				dvr[c] += z * pij * dor[c]
			}
		}
	})
	return r
}
