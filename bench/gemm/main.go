//go:build cgo

// Command gemm finds the Vulkan matrix-unit (tensor-core) ceiling of a GPU
// with fp16 GEMM kernels on VK_KHR_cooperative_matrix and
// VK_NV_cooperative_matrix2 — and, with timing probes (gemm_khr.comp's
// PROBE: the MMAs alone, with their fragment loads from shared memory, with
// a barrier a step, with every load an L1 hit), where a GEMM's time goes —
// and checks and times coopmat attention kernels
// on the FlashAttention-2 benchmark grid: flashvk's flash_cm
// (internal/shaders) and the NV cooperative matrix 2 experiment flash_cm2
// (shaders/flash_cm2.comp).
//
//	go build -o gemm ./bench/gemm && ./gemm -mode all -out DIR \
//	    [-torch-mm DIR/torch_mm.json] [-torch-sdpa DIR/torch.json]
//
// Modes (comma-separated, or all): info, probe, gemm, check, sweep, grid;
// or table, which opens no device and prints the tables of the bench JSON
// files named by -merge. Results go to DIR/bench[-TAG].json (everything) and
// DIR/attn[-TAG].json (the grid, in the flashvk-bench/1 schema of
// docs/results-schema.md); a compact table comparing with the PyTorch JSON
// files is printed last.
//
// flash_cm and its layout probe are flashvk's own modules (internal/shaders);
// the program's own kernels (shaders/*.comp: gemm_khr, gemm_cm2, flash_cm2)
// are embedded as shaders/*.spv, rebuilt by bench/gemm/build.sh (make
// bench-shaders) and checked against their sources by make shaders-check.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/vkattn"
)

var (
	flagMode     = flag.String("mode", "all", "comma-separated modes: info, probe, gemm, check, sweep, grid (or all)")
	flagOut      = flag.String("out", ".", "directory for bench.json and attn.json")
	flagDevice   = flag.String("device", "", "device selection (device.Options.Select)")
	flagTorchMM  = flag.String("torch-mm", "", "torch matmul JSON (bench/gemm/torch_matmul.py) for the final table")
	flagTorch    = flag.String("torch-sdpa", "", "torch SDPA JSON (bench/torch_sdpa.py) for the final table")
	flagSizes    = flag.String("gemm-sizes", "4096,8192", "GEMM sizes (M=N=K)")
	flagWarm     = flag.Int("warmup", 3, "warm-up dispatches")
	flagIters    = flag.Int("iters", 20, "timed dispatches (median reported)")
	flagSeqs     = flag.String("seqs", "512,1024,2048,4096,8192,16384", "grid sequence lengths")
	flagDims     = flag.String("dims", "64,128", "grid head dims")
	flagTokens   = flag.Int("tokens", 16384, "grid B·N")
	flagSweepN   = flag.Int("sweep-n", 4096, "sequence length of the tile sweep")
	flagTimeout  = flag.Duration("timeout", 30*time.Second, "per-submission GPU timeout")
	flagQuick    = flag.Bool("quick", false, "small check shapes only (CPU devices)")
	flagTag      = flag.String("tag", "", "suffix of the output files: bench-TAG.json, attn-TAG.json")
	flagMerge    = flag.String("merge", "", "mode table: comma-separated bench JSON files to print together")
	flagGemmOnly = flag.String("gemm-only", "", "only GEMM variants whose name contains this")
	flagOnly     = flag.String("only", "", "only configurations whose kernel/config name contains this")
	flagShapes   = flag.String("shapes", "", "only these check shapes (indices, comma-separated)")
	flagForce0   = flag.Bool("mode0-only", false, "never use the register softmax (MODE 1)")
)

// report is everything bench.json holds.
type report struct {
	Date     string
	Device   map[string]any
	Probe    *cmLayoutJSON `json:",omitempty"`
	Gemm     []gemmResult  `json:",omitempty"`
	Checks   []checkResult `json:",omitempty"`
	Sweep    []sweepResult `json:",omitempty"`
	Chosen   map[string]string
	Grid     []benchRow `json:",omitempty"`
	Errors   []string   `json:",omitempty"`
	Duration string
}

type cmLayoutJSON struct {
	Shape   string
	Summary string
	AccRC   [][][2]int
	ARC     [][][2]int
}

