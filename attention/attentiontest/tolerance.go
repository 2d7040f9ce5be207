package attentiontest

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/reference"
	"github.com/x448/float16"
)

// Float32Tol is the rel_l2 bound for float32 storage.
const Float32Tol = 1e-5

// f16Floor keeps fp16 bounds from collapsing where the baseline happens to
// be exact (one key per row, zero gradients): half the fp16 ulp of values
// in [1/2, 1) (2^-12).
const f16Floor = 1.0 / 4096

// bf16Floor is the same for bf16: half the bf16 ulp of values in [1/2, 1)
// (2^-9).
const bf16Floor = 1.0 / 512

// idealMaxWork bounds Nq·Nk·max(D, Dv) of the cases whose 16-bit gradient
// bounds also consider exact arithmetic on the rounded O (see tolerance).
const idealMaxWork = 1 << 22

// Tol are the rel_l2 bounds of one case.
type Tol struct{ O, LSE, DQ, DK, DV, DB float64 }

func (in *Inputs) tolerance(t testing.TB, ref *Ref) Tol {
	if in.DType == attention.Float32 {
		return in.float32Tolerance(t, ref)
	}
	round, floor, name := r16, f16Floor, "fp16"
	if in.DType == attention.BFloat16 {
		round, floor, name = rb16, bf16Floor, "bf16"
	}
	base := in.lowPrecisionBaseline(round, round, ref.O)
	// The backward under test gets O rounded to the 16-bit type; with few
	// keys per row D = rowsum(dO ∘ O) cancels against dP and that rounding
	// alone sets the gradients' error. ideal is the same computation in
	// fp32 with no 16-bit rounding in between, on that same rounded O, its
	// gradients rounded once to the 16-bit type the kernel must store them
	// in: no kernel does better, so the gradients' bound is also at least
	// twice its error.
	// It costs a second emulation, O(Nq·Nk·d) scalar work; it can only bind
	// where rows have few keys, so long cases (whose rows have many) skip it.
	var ideal *Ref
	if c := in.Case; c.Nq*c.Nk*max(c.D, c.Dv) <= idealMaxWork {
		ideal = in.lowPrecisionBaseline(func(x float64) float64 { return x }, round, ref.O)
	}
	gi := func(pick func(*Ref) []float64) []float64 {
		if ideal == nil {
			return nil
		}
		return pick(ideal)
	}
	bound := func(out string, got, exact []float64, want []float64) float64 {
		e := reference.RelL2(got, want)
		t.Logf("%s: PyTorch-style %s baseline rel_l2 %.3g", out, name, e)
		if exact != nil {
			if ei := reference.RelL2(exact, want); ei > e {
				t.Logf("%s: exact arithmetic on the rounded O: rel_l2 %.3g (bound from it)", out, ei)
				e = ei
			}
		}
		return math.Max(2*e, floor)
	}
	tol := Tol{
		O:   bound("o", base.O, nil, ref.O),
		LSE: bound("lse", base.LSE, nil, ref.LSE),
		DQ:  bound("dq", base.DQ, gi(func(r *Ref) []float64 { return r.DQ }), ref.DQ),
		DK:  bound("dk", base.DK, gi(func(r *Ref) []float64 { return r.DK }), ref.DK),
		DV:  bound("dv", base.DV, gi(func(r *Ref) []float64 { return r.DV }), ref.DV),
	}
	if ref.DB != nil {
		tol.DB = bound("dbias", base.DB, gi(func(r *Ref) []float64 { return r.DB }), ref.DB)
	}
	return tol
}

