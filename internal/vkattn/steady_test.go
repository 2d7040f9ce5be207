//go:build cgo

package vkattn

import (
	"testing"
	"time"
)

func TestSteady(t *testing.T) {
	ms := func(xs ...float64) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x*float64(time.Millisecond)))
		}
		return out
	}
	rep := func(x float64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = x
		}
		return out
	}
	// The H200's step (bench/results, d64 N=2048): 23 × 4.57 ms, then 1.31 ms.
	step := ms(append(append(rep(4.57, 23), 2.03), rep(1.31, 6)...)...)
	for name, c := range map[string]struct {
		times []time.Duration
		want  bool
	}{
		"flat":               {ms(rep(1.0, 30)...), true},
		"noise":              {ms(1.0, 1.1, 0.95, 1.05, 1.0, 1.02, 0.98, 1.1, 1.0, 1.0, 0.97, 1.03), true},
		"h200 clock step":    {step, false},
		"late slowdown":      {ms(append(rep(1.0, 20), rep(3.0, 10)...)...), false},
		"one outlier":        {ms(append([]float64{5}, rep(1.0, 29)...)...), true},
		"too short to judge": {ms(5, 1, 1, 1, 1, 1, 1), true},
	} {
		if got := Steady(c.times); got != c.want {
			t.Errorf("%s: Steady = %v, want %v", name, got, c.want)
		}
	}
}
