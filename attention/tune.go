package attention

import (
	"context"
	"errors"
	"fmt"
	"time"
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
// "bwd_cm_dq"), the pass, the storage type ("f32", "f16"), the head dims
// and whether the mask is causal (either alignment). Entries of one key
// may exist for several sequence lengths; a problem uses the one nearest
// its Nq.
type TuneKey struct {
	Family string `json:"family"`
	Dir    string `json:"dir"`
	DType  string `json:"dtype"`
	D      int    `json:"d"`
	DV     int    `json:"dv"`
	Causal bool   `json:"causal"`
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
	return fmt.Sprintf("%s %s %s %s %s", k.Dir, k.DType, d, mask, k.Family)
}

// ReferenceProblem describes a problem for a ReferenceFunc; its fields are
// those of package reference's Params, so that reference.Params(p)
// converts it.
type ReferenceProblem struct {
	B, Hq, Hkv, Nq, Nk, D, Dv int
	// Scale multiplies QKᵀ (resolved: never 0 here).
	Scale  float64
	Causal bool
	// BottomRight selects the causal alignment (see Alignment).
	BottomRight bool
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
	// also lasts at least 100 ms; Warmup < 0: none).
	Warmup, Iters int
	// MaxCandidates bounds the candidates tried per key and stage, the
	// default configuration included (0: all).
	MaxCandidates int
	// Families restricts tuning to these stages (default: all; see
	// TuneFamilies).
	Families []string
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
	tune(ctx context.Context, o TuneOptions) ([]TuneResult, error)
	tuneInfo() TuneInfo
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
	if o.Reference == nil {
		return nil, fmt.Errorf("attention: tune: options: no Reference to verify candidates against: %w", ErrOption)
	}
	for _, d := range o.Dims {
		if d < 1 || d > MaxHeadDim {
			return nil, fmt.Errorf("attention: tune: options: head dim %d (1 … %d): %w", d, MaxHeadDim, ErrOption)
		}
	}
	for _, dir := range o.Dirs {
		if dir != "fwd" && dir != "bwd" {
			return nil, fmt.Errorf("attention: tune: options: direction %q (want fwd or bwd): %w", dir, ErrOption)
		}
	}
	for _, dt := range o.DTypes {
		if err := e.supports(dt); err != nil {
			return nil, err
		}
	}
	return t.tune(ctx, o)
}

// TuneInfo reports the tune cache the engine uses and its warnings (Off
// and no entries on a backend without tunable kernels).
func (e *Engine) TuneInfo() TuneInfo {
	if t, ok := e.b.(tuner); ok {
		return t.tuneInfo()
	}
	return TuneInfo{Off: true}
}
