package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
	"github.com/spf13/cobra"
)

// Tolerances of run --check (rel_l2 against the float64 reference).
const (
	tolFloat32  = 1e-5
	tolFloat16  = 2e-3
	tolBFloat16 = 1.6e-2 // 8 × tolFloat16: bf16's ulp is 8 × fp16's
)

func tolerance(dt attention.DType) float64 {
	switch dt {
	case attention.Float16:
		return tolFloat16
	case attention.BFloat16:
		return tolBFloat16
	}
	return tolFloat32
}

type runFlags struct {
	shape                       shapeFlags
	backend                     backendFlags
	timing                      timingFlags
	backward, check, json       bool
	seed                        uint64
	qFile, kFile, vFile, doFile string
	out                         string
}

func (a *app) runCmd() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run",
		Short: "Run one attention call, time it, and optionally check it against a float64 reference",
		Long: `Run one attention call, forward (and with --backward the backward too), on
random inputs or on .npy files, and print the backend, the shape, the times and,
with --check, the error of every output against a float64 reference.

Inputs: by default Q, K, V (and dO) are drawn from N(0, 1) with --seed and
rounded to --dtype. With --q/--k/--v (and --do) they are read from .npy files
(float32 or float16, C order, 4-D: [B, S, H, D] with --layout bshd, [B, H, S, D]
with --layout bhsd); the sizes come from the file headers. numpy has no
bfloat16: with --dtype bf16, float32 files are read and rounded to bfloat16
(nearest even), and --out writes the bfloat16 outputs as float32 .npy files
(exactly: every bfloat16 is a float32).

Before any input is made or read, every engine plans each pass the run needs:
a problem the device cannot hold (or the host: the operands may use at most
three quarters of its memory) is refused at once.

Times: "time" is the steady time of a pass, the median of --iters timed calls
after --warmup untimed ones, by the backend's clock: GPU timestamps around the
kernels with the inputs resident on Vulkan, the host wall clock around each
call on the CPU (as flashvk bench measures); TFLOP/s follow from it
(FlashAttention convention). "first call" is the host wall time of the checked
call itself: on Vulkan it includes the transfers to and from the device and
the creation of the pipelines. --iters 0 skips the steady timing (for problems
where a few more calls take too long).

--check compares O, LSE (and dQ, dK, dV) with package reference, a float64
implementation run on the exact stored input values, and prints max_abs, rel_l2
and PASS/FAIL per output. Input rounding does not count: the reference sees the
very values flashvk stores. The bound on rel_l2 is
  float32: 1e-5  storage and arithmetic are float32, so only float32 rounding
                 of the tiled sums remains (unit roundoff 6e-8, growing slowly
                 with N): far below 1e-5 when the algorithm is right;
  float16: 2e-3  the outputs are rounded to float16 when stored, unit roundoff
                 2⁻¹¹ ≈ 4.9e-4 per element (rel_l2 ≈ 3e-4 for a correctly
                 rounded result): 2e-3 leaves a factor of ~4 for float32
                 accumulation on top;
  bfloat16: 1.6e-2  the same with bfloat16's unit roundoff 2⁻⁸ ≈ 3.9e-3
                 (8 × float16's).
The exit status is 1 when any output fails.

--out DIR writes o.npy, lse.npy ([B, Hq, Nq] float32) and with --backward
dq.npy, dk.npy, dv.npy, in --layout and the input dtype (float32 for bf16),
and with --bias-grad dbias.npy (the bias file's shape, the bias's dtype).
With --device all every Vulkan device and the CPU backend run the same inputs,
and each writes to DIR/<device>/. The files are written all or none: DIR and
every file in it are checked before any work, each file goes to a temporary
file beside it, and they are renamed into place only when all are complete
(a failed --check still writes them). A run that fails or is interrupted
leaves no new file and every existing one as it was.

Decode mode runs one KV-cache call (Engine.ForwardKVCache) instead; it is
selected by --cache-seqlens, --paged or --append, or by --decode with --nk.
B sequences hold --cache-seqlens rows each (one length per sequence: it sets
B), or without it --nk − --append rows each of --batch sequences, in a cache
of --nk rows per sequence (default: the longest length plus --append):
contiguous [B, Nk, Hkv, d], or with --paged BLOCK a pool of blocks of BLOCK
rows, enough for every sequence's capacity, named by a block table shuffled
by --seed. --append N new K/V rows are appended to every sequence, then --nq
queries per sequence (default 1) attend to its first length + N rows. The
mask defaults to FlashAttention's decoding rule, bottom-right causal (query i
sees rows j ≤ i + L − Nq), which for Nq = 1 masks nothing; --causal false and
--align top-left change it. --check compares O and LSE with the float64
reference run sequence by sequence over the rows gathered through the block
table, the appended ones taken from the new K/V (a wrong append fails). The
time is BenchmarkKVCache's, and GB/s is the cache bytes one call must read
(attention.KVCacheBytes, the memory-bound floor) over it. --out writes o.npy
and lse.npy.

A flag that would change nothing is refused (exit 2): --do without --backward,
--seed with --q/--k/--v (unless --backward draws a random dO), --warmup with
--iters 0, --align without --causal, --window or --alibi, or where every
sequence has Nq keys (Nq = Nk and no --seqused-k), --window -1,-1, --window
-1,R with --causal, --seqused-k where every sequence uses all its keys, --seq
beside --nq and --nk, --dropout-seed and --dropout-offset without --dropout,
--bias-grad without --backward; in decode mode --backward (decoding has no
backward pass), --seqused-k, the dropout flags, --bias, --mask, --bias-grad,
--seqlens, --q/--k/--v/--do, --seq, --decode beside another decode flag,
and --causal
with Nq = 1 under the bottom-right mask; a Vulkan flag (--device, --kernel,
--addressing, --validation) where only the CPU backend runs, --workers where
it does not.

Beyond the causal mask: --window L,R is a sliding window (each query sees
the keys from L before its diagonal to R after it; −1 leaves a side
unbounded; with --causal R is −1 or 0), --softcap C caps each scaled score s
to C·tanh(s/C), --alibi adds ALiBi's bias −slope_h·|diagonal − j| to the
score of key j with the standard slopes slope_h = 2^(−8(h+1)/Hq) (h = 0 …
Hq−1), and --seqused-k N1,N2,… gives the keys each sequence uses, 0 … Nk (the
rest are masked; one value per sequence sets B, a single value applies to
every sequence). The diagonal is --align's, placed with each sequence's key
count. --check runs the float64 reference with the same options (the very
float32 softcap and slopes the kernels get). With any of them the FLOPs count
the visible (query, key) pairs exactly (attention.Flops). In decode mode
--window, --softcap and --alibi apply the same way, each sequence's keys
being its cache rows after the append (L above: the diagonal of query i is
row i + L − Nq bottom-right); decode mode refuses --seqused-k (the cache
lengths are the key counts).

Dropout: --dropout P drops each attention probability with probability P
(0 < P < 1) and scales the kept ones by 1/(1 − P) (the library's
Options.Dropout), from a counter-based generator keyed by --dropout-seed S
(default 0; --seed seeds the inputs, not the mask) and --dropout-offset N (one
of the seed's 2³² streams, e.g. the training step; default 0): the same
seed and offset drop the same elements, in the forward and the backward,
on every backend. Each element's draw is 8 bits, so P is applied at a
resolution of 2⁻⁸: round(P·256)/256 (P below 1/512 or from 511/512 on is
refused), and --check runs the float64 reference with that
very probability, seed and offset, so the outputs and gradients match
element for element. The FLOPs count the visible pairs exactly (the
dropout's generator is not counted). Decode mode refuses them.

Bias and masks: --bias FILE.npy adds an additive bias to the scores (the
library's Options.Bias; PyTorch SDPA's float attn_mask) after the softcap
and ALiBi, float32 or float16, C order, shaped [B|1, H|1, Nq|1, Nk] whatever
--layout (H the query heads Hq; a dimension of 1 broadcasts; a 3-D file is
[H|1, Nq|1, Nk] and a 2-D one [Nq|1, Nk], broadcast over what they leave
out); an element of −Inf hides its key from the row (a row left no key has
O = 0, LSE = −Inf). --mask FILE.npy is a boolean mask of the same shapes
(SDPA's boolean attn_mask), bool or uint8 0/1, true attending: the bias of
0 and −Inf (attention.KeepMask). A float32 bias stays float32; a float16 bias and a
mask are in --dtype (bfloat16 rounds a float16 bias to nearest even). With
--seqlens, Nq and Nk are the longest lengths and each sequence indexes the
bias with its own rows and keys. --bias-grad (with --backward) also computes
dBias, the gradient with respect to the bias, summed over the dimensions it
broadcasts: --check compares it with the float64 reference's
(reference.BiasGrad) under the same bound as dQ, dK and dV ("dbias"), and
--out writes dbias.npy. --check refuses a bias holding NaN or +Inf (the
reference takes finite values and −Inf only). The FLOPs count the pairs
the mask, window and key counts leave visible exactly, those the bias hides
included. Refused before any work: --bias and --mask together, --bias-grad
without either or without --backward, a file of another element type, or
of a shape that does not fit the problem (the error names the shape it
wants); decode mode refuses all three (a KV-cache call takes no bias).

Packed sequences: --seqlens N1,N2,… runs a packed batch of self-attention
sequences without padding (the library's Options.CuSeqlensQ and CuSeqlensK):
sequence i has Nq = Nk = Ni (a length may be 0; one at least is not), B is
their count, and Q, K, V and O (dO, dQ, dK, dV) are [1, ΣNi, H, d], each
sequence attending only within itself, its causal mask, window and ALiBi
placed by its own length. It replaces --seq, --nq, --nk and --batch (each
refused beside it) and combines with --causal, --align, --window,
--softcap, --alibi and --seqused-k (one key count per sequence, or one for
every sequence, each at most its sequence's length). The problem line shows
B, T = ΣNi and the lengths; the FLOPs count each sequence's own visible
pairs; .npy inputs must hold the packed rows, [1, ΣNi, H, d]; --out's
lse.npy is [1, Hq, ΣNi]. --check runs the float64 reference sequence by
sequence, each as a batch of one over its own rows, and compares the packed
outputs. Decode mode refuses --seqlens.

--json prints the results as JSON (schema flashvk-run/2, see
docs/results-schema.md).

SIGINT or SIGTERM stops the run within about a second — reading inputs and
the float64 reference included — with exit status 130 or 143; a second
signal exits at once.`,
		Example: `  flashvk run --seq 1024 --heads 16 --dim 64 --causal --check
  flashvk run -b 2 --heads 8 --kv-heads 2 --seq 256 --dtype f16 --causal false --backward --check
  flashvk run --backend cpu --seq 512 --causal --window 128,0 --alibi --softcap 30 --seqused-k 400,512 --backward --check
  flashvk run --seqlens 1000,24,0,512 --heads 16 --kv-heads 4 --dim 64 --causal --backward --check
  flashvk run --seq 1024 --causal --dropout 0.1 --dropout-seed 42 --backward --check
  flashvk run --backend cpu --seq 1024 --heads 8 --dim 64 --causal --mask mask.npy --backward --bias-grad --check
  flashvk run --seq 1024 --heads 8 --dim 64 --bias bias.npy --dtype f16 --backward --bias-grad --out result/
  flashvk run --seq 512 --dtype bf16 --backward --check --iters 20
  flashvk run --seq 131072 --heads 16 --dim 128 --dtype f16 --iters 0
  flashvk run --q q.npy --k k.npy --v v.npy --layout bhsd --out result/
  flashvk run --cache-seqlens 128,4000,17 --heads 32 --kv-heads 8 --dim 128 --dtype f16 --check
  flashvk run --nk 4096 --batch 4 --nq 4 --heads 8 --kv-heads 2 --paged 16 --append 4 --check`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.run(cmd, &f) },
	}
	f.shape.register(c, oneProblem, attention.Float32)
	f.backend.register(c, manyEngines)
	f.timing.register(c, 10, "timed calls per pass for the steady time (0: time only the first call)")
	fl := c.Flags()
	fl.BoolVar(&f.backward, "backward", false, "also run the backward pass (dQ, dK, dV)")
	fl.BoolVar(&f.check, "check", false, "compare with the float64 reference; exit 1 on FAIL")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the random inputs")
	fl.StringVar(&f.qFile, "q", "", "read Q from this .npy file (needs --k and --v)")
	fl.StringVar(&f.kFile, "k", "", "read K from this .npy file")
	fl.StringVar(&f.vFile, "v", "", "read V from this .npy file")
	fl.StringVar(&f.doFile, "do", "", "read dO from this .npy file (needs --backward; default: random)")
	fl.StringVar(&f.out, "out", "", "write o.npy, lse.npy (and dq/dk/dv.npy, dbias.npy) into this directory (all or none)")
	fl.BoolVar(&f.json, "json", false, "print the results as JSON (schema flashvk-run/2)")
	return c
}

