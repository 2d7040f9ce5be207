//go:build cgo

package vkattn

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/spec"
)

// BenchOptions control Bench.
type BenchOptions struct {
	// Warmup untimed submissions run first (default 3; negative: none).
	// Warm-up continues past Warmup until MinWarmup has elapsed, so that
	// short kernels are timed at steady GPU clocks.
	Warmup int
	// MinWarmup is the least host time spent warming up (default 500 ms;
	// negative: none); at most 1000 extra submissions are made for it.
	MinWarmup time.Duration
	// Retries is how many times a timed series with a step (see Steady)
	// is discarded and timed again (default 2; negative: never).
	Retries int
	// PerKernel also times each dispatch (a barrier and a timestamp after
	// every kernel: kernels that could overlap are serialised) into
	// BenchResult.Kernels.
	PerKernel bool
	// Iters timed submissions follow (default 20).
	Iters int
	// Rotate is the number of input sets BenchmarkHost uploads and cycles
	// through (default 1; Bench cycles through the sets it is given).
	Rotate int
	// Backward times the backward (bwd_pre, bwd_dkdv, bwd_dq) instead of
	// the forward; Step times forward + backward in one submission.
	Backward, Step bool
}

func (o BenchOptions) withDefaults() BenchOptions {
	if o.Warmup < 0 {
		o.Warmup = 0
	} else if o.Warmup == 0 {
		o.Warmup = 3
	}
	if o.Iters <= 0 {
		o.Iters = 20
	}
	if o.Rotate <= 0 {
		o.Rotate = 1
	}
	if o.MinWarmup == 0 {
		o.MinWarmup = 500 * time.Millisecond
	}
	if o.Retries == 0 {
		o.Retries = 2
	} else if o.Retries < 0 {
		o.Retries = 0
	}
	return o
}

// BenchResult are per-iteration kernel times.
type BenchResult struct {
	Times []time.Duration
	// Clock is "gpu-timestamps", or "wall" (host time of each submission)
	// on devices whose compute queue has no timestamps.
	Clock string
	// Retimed counts the timed series discarded because they had a step;
	// Unsteady says the kept series still has one (report it, do not trust
	// its median).
	Retimed  int
	Unsteady bool
	// Kernels are the per-dispatch times (BenchOptions.PerKernel), in
	// recording order.
	Kernels []KernelTimes
}

// KernelTimes are one dispatch's times, one per timed iteration; Name is
// its pipeline's name (kernel, dtype and configuration).
type KernelTimes struct {
	Name  string
	Times []time.Duration
}

// addKernelTimes appends one iteration's per-dispatch times: the time from
// each timestamp to the next, labelled by the later one ("end" excluded).
func (res *BenchResult) addKernelTimes(st []device.Timestamp) {
	var k int
	for i := 1; i < len(st); i++ {
		if st[i].Label == "end" {
			continue
		}
		if k == len(res.Kernels) {
			res.Kernels = append(res.Kernels, KernelTimes{Name: st[i].Label})
		}
		res.Kernels[k].Times = append(res.Kernels[k].Times, st[i].Time-st[i-1].Time)
		k++
	}
}

// Steady reports whether a timed series has no step: the median of its
// first quarter is within 20% of the median of its last quarter. On the
// H200 the GPU leaves a low clock state in one step some 0.1–0.5 s after
// work resumes (bench/NOTES.md): the kernel runs 3–5× slower until then
// and at full speed after, which a warm-up of fixed length does not always
// cover.
func Steady(times []time.Duration) bool {
	n := len(times) / 4
	if n < 2 {
		return true
	}
	med := func(x []time.Duration) time.Duration {
		s := slices.Clone(x)
		slices.Sort(s)
		return s[len(s)/2]
	}
	a, b := med(times[:n]), med(times[len(times)-n:])
	return float64(a) <= 1.2*float64(b) && float64(b) <= 1.2*float64(a)
}

