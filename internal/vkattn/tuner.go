//go:build cgo

package vkattn

// The tuner: for each key, every legal candidate of each active family is
// verified against the float64 reference on a small awkward problem, then
// timed with GPU timestamps (Bench) on a representative one; the fastest
// verified candidate wins.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

// TuneOptions control Tune. Zero fields take the defaults noted.
type TuneOptions struct {
	// DTypes to tune (default: spec.Float16 and spec.Float32 where the device runs them).
	DTypes []spec.DType
	// Dims are the head dims d (= dv) to tune (default 64 and 128).
	Dims []int
	// Causal lists the masks to tune (default non-causal and causal).
	Causal []bool
	// Dirs are Fwd and/or Bwd (default both).
	Dirs []Dir
	// The timed problem: N = Nq = Nk (default 2048), B = Tokens/N
	// (Tokens default 16384), H = Hidden/d heads (Hidden default 2048):
	// the FlashAttention-2 benchmark grid's shape at N.
	N, Tokens, Hidden int
	// Bench times each candidate (defaults: Warmup 3, MinWarmup 100 ms,
	// Iters 10; Backward is set by the direction).
	Bench BenchOptions
	// MaxCandidates bounds the candidates tried per key and family, the
	// default configuration included (0: all).
	MaxCandidates int
	// Stages restricts tuning to these tunable stages (default: all).
	Stages []string
	// Reference computes the float64 results candidates are verified
	// against (required): O and LSE of the forward, or with backward dQ,
	// dK and dV given dO. It is injected so that the backend does not link
	// a float64 implementation.
	Reference Reference
	// Budget bounds the search's time (0: none). Once spent, the family
	// in progress is decided among the candidates measured so far
	// (TuneResult.Tried < Candidates) and the remaining keys are not
	// tuned: Tune returns what it has and an error wrapping
	// ErrTuneBudget.
	Budget time.Duration
	// Seed of the random inputs.
	Seed uint64
	// Progress, when set, receives an event per candidate.
	Progress func(TuneEvent)

	deadline time.Time
}

func (o *TuneOptions) spent() bool { return !o.deadline.IsZero() && time.Now().After(o.deadline) }

// Reference computes exact results of a small problem p from float64
// inputs (laid out densely as BSHD): the forward's O and LSE, or with
// backward the gradients dQ, dK, dV of dO.
type Reference func(p *spec.Problem, q, k, v, do []float64, backward bool) ([][]float64, error)

// ErrTuneBudget: TuneOptions.Budget ran out before every key was tuned.
var ErrTuneBudget = errors.New("vkattn: tune: time budget spent")

// Candidate outcomes (TuneEvent.Status).
const (
	TuneTimed    = "timed"    // verified and timed
	TuneRejected = "rejected" // failed verification (wrong results): never chosen
	TuneFailed   = "failed"   // could not run (pipeline creation, device error)
	// TuneConfirm reports the re-timing of the default (DefaultMedian)
	// and the winner (Median) that decides between them.
	TuneConfirm = "confirm"
)

// TuneEvent reports one candidate.
type TuneEvent struct {
	Key          TuneKey
	N            int
	Candidate    string
	Default      bool // the configuration used without tuning
	Index, Count int  // 1-based position among the key's candidates
	Status       string
	// RelL2 is the worst rel_l2 against the float64 reference on the
	// verification problem, Bound the limit it had to meet.
	RelL2, Bound float64
	Err          error
	Median       time.Duration
	TFLOPS       float64
	// DefaultMedian is the default's time in a TuneConfirm event.
	DefaultMedian time.Duration
}

// TuneResult is the outcome of one key and family.
type TuneResult struct {
	Key     TuneKey
	N, B, H int
	// Default and DefaultTime: the untuned configuration and its median
	// (0 when it was not timed).
	Default     string
	DefaultTime time.Duration
	// Winner is the fastest verified candidate ("" when none verified).
	Winner     string
	WinnerTime time.Duration
	TFLOPS     float64
	Events     []TuneEvent
	// Candidates is the number of candidates of the search, Tried how
	// many were tried (fewer when TuneOptions.Budget ran out).
	Candidates, Tried int
	// Err says why the key could not be tuned (then Winner is "").
	Err error
}