// float32Tolerance is Float32Tol, except for the LSE (lseTolerance) and for
// dQ and dK where the terms of
// the gradient cancel (D = rowsum(dO∘O) against dP, in rows with few
// effective keys) to a gradient far smaller than the terms: fp32 rounding
// of the terms then exceeds Float32Tol of the gradient in any fp32
// computation, and the bound is condUlps fp32 ulps of the terms' magnitude
// (gradMagnitudes) instead: a mixed relative bound. Long cases, whose rows
// have many keys, keep Float32Tol. A gradient that cancels to exactly 0
// (every row with one key) has an absolute error (RelL2 of a zero
// reference): condUlps of the terms bound it alike.
func (in *Inputs) float32Tolerance(t testing.TB, ref *Ref) Tol {
	tol := Tol{Float32Tol, Float32Tol, Float32Tol, Float32Tol, Float32Tol, Float32Tol}
	if c := in.Case; c.Nq*c.Nk*max(c.D, c.Dv) > idealMaxWork {
		return tol
	}
	tol.LSE = in.lseTolerance(t, ref)
	mq, mk, mb := in.gradMagnitudes(ref)
	bound := func(out string, mag, want []float64) float64 {
		n := norm2(want)
		if n == 0 {
			// The terms cancel exactly (a row with one key: dP = D), and
			// rel_l2 is the absolute ‖got‖: condUlps of the terms bound it.
			if b := condUlps * 0x1p-24 * norm2(mag); b > Float32Tol {
				t.Logf("%s: its terms (norm %.3g) cancel to 0: bound %d fp32 ulps of the terms, %.3g absolute", out, norm2(mag), condUlps, b)
				return b
			}
			return Float32Tol
		}
		b := condUlps * 0x1p-24 * norm2(mag) / n
		if !(b > Float32Tol) {
			return Float32Tol
		}
		t.Logf("%s: its terms (norm %.3g) cancel to norm %.3g: bound %d fp32 ulps of the terms, rel_l2 %.3g", out, norm2(mag), n, condUlps, b)
		return b
	}
	tol.DQ, tol.DK = bound("dq", mq, ref.DQ), bound("dk", mk, ref.DK)
	if ref.DB != nil {
		tol.DB = bound("dbias", mb, ref.DB)
	}
	return tol
}

// lseTolerance is Float32Tol, or condUlps fp32 ulps of the magnitudes that
// make up the LSE (lseMagnitudes) where those exceed it: a row's LSE is its
// scores' log-sum-exp, and a score q·k whose terms q_x·k_x cancel to near 0
// (a row with one key: LSE = its score) carries fp32 rounding of the terms,
// not of itself, in any fp32 computation.
func (in *Inputs) lseTolerance(t testing.TB, ref *Ref) float64 {
	mag, lse := in.lseMagnitudes(ref)
	return lseBound(t, mag, lse)
}

// lseBound is lseTolerance given the magnitudes and the LSE they bound.
func lseBound(t testing.TB, mag, lse []float64) float64 {
	n := norm2(lse)
	b := condUlps * 0x1p-24 * norm2(mag) / n
	if !(b > Float32Tol) || n == 0 {
		return Float32Tol
	}
	t.Logf("lse: its terms (norm %.3g) cancel to norm %.3g: bound %d fp32 ulps of the terms, rel_l2 %.3g", norm2(mag), n, condUlps, b)
	return b
}

// lseMagnitudes returns, for every row that sees a key, the reference's
// LSE and the magnitude its fp32 rounding is relative to:
// 1 + |LSE_i| + Σ_j P_ij·(scale·Σ_x |q_x·k_x| + |Score(i, j, 0)|) — the
// products' terms, the ALiBi and bias terms added to them, and the
// log-sum-exp's own rounding (relative to 1, since the sum's largest term
// is 1 after the running max).
func (in *Inputs) lseMagnitudes(ref *Ref) (mag, lse []float64) {
	c := in.Case
	p := in.params()
	scale := math.Abs(p.EffectiveScale())
	for b := range c.B {
		for h := range c.Hq {
			kh := h / (c.Hq / c.Hkv)
			P := reference.Probabilities(p, in.q64, in.k64, b, h)
			for i := range c.Nq {
				l := ref.LSE[(b*c.Hq+h)*c.Nq+i]
				if math.IsInf(l, 0) || math.IsNaN(l) {
					continue
				}
				m := 1 + math.Abs(l)
				for j := range c.Nk {
					pij := P.At(i, j)
					if pij == 0 {
						continue
					}
					var s float64
					for x := range c.D {
						s += math.Abs(in.q64[c.qOff(b, i, h)+x] * in.k64[c.kOff(b, j, kh)+x])
					}
					m += pij * (scale*s + math.Abs(p.Score(b, h, i, j, 0)))
				}
				mag, lse = append(mag, m), append(lse, l)
			}
		}
	}
	return mag, lse
}

// condUlps is how many fp32 units in the last place of a gradient's terms
// float32Tolerance allows where they cancel (measured kernel errors are
// 0.6–1.7 of one such unit on the cases where it binds).
const condUlps = 8

