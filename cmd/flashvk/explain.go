package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/flashvk/flashvk/attention"
	"github.com/spf13/cobra"
)

// devicePreset holds published peak rates of a device.
type devicePreset struct {
	Name         string
	BandwidthGBs float64            // HBM bandwidth, GB/s
	PeakTFLOPS   map[string]float64 // by dtype
	PeakKind     map[string]string  // what the peak is, by dtype
}

// presets are the devices whose peak rates flashvk knows. Vulkan does not
// report peak rates, so they are only used when asked for by name.
var presets = map[string]devicePreset{
	// NVIDIA H200: the project's planning figures. For comparison the SXM
	// datasheet gives 4.8 TB/s HBM3e, 67 TFLOP/s FP32 and 989 TFLOP/s
	// dense FP16 (and BF16) tensor-core peaks; 4300 GB/s and 790 TFLOP/s
	// are lower, attainable rates. float32 keeps the FP32 peak: its
	// forward and backward up to d 128 run on the bf16
	// matrix units in three planes (six products a GEMM: 790/6 = 132
	// TFLOP/s of attention), the rest on the scalar kernels.
	"h200": {Name: "NVIDIA H200", BandwidthGBs: 4300,
		PeakTFLOPS: map[string]float64{"float32": 67, "float16": 790, "bfloat16": 790},
		PeakKind:   map[string]string{"float32": "FP32", "float16": "FP16 matrix", "bfloat16": "BF16 matrix"}},
}

// analysis is the memory analysis of one problem (forward pass).
type analysis struct {
	Problem     problemJSON `json:"problem"`
	ElemBytes   int         `json:"elem_bytes"`
	ScoreElems  float64     `json:"score_elems"` // B·Hq·Nq·Nk (packed: Hq·ΣNi²): S (and P) per materialisation
	ScoreBytes  float64     `json:"score_bytes"`
	NaiveElems  float64     `json:"naive_elems"`
	FlashElems  float64     `json:"flash_elems"`
	NaiveBytes  float64     `json:"naive_bytes"`
	FlashBytes  float64     `json:"flash_bytes"`
	TrafficGain float64     `json:"traffic_ratio"` // naive / flash bytes
	Flops       float64     `json:"flops"`
	BwdFlops    float64     `json:"bwd_flops"`
	NaiveAI     float64     `json:"naive_intensity"` // FLOP per byte
	FlashAI     float64     `json:"flash_intensity"`
	// Roofline, when peak rates are known.
	PeakTFLOPS   float64 `json:"peak_tflops,omitempty"`
	BandwidthGBs float64 `json:"bandwidth_gbs,omitempty"`
	Ridge        float64 `json:"ridge_point,omitempty"` // FLOP per byte
	NaiveMinMS   float64 `json:"naive_min_ms,omitempty"`
	FlashMinMS   float64 `json:"flash_min_ms,omitempty"`
	RateSource   string  `json:"rate_source,omitempty"`
	enginePlan
	Assumptions []string `json:"assumptions"`
}

// enginePlan is how the engine explain opens runs the problem.
type enginePlan struct {
	// Device facts.
	Device          string `json:"device,omitempty"`
	MaxSharedMemory uint32 `json:"max_shared_memory,omitempty"`
	// Tuning says where tuned configurations come from (the tune cache)
	// and TuneWarnings why some were not used.
	Tuning       string   `json:"tuning,omitempty"`
	TuneWarnings []string `json:"tune_warnings,omitempty"`
	// Backend is the backend the launch configuration is of ("vulkan",
	// "cpu"); Tiles summarises it and Launches lists the Vulkan
	// dispatches of the forward and the backward (or of the KV-cache
	// call), in order.
	Backend  string          `json:"backend,omitempty"`
	Tiles    string          `json:"tiles"`
	Launches []explainLaunch `json:"launches,omitempty"`
	// Plans say which kernel family runs each pass and why the families
	// tried first did not.
	Plans []explainPlan `json:"plans,omitempty"`
}

