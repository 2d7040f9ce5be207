package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randRows returns n random rows of width w, stored with a gap after each
// row; with neg the rows are stored last to first (negative stride).
func randRows(rng *rand.Rand, n, w int, neg bool) rows {
	stride := w + 3
	buf := make([]float32, 5+n*stride)
	for i := range buf {
		buf[i] = 2*rng.Float32() - 1
	}
	if neg {
		return rows{buf, 5 + (n-1)*stride, -stride}
	}
	return rows{buf, 5, stride}
}

// The dispatching kernels (vector where available) against the portable
// ones, on shapes that exercise every remainder path.
func TestKernelsMatchPortable(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, neg := range []bool{false, true} {
		for _, na := range []int{1, 2, 3, 5, 8} {
			for _, nb := range []int{1, 3, 4, 7, 12} {
				for _, w := range []int{1, 7, 8, 9, 16, 24, 40, 67} {
					a, b := randRows(rng, na, w, neg), randRows(rng, nb, w, !neg)
					ldd := nb + 2
					got, want := make([]float32, na*ldd), make([]float32, na*ldd)
					dotTile(got, ldd, a, na, b, nb, w)
					dotTileGo(want, ldd, a, na, b, nb, w)
					for i := range got {
						require.InDelta(t, want[i], got[i], 1e-5*float64(w), "dotTile na=%d nb=%d w=%d i=%d", na, nb, w, i)
					}
				}
			}
		}
		for _, m := range []int{1, 3, 4, 5, 9} {
			for _, k := range []int{1, 2, 5, 64} {
				for _, w := range []int{1, 8, 9, 16, 24, 33, 64} {
					v := randRows(rng, k, w, neg)
					ldp, lda := k+1, w+2
					p := make([]float32, m*ldp)
					for i := range p {
						p[i] = rng.Float32()
						if i%5 == 0 {
							p[i] = 0
						}
					}
					got, want := make([]float32, m*lda), make([]float32, m*lda)
					for i := range got {
						got[i] = float32(i)
						want[i] = float32(i)
					}
					accTile(got, lda, p, ldp, m, k, v, w)
					accTileGo(want, lda, p, ldp, m, k, v, w)
					for i := range got {
						require.InDelta(t, want[i], got[i], 1e-6*(math.Abs(float64(want[i]))+float64(k)), "accTile m=%d k=%d w=%d i=%d", m, k, w, i)
					}
				}
			}
		}
	}
	for n := range 70 {
		r := make([]float32, n)
		sub := make([]float32, n)
		for i := range r {
			r[i] = 8 * (2*rng.Float32() - 1)
			sub[i] = 4 * rng.Float32()
		}
		if n > 3 {
			r[1] = float32(math.Inf(-1))
			r[2] = -500
		}
		x := append([]float32(nil), r...)
		sum := expRow(x, 1.7, 0.5)
		var wantSum float64
		for i := range r {
			want := exp2(r[i]*1.7 - 0.5)
			wantSum += float64(want)
			assert.InDelta(t, want, x[i], 1e-6*float64(want)+1e-30, "expRow n=%d i=%d", n, i)
		}
		assert.InDelta(t, wantSum, float64(sum), 1e-5*wantSum+1e-30)

		x = append(x[:0], r...)
		probRow(x, sub, -0.9)
		for i := range r {
			want := exp2(snap(r[i]*-0.9-sub[i], sub[i]))
			assert.InDelta(t, want, x[i], 1e-6*float64(want)+1e-30, "probRow n=%d i=%d", n, i)
		}

		p := append([]float32(nil), sub...)
		dp := append([]float32(nil), r[:n]...)
		dsRow(p, dp, 0.25)
		for i := range p {
			assert.Equal(t, sub[i]*(r[i]-0.25), dp[i])
		}
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(i) / 7
		}
		dp = append(dp[:0], r[:n]...)
		dsRowVec(p, dp, d)
		for i := range p {
			assert.Equal(t, sub[i]*(r[i]-d[i]), dp[i])
		}

		if n > 0 {
			mx, mn := rowMaxMin(sub)
			wmx, wmn := sub[0], sub[0]
			for _, v := range sub {
				wmx, wmn = max(wmx, v), min(wmn, v)
			}
			assert.Equal(t, [2]float32{wmx, wmn}, [2]float32{mx, mn}, fmt.Sprint("rowMaxMin n=", n))
		}
	}
}

