package reference

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/floats/scalar"
)

// The seed algorithm's worked example: B=1, H=1, N=4, d=2, scale 1/√2.
var (
	wQ = []float64{1, 0, 0, 1, 1, 1, 0, 0}
	wK = []float64{1, 0, 0, 1, 1, 1, 0.5, 0.5}
	wV = []float64{1, 2, 3, 4, 5, 6, 7, 8}
	wP = Params{B: 1, Hq: 1, Hkv: 1, Nq: 4, Nk: 4, D: 2, Dv: 2, Scale: 1 / math.Sqrt2}
)

// Literals computed once with python3 (plain math module, stable softmax).
var (
	wOFull = []float64{
		3.879038473555136, 4.879038473555136,
		4.1963408239008011, 5.1963408239008011,
		4.2044732440288408, 5.2044732440288408,
		4, 5,
	}
	wLSEFull = []float64{1.8687743642806904, 1.8687743642806904, 2.3221519399202717, 1.3862943611198906}
	wOCausal = []float64{
		1, 2,
		2.3395230986533138, 3.3395230986533138,
		3.5104695304536615, 4.5104695304536619,
		4, 5,
	}
	wLSECausal = []float64{0.70710678118654746, 1.1079403076572498, 2.1004053012281645, 1.3862943611198906}
)

// workedByHand spells out the example: the dot products q_i·k_j are read off
// the rows (q0=[1,0], q1=[0,1], q2=[1,1], q3=[0,0]; k0=[1,0], k1=[0,1],
// k2=[1,1], k3=[.5,.5]), every weight is written as an explicit exp term, and
// O_i = Σ_j w_ij v_j / Σ_j w_ij with v_j = [2j+1, 2j+2]. When causal, query i
// keeps only keys 0..i.
func workedByHand(causal bool) (o, lse []float64) {
	r := math.Sqrt2
	dots := [4][4]float64{
		{1, 0, 1, 0.5},
		{0, 1, 1, 0.5},
		{1, 1, 2, 1},
		{0, 0, 0, 0},
	}
	for i := 0; i < 4; i++ {
		var num0, num1, den float64
		for j := 0; j < 4; j++ {
			if causal && j > i {
				break
			}
			w := math.Exp(dots[i][j] / r)
			num0 += w * float64(2*j+1)
			num1 += w * float64(2*j+2)
			den += w
		}
		o = append(o, num0/den, num1/den)
		lse = append(lse, math.Log(den))
	}
	return o, lse
}

func TestWorkedExample(t *testing.T) {
	// Closed forms of a few entries, independent of both the loop and the
	// package: row 3 (q=0) averages V; causal row 0 copies v0; causal row 1
	// mixes v0, v1 with weights 1 and e^{1/√2}; full rows 0 and 1 have
	// weights (e^a, 1, e^a, e^{a/2}) resp. (1, e^a, e^a, e^{a/2}), a = 1/√2.
	a := 1 / math.Sqrt2
	ea, eh := math.Exp(a), math.Exp(a/2)
	causalRow1 := (1 + 3*ea) / (1 + ea)
	full0 := (ea*1 + 1*3 + ea*5 + eh*7) / (2*ea + 1 + eh)
	full1 := (1*1 + ea*3 + ea*5 + eh*7) / (2*ea + 1 + eh)
	require.True(t, scalar.EqualWithinAbsOrRel(full0, wOFull[0], 1e-14, 1e-14))
	require.True(t, scalar.EqualWithinAbsOrRel(full1, wOFull[2], 1e-14, 1e-14))
	require.True(t, scalar.EqualWithinAbsOrRel(causalRow1, wOCausal[2], 1e-14, 1e-14))
	require.True(t, scalar.EqualWithinAbsOrRel(math.Log(4), wLSEFull[3], 1e-15, 1e-15))

	for _, tc := range []struct {
		name           string
		causal, bottom bool
		wantO, wantLSE []float64
	}{
		{"full", false, false, wOFull, wLSEFull},
		{"full-bottomright-ignored", false, true, wOFull, wLSEFull},
		{"causal-topleft", true, false, wOCausal, wLSECausal},
		{"causal-bottomright", true, true, wOCausal, wLSECausal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := wP
			p.Causal, p.BottomRight = tc.causal, tc.bottom
			o, lse, err := Forward(p, wQ, wK, wV)
			require.NoError(t, err)

			handO, handLSE := workedByHand(tc.causal)
			// Pinned literals vs. the hand computation vs. the package.
			assert.True(t, floats.EqualApprox(handO, tc.wantO, 1e-14), "hand O %v vs literal %v", handO, tc.wantO)
			assert.True(t, floats.EqualApprox(handLSE, tc.wantLSE, 1e-14), "hand LSE %v vs literal %v", handLSE, tc.wantLSE)
			assert.True(t, floats.EqualApprox(o, tc.wantO, 1e-13), "O %v vs literal %v", o, tc.wantO)
			assert.True(t, floats.EqualApprox(lse, tc.wantLSE, 1e-13), "LSE %v vs literal %v", lse, tc.wantLSE)
			assert.True(t, floats.EqualApprox(o, handO, 1e-13))
		})
	}
}