// explainPlan is the family choice of one pass.
type explainPlan struct {
	Direction string   `json:"direction"`
	Family    string   `json:"family"`
	Declined  []string `json:"declined,omitempty"`
	// Addresses are the operands read through device addresses (none
	// when all are bound); Batches how many batches one submission runs
	// (the launches are those of one).
	Addresses []string `json:"addresses,omitempty"`
	Batches   int      `json:"batches"`
	// Split: Batches < B.
	Split bool `json:"split,omitempty"`
	// Splits and SplitKeys (a KV-cache call): each sequence's cache is
	// split into Splits parts of SplitKeys rows, run side by side and
	// merged by their log-sum-exp (0: the backend does not split, as the
	// CPU backend).
	Splits    int `json:"splits,omitempty"`
	SplitKeys int `json:"split_keys,omitempty"`
	// Tiles are the query×key tiles of the pass's first tiled launch
	// (per head, over every batch), TilesComputed those the mask, window
	// and key counts leave a visible pair in (the kernels skip the rest),
	// TilesFraction their share (Plan.Tiles, Plan.TilesVisited); absent
	// where no launch is tiled.
	Tiles         int64   `json:"tiles,omitempty"`
	TilesComputed int64   `json:"tiles_computed,omitempty"`
	TilesFraction float64 `json:"tiles_fraction,omitempty"`
	// ScratchBytes is the device memory one submission of the pass takes
	// beside its operands (attention.Plan.ScratchBytes; absent on the CPU
	// backend).
	ScratchBytes int64 `json:"scratch_bytes,omitempty"`
	// BiasTiles, with --bias or --mask, counts the tiles the bias leaves
	// nothing to compute in (see skippedTiles); absent without a bias
	// or where no launch is tiled.
	BiasTiles *biasTiles `json:"bias_tiles,omitempty"`
	// tileRows and tileCols are the pass's first tiled launch's tile (0
	// where none is).
	tileRows, tileCols int
}

// biasTiles are the tiles a bias leaves nothing to compute in, counted on
// the host from its file for a pass's tile of TileRows query rows ×
// TileCols keys: of the tiles of every sequence and query head that the
// causal mask, window and key counts leave a visible pair in (Of: Hq ×
// the tiles computed, where Plan.TilesVisited counts them alike), those
// whose every visible pair the bias hides (−Inf).
type biasTiles struct {
	Skipped  int64 `json:"skipped"`
	Of       int64 `json:"of"`
	TileRows int   `json:"tile_rows"`
	TileCols int   `json:"tile_cols"`
}

// tilesText says how many of a pass's tiles are computed:
// "36 of 64 query×key tiles computed (56.2%)"; "" where none is counted.
func (pl explainPlan) tilesText() string {
	if pl.Tiles == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d query×key tiles computed (%.1f%%)", pl.TilesComputed, pl.Tiles, 100*pl.TilesFraction)
}

// analyze computes the memory traffic of naive and flash attention.
//
//	naive: S = QKᵀ written, S read by the softmax, P written, P read by
//	       PV: 4·B·Hq·Nq·Nk elements, plus Q, K, V read and O written once;
//	flash: Q, K, V read once and O written once.
//
// With Hq = Hkv, Nq = Nk = N and dv = d both reduce to the FlashAttention
// paper's 4·B·H·N² + 4·B·H·N·d and 4·B·H·N·d.
func analyze(p problem) analysis {
	f := func(xs ...int) float64 {
		r := 1.0
		for _, x := range xs {
			r *= float64(x)
		}
		return r
	}
	b, tq, tk := p.stored()
	io := f(b, p.Hq, tq, p.D) + f(b, p.Hkv, tk, p.D) + f(b, p.Hkv, tk, p.Dv) + f(b, p.Hq, tq, p.Dv)
	score := float64(p.Hq) * p.pairs()
	es := p.DType.Size()
	a := analysis{
		Problem:    p.json(),
		ElemBytes:  es,
		ScoreElems: score,
		ScoreBytes: score * float64(es),
		NaiveElems: 4*score + io,
		FlashElems: io,
		Flops:      p.flops(false),
		BwdFlops:   p.flops(true),
		Assumptions: []string{
			"naive: S = scale·QKᵀ is written, read by the softmax, P is written and read by P·V (4 passes over Nq×Nk per head, in the storage dtype); Q, K, V are read and O written once; a causal mask does not shrink S",
			"flash: Q, K and V are read once and O written once (the ideal: a real kernel streams K and V once per query tile, from L2 when they fit); the LSE (B·Hq·Nq float32) is not counted",
			"FLOPs: FlashAttention convention, 4·B·Hq·Nq·Nk·d forward (d the mean of d and dv), halved when causal; backward 2.5× the forward",
		},
	}
	if p.features.set() {
		a.Assumptions[2] = "FLOPs: 4·Hq·d forward per (query, key) pair the mask, window and key counts leave visible, counted exactly (d the mean of d and dv; the softcap's tanh, ALiBi's bias and dropout's generator are not counted); backward 2.5× the forward"
	}
	if p.packed() {
		a.Assumptions[0] = "naive: each sequence's S = scale·QKᵀ (Ni×Ni per head, Hq·ΣNi² elements in all) is written, read by the softmax, P is written and read by P·V, in the storage dtype; Q, K, V are read and O written once; a causal mask does not shrink S"
		a.Assumptions[2] = "FLOPs: 4·Hq·d forward per (query, key) pair of a sequence's own that the mask, window and key counts leave visible, counted exactly (d the mean of d and dv; the softcap's tanh, ALiBi's bias and dropout's generator are not counted); backward 2.5× the forward"
		a.Assumptions = append(a.Assumptions, fmt.Sprintf("tiles: a packed batch is tiled as the padded grid of B = %d sequences of Nmax = %d queries and keys (Plan.Tiles); the kernels compute only the tiles that hold a visible pair of one sequence's own queries and keys (Plan.TilesVisited) and skip the rest", p.B, p.Nq))
	}
	if x := p.bias; x != nil {
		n := float64(x.shape[0]) * float64(x.shape[1]) * float64(x.shape[2]) * float64(x.shape[3])
		bt := x.dtype(p.DType)
		a.Assumptions[2] = strings.Replace(a.Assumptions[2], "counted exactly (", "counted exactly (those the bias hides too: the count does not read its values; ", 1)
		grad := ""
		if p.BiasGrad {
			grad = "; with --bias-grad the backward also writes dBias of its shape"
		}
		a.Assumptions = append(a.Assumptions,
			fmt.Sprintf("bias: %s (%s elements, %s in %s) is read by naive and flash attention alike and is not counted in the traffic above%s", x.path, si(n, ""), si(n*float64(bt.Size()), "B"), bt, grad),
			"tiles skipped by the bias: of the tiles of every query head that the mask, window and key counts leave a visible pair in (Hq × those computed), those whose every visible (query, key) pair the bias sets to −Inf, counted on the host from its values for each pass's tile")
	}
	a.Tiles = "launch configuration: unknown"
	a.NaiveBytes = a.NaiveElems * float64(es)
	a.FlashBytes = a.FlashElems * float64(es)
	a.TrafficGain = a.NaiveBytes / a.FlashBytes
	a.NaiveAI = a.Flops / a.NaiveBytes
	a.FlashAI = a.Flops / a.FlashBytes
	return a
}