// The exp2 edge cases agree between the scalar and the vector code.
func TestExpEdges(t *testing.T) {
	in := []float32{float32(math.Inf(-1)), -1000, -126.6, -126.4, -126, -125.5, -1e-7, 0, 1e-7, 0.5, 126.9, 127, 127.4, 200, float32(math.Inf(1))}
	for len(in)%8 != 0 {
		in = append(in, 0)
	}
	got := append([]float32(nil), in...)
	expRow(got, 1, 0)
	for i, x := range in {
		want := exp2(x)
		if want == 0 {
			assert.Equal(t, want, got[i], "exp2(%v)", x)
			continue
		}
		assert.InDelta(t, 1, float64(got[i]/want), 1e-6, "exp2(%v)", x)
	}
	nan := []float32{1, 2, 3, 4, 5, 6, 7, float32(math.NaN())}
	expRow(nan, 1, 0)
	assert.True(t, math.IsNaN(float64(nan[7])))
}

// ulps returns how many float32 spacings at want separate got from want.
func ulps(got float32, want float64) float64 {
	w := abs32(float32(want))
	spacing := float64(math.Nextafter32(w, float32(math.Inf(1))) - w)
	return math.Abs(float64(got)-want) / spacing
}

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }

// tanhInputs returns float32 values of both signs from 1e-30 to 30
// (every 6007th bit pattern) and every float32 within 10 000 patterns of
// the range bounds 0.55 and 9, padded with zeros to a multiple of 8.
func tanhInputs() []float32 {
	var x []float32
	add := func(lo, hi, step uint32) {
		for b := lo; b <= hi; b += step {
			v := math.Float32frombits(b)
			x = append(x, v, -v)
		}
	}
	add(math.Float32bits(1e-30), math.Float32bits(30), 6007)
	for _, v := range []float32{tanhPolyMax, tanhOneMin} {
		add(math.Float32bits(v)-10000, math.Float32bits(v)+10000, 1)
	}
	for len(x)%8 != 0 {
		x = append(x, 0)
	}
	return x
}

// TestTanh: tanh32 and capRow's vector kernel are within 2 ulps of tanh,
// and the derivatives 1 − tanh² from both within 2^-22 of the exact value
// (the error of t, doubled, and a rounding); the special values follow
// ext_tanh.
func TestTanh(t *testing.T) {
	in := tanhInputs()
	got := append([]float32(nil), in...)
	soft := make([]float32, len(in))
	capRow(got, soft, 1, 1, 0, 0, 1) // the vector kernel where there is one
	var worst, worstVec, worstSoft, worstSoftVec float64
	for i, x := range in {
		want := math.Tanh(float64(x))
		th := tanh32(x)
		worst = max(worst, ulps(th, want))
		worstVec = max(worstVec, ulps(got[i], want))
		worstSoft = max(worstSoft, math.Abs(float64((1-th)*(1+th))-(1-want*want)))
		worstSoftVec = max(worstSoftVec, math.Abs(float64(soft[i])-(1-want*want)))
	}
	t.Logf("max error: tanh32 %.2f ulp, capRow %.2f ulp; 1 − tanh²: scalar %.2g, capRow %.2g", worst, worstVec, worstSoft, worstSoftVec)
	assert.LessOrEqual(t, worst, 2.0)
	assert.LessOrEqual(t, worstVec, 2.0)
	assert.LessOrEqual(t, worstSoft, 0x1p-22)
	assert.LessOrEqual(t, worstSoftVec, 0x1p-22)

	inf := float32(math.Inf(1))
	special := []float32{0, float32(math.Copysign(0, -1)), inf, -inf, 1e-45, -1e-45, 9, -9, 1e30, float32(math.NaN())}
	want := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1e-45, -1e-45, 1, -1, 1, float32(math.NaN())}
	for len(special)%8 != 0 {
		special, want = append(special, 0), append(want, 0)
	}
	vec := append([]float32(nil), special...)
	capRow(vec, nil, 1, 1, 0, 0, 1)
	for i, x := range special {
		assert.Equal(t, math.Float32bits(want[i]), math.Float32bits(tanh32(x)), "tanh32(%v)", x)
		assert.Equal(t, math.Float32bits(want[i]), math.Float32bits(vec[i]), "capRow(%v)", x)
	}
}

