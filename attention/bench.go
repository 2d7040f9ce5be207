package attention

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flashvk/flashvk/internal/spec"
)

// BenchOptions control Engine.Benchmark.
type BenchOptions struct {
	// Warmup calls run first and are not timed (default 3).
	Warmup int
	// Iters timed calls follow (default 20).
	Iters int
	// Backward times the backward pass instead of the forward.
	Backward bool
	// Rotate cycles through this many independent input sets so caches do
	// not flatter the timing (default 1; backends keep them resident).
	Rotate int
	// PerKernel also times every kernel of the call (Vulkan only; a
	// barrier and a timestamp after each dispatch, so kernels that could
	// overlap run one after the other) into BenchResult.Kernels.
	PerKernel bool
}

func (o BenchOptions) withDefaults() BenchOptions {
	orDefault(&o.Warmup, 3)
	orDefault(&o.Iters, 20)
	orDefault(&o.Rotate, 1)
	return o
}

// orDefault sets *v to def when it is not positive.
func orDefault(v *int, def int) {
	if *v <= 0 {
		*v = def
	}
}

// BenchResult is the timing of one problem.
type BenchResult struct {
	// Times are the per-call kernel times in call order.
	Times []time.Duration
	// Clock says how they were taken: "gpu-timestamps" (device timestamp
	// queries around the kernels, no host transfers) or "wall" (host clock
	// around the whole call).
	Clock string
	// Flops is the call's FLOP count (FlashAttention convention: forward
	// 4·B·Hq·Nq·Nk·d, halved when causal; backward 2.5× that).
	Flops float64
	// Retimed counts timed series the backend discarded because they had
	// a step (a clock change during timing); Unsteady says the kept series
	// still has one, so its median is not a steady-state time.
	Retimed  int
	Unsteady bool
	// Kernels are the per-kernel times (BenchOptions.PerKernel), in
	// dispatch order; nil otherwise and on the CPU backend.
	Kernels []KernelTimes
}

// KernelTimes are one kernel's times, one per timed call; Name is the
// dispatch's Launch.Name (kernel, dtype, configuration and head dims).
type KernelTimes struct {
	Name  string
	Times []time.Duration
}

// Median is the median time.
func (r *BenchResult) Median() time.Duration { return r.Quantile(0.5) }

// Quantile returns the q-quantile (0…1) of the times (nearest rank).
func (r *BenchResult) Quantile(q float64) time.Duration {
	if len(r.Times) == 0 {
		return 0
	}
	s := slices.Clone(r.Times)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[min(max(i, 0), len(s)-1)]
}

// TFLOPS is Flops over the median time, in 10¹² FLOP/s.
func (r *BenchResult) TFLOPS() float64 {
	m := r.Median()
	if m <= 0 {
		return 0
	}
	return r.Flops / m.Seconds() / 1e12
}

// benchmarker is implemented by backends that time kernels themselves (the
// Vulkan backend keeps inputs resident and reads GPU timestamps).
type benchmarker interface {
	Benchmark(ctx context.Context, p *spec.Problem, a *backwardArgs, o BenchOptions) (*BenchResult, error)
}

// Benchmark times the forward (or, with o.Backward, the backward) of the
// problem given by q, k, v and opt. Inputs other than q, k, v (dO) are drawn
// by the engine. Backends without their own timer are timed by the host
// clock around each call.
func (e *Engine) Benchmark(ctx context.Context, q, k, v Tensor, opt Options, o BenchOptions) (*BenchResult, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	p, err := problem(q, k, v, Tensor{}, nil, opt, false)
	if err != nil {
		return nil, err
	}
	if err := e.supports(q.DType()); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	out, err := e.Forward(ctx, q, k, v, opt)
	if err != nil {
		return nil, fmt.Errorf("attention: benchmark: %w", err)
	}
	p.O = out.O.strides()
	a := &backwardArgs{Q: q, K: k, V: v, O: out.O, LSE: out.LSE, DO: out.O}
	flops := p.Flops()
	if o.Backward {
		// Gradients share their primals' strides: time on dense copies.
		flops *= 2.5
		a = &backwardArgs{Q: densify(q), K: densify(k), V: densify(v), O: densify(out.O), LSE: out.LSE, DO: densify(out.O),
			DQ: zerosLike(q), DK: zerosLike(k), DV: zerosLike(v)}
		p.Q, p.K, p.V, p.O = a.Q.Strides, a.K.Strides, a.V.Strides, a.O.Strides
		if x := opt.Bias; x != nil && x.Grad {
			if a.DBias, err = NewTensor(x.Tensor.DType(), x.Tensor.Shape, BHSD); err != nil {
				return nil, err
			}
			bias, _, _ := hostBias(opt, false)
			if err := attachBias(p, q.DType(), bias, &biasView{a.DBias.Shape, a.DBias.Strides, bias.dt}); err != nil {
				return nil, err
			}
		}
	}
	if opt.Bias != nil {
		a.Bias = opt.Bias.Tensor
	}
	if bm, ok := e.b.(benchmarker); ok {
		r, err := bm.Benchmark(ctx, p, a, o)
		if err != nil {
			return nil, err
		}
		r.Flops = flops
		return r, nil
	}
	r := &BenchResult{Clock: "wall", Flops: flops}
	for i := range o.Warmup + o.Iters {
		start := time.Now()
		if o.Backward {
			err = e.b.Backward(ctx, p, a)
		} else {
			err = e.b.Forward(ctx, p, &forwardArgs{Q: a.Q, K: a.K, V: a.V, O: a.O, LSE: a.LSE, Bias: a.Bias})
		}
		if err != nil {
			return nil, err
		}
		if i >= o.Warmup {
			r.Times = append(r.Times, time.Since(start))
		}
	}
	return r, nil
}