// roofline adds the ridge point and the time lower bounds.
func (a *analysis) roofline(peakTFLOPS, bwGBs float64, source string) {
	if peakTFLOPS <= 0 || bwGBs <= 0 {
		return
	}
	a.PeakTFLOPS, a.BandwidthGBs, a.RateSource = peakTFLOPS, bwGBs, source
	a.Ridge = peakTFLOPS * 1e12 / (bwGBs * 1e9)
	bound := func(bytes float64) float64 {
		return max(a.Flops/(peakTFLOPS*1e12), bytes/(bwGBs*1e9)) * 1e3
	}
	a.NaiveMinMS, a.FlashMinMS = bound(a.NaiveBytes), bound(a.FlashBytes)
}

type explainFlags struct {
	shape        shapeFlags
	backend      backendFlags
	preset       string
	peakTFLOPS   float64
	bandwidthGBs float64
	json         bool
}

// checkEffect refuses the flags of explain that would change nothing.
func (f *explainFlags) checkEffect(cmd *cobra.Command, p problem) error {
	if err := f.checkRates(cmd); err != nil {
		return err
	}
	if err := f.shape.checkEffect(); err != nil {
		return err
	}
	return f.shape.checkProblem(p)
}

func (a *app) explainCmd() *cobra.Command {
	var f explainFlags
	c := &cobra.Command{
		Use:   "explain",
		Short: "Explain the memory traffic and arithmetic intensity of naive vs flash attention",
		Long: `Explain why FlashAttention is fast for a problem: the memory traffic of naive
attention, which materialises the Nq×Nk score matrix S and probabilities P in
memory, against flash attention, which keeps them in on-chip tiles; the FLOPs;
the arithmetic intensity (FLOP per byte) of each; and, when the device's peak
rates are known, the ridge point of its roofline and a lower bound on the time.

  naive  reads+writes 4·B·H·Nq·Nk + (Q, K, V, O) elements:
         S written, S read (softmax), P written, P read (P·V)
  flash  reads+writes (Q, K, V, O) only = 4·B·H·N·d for Nq = Nk = N, d = dv
         (assumption: Q, K, V read once and O written once)

Vulkan does not report peak rates: give --peak-tflops and --bandwidth-gbs, or
--device-preset h200 (4300 GB/s; 67 TFLOP/s float32, 790 TFLOP/s float16
matrix, 790 TFLOP/s bfloat16 matrix). Otherwise
only the intensities are printed.

It then opens the engine --backend, --device and --kernel select (as run does)
and shows how it runs the problem: the kernel family of each pass and why the
families tried first declined it, the device memory each pass takes beside
its operands (scratch: attention.Plan.ScratchBytes; Vulkan only), every
dispatch's grid, workgroup, tile and shared memory (on the CPU backend its
tile per worker), and whether each tile comes from the tune cache ('flashvk
tune').

With --stats it opens the Vulkan device with compiler statistics on
(VK_KHR_pipeline_executable_properties, attention.Config.PipelineStatistics),
builds every launch's pipeline and prints, per launch, what the driver's
compiler reports of it: the register count per invocation (occupancy),
spills, scratch or local memory and shared memory, in the driver's own
names (NVIDIA: "Register Count"…; RADV: "VGPRs", "Spilled VGPRs", "LDS
size"…); --json gives all of them per launch ("statistics"). A device
whose driver does not report them (lavapipe) is an error; 'flashvk devices
--json' says which do ("pipeline_statistics").

In decode mode (--cache-seqlens, --paged, --append, or --decode with --nk;
see run --help) it explains one KV-cache call instead: the cache bytes it
must read (attention.KVCacheBytes), in all and per generated token (B·Nq
tokens a call), its FLOPs and intensity, the roofline floor, and the plan
(PlanKVCache), with how many parts each sequence's cache is split into
(splits × rows per split, merged by their log-sum-exp). --window, --softcap
and --alibi apply to the call as in run's decode mode (a window's splits
cover only the rows it leaves visible).

Each pass's plan also says how many of its query×key tiles the kernels
compute: those the causal mask, --window and --seqused-k leave a visible
(query, key) pair in (Plan.TilesVisited of Plan.Tiles, and their fraction);
the rest are skipped. With --window, --softcap, --alibi, --seqused-k or
--dropout (see run --help) the FLOPs count the visible pairs exactly;
dropout skips no tile.

With --bias FILE.npy or --mask FILE.npy (see run --help) the problem line
names the file, the FLOPs count the pairs the bias hides too, and explain
reads the file and says for each pass "tiles skipped by the bias: N of M":
of the query×key tiles of every query head that the causal mask, --window
and --seqused-k leave a visible pair in (M: Hq × the tiles computed), the N
whose every visible (query, key) pair the bias sets to −Inf, counted on the
host for the pass's tile (its first tiled launch's TileRows × TileCols);
--json has them per plan as "bias_tiles" ({skipped, of, tile_rows,
tile_cols}). --bias-grad plans the backward with dBias.

With --seqlens (a packed batch of sequences, see run --help) the traffic and
FLOPs are those of each sequence's own rows and (query, key) pairs (naive
attention materialises Hq·ΣNi² scores), and each pass's tiles are those of
the padded grid the kernels launch — B sequences of the longest length —
against those computed: the tiles that hold a visible pair of one
sequence's own queries and keys.

A flag that would change nothing is refused (exit 2): --workers (explain runs
no attention, and the CPU plan does not depend on it), --device-preset beside
both --peak-tflops and --bandwidth-gbs, --align without --causal, --window or
--alibi, or where every sequence has Nq keys, --window -1,-1, --window -1,R
with --causal, --seqused-k where every sequence uses all its keys, --seq
beside --nq and --nk, --dropout-seed and --dropout-offset without
--dropout, --bias with --mask and --bias-grad without either, in decode mode
--seq, --decode beside another decode flag, --seqused-k, the dropout flags,
--bias, --mask, --bias-grad, --seqlens and --causal with Nq = 1 under
the bottom-right mask, and a Vulkan flag (--device, --kernel, --addressing,
--validation, --stats) where only the CPU backend runs. --seq, --nq,
--nk and --batch beside --seqlens do not apply (exit 2). --scale and
--layout are part of the problem it describes and plans.`,
		Example: `  flashvk explain --seq 4096 --dim 128 --heads 16 --dtype float16
  flashvk explain --seq 16384 --dim 64 --causal --device-preset h200 --json
  flashvk explain --seq 16384 --dim 128 --causal --window 4096,0 --device-preset h200
  flashvk explain --seqlens 4096,512,1024,77 --dim 128 --causal --device-preset h200
  flashvk explain --seq 1024 --dim 64 --causal --mask mask.npy --device-preset h200
  flashvk explain --nq 1 --nk 8192 --heads 32 --kv-heads 8 --causal false --backend vulkan --kernel flash
  flashvk explain --seq 4096 --dim 128 --heads 16 --causal --backend vulkan --stats
  flashvk explain --cache-seqlens 128,4000,17 --heads 32 --kv-heads 8 --dim 128 --paged 16 --device-preset h200`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.shape.decodeMode() {
				return a.explainDecode(cmd, &f)
			}
			if err := f.shape.loadBias(cmd.Context()); err != nil {
				return err
			}
			p, err := f.shape.problem()
			if err != nil {
				return err
			}
			if err := f.checkEffect(cmd, p); err != nil {
				return err
			}
			an := analyze(p)
			peak, bw, src, err := f.rates(p.DType)
			if err != nil {
				return err
			}
			an.roofline(peak, bw, src)
			if err := a.explainLaunches(cmd.Context(), &f, p, &an); err != nil {
				return err
			}
			if f.json {
				if err := a.printJSON(an); err != nil {
					return err
				}
				return nil
			}
			printAnalysis(a.stdout, p, &an)
			return nil
		},
	}
	f.shape.register(c, oneProblem, attention.Float16)
	f.backend.register(c, oneEngine)
	fl := c.Flags()
	fl.StringVar(&f.preset, "device-preset", "", "use a known device's peak rates for the roofline: h200")
	fl.Float64Var(&f.peakTFLOPS, "peak-tflops", 0, "peak compute rate in TFLOP/s for the roofline")
	fl.Float64Var(&f.bandwidthGBs, "bandwidth-gbs", 0, "memory bandwidth in GB/s for the roofline")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	fl.BoolVar(&f.backend.stats, "stats", false, "build each launch's pipeline and print the Vulkan driver's compiler statistics (register count, spills, shared memory: VK_KHR_pipeline_executable_properties; all of them with --json)")
	return c
}

