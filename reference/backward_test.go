package reference

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/floats"
)

// loss is L = Σ O∘G.
func loss(t *testing.T, p Params, q, k, v, g []float64) float64 {
	o, _, err := Forward(p, q, k, v)
	require.NoError(t, err)
	return floats.Dot(o, g)
}

// numGrad returns the central-difference gradient of loss with respect to
// x, which aliases one of q, k, v.
func numGrad(t *testing.T, p Params, q, k, v, g, x []float64, step float64) []float64 {
	grad := make([]float64, len(x))
	for i := range x {
		orig := x[i]
		x[i] = orig + step
		lp := loss(t, p, q, k, v, g)
		x[i] = orig - step
		lm := loss(t, p, q, k, v, g)
		x[i] = orig
		grad[i] = (lp - lm) / (2 * step)
	}
	return grad
}

func TestBackwardFiniteDifferences(t *testing.T) {
	const step, tol = 1e-6, 1e-6
	cases := []Params{
		{B: 1, Hq: 1, Hkv: 1, Nq: 4, Nk: 4, D: 2, Dv: 2},
		{B: 2, Hq: 2, Hkv: 2, Nq: 5, Nk: 5, D: 3, Dv: 3, Causal: true},
		{B: 1, Hq: 4, Hkv: 2, Nq: 3, Nk: 6, D: 4, Dv: 2},                                              // GQA, Nq < Nk, Dv < D
		{B: 1, Hq: 4, Hkv: 2, Nq: 3, Nk: 6, D: 2, Dv: 5, Causal: true},                                // top-left, Nq < Nk, Dv > D
		{B: 1, Hq: 4, Hkv: 2, Nq: 3, Nk: 6, D: 3, Dv: 4, Causal: true, BottomRight: true},             // bottom-right, Nq < Nk
		{B: 2, Hq: 4, Hkv: 2, Nq: 6, Nk: 3, D: 3, Dv: 2, Causal: true},                                // top-left, Nq > Nk
		{B: 2, Hq: 4, Hkv: 2, Nq: 6, Nk: 3, D: 2, Dv: 3, Causal: true, BottomRight: true},             // bottom-right, Nq > Nk: empty rows
		{B: 1, Hq: 4, Hkv: 1, Nq: 5, Nk: 4, D: 3, Dv: 2, Scale: 0.9, Causal: true, BottomRight: true}, // MQA
		{B: 1, Hq: 4, Hkv: 2, Nq: 2, Nk: 7, D: 3, Dv: 3, Scale: 1.3},
		// Window, softcap, ALiBi, key counts.
		{B: 1, Hq: 2, Hkv: 1, Nq: 6, Nk: 6, D: 3, Dv: 2, Window: &Window{Left: 2, Right: 1}},
		{B: 2, Hq: 2, Hkv: 2, Nq: 4, Nk: 7, D: 2, Dv: 3, Causal: true, BottomRight: true, Window: &Window{Left: 3, Right: -1}},
		{B: 1, Hq: 2, Hkv: 2, Nq: 5, Nk: 5, D: 3, Dv: 3, Scale: 2.5, Softcap: 1.5},
		{B: 2, Hq: 2, Hkv: 1, Nq: 4, Nk: 6, D: 3, Dv: 2, Causal: true, ALiBi: []float64{0.5, 0.25}},
		{B: 2, Hq: 2, Hkv: 2, Nq: 4, Nk: 6, D: 2, Dv: 2, BottomRight: true, ALiBi: []float64{0.5, 0.25, 1, 0.125}, Softcap: 2},
		{B: 2, Hq: 2, Hkv: 1, Nq: 5, Nk: 6, D: 3, Dv: 2, Causal: true, BottomRight: true, SeqUsedK: []int{6, 3}, Window: &Window{Left: 2, Right: 0}},
		// Dropout (a fixed mask: the loss is smooth in q, k, v).
		{B: 2, Hq: 2, Hkv: 1, Nq: 6, Nk: 9, D: 3, Dv: 2, Dropout: &Dropout{P: 0.3, Seed: 5, Offset: 2}},
		{B: 1, Hq: 2, Hkv: 2, Nq: 7, Nk: 7, D: 2, Dv: 3, Causal: true, Softcap: 2, Dropout: &Dropout{P: 0.5, Seed: 1 << 40}},
	}
	for ci, p := range cases {
		t.Run(fmt.Sprintf("%d_Hq%d_Hkv%d_Nq%d_Nk%d_D%d_Dv%d_causal%v_br%v_win%v_cap%v_alibi%v_used%v_drop%v", ci, p.Hq, p.Hkv, p.Nq, p.Nk, p.D, p.Dv, p.Causal, p.BottomRight,
			p.Window != nil, p.Softcap, p.ALiBi != nil, p.SeqUsedK, p.Dropout != nil), func(t *testing.T) {
			q, k, v, g := randInputs(t, p, uint64(100+ci))
			dq, dk, dv, err := Backward(p, q, k, v, g)
			require.NoError(t, err)
			for _, c := range []struct {
				name    string
				x, grad []float64
			}{{"dQ", q, dq}, {"dK", k, dk}, {"dV", v, dv}} {
				want := numGrad(t, p, q, k, v, g, c.x, step)
				require.Greater(t, floats.Norm(want, 2), 1e-3, "%s: degenerate test", c.name)
				st := Compare(c.grad, want)
				assert.Less(t, st.RelL2, tol, "%s: %+v", c.name, st)
				assert.Less(t, st.MaxAbs, tol, "%s: %+v", c.name, st)
				assert.Zero(t, st.NaN+st.Inf, c.name)
			}
		})
	}
}

// dV = Pᵀ dO written out per element for a single head, as a second check
// independent of the finite differences.
func TestBackwardDVExplicit(t *testing.T) {
	p := Params{B: 1, Hq: 1, Hkv: 1, Nq: 3, Nk: 4, D: 2, Dv: 3, Causal: true, BottomRight: true}
	q, k, v, do := randInputs(t, p, 11)
	_, _, dv, err := Backward(p, q, k, v, do)
	require.NoError(t, err)
	pm := Probabilities(p, q, k, 0, 0)
	want := make([]float64, len(dv))
	for j := 0; j < p.Nk; j++ {
		for c := 0; c < p.Dv; c++ {
			for i := 0; i < p.Nq; i++ {
				want[j*p.Dv+c] += pm.At(i, j) * do[i*p.Dv+c]
			}
		}
	}
	assert.Less(t, MaxAbs(dv, want), 1e-15)
	assert.False(t, math.IsNaN(RelL2(dv, want)))
}