// RunSchema names the JSON of run --json (docs/results-schema.md).
const RunSchema = "flashvk-run/2"

// checkRow is the error of one output.
type checkRow struct {
	Output string `json:"output"`
	MaxAbs Metric `json:"max_abs"`
	RelL2  Metric `json:"rel_l2"`
	Bound  Metric `json:"bound"`
	NaN    int    `json:"nan"`
	Inf    int    `json:"inf"`
	Pass   bool   `json:"pass"`
}

// passResult is the timing of one pass of a run: its steady time (median
// of the timed calls) and the wall time of its first, checked call.
type passResult struct {
	Direction string `json:"direction"` // "fwd" or "bwd"
	// Kernel is the kernel family the engine's plan runs the pass with.
	Kernel   string  `json:"kernel"`
	MedianMS float64 `json:"median_ms,omitempty"`
	P10MS    float64 `json:"p10_ms,omitempty"`
	P90MS    float64 `json:"p90_ms,omitempty"`
	TFLOPS   float64 `json:"tflops,omitempty"`
	// GBPerS is the cache bytes a decode-mode call reads
	// (attention.KVCacheBytes) over the median time.
	GBPerS float64 `json:"gb_per_s,omitempty"`
	// Iters is the number of timed calls (0: not timed, --iters 0 or a
	// failed timing); Clock how they were timed.
	Iters    int    `json:"iters"`
	Clock    string `json:"clock,omitempty"`
	Unsteady bool   `json:"unsteady,omitempty"`
	// TimingError says why the steady timing failed (the run goes on).
	TimingError string `json:"timing_error,omitempty"`
	// FirstCallMS is the host wall time of the first call (transfers and
	// pipeline creation included), FirstCallTFLOPS its rate.
	FirstCallMS     float64 `json:"first_call_ms"`
	FirstCallTFLOPS float64 `json:"first_call_tflops"`
}

