package reference

import (
	"context"
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// ErrShape is wrapped by every error about invalid parameters or slice
// lengths.
var ErrShape = errors.New("reference: bad shape")

// Params describes one attention problem. See the package documentation for
// the layout, head-grouping, scale and mask conventions.
type Params struct {
	B, Hq, Hkv, Nq, Nk, D, Dv int
	// Scale multiplies QKᵀ; 0 means 1/√D.
	Scale  float64
	Causal bool
	// BottomRight places each query's diagonal (Diag): false = top-left
	// (key i), true = bottom-right (key i + Nk − Nq, Nk the sequence's key
	// count). The causal mask, the window and ALiBi measure from it.
	BottomRight bool
	// Window, when set, limits query i to the keys Diag−Left … Diag+Right
	// (−1: unbounded on that side). Causal is Right = 0 (with a window
	// too: its Right is then taken as 0).
	Window *Window
	// Softcap c > 0 replaces each scaled score s by c·tanh(s/c).
	Softcap float64
	// ALiBi are slopes per query head ([Hq]) or per sequence and head
	// ([B·Hq]): the score of (i, j) gains −slope·|Diag(i) − j|.
	ALiBi []float64
	// SeqUsedK is each sequence's key count ([B], ≤ Nk): keys at or past
	// it are masked, and Diag uses it as Nk.
	SeqUsedK []int
	// Dropout, when set, drops probabilities (DropFactor).
	Dropout *Dropout
	// Bias, when set, is added to every score after the softcap and
	// ALiBi; an element of −Inf hides its key from the row (Sees).
	Bias *Bias
}

// Bias is an additive bias on the scores (PyTorch SDPA's float
// attn_mask; a boolean mask is a bias of 0 and −Inf), broadcast over
// each of its leading dimensions of size 1: Values is row-major
// [B, H, S, Nk] with B 1 or Params.B, H 1 or Hq and S 1 or Nq.
type Bias struct {
	B, H, S int
	Values  []float64
}

// index is the position in Values of element (b, h, i, j) of a problem
// with Nk keys.
func (x *Bias) index(b, h, i, j, nk int) int {
	if x.B == 1 {
		b = 0
	}
	if x.H == 1 {
		h = 0
	}
	if x.S == 1 {
		i = 0
	}
	return ((b*x.H+h)*x.S+i)*nk + j
}

// bias is the bias of (b, h, i, j), 0 without Bias.
func (p Params) bias(b, h, i, j int) float64 {
	if p.Bias == nil {
		return 0
	}
	return p.Bias.Values[p.Bias.index(b, h, i, j, p.Nk)]
}

// Window bounds the keys a query sees around its diagonal; −1 is
// unbounded.
type Window struct{ Left, Right int }

// Validate reports whether p describes a well-formed problem. Errors wrap
// ErrShape.
func (p Params) Validate() error {
	dims := []struct {
		name string
		v    int
	}{{"B", p.B}, {"Hq", p.Hq}, {"Hkv", p.Hkv}, {"Nq", p.Nq}, {"Nk", p.Nk}, {"D", p.D}, {"Dv", p.Dv}}
	for _, d := range dims {
		if d.v <= 0 {
			return fmt.Errorf("%w: %s = %d, must be positive", ErrShape, d.name, d.v)
		}
	}
	if p.Hq%p.Hkv != 0 {
		return fmt.Errorf("%w: Hq = %d is not a multiple of Hkv = %d", ErrShape, p.Hq, p.Hkv)
	}
	if math.IsNaN(p.Scale) || math.IsInf(p.Scale, 0) {
		return fmt.Errorf("%w: Scale = %v, must be finite", ErrShape, p.Scale)
	}
	if err := p.validateExt(); err != nil {
		return err
	}
	for _, t := range []struct {
		name string
		dims []int
	}{
		{"Q", []int{p.B, p.Nq, p.Hq, p.D}},
		{"K", []int{p.B, p.Nk, p.Hkv, p.D}},
		{"V", []int{p.B, p.Nk, p.Hkv, p.Dv}},
		{"O", []int{p.B, p.Nq, p.Hq, p.Dv}},
		{"S", []int{p.Nq, p.Nk}},
	} {
		if _, ok := product(t.dims...); !ok {
			return fmt.Errorf("%w: %s element count %v overflows int", ErrShape, t.name, t.dims)
		}
	}
	return nil
}

// product returns the product of positive ints and whether it fits in an int.
func product(xs ...int) (int, bool) {
	n := 1
	for _, x := range xs {
		if x != 0 && n > math.MaxInt/x {
			return 0, false
		}
		n *= x
	}
	return n, true
}

// EffectiveScale returns the scale actually applied: Scale, or 1/√D when
// Scale is 0.
func (p Params) EffectiveScale() float64 {
	if p.Scale == 0 {
		return 1 / math.Sqrt(float64(p.D))
	}
	return p.Scale
}

// validateExt checks the window, softcap, slopes and key counts.
func (p Params) validateExt() error {
	if w := p.Window; w != nil && (w.Left < -1 || w.Right < -1) {
		return fmt.Errorf("%w: Window = %+v, sides must be ≥ −1", ErrShape, *w)
	}
	if c := p.Softcap; c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
		return fmt.Errorf("%w: Softcap = %v, must be finite and ≥ 0", ErrShape, c)
	}
	if n := len(p.ALiBi); p.ALiBi != nil && n != p.Hq && n != p.B*p.Hq {
		return fmt.Errorf("%w: %d ALiBi slopes, want Hq = %d or B·Hq = %d", ErrShape, n, p.Hq, p.B*p.Hq)
	}
	for _, x := range p.ALiBi {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("%w: ALiBi slope %v, must be finite", ErrShape, x)
		}
	}
	if err := p.Dropout.validate(); err != nil {
		return err
	}
	if x := p.Bias; x != nil {
		if (x.B != 1 && x.B != p.B) || (x.H != 1 && x.H != p.Hq) || (x.S != 1 && x.S != p.Nq) {
			return fmt.Errorf("%w: Bias is [%d, %d, %d, ·], want [1 or B = %d, 1 or Hq = %d, 1 or Nq = %d, Nk]",
				ErrShape, x.B, x.H, x.S, p.B, p.Hq, p.Nq)
		}
		if want := x.B * x.H * x.S * p.Nk; len(x.Values) != want {
			return fmt.Errorf("%w: len(Bias.Values) = %d, want %d", ErrShape, len(x.Values), want)
		}
		for _, v := range x.Values {
			if math.IsNaN(v) || math.IsInf(v, 1) {
				return fmt.Errorf("%w: a Bias value is %v (want finite or −Inf)", ErrShape, v)
			}
		}
	}
	if p.SeqUsedK != nil && len(p.SeqUsedK) != p.B {
		return fmt.Errorf("%w: %d key counts, want B = %d", ErrShape, len(p.SeqUsedK), p.B)
	}
	for b, n := range p.SeqUsedK {
		if n < 0 || n > p.Nk {
			return fmt.Errorf("%w: SeqUsedK[%d] = %d, want 0 … Nk = %d", ErrShape, b, n, p.Nk)
		}
	}
	return nil
}

