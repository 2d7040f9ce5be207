package reference

import (
	"math"

	"gonum.org/v1/gonum/floats"
)

// Stats summarises how far a result is from a float64 reference.
type Stats struct {
	MaxAbs float64 // max |got − want| (see MaxAbs)
	RelL2  float64 // ‖got − want‖₂ / ‖want‖₂ (see RelL2)
	NaN    int     // number of NaN entries in got
	Inf    int     // number of ±Inf entries in got
}

// Compare returns MaxAbs, RelL2 and the NaN/Inf counts of got against want.
func Compare[T float32 | float64](got []T, want []float64) Stats {
	s := Stats{MaxAbs: MaxAbs(got, want), RelL2: RelL2(got, want)}
	for _, g := range got {
		x := float64(g)
		switch {
		case math.IsNaN(x):
			s.NaN++
		case math.IsInf(x, 0):
			s.Inf++
		}
	}
	return s
}

// diffs returns got − want over the positions where want is finite, and
// want at those positions. ok is false when the lengths differ, got holds a
// NaN, want holds a NaN, or got differs from a non-finite want.
func diffs[T float32 | float64](got []T, want []float64) (d, w []float64, ok bool) {
	if len(got) != len(want) {
		return nil, nil, false
	}
	d = make([]float64, 0, len(want))
	w = make([]float64, 0, len(want))
	for i, g := range got {
		x, y := float64(g), want[i]
		switch {
		case math.IsNaN(x) || math.IsNaN(y):
			return nil, nil, false
		case math.IsInf(y, 0):
			if x != y {
				return nil, nil, false
			}
		default:
			d = append(d, x-y)
			w = append(w, y)
		}
	}
	return d, w, true
}

// RelL2 returns ‖got − want‖₂ / ‖want‖₂, or ‖got − want‖₂ (= ‖got‖₂) when
// want is all zero. It returns +Inf when the lengths differ or got holds a
// NaN, so a NaN never passes a tolerance. Positions where want is ±Inf must
// match exactly; they are then left out of both norms (a mismatch gives
// +Inf).
func RelL2[T float32 | float64](got []T, want []float64) float64 {
	d, w, ok := diffs(got, want)
	if !ok {
		return math.Inf(1)
	}
	num := floats.Norm(d, 2)
	den := floats.Norm(w, 2)
	if den == 0 {
		return num
	}
	return num / den
}

// MaxAbs returns max |got − want|, 0 for empty slices. It returns +Inf when
// the lengths differ or got holds a NaN. Positions where want is ±Inf count
// as 0 when got matches exactly and +Inf otherwise.
func MaxAbs[T float32 | float64](got []T, want []float64) float64 {
	d, _, ok := diffs(got, want)
	if !ok {
		return math.Inf(1)
	}
	m := 0.0
	for _, x := range d {
		m = math.Max(m, math.Abs(x))
	}
	return m
}