// Speedup is DefaultTime / WinnerTime (0 when unknown).
func (r *TuneResult) Speedup() float64 {
	if r.DefaultTime <= 0 || r.WinnerTime <= 0 {
		return 0
	}
	return float64(r.DefaultTime) / float64(r.WinnerTime)
}

// tuneTestHook, set by tests, may replace a candidate's verification error
// (to simulate a kernel that computes wrong results).
var tuneTestHook func(c Candidate, relL2 float64) float64

// tuneNoise: a candidate must beat the default by this factor to replace
// it (timing noise must not replace a good default).
const tuneNoise = 1.02

// VerifyProblem is the small awkward problem candidates are verified on
// for head dims d, dv: two query heads sharing one key/value head, Nq and
// Nk not multiples of any tile and Nq ≠ Nk, causal bottom-right when
// causal.
func VerifyProblem(d, dv int, causal bool) *spec.Problem {
	const nq, nk = 150, 203
	p := &spec.Problem{B: 1, Hq: 2, Hkv: 1, Nq: nq, Nk: nk, D: d, Dv: dv,
		Scale: float32(1 / math.Sqrt(float64(d))),
		Q:     spec.BSHD(nq, 2, d), K: spec.BSHD(nk, 1, d), V: spec.BSHD(nk, 1, dv), O: spec.BSHD(nq, 2, dv)}
	if causal {
		p.Mask = spec.MaskCausalBottomRight
	}
	return p
}

// TuneProblem is the timed problem of a key: Nq = Nk = n, B = tokens/n,
// H = hidden/d, BSHD, causal top-left when causal.
func TuneProblem(d, dv, n, tokens, hidden int, causal bool) *spec.Problem {
	b := max(tokens/n, 1)
	h := max(hidden/d, 1)
	p := &spec.Problem{B: b, Hq: h, Hkv: h, Nq: n, Nk: n, D: d, Dv: dv,
		Scale: float32(1 / math.Sqrt(float64(d))),
		Q:     spec.BSHD(n, h, d), K: spec.BSHD(n, h, d), V: spec.BSHD(n, h, dv), O: spec.BSHD(n, h, dv)}
	if causal {
		p.Mask = spec.MaskCausalTopLeft
	}
	return p
}

func (o TuneOptions) withDefaults(b *Backend) TuneOptions {
	if len(o.DTypes) == 0 {
		for _, dt := range []spec.DType{spec.Float16, spec.Float32} {
			if b.supports(dt) == nil {
				o.DTypes = append(o.DTypes, dt)
			}
		}
	}
	if len(o.Dims) == 0 {
		o.Dims = []int{64, 128}
	}
	if len(o.Causal) == 0 {
		o.Causal = []bool{false, true}
	}
	if len(o.Dirs) == 0 {
		o.Dirs = []Dir{Fwd, Bwd}
	}
	if o.N <= 0 {
		o.N = 2048
	}
	if o.Tokens <= 0 {
		o.Tokens = 16384
	}
	if o.Hidden <= 0 {
		o.Hidden = 2048
	}
	if o.Bench.Iters <= 0 {
		o.Bench.Iters = 10
	}
	if o.Bench.MinWarmup == 0 {
		o.Bench.MinWarmup = 100 * time.Millisecond
	}
	return o
}