// Keys is sequence b's key count: SeqUsedK[b], or Nk.
func (p Params) Keys(b int) int {
	if p.SeqUsedK != nil {
		return p.SeqUsedK[b]
	}
	return p.Nk
}

// Diag is the key on query i's diagonal in sequence b.
func (p Params) Diag(b, i int) int {
	if p.BottomRight {
		return i + p.Keys(b) - p.Nq
	}
	return i
}

// Visible reports whether query i of sequence b may attend to key j: j
// below the sequence's key count, inside the window, and not after the
// diagonal when causal.
func (p Params) Visible(b, i, j int) bool {
	if j >= p.Keys(b) {
		return false
	}
	left, right := -1, -1
	if p.Window != nil {
		left, right = p.Window.Left, p.Window.Right
	}
	if p.Causal {
		right = 0
	}
	d := p.Diag(b, i)
	return (left < 0 || j >= d-left) && (right < 0 || j <= d+right)
}

// Sees reports whether query i of sequence b, head h, attends to key j:
// Visible, and its Bias element (if any) not −Inf.
func (p Params) Sees(b, h, i, j int) bool {
	return p.Visible(b, i, j) && !math.IsInf(p.bias(b, h, i, j), -1)
}

// Score is the score of query i and key j of sequence b, head h, given
// their scaled product s: the softcap, then ALiBi, then the bias.
func (p Params) Score(b, h, i, j int, s float64) float64 {
	if p.Softcap > 0 {
		s = p.Softcap * math.Tanh(s/p.Softcap)
	}
	if p.ALiBi != nil {
		s -= p.slope(b, h) * math.Abs(float64(p.Diag(b, i)-j))
	}
	if p.Bias != nil {
		s += p.bias(b, h, i, j)
	}
	return s
}

