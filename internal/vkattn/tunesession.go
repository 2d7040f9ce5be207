//go:build cgo

package vkattn

// A tuner's session on a Backend: a private Backend with the same device
// and kernel selection and no tuned configurations, on which the search
// (package attention's Engine.Tune) forces a configuration of a tunable
// stage, verifies it against a float64 reference and times it.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

// Reference computes exact results of a small problem p from float64
// inputs (laid out densely as BSHD): the forward's O and LSE, or with
// backward the gradients dQ, dK, dV of dO.
type Reference func(p *spec.Problem, q, k, v, do []float64, backward bool) ([][]float64, error)

// TuneSession is a tuner's private Backend (see the file comment); the
// Backend it came from is unaffected by what it forces.
type TuneSession struct{ tb *Backend }

// NewTuneSession opens a session on b's device with b's kernel selection.
func (b *Backend) NewTuneSession() (*TuneSession, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.leave()
	kernel := ""
	if b.explicit != nil {
		kernel = b.explicit.name
	}
	tb, err := New(b.dev, Options{Kernel: kernel, NoDiskCache: true})
	if err != nil {
		return nil, err
	}
	return &TuneSession{tb: tb}, nil
}

// Close releases the session's private Backend.
func (s *TuneSession) Close() error { return s.tb.Close() }

// Stages lists the tunable stages the plan of pass dir of p runs, in
// tuning order, and the kernels of that plan (for messages when none is
// tunable); the error is the plan's.
func (s *TuneSession) Stages(ctx context.Context, p *spec.Problem, dt spec.DType, dir Dir) (stages, kernels []string, err error) {
	pl, err := s.tb.Plan(ctx, p, dt, dir)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range pl.Launches {
		kernels = append(kernels, l.Kernel)
	}
	for _, t := range Tunables() {
		if t.Dir == dir && slices.ContainsFunc(pl.Launches, func(l Launch) bool { return l.Tunable == t.Name }) {
			stages = append(stages, t.Name)
		}
	}
	return stages, kernels, nil
}

func (s *TuneSession) tunable(stage string) (*Tunable, error) {
	if t := tunableByName(stage); t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("%w: tune stage %q (known: %v)", ErrInvalid, stage, TunableNames())
}

// Default is the configuration the plan uses for stage on p untuned.
func (s *TuneSession) Default(ctx context.Context, stage string, p *spec.Problem, dt spec.DType) (string, error) {
	t, err := s.tunable(stage)
	if err != nil {
		return "", err
	}
	c, err := t.Default(ctx, s.tb, p, dt)
	if err != nil {
		return "", err
	}
	return c.String(), nil
}

// Candidates lists the configurations of stage legal for p on the device,
// nearest the default first.
func (s *TuneSession) Candidates(ctx context.Context, stage string, p *spec.Problem, dt spec.DType) ([]string, error) {
	t, err := s.tunable(stage)
	if err != nil {
		return nil, err
	}
	cs, err := t.Candidates(ctx, s.tb, p, dt)
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out, err
}

// Check reports why configuration c of stage cannot run p here.
func (s *TuneSession) Check(ctx context.Context, stage string, p *spec.Problem, dt spec.DType, c string) error {
	t, err := s.tunable(stage)
	if err != nil {
		return err
	}
	cand, err := t.Parse(c)
	if err != nil {
		return err
	}
	return t.Check(ctx, s.tb, p, dt, cand)
}

// Force makes the session's plans use configuration c for stage on every
// problem of p's key (storage type, head dims, causal or not, options).
func (s *TuneSession) Force(stage string, p *spec.Problem, dt spec.DType, c string) {
	if t := tunableByName(stage); t != nil {
		s.tb.tune.setOverride(tuneKeyOf(t, p, dt), c)
	}
}

// Unforce returns every stage to its default.
func (s *TuneSession) Unforce() { s.tb.tune.clearOverrides() }

// Verifier is a verification problem resident on a session, with its
// float64 reference.
type Verifier struct {
	vc *verifyCase
	tb *Backend
}

// Verifier uploads random inputs of p (rounded to dt) and computes the
// reference of the pass (the backward's O and LSE from the reference's
// forward).
func (s *TuneSession) Verifier(ctx context.Context, p *spec.Problem, dt spec.DType, backward bool, seed uint64, ref Reference) (*Verifier, error) {
	vc, err := s.tb.newVerifyCase(ctx, p, dt, backward, seed, ref)
	if err != nil {
		return nil, err
	}
	return &Verifier{vc: vc, tb: s.tb}, nil
}

// Run computes the pass with the session's current configuration (outputs
// poisoned first) and returns the worst rel_l2 against the reference (+Inf
// for a NaN or a missed infinity).
func (v *Verifier) Run(ctx context.Context) (float64, error) { return v.vc.run(ctx, v.tb) }

// Close frees the verifier's tensors.
func (v *Verifier) Close() { v.vc.close() }

// Timer is a timed problem resident on a session.
type Timer struct {
	tb       *Backend
	p        *spec.Problem
	set      Operands
	backward bool
	free     func()
}

// Timer uploads random inputs of p (for the backward, O and LSE from one
// forward) and allocates its outputs.
func (s *TuneSession) Timer(ctx context.Context, p *spec.Problem, dt spec.DType, backward bool, seed uint64) (*Timer, error) {
	set, free, err := s.tb.timingOperands(ctx, p, dt, backward, seed)
	if err != nil {
		return nil, err
	}
	return &Timer{tb: s.tb, p: p, set: set, backward: backward, free: free}, nil
}

