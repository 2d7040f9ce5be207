package attention

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/flashvk/flashvk/internal/spec"
)

// Per-device tile autotuning (the Vulkan backend): Engine.Tune searches,
// per key — storage type, head dims, causal or not, pass fwd|bwd — the
// launch configurations of every tunable stage the engine's kernel plan
// runs there. Each candidate legal within the device's limits is first
// verified against a float64 reference (TuneOptions.Reference) on a small
// awkward problem (a candidate with wrong results is rejected and never
// chosen), then timed with GPU timestamps on a representative problem;
// the default is kept unless a candidate is more than 2% faster when the
// two are timed again back to back. Results go to a TuneCache (tunecache.go),
// which Open reads (Config.TuneCache).

// TuneKey is what a tuned choice applies to on one device: the tunable
// stage (Family: "flash", "flash_cm", "bwd_dkdv", "bwd_dq", "bwd_cm_dkdv",
// "bwd_cm_dq"), the pass, the storage type ("f32", "f16"), the head dims,
// whether the mask is causal (either alignment) and the options beyond
// Scale, Causal and Align the problems carry (Options: "" for none, else
// their names joined by "+" in this order: window, keys (SeqUsedK), packed
// (CuSeqlens), softcap, alibi, dropout, bias — whatever their values).
// Entries of one key may exist for several sequence lengths; a problem
// uses the one nearest its Nq. A problem with options takes the entry of
// its own options; without one, the stages whose kernels have a variant
// of their own for options (flash_cm, bwd_cm_dkdv) keep their default,
// and the others take the entry without options.
type TuneKey struct {
	Family  string `json:"family"`
	Dir     string `json:"dir"`
	DType   string `json:"dtype"`
	D       int    `json:"d"`
	DV      int    `json:"dv"`
	Causal  bool   `json:"causal"`
	Options string `json:"options,omitempty"`
}

func (k TuneKey) String() string {
	mask := "non-causal"
	if k.Causal {
		mask = "causal"
	}
	d := fmt.Sprintf("d=%d", k.D)
	if k.DV != k.D {
		d += fmt.Sprintf(" dv=%d", k.DV)
	}
	s := fmt.Sprintf("%s %s %s %s", k.Dir, k.DType, d, mask)
	if k.Options != "" {
		s += " " + k.Options
	}
	return s + " " + k.Family
}

// ReferenceProblem describes a problem for a ReferenceFunc: the fields of
// package reference's Params that tuned problems use.
type ReferenceProblem struct {
	B, Hq, Hkv, Nq, Nk, D, Dv int
	// Scale multiplies QKᵀ (resolved: never 0 here).
	Scale  float64
	Causal bool
	// BottomRight selects the causal alignment (see Alignment); the
	// window and ALiBi measure from the same diagonal.
	BottomRight bool
	// Window, when set, limits query i to the keys from Left before its
	// diagonal to Right after it (−1: unbounded; with Causal, Right is 0).
	Window *Window
	// Softcap c > 0 caps each scaled score s to c·tanh(s/c) (0: off).
	Softcap float64
	// ALiBi are the slopes of ALiBi's bias, one per query head (nil:
	// none).
	ALiBi []float64
	// Dropout is the fraction of probabilities dropped, as applied (a
	// multiple of 2⁻⁸; 0: none), and DropoutSeed, DropoutOffset select
	// the mask (see Dropout).
	Dropout       float64
	DropoutSeed   uint64
	DropoutOffset uint32
}

// ReferenceFunc computes in float64 what a tune candidate is verified
// against, from dense BSHD inputs: the forward's O and LSE (backward
// false; do is nil), or the gradients dQ, dK, dV of dO (backward true).
// Package reference computes it (reference.Forward and reference.Backward);
// it is passed in so that programs that do not tune do not link it.
type ReferenceFunc func(p ReferenceProblem, q, k, v, do []float64, backward bool) ([][]float64, error)

