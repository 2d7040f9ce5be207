package main

import (
	"context"
	"fmt"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
)

// refResult is the float64 reference of a problem (db: dBias, with
// --bias-grad).
type refResult struct {
	o, lse, dq, dk, dv, db []float64
}

// computeReference computes the float64 reference of p (with backward the
// gradients too, and dBias where p asks for it) and returns ctx's error as
// soon as ctx is done: package reference checks ctx between (batch, head)
// pairs (not in BiasGrad), and it runs in a goroutine that a cancelled
// caller does not wait for (a pair of a large problem takes seconds).
func computeReference(ctx context.Context, p problem, q, k, v, do attention.Tensor, backward bool) (*refResult, error) {
	return await(ctx, func() (*refResult, error) {
		q64, k64, v64 := q.Float64s(), k.Float64s(), v.Float64s()
		if p.packed() {
			var do64 []float64
			if backward {
				do64 = do.Float64s()
			}
			return packedReference(ctx, p, q64, k64, v64, do64)
		}
		pp := p.params()
		o, lse, err := reference.ForwardContext(ctx, pp, q64, k64, v64)
		if err != nil {
			return nil, fmt.Errorf("reference: %w", err)
		}
		r := &refResult{o: o, lse: lse}
		if backward {
			do64 := do.Float64s()
			if r.dq, r.dk, r.dv, err = reference.BackwardContext(ctx, pp, q64, k64, v64, do64); err != nil {
				return nil, fmt.Errorf("reference: %w", err)
			}
			if p.BiasGrad {
				if r.db, err = reference.BiasGrad(pp, q64, k64, v64, do64); err != nil {
					return nil, fmt.Errorf("reference: %w", err)
				}
			}
		}
		return r, nil
	})
}

// packedReference is the float64 reference of a packed batch (q, k, v and,
// for the backward, do: the packed operands in BSHD order). Package
// reference has no packed form: each sequence runs as a batch of one over
// its own rows, and the results are packed as the library returns them —
// O and dQ [1, T, Hq, ·], dK and dV [1, T, Hkv, ·], LSE [Hq, T]. An empty
// sequence has no rows. With dropout, whose mask depends on the sequence's
// index b in the batch, sequence b's mask starts counting at b
// (reference.Dropout.Batch0). A bias of the padded grid gives each
// sequence its own rows and keys (sequenceBias), and each sequence's
// dBias is added into the padded grid's.
func packedReference(ctx context.Context, p problem, q, k, v, do []float64) (*refResult, error) {
	_, t, _ := p.stored()
	r := &refResult{lse: make([]float64, p.Hq*t)}
	base := p.params()
	bias := base.Bias
	if bias != nil && do != nil && p.BiasGrad {
		r.db = make([]float64, len(bias.Values))
	}
	// rows are sequence b's rows of x, h heads of dim d each.
	rows := func(x []float64, start, n, h, d int) []float64 { return x[start*h*d : (start+n)*h*d] }
	start := 0
	for b, n := range p.SeqLens {
		if n == 0 {
			continue
		}
		pp := base
		pp.B, pp.Nq, pp.Nk = 1, n, n
		if bias != nil {
			pp.Bias = sequenceBias(bias, b, n, p.Nk)
		}
		if pp.SeqUsedK != nil {
			pp.SeqUsedK = pp.SeqUsedK[b : b+1]
		}
		qb, kb, vb := rows(q, start, n, p.Hq, p.D), rows(k, start, n, p.Hkv, p.D), rows(v, start, n, p.Hkv, p.Dv)
		var dob []float64
		if do != nil {
			dob = rows(do, start, n, p.Hq, p.Dv)
		}
		if pp.Dropout != nil {
			d := *pp.Dropout
			d.Batch0 = b
			pp.Dropout = &d
		}
		o, lse, err := reference.ForwardContext(ctx, pp, qb, kb, vb)
		if err != nil {
			return nil, fmt.Errorf("reference: sequence %d: %w", b, err)
		}
		r.o = append(r.o, o...)
		for h := range p.Hq {
			copy(r.lse[h*t+start:], lse[h*n:(h+1)*n])
		}
		if do != nil {
			dq, dk, dv, err := reference.BackwardContext(ctx, pp, qb, kb, vb, dob)
			if err != nil {
				return nil, fmt.Errorf("reference: sequence %d: %w", b, err)
			}
			r.dq, r.dk, r.dv = append(r.dq, dq...), append(r.dk, dk...), append(r.dv, dv...)
			if r.db != nil {
				db, err := reference.BiasGrad(pp, qb, kb, vb, dob)
				if err != nil {
					return nil, fmt.Errorf("reference: sequence %d: %w", b, err)
				}
				addSequenceGrad(r.db, bias, b, n, p.Nk, db)
			}
		}
		start += n
	}
	return r, nil
}