// The softcap and ALiBi kernels (vector where available) against their
// definition in float64, on rows of every remainder length whose
// distances cross the diagonal both ways; their maxima; and the softcap's
// dS kernels and scaleRow against the scalar arithmetic.
func TestExtKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const scale, c, slope = 0.7, 2.5, 0.3
	rowMax := func(r []float32) float32 {
		m := float32(math.Inf(-1))
		for _, x := range r {
			m = max(m, x)
		}
		return m
	}
	for n := range 40 {
		for _, step := range []int{-1, 1} {
			r := make([]float32, n)
			for i := range r {
				r[i] = 4 * (2*rng.Float32() - 1)
			}
			off := n/2 - 3
			bias := func(x int) float64 { return slope * math.Abs(float64(off+x*step)) }

			got, soft := append([]float32(nil), r...), make([]float32, n)
			mx := capRow(got, soft, scale/c, c, slope, off, step)
			assert.Equal(t, rowMax(got), mx, "capRow max n=%d", n)
			noSoft := append([]float32(nil), r...)
			capRow(noSoft, nil, scale/c, c, slope, off, step)
			for x, v := range r {
				th := math.Tanh(float64(v) * scale / c)
				want := c*th - bias(x)
				assert.InDelta(t, want, got[x], 4e-7*(c+bias(x)), "capRow n=%d step=%d x=%d", n, step, x)
				assert.Equal(t, got[x], noSoft[x], "capRow without soft n=%d x=%d", n, x)
				assert.InDelta(t, 1-th*th, soft[x], 0x1p-22, "capRow soft n=%d x=%d", n, x)
			}

			got = append(got[:0], r...)
			mx = biasRow(got, scale, slope, off, step)
			assert.Equal(t, rowMax(got), mx, "biasRow max n=%d", n)
			for x, v := range r {
				want := float64(scale*v) - bias(x)
				assert.InDelta(t, want, got[x], 2e-7*(math.Abs(want)+bias(x)), "biasRow n=%d step=%d x=%d", n, step, x)
			}

			p, d := make([]float32, n), make([]float32, n)
			for i := range p {
				p[i], d[i] = rng.Float32(), rng.Float32()
			}
			got = append(got[:0], r...)
			dsRowSoft(p, got, soft, 0.25)
			vec := append([]float32(nil), r...)
			dsRowVecSoft(p, vec, d, soft)
			scaled := append([]float32(nil), r...)
			scaleRow(scaled, 0.3)
			for x, v := range r {
				assert.Equal(t, p[x]*(v-0.25)*soft[x], got[x], "dsRowSoft n=%d x=%d", n, x)
				assert.Equal(t, p[x]*(v-d[x])*soft[x], vec[x], "dsRowVecSoft n=%d x=%d", n, x)
				assert.Equal(t, v*0.3, scaled[x], "scaleRow n=%d x=%d", n, x)
			}
		}
	}

	// Distances beyond the vector kernels' int32 lanes: the scalar code
	// takes the row, rounding each distance to float32 once.
	r := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	for _, off := range []int{math.MaxInt32 - 3, 1 << 40} {
		got := append([]float32(nil), r...)
		biasRow(got, 1, 0.5, off, 1)
		for x, v := range r {
			assert.Equal(t, v-0.5*float32(off+x), got[x], "biasRow off=%d x=%d", off, x)
		}
	}
}