// decodeAnalysis is explain's analysis of a KV-cache call (decode mode):
// the cache bytes it must read against its FLOPs.
type decodeAnalysis struct {
	Problem   problemJSON `json:"problem"`
	ElemBytes int         `json:"elem_bytes"`
	// Flops counts 4·d per query head and visible (query, cache row)
	// pair (d the mean of d and dv), every mask exactly.
	Flops float64 `json:"flops"`
	// CacheBytes are the K and V bytes the call must read
	// (attention.KVCacheBytes); Tokens = B·Nq the tokens one call
	// generates, BytesPerToken = CacheBytes / Tokens.
	CacheBytes    float64 `json:"cache_bytes"`
	Tokens        int     `json:"tokens"`
	BytesPerToken float64 `json:"bytes_per_token"`
	// Intensity is FLOP per cache byte.
	Intensity float64 `json:"intensity"`
	// Roofline, when peak rates are known: MinMS is the lower bound on
	// the time, the larger of the compute and the memory time.
	PeakTFLOPS   float64 `json:"peak_tflops,omitempty"`
	BandwidthGBs float64 `json:"bandwidth_gbs,omitempty"`
	Ridge        float64 `json:"ridge_point,omitempty"`
	MinMS        float64 `json:"min_ms,omitempty"`
	RateSource   string  `json:"rate_source,omitempty"`
	enginePlan
	Assumptions []string `json:"assumptions"`
}