// Median times the pass with the session's current configuration (Bench
// with o, its Backward set by the timer) and returns the median.
func (t *Timer) Median(ctx context.Context, o BenchOptions) (time.Duration, error) {
	o.Backward, o.Step = t.backward, false
	res, err := t.tb.Bench(ctx, t.p, []Operands{t.set}, o)
	if err != nil {
		return 0, err
	}
	return median(res.Times), nil
}

// Close frees the timer's tensors.
func (t *Timer) Close() { t.free() }

// median is the median of ts (0 for none).
func median(ts []time.Duration) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	s := slices.Clone(ts)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
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
	p        *spec.Problem
	backward bool
	ts       *tensorSet
	ops      Operands
	outs     []Operand
	ref      [][]float64 // by output, in outs order: O, LSE or dQ, dK, dV
}

func (tb *Backend) newVerifyCase(ctx context.Context, p *spec.Problem, dt spec.DType, backward bool, seed uint64, ref Reference) (_ *verifyCase, err error) {
	vc := &verifyCase{p: p, backward: backward, ts: &tensorSet{b: tb, p: p, dt: dt}}
	defer func() {
		if err != nil {
			vc.close()
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 0x7475_6e65))
	vals := map[Operand][]float64{}
	for _, op := range []Operand{OpQ, OpK, OpV, OpDO} {
		s := opSpec(p, op).shape
		vals[op] = round(dt, randn64(rng, s.Len()))
	}
	fwd, err := ref(p, vals[OpQ], vals[OpK], vals[OpV], nil, false)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	if len(fwd) != 2 {
		return nil, fmt.Errorf("%w: reference: %d forward results, want O and LSE", ErrInvalid, len(fwd))
	}
	vc.ref = fwd
	if backward {
		vals[OpO], vals[OpLSE] = round(dt, fwd[0]), fwd[1]
		if vc.ref, err = ref(p, vals[OpQ], vals[OpK], vals[OpV], vals[OpDO], true); err != nil {
			return nil, fmt.Errorf("reference: %w", err)
		}
		if len(vc.ref) != 3 {
			return nil, fmt.Errorf("%w: reference: %d backward results, want dQ, dK and dV", ErrInvalid, len(vc.ref))
		}
	}
	in, out := passOperands(p, !backward, backward)
	for _, op := range in {
		if vc.ops[op], err = vc.ts.alloc(op); err != nil {
			return nil, err
		}
		if err := upload64(ctx, vc.ops[op], vals[op]); err != nil {
			return nil, err
		}
	}
	for _, op := range out {
		if vc.ops[op], err = vc.ts.alloc(op); err != nil {
			return nil, err
		}
	}
	vc.outs = out
	return vc, nil
}

// run computes the case with tb's current configuration (outputs poisoned
// first) and returns the worst rel_l2 against the reference.
func (vc *verifyCase) run(ctx context.Context, tb *Backend) (float64, error) {
	for _, op := range vc.outs {
		t := vc.ops[op]
		word := uint32(0x7FC00000)
		if t.dt == spec.Float16 {
			word = 0x7E007E00
		}
		if err := t.Fill(ctx, word); err != nil {
			return 0, err
		}
	}
	if err := tb.call(ctx, vc.p, !vc.backward, vc.backward, vc.ops); err != nil {
		return 0, err
	}
	worst := 0.0
	for i, op := range vc.outs {
		got, err := download64(ctx, vc.ops[op], len(vc.ref[i]))
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

func (vc *verifyCase) close() { vc.ts.free() }

// timingOperands uploads random inputs of p (for the backward, O and LSE
// from one forward) and allocates the outputs.
func (tb *Backend) timingOperands(ctx context.Context, p *spec.Problem, dt spec.DType, backward bool, seed uint64) (Operands, func(), error) {
	ts := &tensorSet{b: tb, p: p, dt: dt}
	rng := rand.New(rand.NewPCG(seed, 0x7469_6d65))
	var s Operands
	fail := func(err error) (Operands, func(), error) { ts.free(); return Operands{}, nil, err }
	random := func(ops ...Operand) error {
		for _, op := range ops {
			t, err := ts.alloc(op)
			if err != nil {
				return err
			}
			if err := upload64(ctx, t, randn64(rng, int(t.elems))); err != nil {
				return err
			}
			s[op] = t
		}
		return nil
	}
	allocs := func(ops ...Operand) error {
		for _, op := range ops {
			t, err := ts.alloc(op)
			if err != nil {
				return err
			}
			s[op] = t
		}
		return nil
	}
	if err := random(OpQ, OpK, OpV); err != nil {
		return fail(err)
	}
	if err := allocs(OpO, OpLSE); err != nil {
		return fail(err)
	}
	if !backward {
		return s, ts.free, nil
	}
	if err := tb.Forward(ctx, p, s[OpQ], s[OpK], s[OpV], s[OpO], s[OpLSE]); err != nil {
		return fail(err)
	}
	if err := random(OpDO); err != nil {
		return fail(err)
	}
	if err := allocs(OpDQ, OpDK, OpDV); err != nil {
		return fail(err)
	}
	return s, ts.free, nil
}
