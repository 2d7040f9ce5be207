package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	// dense FP16 tensor-core peaks; 4300 GB/s and 790 TFLOP/s are lower,
	// attainable rates. bfloat16 runs flashvk's scalar kernels (fp32
	// arithmetic, no tensor cores yet), so its peak is the FP32 one.
	"h200": {Name: "NVIDIA H200", BandwidthGBs: 4300,
		PeakTFLOPS: map[string]float64{"float32": 67, "float16": 790, "bfloat16": 67},
		PeakKind:   map[string]string{"float32": "FP32", "float16": "FP16 matrix", "bfloat16": "FP32 (bf16 storage, scalar kernels)"}},
}

// analysis is the memory analysis of one problem (forward pass).
type analysis struct {
	Problem     problemJSON `json:"problem"`
	ElemBytes   int         `json:"elem_bytes"`
	ScoreElems  float64     `json:"score_elems"` // B·Hq·Nq·Nk: S (and P) per materialisation
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
	// Device facts.
	Device          string `json:"device,omitempty"`
	MaxSharedMemory uint32 `json:"max_shared_memory,omitempty"`
	// Tuning says where tuned configurations come from (the tune cache)
	// and TuneWarnings why some were not used.
	Tuning       string   `json:"tuning,omitempty"`
	TuneWarnings []string `json:"tune_warnings,omitempty"`
	// Backend is the backend the launch configuration is of ("vulkan",
	// "cpu"); Tiles summarises it and Launches lists the Vulkan
	// dispatches of the forward and the backward, in order.
	Backend  string          `json:"backend,omitempty"`
	Tiles    string          `json:"tiles"`
	Launches []explainLaunch `json:"launches,omitempty"`
	// Plans say which kernel family runs each pass and why the families
	// tried first did not.
	Plans       []explainPlan `json:"plans,omitempty"`
	Assumptions []string      `json:"assumptions"`
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
	io := f(p.B, p.Hq, p.Nq, p.D) + f(p.B, p.Hkv, p.Nk, p.D) + f(p.B, p.Hkv, p.Nk, p.Dv) + f(p.B, p.Hq, p.Nq, p.Dv)
	score := f(p.B, p.Hq, p.Nq, p.Nk)
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
		Tiles:      "launch configuration: unknown",
		Assumptions: []string{
			"naive: S = scale·QKᵀ is written, read by the softmax, P is written and read by P·V (4 passes over Nq×Nk per head, in the storage dtype); Q, K, V are read and O written once; a causal mask does not shrink S",
			"flash: Q, K and V are read once and O written once (the ideal: a real kernel streams K and V once per query tile, from L2 when they fit); the LSE (B·Hq·Nq float32) is not counted",
			"FLOPs: FlashAttention convention, 4·B·Hq·Nq·Nk·d forward (d the mean of d and dv), halved when causal; backward 2.5× the forward",
		},
	}
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
	given := cmd.Flags().Changed
	switch {
	case given("workers"):
		return usagef("--workers has no effect on explain: it runs no attention, and the CPU backend's plan does not depend on its goroutines")
	case f.preset != "" && given("peak-tflops") && given("bandwidth-gbs"):
		return usagef("--device-preset has no effect: --peak-tflops and --bandwidth-gbs give both rates")
	}
	if err := f.shape.checkEffect(); err != nil {
		return err
	}
	return f.shape.checkAlign(p)
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
matrix, 67 TFLOP/s bfloat16: flashvk's bf16 kernels compute in fp32). Otherwise
only the intensities are printed.

It then opens the engine --backend, --device and --kernel select (as run does)
and shows how it runs the problem: the kernel family of each pass and why the
families tried first declined it, every dispatch's grid, workgroup, tile and
shared memory (on the CPU backend its tile per worker), and whether each tile
comes from the tune cache ('flashvk tune').