// explainDecode is explain in decode mode: the bytes and FLOPs of one
// KV-cache call and the engine's plan of it (PlanKVCache: the kernels and
// how each sequence's cache is split).
func (a *app) explainDecode(cmd *cobra.Command, f *explainFlags) error {
	ctx := cmd.Context()
	p, err := f.shape.decodeProblem()
	if err != nil {
		return err
	}
	if err := f.checkDecodeEffect(cmd, p); err != nil {
		return err
	}
	peak, bw, src, err := f.rates(p.DType)
	if err != nil {
		return err
	}
	an := decodeAnalysis{Problem: p.json(), ElemBytes: p.DType.Size(), Flops: p.flops(), CacheBytes: p.cacheBytes(), Tokens: p.B * p.Nq,
		Assumptions: []string{
			"cache bytes: the K and V rows each sequence attends to (its length plus the rows appended), read once per KV head in the storage dtype (attention.KVCacheBytes): the memory-bound floor of decoding; Q, O, the LSE, the appended rows' writes and a split's partial results are not counted",
			"FLOPs: 4·d per query head and visible (query, cache row) pair (d the mean of d and dv), every mask and window counted exactly",
			"the mask defaults to bottom-right causal (FlashAttention's decoding rule: query i sees rows j ≤ i + L − Nq), which for Nq = 1 masks nothing",
		}}
	an.BytesPerToken = an.CacheBytes / float64(an.Tokens)
	if an.CacheBytes > 0 {
		an.Intensity = an.Flops / an.CacheBytes
	}
	if peak > 0 && bw > 0 {
		an.PeakTFLOPS, an.BandwidthGBs, an.RateSource = peak, bw, src
		an.Ridge = peak * 1e12 / (bw * 1e9)
		an.MinMS = max(an.Flops/(peak*1e12), an.CacheBytes/(bw*1e9)) * 1e3
	}
	an.Tiles = "launch configuration: unknown"
	table := p.table(1)
	pass := planPass{"kv", func(e *engine) (*attention.Plan, error) {
		return e.PlanKVCache(ctx, p.qShape(), p.shapes(table), p.Append, p.Layout, p.DType, p.options())
	}}
	if err := a.explainPlans(ctx, f, p.DType, p.B, []planPass{pass}, &an.enginePlan); err != nil {
		return err
	}
	if f.json {
		if err := a.printJSON(an); err != nil {
			return err
		}
		return nil
	}
	w := a.stdout
	fmt.Fprintf(w, "problem   %s\n", p)
	fmt.Fprintf(w, "cache     %s\n", p.cacheString())
	fmt.Fprintf(w, "FLOPs     %s (4·d per visible (query, cache row) pair and query head)\n", siFlops(an.Flops))
	fmt.Fprintf(w, "bytes     %s of cache read in all (K and V rows each sequence attends to, in %s)\n", si(an.CacheBytes, "B"), p.DType)
	tokens := "tokens"
	if an.Tokens == 1 {
		tokens = "token"
	}
	fmt.Fprintf(w, "          %s per generated token (B·Nq = %d %s per call)\n", si(an.BytesPerToken, "B"), an.Tokens, tokens)
	fmt.Fprintf(w, "          %.3g FLOP/byte\n", an.Intensity)
	if an.Ridge > 0 {
		fmt.Fprintf(w, "\nroofline  %.0f TFLOP/s, %.0f GB/s (%s)\n", an.PeakTFLOPS, an.BandwidthGBs, an.RateSource)
		fmt.Fprintf(w, "          ridge point %.1f FLOP/byte\n", an.Ridge)
		bound := "compute-bound"
		if an.Intensity < an.Ridge {
			bound = "memory-bound"
		}
		fmt.Fprintf(w, "          %s, ≥ %s\n", bound, fmtMS(an.MinMS))
	} else {
		fmt.Fprintf(w, "\nroofline  peak rates unknown: give --peak-tflops and --bandwidth-gbs (or --device-preset h200) for the time floor\n")
	}
	printEnginePlan(w, &an.enginePlan)
	fmt.Fprintln(w, "\nassumptions:")
	for _, s := range an.Assumptions {
		fmt.Fprintf(w, "  - %s\n", s)
	}
	return nil
}