// scoreGrad is dScore/ds at scaled product s: the softcap's
// 1 − tanh²(s/c), else 1.
func (p Params) scoreGrad(s float64) float64 {
	if p.Softcap > 0 {
		t := math.Tanh(s / p.Softcap)
		return 1 - t*t
	}
	return 1
}

func (p Params) slope(b, h int) float64 {
	if len(p.ALiBi) == p.Hq {
		return p.ALiBi[h]
	}
	return p.ALiBi[b*p.Hq+h]
}

// Lengths returns the required slice lengths of Q, K, V, O (= dO) and LSE.
// Only meaningful for valid p.
func (p Params) Lengths() (q, k, v, o, lse int) {
	return p.B * p.Nq * p.Hq * p.D, p.B * p.Nk * p.Hkv * p.D, p.B * p.Nk * p.Hkv * p.Dv,
		p.B * p.Nq * p.Hq * p.Dv, p.B * p.Hq * p.Nq
}

func checkLen(name string, s []float64, want int) error {
	if len(s) != want {
		return fmt.Errorf("%w: len(%s) = %d, want %d", ErrShape, name, len(s), want)
	}
	return nil
}

// checkInputs validates p and the lengths of q, k, v, and of do when needDO
// is set.
func checkInputs(p Params, q, k, v, do []float64, needDO bool) error {
	if err := p.Validate(); err != nil {
		return err
	}
	lq, lk, lv, lo, _ := p.Lengths()
	if err := checkLen("q", q, lq); err != nil {
		return err
	}
	if err := checkLen("k", k, lk); err != nil {
		return err
	}
	if err := checkLen("v", v, lv); err != nil {
		return err
	}
	if needDO {
		if err := checkLen("do", do, lo); err != nil {
			return err
		}
	}
	return nil
}

// gather copies the [n, x] slice of head h in batch b of a contiguous
// [B, n, H, x] tensor into a new n×x matrix.
func gather(t []float64, b, n, nh, h, x int) *mat.Dense {
	m := mat.NewDense(n, x, nil)
	for i := 0; i < n; i++ {
		off := ((b*n+i)*nh + h) * x
		m.SetRow(i, t[off:off+x])
	}
	return m
}

// scatterAdd adds the n×x matrix m into head h of batch b of a contiguous
// [B, n, H, x] tensor.
func scatterAdd(t []float64, m *mat.Dense, b, n, nh, h, x int) {
	for i := 0; i < n; i++ {
		off := ((b*n+i)*nh + h) * x
		for c := 0; c < x; c++ {
			t[off+c] += m.At(i, c)
		}
	}
}

// dropped is P ∘ Z, the probabilities of (b, h) times their dropout
// factors: pm itself without dropout.
func (p Params) dropped(pm *mat.Dense, b, h int) *mat.Dense {
	if p.Dropout == nil || p.Dropout.Threshold() == 0 {
		return pm
	}
	zm := mat.DenseCopyOf(pm)
	for i := range p.Nq {
		for j := range p.Nk {
			if f := p.DropFactor(b, h, i, j); f != 1 {
				zm.Set(i, j, zm.At(i, j)*f)
			}
		}
	}
	return zm
}

// kvHead returns the kv head read by query head h.
func (p Params) kvHead(h int) int { return h / (p.Hq / p.Hkv) }

