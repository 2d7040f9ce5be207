package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// kvBytes is KVCacheBytes by hand: every attended row, K and V, per KV head.
func kvBytes(lens []int, appendN, hkv, d, dv, size int) float64 {
	rows := 0
	for _, n := range lens {
		rows += n + appendN
	}
	return float64(rows * hkv * (d + dv) * size)
}

// Decode mode: run calls ForwardKVCache, checks it sequence by sequence
// against the float64 reference and reports GB/s.
func TestDecodeRunCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		lens []int
		nq   int
		// appendN, block, causal, align, nk: what the problem must be.
		appendN, block, nk int
		causal             bool
		align              string
	}{
		{name: "contiguous", args: []string{"--cache-seqlens", "33,100,0,7"}, lens: []int{33, 100, 0, 7}, nq: 1, nk: 100, align: "bottom-right"},
		{name: "paged append causal", args: []string{"--cache-seqlens", "40,0,77", "--nq", "3", "--paged", "16", "--append", "2", "--dtype", "f16", "--layout", "bhsd"},
			lens: []int{40, 0, 77}, nq: 3, appendN: 2, block: 16, nk: 79, causal: true, align: "bottom-right"},
		{name: "nk and batch", args: []string{"--decode", "--nk", "50", "--batch", "2", "--nq", "5", "--causal", "false", "--dtype", "bf16"},
			lens: []int{50, 50}, nq: 5, nk: 50, align: "bottom-right"},
		{name: "top-left", args: []string{"--nk", "64", "--append", "4", "--nq", "4", "--causal", "--align", "top-left", "--dv", "8"},
			lens: []int{60}, nq: 4, appendN: 4, nk: 64, causal: true, align: "top-left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--backend", "cpu", "--heads", "4", "--kv-heads", "2", "--dim", "16", "--iters", "2", "--check"}, tc.args...)
			rep := runJSON(t, args...)
			if !rep.Pass || !rep.Checked || len(rep.Results) != 1 {
				t.Fatalf("run: %+v", rep)
			}
			p := rep.Problem
			dv := p.Dv
			c := p.Cache
			if c == nil || !slices.Equal(c.SeqLens, tc.lens) || c.Append != tc.appendN || c.BlockSize != tc.block || p.Nq != tc.nq ||
				p.Nk != tc.nk || p.B != len(tc.lens) || p.Causal != tc.causal || p.Align != tc.align {
				t.Fatalf("problem %+v, cache %+v", p, c)
			}
			size := map[string]int{"float32": 4, "float16": 2, "bfloat16": 2}[p.DType]
			if want := kvBytes(tc.lens, tc.appendN, 2, 16, dv, size); c.Bytes != want {
				t.Errorf("cache bytes %v, want %v", c.Bytes, want)
			}
			if tc.block > 0 && c.Blocks != len(tc.lens)*((tc.nk+tc.block-1)/tc.block) {
				t.Errorf("%d blocks", c.Blocks)
			}
			ps := rep.Results[0].Passes
			if len(ps) != 1 || ps[0].Direction != "kv" || ps[0].Kernel != "cpu" || ps[0].Iters != 2 || ps[0].Clock != "wall" ||
				ps[0].TFLOPS <= 0 || ps[0].FirstCallMS <= 0 || math.Abs(ps[0].GBPerS-c.Bytes/(ps[0].MedianMS/1e3)/1e9) > 1e-9*ps[0].GBPerS {
				t.Errorf("pass %+v", ps)
			}
			ch := rep.Results[0].Check
			if len(ch) != 2 || ch[0].Output != "o" || ch[1].Output != "lse" || !ch[0].Pass || !ch[1].Pass {
				t.Errorf("check %+v", ch)
			}
		})
	}
	out := mustRun(t, "run", "--backend", "cpu", "--cache-seqlens", "20,3", "--heads", "2", "--dim", "8", "--append", "1", "--paged", "8", "--check", "--iters", "2")
	for _, want := range []string{"Nq=1 Nmax=21", "cache    lengths 20,3, +1 appended: attends to 21,4 rows; paged: 6 blocks of 8 rows", "GB/s",
		"sequence by sequence over its gathered cache rows", "kv "} {
		if !strings.Contains(out, want) {
			t.Errorf("run lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(out, "\nPASS\n") {
		t.Errorf("run --check does not end in PASS:\n%s", out)
	}
}

// A decode call over full, contiguous caches with no append is the plain
// forward of the same inputs: both draw Q, K and V from the same streams.
func TestDecodeMatchesForward(t *testing.T) {
	dir := t.TempDir()
	common := []string{"run", "--backend", "cpu", "--nq", "3", "--nk", "40", "--batch", "2", "--heads", "4", "--kv-heads", "2", "--dim", "16",
		"--causal", "--align", "bottom-right", "--iters", "0"}
	mustRun(t, append(common, "--out", filepath.Join(dir, "fwd"))...)
	mustRun(t, append(common, "--decode", "--out", filepath.Join(dir, "kv"))...)
	for _, f := range []string{"o.npy", "lse.npy"} {
		s1, fwd := loadOut(t, filepath.Join(dir, "fwd", f))
		s2, kv := loadOut(t, filepath.Join(dir, "kv", f))
		if !equalInts(s1, s2) {
			t.Fatalf("%s: shapes %v and %v", f, s1, s2)
		}
		compareClose(t, kv, fwd, 1e-6, 1e-5)
	}
}

// bench in decode mode: BenchmarkKVCache, GB/s, the kv fields in the JSON,
// which compare and report read.
func TestDecodeBenchJSON(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kv.json")
	mustRun(t, "bench", "--backend", "cpu", "--cache-seqlens", "20,50", "--heads", "4", "--kv-heads", "2", "--dim", "16", "--dtype", "f32",
		"--warmup", "0", "--iters", "2", "--progress", "none", "--check", "--json", path)
	f, err := readResults(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Results) != 1 {
		t.Fatalf("%d results", len(f.Results))
	}
	r := f.Results[0]
	want := kvBytes([]int{20, 50}, 0, 2, 16, 16, 4)
	if r.Direction != "kv" || !slices.Equal(r.CacheSeqLens, []int{20, 50}) || r.B != 2 || r.Nq != 1 || r.Nk != 50 || r.Hkv != 2 ||
		r.CacheBytes != want || r.GBPerS <= 0 || math.Abs(r.GBPerS-want/(r.MedianMS/1e3)/1e9) > 1e-9*r.GBPerS || r.TFLOPS <= 0 ||
		r.Iters != 2 || r.Clock != "wall" || r.RelL2 == nil || float64(*r.RelL2) > 1e-5 || r.Launch == nil {
		t.Errorf("result %+v", r)
	}
	// The raw JSON names the fields.
	b, _ := os.ReadFile(path)
	for _, k := range []string{`"direction": "kv"`, `"cache_seqlens"`, `"cache_bytes"`, `"gb_per_s"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("bench JSON lacks %s", k)
		}
	}
	// The FLOPs of the result are the visible pairs: 2·Hq·(d+dv)·Σ L.
	if fl := r.flops(); fl != 2*4*32*70 {
		t.Errorf("flops %v", fl)
	}

	// A grid: Nq × Nk, paged, appended; the masks follow the decoding rule.
	path2 := filepath.Join(dir, "grid.json")
	mustRun(t, "bench", "--backend", "cpu", "--nq", "1,4", "--nk", "32,64", "--batch", "2", "--heads", "2", "--dim", "8", "--paged", "16",
		"--append", "1", "--warmup", "0", "--iters", "2", "--progress", "none", "--json", path2)
	g, err := readResults(path2)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Results) != 4 {
		t.Fatalf("%d results, want 4", len(g.Results))
	}
	for _, r := range g.Results {
		if r.BlockSize != 16 || r.Append != 1 || r.Causal != (r.Nq > 1) || r.Align != "bottom-right" || !slices.Equal(r.CacheSeqLens, []int{r.Nk - 1, r.Nk - 1}) {
			t.Errorf("grid result %+v", r)
		}
	}

	// The table and benchfmt show the bandwidth.
	out := mustRun(t, "bench", "--backend", "cpu", "--cache-seqlens", "20,50", "--heads", "2", "--dim", "8", "--warmup", "0", "--iters", "2", "--progress", "none")
	if !strings.Contains(out, "GB/s") || !strings.Contains(out, "lens 20,50") || !strings.Contains(out, "kv") {
		t.Errorf("table:\n%s", out)
	}
	out = mustRun(t, "bench", "--backend", "cpu", "--cache-seqlens", "20,50", "--heads", "2", "--dim", "8", "--warmup", "0", "--iters", "2",
		"--progress", "none", "--count", "2", "--benchfmt")
	re := regexp.MustCompile(`(?m)^BenchmarkAttention/kv/fp16/d8/N1/noncausal/B2H2Nk50/L20-50-\d+\t2\t\d+ ns/op\t[0-9.e+-]+ TFLOP/s\t[0-9.e+-]+ GB/s$`)
	if got := len(re.FindAllString(out, -1)); got != 2 {
		t.Errorf("benchfmt: %d kv lines, want 2:\n%s", got, out)
	}

	// compare and report read kv results.
	md := mustRun(t, "compare", path, path)
	if !strings.Contains(md, "| kv | fp32 | 2 | 4 | 1×50 (lens 20,50) |") {
		t.Errorf("compare:\n%s", md)
	}
	mustRun(t, "report", path, path2, "-o", filepath.Join(dir, "r.html"))
}

// explain in decode mode: bytes in all and per token, and the plan with
// its splits.
func TestDecodeExplain(t *testing.T) {
	var an decodeAnalysis
	out := mustRun(t, "explain", "--backend", "cpu", "--cache-seqlens", "100,300", "--nq", "2", "--heads", "8", "--kv-heads", "2", "--dim", "32",
		"--append", "2", "--json")
	if err := json.Unmarshal([]byte(out), &an); err != nil {
		t.Fatal(err)
	}
	want := kvBytes([]int{100, 300}, 2, 2, 32, 32, 2)
	if an.CacheBytes != want || an.Tokens != 4 || an.BytesPerToken != want/4 || an.Flops <= 0 || an.Problem.Cache == nil ||
		len(an.Plans) != 1 || an.Plans[0].Direction != "kv" || an.Plans[0].Family != "cpu" || an.Plans[0].Splits != 0 || len(an.Launches) == 0 {
		t.Errorf("explain --json: %+v", an)
	}
	// Causal bottom-right with Nq = 2: the first query sees one row less.
	if wantF := 2 * 8 * 64 * float64(2*(102+302)-2); an.Flops != wantF {
		t.Errorf("flops %v, want %v", an.Flops, wantF)
	}
	out = mustRun(t, "explain", "--backend", "cpu", "--cache-seqlens", "100,300", "--heads", "8", "--kv-heads", "2", "--paged", "16",
		"--device-preset", "h200")
	for _, want := range []string{"per generated token", "of cache read in all", "memory-bound", "kv  runs cpu, splits none", "paged: 38 blocks of 16 rows"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
}

// On Vulkan the plan splits each sequence's cache, and run checks and
// times the decode kernels.
func TestDecodeVulkan(t *testing.T) {
	skipWithoutVulkan(t)
	var an decodeAnalysis
	out := mustRun(t, "explain", "--backend", "vulkan", "--cache-seqlens", "100,3000", "--heads", "8", "--kv-heads", "2", "--dim", "32", "--json")
	if err := json.Unmarshal([]byte(out), &an); err != nil {
		t.Fatal(err)
	}
	if len(an.Plans) != 1 || an.Plans[0].Splits < 1 || an.Plans[0].Splits*an.Plans[0].SplitKeys < 3000 {
		t.Errorf("vulkan plan: %+v", an.Plans)
	}
	out = mustRun(t, "explain", "--backend", "vulkan", "--cache-seqlens", "100,3000", "--heads", "8", "--kv-heads", "2", "--dim", "32")
	if !regexp.MustCompile(`kv  runs \S+, splits \d+ × \d+ rows`).MatchString(out) {
		t.Errorf("explain does not show the splits:\n%s", out)
	}
	rep := runJSON(t, "--backend", "vulkan", "--cache-seqlens", "40,0,77", "--nq", "2", "--paged", "16", "--append", "1", "--heads", "4",
		"--kv-heads", "2", "--dim", "16", "--check", "--iters", "2", "--validation="+boolEnv("FLASHVK_VALIDATION"))
	if !rep.Pass || rep.Results[0].Passes[0].Clock != "gpu-timestamps" || rep.Results[0].Passes[0].GBPerS <= 0 {
		t.Errorf("run --backend vulkan: %+v", rep)
	}
}

// Bad decode values and decode flags that change nothing are usage errors
// (exit 2) of one line naming the flag, before any input is made.
func TestDecodeRefused(t *testing.T) {
	cpu := []string{"--backend", "cpu", "--heads", "4", "--dim", "8"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		// bad values
		{[]string{"run", "--cache-seqlens", "-1"}, "--cache-seqlens -1: must be ≥ 0"},
		{[]string{"run", "--cache-seqlens", "4,x"}, `"x" is not an integer`},
		{[]string{"run", "--cache-seqlens", "4294967296"}, "--cache-seqlens 4294967296: at most"},
		{[]string{"run", "--nk", "32", "--paged", "0"}, "--paged 0: must be positive"},
		{[]string{"run", "--nk", "32", "--append", "-1"}, "--append -1: must be ≥ 0"},
		{[]string{"run", "--nk", "4", "--append", "5"}, "--append 5: more rows than the cache holds (--nk 4)"},
		{[]string{"run", "--cache-seqlens", "10,20", "--batch", "3"}, "--batch 3 disagrees with --cache-seqlens (2 lengths"},
		{[]string{"run", "--cache-seqlens", "10,60", "--nk", "50"}, "sequence 1 holds 60 rows and --append adds 0: more than --nk 50"},
		{[]string{"run", "--decode"}, "decode mode (--decode) needs --nk"},
		{[]string{"run", "--append", "1"}, "decode mode (--append) needs --nk"},
		{[]string{"run", "--cache-seqlens", "10", "--kv-heads", "3"}, "--kv-heads 3 does not divide --heads 4"},
		{[]string{"run", "--cache-seqlens", "10", "--nq", "0"}, "--nq 0: must be positive"},
		{[]string{"run", "--cache-seqlens", "10", "--align", "middle", "--nq", "2"}, `--align "middle"`},
		{[]string{"run", "--cache-seqlens", "100000", "--nq", "100000", "--check"}, "--check: the float64 reference materialises Nq×L"},
		{[]string{"run", "--cache-seqlens", "1000000000,1000000000"}, "GB of operands"},
		{[]string{"bench", "--cache-seqlens", "-3", "--progress", "none"}, "--cache-seqlens -3: must be ≥ 0"},
		{[]string{"bench", "--decode", "--progress", "none"}, "needs --nk"},
		{[]string{"explain", "--paged", "-2", "--nk", "8"}, "--paged -2: must be positive"},
		// no effect
		{[]string{"run", "--cache-seqlens", "10", "--backward"}, "--backward has no effect in decode mode (--cache-seqlens): decoding has no backward pass"},
		{[]string{"run", "--decode", "--nk", "16", "--backward"}, "--backward has no effect in decode mode (--decode)"},
		{[]string{"bench", "--cache-seqlens", "10", "--backward", "--progress", "none"}, "--backward has no effect in decode mode"},
		{[]string{"bench", "--cache-seqlens", "10", "--rotate", "2", "--progress", "none", "--backend", "vulkan"}, "--rotate has no effect in decode mode"},
		{[]string{"bench", "--cache-seqlens", "10", "--tokens", "64", "--progress", "none"}, "--tokens has no effect: --cache-seqlens sets B"},
		{[]string{"run", "--cache-seqlens", "10", "--decode"}, "--decode has no effect: --cache-seqlens selects decode mode"},
		{[]string{"run", "--cache-seqlens", "10", "--seq", "64"}, "--seq has no effect in decode mode"},
		{[]string{"explain", "--cache-seqlens", "10", "--seq", "64"}, "--seq has no effect in decode mode"},
		{[]string{"run", "--cache-seqlens", "10", "--q", td("q.npy")}, "--q, --k, --v and --do do not apply in decode mode"},
		{[]string{"run", "--cache-seqlens", "10", "--causal"}, "--causal has no effect: with Nq = 1"},
		{[]string{"run", "--cache-seqlens", "10", "--causal", "false"}, "--causal has no effect: with Nq = 1"},
		{[]string{"bench", "--cache-seqlens", "10", "--causal", "both", "--progress", "none"}, "--causal has no effect: with Nq = 1"},
		{[]string{"explain", "--cache-seqlens", "10", "--causal"}, "--causal has no effect"},
		{[]string{"run", "--cache-seqlens", "10", "--nq", "4", "--causal", "false", "--align", "top-left"}, "--align has no effect: the mask is not causal"},
		{[]string{"run", "--cache-seqlens", "10", "--align", "top-left"}, "--align has no effect: the mask is not causal"},
		{[]string{"run", "--cache-seqlens", "4,4", "--nq", "4", "--align", "top-left"}, "every sequence attends to Nq = 4 rows"},
		{[]string{"bench", "--cache-seqlens", "10", "--align", "top-left", "--progress", "none"}, "--align has no effect"},
		{[]string{"run", "--cache-seqlens", "10", "--iters", "0", "--warmup", "1"}, "--warmup has no effect with --iters 0"},
		// options: a KV-cache call takes --window, --softcap and --alibi only
		{[]string{"run", "--cache-seqlens", "10", "--seqused-k", "5"}, "--seqused-k does not apply in decode mode (--cache-seqlens)"},
		{[]string{"explain", "--decode", "--nk", "10", "--seqused-k", "5"}, "--seqused-k does not apply in decode mode (--decode)"},
		{[]string{"run", "--cache-seqlens", "10", "--nq", "2", "--window", "4,1"}, "--window 4,1 with --causal: R must be −1 or 0"},
		{[]string{"run", "--cache-seqlens", "10", "--nq", "2", "--window", "-1,0"}, "--window -1,0 has no effect with --causal"},
		{[]string{"run", "--cache-seqlens", "10", "--softcap", "-1"}, "--softcap"},
		{[]string{"run", "--cache-seqlens", "10", "--softcap", "3", "--align", "top-left"}, "--align has no effect: the mask is not causal"},
	} {
		args := append(slices.Clone(tc.args), cpu...)
		if slices.Contains(tc.args, "vulkan") {
			args = append(slices.Clone(tc.args), "--heads", "4", "--dim", "8")
		}
		code, out, errs := appRun(t, func(a *app) {
			a.beforeInputs = func() { t.Errorf("flashvk %s: the command started its work", strings.Join(args, " ")) }
		}, args...)
		if code != 2 || !strings.HasPrefix(errs, "flashvk: ") || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.msg) {
			t.Errorf("flashvk %s: exit %d: %q%s, want exit 2 and one line with %q", strings.Join(args, " "), code, errs, out, tc.msg)
		}
	}
}

// Decode flags near the refused combinations still work where they do
// something.
func TestDecodeEffectiveFlags(t *testing.T) {
	cpu := []string{"--backend", "cpu", "--heads", "2", "--dim", "8", "--iters", "1"}
	for _, args := range [][]string{
		{"run", "--cache-seqlens", "10,3", "--nq", "4", "--causal", "false"},
		{"run", "--cache-seqlens", "10,3", "--nq", "4", "--align", "top-left"},
		{"run", "--cache-seqlens", "10,3", "--causal", "--align", "top-left", "--check"},
		{"run", "--cache-seqlens", "10,3", "--batch", "2", "--scale", "0.5", "--seed", "7"},
		{"run", "--decode", "--nk", "16", "--nq", "2", "--check"},
		{"bench", "--cache-seqlens", "10,3", "--nq", "1,4", "--causal", "both", "--progress", "none"},
		{"bench", "--decode", "--nk", "16", "--tokens", "32", "--progress", "none"},
		{"explain", "--cache-seqlens", "10,3", "--nq", "2", "--causal", "false", "--json"},
		{"run", "--cache-seqlens", "10,3", "--window", "2,2", "--align", "top-left", "--check"},
		{"run", "--cache-seqlens", "10,3", "--alibi", "--align", "top-left", "--check"},
		{"bench", "--cache-seqlens", "10,3", "--window", "2,0", "--align", "top-left", "--progress", "none"},
		{"explain", "--cache-seqlens", "10,3", "--softcap", "5", "--window", "4,0", "--alibi"},
	} {
		a := append(slices.Clone(args), cpu...)
		if args[0] == "explain" {
			a = append(slices.Clone(args), "--backend", "cpu", "--heads", "2", "--dim", "8")
		}
		mustRun(t, a...)
	}
}

// Decode mode takes --window, --softcap and --alibi: run checks them
// against the reference, the FLOPs count the rows each window leaves
// visible, and run's and bench's JSON (and compare's keys and benchfmt's
// names) carry them.
func TestDecodeOptions(t *testing.T) {
	opts := []string{"--window", "8,0", "--softcap", "30", "--alibi"}
	args := append([]string{"--backend", "cpu", "--cache-seqlens", "40,0,77", "--nq", "3", "--paged", "16", "--append", "2",
		"--heads", "4", "--kv-heads", "2", "--dim", "16", "--iters", "1", "--check"}, opts...)
	rep := runJSON(t, args...)
	p := rep.Problem
	if !rep.Pass || p.Window == nil || *p.Window != [2]int{8, 0} || p.Softcap != 30 || !p.ALiBi || p.Cache == nil || !p.Causal {
		t.Fatalf("run: %+v, problem %+v", rep, p)
	}
	// Lengths 42, 2, 79 after the append, causal bottom-right, 8 rows
	// before the diagonal: 9 rows for each query of the long sequences,
	// 0, 1, 2 for the short one.
	want := 2.0 * 4 * 32 * (27 + 3 + 27)
	if fl := kvFlops([]int{40, 0, 77}, 2, 3, 4, 16, 16, true, true, p.Window); fl != want {
		t.Errorf("kvFlops %v, want %v", fl, want)
	}
	for _, c := range rep.Results[0].Check {
		if !c.Pass {
			t.Errorf("check %+v", c)
		}
	}
	out := mustRun(t, append([]string{"run"}, args...)...)
	if !strings.Contains(out, "causal bottom-right window=8,0 softcap=30 alibi") {
		t.Errorf("run does not show the options:\n%s", out)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "kv.json")
	plain := filepath.Join(dir, "plain.json")
	bench := []string{"bench", "--backend", "cpu", "--cache-seqlens", "20,50", "--heads", "4", "--kv-heads", "2", "--dim", "16", "--dtype", "f32",
		"--warmup", "0", "--iters", "2", "--progress", "none", "--check"}
	mustRun(t, append(append(slices.Clone(bench), opts...), "--json", path)...)
	mustRun(t, append(slices.Clone(bench), "--json", plain)...)
	f, err := readResults(path)
	if err != nil {
		t.Fatal(err)
	}
	r := f.Results[0]
	if r.Direction != "kv" || r.Window == nil || *r.Window != [2]int{8, 0} || r.Softcap != 30 || !r.ALiBi || r.RelL2 == nil || float64(*r.RelL2) > 1e-5 {
		t.Errorf("bench result %+v", r)
	}
	// Nq = 1 bottom-right: 9 rows of each sequence.
	if fl := r.flops(); fl != 2*4*32*18 {
		t.Errorf("bench flops %v, want %v", fl, 2*4*32*18)
	}
	if k := keyOf(&r); k.Options != "window=8,0 softcap=30 alibi bottom-right" {
		t.Errorf("compare key options %q", k.Options)
	}
	if n := benchName(r); !strings.HasSuffix(n, "/L20-50/window8_0/softcap30/alibi") {
		t.Errorf("benchfmt name %q", n)
	}
	md := mustRun(t, "compare", path, plain)
	if !strings.Contains(md, "window=8,0 softcap=30 alibi") {
		t.Errorf("compare does not tell the options apart:\n%s", md)
	}
}
