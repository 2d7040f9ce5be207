package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/x448/float16"
)

// A flag that would change nothing in the given combination is a usage
// error (exit 2) whose one line names the flag and says why.
func TestNoEffectFlags(t *testing.T) {
	q, k, v, do := td("q.npy"), td("k.npy"), td("v.npy"), td("do.npy")
	files := []string{"--q", q, "--k", k, "--v", v}
	cpu := []string{"--backend", "cpu", "--seq", "16", "--heads", "2", "--dim", "8"}
	grid := []string{"--seq", "16", "--dim", "8", "--tokens", "16", "--hidden", "8", "--iters", "1", "--progress", "none"}
	noVulkan := func(a *app) {
		a.gpus = func() ([]attention.DeviceInfo, error) { return nil, fmt.Errorf("no loader: %w", attention.ErrBackend) }
	}
	cat := func(xs ...[]string) []string {
		var out []string
		for _, x := range xs {
			out = append(out, x...)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		args  []string
		msg   string
		env   string // FLASHVK_BACKEND
		setup func(*app)
	}{
		// run
		{name: "do without backward", args: cat([]string{"run", "--backend", "cpu", "--do", do}, files), msg: "--do has no effect without --backward"},
		{name: "seed with files", args: cat([]string{"run", "--backend", "cpu", "--seed", "3"}, files), msg: "--seed has no effect: the inputs are read from .npy files"},
		{name: "seed with files and dO", args: cat([]string{"run", "--backend", "cpu", "--seed", "3", "--backward", "--do", do}, files), msg: "--seed has no effect"},
		{name: "warmup without timing", args: cat([]string{"run"}, cpu, []string{"--iters", "0", "--warmup", "2"}), msg: "--warmup has no effect with --iters 0"},
		{name: "align not causal", args: cat([]string{"run"}, cpu, []string{"--align", "bottom-right"}), msg: "--align has no effect: the mask is not causal"},
		{name: "align Nq=Nk", args: cat([]string{"run"}, cpu, []string{"--causal", "--align", "top-left"}), msg: "--align has no effect: Nq = Nk = 16"},
		{name: "align Nq=Nk files", args: cat([]string{"run", "--backend", "cpu", "--causal", "--align", "bottom-right"},
			[]string{"--q", td("q.npy"), "--k", td("q.npy"), "--v", td("q.npy")}), msg: "Nq = Nk = 20"},
		{name: "seq beside nq nk", args: cat([]string{"run"}, cpu, []string{"--nq", "8", "--nk", "4"}), msg: "--seq has no effect: --nq and --nk give both lengths"},
		{name: "window unbounded", args: cat([]string{"run"}, cpu, []string{"--window", "-1,-1"}), msg: "--window -1,-1 has no effect: both sides are unbounded"},
		{name: "window left unbounded causal", args: cat([]string{"run"}, cpu, []string{"--causal", "--window", "-1,0"}),
			msg: "--window -1,0 has no effect with --causal"},
		{name: "seqused-k all keys", args: cat([]string{"run"}, cpu, []string{"--seqused-k", "16"}), msg: "--seqused-k has no effect: every sequence uses all Nk = 16 keys"},
		{name: "align softcap", args: cat([]string{"run", "--backend", "cpu", "--dim", "8", "--nq", "8", "--nk", "16", "--softcap", "2", "--align", "bottom-right"}),
			msg: "--align has no effect: the mask is not causal and there is no --window or --alibi"},
		{name: "align alibi Nq=Nk", args: cat([]string{"run"}, cpu, []string{"--alibi", "--align", "bottom-right"}), msg: "--align has no effect: Nq = Nk = 16"},
		{name: "align seqused-k Nq", args: cat([]string{"run", "--backend", "cpu", "--dim", "8", "--nq", "16", "--nk", "32", "--causal", "--seqused-k", "16",
			"--align", "bottom-right"}), msg: "--align has no effect: every sequence uses Nq = 16 keys (--seqused-k)"},
		{name: "window wider than the problem", args: cat([]string{"run"}, cpu, []string{"--window", "100,100"}),
			msg: "--window 100,100 has no effect: it hides no key any query of this problem sees"},
		{name: "window left past the causal rows", args: cat([]string{"explain"}, cpu, []string{"--causal", "--window", "15,0"}),
			msg: "--window 15,0 has no effect: it hides no key"},
		{name: "bench window wider than every point", args: cat([]string{"bench", "--backend", "cpu", "--causal", "false", "--window", "16,16"}, grid),
			msg: "--window 16,16 has no effect: it hides no key"},
		{name: "window past one decoding query's rows", args: []string{"run", "--backend", "cpu", "--decode", "--nk", "8", "--dim", "8", "--heads", "2", "--window", "-1,5"},
			msg: "--window -1,5 has no effect: it hides no key"},
		{name: "window unbounded in decode mode", args: []string{"run", "--backend", "cpu", "--cache-seqlens", "8", "--window", "-1,-1"},
			msg: "--window -1,-1 has no effect: both sides are unbounded"},
		{name: "seqused-k in decode mode", args: []string{"run", "--backend", "cpu", "--decode", "--nk", "8", "--seqused-k", "4"},
			msg: "--seqused-k does not apply in decode mode (--decode)"},
		{name: "seqlens in decode mode", args: []string{"run", "--backend", "cpu", "--cache-seqlens", "8", "--seqlens", "4,8"},
			msg: "--seqlens does not apply in decode mode (--cache-seqlens): a KV-cache call packs no sequences"},
		{name: "seqused-k all keys packed", args: []string{"run", "--backend", "cpu", "--dim", "8", "--seqlens", "4,0,8", "--seqused-k", "4,0,8"},
			msg: "--seqused-k has no effect: every sequence uses all its keys (its length in --seqlens)"},
		{name: "align packed", args: []string{"run", "--backend", "cpu", "--dim", "8", "--seqlens", "4,8", "--causal", "--align", "top-left"},
			msg: "--align has no effect: every sequence of --seqlens has Nq = Nk"},
		{name: "dropout-seed without dropout", args: cat([]string{"run"}, cpu, []string{"--dropout-seed", "3"}),
			msg: "--dropout-seed has no effect without --dropout: it selects the dropout mask"},
		{name: "dropout-offset without dropout", args: cat([]string{"run"}, cpu, []string{"--dropout-offset", "0"}), msg: "--dropout-offset has no effect without --dropout"},
		{name: "dropout in decode mode", args: []string{"run", "--backend", "cpu", "--cache-seqlens", "8", "--dropout", "0.1"},
			msg: "--dropout does not apply in decode mode (--cache-seqlens): a KV-cache call takes --window, --softcap and --alibi only (no dropout"},
		{name: "dropout-seed in decode mode", args: []string{"run", "--backend", "cpu", "--decode", "--nk", "8", "--dropout-seed", "4"},
			msg: "--dropout-seed does not apply in decode mode (--decode)"},
		{name: "kernel on cpu", args: cat([]string{"run"}, cpu, []string{"--kernel", "naive"}), msg: `--kernel "naive" selects a Vulkan kernel`},
		{name: "addressing on cpu", args: cat([]string{"run"}, cpu, []string{"--addressing", "auto"}), msg: "--addressing auto applies to the Vulkan kernels"},
		{name: "validation on cpu", args: cat([]string{"run"}, cpu, []string{"--validation"}), msg: "--validation enables the Vulkan validation layer"},
		{name: "validation=false on cpu", args: cat([]string{"run"}, cpu, []string{"--validation=false"}), msg: "--validation"},
		{name: "device on cpu", args: cat([]string{"run"}, cpu, []string{"--device", "0"}), msg: `--device "0" selects a Vulkan device`},
		{name: "device all on cpu", args: cat([]string{"run"}, cpu, []string{"--device", "all"}), msg: "--device all adds every Vulkan device to the CPU backend"},
		{name: "workers on vulkan", args: []string{"run", "--backend", "vulkan", "--workers", "2"}, msg: "--workers sets the CPU backend's goroutines"},
		{name: "workers on vulkan all", args: []string{"run", "--backend", "vulkan", "--device", "all", "--workers", "2"}, msg: "--workers"},
		{name: "validation where auto runs the cpu", args: []string{"run", "--seq", "16", "--validation"}, env: "cpu",
			msg: "--validation applies to Vulkan devices: it has no effect here (everything runs on the CPU backend"},
		{name: "kernel where device all opens no vulkan", args: []string{"run", "--seq", "16", "--device", "all", "--kernel", "flash"}, setup: noVulkan,
			msg: "--kernel applies to Vulkan devices: it has no effect here"},
		// bench
		{name: "tokens beside batch", args: cat([]string{"bench", "--backend", "cpu", "--batch", "2"}, grid), msg: "--tokens has no effect: --batch 2 sets B"},
		{name: "hidden beside heads", args: cat([]string{"bench", "--backend", "cpu", "--heads", "2"}, grid), msg: "--hidden has no effect: --heads 2 sets H"},
		{name: "bench seq beside nq nk", args: cat([]string{"bench", "--backend", "cpu", "--nq", "8", "--nk", "16"}, grid), msg: "--seq has no effect"},
		{name: "bench align not causal", args: cat([]string{"bench", "--backend", "cpu", "--causal", "false", "--align", "bottom-right", "--nk", "32"}, grid),
			msg: "--align has no effect: --causal false runs no causal mask"},
		{name: "bench align Nq=Nk", args: cat([]string{"bench", "--backend", "cpu", "--align", "bottom-right"}, grid), msg: "every point has Nq = Nk"},
		{name: "bench window left unbounded causal", args: cat([]string{"bench", "--backend", "cpu", "--causal", "true", "--window", "-1,0"}, grid),
			msg: "--window -1,0 has no effect with --causal"},
		{name: "bench seqused-k all keys", args: cat([]string{"bench", "--backend", "cpu", "--seqused-k", "16"}, grid), msg: "--seqused-k has no effect"},
		{name: "tokens beside seqused-k", args: cat([]string{"bench", "--backend", "cpu", "--seqused-k", "4,8"}, grid),
			msg: "--tokens has no effect: --seqused-k gives one key count per sequence"},
		{name: "bench align alibi Nq=Nk", args: cat([]string{"bench", "--backend", "cpu", "--causal", "false", "--alibi", "--align", "bottom-right"}, grid),
			msg: "every point has Nq = Nk"},
		{name: "bench seqused-k in decode mode", args: []string{"bench", "--backend", "cpu", "--decode", "--nk", "16", "--seqused-k", "3"},
			msg: "--seqused-k does not apply in decode mode (--decode): a KV-cache call takes --window, --softcap and --alibi only"},
		{name: "bench window unbounded in decode mode", args: []string{"bench", "--backend", "cpu", "--decode", "--nk", "16", "--window", "-1,-1"},
			msg: "--window -1,-1 has no effect"},
		{name: "bench seqlens in decode mode", args: []string{"bench", "--backend", "cpu", "--decode", "--nk", "16", "--seqlens", "3"},
			msg: "--seqlens does not apply in decode mode (--decode)"},
		{name: "bench dropout-offset without dropout", args: cat([]string{"bench", "--backend", "cpu", "--dropout-offset", "2"}, grid),
			msg: "--dropout-offset has no effect without --dropout"},
		{name: "bench dropout in decode mode", args: []string{"bench", "--backend", "cpu", "--decode", "--nk", "16", "--dropout", "0.5", "--dropout-seed", "1"},
			msg: "--dropout does not apply in decode mode (--decode)"},
		{name: "check with benchfmt", args: cat([]string{"bench", "--backend", "cpu", "--check", "--benchfmt"}, grid), msg: "--check has no effect with --benchfmt and no --json"},
		{name: "per-kernel printed nowhere", args: cat([]string{"bench", "--backend", "vulkan", "--per-kernel"}, grid), msg: "--per-kernel has no effect with --progress none and no --json"},
		{name: "rotate on cpu", args: cat([]string{"bench", "--backend", "cpu", "--rotate", "2"}, grid), msg: "--rotate has no effect with --backend cpu"},
		{name: "per-kernel on cpu", args: cat([]string{"bench", "--backend", "cpu", "--per-kernel", "--json", "-"}, grid), msg: "--per-kernel has no effect with --backend cpu"},
		{name: "rotate where auto runs the cpu", args: cat([]string{"bench", "--rotate", "2"}, grid), env: "cpu",
			msg: "--rotate has no effect: only the CPU backend runs"},
		// tune
		{name: "show with others", args: []string{"tune", "--show", "--dim", "64"}, msg: "--dim has no effect with --show"},
		{name: "cache with dry-run", args: []string{"tune", "--dry-run", "--cache", "x.json"}, msg: "--cache has no effect with --dry-run"},
		{name: "dir without its family", args: []string{"tune", "--dir", "fwd", "--family", "bwd_dq"}, msg: "--dir fwd has no effect: no --family (bwd_dq) tunes fwd"},
		{name: "tune tokens beside batch", args: []string{"tune", "--batch", "2", "--tokens", "64"}, msg: "--tokens has no effect"},
		{name: "tune hidden beside heads", args: []string{"tune", "--heads", "2", "--hidden", "64"}, msg: "--hidden has no effect"},
		// explain
		{name: "explain workers", args: []string{"explain", "--backend", "cpu", "--workers", "2"}, msg: "--workers has no effect on explain"},
		{name: "explain preset overridden", args: []string{"explain", "--device-preset", "h200", "--peak-tflops", "100", "--bandwidth-gbs", "1000"},
			msg: "--device-preset has no effect"},
		{name: "explain align", args: []string{"explain", "--backend", "cpu", "--align", "bottom-right", "--nq", "8", "--nk", "16"}, msg: "not causal"},
		{name: "explain validation on cpu", args: []string{"explain", "--backend", "cpu", "--validation"}, msg: "--validation"},
		{name: "explain stats on cpu", args: []string{"explain", "--backend", "cpu", "--stats"},
			msg: "--stats reports the Vulkan driver's compiler statistics: it does not apply to --backend cpu"},
		{name: "explain stats=false on cpu", args: []string{"explain", "--backend", "cpu", "--stats=false"}, msg: "--stats"},
		{name: "explain stats where auto runs the cpu", args: []string{"explain", "--seq", "16", "--stats"}, env: "cpu",
			msg: "--stats applies to Vulkan devices: it has no effect here (everything runs on the CPU backend"},
		{name: "explain seqused-k in decode mode", args: []string{"explain", "--backend", "cpu", "--cache-seqlens", "8", "--seqused-k", "4"},
			msg: "--seqused-k does not apply in decode mode (--cache-seqlens)"},
		{name: "explain seqlens in decode mode", args: []string{"explain", "--backend", "cpu", "--append", "1", "--nk", "8", "--seqlens", "8"},
			msg: "--seqlens does not apply in decode mode (--append)"},
		{name: "explain dropout-seed without dropout", args: []string{"explain", "--backend", "cpu", "--dropout-seed", "9"},
			msg: "--dropout-seed has no effect without --dropout"},
		{name: "explain dropout-offset in decode mode", args: []string{"explain", "--backend", "cpu", "--append", "1", "--nk", "8", "--dropout-offset", "2"},
			msg: "--dropout-offset does not apply in decode mode (--append)"},
		{name: "explain window unbounded", args: []string{"explain", "--backend", "cpu", "--window", "-1,-1"}, msg: "--window -1,-1 has no effect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("FLASHVK_BACKEND", tc.env)
			}
			setup := tc.setup
			code, out, errs := appRun(t, func(a *app) {
				a.beforeInputs = func() { t.Error("the command started its work") }
				if setup != nil {
					setup(a)
				}
			}, tc.args...)
			if code != 2 || !strings.HasPrefix(errs, "flashvk: ") || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.msg) {
				t.Errorf("flashvk %s: exit %d: %q%s, want exit 2 and one line with %q", strings.Join(tc.args, " "), code, errs, out, tc.msg)
			}
		})
	}
}