func main() {
	flag.Parse()
	start := time.Now()
	modes := map[string]bool{}
	for _, m := range strings.Split(*flagMode, ",") {
		modes[strings.TrimSpace(m)] = true
	}
	all := modes["all"]
	on := func(m string) bool { return all || modes[m] }
	logf := func(f string, a ...any) { fmt.Printf(f+"\n", a...) }
	if modes["table"] {
		merged := &report{Chosen: map[string]string{}}
		for _, f := range strings.Split(*flagMerge, ",") {
			b, err := os.ReadFile(strings.TrimSpace(f))
			if err != nil {
				logf("table: %v", err)
				continue
			}
			var r report
			if err := json.Unmarshal(b, &r); err != nil {
				logf("table: %s: %v", f, err)
				continue
			}
			if merged.Device == nil {
				merged.Device = r.Device
			}
			merged.Gemm = append(merged.Gemm, r.Gemm...)
			merged.Checks = append(merged.Checks, r.Checks...)
			merged.Grid = append(merged.Grid, r.Grid...)
			merged.Errors = append(merged.Errors, r.Errors...)
			for k, v := range r.Chosen {
				merged.Chosen[k] = v
			}
		}
		if merged.Device != nil {
			logf("device: %v | driver %v | Vulkan %v", merged.Device["name"], merged.Device["driver"], merged.Device["api"])
		}
		printTables(merged, logf)
		return
	}

	d, err := device.Open(device.Options{Select: *flagDevice, DefaultTimeout: *flagTimeout, PipelineStatistics: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(1)
	}
	exitCode := 0
	defer func() { // last, after the other deferred calls
		if exitCode != 0 {
			os.Exit(exitCode)
		}
	}()
	defer d.Close()
	info := d.Info()
	rep := &report{Date: start.UTC().Format(time.RFC3339), Chosen: map[string]string{}}
	rep.Device = map[string]any{"name": info.Name, "driver": info.DriverName + " " + info.DriverInfo, "api": info.APIVersion,
		"subgroup": info.SubgroupSize, "shared": info.MaxSharedMemory, "coopmat": fmt.Sprint(info.CoopMat), "coopmat2": fmt.Sprintf("%+v", info.CoopMat2)}
	logf("device: %s | driver %s %s | Vulkan %s | subgroup %d (%d–%d, control %v, full %v) | shared %d B/wg",
		info.Name, info.DriverName, info.DriverInfo, info.APIVersion, info.SubgroupSize, info.MinSubgroupSize, info.MaxSubgroupSize,
		info.SubgroupSizeControl, info.ComputeFullSubgroups, info.MaxSharedMemory)
	logf("coopmat: %v", info.CoopMat)
	logf("coopmat2: %+v", info.CoopMat2)
	ctx := context.Background()
	save := func() {
		rep.Duration = time.Since(start).Round(time.Millisecond).String()
		b, _ := json.MarshalIndent(rep, "", " ")
		_ = os.WriteFile(filepath.Join(*flagOut, outName("bench")), b, 0o644)
	}
	defer save()

	var lay *vkattn.CMLayout
	if on("probe") || on("check") || on("sweep") || on("grid") {
		sh, err := vkattn.CMShape(info)
		if err != nil {
			rep.Errors = append(rep.Errors, "probe: "+err.Error())
			logf("probe: %v", err)
		} else if lay, err = vkattn.RunCMProbe(ctx, d, sh); err != nil {
			rep.Errors = append(rep.Errors, "probe: "+err.Error())
			logf("probe: %v", err)
		} else {
			if *flagForce0 {
				lay.Mode1 = false
				lay.Why = "disabled by -mode0-only"
			}
			logf("probe: %s", lay)
			rep.Probe = &cmLayoutJSON{Shape: sh.String(), Summary: lay.String(), AccRC: lay.AccRC, ARC: lay.ARC}
			for lane := 0; lane < min(4, lay.SG); lane++ {
				logf("  lane %d: acc %v | A %v", lane, lay.AccRC[lane], lay.ARC[lane])
			}
		}
	}
	if on("gemm") {
		var sizes []int
		for _, s := range strings.Split(*flagSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err == nil {
				sizes = append(sizes, n)
			}
		}
		res, err := runGemm(ctx, d, sizes, *flagWarm, *flagIters, logf)
		rep.Gemm = res
		if err != nil {
			rep.Errors = append(rep.Errors, "gemm: "+err.Error())
			logf("gemm: %v", err)
		}
		save()
	}
	h := &harness{d: d, lay: lay, rep: rep, logf: logf, pipes: map[string]*attnKernel{}, rng: rand.New(rand.NewPCG(1, 2)), save: save}
	defer h.closeAll()
	if (on("check") || on("sweep") || on("grid")) && len(h.candidates()) == 0 {
		msg := "attention: no kernel can run on this device (flash_cm: KHR cooperative matrices, flash_cm2: NV cooperative matrix 2), or -only excludes them"
		rep.Errors = append(rep.Errors, msg)
		logf("%s", msg)
		exitCode = 1
	} else {
		if on("check") {
			h.checks()
			save()
		}
		if on("sweep") {
			h.sweep()
			save()
		}
		if on("grid") {
			h.grid()
			save()
		}
	}
	save()
	printTables(rep, logf)
}

func outName(base string) string {
	if *flagTag != "" {
		return base + "-" + *flagTag + ".json"
	}
	return base + ".json"
}

func parseInts(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// torchFile is the part of a flashvk-bench/1 (or torch_matmul.py) file the
// table needs.
type torchFile struct {
	Device  map[string]any `json:"device"`
	Version string         `json:"version"`
	Results []struct {
		D      int     `json:"d"`
		Nq     int     `json:"Nq"`
		Causal bool    `json:"causal"`
		TFLOPS float64 `json:"tflops"`
		Size   int     `json:"size"`
		Kernel string  `json:"kernel"`
	} `json:"results"`
}

func readTorch(path string) *torchFile {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var t torchFile
	if json.Unmarshal(b, &t) != nil {
		return nil
	}
	return &t
}

func printTables(rep *report, logf func(string, ...any)) {
	mm := readTorch(*flagTorchMM)
	if len(rep.Gemm) > 0 {
		logf("\n== GEMM fp16 (fp32 accumulate), TFLOP/s, median of %d ==", *flagIters)
		for _, g := range rep.Gemm {
			line := fmt.Sprintf("%5d %-26s ", g.Size, g.Variant.Name)
			if g.Err != "" {
				line += "ERR " + g.Err
				if len(line) > 110 {
					line = line[:110]
				}
			} else {
				line += fmt.Sprintf("%7.1f  ok=%v", g.TFLOPS, g.Pass)
				if g.Variant.Probe != 0 {
					line = fmt.Sprintf("%5d %-26s %7.1f  probe", g.Size, g.Variant.Name, g.TFLOPS)
				}
				if mm != nil {
					for _, r := range mm.Results {
						if r.Size == g.Size && r.TFLOPS > 0 {
							line += fmt.Sprintf("  %.2fx torch(%.0f)", g.TFLOPS/r.TFLOPS, r.TFLOPS)
						}
					}
				}
			}
			logf("%s", line)
		}
	}
	if len(rep.Checks) > 0 {
		pass, total := 0, 0
		for _, c := range rep.Checks {
			total++
			if c.Pass {
				pass++
			}
		}
		logf("\n== attention checks: %d/%d pass (rel_l2 O vs float64; bound 2x PyTorch-style fp16) ==", pass, total)
		worst := map[string]float64{}
		for _, c := range rep.Checks {
			k := c.Kernel + " " + c.Cfg
			if v, ok := c.RelO.(float64); ok {
				worst[k] = max(worst[k], v)
			} else {
				worst[k] = 1e9
			}
			if !c.Pass {
				logf("FAIL %s %s %s relO=%v bound=%.2e relLSE=%v nan=%d unwritten=%d infmis=%d %s", c.Kernel, c.Cfg, c.Shape, c.RelO, c.BoundO, c.RelLSE, c.NaN, c.Unwritten, c.InfMismat, c.Err)
			}
		}
		keys := make([]string, 0, len(worst))
		for k := range worst {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			logf("  worst rel_l2(O) %-40s %.2e", k, worst[k])
		}
	}
	if len(rep.Grid) > 0 {
		ts := readTorch(*flagTorch)
		logf("\n== attention fwd fp16, TFLOP/s (FA convention), B·N=%d, H=2048/d ==", *flagTokens)
		kernels := []string{}
		seen := map[string]bool{}
		for _, g := range rep.Grid {
			if !seen[g.Kernel] {
				seen[g.Kernel] = true
				kernels = append(kernels, g.Kernel)
			}
		}
		hdr := fmt.Sprintf("%4s %6s %6s", "d", "N", "causal")
		for _, k := range kernels {
			hdr += fmt.Sprintf(" %14s", k)
		}
		if ts != nil {
			hdr += fmt.Sprintf(" %10s %7s", "torch-FA2", "ratio")
		}
		logf("%s", hdr)
		type key struct {
			d, n int
			c    bool
		}
		rows := map[key]map[string]float64{}
		var order []key
		for _, g := range rep.Grid {
			k := key{g.D, g.Nq, g.Causal}
			if rows[k] == nil {
				rows[k] = map[string]float64{}
				order = append(order, k)
			}
			rows[k][g.Kernel] = g.TFLOPS
		}
		for _, k := range order {
			line := fmt.Sprintf("%4d %6d %6v", k.d, k.n, k.c)
			bestv := 0.0
			for _, kn := range kernels {
				line += fmt.Sprintf(" %14.1f", rows[k][kn])
				bestv = max(bestv, rows[k][kn])
			}
			if ts != nil {
				for _, r := range ts.Results {
					if r.D == k.d && r.Nq == k.n && r.Causal == k.c && r.TFLOPS > 0 {
						line += fmt.Sprintf(" %10.1f %6.2fx", r.TFLOPS, bestv/r.TFLOPS)
					}
				}
			}
			logf("%s", line)
		}
	}
	for k, v := range rep.Chosen {
		logf("chosen %s: %s", k, v)
	}
	if len(rep.Errors) > 0 {
		logf("errors: %v", rep.Errors)
	}
}
