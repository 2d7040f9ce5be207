package attention_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/flashvk/flashvk/attention"
)

// The cancellation tests: a call of seconds of work cancelled after
// 200 ms returns the context's error within about a second, the next call
// does not wait for the cancelled one, and Close during a call returns as
// promptly, the call failing with ErrClosed.

// cancelAfter is when the tests cancel a long call, cancelSlack how long
// after that it may take to return (on a loaded two-core machine running
// lavapipe: a chunk of about 100 ms, plus room).
const (
	cancelAfter = 200 * time.Millisecond
	cancelSlack = time.Second
)

// longCall is a forward and backward of seconds of work on e's backend:
// on lavapipe some 1–4 s forward and three times that backward, on the
// CPU backend some seconds on two cores; far longer than a chunk on a GPU.
type longCall struct {
	q, k, v, o, do, dq, dk, dv attention.Tensor
	lse                        []float32
	opt                        attention.Options
}

func newLongCall(e *attention.Engine) *longCall {
	b, h, n, d := 1, 4, 2048, 64
	switch info := e.Info(); {
	case info.Kind == attention.CPU:
		h, n = 8, 8192
	case info.Vulkan != nil && !info.Vulkan.Software:
		b, h, n = 4, 16, 16384
	}
	return newCall(b, h, h, n, n, d, false, 11)
}

func newCall(b, hq, hkv, nq, nk, d int, causal bool, seed uint64) *longCall {
	rng := rand.New(rand.NewPCG(seed, 3))
	qs := attention.Shape{B: b, S: nq, H: hq, D: d}
	ks := attention.Shape{B: b, S: nk, H: hkv, D: d}
	c := &longCall{
		q: randTensor(rng, attention.Float32, qs, attention.BSHD), k: randTensor(rng, attention.Float32, ks, attention.BSHD),
		v: randTensor(rng, attention.Float32, ks, attention.BSHD), do: randTensor(rng, attention.Float32, qs, attention.BSHD),
		lse: make([]float32, b*hq*nq), opt: attention.Options{Causal: causal, Align: attention.BottomRight},
	}
	c.o, _ = attention.NewTensor(attention.Float32, qs, attention.BSHD)
	c.dq, _ = attention.NewTensor(attention.Float32, qs, attention.BSHD)
	c.dk, _ = attention.NewTensor(attention.Float32, ks, attention.BSHD)
	c.dv, _ = attention.NewTensor(attention.Float32, ks, attention.BSHD)
	return c
}

func (c *longCall) forward(ctx context.Context, e *attention.Engine) error {
	return e.ForwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.opt)
}

func (c *longCall) backward(ctx context.Context, e *attention.Engine) error {
	return e.BackwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.do, c.dq, c.dk, c.dv, c.opt)
}

// timed runs f and returns its error and duration.
func timed(f func() error) (error, time.Duration) {
	start := time.Now()
	err := f()
	return err, time.Since(start)
}

// testCancel: long calls cancelled after cancelAfter return the context's
// error within cancelSlack, and the next small call is prompt.
func testCancel(t *testing.T, e *attention.Engine) {
	small := newCall(1, 1, 1, 16, 16, 16, false, 1)
	if err := small.forward(context.Background(), e); err != nil { // compile its pipelines
		t.Fatal(err)
	}
	long := newLongCall(e)
	passes := []struct {
		name string
		run  func(context.Context, *attention.Engine) error
	}{{"forward", long.forward}, {"backward", long.backward}}
	// On Vulkan each pass runs once to its end first, building every
	// pipeline it dispatches: lavapipe compiles a pipeline at its first
	// dispatch (seconds on a loaded machine, more with a cold shader
	// cache), which would otherwise land in the measured call's chunk. A
	// run cancelled early is not enough: it dispatches only its first
	// chunks' pipelines (a backward's later ones took 1.8 s in a measured
	// chunk). The CPU backend has nothing to build.
	if e.Info().Vulkan != nil {
		for _, pass := range passes {
			if err := pass.run(context.Background(), e); err != nil {
				t.Fatalf("%s, run to its end before the cancelled ones: %v", pass.name, err)
			}
		}
	}
	for _, pass := range passes {
		ctx, cancel := context.WithTimeout(context.Background(), cancelAfter)
		err, took := timed(func() error { return pass.run(ctx, e) })
		cancel()
		t.Logf("%s cancelled after %v: returned after %v: %v", pass.name, cancelAfter, took, err)
		if err == nil {
			t.Logf("%s: finished before its cancellation; nothing to check", pass.name)
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want the context's error", pass.name, err)
		}
		if took > cancelAfter+cancelSlack {
			t.Errorf("%s: returned %v after its cancellation", pass.name, took-cancelAfter)
		}
		err, took = timed(func() error { return small.forward(context.Background(), e) })
		t.Logf("the next small call: %v", took)
		if err != nil {
			t.Fatal(err)
		}
		if took > cancelSlack {
			t.Errorf("the small call after the cancelled %s took %v", pass.name, took)
		}
	}
}