// runResult is one engine's run.
type runResult struct {
	Device DeviceInfo   `json:"device"`
	Passes []passResult `json:"passes"`
	Check  []checkRow   `json:"check,omitempty"`
	Out    string       `json:"out,omitempty"`
}

// runReport is the JSON of run --json.
type runReport struct {
	Schema  string      `json:"schema"`
	Version string      `json:"version"`
	Problem problemJSON `json:"problem"`
	Inputs  string      `json:"inputs"`
	// Warmup and Iters are the steady timing's settings (--warmup, --iters).
	Warmup  int         `json:"warmup"`
	Iters   int         `json:"iters"`
	Results []runResult `json:"results"`
	Checked bool        `json:"checked"`
	Pass    bool        `json:"pass"`
}

type problemJSON struct {
	B      int     `json:"B"`
	H      int     `json:"H"`
	Hkv    int     `json:"Hkv"`
	Nq     int     `json:"Nq"`
	Nk     int     `json:"Nk"`
	D      int     `json:"d"`
	Dv     int     `json:"dv"`
	DType  string  `json:"dtype"`
	Layout string  `json:"layout"`
	Causal bool    `json:"causal"`
	Align  string  `json:"align"`
	Scale  float64 `json:"scale"`
	// The packed lengths, window, softcap, ALiBi, key counts, dropout
	// and bias, each omitted when unset.
	features
	// Cache describes the KV cache in decode mode (Nk is then its
	// capacity per sequence).
	Cache *cacheJSON `json:"cache,omitempty"`
}

func (p problem) json() problemJSON {
	return problemJSON{B: p.B, H: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk, D: p.D, Dv: p.Dv, DType: p.DType.String(),
		Layout: p.Layout.String(), Causal: p.Causal, Align: p.Align.String(), Scale: p.effectiveScale(), features: p.features}
}

