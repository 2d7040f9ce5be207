package reference

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The element-by-element evaluation of non-finite inputs agrees with the
// gonum path on finite ones.
func TestDirectMatchesProducts(t *testing.T) {
	p := Params{B: 2, Hq: 4, Hkv: 2, Nq: 9, Nk: 11, D: 5, Dv: 3, Causal: true, BottomRight: true}
	q, k, v, do := randInputs(t, p, 3)
	o, lse, err := Forward(p, q, k, v)
	require.NoError(t, err)
	dq, dk, dv, err := Backward(p, q, k, v, do)
	require.NoError(t, err)

	_, _, lv, lo, ll := p.Lengths()
	o2, lse2 := make([]float64, lo), make([]float64, ll)
	dq2, dk2, dv2 := make([]float64, len(q)), make([]float64, len(k)), make([]float64, lv)
	for b := range p.B {
		for h := range p.Hq {
			d := newDirect(p, q, k, v, b, h)
			d.forward(o2, lse2)
			d.backward(do, dq2, dk2, dv2, nil)
		}
	}
	for _, c := range []struct {
		name      string
		got, want []float64
	}{{"o", o2, o}, {"dq", dq2, dq}, {"dk", dk2, dk}, {"dv", dv2, dv}} {
		assert.Less(t, RelL2(c.got, c.want), 1e-13, c.name)
	}
	assert.Less(t, RelL2(lse2, lse), 1e-15, "lse")
}

func TestSpecialValues(t *testing.T) {
	p := Params{B: 1, Hq: 1, Hkv: 1, Nq: 4, Nk: 5, D: 2, Dv: 2}
	q, k, v, do := randInputs(t, p, 5)
	for j := range p.Nk {
		k[j*p.D] = math.Abs(k[j*p.D]) + 0.5 // first feature positive
	}

	// Row 1: q = (−Inf, 0) makes every score −Inf: an empty row.
	q[2], q[3] = math.Inf(-1), 0
	do[2], do[3] = math.Inf(1), math.Inf(1) // never read
	o, lse, err := Forward(p, q, k, v)
	require.NoError(t, err)
	assert.Equal(t, []float64{0, 0}, o[2:4])
	assert.True(t, math.IsInf(lse[1], -1))
	dq, dk, dv, err := Backward(p, q, k, v, do)
	require.NoError(t, err)
	assert.Equal(t, []float64{0, 0}, dq[2:4])
	for _, g := range [][]float64{dq, dk, dv} {
		for _, x := range g {
			assert.False(t, math.IsNaN(x) || math.IsInf(x, 0), "gradient %v", g)
		}
	}

	// A NaN value behind a probability that underflows to 0 in float64
	// still reaches O: 0·NaN = NaN.
	q, k, v, _ = randInputs(t, p, 6)
	k[0], k[1] = -1e300, 0 // key 0 scores −1e300/√2 for row 0 (q = (1, ·)):
	q[0] = 1               // exp of that is exactly 0
	v[0] = math.NaN()
	o, _, err = Forward(p, q, k, v)
	require.NoError(t, err)
	assert.True(t, math.IsNaN(o[0]), "o[0][0] = %v, want NaN", o[0])
	assert.False(t, math.IsNaN(o[1]), "o[0][1] = %v, want finite", o[1])
}
