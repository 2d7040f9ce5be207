package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// The FlashAttention-2 paper's benchmark grid: B·N = 16k tokens and a
// hidden size H·d = 2048.
var (
	paperSeqs   = []int{512, 1024, 2048, 4096, 8192, 16384}
	paperDims   = []int{64, 128}
	paperTokens = 16384
	paperHidden = 2048
	// The CPU backend's default grid.
	cpuSeqs   = []int{128, 256, 512}
	cpuTokens = 1024
)

// maxCheckScores bounds B·Hq·Nq·Nk (packed: Hq·ΣNi²) for bench --check:
// the float64 reference materialises the score matrix and is slow beyond
// this.
const maxCheckScores = 1 << 24

type benchFlags struct {
	shape           shapeFlags
	backend         backendFlags
	timing          timingFlags
	backward        bool
	rotate, count   int
	jsonPath        string
	benchfmt, check bool
	perKernel       bool
	progress        string
	seed            uint64
}

func (a *app) benchCmd() *cobra.Command {
	var f benchFlags
	c := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark a sweep of shapes (default: the FlashAttention-2 paper's grid)",
		Long: `Benchmark attention over a grid of shapes and print median, p10 and p90 times
and TFLOP/s (FlashAttention FLOP convention: forward 4·B·H·Nq·Nk·d, halved when
causal; backward 2.5× the forward).

The default grid is the FlashAttention-2 paper's: head dim d ∈ {64, 128},
N ∈ {512, 1k, 2k, 4k, 8k, 16k}, batch B = 16384/N, H = 2048/d heads, causal and
not, forward (and with --backward the backward too), float16 where the backend
supports it. On the CPU backend that grid would take hours: without --seq the
CPU runs N ∈ {128, 256, 512} with B·N = 1024, and says so.

--nq and --nk make Nq ≠ Nk grids (every Nq × Nk; the one not given is --seq),
with B = tokens / max(Nq, Nk); --kv-heads makes grouped-query (GQA) shapes.
Every point is planned on its engine before any runs: a point the device
cannot run (too large to hold, a kernel that does not take it) stops the
sweep before it starts.

Progress goes to stderr, the table to stdout. --json FILE writes the results
(schema flashvk-bench/1, see docs/results-schema.md) for compare and report;
--benchfmt prints Go benchmark lines instead of the table, for benchstat:
  BenchmarkAttention/fwd/fp16/d64/N2048/causal-8  20  1234567 ns/op  1.23 TFLOP/s
--count N measures every point N times (N independent timed series of --iters
calls, each after its own warm-up); --benchfmt then prints one line per series
with the series' median, so benchstat has N samples per point.

Decode mode (--cache-seqlens, --paged, --append, or --decode with --nk; see
run --help) benchmarks KV-cache calls (Engine.BenchmarkKVCache): the grid is
every dtype × d × Nq × Nk, with --nq the queries per sequence (default 1) and
--nk the cache capacities; --cache-seqlens gives one length per sequence (and
B), else every sequence holds Nk − --append rows and B is --batch or
--tokens / max(Nq, Nk). The mask is --causal's where given, else the decoding
rule (bottom-right causal; none for Nq = 1). Besides the time and TFLOP/s
(visible pairs counted exactly) it reports GB/s: the cache bytes one call
must read (attention.KVCacheBytes, the memory-bound floor) over the median.
The results have direction "kv", Nk the capacity, and cache_seqlens, append,
block_size, cache_bytes and gb_per_s; --benchfmt adds a GB/s metric.
--window, --softcap and --alibi apply to every decode point too (recorded
as below; the FLOPs count the rows each window leaves visible); --seqused-k
and --seqlens do not.

Times come from the backend's clock: GPU timestamps around the kernels on
Vulkan, the host clock around each call on the CPU ("clock" in the results).

--json FILE is checked (its folder made) before the sweep starts, and written
all or nothing at the end: into a temporary file beside it, renamed over FILE
once complete. Points that fail are left out of it and reported (exit 1); an
interrupted sweep (SIGINT, SIGTERM: exit 130, 143) writes no file and prints
no table — the progress lines on stderr have the points measured.

--window L,R, --softcap C, --alibi and --seqused-k (see run --help) apply to
every point of the grid (the causal ones and the others: with --causal both,
R must be −1 or 0), and the results record them ("window", "softcap",
"alibi", "seqused_k"; TFLOP/s then counts the visible (query, key) pairs
exactly), so compare and report keep them apart from plain points.
--seqused-k with one value gives every sequence of every point that many
keys; with several, one per sequence, it sets B at every point (beside
--batch they must agree; --tokens then has no effect). Every value must be at
most every point's Nk: a point with fewer keys is refused, not clamped.
--dropout P (with --dropout-seed and --dropout-offset; see run --help)
applies attention dropout at every point; the results record "dropout"
(and "dropout_seed", "dropout_offset" where not 0), and compare and report
keep points of another P apart (not those of another seed or offset, which
change which elements drop, not the work).
bench/torch_sdpa.py takes the same flags for a PyTorch anchor (--dropout
too: SDPA's dropout_p, timings only, its mask being PyTorch's own).

--bias FILE.npy or --mask FILE.npy (see run --help) applies an additive bias
or a boolean mask to every point, forward and backward; every point must fit
its shape [B|1, H|1, Nq|1, Nk] (a point that does not is refused before the
sweep, naming it: give the grid the sizes the file was made for, e.g. one
--seq with --heads and --batch, or a 2-D [N, N] file, which fits any B and
H). A float32 bias stays float32 at every --dtype; a float16 bias and a mask
are in each point's dtype. --bias-grad (with --backward) asks the backward
points for dBias too (--check then takes the worst of dQ, dK, dV and
dBias). The results record "bias" or "mask" (the file's name, its shape as
[B,H,Nq,Nk] and its element type: "mask.npy [1,1,1024,1024] bool") and, on
the backward, "bias_grad", which compare and report match and label on, and
the FLOPs count the visible pairs exactly (those the bias hides included).
bench/torch_sdpa.py takes the same three flags (SDPA's attn_mask).

--seqlens N1,N2,… (see run --help) benchmarks one packed batch of
self-attention sequences: the lengths are the grid's only length point,
run at every dtype × d × mask (--dim, --dtype and --causal still sweep;
--seq, --nq, --nk, --batch and --tokens are refused beside it). B is the
number of lengths, and the results have Nq = Nk = the longest and "seqlens"
with every length, which compare and report match and label on; TFLOP/s
counts each sequence's own visible pairs, and --check runs the reference
sequence by sequence. bench/torch_sdpa.py --seqlens times PyTorch's anchors
on the same batch (padded SDPA with a mask, and its packed path where it
has one).

A flag that would change nothing is refused (exit 2): --tokens beside --batch
or several --seqused-k values, --hidden beside --heads, --seq beside --nq and
--nk, --align without a causal mask, --window or --alibi or without a point
whose sequences have Nk ≠ Nq keys, a --window or --seqused-k that changes no
point, --bias-grad without --backward, --check with --benchfmt and no --json
(the errors would be printed nowhere), --per-kernel and --rotate where only
the CPU backend runs (it times whole calls on one input set), --per-kernel
with --progress none and no --json, --dropout-seed and --dropout-offset
without --dropout, in decode mode --backward, --rotate, --seq, --tokens beside
--cache-seqlens, --seqused-k, the dropout flags, --bias, --mask, --bias-grad
and --seqlens, and the engine flags where they do not apply (see run
--help).`,
		Example: `  flashvk bench --json h200.json
  flashvk bench --dim 64 --seq 1024,4096 --causal true --backward --benchfmt --count 10 | tee new.txt
  flashvk bench --dtype f16 --dim 128 --nq 1,128 --nk 8192 --heads 32 --kv-heads 8 --batch 4
  flashvk bench --dtype f16 --seq 4096,8192 --causal --window 1024,0 --backward --json sliding.json
  flashvk bench --dtype f16 --dim 128 --seqlens 8192,512,2048,77 --causal true --backward --json packed.json
  flashvk bench --dtype f16 --seq 1024 --dim 64 --heads 16 --batch 4 --causal true --mask mask.npy --backward --bias-grad --json masked.json
  flashvk bench --backend cpu --seq 128 --iters 5 --json cpu.json
  flashvk bench --decode --nk 1024,8192,32768 --batch 16 --heads 32 --kv-heads 8 --dim 128 --dtype f16 --json decode.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.bench(cmd, &f) },
	}
	f.shape.register(c, benchGrid, 0)
	f.backend.register(c, manyEngines)
	f.timing.register(c, 20, "timed calls per point (per series with --count)")
	fl := c.Flags()
	fl.BoolVar(&f.backward, "backward", false, "also benchmark the backward pass")
	fl.IntVar(&f.count, "count", 1, "timed series per point: --benchfmt prints each series' median as one sample")
	fl.IntVar(&f.rotate, "rotate", 1, "independent input sets cycled through (defeats caches)")
	fl.BoolVar(&f.perKernel, "per-kernel", false, "also time each kernel of a call (Vulkan: a barrier and a timestamp after every dispatch, so kernels that could overlap are serialised); JSON \"kernels\"")
	fl.StringVar(&f.jsonPath, "json", "", `write results to this file, checked before the sweep and written at its end ("-": stdout, instead of the table)`)
	fl.BoolVar(&f.benchfmt, "benchfmt", false, "print Go benchmark-format lines (for benchstat) instead of the table")
	fl.BoolVar(&f.check, "check", false, "also record max_abs and rel_l2 against the float64 reference (small points only)")
	fl.StringVar(&f.progress, "progress", "auto", "progress on stderr: auto (bar on a terminal, else lines), bar, lines or none")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the random inputs")
	return c
}

// benchPoint is one problem of the grid, with its plan's launches.
type benchPoint struct {
	p        problem
	backward bool
	launches []Launch
	// dec is the KV-cache call of a decode-mode point (p is its
	// problem); nil otherwise.
	dec *decodeProblem
}

// grid builds the points for one engine.
func (f *benchFlags) grid(cpu bool, dtypes []attention.DType) ([]benchPoint, error) {
	s := &f.shape
	if s.decodeMode() {
		return f.decodeGrid(dtypes)
	}
	seqs, tokens := s.seq, s.tokens
	if len(seqs) == 0 {
		seqs = paperSeqs
		if cpu {
			seqs = cpuSeqs
		}
	}
	if tokens == 0 {
		tokens = paperTokens
		if cpu && len(s.seq) == 0 {
			tokens = cpuTokens
		}
	}
	align, err := s.alignment()
	if err != nil {
		return nil, err
	}
	if err := s.checkKeyCountBatch(); err != nil {
		return nil, err
	}
	var pts []benchPoint
	// The features must change some point: noEffect says why they
	// change the first point, effective whether they change any.
	var noEffect error
	effective := false
	seen := map[string]bool{} // points that run the same call run once (a value given twice in a list)
	for _, dt := range dtypes {
		for _, d := range s.dim {
			for _, causal := range s.causal.vals {
				for _, n := range s.lengths(seqs) {
					b, h := s.batchHeads(n[0], n[1], d, tokens)
					hkv := s.kvHeads
					if hkv == 0 {
						hkv = h
					}
					p := problem{B: b, Hq: h, Hkv: hkv, Nq: n[0], Nk: n[1], D: d, Dv: d, DType: dt, Layout: attention.BSHD,
						Causal: causal, Align: align, features: s.features(b), bias: s.bias}
					p.BiasGrad = false // the forward's: the backward point asks for dBias
					if x := p.bias; x != nil {
						if err := x.check(p.B, p.Hq, p.Nq, p.Nk, p.packed()); err != nil {
							return nil, usagef("%s at the point d=%d B=%d H=%d %s: bench applies the bias to every point, which must all fit it (give the sizes it was made for: --seq or --nq and --nk, --dim, --heads, --batch)",
								strings.TrimSuffix(err.Error(), ", each of the first three 1 to broadcast"), d, b, h, lensLabel(p))
						}
					}
					if err := p.validate(); err != nil {
						return nil, err
					}
					if seen[p.String()] {
						continue
					}
					seen[p.String()] = true
					if err := errors.Join(p.features.effect(p.Nk, p.Causal), p.windowEffect()); err == nil {
						effective = true
					} else if noEffect == nil {
						noEffect = err
					}
					pts = append(pts, benchPoint{p: p})
					if f.backward {
						bp := p
						bp.BiasGrad = s.biasGrad
						pts = append(pts, benchPoint{p: bp, backward: true})
					}
				}
			}
		}
	}
	if !effective && noEffect != nil {
		return nil, noEffect
	}
	return pts, nil
}

// decodeGrid builds the points of decode mode: every dtype × d × mask ×
// Nq × Nk (Nk the cache capacity; without --nk the longest sequence),
// the mask --causal's where given, else the decoding rule (bottom-right
// causal, no mask for Nq = 1). Points that run the same call are run
// once.
func (f *benchFlags) decodeGrid(dtypes []attention.DType) ([]benchPoint, error) {
	s := &f.shape
	if err := s.checkDecodeSizes(); err != nil {
		return nil, err
	}
	align, err := s.decodeAlign()
	if err != nil {
		return nil, err
	}
	nqs, nks, tokens := s.nq, s.nk, s.tokens
	if len(nqs) == 0 {
		nqs = []int{1}
	}
	if len(nks) == 0 {
		nks = []int{0}
	}
	if tokens == 0 {
		tokens = paperTokens
	}
	var pts []benchPoint
	seen := map[string]bool{}
	for _, dt := range dtypes {
		for _, d := range s.dim {
			for _, causal := range []bool{false, true} {
				for _, nq := range nqs {
					if s.given("causal") && !slices.Contains(s.causal.vals, causal) || !s.given("causal") && causal != (nq > 1) {
						continue
					}
					for _, nk := range nks {
						b, h := s.batchHeads(nq, nk, d, tokens)
						dp, err := s.decodePoint(b, h, nq, nk, d, dt, causal, align)
						if err != nil {
							return nil, err
						}
						if k := fmt.Sprint(dp, dp.Lens); !seen[k] {
							seen[k] = true
							pts = append(pts, benchPoint{p: dp.problem, dec: &dp})
						}
					}
				}
			}
		}
	}
	return pts, nil
}

// pointLabel names a point in progress lines and errors.
func pointLabel(dev DeviceInfo, pt benchPoint) string {
	p := pt.p
	if d := pt.dec; d != nil {
		c := ""
		if d.Append > 0 {
			c += fmt.Sprintf(" +%d", d.Append)
		}
		if d.paged() {
			c += fmt.Sprintf(" paged %d", d.Block)
		}
		return fmt.Sprintf("%s kv %s d=%d Nq=%d B=%d lens=%s%s %s", dev.Name, shortDType(p.DType.String()), p.D, p.Nq, p.B,
			compactLens(d.lens(), ","), c, d.optionsString())
	}
	n := fmt.Sprintf("N=%d", p.Nq)
	switch {
	case p.packed():
		_, t, _ := p.stored()
		n = fmt.Sprintf("B=%d T=%d", p.B, t)
	case p.Nk != p.Nq:
		n = fmt.Sprintf("Nq=%d Nk=%d", p.Nq, p.Nk)
	}
	return fmt.Sprintf("%s %s %s d=%d %s %s", dev.Name, direction(pt.backward), shortDType(p.DType.String()), p.D, n, p.optionsString())
}

// checkEffect refuses the flags of bench that would change nothing.
func (f *benchFlags) checkEffect(cmd *cobra.Command) error {
	given := cmd.Flags().Changed
	decode := f.shape.decodeMode()
	switch {
	case decode && f.backward:
		return usagef("--backward has no effect in decode mode (%s): decoding has no backward pass", f.shape.decodeBy())
	case decode && given("rotate"):
		return usagef("--rotate has no effect in decode mode (%s): BenchmarkKVCache times one input set, resident on the device", f.shape.decodeBy())
	case f.check && f.benchfmt && f.jsonPath == "":
		return usagef("--check has no effect with --benchfmt and no --json: the errors would be printed nowhere (add --json FILE)")
	case f.perKernel && f.progress == "none" && f.jsonPath == "":
		return usagef("--per-kernel has no effect with --progress none and no --json: the kernel times would be printed nowhere")
	case given("rotate") && strings.EqualFold(f.backend.backend, "cpu"):
		return usagef("--rotate has no effect with --backend cpu: the CPU backend times every call on the same inputs")
	case f.perKernel && strings.EqualFold(f.backend.backend, "cpu"):
		return usagef("--per-kernel has no effect with --backend cpu: the CPU backend times whole calls")
	case f.shape.biasGrad && !f.backward && !decode:
		return usagef("--bias-grad has no effect without --backward: only the backward points compute dBias")
	}
	if decode {
		return f.shape.checkDecodeGrid()
	}
	if err := f.shape.checkEffect(); err != nil {
		return err
	}
	return f.shape.checkGridAlign()
}

// checkEngines refuses --rotate and --per-kernel when no engine times
// kernels (only the CPU backend runs: auto found no Vulkan device).
func (f *benchFlags) checkEngines(cmd *cobra.Command, es []*engine) error {
	if slices.ContainsFunc(es, func(e *engine) bool { return e.Info().Kind != attention.CPU }) {
		return nil
	}
	switch {
	case cmd.Flags().Changed("rotate"):
		return usagef("--rotate has no effect: only the CPU backend runs, and it times every call on the same inputs")
	case f.perKernel:
		return usagef("--per-kernel has no effect: only the CPU backend runs, and it times whole calls")
	}
	return nil
}

func (a *app) bench(cmd *cobra.Command, f *benchFlags) error {
	ctx := cmd.Context()
	if err := f.timing.check(1); err != nil {
		return err
	}
	if err := positive(intFlag{"--rotate", f.rotate}, intFlag{"--count", f.count}); err != nil {
		return err
	}
	if err := f.shape.checkGrid(); err != nil {
		return err
	}
	if f.benchfmt && f.jsonPath == "-" {
		return usagef("--benchfmt and --json - both write to stdout: give --json a file")
	}
	switch f.progress {
	case "auto", "bar", "lines", "none":
	default:
		return usagef("--progress %q: want auto, bar, lines or none", f.progress)
	}
	if err := f.checkEffect(cmd); err != nil {
		return err
	}
	if !f.shape.decodeMode() {
		if err := f.shape.loadBias(ctx); err != nil {
			return err
		}
	}
	want := f.shape.dtypes
	// Validate the grid before opening any device.
	if _, err := f.grid(false, append([]attention.DType{attention.Float32}, want...)); err != nil {
		return err
	}
	// --json FILE can be written: checked before any work.
	out := a.newOutputs(ctx)
	defer out.abort()
	if f.jsonPath != "" && f.jsonPath != "-" {
		if err := out.prepare("--json", f.jsonPath); err != nil {
			return err
		}
	}
	engines, err := a.openAll(&f.backend)
	if err != nil {
		return err
	}
	defer a.closeAll(engines)
	if err := f.checkEngines(cmd, engines); err != nil {
		return err
	}

	type job struct {
		e   *engine
		pts []benchPoint
	}
	var jobs []job
	total := 0
	for _, e := range engines {
		info := e.Info()
		dts := want
		if len(dts) == 0 {
			dts = []attention.DType{attention.Float32}
			if slices.Contains(info.DTypes, attention.Float16) {
				dts[0] = attention.Float16
			}
		}
		for _, dt := range dts {
			if !slices.Contains(info.DTypes, dt) {
				return fmt.Errorf("%s: %s does not run %s", e.label, info.Name, dt)
			}
		}
		cpu := info.Kind == attention.CPU
		if cpu && !f.shape.decodeMode() && len(f.shape.seqLens) == 0 && len(f.shape.seq) == 0 && (len(f.shape.nq) == 0 || len(f.shape.nk) == 0) {
			fmt.Fprintf(a.stderr, "note: %s: the CPU backend runs the small grid N ∈ {128, 256, 512}, B·N = %d (the paper's grid would take hours); give --seq to choose\n",
				e.label, cpuTokens)
		}
		pts, err := f.grid(cpu, dts)
		if err != nil {
			return err
		}
		jobs = append(jobs, job{e, pts})
		total += len(pts)
	}
	// Plan every point before running any: a point the device cannot run
	// stops the sweep now, not hours into it.
	var unplanned []string
	for _, j := range jobs {
		dev := j.e.device()
		for i := range j.pts {
			pt := &j.pts[i]
			var pl *attention.Plan
			var err error
			if d := pt.dec; d != nil {
				pl, err = j.e.PlanKVCache(ctx, d.qShape(), d.shapes(d.table(f.seed)), d.Append, d.Layout, d.DType, d.options())
			} else {
				pl, err = j.e.Plan(ctx, pt.p.qShape(), pt.p.kShape(), pt.p.vShape(), pt.p.Layout, pt.p.DType, pt.p.options(), pt.backward)
			}
			if err != nil {
				unplanned = append(unplanned, fmt.Sprintf("%s: %s", pointLabel(dev, *pt), oneLine(err.Error())))
				continue
			}
			pt.launches = resultLaunches(pl)
		}
	}
	if len(unplanned) > 0 {
		for _, m := range unplanned {
			fmt.Fprintf(a.stderr, "error: %s\n", m)
		}
		return fmt.Errorf("%d of %d points cannot run on their device; nothing was run", len(unplanned), total)
	}
	if a.beforeInputs != nil {
		a.beforeInputs()
	}
	if x := f.shape.bias; x != nil {
		if err := x.load(ctx); err != nil {
			return err
		}
		if f.check {
			if err := x.checkFinite(); err != nil {
				return err
			}
		}
	}

	prog := a.newProgress(f.progress, total)
	file := &ResultsFile{Schema: SchemaV1, Tool: "flashvk", Version: version(), Date: time.Now().UTC().Format(time.RFC3339),
		Device: engines[0].device(), Results: []Result{}}
	var failed []string
	done := 0
	// stopped is the error of an interrupted sweep: nothing is written.
	stopped := func(err error) error {
		prog.close()
		return interruptedError{detail: fmt.Sprintf("after %d of %d points (no results written)", done, total), err: err}
	}
	for _, j := range jobs {
		dev := j.e.device()
		var key string
		var q, k, v, do attention.Tensor
		var din *decodeInputs
		var ref *refResult
		for _, pt := range j.pts {
			if err := ctx.Err(); err != nil {
				return stopped(err)
			}
			p := pt.p
			label := pointLabel(dev, pt)
			prog.start(label)
			// Inputs are drawn once per problem and shared by fwd and bwd.
			if d := pt.dec; d != nil {
				if pk := fmt.Sprint(*d, d.Lens); pk != key {
					key, ref = pk, nil
					if din, err = d.inputs(ctx, f.seed, d.table(f.seed)); err != nil {
						return stopped(err)
					}
				}
			} else if pk := fmt.Sprint(p); pk != key {
				key, ref = pk, nil
				do = attention.Tensor{}
				ts := []*attention.Tensor{&q, &k, &v}
				shapes := []attention.Shape{p.qShape(), p.kShape(), p.vShape()}
				if f.check && f.backward {
					ts, shapes = append(ts, &do), append(shapes, p.oShape())
				}
				for i, t := range ts {
					if *t, err = randomTensorCtx(ctx, p.DType, shapes[i], p.Layout, rngFor(f.seed, uint64(i+1))); err != nil {
						return stopped(err)
					}
				}
			}
			bench := func() (*attention.BenchResult, error) {
				return j.e.Benchmark(ctx, q, k, v, p.options(),
					attention.BenchOptions{Warmup: f.timing.warmup, Iters: f.timing.iters, Backward: pt.backward, Rotate: f.rotate, PerKernel: f.perKernel})
			}
			if d := pt.dec; d != nil {
				bench = func() (*attention.BenchResult, error) {
					return j.e.BenchmarkKVCache(ctx, din.q, d.cache(din.k, din.v, din.table), din.newK, din.newV, p.options(),
						attention.BenchOptions{Warmup: f.timing.warmup, Iters: f.timing.iters, PerKernel: f.perKernel})
				}
			}
			res, samples, err := measure(f.count, bench)
			if ctx.Err() != nil {
				return stopped(ctx.Err())
			}
			done++
			if err != nil {
				msg := fmt.Sprintf("%s: %s", label, oneLine(err.Error()))
				failed = append(failed, msg)
				prog.finish(label, "error: "+oneLine(err.Error()))
				continue
			}
			r := Result{Direction: direction(pt.backward), DType: p.DType.String(), B: p.B, H: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk,
				D: p.D, Dv: p.Dv, Causal: p.Causal, Align: p.Align.String(), features: p.features, Kernel: j.e.kernel(),
				MedianMS: ms(res.Median()), P10MS: ms(res.Quantile(0.1)), P90MS: ms(res.Quantile(0.9)),
				TFLOPS: res.TFLOPS(), Iters: len(res.Times), Clock: res.Clock}
			if d := pt.dec; d != nil {
				r.Direction, r.CacheSeqLens, r.Append, r.BlockSize = "kv", d.lens(), d.Append, d.Block
				r.CacheBytes = d.cacheBytes()
				r.GBPerS = gbs(r.CacheBytes, r.MedianMS)
			}
			for _, t := range res.Times {
				r.TimesMS = append(r.TimesMS, ms(t))
			}
			if len(samples) > 1 {
				for _, t := range samples {
					r.SamplesMS = append(r.SamplesMS, ms(t))
				}
			}
			r.Retimed, r.Unsteady = res.Retimed, res.Unsteady
			for _, k := range res.Kernels {
				kr := (&attention.BenchResult{Times: k.Times})
				r.Kernels = append(r.Kernels, KernelResult{Name: k.Name, MedianMS: ms(kr.Median()), P10MS: ms(kr.Quantile(0.1))})
				prog.note(fmt.Sprintf("%s: kernel %s: median %s", label, k.Name, fmtMS(ms(kr.Median()))))
			}
			if res.Unsteady {
				prog.note(fmt.Sprintf("%s: the times still have a step after %d re-timings (GPU clock change?): the median is not a steady-state time", label, res.Retimed))
			}
			d := dev
			r.Device = &d
			r.Launch, r.Launches = mainLaunch(pt.launches), pt.launches
			if f.check && pt.dec != nil {
				if err := checkDecodePoint(ctx, j.e, *pt.dec, din, &ref, &r); err != nil {
					if ctx.Err() != nil {
						return stopped(err)
					}
					if errors.Is(err, errTooLargeToCheck) {
						prog.note(fmt.Sprintf("%s: too large for the float64 reference, not checked", label))
					} else {
						failed = append(failed, fmt.Sprintf("%s: check: %s", label, oneLine(err.Error())))
					}
				}
			} else if f.check {
				if float64(p.Hq)*p.pairs() > maxCheckScores {
					prog.note(fmt.Sprintf("%s: too large for the float64 reference, not checked", label))
				} else {
					if ref == nil {
						if ref, err = computeReference(ctx, p, q, k, v, do, f.backward); err != nil {
							if ctx.Err() != nil {
								return stopped(err)
							}
							return err
						}
					}
					if err := checkPoint(ctx, j.e, p, q, k, v, do, pt.backward, ref, &r); err != nil {
						if ctx.Err() != nil {
							return stopped(err)
						}
						failed = append(failed, fmt.Sprintf("%s: check: %s", label, oneLine(err.Error())))
					}
				}
			}
			file.Results = append(file.Results, r)
			outcome := fmt.Sprintf("%s  %s TFLOP/s", fmtMS(r.MedianMS), fmtTFLOPS(r.TFLOPS))
			if pt.dec != nil {
				outcome += fmt.Sprintf("  %s GB/s", fmtGBs(r.GBPerS))
			}
			prog.finish(label, outcome)
		}
	}
	prog.close()

	switch {
	case f.jsonPath == "-":
		if err := writeResults("-", a.stdout, file); err != nil {
			return err
		}
	case f.jsonPath != "":
		b, err := json.MarshalIndent(file, "", "  ")
		if err != nil {
			return err
		}
		if err := out.writeBytes("--json", f.jsonPath, append(b, '\n')); err != nil {
			return err
		}
		if err := out.commit(); err != nil {
			return err
		}
	}
	switch {
	case f.benchfmt:
		printBenchfmt(a.stdout, file.Results)
	case f.jsonPath != "-":
		printBench(a.stdout, file.Results, len(engines) > 1)
	}
	if f.jsonPath != "" && f.jsonPath != "-" {
		fmt.Fprintf(a.stderr, "wrote %d results to %s\n", len(file.Results), f.jsonPath)
	}
	if len(failed) > 0 {
		for _, m := range failed {
			fmt.Fprintf(a.stderr, "error: %s\n", m)
		}
		return fmt.Errorf("%d of %d points failed", len(failed), total)
	}
	return nil
}

// measure times one point count times, each an independent series (its
// own warm-up, then o.Iters timed calls), and returns the series merged
// (their times in call order) and each series' median: the samples.
func measure(count int, bench func() (*attention.BenchResult, error)) (*attention.BenchResult, []time.Duration, error) {
	var all *attention.BenchResult
	var samples []time.Duration
	for range count {
		r, err := bench()
		if err != nil {
			return nil, nil, err
		}
		samples = append(samples, r.Median())
		if all == nil {
			all = r
			continue
		}
		all.Times = append(all.Times, r.Times...)
		all.Retimed += r.Retimed
		all.Unsteady = all.Unsteady || r.Unsteady
		for i := range min(len(all.Kernels), len(r.Kernels)) {
			all.Kernels[i].Times = append(all.Kernels[i].Times, r.Kernels[i].Times...)
		}
	}
	return all, samples, nil
}

// checkPoint runs one call and records its error against the reference:
// O for the forward, the worst of dQ, dK and dV (and dBias, with
// --bias-grad) for the backward.
func checkPoint(ctx context.Context, e *engine, p problem, q, k, v, do attention.Tensor, backward bool, ref *refResult, r *Result) error {
	opt := p.options()
	out, err := e.Forward(ctx, q, k, v, opt)
	if err != nil {
		return err
	}
	var stats []reference.Stats
	if !backward {
		stats = append(stats, reference.Compare(out.O.Float32s(), ref.o))
	} else {
		g, err := e.Backward(ctx, q, k, v, out.O, out.LSE, do, opt)
		if err != nil {
			return err
		}
		stats = append(stats, reference.Compare(g.DQ.Float32s(), ref.dq), reference.Compare(g.DK.Float32s(), ref.dk),
			reference.Compare(g.DV.Float32s(), ref.dv))
		if p.BiasGrad {
			stats = append(stats, reference.Compare(bhsdFloat32s(g.DBias), ref.db))
		}
	}
	var maxAbs, relL2 float64
	for _, s := range stats {
		maxAbs, relL2 = max(maxAbs, s.MaxAbs), max(relL2, s.RelL2)
	}
	r.MaxAbs, r.RelL2 = metric(maxAbs), metric(relL2)
	return nil
}

// errTooLargeToCheck: a point too large for the float64 reference.
var errTooLargeToCheck = errors.New("too large for the float64 reference")

// checkDecodePoint runs one KV-cache call and records the error of O
// against the float64 reference (*ref, computed on first use).
func checkDecodePoint(ctx context.Context, e *engine, d decodeProblem, in *decodeInputs, ref **refResult, r *Result) error {
	var scores float64
	for b := range d.B {
		scores += float64(d.Hq) * float64(d.Nq) * float64(d.seqLen(b))
	}
	if scores > maxCheckScores || d.checkable() != nil {
		return errTooLargeToCheck
	}
	if *ref == nil {
		var err error
		if *ref, err = computeDecodeReference(ctx, d, in); err != nil {
			return err
		}
	}
	out, err := e.ForwardKVCache(ctx, in.q, d.cache(in.k, in.v, in.table), in.newK, in.newV, d.options())
	if err != nil {
		return err
	}
	s := reference.Compare(out.O.Float32s(), (*ref).o)
	r.MaxAbs, r.RelL2 = metric(s.MaxAbs), metric(s.RelL2)
	return nil
}

// progress reports bench progress on stderr.
type progress struct {
	bar   *progressbar.ProgressBar
	out   io.Writer // stderr
	lines bool      // one line per point instead of a bar
	n, of int
}

func (a *app) newProgress(mode string, total int) *progress {
	if mode == "auto" {
		mode = "lines"
		if a.stderrTTY {
			mode = "bar"
		}
	}
	p := &progress{of: total, out: a.stderr}
	switch mode {
	case "bar":
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(a.stderr),
			progressbar.OptionSetDescription("bench"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionClearOnFinish(),
		)
	case "lines":
		p.lines = true
	}
	return p
}

func (p *progress) start(label string) {
	if p.bar != nil {
		p.bar.Describe(label)
	}
}

func (p *progress) finish(label, outcome string) {
	p.n++
	if p.bar != nil {
		_ = p.bar.Add(1)
	}
	if p.lines {
		fmt.Fprintf(p.out, "[%d/%d] %s: %s\n", p.n, p.of, label, outcome)
	}
}

func (p *progress) note(msg string) {
	if p.bar != nil {
		_ = p.bar.Clear() // the note goes above the bar
	}
	if p.bar != nil || p.lines {
		fmt.Fprintf(p.out, "note: %s\n", msg)
	}
}

func (p *progress) close() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// printBench prints the results table.
func printBench(w io.Writer, rs []Result, multi bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := "dir\tdtype\tB\tH\tN\td\tcausal\tmedian\tp10\tp90\tTFLOP/s\t"
	check := slices.ContainsFunc(rs, func(r Result) bool { return r.RelL2 != nil })
	kv := slices.ContainsFunc(rs, func(r Result) bool { return r.Direction == "kv" })
	options := slices.ContainsFunc(rs, func(r Result) bool { return r.features.set() })
	if kv {
		hdr += "GB/s\tcache\t"
	}
	if check {
		hdr += "max_abs\trel_l2\t"
	}
	if options {
		hdr += "options\t"
	}
	if multi {
		hdr = "device\t" + hdr
	}
	fmt.Fprintln(tw, hdr)
	for _, r := range rs {
		if multi {
			fmt.Fprintf(tw, "%s\t", r.Device.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%v\t%s\t%s\t%s\t%s\t", r.Direction, shortDType(r.DType), r.B, headsLabel(r), seqN(&r), r.D,
			r.Causal, fmtMS(r.MedianMS), fmtMS(r.P10MS), fmtMS(r.P90MS), fmtTFLOPS(r.TFLOPS))
		if kv {
			if r.Direction == "kv" {
				fmt.Fprintf(tw, "%s\t%s\t", fmtGBs(r.GBPerS), cacheLabel(r))
			} else {
				fmt.Fprint(tw, "-\t-\t")
			}
		}
		if check {
			if r.RelL2 != nil {
				fmt.Fprintf(tw, "%.2e\t%.2e\t", float64(*r.MaxAbs), float64(*r.RelL2))
			} else {
				fmt.Fprint(tw, "-\t-\t")
			}
		}
		if options {
			fmt.Fprintf(tw, "%s\t", cmp.Or(keyOf(&r).Options, "-"))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// cacheLabel describes a kv result's cache: the lengths before the call,
// the rows appended, the block size of a paged cache.
func cacheLabel(r Result) string {
	s := "lens " + compactLens(r.CacheSeqLens, ",")
	if r.Append > 0 {
		s += fmt.Sprintf(" +%d", r.Append)
	}
	if r.BlockSize > 0 {
		s += fmt.Sprintf(" paged %d", r.BlockSize)
	}
	return s
}

// benchName is a result's Go benchmark name (without the -GOMAXPROCS suffix).
func benchName(r Result) string {
	if r.Direction == "kv" {
		return kvBenchName(r)
	}
	mask := "noncausal"
	if r.Causal {
		mask = "causal"
	}
	name := fmt.Sprintf("BenchmarkAttention/%s/%s/d%d/N%d/%s", r.Direction, shortDType(r.DType), r.D, r.Nq, mask)
	if r.B*r.Nq != paperTokens || r.H*r.D != paperHidden || r.Hkv != r.H || r.Nk != r.Nq {
		name += fmt.Sprintf("/B%dH%d", r.B, r.H)
		if r.Hkv != r.H {
			name += "Hkv" + strconv.Itoa(r.Hkv)
		}
		if r.Nk != r.Nq {
			name += "Nk" + strconv.Itoa(r.Nk)
		}
	}
	return name + r.features.nameSuffix()
}

// kvBenchName is benchName for a kv result: the shape, the lengths (up
// to 8, else their count, range and mean), the append and the block size.
func kvBenchName(r Result) string {
	mask := "noncausal"
	if r.Causal {
		mask = "causal"
	}
	name := fmt.Sprintf("BenchmarkAttention/kv/%s/d%d/N%d/%s/B%dH%d", shortDType(r.DType), r.D, r.Nq, mask, r.B, r.H)
	if r.Hkv != r.H {
		name += "Hkv" + strconv.Itoa(r.Hkv)
	}
	name += "Nk" + strconv.Itoa(r.Nk) + "/L" + lensName(r.CacheSeqLens)
	if r.Append > 0 {
		name += fmt.Sprintf("/append%d", r.Append)
	}
	if r.BlockSize > 0 {
		name += fmt.Sprintf("/paged%d", r.BlockSize)
	}
	return name + r.features.nameSuffix()
}

// lensName is a list of lengths in a benchmark name: up to 8 joined by
// "-", else their count, range and mean.
func lensName(ls []int) string {
	if len(ls) <= 8 {
		return compactLens(ls, "-")
	}
	sum := 0
	for _, x := range ls {
		sum += x
	}
	return fmt.Sprintf("n%dmin%dmax%dmean%d", len(ls), slices.Min(ls), slices.Max(ls), sum/len(ls))
}

// printBenchfmt prints the results in the Go benchmark format, one
// configuration block per device, so benchstat can compare runs.
func printBenchfmt(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/flashvk/flashvk\n", runtime.GOOS, runtime.GOARCH)
	var last string
	procs := runtime.GOMAXPROCS(0)
	for _, r := range rs {
		dev := r.Device
		if dev == nil {
			dev = &DeviceInfo{}
		}
		if cfg := dev.Name + "\x00" + r.Kernel; cfg != last {
			last = cfg
			fmt.Fprintf(w, "device: %s\nbackend: %s\nkernel: %s\nclock: %s\n", dev.Name, dev.Backend, r.Kernel, r.Clock)
		}
		// A kv result also reports its cache bandwidth.
		bw := func(m float64) string {
			if r.Direction != "kv" {
				return ""
			}
			return fmt.Sprintf("\t%.4g GB/s", gbs(r.CacheBytes, m))
		}
		if len(r.SamplesMS) == 0 {
			fmt.Fprintf(w, "%s-%d\t%d\t%.0f ns/op\t%.4g TFLOP/s%s\n", benchName(r), procs, r.Iters, r.MedianMS*1e6, r.TFLOPS, bw(r.MedianMS))
			continue
		}
		// One line per timed series: benchstat's samples.
		for _, m := range r.SamplesMS {
			fmt.Fprintf(w, "%s-%d\t%d\t%.0f ns/op\t%.4g TFLOP/s%s\n", benchName(r), procs, r.Iters/len(r.SamplesMS), m*1e6, r.flops()/(m/1e3)/1e12, bw(m))
		}
	}
}