// With Nq == Nk the two causal alignments are the same mask.
func TestCausalAlignmentsCoincideWhenSquare(t *testing.T) {
	p := Params{B: 2, Hq: 3, Hkv: 1, Nq: 7, Nk: 7, D: 5, Dv: 3, Causal: true}
	q, k, v, _ := randInputs(t, p, 1)
	oTL, lTL, err := Forward(p, q, k, v)
	require.NoError(t, err)
	p.BottomRight = true
	oBR, lBR, err := Forward(p, q, k, v)
	require.NoError(t, err)
	assert.Equal(t, oTL, oBR)
	assert.Equal(t, lTL, lBR)
}

// maskRule is the mask written out independently of Params.Visible.
func maskRule(causal, bottom bool, nq, nk, i, j int) bool {
	switch {
	case !causal:
		return true
	case bottom:
		return j-i <= nk-nq
	default:
		return j-i <= 0
	}
}

func TestProbabilities(t *testing.T) {
	shapes := []struct{ nq, nk int }{{5, 5}, {3, 8}, {8, 3}, {1, 6}, {6, 1}}
	for _, sh := range shapes {
		for _, m := range []struct{ causal, bottom bool }{{false, false}, {true, false}, {true, true}} {
			p := Params{B: 2, Hq: 4, Hkv: 2, Nq: sh.nq, Nk: sh.nk, D: 3, Dv: 2, Causal: m.causal, BottomRight: m.bottom}
			q, k, _, _ := randInputs(t, p, 2)
			for b := 0; b < p.B; b++ {
				for h := 0; h < p.Hq; h++ {
					pm := Probabilities(p, q, k, b, h)
					require.NotNil(t, pm)
					r, c := pm.Dims()
					require.Equal(t, [2]int{p.Nq, p.Nk}, [2]int{r, c})
					for i := 0; i < p.Nq; i++ {
						sum, anyVisible := 0.0, false
						for j := 0; j < p.Nk; j++ {
							x := pm.At(i, j)
							if maskRule(m.causal, m.bottom, p.Nq, p.Nk, i, j) {
								anyVisible = true
								assert.Greater(t, x, 0.0)
								assert.Equal(t, maskRule(m.causal, m.bottom, p.Nq, p.Nk, i, j), p.Visible(0, i, j))
							} else {
								assert.Equal(t, 0.0, x, "masked entry (%d,%d) %+v", i, j, p)
								assert.False(t, p.Visible(0, i, j))
							}
							sum += x
						}
						if anyVisible {
							assert.InDelta(t, 1, sum, 1e-14, "row %d of %+v", i, p)
						} else {
							assert.Equal(t, 0.0, sum, "empty row %d of %+v", i, p)
						}
					}
				}
			}
		}
	}
	// Bad arguments give nil, not a panic.
	p := Params{B: 1, Hq: 2, Hkv: 1, Nq: 2, Nk: 2, D: 2, Dv: 2}
	q, k, _, _ := randInputs(t, p, 3)
	assert.Nil(t, Probabilities(p, q, k, 1, 0))
	assert.Nil(t, Probabilities(p, q, k, 0, 2))
	assert.Nil(t, Probabilities(p, q, k, -1, 0))
	assert.Nil(t, Probabilities(p, q[1:], k, 0, 0))
	assert.Nil(t, Probabilities(Params{}, q, k, 0, 0))
}

// Non-causal attention is a function of the set of (key, value) pairs.
func TestKeyPermutationInvariance(t *testing.T) {
	p := Params{B: 2, Hq: 4, Hkv: 2, Nq: 5, Nk: 7, D: 4, Dv: 3}
	q, k, v, _ := randInputs(t, p, 4)
	perm := []int{3, 6, 0, 5, 1, 4, 2}
	kp, vp := make([]float64, len(k)), make([]float64, len(v))
	for b := 0; b < p.B; b++ {
		for n := 0; n < p.Nk; n++ {
			for h := 0; h < p.Hkv; h++ {
				copy(kp[at(b, n, h, p.Nk, p.Hkv, p.D):][:p.D], k[at(b, perm[n], h, p.Nk, p.Hkv, p.D):])
				copy(vp[at(b, n, h, p.Nk, p.Hkv, p.Dv):][:p.Dv], v[at(b, perm[n], h, p.Nk, p.Hkv, p.Dv):])
			}
		}
	}
	require.NotEqual(t, k, kp)
	o1, l1, err := Forward(p, q, k, v)
	require.NoError(t, err)
	o2, l2, err := Forward(p, q, kp, vp)
	require.NoError(t, err)
	assert.Less(t, RelL2(o2, o1), 1e-14)
	assert.Less(t, RelL2(l2, l1), 1e-14)
}

