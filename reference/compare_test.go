package reference

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCompareHelpers(t *testing.T) {
	want := []float64{3, 0, -4}
	inf := math.Inf(1)

	assert.Equal(t, 0.0, RelL2([]float64{3, 0, -4}, want))
	assert.Equal(t, 0.0, MaxAbs([]float32{3, 0, -4}, want))
	// ‖(0,1,0)‖/‖(3,0,−4)‖ = 1/5.
	assert.InDelta(t, 0.2, RelL2([]float64{3, 1, -4}, want), 1e-16)
	assert.InDelta(t, 0.2, RelL2([]float32{3, 1, -4}, want), 1e-16)
	assert.Equal(t, 1.0, MaxAbs([]float32{3, 1, -4}, want))
	// float32 rounding is visible through the generic conversion.
	assert.InDelta(t, math.Abs(float64(float32(0.1))-0.1), MaxAbs([]float32{0.1}, []float64{0.1}), 0)

	// All-zero reference: absolute norm.
	assert.InDelta(t, 5.0, RelL2([]float64{3, 4}, []float64{0, 0}), 1e-15)
	assert.Equal(t, 0.0, RelL2([]float64{}, []float64{}))

	// NaN never passes.
	nan := math.NaN()
	assert.Equal(t, inf, RelL2([]float64{3, nan, -4}, want))
	assert.Equal(t, inf, MaxAbs([]float32{float32(nan), 0, -4}, want))
	assert.Equal(t, inf, RelL2([]float64{nan}, []float64{0}))
	// Inf in got vs finite want, and length mismatches.
	assert.Equal(t, inf, RelL2([]float64{3, inf, -4}, want))
	assert.Equal(t, inf, MaxAbs([]float64{3, 0}, want))
	assert.Equal(t, inf, RelL2([]float64{3, 0, -4, 1}, want))

	// Matching infinities (e.g. the LSE of empty rows) count as exact and are
	// left out of the norms; mismatches never pass.
	lse := []float64{math.Inf(-1), 2}
	assert.Equal(t, 0.0, RelL2([]float32{float32(math.Inf(-1)), 2}, lse))
	assert.InDelta(t, 0.5, RelL2([]float64{math.Inf(-1), 3}, lse), 1e-16)
	assert.Equal(t, 1.0, MaxAbs([]float64{math.Inf(-1), 3}, lse))
	assert.Equal(t, inf, RelL2([]float64{-1e30, 2}, lse))
	assert.Equal(t, inf, MaxAbs([]float64{math.Inf(1), 2}, lse))

	st := Compare([]float32{3, float32(nan), float32(inf), -4}, []float64{3, 0, 0, -4})
	assert.Equal(t, Stats{MaxAbs: inf, RelL2: inf, NaN: 1, Inf: 1}, st)
	st = Compare([]float64{3, 1, -4}, want)
	assert.Equal(t, 1.0, st.MaxAbs)
	assert.InDelta(t, 0.2, st.RelL2, 1e-16)
	assert.Zero(t, st.NaN+st.Inf)
}