// checkEffect refuses the flags of run that would change nothing.
func (f *runFlags) checkEffect(cmd *cobra.Command) error {
	given := cmd.Flags().Changed
	files := f.qFile != "" || f.kFile != "" || f.vFile != ""
	switch {
	case f.doFile != "" && !f.backward:
		return usagef("--do has no effect without --backward: only the backward pass reads dO")
	case given("seed") && files && !(f.backward && f.doFile == ""):
		return usagef("--seed has no effect: the inputs are read from .npy files (it seeds only the random dO of --backward without --do)")
	case given("warmup") && f.timing.iters == 0:
		return usagef("--warmup has no effect with --iters 0: no steady timing follows it")
	case f.shape.biasGrad && !f.backward:
		return usagef("--bias-grad has no effect without --backward: only the backward pass computes dBias")
	}
	return f.shape.checkEffect()
}

func (a *app) run(cmd *cobra.Command, f *runFlags) error {
	ctx := cmd.Context()
	if err := f.timing.check(0); err != nil {
		return err
	}
	if f.shape.decodeMode() {
		return a.runDecode(cmd, f)
	}
	if err := f.shape.loadBias(ctx); err != nil {
		return err
	}
	// With --q/--k/--v the files give the sizes the bias must fit: it
	// joins the problem once they are known.
	bias := f.shape.bias
	if f.qFile != "" || f.kFile != "" || f.vFile != "" {
		f.shape.bias = nil
	}
	p, err := f.shape.problem()
	f.shape.bias = bias
	if err != nil {
		return err
	}
	if err := f.checkEffect(cmd); err != nil {
		return err
	}
	// The problem first, from the flags or the files' headers; no data yet.
	var files *inputFiles
	roundBF16 := false
	inputs := fmt.Sprintf("random N(0,1), seed %d", f.seed)
	if f.qFile != "" || f.kFile != "" || f.vFile != "" {
		if f.qFile == "" || f.kFile == "" || f.vFile == "" {
			return usagef("--q, --k and --v go together: give all three .npy files")
		}
		in, fp, err := inspectInputs(ctx, f.qFile, f.kFile, f.vFile, f.doFile, p.Layout)
		if err != nil {
			return err
		}
		if p.DType == attention.BFloat16 && fp.DType == attention.Float32 && cmd.Flags().Changed("dtype") {
			// numpy has no bfloat16: float32 files are rounded to it.
			roundBF16, fp.DType = true, attention.BFloat16
		}
		if err := agree(cmd, p, fp); err != nil {
			return err
		}
		if p.packed() {
			if fp, err = packInputs(fp, p.SeqLens); err != nil {
				return err
			}
		}
		fp.Causal, fp.Align, fp.Scale, fp.features, fp.bias = p.Causal, p.Align, p.Scale, f.shape.features(fp.B), bias
		p = fp
		if err := p.validate(); err != nil {
			return err
		}
		files = in
		inputs = fmt.Sprintf("q=%s k=%s v=%s", f.qFile, f.kFile, f.vFile)
		if f.doFile != "" {
			inputs += " do=" + f.doFile
		}
	} else if f.doFile != "" {
		return usagef("--do needs --q, --k and --v")
	}
	if err := f.shape.checkProblem(p); err != nil {
		return err
	}
	if f.check {
		if err := p.checkable(); err != nil {
			return err
		}
	}
	if p.bias != nil {
		inputs += "; " + strings.TrimPrefix(p.bias.flag, "--") + "=" + p.bias.path
	}
	out, engines, outDirs, done, err := a.runTargets(ctx, f, outNames(f.backward, p.BiasGrad))
	if err != nil {
		return err
	}
	defer done()
	plans, err := planAll(ctx, engines, p, f.backward)
	if err != nil {
		return err
	}

	// Only now the inputs.
	if a.beforeInputs != nil {
		a.beforeInputs()
	}
	if x := p.bias; x != nil {
		if err := x.load(ctx); err != nil {
			return err
		}
		if f.check {
			if err := x.checkFinite(); err != nil {
				return err
			}
		}
	}
	var q, k, v, do attention.Tensor
	if files != nil {
		if q, k, v, do, err = files.read(ctx, roundBF16); err != nil {
			return err
		}
	} else {
		for i, t := range []*attention.Tensor{&q, &k, &v} {
			s := []attention.Shape{p.qShape(), p.kShape(), p.vShape()}[i]
			if *t, err = randomTensorCtx(ctx, p.DType, s, p.Layout, rngFor(f.seed, uint64(i+1))); err != nil {
				return err
			}
		}
	}
	if f.backward && do.Data == nil {
		if do, err = randomTensorCtx(ctx, p.DType, p.oShape(), p.Layout, rngFor(f.seed, 4)); err != nil {
			return err
		}
	}

	// The float64 reference, once for every engine.
	var ref *refResult
	if f.check {
		if ref, err = computeReference(ctx, p, q, k, v, do, f.backward); err != nil {
			return err
		}
	}
	rep := runReport{Schema: RunSchema, Version: version(), Problem: p.json(), Inputs: inputs,
		Warmup: f.timing.warmupRun(), Iters: f.timing.iters, Checked: f.check, Pass: true}
	for i, e := range engines {
		r, err := runOne(ctx, e, p, q, k, v, do, ref, plans[i])
		if err != nil {
			return fmt.Errorf("%s: %w", e.label, err)
		}
		if f.timing.iters > 0 {
			if err := a.timeRun(ctx, e, p, q, k, v, f.timing, &r.res); err != nil {
				return err
			}
		}
		if err := rep.add(r, out, outDirs[i], p.Layout); err != nil {
			return err
		}
	}
	return a.finishRun(out, &rep, f.json, func() { printRun(a.stdout, p, &rep) })
}

