package gate

import (
	"context"
	"errors"
	"sync"
)

// ErrClosing is the cause of a call's context cancelled by Close.
var ErrClosing = errors.New("closing")

// Gate is the zero value ready for use; it must not be copied.
type Gate struct {
	mu      sync.Mutex
	cond    *sync.Cond
	users   int
	closed  bool
	cancels map[*context.CancelCauseFunc]struct{}
}

// Acquire starts a use that Close waits for (and does not stop); false
// once Close has begun.
func (g *Gate) Acquire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.users++
	return true
}

// Release ends a use started by Acquire.
func (g *Gate) Release() {
	g.mu.Lock()
	g.users--
	if g.users == 0 && g.cond != nil {
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}

// Call starts a call that Close may stop: it runs under the returned
// context, which Close cancels with cause ErrClosing, and leave ends it.
// With keepUncancellable, a ctx that cannot be cancelled (Done() == nil) is
// returned as it is: such a call is not stopped, and Close waits for all
// of it. ok is false once Close has begun.
func (g *Gate) Call(ctx context.Context, keepUncancellable bool) (cctx context.Context, leave func(), ok bool) {
	if !g.Acquire() {
		return nil, nil, false
	}
	if keepUncancellable && ctx.Done() == nil {
		return ctx, g.Release, true
	}
	cctx, cancel := context.WithCancelCause(ctx)
	g.mu.Lock()
	if g.cancels == nil {
		g.cancels = map[*context.CancelCauseFunc]struct{}{}
	}
	g.cancels[&cancel] = struct{}{}
	if g.closed { // Close began after Acquire
		cancel(ErrClosing)
	}
	g.mu.Unlock()
	return cctx, func() {
		g.mu.Lock()
		delete(g.cancels, &cancel)
		g.mu.Unlock()
		cancel(nil)
		g.Release()
	}, true
}

// Close refuses new uses, cancels the calls in progress and waits until
// every use has ended. It reports whether this call closed the gate.
func (g *Gate) Close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	for c := range g.cancels {
		(*c)(ErrClosing)
	}
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	for g.users > 0 {
		g.cond.Wait()
	}
	return true
}

// StoppedByClose reports whether a call that ran under cctx (from Call) for
// a caller's ctx ended because Close stopped it: the caller's context is
// still live, cctx's was cancelled by Close.
func StoppedByClose(ctx, cctx context.Context) bool {
	return ctx.Err() == nil && errors.Is(context.Cause(cctx), ErrClosing)
}
