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
// gradients too) and returns ctx's error as soon as ctx is done: it runs
// one (batch, kv head) group at a time, checking ctx between groups, in a
// goroutine that a cancelled caller does not wait for (a group of a large
// problem takes seconds).
func computeReference(ctx context.Context, p problem, q, k, v, do attention.Tensor, backward bool) (*refResult, error) {
	return await(ctx, func() (*refResult, error) { return referenceGroups(ctx, p, q, k, v, do, backward) })
}

// referenceGroups is package reference on each (batch b, kv head g) group
// of p: query heads g·r … g·r+r−1 (r = Hq/Hkv) with their kv head, a
// problem of B = 1, Hq = r, Hkv = 1. Groups share nothing (a kv head's
// dK and dV sum over its query heads only), so the results are those of
// the whole problem at once.
func referenceGroups(ctx context.Context, p problem, q, k, v, do attention.Tensor, backward bool) (*refResult, error) {
	pp := p.params()
	q64, k64, v64 := q.Float64s(), k.Float64s(), v.Float64s()
	var do64 []float64
	if backward {
		do64 = do.Float64s()
	}
	B, Hq, Hkv, Nq, Nk, D, Dv := p.B, p.Hq, p.Hkv, p.Nq, p.Nk, p.D, p.Dv
	r := Hq / Hkv
	ref := &refResult{o: make([]float64, B*Nq*Hq*Dv), lse: make([]float64, B*Hq*Nq)}
	if backward {
		ref.dq, ref.dk, ref.dv = make([]float64, len(q64)), make([]float64, len(k64)), make([]float64, len(v64))
	}
	gp := pp
	gp.B, gp.Hq, gp.Hkv = 1, r, 1
	// BSHD rows: query row i of group (b, g) starts at ((b·Nq+i)·Hq+g·r)·x
	// and holds its r heads; key row j at ((b·Nk+j)·Hkv+g)·x.
	qRows := func(src []float64, b, g, x int) []float64 {
		out := make([]float64, Nq*r*x)
		for i := range Nq {
			copy(out[i*r*x:][:r*x], src[((b*Nq+i)*Hq+g*r)*x:])
		}
		return out
	}
	qBack := func(dst, src []float64, b, g, x int) {
		for i := range Nq {
			copy(dst[((b*Nq+i)*Hq+g*r)*x:][:r*x], src[i*r*x:])
		}
	}
	kRows := func(src []float64, b, g, x int) []float64 {
		out := make([]float64, Nk*x)
		for j := range Nk {
			copy(out[j*x:][:x], src[((b*Nk+j)*Hkv+g)*x:])
		}
		return out
	}
	kBack := func(dst, src []float64, b, g, x int) {
		for j := range Nk {
			copy(dst[((b*Nk+j)*Hkv+g)*x:][:x], src[j*x:])
		}
	}
	for b := range B {
		for g := range Hkv {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			gq, gk, gv := qRows(q64, b, g, D), kRows(k64, b, g, D), kRows(v64, b, g, Dv)
			o, lse, err := reference.Forward(gp, gq, gk, gv)
			if err != nil {
				return nil, fmt.Errorf("reference: %w", err)
			}
			qBack(ref.o, o, b, g, Dv)
			// LSE is [B, Hq, Nq]: the group's r heads are one run.
			copy(ref.lse[(b*Hq+g*r)*Nq:][:r*Nq], lse)
			if !backward {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			dq, dk, dv, err := reference.Backward(gp, gq, gk, gv, qRows(do64, b, g, Dv))
			if err != nil {
				return nil, fmt.Errorf("reference: %w", err)
			}
			qBack(ref.dq, dq, b, g, D)
			kBack(ref.dk, dk, b, g, D)
			kBack(ref.dv, dv, b, g, Dv)
		}
	}
	return ref, nil
}