// checkDecodeEffect refuses the flags of explain that would change nothing
// in decode mode.
func (f *explainFlags) checkDecodeEffect(cmd *cobra.Command, p decodeProblem) error {
	if err := f.checkRates(cmd); err != nil {
		return err
	}
	return f.shape.checkDecodeEffect(p)
}

// checkRates refuses the flags of explain that change nothing in either
// mode: --workers, and a device preset both rates override.
func (f *explainFlags) checkRates(cmd *cobra.Command) error {
	given := cmd.Flags().Changed
	switch {
	case given("workers"):
		return usagef("--workers has no effect on explain: it runs no attention, and the CPU backend's plan does not depend on its goroutines")
	case f.preset != "" && given("peak-tflops") && given("bandwidth-gbs"):
		return usagef("--device-preset has no effect: --peak-tflops and --bandwidth-gbs give both rates")
	}
	return nil
}

// rates are the peak compute rate and bandwidth of the roofline (0, 0
// when unknown) and where they come from: --peak-tflops and
// --bandwidth-gbs, else --device-preset's for dt.
func (f *explainFlags) rates(dt attention.DType) (peak, bw float64, src string, err error) {
	peak, bw, src = f.peakTFLOPS, f.bandwidthGBs, "--peak-tflops/--bandwidth-gbs"
	if f.preset != "" {
		pr, ok := presets[strings.ToLower(f.preset)]
		if !ok {
			return 0, 0, "", usagef("--device-preset %q: known presets: h200", f.preset)
		}
		if peak == 0 {
			peak = pr.PeakTFLOPS[dt.String()]
		}
		if bw == 0 {
			bw = pr.BandwidthGBs
		}
		src = fmt.Sprintf("--device-preset %s: %s %s peak", pr.Name, dt, pr.PeakKind[dt.String()])
		if f.peakTFLOPS != 0 || f.bandwidthGBs != 0 {
			src += ", overridden by --peak-tflops/--bandwidth-gbs"
		}
	}
	if peak < 0 || bw < 0 || math.IsNaN(peak) || math.IsNaN(bw) || math.IsInf(peak, 0) || math.IsInf(bw, 0) {
		return 0, 0, "", usagef("--peak-tflops and --bandwidth-gbs must be positive and finite")
	}
	if peak > 0 && bw > 0 && math.IsInf(peak*1e12/(bw*1e9), 0) {
		return 0, 0, "", usagef("--peak-tflops %g and --bandwidth-gbs %g: their ridge point (FLOP per byte) is not a finite number", peak, bw)
	}
	if (peak > 0) != (bw > 0) {
		return 0, 0, "", usagef("give both --peak-tflops and --bandwidth-gbs (or --device-preset h200)")
	}
	return peak, bw, src, nil
}

