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
		func(p *Params) { p.Dropout = &Dropout{P: 1} },
		func(p *Params) { p.Dropout = &Dropout{P: -0.1} },
		func(p *Params) { p.Dropout = &Dropout{P: math.NaN()} },
	} {
		p := base
		mod(&p)
		assert.ErrorIs(t, p.Validate(), ErrShape, "%+v", p)
	}
}

// TestDropout checks the forward's O against O_i = Σ_j P_ij·Z_ij·V_j
// written out with DropFactor, the keep rule against the Philox
// known-answer vector through Keep's definition, and that the non-finite
// (element by element) path agrees with the matrix path.
func TestDropout(t *testing.T) {
	// Keep's first element is the low byte of word 0 of the block of
	// counter (0, 0, 0, 0) and key (0, 0): 0xd5 (the known answer
	// 6627e8d5), kept iff 0xd5 ≥ Threshold; its second is 0xe8 and its
	// sixth byte 1 of word 1 (e169c58d), 0xc5.
	for _, c := range []struct {
		p    float64
		j    int
		keep bool
	}{{0xd5 / 256.0, 0, true}, {0xd6 / 256.0, 0, false}, {0xe8 / 256.0, 1, true}, {0xe9 / 256.0, 1, false},
		{0xc5 / 256.0, 5, true}, {0xc6 / 256.0, 5, false}} {
		d := &Dropout{P: c.p}
		assert.Equal(t, c.keep, d.Keep(1, 0, 0, 0, c.j), "P %v j %d", c.p, c.j)
	}
	p := Params{B: 2, Hq: 2, Hkv: 1, Nq: 5, Nk: 19, D: 3, Dv: 2, Causal: true, BottomRight: true,
		Dropout: &Dropout{P: 0.4, Seed: 0xdeadbeef_12345678, Offset: 3}}
	q, k, v, _ := randInputs(t, p, 11)
	o, _, err := Forward(p, q, k, v)
	require.NoError(t, err)
	dropped, kept := 0, 0
	for b := range p.B {
		for h := range p.Hq {
			pm := Probabilities(p, q, k, b, h)
			for i := range p.Nq {
				for c := range p.Dv {
					want := 0.0
					for j := range p.Nk {
						z := p.DropFactor(b, h, i, j)
						switch z {
						case 0:
							dropped++
						case p.Dropout.Scale():
							kept++
						default:
							t.Fatalf("DropFactor = %v, want 0 or %v", z, p.Dropout.Scale())
						}
						want += pm.At(i, j) * z * v[at(b, j, 0, p.Nk, p.Hkv, p.Dv)+c]
					}
					assert.InDelta(t, want, o[at(b, i, h, p.Nq, p.Hq, p.Dv)+c], 1e-12)
				}
			}
		}
	}
	require.Greater(t, dropped, 0)
	require.Greater(t, kept, dropped)

	// The direct path (taken for non-finite inputs) on finite inputs.
	dq, dk, dv, err := Backward(p, q, k, v, o)
	require.NoError(t, err)
	do := o
	od := make([]float64, len(o))
	lse := make([]float64, p.B*p.Hq*p.Nq)
	dqd, dkd, dvd := make([]float64, len(dq)), make([]float64, len(dk)), make([]float64, len(dv))
	for b := range p.B {
		for h := range p.Hq {
			d := newDirect(p, q, k, v, b, h)
			d.forward(od, lse)
			d.backward(do, dqd, dkd, dvd, nil)
		}
	}
	for _, c := range [][2][]float64{{o, od}, {dq, dqd}, {dk, dkd}, {dv, dvd}} {
		assert.InDeltaSlice(t, c[0], c[1], 1e-12)
	}
}
