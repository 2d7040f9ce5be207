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