// runTargets prepares where run writes and what it runs on: --out is
// checked (and made) before any work, each engine's folder named once the
// engines are open (files named names); nothing is at its name until
// finishRun commits. done closes the engines and drops the uncommitted
// outputs.
func (a *app) runTargets(ctx context.Context, f *runFlags, names []string) (out *outputs, engines []*engine, outDirs []string, done func(), err error) {
	out = a.newOutputs(ctx)
	if f.out != "" {
		if err := out.prepareDir("--out", f.out, f.out); err != nil {
			out.abort()
			return nil, nil, nil, nil, err
		}
	}
	if engines, err = a.openAll(&f.backend); err != nil {
		out.abort()
		return nil, nil, nil, nil, err
	}
	done = func() {
		a.closeAll(engines)
		out.abort()
	}
	if outDirs, err = prepareOutDirs(out, f.out, engines, names); err != nil {
		done()
		return nil, nil, nil, nil, err
	}
	return out, engines, outDirs, done, nil
}

// prepareOutDirs checks --out's files for every engine: DIR itself with
// one engine, DIR/<backend-device> with several (numbered when two
// devices share a name). It returns each engine's folder ("" without
// --out).
func prepareOutDirs(out *outputs, dir string, engines []*engine, names []string) ([]string, error) {
	outDirs := make([]string, len(engines))
	if dir == "" {
		return outDirs, nil
	}
	for i, e := range engines {
		outDirs[i] = dir
		if len(engines) > 1 {
			d := e.device()
			name := slug(d.Backend + "-" + d.Name)
			outDirs[i] = filepath.Join(dir, name)
			for n := 2; slices.Contains(outDirs[:i], outDirs[i]); n++ {
				outDirs[i] = filepath.Join(dir, fmt.Sprintf("%s-%d", name, n))
			}
		}
		for _, name := range names {
			if err := out.prepare("--out", filepath.Join(outDirs[i], name)); err != nil {
				return nil, err
			}
		}
	}
	return outDirs, nil
}

// checkDecodeEffect refuses the flags of run that decode mode does not
// read.
func (f *runFlags) checkDecodeEffect(cmd *cobra.Command, p decodeProblem) error {
	given := cmd.Flags().Changed
	by := f.shape.decodeBy()
	switch {
	case given("backward"):
		return usagef("--backward has no effect in decode mode (%s): decoding has no backward pass", by)
	case f.qFile != "" || f.kFile != "" || f.vFile != "" || f.doFile != "":
		return usagef("--q, --k, --v and --do do not apply in decode mode (%s): its inputs are drawn from --seed", by)
	case given("warmup") && f.timing.iters == 0:
		return usagef("--warmup has no effect with --iters 0: no steady timing follows it")
	}
	return f.shape.checkDecodeEffect(p)
}

// runDecode is run in decode mode: one ForwardKVCache call per engine on
// random inputs, checked sequence by sequence against the float64
// reference, then timed by BenchmarkKVCache.
func (a *app) runDecode(cmd *cobra.Command, f *runFlags) error {
	ctx := cmd.Context()
	p, err := f.shape.decodeProblem()
	if err != nil {
		return err
	}
	if err := f.checkDecodeEffect(cmd, p); err != nil {
		return err
	}
	if f.check {
		if err := p.checkable(); err != nil {
			return err
		}
	}
	out, engines, outDirs, done, err := a.runTargets(ctx, f, outNames(false, false))
	if err != nil {
		return err
	}
	defer done()
	// Plan on every engine before any input exists.
	table := p.table(f.seed)
	plans := make([]*attention.Plan, len(engines))
	for i, e := range engines {
		if plans[i], err = e.PlanKVCache(ctx, p.qShape(), p.shapes(table), p.Append, p.Layout, p.DType, p.options()); err != nil {
			return fmt.Errorf("%s: kv %s: %w", e.label, p, err)
		}
	}
	if a.beforeInputs != nil {
		a.beforeInputs()
	}
	in, err := p.inputs(ctx, f.seed, table)
	if err != nil {
		return err
	}
	var ref *refResult
	if f.check {
		if ref, err = computeDecodeReference(ctx, p, in); err != nil {
			return err
		}
	}
	rep := runReport{Schema: RunSchema, Version: version(), Problem: p.json(), Inputs: fmt.Sprintf("random N(0,1), seed %d", f.seed),
		Warmup: f.timing.warmupRun(), Iters: f.timing.iters, Checked: f.check, Pass: true}
	bytes := p.cacheBytes()
	for i, e := range engines {
		r := &oneRun{res: runResult{Device: e.device()}}
		start := time.Now()
		o, err := e.ForwardKVCache(ctx, in.q, p.cache(in.k, in.v, table), in.newK, in.newV, p.options())
		if err != nil {
			return fmt.Errorf("%s: %w", e.label, err)
		}
		el := time.Since(start)
		r.res.Passes = []passResult{{Direction: plans[i].Pass, Kernel: plans[i].Family, FirstCallMS: ms(el),
			FirstCallTFLOPS: p.flops() / el.Seconds() / 1e12}}
		r.o, r.lse = o.O, o.LSE
		if ref != nil {
			r.res.Check = decodeCheck(p.DType, o, ref)
		}
		if f.timing.iters > 0 {
			// The append rewrites the rows the first call wrote; the
			// lengths are those before it.
			err := a.timePasses(ctx, e, &r.res, bytes, func(string) (*attention.BenchResult, error) {
				return e.BenchmarkKVCache(ctx, in.q, p.cache(in.k, in.v, table), in.newK, in.newV, p.options(),
					attention.BenchOptions{Warmup: f.timing.warmup, Iters: f.timing.iters})
			})
			if err != nil {
				return err
			}
		}
		if err := rep.add(r, out, outDirs[i], p.Layout); err != nil {
			return err
		}
	}
	return a.finishRun(out, &rep, f.json, func() {
		fmt.Fprintf(a.stdout, "problem  %s\n", p)
		fmt.Fprintf(a.stdout, "cache    %s\n", p.cacheString())
		fmt.Fprintf(a.stdout, "inputs   %s\n", rep.Inputs)
		fmt.Fprintf(a.stdout, "flops    kv %s (4·d per visible (query, cache row) pair and query head)\n", siFlops(p.flops()))
		fmt.Fprintf(a.stdout, "bytes    %s of cache read (K and V rows each sequence attends to)\n\n", si(bytes, "B"))
		printRunResults(a.stdout, p.DType, &rep)
	})
}