// Tune searches, for every key TuneOptions describe, the fastest verified
// configuration of each tunable family the Backend would run, and returns
// one result per key and family (store them with TuneCache.Put and Save).
// It runs on a private Backend on the same device (without the tune
// cache), so b's own choices are unaffected. An error is returned only for
// bad options and cancellation; per-key failures are in the results.
func (b *Backend) Tune(ctx context.Context, o TuneOptions) ([]TuneResult, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.leave()
	o = o.withDefaults(b)
	for _, dir := range o.Dirs {
		if dir != Fwd && dir != Bwd {
			return nil, fmt.Errorf("%w: tune direction %d (want Fwd or Bwd)", ErrInvalid, dir)
		}
	}
	if o.Reference == nil {
		return nil, fmt.Errorf("%w: tune: no Reference to verify candidates against", ErrInvalid)
	}
	for _, d := range o.Dims {
		if d < 1 || d > shaders.MaxHeadDim {
			return nil, fmt.Errorf("%w: tune head dim %d (1 … %d)", ErrInvalid, d, shaders.MaxHeadDim)
		}
	}
	for _, name := range o.Stages {
		if tunableByName(name) == nil {
			return nil, fmt.Errorf("%w: tune stage %q (known: %s)", ErrInvalid, name, strings.Join(TunableNames(), ", "))
		}
	}
	for _, dt := range o.DTypes {
		if err := b.supports(dt); err != nil {
			return nil, err
		}
		if dt != spec.Float32 && dt != spec.Float16 {
			return nil, fmt.Errorf("%w: tuning %v storage is not supported (f32, f16)", ErrUnsupported, dt)
		}
	}
	kernel := ""
	if b.explicit != nil {
		kernel = b.explicit.name
	}
	tb, err := New(b.dev, Options{Kernel: kernel, NoDiskCache: true})
	if err != nil {
		return nil, err
	}
	defer tb.Close()
	if o.Budget > 0 {
		o.deadline = time.Now().Add(o.Budget)
	}
	var out []TuneResult
	for _, dt := range o.DTypes {
		for _, d := range o.Dims {
			for _, causal := range o.Causal {
				for _, dir := range o.Dirs {
					if o.spent() {
						return out, fmt.Errorf("%w (%v) before %v d=%d causal=%v %s", ErrTuneBudget, o.Budget, dt, d, causal, dir)
					}
					rs, err := tb.tuneKey(ctx, o, dt, d, causal, dir)
					out = append(out, rs...)
					if err != nil {
						return out, err
					}
				}
			}
		}
	}
	return out, nil
}

// planUses reports whether the plan of the pass dir of p runs stage.
func (b *Backend) planUses(ctx context.Context, p *spec.Problem, dt spec.DType, dir Dir, stage string) bool {
	pl, err := b.Plan(ctx, p, dt, dir)
	return err == nil && slices.ContainsFunc(pl.Launches, func(l Launch) bool { return l.Tunable == stage })
}

// TunableNames lists the names of the tunable stages.
func TunableNames() []string {
	var ns []string
	for _, t := range Tunables() {
		ns = append(ns, t.Name)
	}
	return ns
}