// testCloseDuringCall: Close while a long call runs returns within
// cancelSlack, and the call fails with ErrClosed.
func testCloseDuringCall(t *testing.T, e *attention.Engine) {
	long := newLongCall(e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- long.forward(ctx, e) }()
	time.Sleep(cancelAfter)
	err, took := timed(e.Close)
	if err != nil {
		t.Errorf("Close: %v", err)
	}
	callErr := <-done
	t.Logf("Close during the call: %v; the call: %v", took, callErr)
	if took > cancelSlack {
		t.Errorf("Close during a call took %v", took)
	}
	if callErr != nil && !errors.Is(callErr, attention.ErrClosed) {
		t.Errorf("the call stopped by Close: %v, want ErrClosed", callErr)
	}
	if err := long.forward(context.Background(), e); !errors.Is(err, attention.ErrClosed) {
		t.Errorf("call after Close: %v", err)
	}
}

func openCPU(t *testing.T) *attention.Engine {
	t.Helper()
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestCancelCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates seconds of work")
	}
	testCancel(t, openCPU(t))
}

func TestCancelCloseDuringCallCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates seconds of work")
	}
	testCloseDuringCall(t, openCPU(t))
}

func TestCancelVulkan(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates seconds of work")
	}
	testCancel(t, openVulkan(t, ""))
}

// TestCancelChunkedBitsVulkan: a call long enough to be split into
// submissions (a cancellable context, work beyond one chunk) gives the
// bits of the same call in one submission (a context that cannot be
// cancelled).
func TestCancelChunkedBitsVulkan(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of work on lavapipe")
	}
	e := openVulkan(t, "")
	n := 512
	if info := e.Info().Vulkan; info != nil && !info.Software {
		n = 8192
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, causal := range []bool{false, true} {
		a, b := newCall(2, 4, 2, n, n-37, 64, causal, 7), newCall(2, 4, 2, n, n-37, 64, causal, 7)
		for _, r := range []struct {
			c   *longCall
			ctx context.Context
		}{{a, context.Background()}, {b, ctx}} {
			err, took := timed(func() error {
				if err := r.c.forward(r.ctx, e); err != nil {
					return err
				}
				return r.c.backward(r.ctx, e)
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("causal %v, cancellable %v: %v", causal, r.ctx.Done() != nil, took)
		}
		for _, o := range []struct {
			name string
			x, y []float32
		}{{"o", a.o.Float32s(), b.o.Float32s()}, {"lse", a.lse, b.lse}, {"dq", a.dq.Float32s(), b.dq.Float32s()},
			{"dk", a.dk.Float32s(), b.dk.Float32s()}, {"dv", a.dv.Float32s(), b.dv.Float32s()}} {
			if !slicesEqualBits(o.x, o.y) {
				t.Errorf("causal %v: %s of the chunked call differs from one submission", causal, o.name)
			}
		}
	}
}

func slicesEqualBits(a, b []float32) bool {
	x, y := bitsOf(a), bitsOf(b)
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}