A flag that would change nothing is refused (exit 2): --workers (explain runs
no attention, and the CPU plan does not depend on it), --device-preset beside
both --peak-tflops and --bandwidth-gbs, --align without --causal or with
Nq = Nk, --seq beside --nq and --nk, and a Vulkan flag (--device, --kernel,
--addressing, --validation) where only the CPU backend runs. --scale and
--layout are part of the problem it describes and plans.`,
		Example: `  flashvk explain --seq 4096 --dim 128 --heads 16 --dtype float16
  flashvk explain --seq 16384 --dim 64 --causal --device-preset h200 --json
  flashvk explain --nq 1 --nk 8192 --heads 32 --kv-heads 8 --causal false --backend vulkan --kernel flash`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.shape.problem()
			if err != nil {
				return err
			}
			if err := f.checkEffect(cmd, p); err != nil {
				return err
			}
			an := analyze(p)
			peak, bw, src := f.peakTFLOPS, f.bandwidthGBs, "--peak-tflops/--bandwidth-gbs"
			if f.preset != "" {
				pr, ok := presets[strings.ToLower(f.preset)]
				if !ok {
					return usagef("--device-preset %q: known presets: h200", f.preset)
				}
				if peak == 0 {
					peak = pr.PeakTFLOPS[p.DType.String()]
				}
				if bw == 0 {
					bw = pr.BandwidthGBs
				}
				src = fmt.Sprintf("--device-preset %s: %s %s peak", pr.Name, p.DType, pr.PeakKind[p.DType.String()])
				if f.peakTFLOPS != 0 || f.bandwidthGBs != 0 {
					src += ", overridden by --peak-tflops/--bandwidth-gbs"
				}
			}
			if peak < 0 || bw < 0 {
				return usagef("--peak-tflops and --bandwidth-gbs must be positive")
			}
			if (peak > 0) != (bw > 0) {
				return usagef("give both --peak-tflops and --bandwidth-gbs (or --device-preset h200)")
			}
			an.roofline(peak, bw, src)
			if err := a.explainLaunches(cmd.Context(), &f, p, &an); err != nil {
				return err
			}
			if f.json {
				b, err := json.MarshalIndent(an, "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%s\n", b)
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
	return c
}

func printAnalysis(w io.Writer, p problem, a *analysis) {
	fmt.Fprintf(w, "problem   %s\n", p)
	fmt.Fprintf(w, "FLOPs     forward %s", siFlops(a.Flops))
	if p.Causal {
		fmt.Fprint(w, " (halved: causal)")
	}
	fmt.Fprintf(w, ", backward %s\n", siFlops(a.BwdFlops))
	fmt.Fprintf(w, "S and P   B·Hq·Nq·Nk = %s elements = %s each in %s: materialised by naive attention,\n          never by flash attention (tiles stay in shared memory and registers)\n\n",
		si(a.ScoreElems, ""), si(a.ScoreBytes, "B"), p.DType)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tmemory traffic\telements\tbytes\tFLOP/byte\t")
	fmt.Fprintf(tw, "naive\t4·B·H·Nq·Nk + Q,K,V,O\t%s\t%s\t%.1f\t\n", si(a.NaiveElems, ""), si(a.NaiveBytes, "B"), a.NaiveAI)
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
	fmt.Fprintf(w, "\n%s\n", a.Tiles)
	if a.Device != "" {
		fmt.Fprintf(w, "device    %s: at most %s (%d bytes) of shared memory per workgroup\n", a.Device, bytesIEC(uint64(a.MaxSharedMemory)), a.MaxSharedMemory)
	}
	if len(a.Launches) > 0 {
		fmt.Fprintln(w)
		printLaunches(w, a.Launches, a.MaxSharedMemory)
	}
	for _, pl := range a.Plans {
		fmt.Fprintf(w, "\n%s  runs %s", pl.Direction, pl.Family)
		if len(pl.Addresses) > 0 {
			fmt.Fprintf(w, " (%s through 64-bit device addresses)", strings.Join(pl.Addresses, ", "))
		}
		if pl.Split {
			fmt.Fprintf(w, " in submissions of %d batches", pl.Batches)
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
	fmt.Fprintln(w, "\nassumptions:")
	for _, s := range a.Assumptions {
		fmt.Fprintf(w, "  - %s\n", s)
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
	e, err := a.openOne(&f.backend)
	if err != nil {
		return err
	}
	defer a.closeAll([]*engine{e})
	in := e.Info()
	an.Backend = in.Name
	why := ""
	if fb := e.Fallback(); fb != "" {
		why = "; no Vulkan backend: " + oneLine(fb)
	}
	if in.Vulkan != nil {
		an.Device, an.MaxSharedMemory = in.Device, in.Vulkan.MaxSharedMemory
	}
	var failed []string
	for _, bwd := range []bool{false, true} {
		dir := "fwd"
		if bwd {
			dir = "bwd"
		}
		pl, err := e.Plan(ctx, p.qShape(), p.kShape(), p.vShape(), p.Layout, p.DType, p.options(), bwd)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failed = append(failed, dir+": "+oneLine(err.Error()))
			continue
		}
		an.Plans = append(an.Plans, explainPlan{Direction: dir, Family: pl.Family, Declined: pl.Declined,
			Addresses: planAddresses(pl), Batches: pl.Batches, Split: pl.Batches < p.B})
		for _, l := range resultLaunches(pl) {
			an.Launches = append(an.Launches, explainLaunch{Direction: dir, Launch: l})
		}
	}
	an.Tiles = fmt.Sprintf("launch configuration (%s backend, %s storage)%s", in.Name, p.DType, why)
	if len(failed) > 0 {
		an.Tiles += ": " + strings.Join(failed, "; ")
	}
	if in.Kind == attention.Vulkan {
		an.Tuning, an.TuneWarnings = tuningLine(e.TuneInfo())
	}
	return nil
}