// LSE and O against a direct, unshifted scalar loop (values are small, so no
// overflow), for every mask, including Nq ≠ Nk and a GQA layout.
func TestAgainstScalarLoop(t *testing.T) {
	for _, sh := range []struct{ nq, nk int }{{4, 4}, {3, 5}, {5, 3}} {
		for _, m := range []struct{ causal, bottom bool }{{false, false}, {true, false}, {true, true}} {
			p := Params{B: 2, Hq: 4, Hkv: 2, Nq: sh.nq, Nk: sh.nk, D: 3, Dv: 2, Scale: 0.7, Causal: m.causal, BottomRight: m.bottom}
			q, k, v, _ := randInputs(t, p, 5)
			o, lse, err := Forward(p, q, k, v)
			require.NoError(t, err)
			wantO := make([]float64, len(o))
			wantL := make([]float64, len(lse))
			group := p.Hq / p.Hkv
			for b := 0; b < p.B; b++ {
				for h := 0; h < p.Hq; h++ {
					g := h / group
					for i := 0; i < p.Nq; i++ {
						z := 0.0
						acc := make([]float64, p.Dv)
						for j := 0; j < p.Nk; j++ {
							if !maskRule(m.causal, m.bottom, p.Nq, p.Nk, i, j) {
								continue
							}
							dot := 0.0
							for c := 0; c < p.D; c++ {
								dot += q[at(b, i, h, p.Nq, p.Hq, p.D)+c] * k[at(b, j, g, p.Nk, p.Hkv, p.D)+c]
							}
							e := math.Exp(0.7 * dot)
							z += e
							for c := 0; c < p.Dv; c++ {
								acc[c] += e * v[at(b, j, g, p.Nk, p.Hkv, p.Dv)+c]
							}
						}
						wantL[b*p.Hq*p.Nq+h*p.Nq+i] = math.Log(z) // log 0 = −Inf for empty rows
						for c := 0; c < p.Dv; c++ {
							if z > 0 {
								wantO[at(b, i, h, p.Nq, p.Hq, p.Dv)+c] = acc[c] / z
							}
						}
					}
				}
			}
			assert.Less(t, RelL2(o, wantO), 1e-14, "%+v", p)
			assert.Less(t, MaxAbs(lse, wantL), 1e-14, "%+v", p)
		}
	}
}

// Huge scores must not overflow: the stable softmax shifts by the row max.
func TestStableSoftmax(t *testing.T) {
	p := wP
	big := make([]float64, len(wQ))
	for i, x := range wQ {
		big[i] = 1000 * x
	}
	o, lse, err := Forward(p, big, wK, wV)
	require.NoError(t, err)
	for _, x := range append(o, lse...) {
		require.False(t, math.IsNaN(x) || math.IsInf(x, 0))
	}
	// Row 2 (q=[1000,1000]) is dominated by k2 (dot 2000 vs ≤ 1000): O ≈ v2,
	// LSE ≈ 2000/√2.
	assert.InDelta(t, 5, o[4], 1e-12)
	assert.InDelta(t, 6, o[5], 1e-12)
	assert.InDelta(t, 2000/math.Sqrt2, lse[2], 1e-9)
}

func TestDefaultScale(t *testing.T) {
	p := Params{B: 1, Hq: 2, Hkv: 2, Nq: 3, Nk: 4, D: 9, Dv: 2}
	q, k, v, _ := randInputs(t, p, 6)
	assert.Equal(t, 1.0/3, p.EffectiveScale())
	o0, l0, err := Forward(p, q, k, v)
	require.NoError(t, err)
	p.Scale = 1.0 / 3
	o1, l1, err := Forward(p, q, k, v)
	require.NoError(t, err)
	assert.Equal(t, o1, o0)
	assert.Equal(t, l1, l0)
}

// expandKV repeats each kv head Hq/Hkv times, giving the matching MHA
// problem.
func expandKV(p Params, t []float64, n, x int) []float64 {
	group := p.Hq / p.Hkv
	out := make([]float64, p.B*n*p.Hq*x)
	for b := 0; b < p.B; b++ {
		for s := 0; s < n; s++ {
			for h := 0; h < p.Hq; h++ {
				copy(out[at(b, s, h, n, p.Hq, x):][:x], t[at(b, s, h/group, n, p.Hkv, x):])
			}
		}
	}
	return out
}