func printAnalysis(w io.Writer, p problem, a *analysis) {
	fmt.Fprintf(w, "problem   %s\n", p)
	scores, naive := "B·Hq·Nq·Nk", "4·B·H·Nq·Nk"
	if p.packed() {
		scores, naive = "Hq·ΣNi²", "4·H·ΣNi²"
		_, t, _ := p.stored()
		fmt.Fprintf(w, "packed    %d sequences, %d rows in all: the plans tile the padded grid of %d × Nmax = %d queries × %d keys per head\n          and compute only the tiles with a visible pair of one sequence's own queries and keys\n",
			p.B, t, p.B, p.Nq, p.Nk)
	}
	fmt.Fprintf(w, "FLOPs     forward %s", siFlops(a.Flops))
	switch {
	case p.packed():
		fmt.Fprint(w, " (each sequence's own visible pairs)")
	case p.features.set():
		fmt.Fprint(w, " (visible pairs)")
	case p.Causal:
		fmt.Fprint(w, " (halved: causal)")
	}
	fmt.Fprintf(w, ", backward %s\n", siFlops(a.BwdFlops))
	fmt.Fprintf(w, "S and P   %s = %s elements = %s each in %s: materialised by naive attention,\n          never by flash attention (tiles stay in shared memory and registers)\n\n",
		scores, si(a.ScoreElems, ""), si(a.ScoreBytes, "B"), p.DType)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tmemory traffic\telements\tbytes\tFLOP/byte\t")
	fmt.Fprintf(tw, "naive\t%s + Q,K,V,O\t%s\t%s\t%.1f\t\n", naive, si(a.NaiveElems, ""), si(a.NaiveBytes, "B"), a.NaiveAI)
	fmt.Fprintf(tw, "flash\tQ,K,V,O once\t%s\t%s\t%.1f\t\n", si(a.FlashElems, ""), si(a.FlashBytes, "B"), a.FlashAI)
	tw.Flush()
	fmt.Fprintf(w, "\nflash moves %.1f× fewer bytes than naive attention\n", a.TrafficGain)
	if a.Ridge > 0 {
		fmt.Fprintf(w, "\nroofline  %.0f TFLOP/s, %.0f GB/s (%s)\n", a.PeakTFLOPS, a.BandwidthGBs, a.RateSource)
		fmt.Fprintf(w, "          ridge point %.1f FLOP/byte\n", a.Ridge)
		bound := func(ai float64) string {
			if ai < a.Ridge {
				return "memory-bound"
			}
			return "compute-bound"
		}
		fmt.Fprintf(w, "          naive: %s, ≥ %s\n", bound(a.NaiveAI), fmtMS(a.NaiveMinMS))
		fmt.Fprintf(w, "          flash: %s, ≥ %s\n", bound(a.FlashAI), fmtMS(a.FlashMinMS))
	} else {
		fmt.Fprintf(w, "\nroofline  peak rates unknown: give --peak-tflops and --bandwidth-gbs (or --device-preset h200) for the ridge point\n")
	}
	printEnginePlan(w, &a.enginePlan)
	fmt.Fprintln(w, "\nassumptions:")
	for _, s := range a.Assumptions {
		fmt.Fprintf(w, "  - %s\n", s)
	}
}

// printEnginePlan prints how the engine runs the problem: the launch
// configuration, each pass's family (and a KV-cache call's splits), the
// tuning.
func printEnginePlan(w io.Writer, a *enginePlan) {
	fmt.Fprintf(w, "\n%s\n", a.Tiles)
	if a.Device != "" {
		fmt.Fprintf(w, "device    %s: at most %s (%d bytes) of shared memory per workgroup\n", a.Device, bytesIEC(uint64(a.MaxSharedMemory)), a.MaxSharedMemory)
	}
	if len(a.Launches) > 0 {
		fmt.Fprintln(w)
		printLaunches(w, a.Launches, a.MaxSharedMemory)
		printStatistics(w, a.Launches)
	}
	for _, pl := range a.Plans {
		fmt.Fprintf(w, "\n%s  runs %s", pl.Direction, pl.Family)
		if len(pl.Addresses) > 0 {
			fmt.Fprintf(w, " (%s through 64-bit device addresses)", strings.Join(pl.Addresses, ", "))
		}
		if pl.Split {
			fmt.Fprintf(w, " in submissions of %d batches", pl.Batches)
		}
		if t := pl.tilesText(); t != "" {
			fmt.Fprintf(w, ", %s", t)
		}
		if bt := pl.BiasTiles; bt != nil {
			fmt.Fprintf(w, ", tiles skipped by the bias: %d of %d", bt.Skipped, bt.Of)
		}
		if pl.Direction == "kv" {
			switch pl.Splits {
			case 0:
				fmt.Fprint(w, ", splits none (each sequence's cache rows in one pass)")
			case 1:
				fmt.Fprintf(w, ", splits 1 × %d rows (one part per sequence: nothing to merge)", pl.SplitKeys)
			default:
				fmt.Fprintf(w, ", splits %d × %d rows (each sequence's cache in %d parts run side by side, merged by their log-sum-exp)", pl.Splits, pl.SplitKeys, pl.Splits)
			}
		}
		if pl.ScratchBytes > 0 {
			fmt.Fprintf(w, ", scratch %s", bytesIEC(uint64(pl.ScratchBytes)))
		}
		if len(pl.Declined) > 0 {
			fmt.Fprintf(w, "; not %s", strings.Join(pl.Declined, "; not "))
		}
	}
	if len(a.Plans) > 0 {
		fmt.Fprintln(w)
	}
	if a.Tuning != "" {
		fmt.Fprintf(w, "\ntuning    %s\n", a.Tuning)
		for _, s := range a.TuneWarnings {
			fmt.Fprintf(w, "          warning: %s\n", s)
		}
	}
}