// gradMagnitudes returns dQ, dK and (with a bias whose gradient the case
// asks for) dBias computed from absolute values: for each term
// P_ij·(dP_ij − D_i)·x of the gradient, P_ij·(|dP_ij| + |D_i|)·|x|
// (scale included; x = 1 for dBias). Rounding errors of the cancelling
// difference dP − D are relative to these sums, not to the gradients,
// which may be far smaller.
func (in *Inputs) gradMagnitudes(ref *Ref) (dq, dk, db []float64) {
	c := in.Case
	dot := func(x []float64, xo int, y []float64, yo int) (s float64) {
		for d := range c.Dv {
			s += x[xo+d] * y[yo+d]
		}
		return s
	}
	p := in.params()
	w := func(b, h, kh, i, j int) float64 {
		oi := c.oOff(b, i, h)
		z := p.DropFactor(b, h, i, j) // (dropout: P·(z·dP − D))
		return z*math.Abs(dot(in.dO, oi, in.v64, c.vOff(b, j, kh))) + math.Abs(dot(in.dO, oi, ref.O, oi))
	}
	dq, dk = in.pairSums(w)
	if ref.DB != nil {
		db = make([]float64, len(ref.DB))
		for b := range c.B {
			for h := range c.Hq {
				P := reference.Probabilities(p, in.q64, in.k64, b, h)
				for i := range c.Nq {
					for j := range c.Nk {
						if pij := P.At(i, j); pij != 0 {
							db[c.biasIndex(b, h, i, j)] += pij * w(b, h, h/(c.Hq/c.Hkv), i, j)
						}
					}
				}
			}
		}
	}
	return dq, dk, db
}

// biasIndex is the index of the bias element of (b, h, i, j) in the
// reference's [B, H, S, Nk] order.
func (c Case) biasIndex(b, h, i, j int) int {
	x := c.Bias
	return ((b%x.B*x.H+h%x.H)*x.S+i%x.S)*c.Nk + j
}

// pairSums returns, per element of dQ and dK, Σ scale·P_ij·w(b, h, kh, i, j)·|x|
// over the pairs (i, j) with P_ij > 0 of every (batch b, query head h;
// kv head kh), x = k_j for dQ and q_i for dK.
func (in *Inputs) pairSums(w func(b, h, kh, i, j int) float64) (dq, dk []float64) {
	c := in.Case
	p := in.params()
	scale := math.Abs(p.EffectiveScale())
	dq, dk = make([]float64, len(in.q64)), make([]float64, len(in.k64))
	for b := range c.B {
		for h := range c.Hq {
			kh := h / (c.Hq / c.Hkv)
			P := reference.Probabilities(p, in.q64, in.k64, b, h)
			for i := range c.Nq {
				for j := range c.Nk {
					pij := P.At(i, j)
					if pij == 0 {
						continue
					}
					wij := scale * pij * w(b, h, kh, i, j)
					for x := range c.D {
						dq[c.qOff(b, i, h)+x] += wij * math.Abs(in.k64[c.kOff(b, j, kh)+x])
						dk[c.kOff(b, j, kh)+x] += wij * math.Abs(in.q64[c.qOff(b, i, h)+x])
					}
				}
			}
		}
	}
	return dq, dk
}