// tuneKey tunes every stage the plans of one (dtype, d, causal, direction)
// run, on the private backend tb.
func (tb *Backend) tuneKey(ctx context.Context, o TuneOptions, dt spec.DType, d int, causal bool, dir Dir) ([]TuneResult, error) {
	defer tb.tune.clearOverrides()
	p := TuneProblem(d, d, o.N, o.Tokens, o.Hidden, causal)
	pv := VerifyProblem(d, d, causal)
	var fams []*Tunable
	for _, f := range Tunables() {
		if f.Dir != dir || (len(o.Stages) > 0 && !slices.Contains(o.Stages, f.Name)) {
			continue
		}
		if tb.planUses(ctx, p, dt, dir, f.Name) && tb.planUses(ctx, pv, dt, dir, f.Name) {
			fams = append(fams, f)
		}
	}
	if len(fams) == 0 && len(o.Stages) > 0 {
		return nil, ctx.Err() // filtered out
	}
	if len(fams) == 0 {
		// Say so rather than skip silently (e.g. a pass whose kernels no
		// family covers yet).
		var ks []string
		ls, err := tb.Launches(ctx, p, dt, dir == Bwd)
		for _, l := range ls {
			ks = append(ks, l.Kernel)
		}
		why := fmt.Sprintf("no tunable kernel family among the kernels it dispatches (%s)", strings.Join(ks, ", "))
		if err != nil {
			why = err.Error()
		}
		r := TuneResult{N: p.Nq, B: p.B, H: p.Hq, Key: TuneKey{Stage: "-", Dir: dir, DType: dt, D: d, DV: d, Causal: causal},
			Err: errors.New(why)}
		return []TuneResult{r}, ctx.Err()
	}
	base := TuneResult{N: p.Nq, B: p.B, H: p.Hq}
	fail := func(err error) ([]TuneResult, error) {
		var rs []TuneResult
		for _, f := range fams {
			r := base
			r.Key = tuneKeyOf(f, p, dt)
			r.Err = err
			rs = append(rs, r)
		}
		return rs, ctx.Err()
	}
	vc, err := tb.newVerifyCase(ctx, pv, dt, dir == Bwd, o.Seed, o.Reference)
	if err != nil {
		return fail(fmt.Errorf("verification problem: %w", err))
	}
	defer vc.close()
	set, closeSet, err := tb.timingOperands(ctx, p, dt, dir == Bwd, o.Seed)
	if err != nil {
		return fail(fmt.Errorf("timed problem: %w", err))
	}
	defer closeSet()
	bo := o.Bench
	bo.Backward, bo.Step = dir == Bwd, false
	flops := p.Flops()
	if dir == Bwd {
		flops *= 2.5
	}
	var rs []TuneResult
	for _, f := range fams {
		r := base
		r.Key = tuneKeyOf(f, p, dt)
		def, err := f.Default(ctx, tb, p, dt)
		if err != nil {
			r.Err = fmt.Errorf("default configuration: %w", err)
			rs = append(rs, r)
			continue
		}
		r.Default = def.String()
		cands := []Candidate{def}
		more, err := f.Candidates(ctx, tb, p, dt)
		if err != nil {
			r.Err = fmt.Errorf("candidates: %w", err)
			rs = append(rs, r)
			continue
		}
		for _, c := range more {
			if !slices.ContainsFunc(cands, func(x Candidate) bool { return x.String() == c.String() }) {
				cands = append(cands, c)
			}
		}
		if o.MaxCandidates > 0 && len(cands) > o.MaxCandidates {
			cands = cands[:o.MaxCandidates]
		}
		bound := math.NaN() // set by the default's verification
		r.Candidates = len(cands)
		for i, c := range cands {
			if err := ctx.Err(); err != nil {
				rs = append(rs, r)
				return rs, err
			}
			if i > 0 && o.spent() {
				break // decide among those measured
			}
			r.Tried++
			ev := TuneEvent{Key: r.Key, N: p.Nq, Candidate: c.String(), Default: i == 0, Index: i + 1, Count: len(cands)}
			tb.tune.setOverride(r.Key, c.String())
			err := f.Check(ctx, tb, pv, dt, c)
			if err == nil {
				err = f.Check(ctx, tb, p, dt, c)
			}
			if err != nil {
				ev.Status, ev.Err = TuneFailed, fmt.Errorf("not valid here: %w", err)
			} else {
				ev.RelL2, err = vc.run(ctx, tb)
				if tuneTestHook != nil && err == nil {
					ev.RelL2 = tuneTestHook(c, ev.RelL2)
				}
				switch {
				case err != nil:
					ev.Status, ev.Err = TuneFailed, err
				default:
					if i == 0 {
						bound = verifyBound(dt, ev.RelL2)
					}
					ev.Bound = bound
					if math.IsNaN(bound) {
						ev.Bound = verifyBound(dt, math.NaN())
					}
					if !(ev.RelL2 <= ev.Bound) {
						ev.Status = TuneRejected
						ev.Err = fmt.Errorf("wrong results: rel_l2 %.3g > %.3g against the float64 reference", ev.RelL2, ev.Bound)
					}
				}
			}
			if ev.Status == "" {
				res, err := tb.Bench(ctx, p, []Operands{set}, bo)
				if err != nil {
					ev.Status, ev.Err = TuneFailed, err
				} else {
					ev.Status, ev.Median = TuneTimed, median(res.Times)
					if ev.Median > 0 {
						ev.TFLOPS = flops / ev.Median.Seconds() / 1e12
					}
				}
			}
			if ctx.Err() != nil && ev.Status != TuneTimed {
				rs = append(rs, r)
				return rs, ctx.Err()
			}
			if i == 0 && ev.Status == TuneTimed {
				r.DefaultTime = ev.Median
			}
			if ev.Status == TuneTimed && (r.Winner == "" || ev.Median < r.WinnerTime) {
				r.Winner, r.WinnerTime, r.TFLOPS = ev.Candidate, ev.Median, ev.TFLOPS
			}
			r.Events = append(r.Events, ev)
			if o.Progress != nil {
				o.Progress(ev)
			}
		}
		// Confirm a new winner: time the default and the winner again,
		// back to back (load and clocks drift during a long search), and
		// decide on these times.
		if r.DefaultTime > 0 && r.Winner != "" && r.Winner != r.Default && ctx.Err() == nil {
			var ts [2]time.Duration
			for i, c := range []string{r.Default, r.Winner} {
				tb.tune.setOverride(r.Key, c)
				if res, err := tb.Bench(ctx, p, []Operands{set}, bo); err == nil {
					ts[i] = median(res.Times)
				}
			}
			if ts[0] > 0 && ts[1] > 0 {
				r.DefaultTime, r.WinnerTime = ts[0], ts[1]
				r.TFLOPS = flops / r.WinnerTime.Seconds() / 1e12
				ev := TuneEvent{Key: r.Key, N: p.Nq, Candidate: r.Winner, Status: TuneConfirm, Median: ts[1], TFLOPS: r.TFLOPS, DefaultMedian: ts[0]}
				r.Events = append(r.Events, ev)
				if o.Progress != nil {
					o.Progress(ev)
				}
			}
		}
		// Keep the default unless a candidate is clearly faster.
		if r.DefaultTime > 0 && r.Winner != r.Default && float64(r.DefaultTime) <= tuneNoise*float64(r.WinnerTime) {
			r.Winner, r.WinnerTime = r.Default, r.DefaultTime
			r.TFLOPS = flops / r.WinnerTime.Seconds() / 1e12
		}
		if r.Winner == "" {
			r.Err = errors.New("no candidate passed verification and timing")
			tb.tune.setOverride(r.Key, r.Default)
		} else {
			// Later families of this direction are tuned with this winner.
			tb.tune.setOverride(r.Key, r.Winner)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// verifyBound is the rel_l2 limit of a candidate: float32 storage 1e-5
// (the conformance suite's); float16 twice the default configuration's
// error (defErr; at least half an fp16 ulp at 1), and at most 1e-2.
func verifyBound(dt spec.DType, defErr float64) float64 {
	if dt == spec.Float32 {
		return 1e-5
	}
	if math.IsNaN(defErr) || defErr > 5e-3 {
		return 1e-2
	}
	return math.Max(2*defErr, 1.0/4096)
}

func median(ts []time.Duration) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	s := slices.Clone(ts)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// round rounds x to the storage type's precision.
func round(dt spec.DType, x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		switch dt {
		case spec.Float16:
			out[i] = float64(float16.Fromfloat32(float32(v)).Float32())
		default:
			out[i] = float64(float32(v))
		}
	}
	return out
}

func upload64(ctx context.Context, t *Tensor, x []float64) error {
	switch t.dt {
	case spec.Float32:
		s := make([]float32, len(x))
		for i, v := range x {
			s[i] = float32(v)
		}
		return Upload(ctx, t, s)
	case spec.Float16:
		s := make([]float16.Float16, len(x))
		for i, v := range x {
			s[i] = float16.Fromfloat32(float32(v))
		}
		return Upload(ctx, t, s)
	}
	return fmt.Errorf("%w: tuner: %v tensors", ErrUnsupported, t.dt)
}

func download64(ctx context.Context, t *Tensor, n int) ([]float64, error) {
	out := make([]float64, n)
	switch t.dt {
	case spec.Float32:
		s := make([]float32, n)
		if err := Download(ctx, t, s); err != nil {
			return nil, err
		}
		for i, v := range s {
			out[i] = float64(v)
		}
	case spec.Float16:
		s := make([]float16.Float16, n)
		if err := Download(ctx, t, s); err != nil {
			return nil, err
		}
		for i, v := range s {
			out[i] = float64(v.Float32())
		}
	default:
		return nil, fmt.Errorf("%w: tuner: %v tensors", ErrUnsupported, t.dt)
	}
	return out, nil
}

func randn64(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	return x
}

// verifyCase is a verification problem resident on the tuning backend,
// with its float64 reference.
type verifyCase struct {
	p                               *spec.Problem
	backward                        bool
	ts                              []*Tensor
	q, k, v, o, lse, do, dq, dk, dv *Tensor
	ref                             [][]float64 // fwd: O, LSE; bwd: dQ, dK, dV
}

func (tb *Backend) newVerifyCase(ctx context.Context, p *spec.Problem, dt spec.DType, backward bool, seed uint64, ref Reference) (_ *verifyCase, err error) {
	vc := &verifyCase{p: p, backward: backward}
	defer func() {
		if err != nil {
			vc.close()
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 0x7475_6e65))
	q := round(dt, randn64(rng, p.B*p.Nq*p.Hq*p.D))
	k := round(dt, randn64(rng, p.B*p.Nk*p.Hkv*p.D))
	v := round(dt, randn64(rng, p.B*p.Nk*p.Hkv*p.Dv))
	do := round(dt, randn64(rng, p.B*p.Nq*p.Hq*p.Dv))
	fwd, err := ref(p, q, k, v, nil, false)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	if len(fwd) != 2 {
		return nil, fmt.Errorf("%w: reference: %d forward results, want O and LSE", ErrInvalid, len(fwd))
	}
	o, lse := fwd[0], fwd[1]
	alloc := func(op operandSpec, dt spec.DType) (*Tensor, error) {
		if op.dt != 0 {
			dt = op.dt
		}
		t, err := tb.NewTensor(dt, op.shape, op.st)
		if err == nil {
			vc.ts = append(vc.ts, t)
		}
		return t, err
	}
	load := func(op operandSpec, x []float64) (*Tensor, error) {
		t, err := alloc(op, dt)
		if err != nil {
			return nil, err
		}
		return t, upload64(ctx, t, x)
	}
	if vc.q, err = load(qSpec(p, "q"), q); err != nil {
		return nil, err
	}
	if vc.k, err = load(kSpec(p, "k"), k); err != nil {
		return nil, err
	}
	if vc.v, err = load(vSpec(p, "v"), v); err != nil {
		return nil, err
	}
	if !backward {
		if vc.o, err = alloc(oSpec(p, "o"), dt); err != nil {
			return nil, err
		}
		if vc.lse, err = alloc(lseSpec(p), dt); err != nil {
			return nil, err
		}
		vc.ref = [][]float64{o, lse}
		return vc, nil
	}
	grads, err := ref(p, q, k, v, do, true)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	if len(grads) != 3 {
		return nil, fmt.Errorf("%w: reference: %d backward results, want dQ, dK and dV", ErrInvalid, len(grads))
	}
	vc.ref = grads
	if vc.o, err = load(oSpec(p, "o"), round(dt, o)); err != nil {
		return nil, err
	}
	if vc.lse, err = load(lseSpec(p), lse); err != nil {
		return nil, err
	}
	if vc.do, err = load(oSpec(p, "do"), do); err != nil {
		return nil, err
	}
	if vc.dq, err = alloc(qSpec(p, "dq"), dt); err != nil {
		return nil, err
	}
	if vc.dk, err = alloc(kSpec(p, "dk"), dt); err != nil {
		return nil, err
	}
	if vc.dv, err = alloc(vSpec(p, "dv"), dt); err != nil {
		return nil, err
	}
	return vc, nil
}

// run computes the case with tb's current configuration (outputs poisoned
// first) and returns the worst rel_l2 against the reference.
func (vc *verifyCase) run(ctx context.Context, tb *Backend) (float64, error) {
	outs := []*Tensor{vc.o, vc.lse}
	if vc.backward {
		outs = []*Tensor{vc.dq, vc.dk, vc.dv}
	}
	for _, t := range outs {
		word := uint32(0x7FC00000)
		if t.dt == spec.Float16 {
			word = 0x7E007E00
		}
		if err := t.Fill(ctx, word); err != nil {
			return 0, err
		}
	}
	var err error
	if vc.backward {
		err = tb.Backward(ctx, vc.p, vc.q, vc.k, vc.v, vc.o, vc.lse, vc.do, vc.dq, vc.dk, vc.dv)
	} else {
		err = tb.Forward(ctx, vc.p, vc.q, vc.k, vc.v, vc.o, vc.lse)
	}
	if err != nil {
		return 0, err
	}
	worst := 0.0
	for i, t := range outs {
		got, err := download64(ctx, t, len(vc.ref[i]))
		if err != nil {
			return 0, err
		}
		e := relL2(got, vc.ref[i])
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		worst = math.Max(worst, e)
	}
	return worst, nil
}

// relL2 is ‖got − want‖₂ / ‖want‖₂ over the finite entries of want
// (an infinite one must be matched exactly, else the error is +Inf; NaN on
// a length mismatch; the absolute error when want is zero).
func relL2(got, want []float64) float64 {
	if len(got) != len(want) {
		return math.NaN()
	}
	var num, den float64
	for i, w := range want {
		if math.IsInf(w, 0) {
			if got[i] != w {
				return math.Inf(1)
			}
			continue
		}
		d := got[i] - w
		num += d * d
		den += w * w
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

func (vc *verifyCase) close() {
	for _, t := range vc.ts {
		t.Close()
	}
	vc.ts = nil
}

// timingOperands uploads random inputs of p (and for the backward O and
// LSE from one forward) and allocates the outputs.
func (tb *Backend) timingOperands(ctx context.Context, p *spec.Problem, dt spec.DType, backward bool, seed uint64) (Operands, func(), error) {
	var ts []*Tensor
	closeAll := func() {
		for _, t := range ts {
			t.Close()
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x7469_6d65))
	alloc := func(op operandSpec) (*Tensor, error) {
		d := dt
		if op.dt != 0 {
			d = op.dt
		}
		t, err := tb.NewTensor(d, op.shape, op.st)
		if err == nil {
			ts = append(ts, t)
		}
		return t, err
	}
	load := func(op operandSpec) (*Tensor, error) {
		t, err := alloc(op)
		if err != nil {
			return nil, err
		}
		n := int(t.elems)
		return t, upload64(ctx, t, randn64(rng, n))
	}
	var s Operands
	var err error
	fail := func(err error) (Operands, func(), error) { closeAll(); return Operands{}, nil, err }
	if s.Q, err = load(qSpec(p, "q")); err != nil {
		return fail(err)
	}
	if s.K, err = load(kSpec(p, "k")); err != nil {
		return fail(err)
	}
	if s.V, err = load(vSpec(p, "v")); err != nil {
		return fail(err)
	}
	if s.O, err = alloc(oSpec(p, "o")); err != nil {
		return fail(err)
	}
	if s.LSE, err = alloc(lseSpec(p)); err != nil {
		return fail(err)
	}
	if !backward {
		return s, closeAll, nil
	}
	if err := tb.Forward(ctx, p, s.Q, s.K, s.V, s.O, s.LSE); err != nil {
		return fail(err)
	}
	if s.DO, err = load(oSpec(p, "do")); err != nil {
		return fail(err)
	}
	if s.DQ, err = alloc(qSpec(p, "dq")); err != nil {
		return fail(err)
	}
	if s.DK, err = alloc(kSpec(p, "dk")); err != nil {
		return fail(err)
	}
	if s.DV, err = alloc(vSpec(p, "dv")); err != nil {
		return fail(err)
	}
	return s, closeAll, nil
}