// probs returns P (Nq×Nk) and the LSE row vector for (b, h). q and k have
// already been validated.
func probs(p Params, q, k []float64, b, h int) (*mat.Dense, []float64) {
	qm := gather(q, b, p.Nq, p.Hq, h, p.D)
	km := gather(k, b, p.Nk, p.Hkv, p.kvHead(h), p.D)
	s := mat.NewDense(p.Nq, p.Nk, nil)
	s.Mul(qm, km.T())
	s.Scale(p.EffectiveScale(), s)
	for i := range p.Nq {
		for j := range p.Nk {
			if p.Sees(b, h, i, j) {
				s.Set(i, j, p.Score(b, h, i, j, s.At(i, j)))
			}
		}
	}

	lse := make([]float64, p.Nq)
	pm := mat.NewDense(p.Nq, p.Nk, nil) // masked entries stay exactly 0
	for i := 0; i < p.Nq; i++ {
		m := math.Inf(-1)
		for j := 0; j < p.Nk; j++ {
			if p.Sees(b, h, i, j) {
				m = math.Max(m, s.At(i, j))
			}
		}
		if math.IsInf(m, -1) { // no visible key: P row 0, LSE −Inf
			lse[i] = m
			continue
		}
		sum := 0.0
		for j := 0; j < p.Nk; j++ {
			if p.Sees(b, h, i, j) {
				e := math.Exp(s.At(i, j) - m)
				pm.Set(i, j, e)
				sum += e
			}
		}
		for j := 0; j < p.Nk; j++ {
			pm.Set(i, j, pm.At(i, j)/sum)
		}
		lse[i] = m + math.Log(sum)
	}
	return pm, lse
}

// Probabilities returns the Nq×Nk probability matrix P = softmax(scale·QKᵀ
// + mask) of batch b and query head h. It returns nil when p, the slice
// lengths, b or h are invalid.
func Probabilities(p Params, q, k []float64, b, h int) *mat.Dense {
	if p.Validate() != nil || b < 0 || b >= p.B || h < 0 || h >= p.Hq {
		return nil
	}
	lq, lk, _, _, _ := p.Lengths()
	if len(q) != lq || len(k) != lk {
		return nil
	}
	if !allFinite(q, k) {
		d := newDirect(p, q, k, nil, b, h)
		pm := mat.NewDense(p.Nq, p.Nk, nil)
		for i, row := range d.pm {
			pm.SetRow(i, row)
		}
		return pm
	}
	pm, _ := probs(p, q, k, b, h)
	return pm
}

// Forward computes O [B,Nq,Hq,Dv] and LSE [B,Hq,Nq]. Errors wrap ErrShape.
func Forward(p Params, q, k, v []float64) (o, lse []float64, err error) {
	return ForwardContext(context.Background(), p, q, k, v)
}

// ForwardContext is Forward that stops once ctx is done, between (batch,
// head) pairs, and returns ctx's error.
func ForwardContext(ctx context.Context, p Params, q, k, v []float64) (o, lse []float64, err error) {
	if err := checkInputs(p, q, k, v, nil, false); err != nil {
		return nil, nil, err
	}
	_, _, _, lo, ll := p.Lengths()
	o = make([]float64, lo)
	lse = make([]float64, ll)
	finite := allFinite(q, k, v)
	om := mat.NewDense(p.Nq, p.Dv, nil)
	for b := 0; b < p.B; b++ {
		for h := 0; h < p.Hq; h++ {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			if !finite {
				newDirect(p, q, k, v, b, h).forward(o, lse)
				continue
			}
			pm, l := probs(p, q, k, b, h)
			vm := gather(v, b, p.Nk, p.Hkv, p.kvHead(h), p.Dv)
			om.Mul(p.dropped(pm, b, h), vm)
			scatterAdd(o, om, b, p.Nq, p.Hq, h, p.Dv)
			copy(lse[(b*p.Hq+h)*p.Nq:], l)
		}
	}
	return o, lse, nil
}

// Outputs is Forward (o, lse) or, when backward, Backward (dq, dk, dv) as
// one list: the shape of a verifier that checks either pass, such as the
// tuner's (attention.TuneOptions.Reference).
func Outputs(p Params, q, k, v, do []float64, backward bool) ([][]float64, error) {
	if backward {
		dq, dk, dv, err := Backward(p, q, k, v, do)
		return [][]float64{dq, dk, dv}, err
	}
	o, lse, err := Forward(p, q, k, v)
	return [][]float64{o, lse}, err
}

// Backward computes dQ, dK and dV of the scalar loss whose gradient with
// respect to O is do. Errors wrap ErrShape.
func Backward(p Params, q, k, v, do []float64) (dq, dk, dv []float64, err error) {
	return BackwardContext(context.Background(), p, q, k, v, do)
}