// planAddresses lists the operands any launch of pl reads through device
// addresses, in first-use order.
func planAddresses(pl *attention.Plan) []string {
	var ops []string
	for _, l := range pl.Launches {
		for _, op := range l.Addresses {
			if !slices.Contains(ops, op) {
				ops = append(ops, op)
			}
		}
	}
	return ops
}

// explainLaunches fills the launch configuration of p on the backend
// the backend flags select: the plan of the forward and of the backward (kernel family,
// and each dispatch's kernel, grid, workgroup, tile and shared memory) on
// a Vulkan device, or the CPU backend's tiles.
func (a *app) explainLaunches(ctx context.Context, f *explainFlags, p problem, an *analysis) error {
	var passes []planPass
	for _, bwd := range []bool{false, true} {
		passes = append(passes, planPass{direction(bwd), func(e *engine) (*attention.Plan, error) {
			return e.Plan(ctx, p.qShape(), p.kShape(), p.vShape(), p.Layout, p.DType, p.options(), bwd)
		}})
	}
	if err := a.explainPlans(ctx, f, p.DType, p.B, passes, &an.enginePlan); err != nil {
		return err
	}
	if p.bias == nil {
		return nil
	}
	// The tiles the bias leaves nothing to compute in, from its values.
	if err := p.bias.load(ctx); err != nil {
		return err
	}
	for i := range an.Plans {
		pl := &an.Plans[i]
		if pl.tileRows > 0 {
			skipped, of := skippedTiles(p, pl.tileRows, pl.tileCols)
			pl.BiasTiles = &biasTiles{Skipped: skipped, Of: of, TileRows: pl.tileRows, TileCols: pl.tileCols}
		}
	}
	return nil
}

// planPass is one pass explain plans: its direction and how.
type planPass struct {
	dir  string
	plan func(e *engine) (*attention.Plan, error)
}

// explainPlans opens the engine the backend flags select and fills ep
// with its plan of each pass (a problem of b batches in dtype dt).
func (a *app) explainPlans(ctx context.Context, f *explainFlags, dt attention.DType, b int, passes []planPass, ep *enginePlan) error {
	e, err := a.openOne(&f.backend)
	if err != nil {
		return err
	}
	defer a.closeAll([]*engine{e})
	in := e.Info()
	ep.Backend = in.Name
	why := ""
	if fb := e.Fallback(); fb != "" {
		why = "; no Vulkan backend: " + oneLine(fb)
	}
	if in.Vulkan != nil {
		ep.Device, ep.MaxSharedMemory = in.Device, in.Vulkan.MaxSharedMemory
	}
	var failed []string
	for _, ps := range passes {
		pl, err := ps.plan(e)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failed = append(failed, ps.dir+": "+oneLine(err.Error()))
			continue
		}
		ep.Plans = append(ep.Plans, explainPlan{Direction: ps.dir, Family: pl.Family, Declined: pl.Declined,
			Addresses: planAddresses(pl), Batches: pl.Batches, Split: pl.Batches < b, Splits: pl.Splits, SplitKeys: pl.SplitKeys,
			Tiles: pl.Tiles, TilesComputed: pl.TilesVisited, ScratchBytes: pl.ScratchBytes})
		if i := slices.IndexFunc(pl.Launches, func(l attention.Launch) bool { return l.TileRows > 0 && l.TileCols > 0 }); i >= 0 {
			ep.Plans[len(ep.Plans)-1].tileRows, ep.Plans[len(ep.Plans)-1].tileCols = pl.Launches[i].TileRows, pl.Launches[i].TileCols
		}
		if pl.Tiles > 0 {
			ep.Plans[len(ep.Plans)-1].TilesFraction = float64(pl.TilesVisited) / float64(pl.Tiles)
		}
		for i, l := range resultLaunches(pl) {
			ep.Launches = append(ep.Launches, explainLaunch{Direction: ps.dir, Launch: l, Statistics: pl.Launches[i].Statistics})
		}
	}
	ep.Tiles = fmt.Sprintf("launch configuration (%s backend, %s storage)%s", in.Name, dt, why)
	if len(failed) > 0 {
		ep.Tiles += ": " + strings.Join(failed, "; ")
	}
	if in.Kind == attention.Vulkan {
		ep.Tuning, ep.TuneWarnings = tuningLine(e.TuneInfo())
	}
	return nil
}
