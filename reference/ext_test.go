package reference

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExtProbabilities checks P of the window, key-count, softcap and
// ALiBi options against the definitions written out per element: the
// visible keys of (b, i) by their distance to the diagonal, and the
// softmax of c·tanh(s/c) − slope·|diag − j| over them.
func TestExtProbabilities(t *testing.T) {
	for _, p := range []Params{
		{B: 2, Hq: 2, Hkv: 1, Nq: 5, Nk: 7, D: 3, Dv: 2, Window: &Window{Left: 1, Right: 2}},
		{B: 2, Hq: 2, Hkv: 1, Nq: 7, Nk: 5, D: 3, Dv: 2, BottomRight: true, Causal: true, Window: &Window{Left: 2, Right: -1}},
		{B: 2, Hq: 2, Hkv: 2, Nq: 4, Nk: 6, D: 2, Dv: 2, Softcap: 0.7, Scale: 3, ALiBi: []float64{0.5, 2, 0.25, 1}, BottomRight: true},
		{B: 3, Hq: 2, Hkv: 2, Nq: 3, Nk: 6, D: 2, Dv: 2, Causal: true, BottomRight: true, SeqUsedK: []int{0, 6, 2}, ALiBi: []float64{1, 0.5}},
	} {
		q, k, _, _ := randInputs(t, p, 7)
		scale := p.EffectiveScale()
		for b := range p.B {
			n := p.Nk
			if p.SeqUsedK != nil {
				n = p.SeqUsedK[b]
			}
			for h := range p.Hq {
				pm := Probabilities(p, q, k, b, h)
				require.NotNil(t, pm)
				for i := range p.Nq {
					diag := i
					if p.BottomRight {
						diag = i + n - p.Nq
					}
					want := make([]float64, p.Nk)
					sum := 0.0
					for j := range n {
						lo, hi := math.MinInt, math.MaxInt
						if p.Window != nil && p.Window.Left >= 0 {
							lo = diag - p.Window.Left
						}
						if p.Window != nil && p.Window.Right >= 0 {
							hi = diag + p.Window.Right
						}
						if p.Causal {
							hi = diag
						}
						if j < lo || j > hi {
							continue
						}
						s := 0.0
						for c := range p.D {
							s += q[at(b, i, h, p.Nq, p.Hq, p.D)+c] * k[at(b, j, h/(p.Hq/p.Hkv), p.Nk, p.Hkv, p.D)+c]
						}
						s *= scale
						if p.Softcap > 0 {
							s = p.Softcap * math.Tanh(s/p.Softcap)
						}
						if p.ALiBi != nil {
							sl := p.ALiBi[h]
							if len(p.ALiBi) > p.Hq {
								sl = p.ALiBi[b*p.Hq+h]
							}
							s -= sl * math.Abs(float64(diag-j))
						}
						want[j] = math.Exp(s)
						sum += want[j]
					}
					for j := range want {
						if sum > 0 {
							want[j] /= sum
						}
						assert.InDelta(t, want[j], pm.At(i, j), 1e-12, "%+v b%d h%d i%d j%d", p, b, h, i, j)
					}
				}
			}
		}
	}
}

func TestExtValidate(t *testing.T) {
	base := Params{B: 2, Hq: 2, Hkv: 1, Nq: 3, Nk: 4, D: 2, Dv: 2}
	for _, mod := range []func(*Params){
		func(p *Params) { p.Window = &Window{Left: -2, Right: 0} },
		func(p *Params) { p.Softcap = -1 },
		func(p *Params) { p.Softcap = math.Inf(1) },
		func(p *Params) { p.ALiBi = []float64{1, 2, 3} },
		func(p *Params) { p.ALiBi = []float64{1, math.NaN()} },
		func(p *Params) { p.SeqUsedK = []int{1} },
		func(p *Params) { p.SeqUsedK = []int{1, 5} },
		func(p *Params) { p.SeqUsedK = []int{-1, 2} },
	} {
		p := base
		mod(&p)
		assert.ErrorIs(t, p.Validate(), ErrShape, "%+v", p)
	}
}