// BackwardContext is Backward that stops once ctx is done, between
// (batch, head) pairs, and returns ctx's error.
func BackwardContext(ctx context.Context, p Params, q, k, v, do []float64) (dq, dk, dv []float64, err error) {
	dq, dk, dv, _, err = backward(ctx, p, q, k, v, do, false)
	return dq, dk, dv, err
}

// BiasGrad computes dBias, the gradient with respect to p.Bias of the
// scalar loss whose gradient with respect to O is do: row-major
// [B, H, S, Nk] in the bias's shape, each element the sum of dS =
// ∂loss/∂score over the (b, h, i) its broadcast dimensions fold
// together (0 where the bias or the mask hides the key). Errors wrap
// ErrShape (also when p has no Bias).
func BiasGrad(p Params, q, k, v, do []float64) ([]float64, error) {
	if p.Bias == nil {
		return nil, fmt.Errorf("%w: BiasGrad without a Bias", ErrShape)
	}
	_, _, _, db, err := backward(context.Background(), p, q, k, v, do, true)
	return db, err
}

// backward computes dQ, dK, dV and, with withBias, dBias.
func backward(ctx context.Context, p Params, q, k, v, do []float64, withBias bool) (dq, dk, dv, db []float64, err error) {
	if err := checkInputs(p, q, k, v, do, true); err != nil {
		return nil, nil, nil, nil, err
	}
	lq, lk, lv, _, _ := p.Lengths()
	dq = make([]float64, lq)
	dk = make([]float64, lk)
	dv = make([]float64, lv)
	if withBias {
		db = make([]float64, len(p.Bias.Values))
	}
	finite := allFinite(q, k, v, do)
	scale := p.EffectiveScale()

	var dvm, dpm, dqm, dkm mat.Dense
	for b := 0; b < p.B; b++ {
		for h := 0; h < p.Hq; h++ {
			if err := ctx.Err(); err != nil {
				return nil, nil, nil, nil, err
			}
			if !finite {
				newDirect(p, q, k, v, b, h).backward(do, dq, dk, dv, db)
				continue
			}
			kh := p.kvHead(h)
			pm, _ := probs(p, q, k, b, h)
			qm := gather(q, b, p.Nq, p.Hq, h, p.D)
			km := gather(k, b, p.Nk, p.Hkv, kh, p.D)
			vm := gather(v, b, p.Nk, p.Hkv, kh, p.Dv)
			dom := gather(do, b, p.Nq, p.Hq, h, p.Dv)

			// dV = (P ∘ Z)ᵀ dO, Z the dropout factors (1 without dropout).
			zm := p.dropped(pm, b, h)
			dvm.Reset()
			dvm.Mul(zm.T(), dom)
			scatterAdd(dv, &dvm, b, p.Nk, p.Hkv, kh, p.Dv)

			// dP = dO Vᵀ;  dS = P ∘ (Z ∘ dP − rowsum(dP ∘ P ∘ Z)), stored in
			// dpm.
			dpm.Reset()
			dpm.Mul(dom, vm.T())
			var sm mat.Dense // scaled products, for the softcap's derivative
			if p.Softcap > 0 {
				sm.Mul(qm, km.T())
				sm.Scale(scale, &sm)
			}
			for i := 0; i < p.Nq; i++ {
				di := 0.0
				for j := 0; j < p.Nk; j++ {
					di += dpm.At(i, j) * zm.At(i, j)
				}
				for j := 0; j < p.Nk; j++ {
					ds := pm.At(i, j) * (dpm.At(i, j)*p.DropFactor(b, h, i, j) - di)
					if db != nil {
						db[p.Bias.index(b, h, i, j, p.Nk)] += ds
					}
					if p.Softcap > 0 {
						ds *= p.scoreGrad(sm.At(i, j))
					}
					dpm.Set(i, j, ds)
				}
			}

			// dQ = scale·dS K;  dK = scale·dSᵀ Q
			dqm.Reset()
			dqm.Mul(&dpm, km)
			dqm.Scale(scale, &dqm)
			scatterAdd(dq, &dqm, b, p.Nq, p.Hq, h, p.D)

			dkm.Reset()
			dkm.Mul(dpm.T(), qm)
			dkm.Scale(scale, &dkm)
			scatterAdd(dk, &dkm, b, p.Nk, p.Hkv, kh, p.D)
		}
	}
	return dq, dk, dv, db, nil
}