// TuneOptions control Engine.Tune. Zero fields take the defaults noted.
type TuneOptions struct {
	// DTypes to tune (default: Float16 and Float32 where the device runs
	// them; bfloat16 uses float16's tuned tiles' defaults and is not tuned).
	DTypes []DType
	// Dims are the head dims d (= dv) to tune (default 64 and 128).
	Dims []int
	// Causal lists the masks to tune (default non-causal and causal).
	Causal []bool
	// Dirs are "fwd" and/or "bwd" (default both).
	Dirs []string
	// The timed problem: N = Nq = Nk (default 2048), B = Tokens/N
	// (default 16384 tokens), H = Hidden/d heads (default 2048): the
	// FlashAttention-2 benchmark grid's shape at N.
	N, Tokens, Hidden int
	// Warmup and Iters time each candidate (defaults 3 and 10; the warm-up
	// also lasts at least 100 ms — tuneFirstWarm before a key's first
	// timed candidate; Warmup < 0: none).
	Warmup, Iters int
	// MaxCandidates bounds the candidates tried per key and stage, the
	// default configuration included (0: all).
	MaxCandidates int
	// Families restricts tuning to these stages (default: all; see
	// TuneFamilies).
	Families []string
	// Features are the options beyond Scale, Causal and Align the tuned
	// problems carry (the zero value: none). Choices tuned with features
	// apply to calls with the same options (TuneKey.Options).
	Features TuneFeatures
	// Budget bounds the search's time (0: none). Once spent, the stage in
	// progress is decided among the candidates measured so far and the
	// remaining keys are not tuned: Tune returns what it has and an error
	// wrapping ErrTuneBudget.
	Budget time.Duration
	// Seed of the random inputs.
	Seed uint64
	// Progress, when set, receives an event per candidate.
	Progress func(TuneEvent)
	// Reference computes the float64 results candidates are verified
	// against (required).
	Reference ReferenceFunc
}

// TuneFeatures are the options a tune search's problems carry, as
// Options takes them; each one's values do not change the key it tunes
// (TuneKey.Options names the options only).
type TuneFeatures struct {
	// Window is a sliding window (with a causal key Right must be −1 or
	// 0). The verification problem (Nq 150, Nk 203) takes each side at
	// most 64, so that it stays a window there.
	Window *Window
	// Softcap c > 0 caps the scores (0: off).
	Softcap float32
	// ALiBi adds ALiBi's bias with the slopes of ALiBiSlopes for each
	// problem's query heads.
	ALiBi bool
	// Dropout is the probability P of dropping each attention
	// probability (0: none); the seed and offset are 0.
	Dropout float32
}

// options are f as Options for a problem of hq query heads, causal or
// not, whose diagonal is aligned by align.
func (f TuneFeatures) options(causal bool, align Alignment, hq int) Options {
	o := Options{Causal: causal, Align: align, Window: f.Window, Softcap: f.Softcap}
	if f.ALiBi {
		o.ALiBi = ALiBiSlopes(hq)
	}
	if f.Dropout != 0 {
		o.Dropout = &Dropout{P: f.Dropout}
	}
	return o
}

// verifyWindow is the widest window side of the verification problem.
const verifyWindow = 64

// apply sets f on p (a tuned or verification problem, whose mask says
// causal or not and the alignment); verify narrows the window's sides to
// verifyWindow. Errors wrap ErrOption.
func (f TuneFeatures) apply(p *spec.Problem, verify bool) error {
	align := TopLeft
	if p.Mask == spec.MaskCausalBottomRight {
		align = BottomRight
	}
	if verify && f.Window != nil {
		w := *f.Window
		narrow := func(x int) int {
			if x < 0 {
				return x
			}
			return min(x, verifyWindow)
		}
		w.Left, w.Right = narrow(w.Left), narrow(w.Right)
		f.Window = &w
	}
	e, err := f.options(p.Causal(), align, p.Hq).ext(p.B, p.Hq, p.Nq, p.Nk)
	if err != nil {
		return fmt.Errorf("attention: tune: features: %w", err)
	}
	p.Ext = e
	return nil
}