// add records one engine's run: its checks in the verdict, its outputs
// saved under dir (with --out; "" without).
func (rep *runReport) add(r *oneRun, out *outputs, dir string, l attention.Layout) error {
	for _, c := range r.res.Check {
		rep.Pass = rep.Pass && c.Pass
	}
	if dir != "" {
		if err := r.save(out, dir, l); err != nil {
			return err
		}
		r.res.Out = dir
	}
	rep.Results = append(rep.Results, r.res)
	return nil
}

// finishRun writes run's files (all or none), prints the report as JSON
// or with print, and fails with exit status 1 when a check failed.
func (a *app) finishRun(out *outputs, rep *runReport, asJSON bool, print func()) error {
	if err := out.commit(); err != nil {
		return err
	}
	if asJSON {
		if err := a.printJSON(rep); err != nil {
			return err
		}
	} else {
		print()
	}
	if !rep.Pass {
		return exitError{1}
	}
	return nil
}

// agree checks the shape flags the user set against the sizes read from
// the files.
func agree(cmd *cobra.Command, flags, files problem) error {
	ch := cmd.Flags().Changed
	for _, c := range []struct {
		flag       string
		set        bool
		flagV, got int
		what       string
	}{
		{"--batch", ch("batch"), flags.B, files.B, "B"},
		{"--heads", ch("heads"), flags.Hq, files.Hq, "Hq"},
		{"--kv-heads", ch("kv-heads"), flags.Hkv, files.Hkv, "Hkv"},
		{"--seq", ch("seq") && !ch("nq"), flags.Nq, files.Nq, "Nq"},
		{"--seq", ch("seq") && !ch("nk"), flags.Nk, files.Nk, "Nk"},
		{"--nq", ch("nq"), flags.Nq, files.Nq, "Nq"},
		{"--nk", ch("nk"), flags.Nk, files.Nk, "Nk"},
		{"--dim", ch("dim"), flags.D, files.D, "d"},
		{"--dv", ch("dv"), flags.Dv, files.Dv, "dv"},
	} {
		if c.set && c.flagV != c.got {
			return usagef("%s %d disagrees with the input files (%s=%d)", c.flag, c.flagV, c.what, c.got)
		}
	}
	if ch("dtype") && flags.DType != files.DType {
		return usagef("--dtype %s disagrees with the input files (%s)", flags.DType, files.DType)
	}
	return nil
}

// packInputs is the problem of input files that hold a packed batch of
// sequences of lengths lens: Q, K and V [1, ΣNi, H, d] each (--seqlens).
func packInputs(fp problem, lens []int) (problem, error) {
	fp.features = features{SeqLens: lens}
	if _, t, _ := fp.stored(); fp.B != 1 || fp.Nq != t || fp.Nk != t {
		return fp, usagef("--seqlens packs %d rows in all, but the input files hold B=%d, Nq=%d, Nk=%d: want packed Q, K and V of B=1 and %d rows each",
			t, fp.B, fp.Nq, fp.Nk, t)
	}
	fp.B, fp.Nq = len(lens), slices.Max(lens)
	fp.Nk = fp.Nq
	return fp, nil
}

// oneRun holds an engine's outputs for --out.
type oneRun struct {
	res   runResult
	o     attention.Tensor
	lse   []float32
	grads *attention.Grads
	// dbiasDims is the bias file's shape, which dbias.npy takes, where
	// grads has dBias (--bias-grad); nil otherwise.
	dbiasDims []int
}

// outNames are the files of --out (dbias: dbias.npy too).
func outNames(backward, dbias bool) []string {
	switch {
	case backward && dbias:
		return []string{"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy", "dbias.npy"}
	case backward:
		return []string{"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy"}
	}
	return []string{"o.npy", "lse.npy"}
}

// save stages the outputs in dir (see outNames) with o.
func (r *oneRun) save(o *outputs, dir string, l attention.Layout) error {
	ts := []attention.Tensor{r.o}
	if r.grads != nil {
		ts = append(ts, r.grads.DQ, r.grads.DK, r.grads.DV)
	}
	names := outNames(r.grads != nil, r.dbiasDims != nil)
	for i, name := range names {
		var shape []int
		var data any
		switch {
		case name == "lse.npy":
			s := r.o.Shape
			shape, data = []int{s.B, s.H, s.S}, r.lse
		case name == "dbias.npy":
			// The bias file's shape; dBias is dense [B, H, Nq, Nk].
			shape, data = r.dbiasDims, r.grads.DBias.Data
		case i == 0:
			shape, data = npyOf(ts[0], l)
		default:
			shape, data = npyOf(ts[i-1], l)
		}
		if err := o.write("--out", filepath.Join(dir, name), func(w io.Writer) error { return encodeNpy(w, shape, data) }); err != nil {
			return err
		}
	}
	return nil
}

