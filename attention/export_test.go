package attention

import (
	"context"
	"fmt"
	"math"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

// Fault is a deliberate error of an engine from OpenFaulty, each a bug a
// kernel could have: the conformance suite must fail every one.
type Fault string

const (
	// FaultNone is the CPU backend unchanged (the control).
	FaultNone Fault = "none"
	// FaultScale scores with the scale 1% too large, forward and backward.
	FaultScale Fault = "scale"
	// FaultLastRow overwrites O's last query row of the first sequence and
	// head with 0 (a tail tile's row lost).
	FaultLastRow Fault = "last-row"
	// FaultLSE writes the first row's LSE in log2 units instead of ln.
	FaultLSE Fault = "lse"
	// FaultDK overwrites dK's first key row of the first sequence and KV
	// head with 0 (a key tile's row lost).
	FaultDK Fault = "dk"
)

// Faults are every Fault, FaultNone first.
var Faults = []Fault{FaultNone, FaultScale, FaultLastRow, FaultLSE, FaultDK}

// OpenFaulty returns a CPU engine with fault f, for the suite's own test;
// an unknown f is an error.
func OpenFaulty(f Fault) (*Engine, error) {
	for _, g := range Faults {
		if f == g {
			return newEngine(&faulty{backend: newCPUBackend(0), f: f}), nil
		}
	}
	return nil, fmt.Errorf("attention: unknown fault %q: %w", f, ErrOption)
}

// faulty is the CPU backend with fault f applied to its calls.
type faulty struct {
	backend
	f Fault
}

// problem is p as the fault computes it (a copy with the wrong scale under
// FaultScale).
func (x *faulty) problem(p *spec.Problem) *spec.Problem {
	if x.f != FaultScale {
		return p
	}
	q := *p
	q.Scale *= 1.01
	return &q
}

// Forward is the backend's, then the output faults.
func (x *faulty) Forward(ctx context.Context, p *spec.Problem, a *forwardArgs) error {
	if err := x.backend.Forward(ctx, x.problem(p), a); err != nil {
		return err
	}
	switch x.f {
	case FaultLastRow:
		zeroRow(a.O, 0, a.O.Shape.S-1, 0)
	case FaultLSE:
		if len(a.LSE) > 0 {
			a.LSE[0] *= math.Log2E
		}
	}
	return nil
}

// Backward is the backend's, then the gradient faults.
func (x *faulty) Backward(ctx context.Context, p *spec.Problem, a *backwardArgs) error {
	if err := x.backend.Backward(ctx, x.problem(p), a); err != nil {
		return err
	}
	if x.f == FaultDK {
		zeroRow(a.DK, 0, 0, 0)
	}
	return nil
}

// zeroRow sets row (b, s, h) of t to 0.
func zeroRow(t Tensor, b, s, h int) {
	o := t.Strides.Offset(b, s, h)
	switch x := t.Data.(type) {
	case []float32:
		clear(x[o : o+t.Shape.D])
	case []float16.Float16:
		clear(x[o : o+t.Shape.D])
	case []bfloat16.BFloat16:
		clear(x[o : o+t.Shape.D])
	default:
		panic(fmt.Sprintf("zeroRow: %T", t.Data)) // (test-only: the suite's dtypes are the three above)
	}
}