// GQA equals MHA with repeated kv heads; dK/dV are the group sums.
func TestGQAEqualsRepeatedMHA(t *testing.T) {
	p := Params{B: 2, Hq: 6, Hkv: 2, Nq: 4, Nk: 5, D: 3, Dv: 2, Causal: true, BottomRight: true}
	q, k, v, do := randInputs(t, p, 7)
	m := p
	m.Hkv = p.Hq
	ke, ve := expandKV(p, k, p.Nk, p.D), expandKV(p, v, p.Nk, p.Dv)

	o, l, err := Forward(p, q, k, v)
	require.NoError(t, err)
	om, lm, err := Forward(m, q, ke, ve)
	require.NoError(t, err)
	assert.Equal(t, om, o)
	assert.Equal(t, lm, l)

	dq, dk, dv, err := Backward(p, q, k, v, do)
	require.NoError(t, err)
	dqm, dkm, dvm, err := Backward(m, q, ke, ve, do)
	require.NoError(t, err)
	assert.Equal(t, dqm, dq)
	group := p.Hq / p.Hkv
	sumGroups := func(t []float64, x int) []float64 {
		out := make([]float64, p.B*p.Nk*p.Hkv*x)
		for b := 0; b < p.B; b++ {
			for s := 0; s < p.Nk; s++ {
				for h := 0; h < p.Hq; h++ {
					floats.Add(out[at(b, s, h/group, p.Nk, p.Hkv, x):][:x], t[at(b, s, h, p.Nk, p.Hq, x):][:x])
				}
			}
		}
		return out
	}
	assert.Less(t, RelL2(dk, sumGroups(dkm, p.D)), 1e-14)
	assert.Less(t, RelL2(dv, sumGroups(dvm, p.Dv)), 1e-14)
}

// Bottom-right with Nq > Nk: the first Nq−Nk rows see no key.
func TestEmptyRows(t *testing.T) {
	p := Params{B: 2, Hq: 4, Hkv: 2, Nq: 6, Nk: 3, D: 4, Dv: 5, Causal: true, BottomRight: true}
	empty := p.Nq - p.Nk
	q, k, v, do := randInputs(t, p, 8)
	o, lse, err := Forward(p, q, k, v)
	require.NoError(t, err)
	dq, dk, dv, err := Backward(p, q, k, v, do)
	require.NoError(t, err)
	for _, s := range [][]float64{o, lse, dq, dk, dv} {
		for _, x := range s {
			require.False(t, math.IsNaN(x))
		}
	}
	for b := 0; b < p.B; b++ {
		for h := 0; h < p.Hq; h++ {
			for i := 0; i < p.Nq; i++ {
				l := lse[b*p.Hq*p.Nq+h*p.Nq+i]
				orow := o[at(b, i, h, p.Nq, p.Hq, p.Dv):][:p.Dv]
				dqrow := dq[at(b, i, h, p.Nq, p.Hq, p.D):][:p.D]
				if i < empty {
					assert.True(t, math.IsInf(l, -1), "LSE row %d = %v", i, l)
					assert.Equal(t, make([]float64, p.Dv), orow)
					assert.Equal(t, make([]float64, p.D), dqrow)
				} else {
					assert.False(t, math.IsInf(l, 0))
				}
			}
		}
	}
	// The empty rows' dO must not reach dK or dV.
	do2 := append([]float64(nil), do...)
	for b := 0; b < p.B; b++ {
		for i := 0; i < empty; i++ {
			for h := 0; h < p.Hq; h++ {
				for c := 0; c < p.Dv; c++ {
					do2[at(b, i, h, p.Nq, p.Hq, p.Dv)+c] = 1e6
				}
			}
		}
	}
	dq2, dk2, dv2, err := Backward(p, q, k, v, do2)
	require.NoError(t, err)
	assert.Equal(t, dq, dq2)
	assert.Equal(t, dk, dk2)
	assert.Equal(t, dv, dv2)

	// Every key is visible to some row here (the last row sees them all).
	// With Nk = 1 and Nq = 4 only the last row is non-empty.
	p1 := Params{B: 1, Hq: 1, Hkv: 1, Nq: 4, Nk: 1, D: 2, Dv: 2, Causal: true, BottomRight: true}
	q, k, v, _ = randInputs(t, p1, 9)
	o, lse, err = Forward(p1, q, k, v)
	require.NoError(t, err)
	assert.Equal(t, []float64{0, 0, 0, 0, 0, 0, v[0], v[1]}, o)
	assert.Equal(t, []float64{math.Inf(-1), math.Inf(-1), math.Inf(-1)}, lse[:3])
	assert.InDelta(t, p1.EffectiveScale()*(q[6]*k[0]+q[7]*k[1]), lse[3], 1e-15)
}