// norm2 is the Euclidean norm of x.
func norm2(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

// Element offsets of row (b, sequence position, head) in the contiguous
// BSHD float64 copies of Q (and dQ), K, V and O (and dO).
func (c Case) qOff(b, i, h int) int { return ((b*c.Nq+i)*c.Hq + h) * c.D }
func (c Case) kOff(b, j, h int) int { return ((b*c.Nk+j)*c.Hkv + h) * c.D }
func (c Case) vOff(b, j, h int) int { return ((b*c.Nk+j)*c.Hkv + h) * c.Dv }
func (c Case) oOff(b, i, h int) int { return ((b*c.Nq+i)*c.Hq + h) * c.Dv }

// r16 rounds to the nearest fp16 value.
func r16(x float64) float64 { return float64(float16.Fromfloat32(float32(x)).Float32()) }

// r32 rounds to the nearest fp32 value.
func r32(x float64) float64 { return float64(float32(x)) }

// rb16 rounds to the nearest bf16 value.
func rb16(x float64) float64 { return float64(bfloat16.FromFloat32(float32(x)).Float32()) }

// lowPrecisionBaseline emulates PyTorch's math attention in a 16-bit type
// on the same 16-bit inputs: every matrix product accumulated in fp32 and
// rounded by mid, the softmax computed in fp32 from rounded scores and
// rounded by mid; store rounds to the storage type refO (the O handed to
// the backward) and the outputs a kernel must write in that type (O, dQ,
// dK, dV and a dBias not stored as float32; the LSE is fp32). The 16-bit
// baseline passes one rounding as both (r16 or rb16); the few-key bound
// (tolerance) passes the identity as mid. Its backward takes D =
// rowsum(dO ∘ O) from refO rounded — the O the suite hands the backward
// under test — so that both face the same input (with few keys dS = P(dP
// − D) cancels, and a different rounding of O alone can move rel_l2(dQ)
// by several times).
func (in *Inputs) lowPrecisionBaseline(mid, store func(float64) float64, refO []float64) *Ref {
	c := in.Case
	w := &baseline{in: in, p: in.params(), mid: mid, store: store, oIn: make([]float64, len(refO)),
		// A pair whose P (and so dS) is 0 adds ±0 to every sum it enters,
		// which changes none, unless the other factor is not finite.
		skip: allFinite(in.q64, in.k64, in.v64, in.dO),
		P:    make([]float64, c.Nq*c.Nk), dS: make([]float64, c.Nq*c.Nk)}
	w.scale = w.p.EffectiveScale()
	for i, x := range refO {
		w.oIn[i] = store(x)
	}
	if c.Softcap > 0 {
		w.raw = make([]float64, c.Nq*c.Nk)
	}
	if w.p.Dropout != nil {
		w.F = make([]float64, c.Nq*c.Nk)
	}
	r := &Ref{
		O: make([]float64, c.B*c.Nq*c.Hq*c.Dv), LSE: make([]float64, c.B*c.Hq*c.Nq),
		DQ: make([]float64, len(in.q64)), DK: make([]float64, len(in.k64)), DV: make([]float64, len(in.v64)),
	}
	if x := c.Bias; x != nil && x.Grad {
		r.DB = make([]float64, len(in.bias64))
		w.dSB = make([]float64, c.Nq*c.Nk)
	}
	g := c.Hq / c.Hkv
	for b := range c.B {
		for kh := range c.Hkv {
			// dK and dV accumulate in fp32 across the group's heads, in
			// head then row order.
			acc := make([]float64, c.Nk*(c.D+c.Dv))
			for h := kh * g; h < (kh+1)*g; h++ {
				parallelRanges(c.Nq, func(i0, i1 int) { w.rows(r, b, h, kh, i0, i1) })
				if r.DB != nil { // (dBias: dS before the softcap's factor, summed in fp32)
					for i := range c.Nq {
						for j := range c.Nk {
							if w.P[i*c.Nk+j] != 0 {
								n := c.biasIndex(b, h, i, j)
								r.DB[n] = float64(float32(r.DB[n] + w.dSB[i*c.Nk+j]))
							}
						}
					}
				}
				parallelRanges(c.Nk, func(j0, j1 int) { w.keys(acc, b, h, j0, j1) })
			}
			for j := range c.Nk {
				for d := range c.D {
					r.DK[c.kOff(b, j, kh)+d] = store(w.scale * acc[j*(c.D+c.Dv)+d])
				}
				for d := range c.Dv {
					r.DV[c.vOff(b, j, kh)+d] = store(acc[j*(c.D+c.Dv)+c.D+d])
				}
			}
		}
	}
	if r.DB != nil && !c.Bias.F32 {
		for n, x := range r.DB {
			r.DB[n] = store(x)
		}
	}
	return r
}

// baseline is lowPrecisionBaseline's state for one head: its rows' P
// (and the softcap's rounded scaled products raw, dropout's factors F)
// and dS (dSB: before the softcap's factor, for dBias), Nq×Nk each.
type baseline struct {
	in          *Inputs
	p           reference.Params
	mid, store  func(float64) float64
	scale       float64
	oIn         []float64
	skip        bool
	P, dS       []float64
	raw, F, dSB []float64
}

// dot is the fp32 sum of a[ai+x]·b[bi+x] over x < n, in order.
func dot(a []float64, ai int, b []float64, bi int, n int) float64 {
	var s float32
	for x := range n {
		s += float32(a[ai+x] * b[bi+x])
	}
	return float64(s)
}

// rows computes query rows i0 … i1−1 of head h (kv head kh) of sequence
// b: the softmax, O and LSE; D, dS and dQ.
func (w *baseline) rows(r *Ref, b, h, kh, i0, i1 int) {
	c, in, p, mid := w.in.Case, w.in, w.p, w.mid
	s := make([]float64, c.Nk)
	accO := make([]float32, c.Dv)
	accQ := make([]float32, c.D)
	for i := i0; i < i1; i++ {
		qi, oi := c.qOff(b, i, h), c.oOff(b, i, h)
		P, dS := w.P[i*c.Nk:(i+1)*c.Nk], w.dS[i*c.Nk:(i+1)*c.Nk]
		clear(P)
		clear(dS)
		m := math.Inf(-1)
		for j := range c.Nk {
			s[j] = math.Inf(-1)
			if p.Sees(b, h, i, j) {
				x := mid(w.scale * dot(in.q64, qi, in.k64, c.kOff(b, j, kh), c.D))
				if w.raw != nil {
					w.raw[i*c.Nk+j] = x
				}
				s[j] = mid(p.Score(b, h, i, j, x))
				m = math.Max(m, s[j])
			}
		}
		F := func(j int) float64 { return 1 }
		if w.F != nil {
			Fi := w.F[i*c.Nk : (i+1)*c.Nk]
			for j := range c.Nk {
				Fi[j] = p.DropFactor(b, h, i, j)
			}
			F = func(j int) float64 { return Fi[j] }
		}
		if math.IsInf(m, -1) {
			r.LSE[(b*c.Hq+h)*c.Nq+i] = math.Inf(-1)
		} else {
			var l float32
			for j := range c.Nk {
				if !math.IsInf(s[j], -1) {
					l += float32(math.Exp(s[j] - m))
				}
			}
			r.LSE[(b*c.Hq+h)*c.Nq+i] = m + math.Log(float64(l))
			for j := range c.Nk {
				if !math.IsInf(s[j], -1) {
					P[j] = mid(float64(float32(math.Exp(s[j]-m)) / l))
				}
			}
			clear(accO)
			for j := range c.Nk {
				if P[j] == 0 && w.skip {
					continue
				}
				f, vj := P[j]*F(j), c.vOff(b, j, kh)
				for d := range c.Dv {
					accO[d] += float32(f * in.v64[vj+d])
				}
			}
			for d := range c.Dv {
				r.O[oi+d] = w.store(float64(accO[d]))
			}
		}
		// Backward from the O the suite hands the kernel (refO rounded).
		Di := float64(float32(dot(in.dO, oi, w.oIn, oi, c.Dv)))
		for j := range c.Nk {
			if P[j] == 0 {
				continue
			}
			dP := mid(dot(in.dO, oi, in.v64, c.vOff(b, j, kh), c.Dv)) * F(j)
			dS[j] = mid(P[j] * (dP - Di))
			if w.dSB != nil {
				w.dSB[i*c.Nk+j] = dS[j]
			}
			if w.raw != nil { // through c·tanh(s/c): 1 − tanh²
				t := math.Tanh(w.raw[i*c.Nk+j] / float64(c.Softcap))
				dS[j] = mid(dS[j] * (1 - t*t))
			}
		}
		clear(accQ)
		for j := range c.Nk {
			if dS[j] == 0 && w.skip {
				continue
			}
			kj := c.kOff(b, j, kh)
			for d := range c.D {
				accQ[d] += float32(dS[j] * in.k64[kj+d])
			}
		}
		for d := range c.D {
			r.DQ[qi+d] = w.store(w.scale * float64(accQ[d]))
		}
	}
}

// keys adds head h's terms of dK and dV (before dK's scale) for keys j0
// … j1−1 to acc, row by row.
func (w *baseline) keys(acc []float64, b, h, j0, j1 int) {
	c, in := w.in.Case, w.in
	for j := j0; j < j1; j++ {
		a := acc[j*(c.D+c.Dv) : (j+1)*(c.D+c.Dv)]
		for i := range c.Nq {
			P, dS := w.P[i*c.Nk+j], w.dS[i*c.Nk+j]
			if P == 0 && w.skip {
				continue
			}
			f := P
			if w.F != nil {
				f *= w.F[i*c.Nk+j]
			}
			qi, oi := c.qOff(b, i, h), c.oOff(b, i, h)
			for d := range c.D {
				a[d] += float64(float32(dS * in.q64[qi+d]))
			}
			for d := range c.Dv {
				a[c.D+d] += float64(float32(f * in.dO[oi+d]))
			}
		}
	}
}

// allFinite reports whether every element of xs is finite.
func allFinite(xs ...[]float64) bool {
	for _, x := range xs {
		for _, v := range x {
			if math.IsInf(v, 0) || math.IsNaN(v) {
				return false
			}
		}
	}
	return true
}

// parallelRanges calls f on consecutive ranges [lo, hi) covering 0 … n−1,
// from GOMAXPROCS goroutines (ranges of 16: rows of unequal work, as
// under a causal mask, spread over them), and returns when all are done.
func parallelRanges(n int, f func(lo, hi int)) {
	const step = 16
	workers := min(runtime.GOMAXPROCS(0), (n+step-1)/step)
	if workers <= 1 {
		f(0, n)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				lo := int(next.Add(step)) - step
				if lo >= n {
					return
				}
				f(lo, min(lo+step, n))
			}
		})
	}
	wg.Wait()
}