// Flags near the refused combinations still work where they do
// something.
func TestEffectiveFlags(t *testing.T) {
	q, k, v, do := td("q.npy"), td("k.npy"), td("v.npy"), td("do.npy")
	cpu := []string{"run", "--backend", "cpu", "--iters", "0"}
	for _, args := range [][]string{
		slices.Concat(cpu, []string{"--q", q, "--k", k, "--v", v, "--backward", "--seed", "3"}), // seeds the random dO
		slices.Concat(cpu, []string{"--q", q, "--k", k, "--v", v, "--backward", "--do", do}),
		slices.Concat(cpu, []string{"--q", q, "--k", k, "--v", v, "--causal", "--align", "bottom-right"}), // Nq 20, Nk 24
		slices.Concat(cpu, []string{"--nq", "16", "--nk", "8", "--dim", "8", "--causal", "--align", "bottom-right"}),
		slices.Concat(cpu, []string{"--seq", "16", "--nk", "8", "--dim", "8"}),
		slices.Concat(cpu, []string{"--nq", "16", "--nk", "8", "--dim", "8", "--alibi", "--align", "bottom-right"}),          // ALiBi's diagonal
		slices.Concat(cpu, []string{"--seq", "16", "--dim", "8", "--causal", "--seqused-k", "8", "--align", "bottom-right"}), // placed with the key counts
		slices.Concat(cpu, []string{"--seq", "16", "--dim", "8", "--window", "-1,0"}),                                        // causal without --causal
		slices.Concat(cpu, []string{"--seq", "16", "--dim", "8", "--seqused-k", "16,8"}),
		slices.Concat(cpu, []string{"--seq", "16", "--dim", "8", "--dropout", "0.25", "--dropout-seed", "0", "--dropout-offset", "0"}), // explicit defaults
		{"explain", "--backend", "cpu", "--seq", "64", "--dropout", "0.1", "--dropout-offset", "7"},
		{"bench", "--backend", "cpu", "--seq", "16,32", "--dim", "8", "--batch", "1", "--heads", "1", "--iters", "1", "--progress", "none",
			"--causal", "both", "--window", "-1,0", "--seqused-k", "16"}, // each changes some point
		{"run", "--backend", "cpu", "--seq", "16", "--dim", "8", "--iters", "2", "--warmup", "1", "--workers", "1"},
		{"bench", "--backend", "cpu", "--seq", "16", "--dim", "8", "--batch", "2", "--heads", "1", "--iters", "1", "--progress", "none"},
		{"bench", "--backend", "cpu", "--nq", "8", "--nk", "16", "--dim", "8", "--tokens", "16", "--hidden", "8", "--causal", "both",
			"--align", "bottom-right", "--iters", "1", "--progress", "none", "--check", "--benchfmt", "--json", filepath.Join(t.TempDir(), "b.json")},
		{"explain", "--backend", "cpu", "--seq", "64", "--device-preset", "h200", "--peak-tflops", "100"},
		{"explain", "--backend", "cpu", "--seq", "64", "--scale", "0.5", "--layout", "bhsd"},
		{"tune", "--show", "--cache", filepath.Join(t.TempDir(), "none.json")},
	} {
		mustRun(t, args...)
	}
}