// Bench times the forward (or backward, or step) of p on resident input
// sets, cycling through them: one submission per iteration, each with a
// GPU timestamp before the first kernel and after the last; the result
// is the time between the two. Warm-up submissions (at least o.Warmup,
// and for at least o.MinWarmup) are not timed.
func (b *Backend) Bench(ctx context.Context, p *spec.Problem, sets []Operands, o BenchOptions) (*BenchResult, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.leave()
	o = o.withDefaults()
	if len(sets) == 0 {
		return nil, fmt.Errorf("%w: bench: no input sets", ErrInvalid)
	}
	var dt spec.DType
	for i := range sets {
		d, release, err := b.acquire(p, sets[i].bindings(p, o.Step || !o.Backward, o.Step || o.Backward))
		if err != nil {
			return nil, fmt.Errorf("bench: set %d: %w", i, err)
		}
		defer release()
		dt = d
	}
	pls, err := b.passes(ctx, p, dt, o.Step || !o.Backward, o.Step || o.Backward)
	if err != nil {
		return nil, err
	}
	s := &scratch{b: b}
	ok := true
	defer func() { s.done(ok) }()
	recs := make([]*device.Recorder, len(sets))
	for i, set := range sets {
		r := b.dev.Record()
		r.Timestamp("start")
		r.StampDispatches(o.PerKernel)
		if err := b.recordPasses(r, s, p, pls, set.bufs()); err != nil {
			return nil, err
		}
		r.Timestamp("end")
		recs[i] = r
	}
	next := 0
	return b.timeSubmissions(o, func() (*device.Result, error) {
		out, err := b.dev.Submit(ctx, recs[next%len(recs)])
		next++
		if err != nil {
			ok = !submitted(err)
			return nil, fmt.Errorf("vkattn: bench: %w", err)
		}
		return out, nil
	})
}

// timeSubmissions runs submit (one recorded submission between the
// timestamps "start" and "end") o.Warmup times (and for at least
// o.MinWarmup) untimed, then o.Iters times timed, again up to o.Retries
// times while the series has a step (Steady).
func (b *Backend) timeSubmissions(o BenchOptions, submit func() (*device.Result, error)) (*BenchResult, error) {
	res := &BenchResult{Clock: "gpu-timestamps"}
	if b.info.TimestampValidBits == 0 {
		res.Clock = "wall"
	}
	start := time.Now()
	for i := 0; i < o.Warmup || (time.Since(start) < o.MinWarmup && i < o.Warmup+1000); i++ {
		if _, err := submit(); err != nil {
			return nil, err
		}
	}
	for attempt := 0; ; attempt++ {
		res.Times, res.Kernels = res.Times[:0], nil
		for range o.Iters {
			out, err := submit()
			if err != nil {
				return nil, err
			}
			t := out.Wall()
			if res.Clock != "wall" {
				t = out.Elapsed("start", "end")
			}
			res.Times = append(res.Times, t)
			if o.PerKernel {
				res.addKernelTimes(out.Timestamps())
			}
		}
		if Steady(res.Times) {
			return res, nil
		}
		if attempt == o.Retries {
			res.Unsteady = true
			return res, nil
		}
		res.Retimed++
	}
}

// BenchmarkHost uploads o.Rotate copies of the inputs (q, k, v, and for
// the backward o, lse and do; do also for the step) into separate resident
// tensors, allocates the outputs once, and runs Bench. Host transfers are
// not timed.
func BenchmarkHost[T Elem](ctx context.Context, b *Backend, p *spec.Problem, o BenchOptions, q, k, v, out, do []T, lse []float32, x HostBias) (*BenchResult, error) {
	o = o.withDefaults()
	if err := CheckProblem(p); err != nil {
		return nil, err
	}
	ts := &tensorSet{b: b, p: p, dt: dtypeOf[T]()}
	defer ts.free()
	fwd, bwd := o.Step || !o.Backward, o.Step || o.Backward
	ins, outs := passOperands(p, fwd, bwd)
	data := map[Operand][]T{OpQ: q, OpK: k, OpV: v, OpO: out, OpDO: do}
	var shared Operands
	for _, op := range outs {
		t, err := ts.alloc(op)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		shared[op] = t
	}
	sets := make([]Operands, o.Rotate)
	for i := range sets {
		sets[i] = shared
		for _, op := range ins {
			t, err := ts.alloc(op)
			if err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
			switch op {
			case OpLSE:
				err = uploadOp(ctx, t, lse)
			case OpBias:
				err = uploadBias[T](ctx, t, x.Bias)
			default:
				err = uploadOp(ctx, t, data[op])
			}
			if err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
			sets[i][op] = t
		}
	}
	return b.Bench(ctx, p, sets, o)
}
