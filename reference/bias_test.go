package reference

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// biasParams are problems with a bias broadcast every way, −Inf elements
// included (a row of them is empty), alone and with the other options.
func biasParams(r *rand.Rand) []Params {
	bias := func(b, h, s, nk int, holes float64) *Bias {
		x := &Bias{B: b, H: h, S: s, Values: randSlice(r, b*h*s*nk)}
		for i := range x.Values {
			if r.Float64() < holes {
				x.Values[i] = math.Inf(-1)
			}
		}
		return x
	}
	return []Params{
		{B: 2, Hq: 2, Hkv: 1, Nq: 5, Nk: 7, D: 3, Dv: 2, Bias: bias(2, 2, 5, 7, 0)},
		{B: 2, Hq: 2, Hkv: 1, Nq: 5, Nk: 7, D: 3, Dv: 2, Bias: bias(1, 2, 5, 7, 0.3)},
		{B: 2, Hq: 4, Hkv: 2, Nq: 4, Nk: 6, D: 2, Dv: 3, Bias: bias(2, 1, 4, 6, 0.2), Causal: true, BottomRight: true},
		{B: 3, Hq: 2, Hkv: 2, Nq: 3, Nk: 5, D: 2, Dv: 2, Bias: bias(3, 1, 1, 5, 0.4), Softcap: 0.7, ALiBi: []float64{0.5, 2}},
		{B: 1, Hq: 1, Hkv: 1, Nq: 6, Nk: 6, D: 2, Dv: 2, Bias: bias(1, 1, 1, 6, 0), Window: &Window{Left: 1, Right: 1},
			Dropout: &Dropout{P: 0.3, Seed: 5}},
	}
}

// TestBiasProbabilities checks P with a bias against the softmax of
// score + bias written out per element, over the keys the mask shows and
// the bias does not hide (−Inf), with an empty row where it hides all.
func TestBiasProbabilities(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, p := range biasParams(r) {
		q, k, _, _ := randInputs(t, p, 11)
		scale := p.EffectiveScale()
		for b := range p.B {
			for h := range p.Hq {
				pm := Probabilities(p, q, k, b, h)
				require.NotNil(t, pm)
				for i := range p.Nq {
					want := make([]float64, p.Nk)
					sum := 0.0
					for j := range p.Nk {
						bb, hh, ii := b%p.Bias.B, h%p.Bias.H, i%p.Bias.S
						x := p.Bias.Values[((bb*p.Bias.H+hh)*p.Bias.S+ii)*p.Nk+j]
						if !p.Visible(b, i, j) || math.IsInf(x, -1) {
							continue
						}
						s := 0.0
						for c := range p.D {
							s += q[at(b, i, h, p.Nq, p.Hq, p.D)+c] * k[at(b, j, h/(p.Hq/p.Hkv), p.Nk, p.Hkv, p.D)+c]
						}
						want[j] = math.Exp(p.Score(b, h, i, j, scale*s) - p.bias(b, h, i, j) + x)
						sum += want[j]
					}
					for j := range want {
						if sum > 0 {
							want[j] /= sum
						}
						assert.InDelta(t, want[j], pm.At(i, j), 1e-12, "b%d h%d i%d j%d", b, h, i, j)
					}
				}
			}
		}
	}
}

// TestBiasGrad checks dBias against central finite differences of the
// loss Σ dO∘O in each finite bias element (a broadcast element moves
// every score it is added to, so its difference is the sum the gradient
// folds), 0 at −Inf elements, and the element-by-element path (taken
// for non-finite inputs) against the matrix path.
func TestBiasGrad(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n, p := range biasParams(r) {
		q, k, v, do := randInputs(t, p, uint64(20+n))
		db, err := BiasGrad(p, q, k, v, do)
		require.NoError(t, err)
		require.Len(t, db, len(p.Bias.Values))
		loss := func(pp Params) float64 {
			o, _, err := Forward(pp, q, k, v)
			require.NoError(t, err)
			s := 0.0
			for i := range o {
				s += o[i] * do[i]
			}
			return s
		}
		const h = 1e-6
		for i, x := range p.Bias.Values {
			if math.IsInf(x, -1) {
				assert.Zero(t, db[i], "case %d: dBias at a −Inf element", n)
				continue
			}
			pp := p
			vals := append([]float64(nil), p.Bias.Values...)
			pp.Bias = &Bias{B: p.Bias.B, H: p.Bias.H, S: p.Bias.S, Values: vals}
			vals[i] = x + h
			up := loss(pp)
			vals[i] = x - h
			down := loss(pp)
			assert.InDelta(t, (up-down)/(2*h), db[i], 1e-6, "case %d element %d", n, i)
		}

		dq, dk, dv, err := Backward(p, q, k, v, do)
		require.NoError(t, err)
		dqd, dkd, dvd, dbd := make([]float64, len(dq)), make([]float64, len(dk)), make([]float64, len(dv)), make([]float64, len(db))
		for b := range p.B {
			for hh := range p.Hq {
				newDirect(p, q, k, v, b, hh).backward(do, dqd, dkd, dvd, dbd)
			}
		}
		for _, c := range [][2][]float64{{dq, dqd}, {dk, dkd}, {dv, dvd}, {db, dbd}} {
			assert.InDeltaSlice(t, c[0], c[1], 1e-12)
		}
	}
}

func TestBiasValidate(t *testing.T) {
	base := Params{B: 2, Hq: 2, Hkv: 1, Nq: 3, Nk: 4, D: 2, Dv: 2}
	for _, mod := range []func(*Params){
		func(p *Params) { p.Bias = &Bias{B: 2, H: 2, S: 3, Values: make([]float64, 47)} },
		func(p *Params) { p.Bias = &Bias{B: 3, H: 2, S: 3, Values: make([]float64, 72)} },
		func(p *Params) { p.Bias = &Bias{B: 1, H: 2, S: 2, Values: make([]float64, 16)} },
		func(p *Params) { p.Bias = &Bias{B: 1, H: 1, S: 1, Values: []float64{0, math.NaN(), 0, 0}} },
		func(p *Params) { p.Bias = &Bias{B: 1, H: 1, S: 1, Values: []float64{0, math.Inf(1), 0, 0}} },
	} {
		p := base
		mod(&p)
		assert.ErrorIs(t, p.Validate(), ErrShape)
	}
	_, err := BiasGrad(base, make([]float64, 24), make([]float64, 16), make([]float64, 16), make([]float64, 24))
	assert.ErrorIs(t, err, ErrShape)
}