// referenceProblem is p as a ReferenceFunc takes it: the tuner's
// problems, with the options TuneFeatures gives (its Ext has no key
// counts, packed sequences or bias).
func referenceProblem(p *spec.Problem) ReferenceProblem {
	r := ReferenceProblem{B: p.B, Hq: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk, D: p.D, Dv: p.Dv,
		Scale: float64(p.Scale), Causal: p.Causal(), BottomRight: p.Mask == spec.MaskCausalBottomRight}
	e := p.Ext
	if e == nil {
		return r
	}
	r.BottomRight = e.BottomRight
	if e.Left >= 0 || e.Right >= 0 {
		r.Window = &Window{Left: e.Left, Right: e.Right}
	}
	r.Softcap = float64(e.Softcap)
	for _, s := range e.Slopes {
		r.ALiBi = append(r.ALiBi, float64(s))
	}
	if d := e.Dropout; d != nil {
		r.Dropout = float64(d.Threshold) / spec.DropLevels
		r.DropoutSeed, r.DropoutOffset = d.Seed, d.Offset
	}
	return r
}

// ErrTuneBudget: TuneOptions.Budget ran out before every key was tuned.
var ErrTuneBudget = errors.New("tune: time budget spent")

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

// TuneResult is the outcome of one key and stage.
type TuneResult struct {
	Device  DeviceKey
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
	// many were tried (fewer when the budget ran out).
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

// Entry is the cache entry of a successful result, dated now.
func (r *TuneResult) Entry() TuneEntry {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return TuneEntry{Device: r.Device, Key: r.Key, N: r.N, B: r.B, H: r.H, Candidate: r.Winner, Default: r.Default,
		MedianMS: ms(r.WinnerTime), DefaultMS: ms(r.DefaultTime), TFLOPS: r.TFLOPS,
		Date: time.Now().UTC().Format(time.RFC3339)}
}

// TuneInfo describes an engine's use of the tune cache.
type TuneInfo struct {
	// File is the cache file read at Open ("" when tuning is off or the
	// backend has no tunable kernels).
	File string
	// Off is true when the cache is disabled (Config.TuneCache "off" or
	// FLASHVK_TUNE=off).
	Off bool
	// Device is the engine's device key (zero on the CPU backend).
	Device DeviceKey
	// Entries are the cache's entries for this device and driver.
	Entries []TuneEntry
	// Warnings: a cache that could not be read (corrupt, another schema
	// version) and tuned configurations ignored because they are not valid
	// on this device.
	Warnings []string
}

// tuner is implemented by backends with tunable kernels.
type tuner interface {
	// tuneSession opens a private copy of the backend's kernel selection
	// without tuned configurations, for one search.
	tuneSession() (tuneSession, error)
	tuneInfo() TuneInfo
}

// tuneSession is what the search needs of a backend: the tunable stages a
// pass runs, their configurations, forcing one, and verifying and timing
// the pass with what is forced.
type tuneSession interface {
	// stages lists the tunable stages the plan of the pass runs for p, in
	// tuning order, and the kernels of that plan (for messages).
	stages(ctx context.Context, p *spec.Problem, dt DType, backward bool) (stages, kernels []string, err error)
	defaultOf(ctx context.Context, stage string, p *spec.Problem, dt DType) (string, error)
	candidates(ctx context.Context, stage string, p *spec.Problem, dt DType) ([]string, error)
	check(ctx context.Context, stage string, p *spec.Problem, dt DType, c string) error
	// force makes the session's plans use c for stage on problems of p's
	// key; unforce returns every stage to its default.
	force(stage string, p *spec.Problem, dt DType, c string)
	unforce()
	verifier(ctx context.Context, p *spec.Problem, dt DType, backward bool, seed uint64, ref ReferenceFunc) (tuneVerifier, error)
	timer(ctx context.Context, p *spec.Problem, dt DType, backward bool, seed uint64) (tuneTimer, error)
	deviceKey() DeviceKey
	close() error
}

// tuneVerifier runs the pass on a small problem and returns the worst
// rel_l2 of its outputs against the float64 reference.
type tuneVerifier interface {
	run(ctx context.Context) (float64, error)
	close()
}

// tuneWarm is the least warm-up before a candidate is timed, and
// tuneFirstWarm before the first of a key: that one follows the float64
// reference computed on the host, an idle stretch after which a GPU can
// take some 0.1–0.5 s to leave its low clock (an NVIDIA H200 timed the
// first of a key's candidates at 1.9–3× its re-timed median with 100 ms;
// bench warms up for 500 ms for the same reason).
const (
	tuneWarm      = 100 * time.Millisecond
	tuneFirstWarm = 500 * time.Millisecond
)

// tuneTimer times the pass on the representative problem: the median of
// iters timed runs after warmup (warmup < 0: none).
type tuneTimer interface {
	// median times the pass: warmup untimed runs lasting at least
	// minWarm (none when warmup < 0), then the median of iters runs.
	median(ctx context.Context, warmup, iters int, minWarm time.Duration) (time.Duration, error)
	close()
}

// Tune runs the tile search TuneOptions describe on the engine's device
// (on a private copy of its kernel selection without tuned
// configurations, so the engine's own choices are unaffected) and returns
// one result per key and stage; store the results with TuneCache.Put and
// Save. An error is returned for bad options, cancellation and a spent
// budget (with the results so far); per-key failures are in the results.
// The CPU backend has nothing to tune: ErrBackend.
func (e *Engine) Tune(ctx context.Context, o TuneOptions) ([]TuneResult, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	t, ok := e.b.(tuner)
	if !ok {
		return nil, fmt.Errorf("attention: tune: the %s backend has no tunable kernels: %w", e.b.Info().Name, ErrBackend)
	}
	o, err := e.tuneDefaults(o)
	if err != nil {
		return nil, err
	}
	s, err := t.tuneSession()
	if err != nil {
		return nil, err
	}
	defer s.close()
	var deadline time.Time
	if o.Budget > 0 {
		deadline = time.Now().Add(o.Budget)
	}
	var out []TuneResult
	for _, dt := range o.DTypes {
		for _, d := range o.Dims {
			for _, causal := range o.Causal {
				for _, dir := range o.Dirs {
					if !deadline.IsZero() && time.Now().After(deadline) {
						return out, fmt.Errorf("attention: tune: %w (%v) before %v d=%d causal=%v %s", ErrTuneBudget, o.Budget, dt, d, causal, dir)
					}
					p, pv, err := o.problems(d, causal)
					if err != nil {
						return out, err
					}
					k := keySearch{s: s, o: &o, deadline: deadline, dt: dt, backward: dir == "bwd", p: p, pv: pv}
					rs, err := k.run(ctx)
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

// tuneDefaults validates o and fills its defaults.
func (e *Engine) tuneDefaults(o TuneOptions) (TuneOptions, error) {
	if o.Reference == nil {
		return o, fmt.Errorf("attention: tune: options: no Reference to verify candidates against: %w", ErrOption)
	}
	for _, d := range o.Dims {
		if d < 1 || d > MaxHeadDim {
			return o, fmt.Errorf("attention: tune: options: head dim %d (1 … %d): %w", d, MaxHeadDim, ErrOption)
		}
	}
	for _, dir := range o.Dirs {
		if dir != "fwd" && dir != "bwd" {
			return o, fmt.Errorf("attention: tune: options: direction %q (want fwd or bwd): %w", dir, ErrOption)
		}
	}
	for _, dt := range o.DTypes {
		if err := e.supports(dt); err != nil {
			return o, err
		}
		if dt != Float32 && dt != Float16 {
			return o, fmt.Errorf("attention: tune: options: %v storage is not tuned (float32, float16): %w", dt, ErrDType)
		}
	}
	if len(o.DTypes) == 0 {
		for _, dt := range []DType{Float16, Float32} {
			if e.supports(dt) == nil {
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
		o.Dirs = []string{"fwd", "bwd"}
	}
	orDefault(&o.N, 2048)
	orDefault(&o.Tokens, 16384)
	orDefault(&o.Hidden, 2048)
	for _, causal := range o.Causal { // (refused before any key is tuned)
		for _, d := range o.Dims {
			if _, _, err := o.problems(d, causal); err != nil {
				return o, err
			}
		}
	}
	orDefault(&o.Iters, 10)
	if o.Warmup == 0 {
		o.Warmup = 3
	}
	return o, nil
}

// problems are the timed and the verification problem of head dim d,
// causal or not, with o.Features. Both must have the options of one key:
// a window whose sides reach past Nq + Nk of the timed problem is none
// there, which would tune it without one (ErrOption). (A window that
// hides no key but is narrower is tuned as a window; the CLI refuses
// it.)
func (o *TuneOptions) problems(d int, causal bool) (p, pv *spec.Problem, err error) {
	p, pv = tuneProblem(d, d, o.N, o.Tokens, o.Hidden, causal), verifyProblem(d, d, causal)
	if err := o.Features.apply(p, false); err != nil {
		return nil, nil, err
	}
	if err := o.Features.apply(pv, true); err != nil {
		return nil, nil, err
	}
	if p.Features() != pv.Features() {
		return nil, nil, fmt.Errorf("attention: tune: features: window %+v reaches every key of the timed problem (N %d): it would be tuned as %q, not %q: %w",
			*o.Features.Window, o.N, p.Features(), pv.Features(), ErrOption)
	}
	return p, pv, nil
}

// tuneNoise: a candidate must beat the default by this factor to replace
// it (timing noise must not replace a good default).
const tuneNoise = 1.02

// verifyProblem is the small awkward problem candidates are verified on
// for head dims d, dv: two query heads sharing one key/value head, Nq and
// Nk not multiples of any tile and Nq ≠ Nk, causal bottom-right when
// causal.
func verifyProblem(d, dv int, causal bool) *spec.Problem {
	const nq, nk = 150, 203
	p := &spec.Problem{B: 1, Hq: 2, Hkv: 1, Nq: nq, Nk: nk, D: d, Dv: dv,
		Scale: float32(1 / math.Sqrt(float64(d))),
		Q:     spec.BSHD(nq, 2, d), K: spec.BSHD(nk, 1, d), V: spec.BSHD(nk, 1, dv), O: spec.BSHD(nq, 2, dv)}
	if causal {
		p.Mask = spec.MaskCausalBottomRight
	}
	return p
}

// tuneProblem is the timed problem of a key: Nq = Nk = n, B = tokens/n,
// H = hidden/d, BSHD, causal top-left when causal.
func tuneProblem(d, dv, n, tokens, hidden int, causal bool) *spec.Problem {
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

// verifyBound is the rel_l2 limit of a candidate: float32 storage 1e-5
// (the conformance suite's); float16 twice the default configuration's
// error (defErr; at least half an fp16 ulp at 1), and at most 1e-2.
func verifyBound(dt DType, defErr float64) float64 {
	if dt == Float32 {
		return 1e-5
	}
	if math.IsNaN(defErr) || defErr > 5e-3 {
		return 1e-2
	}
	return math.Max(2*defErr, 1.0/4096)
}

// keySearch tunes every stage the plan of one key runs: the timed problem
// p, the verification problem pv, the pass and storage type.
type keySearch struct {
	s        tuneSession
	o        *TuneOptions
	deadline time.Time
	dt       DType
	backward bool
	p, pv    *spec.Problem
}

func (k *keySearch) spent() bool { return !k.deadline.IsZero() && time.Now().After(k.deadline) }

func (k *keySearch) key(stage string) TuneKey {
	dir := "fwd"
	if k.backward {
		dir = "bwd"
	}
	return TuneKey{Family: stage, Dir: dir, DType: k.dt.Short(), D: k.p.D, DV: k.p.Dv, Causal: k.p.Causal(), Options: k.p.Features()}
}

func (k *keySearch) progress(ev TuneEvent) {
	if k.o.Progress != nil {
		k.o.Progress(ev)
	}
}

// run tunes the key's stages in order, each with the winners of the
// earlier ones forced, and returns one result per stage.
func (k *keySearch) run(ctx context.Context) ([]TuneResult, error) {
	s, p := k.s, k.p
	defer s.unforce()
	base := TuneResult{Device: s.deviceKey(), N: p.Nq, B: p.B, H: p.Hq}
	stages, kernels, err := s.stages(ctx, p, k.dt, k.backward)
	if err == nil {
		var vstages []string
		vstages, _, err = s.stages(ctx, k.pv, k.dt, k.backward)
		stages = slices.DeleteFunc(stages, func(st string) bool {
			return !slices.Contains(vstages, st) || len(k.o.Families) > 0 && !slices.Contains(k.o.Families, st)
		})
	}
	if err != nil || len(stages) == 0 {
		if len(k.o.Families) > 0 && err == nil {
			return nil, ctx.Err() // filtered out
		}
		// Say so rather than skip silently (e.g. a pass whose kernels no
		// stage covers).
		why := fmt.Errorf("no tunable stage among the kernels it dispatches (%s)", strings.Join(kernels, ", "))
		if err != nil {
			why = err
		}
		r := base
		r.Key, r.Err = k.key("-"), why
		return []TuneResult{r}, ctx.Err()
	}
	fail := func(err error) ([]TuneResult, error) {
		var rs []TuneResult
		for _, st := range stages {
			r := base
			r.Key, r.Err = k.key(st), err
			rs = append(rs, r)
		}
		return rs, ctx.Err()
	}
	v, err := s.verifier(ctx, k.pv, k.dt, k.backward, k.o.Seed, k.o.Reference)
	if err != nil {
		return fail(fmt.Errorf("verification problem: %w", err))
	}
	defer v.close()
	tm, err := s.timer(ctx, p, k.dt, k.backward, k.o.Seed)
	if err != nil {
		return fail(fmt.Errorf("timed problem: %w", err))
	}
	defer tm.close()
	var rs []TuneResult
	for _, st := range stages {
		r := base
		r.Key = k.key(st)
		err := k.stage(ctx, st, v, tm, &r)
		rs = append(rs, r)
		if err != nil {
			return rs, err
		}
	}
	return rs, nil
}

// stage searches one stage into r: the default first, then the other
// candidates; each is checked, verified (rejected when wrong: never
// timed, never chosen) and timed; a new winner is timed again back to
// back with the default and must beat it by tuneNoise; the stage is then
// left forced to its winner for the stages after it.
func (k *keySearch) stage(ctx context.Context, st string, v tuneVerifier, tm tuneTimer, r *TuneResult) error {
	s, p, dt := k.s, k.p, k.dt
	flops := p.Flops()
	if k.backward {
		flops *= 2.5
	}
	tflops := func(d time.Duration) float64 { return flops / d.Seconds() / 1e12 }
	def, err := s.defaultOf(ctx, st, p, dt)
	if err != nil {
		r.Err = fmt.Errorf("default configuration: %w", err)
		return nil
	}
	r.Default = def
	more, err := s.candidates(ctx, st, p, dt)
	if err != nil {
		r.Err = fmt.Errorf("candidates: %w", err)
		return nil
	}
	cands := []string{def}
	for _, c := range more {
		if !slices.Contains(cands, c) {
			cands = append(cands, c)
		}
	}
	if k.o.MaxCandidates > 0 && len(cands) > k.o.MaxCandidates {
		cands = cands[:k.o.MaxCandidates]
	}
	bound := math.NaN()   // set by the default's verification
	warm := tuneFirstWarm // the first timing follows the host-side reference
	r.Candidates = len(cands)
	for i, c := range cands {
		if err := ctx.Err(); err != nil {
			return err
		}
		if i > 0 && k.spent() {
			break // decide among those measured
		}
		r.Tried++
		ev := TuneEvent{Key: r.Key, N: p.Nq, Candidate: c, Default: i == 0, Index: i + 1, Count: len(cands)}
		s.force(st, p, dt, c)
		err := s.check(ctx, st, k.pv, dt, c)
		if err == nil {
			err = s.check(ctx, st, p, dt, c)
		}
		if err != nil {
			ev.Status, ev.Err = TuneFailed, fmt.Errorf("not valid here: %w", err)
		} else if ev.RelL2, err = v.run(ctx); err != nil {
			ev.Status, ev.Err = TuneFailed, err
		} else {
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
		if ev.Status == "" {
			ev.Median, err = tm.median(ctx, k.o.Warmup, k.o.Iters, warm)
			warm = tuneWarm
			if err != nil {
				ev.Status, ev.Err = TuneFailed, err
			} else {
				ev.Status = TuneTimed
				if ev.Median > 0 {
					ev.TFLOPS = tflops(ev.Median)
				}
			}
		}
		if ctx.Err() != nil && ev.Status != TuneTimed {
			return ctx.Err()
		}
		if i == 0 && ev.Status == TuneTimed {
			r.DefaultTime = ev.Median
		}
		if ev.Status == TuneTimed && (r.Winner == "" || ev.Median < r.WinnerTime) {
			r.Winner, r.WinnerTime, r.TFLOPS = ev.Candidate, ev.Median, ev.TFLOPS
		}
		r.Events = append(r.Events, ev)
		k.progress(ev)
	}
	// Confirm a new winner: time the default and the winner again, back to
	// back (load and clocks drift during a long search), and decide on
	// these times.
	if r.DefaultTime > 0 && r.Winner != "" && r.Winner != r.Default && ctx.Err() == nil {
		var ts [2]time.Duration
		for i, c := range []string{r.Default, r.Winner} {
			s.force(st, p, dt, c)
			if m, err := tm.median(ctx, k.o.Warmup, k.o.Iters, tuneWarm); err == nil {
				ts[i] = m
			}
		}
		if ts[0] > 0 && ts[1] > 0 {
			r.DefaultTime, r.WinnerTime, r.TFLOPS = ts[0], ts[1], tflops(ts[1])
			ev := TuneEvent{Key: r.Key, N: p.Nq, Candidate: r.Winner, Status: TuneConfirm, Median: ts[1], TFLOPS: r.TFLOPS, DefaultMedian: ts[0]}
			r.Events = append(r.Events, ev)
			k.progress(ev)
		}
	}
	// Keep the default unless a candidate is clearly faster.
	if r.DefaultTime > 0 && r.Winner != r.Default && float64(r.DefaultTime) <= tuneNoise*float64(r.WinnerTime) {
		r.Winner, r.WinnerTime, r.TFLOPS = r.Default, r.DefaultTime, tflops(r.DefaultTime)
	}
	if r.Winner == "" {
		r.Err = errors.New("no candidate passed verification and timing")
		s.force(st, p, dt, r.Default)
	} else {
		s.force(st, p, dt, r.Winner) // later stages of this pass run with it
	}
	return nil
}

// TuneInfo reports the tune cache the engine uses and its warnings (Off
// and no entries on a backend without tunable kernels).
func (e *Engine) TuneInfo() TuneInfo {
	if t, ok := e.b.(tuner); ok {
		return t.tuneInfo()
	}
	return TuneInfo{Off: true}
}