// runOne makes the first call of each pass (timed by the wall clock) and
// checks it against ref.
func runOne(ctx context.Context, e *engine, p problem, q, k, v, do attention.Tensor, ref *refResult, plans []*attention.Plan) (*oneRun, error) {
	opt := p.options()
	r := &oneRun{res: runResult{Device: e.device()}}
	first := func(pl *attention.Plan, el time.Duration) {
		r.res.Passes = append(r.res.Passes, passResult{Direction: pl.Pass, Kernel: pl.Family,
			FirstCallMS: ms(el), FirstCallTFLOPS: p.flops(pl.Pass == "bwd") / el.Seconds() / 1e12})
	}
	start := time.Now()
	out, err := e.Forward(ctx, q, k, v, opt)
	if err != nil {
		return nil, err
	}
	first(plans[0], time.Since(start))
	r.o, r.lse = out.O, out.LSE
	if len(plans) > 1 {
		start = time.Now()
		g, err := e.Backward(ctx, q, k, v, out.O, out.LSE, do, opt)
		if err != nil {
			return nil, err
		}
		first(plans[1], time.Since(start))
		r.grads = g
		if p.BiasGrad {
			if g.DBias.Data == nil {
				return nil, fmt.Errorf("the backward returned no dBias (Options.Bias.Grad)")
			}
			r.dbiasDims = p.bias.dims
		}
	}
	if ref != nil {
		tol := tolerance(p.DType)
		add := func(name string, got []float32, want []float64) {
			r.res.Check = append(r.res.Check, checkRowOf(name, got, want, tol))
		}
		add("o", out.O.Float32s(), ref.o)
		add("lse", out.LSE, ref.lse)
		if r.grads != nil {
			add("dq", r.grads.DQ.Float32s(), ref.dq)
			add("dk", r.grads.DK.Float32s(), ref.dk)
			add("dv", r.grads.DV.Float32s(), ref.dv)
		}
		if r.dbiasDims != nil {
			add("dbias", bhsdFloat32s(r.grads.DBias), ref.db)
		}
	}
	return r, nil
}

// checkRowOf is the error of one output against the float64 reference,
// passing when rel_l2 ≤ tol and no element is NaN.
func checkRowOf(name string, got []float32, want []float64, tol float64) checkRow {
	s := reference.Compare(got, want)
	return checkRow{Output: name, MaxAbs: Metric(s.MaxAbs), RelL2: Metric(s.RelL2),
		Bound: Metric(tol), NaN: s.NaN, Inf: s.Inf, Pass: s.RelL2 <= tol && s.NaN == 0}
}

// timeRun measures the steady time of each pass of res with the engine's
// Benchmark (as bench does). A pass whose timing fails keeps its first
// call and says why, with a warning: the run itself succeeded. Only ctx's
// end stops it, with ctx's error.
func (a *app) timeRun(ctx context.Context, e *engine, p problem, q, k, v attention.Tensor, t timingFlags, res *runResult) error {
	return a.timePasses(ctx, e, res, 0, func(dir string) (*attention.BenchResult, error) {
		return e.Benchmark(ctx, q, k, v, p.options(), attention.BenchOptions{Warmup: t.warmup, Iters: t.iters, Backward: dir == "bwd"})
	})
}