// errReached stops a command where its work starts: every flag and path
// check passed.
var errReached = errors.New("checks passed")

// reachesWork runs args until the command starts its work (run, bench,
// tune) or to its end, and reports whether every check passed.
func reachesWork(t *testing.T, args []string) (bool, string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := newApp(&out, &errb)
	a.beforeInputs = func() { panic(errReached) }
	code := a.execute(context.Background(), args)
	if code == 0 || strings.Contains(errb.String(), "internal error: "+errReached.Error()) {
		return true, ""
	}
	return false, fmt.Sprintf("exit %d: %s", code, errb.String())
}

// The examples of every command's help and the README's command lines
// pass every check (on a machine with a Vulkan device for those that
// name one).
func TestExamplesStillValid(t *testing.T) {
	testdata, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("FLASHVK_TUNE_CACHE", filepath.Join(dir, "tune-cache.json"))
	// The files the examples read.
	for _, f := range []string{"q", "k", "v"} {
		b, err := os.ReadFile(filepath.Join(testdata, f+"_bhsd.npy"))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(f+".npy", b, 0o644)
	}
	// The bias files of the examples (help: mask.npy, bias.npy; README:
	// doc_mask.npy, rel_bias.npy).
	h := make([]float16.Float16, 1024*1024)
	writeTestNpy(t, dir, "mask.npy", []int{1024, 1024}, blockMask(1024, 256))
	writeTestNpy(t, dir, "bias.npy", []int{1024, 1024}, h)
	writeTestNpy(t, dir, "doc_mask.npy", []int{1024, 1024}, blockMask(1024, 256))
	writeTestNpy(t, dir, "rel_bias.npy", []int{4, 256, 256}, randomBias(4*256*256, 1))
	tinyBench(t, filepath.Join(dir, "tiny.json"))
	results, err := os.ReadFile(filepath.Join(dir, "tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"h200.json", "torch.json", "cpu.json", "before.json", "after.json", "flashvk.json", "torch_fp16_fwd.json", "flashvk_cm_fp16.json"} {
		os.WriteFile(f, results, 0o644)
	}
	devs, vkErr := attention.Devices(attention.Config{})
	// --stats needs a device whose driver reports compiler statistics.
	withStats := slices.ContainsFunc(devs, func(d attention.DeviceInfo) bool { return d.PipelineStatistics })
	var lines []string
	root := newApp(nil, nil).rootCmd()
	for _, c := range root.Commands() {
		for _, l := range strings.Split(c.Example, "\n") {
			lines = append(lines, l)
		}
	}
	lines = append(lines,
		// README
		"flashvk bench --backend cpu --seq 256,512 --dim 64 --causal both --iters 5",
		"flashvk explain --seq 2048 --dim 64 --heads 8 --device lavapipe",
		"flashvk tune --device lavapipe --cache "+filepath.Join(dir, "t.json")+" --dtype f32 --dim 64 --seq 256 --tokens 512 --hidden 128 --max-candidates 3 --iters 5",
		"flashvk explain --seq 256 --dim 64 --heads 2 --dtype f32 --causal",
		"flashvk report torch_fp16_fwd.json flashvk_cm_fp16.json -o report.html",
		"flashvk compare torch_fp16_fwd.json flashvk_cm_fp16.json --format plain",
		"flashvk devices",
		"flashvk run --backend cpu --cache-seqlens 300,1000 --nq 4 --heads 8 --kv-heads 2 --paged 16 --append 4 --check --iters 5",
		"flashvk bench --backend cpu --nk 1024,4096 --nq 1,4 --batch 4 --heads 32 --kv-heads 8 --dim 128 --paged 16 --append 1 --iters 5",
		"flashvk explain --device lavapipe --cache-seqlens 32768 --heads 8 --kv-heads 1 --dim 128",
		"flashvk run --backend cpu --seq 512 --heads 8 --dim 64 --causal --window 128,0 --alibi --softcap 30 --seqused-k 400,512 --backward --check --iters 5",
		"flashvk explain --backend cpu --seq 4096 --dim 64 --heads 8 --causal --window 512,0",
		"flashvk bench --backend cpu --seq 512,1024 --dim 64 --tokens 4096 --causal true --window 128,0 --alibi --iters 5",
		"flashvk run --device lavapipe --seqlens 300,0,77,512 --heads 8 --kv-heads 2 --dim 64 --causal --backward --check --iters 5",
		"flashvk explain --device lavapipe --seqlens 1000,24,512 --heads 8 --dim 64 --causal",
		"flashvk bench --device lavapipe --seqlens 300,0,77,512 --heads 8 --dim 64 --causal both --iters 5",
		"flashvk run --backend cpu --seq 1024 --heads 4 --dim 64 --causal --mask doc_mask.npy --backward --bias-grad --check --iters 3",
		"flashvk run --backend cpu --seq 256 --heads 4 --dim 64 --bias rel_bias.npy --dtype f16 --backward --bias-grad --check --iters 3",
		"flashvk explain --backend cpu --seq 1024 --dim 64 --heads 4 --causal --mask doc_mask.npy",
		"flashvk bench --backend cpu --seq 1024 --dim 64 --heads 4 --batch 1 --causal true --mask doc_mask.npy --backward --bias-grad --iters 3",
		// the package doc
		"flashvk run --seq 1024 --check",
		"flashvk run --cache-seqlens 128,4000 --check",
		"flashvk report h200.json torch.json -o r.html",
		"flashvk explain --seq 4096 --dim 128",
		// bench/gpu.sh's invocations (its tune passes one --family list to
		// the fwd and the bwd run)
		"flashvk bench --dtype f16 --seq 512,1024 --backend vulkan --backward --dim 64 --causal=both --tokens 16384 --hidden 2048 --iters 10 --warmup 3 --rotate 2 --progress lines",
		"flashvk bench --dtype f16 --seq 512 --backend vulkan --backward --dim 64 --causal=both --tokens 16384 --hidden 2048 --iters 10 --warmup 3 --rotate 2 --progress lines --per-kernel --json perkernel.json",
		"flashvk tune --dir bwd --seq 2048 --dtype f16 --dim 64 --causal=both --tokens 16384 --hidden 2048 --max-candidates 4 --budget 9m --family flash,bwd_dq",
		"flashvk tune --show --cache tune-cache.json",
	)
	n := 0
	for _, l := range lines {
		l, _, _ = strings.Cut(strings.TrimSpace(l), "|")
		args := strings.Fields(l)
		if len(args) < 2 || args[0] != "flashvk" {
			continue
		}
		args = args[1:]
		n++
		vulkan := args[0] == "tune" || strings.Contains(l, "lavapipe") || strings.Contains(l, "--backend vulkan")
		if vulkan && vkErr != nil {
			t.Logf("skipped without a Vulkan device: %s", l)
			continue
		}
		if slices.Contains(args, "--stats") && !withStats {
			t.Logf("skipped without a device that reports compiler statistics: %s", l)
			continue
		}
		if ok, why := reachesWork(t, args); !ok {
			t.Errorf("%s: %s", l, why)
		} else {
			t.Logf("passes its checks: %s", l)
		}
	}
	if n < 20 {
		t.Errorf("only %d example lines", n)
	}
}
