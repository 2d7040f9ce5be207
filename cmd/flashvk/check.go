package main

import (
	"context"
	"fmt"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
)

// refResult is the float64 reference of a problem.
type refResult struct {
	o, lse, dq, dk, dv []float64
}

// computeReference computes the float64 reference of p (with backward the
// gradients too) and returns ctx's error as soon as ctx is done: package
// reference checks ctx between (batch, head) pairs, and it runs in a
// goroutine that a cancelled caller does not wait for (a pair of a large
// problem takes seconds).
func computeReference(ctx context.Context, p problem, q, k, v, do attention.Tensor, backward bool) (*refResult, error) {
	return await(ctx, func() (*refResult, error) {
		pp := p.params()
		q64, k64, v64 := q.Float64s(), k.Float64s(), v.Float64s()
		o, lse, err := reference.ForwardContext(ctx, pp, q64, k64, v64)
		if err != nil {
			return nil, fmt.Errorf("reference: %w", err)
		}
		r := &refResult{o: o, lse: lse}
		if backward {
			if r.dq, r.dk, r.dv, err = reference.BackwardContext(ctx, pp, q64, k64, v64, do.Float64s()); err != nil {
				return nil, fmt.Errorf("reference: %w", err)
			}
		}
		return r, nil
	})
}
