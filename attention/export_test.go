package attention

import (
	"context"
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
	FaultNone Fault = ""
	// FaultScale scores with the scale 1% too large, forward and backward.
	FaultScale Fault = "scale"
	// FaultLastRow leaves O's last query row of the first sequence and
	// head at 0 (a tail tile's row not stored).
	FaultLastRow Fault = "last-row"
	// FaultLSE writes the first row's LSE in log2 units instead of ln.
	FaultLSE Fault = "lse"
	// FaultDK zeroes dK's first key row of the first sequence and KV head
	// (a key tile's row not stored).
	FaultDK Fault = "dk"
)

// OpenFaulty returns a CPU engine with fault f, for the suite's own test.
func OpenFaulty(f Fault) *Engine { return newEngine(&faulty{backend: newCPUBackend(0), f: f}) }

type faulty struct {
	backend
	f Fault
}

func (x *faulty) problem(p *spec.Problem) *spec.Problem {
	if x.f != FaultScale {
		return p
	}
	q := *p
	q.Scale *= 1.01
	return &q
}

func (x *faulty) Forward(ctx context.Context, p *spec.Problem, a *forwardArgs) error {
	if err := x.backend.Forward(ctx, x.problem(p), a); err != nil {
		return err
	}
	switch x.f {
	case FaultLastRow:
		zeroRow(a.O, 0, a.O.Shape.S-1, 0)
	case FaultLSE:
		a.LSE[0] *= math.Log2E
	}
	return nil
}

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
	for d := range t.Shape.D {
		switch x := t.Data.(type) {
		case []float32:
			x[o+d] = 0
		case []float16.Float16:
			x[o+d] = 0
		case []bfloat16.BFloat16:
			x[o+d] = 0
		}
	}
}
