package cpu

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/flashvk/flashvk/internal/spec"
)

// countCtx is a context that is cancelled by the limit-th call of Err
// after limit calls; calls counts them.
type countCtx struct {
	context.Context
	limit int64
	calls atomic.Int64
	once  sync.Once
	done  chan struct{}
}

func newCountCtx(limit int64) *countCtx {
	return &countCtx{Context: context.Background(), limit: limit, done: make(chan struct{})}
}

func (c *countCtx) Err() error {
	if c.calls.Add(1) > c.limit {
		c.once.Do(func() { close(c.done) })
		return context.Canceled
	}
	return nil
}

func (c *countCtx) Done() <-chan struct{} { return c.done }

// TestCancelWithinItem: a work item of many tiles (one query tile against
// many key tiles, one key tile against many query tiles) checks the
// context between its tiles, so a call of a few long items stops within a
// tile of the cancellation, its unfinished items writing nothing.
func TestCancelWithinItem(t *testing.T) {
	const d, tiles = 16, 100
	fill := func(n int, x float32) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = x
		}
		return s
	}
	newProblem := func(nq, nk int) *spec.Problem {
		return &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: nq, Nk: nk, D: d, Dv: d, Scale: 0.25,
			Q: spec.BSHD(nq, 1, d), K: spec.BSHD(nk, 1, d), V: spec.BSHD(nk, 1, d), O: spec.BSHD(nq, 1, d)}
	}
	cfg := Config{Workers: 1}

	// Forward: one item (one query tile) over 100 key tiles.
	p := newProblem(DefaultBr, tiles*DefaultBc)
	q, k, v := fill(p.Nq*d, 0.1), fill(p.Nk*d, 0.2), fill(p.Nk*d, 0.3)
	o, lse := fill(p.Nq*d, float32(math.NaN())), fill(p.Nq, float32(math.NaN()))
	ctx := newCountCtx(4)
	err := ForwardWith(ctx, cfg, p, q, k, v, o, lse)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("forward: %v", err)
	}
	if n := ctx.calls.Load(); n > 8 {
		t.Errorf("forward: %d context checks for a cancellation at the 5th: the item did not stop", n)
	}
	if !math.IsNaN(float64(o[0])) || !math.IsNaN(float64(lse[0])) {
		t.Errorf("forward: the item cut short wrote its outputs")
	}
	whole := newCountCtx(math.MaxInt64)
	if err := ForwardWith(whole, cfg, p, q, k, v, o, lse); err != nil {
		t.Fatal(err)
	}
	if n := whole.calls.Load(); n < tiles {
		t.Errorf("forward: %d context checks over %d key tiles", n, tiles)
	}

	// Backward: one key tile over 100 query tiles (the dK/dV item), then
	// 100 dQ items. Every check point stops the call within a check or two.
	p = newProblem(tiles*DefaultBr, DefaultBc)
	q, k, v = fill(p.Nq*d, 0.1), fill(p.Nk*d, 0.2), fill(p.Nk*d, 0.3)
	o, lse = fill(p.Nq*d, 0.1), fill(p.Nq, 1)
	do := fill(p.Nq*d, 0.1)
	dq, dk, dv := fill(p.Nq*d, 0), fill(p.Nk*d, 0), fill(p.Nk*d, 0)
	whole = newCountCtx(math.MaxInt64)
	if err := BackwardWith(whole, cfg, p, q, k, v, o, lse, do, dq, dk, dv); err != nil {
		t.Fatal(err)
	}
	total := whole.calls.Load()
	// About 100 checks each: the D items, the dK/dV item's query tiles,
	// the dQ items and their key tile.
	if total < 4*tiles {
		t.Errorf("backward: %d context checks: the dK/dV item does not check between query tiles", total)
	}
	for limit := int64(0); limit < total-1; limit++ {
		ctx := newCountCtx(limit)
		err := BackwardWith(ctx, cfg, p, q, k, v, o, lse, do, dq, dk, dv)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("backward cancelled at check %d of %d: %v", limit+1, total, err)
		}
		if n := ctx.calls.Load(); n > limit+3 {
			t.Fatalf("backward cancelled at check %d: %d checks made", limit+1, n)
		}
	}
}