// timePasses times each pass of res with bench (given the pass's
// direction); bytes > 0 are the bytes a call reads, for GB/s.
func (a *app) timePasses(ctx context.Context, e *engine, res *runResult, bytes float64, bench func(dir string) (*attention.BenchResult, error)) error {
	for i := range res.Passes {
		ps := &res.Passes[i]
		b, err := bench(ps.Direction)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			ps.TimingError = oneLine(err.Error())
			fmt.Fprintf(a.stderr, "warning: %s: %s: steady timing failed, only the first call is timed: %s\n", e.label, ps.Direction, ps.TimingError)
			continue
		}
		ps.MedianMS, ps.P10MS, ps.P90MS = ms(b.Median()), ms(b.Quantile(0.1)), ms(b.Quantile(0.9))
		ps.TFLOPS, ps.Iters, ps.Clock, ps.Unsteady = b.TFLOPS(), len(b.Times), b.Clock, b.Unsteady
		if bytes > 0 {
			ps.GBPerS = gbs(bytes, ps.MedianMS)
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func printRun(w io.Writer, p problem, rep *runReport) {
	backward := len(rep.Results) > 0 && len(rep.Results[0].Passes) > 1
	fmt.Fprintf(w, "problem  %s\n", p)
	fmt.Fprintf(w, "inputs   %s\n", rep.Inputs)
	if p.bias != nil {
		fmt.Fprintf(w, "bias     %s\n", p.bias.describe(p.DType, p.BiasGrad))
	}
	fmt.Fprintf(w, "flops    fwd %s", siFlops(p.flops(false)))
	if backward {
		fmt.Fprintf(w, ", bwd %s", siFlops(p.flops(true)))
	}
	fmt.Fprintf(w, " (%s)\n\n", p.flopsRule())
	printRunResults(w, p.DType, rep)
}

// printRunResults prints the table of times (with GB/s in decode mode)
// and the check of a run.
func printRunResults(w io.Writer, dt attention.DType, rep *runReport) {
	decode := rep.Problem.Cache != nil
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if decode {
		fmt.Fprintln(tw, "backend\tdevice\tkernel\tpass\ttime\tTFLOP/s\tGB/s\tfirst call")
	} else {
		fmt.Fprintln(tw, "backend\tdevice\tkernel\tpass\ttime\tTFLOP/s\tfirst call")
	}
	var clocks []string
	unsteady := false
	for _, r := range rep.Results {
		for _, ps := range r.Passes {
			t, rate, bw := "-", "-", "-"
			if ps.Iters > 0 {
				t, rate, bw = fmtMS(ps.MedianMS), fmtTFLOPS(ps.TFLOPS), fmtGBs(ps.GBPerS)
				if ps.Unsteady {
					t += " *"
					unsteady = true
				}
				if c := clockText(ps.Clock, r.Device.Backend); !slices.Contains(clocks, c) {
					clocks = append(clocks, c)
				}
			}
			if decode {
				rate += "\t" + bw
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Device.Backend, r.Device.Name, ps.Kernel, ps.Direction, t, rate, fmtMS(ps.FirstCallMS))
		}
	}
	tw.Flush()
	switch {
	case rep.Iters == 0:
		fmt.Fprintln(w, "\ntime        not measured (--iters 0)")
	case len(clocks) > 0:
		fmt.Fprintf(w, "\ntime        median of %d timed calls after warm-up (%s)\n", rep.Iters, strings.Join(clocks, "; "))
	}
	if unsteady {
		fmt.Fprintln(w, "            * the times still have a step (a GPU clock change?): not a steady-state time")
	}
	if decode && rep.Iters > 0 {
		fmt.Fprintln(w, "GB/s        the cache bytes the call reads (attention.KVCacheBytes) over the time")
	}
	fmt.Fprintln(w, "first call  host wall time of the first call, incl. transfers and pipeline creation")
	if rep.Checked {
		fmt.Fprintf(w, "\ncheck against the float64 reference (%s: rel_l2 ≤ %s)", dt, fmtBound(tolerance(dt)))
		switch {
		case decode:
			fmt.Fprint(w, ", sequence by sequence over its gathered cache rows")
		case rep.Problem.SeqLens != nil:
			fmt.Fprint(w, ", sequence by sequence over its packed rows")
		}
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		multi := len(rep.Results) > 1
		if multi {
			fmt.Fprint(tw, "device\t")
		}
		fmt.Fprintln(tw, "output\tmax_abs\trel_l2\tbound\tresult")
		for _, r := range rep.Results {
			for _, c := range r.Check {
				if multi {
					fmt.Fprintf(tw, "%s\t", r.Device.Name)
				}
				verdict := "PASS"
				if !c.Pass {
					verdict = "FAIL"
				}
				extra := ""
				if c.NaN > 0 || c.Inf > 0 {
					extra = fmt.Sprintf(" (%d NaN, %d Inf)", c.NaN, c.Inf)
				}
				fmt.Fprintf(tw, "%s\t%.3e\t%.3e\t%s\t%s%s\n", c.Output, float64(c.MaxAbs), float64(c.RelL2), fmtBound(float64(c.Bound)), verdict, extra)
			}
		}
		tw.Flush()
	}
	for _, r := range rep.Results {
		if r.Out != "" {
			fmt.Fprintf(w, "wrote %s\n", r.Out)
		}
	}
	if rep.Checked {
		if rep.Pass {
			fmt.Fprintln(w, "\nPASS")
		} else {
			fmt.Fprintln(w, "\nFAIL")
		}
	}
}

// clockText says how a backend's steady times were taken.
func clockText(clock, backend string) string {
	switch clock {
	case "gpu-timestamps":
		return backend + ": GPU timestamps around the kernels, inputs resident on the device"
	case "wall":
		return backend + ": host wall clock around each call"
	}
	return backend + ": " + clock
}

func fmtMS(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.3f s", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.1f ms", v)
	case v >= 1:
		return fmt.Sprintf("%.3f ms", v)
	}
	return fmt.Sprintf("%.1f µs", v*1e3)
}

// siFlops formats a FLOP count with an SI prefix.
func siFlops(f float64) string { return si(f, "FLOP") }

func si(f float64, unit string) string {
	for _, p := range []struct {
		s string
		v float64
	}{{"P", 1e15}, {"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3}} {
		if math.Abs(f) >= p.v {
			return fmt.Sprintf("%.3g %s%s", f/p.v, p.s, unit)
		}
	}
	return fmt.Sprintf("%.3g %s", f, unit)
}

var slugRE = regexp.MustCompile(`[^a-z0-9]+`)

// slug makes a file name from a device name.
func slug(s string) string {
	return strings.Trim(slugRE.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

// closeAll closes the engines, reporting validation messages or errors.
func (a *app) closeAll(es []*engine) {
	for _, e := range es {
		if err := e.Close(); err != nil {
			fmt.Fprintf(a.stderr, "warning: %s: %s\n", e.label, oneLine(err.Error()))
		}
	}
}

// fmtBound formats a tolerance as 1e-5, 2e-3 or 1.6e-2.
func fmtBound(v float64) string {
	s := fmt.Sprintf("%.0e", v)
	if x, err := strconv.ParseFloat(s, 64); err != nil || x != v {
		s = fmt.Sprintf("%.1e", v) // 1.6e-2
	}
	return strings.NewReplacer("e-0", "e-", "e+0", "e+").Replace(s)
}

// fmtTFLOPS formats a rate with four significant digits (tiny rates, as
// on llvmpipe, stay readable).
func fmtTFLOPS(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}
