package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
)

// The flag values of --window, --softcap and --seqused-k: good ones are
// taken, bad ones refused (exit 2) in one line naming the flag.
func TestFeatureFlagValues(t *testing.T) {
	var w *[2]int
	for _, tc := range []struct {
		in   string
		want [2]int
	}{{"128,0", [2]int{128, 0}}, {"-1,16", [2]int{-1, 16}}, {" 3 , -1 ", [2]int{3, -1}}, {"0,0", [2]int{0, 0}}} {
		if err := (windowValue{&w}).Set(tc.in); err != nil || *w != tc.want {
			t.Errorf("--window %q: %v, %v", tc.in, w, err)
		}
	}
	var c float64
	if err := softcapValue(&c).Set("0.1"); err != nil || c != float64(float32(0.1)) {
		t.Errorf("--softcap 0.1: %v, %v (want the float32 value)", c, err)
	}
	cpu := []string{"--backend", "cpu", "--seq", "16", "--heads", "2", "--dim", "8"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--window", "5"}, `invalid argument "5" for "--window" flag: want L,R`},
		{[]string{"--window", "1,2,3"}, "want L,R"},
		{[]string{"--window", "a,1"}, `"a" is not an integer`},
		{[]string{"--window", "-2,0"}, "-2: a side must be ≥ −1"},
		{[]string{"--window", "4,4", "--causal"}, "--window 4,4 with --causal: R must be −1 or 0"},
		{[]string{"--softcap", "0"}, "omit --softcap for none"},
		{[]string{"--softcap", "-1"}, `"--softcap" flag: must be positive`},
		{[]string{"--softcap", "NaN"}, "must be finite"},
		{[]string{"--softcap", "1e39"}, "overflows float32"},
		{[]string{"--softcap", "x"}, `"x" is not a number`},
		{[]string{"--seqused-k", "x"}, `"x" is not an integer`},
		{[]string{"--seqused-k", "17"}, "--seqused-k 17: want 0 … Nk = 16"},
		{[]string{"--seqused-k", "-1"}, "--seqused-k -1: want 0 … Nk = 16"},
		{[]string{"--seqused-k", "4,8", "--batch", "3"}, "--batch 3 disagrees with --seqused-k (2 key counts, one per sequence)"},
	} {
		for _, cmd := range []string{"run", "explain"} {
			args := slices.Concat([]string{cmd}, cpu, tc.args)
			code, out, errs := flashvk(t, args...)
			if code != 2 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.msg) {
				t.Errorf("flashvk %s: exit %d: %q%s, want exit 2 and one line with %q", strings.Join(args, " "), code, errs, out, tc.msg)
			}
		}
	}
	// bench: a point the options do not fit is refused before any runs.
	grid := []string{"bench", "--backend", "cpu", "--seq", "16,32", "--dim", "8", "--tokens", "32", "--hidden", "8", "--iters", "1", "--progress", "none"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--window", "4,4"}, "--window 4,4 with --causal: R must be −1 or 0"},
		{[]string{"--seqused-k", "24"}, "--seqused-k 24: want 0 … Nk = 16"},
	} {
		args := slices.Concat(grid, tc.args)
		code, _, errs := flashvk(t, args...)
		if code != 2 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.msg) {
			t.Errorf("flashvk %s: exit %d: %q, want exit 2 and %q", strings.Join(args, " "), code, errs, tc.msg)
		}
	}
}

// run --check with each option on the CPU backend: the float64
// reference runs with the same options, and the FLOPs are the visible
// pairs (attention.Flops).
func TestRunCheckFeatures(t *testing.T) {
	base := []string{"--backend", "cpu", "-b", "2", "--heads", "4", "--kv-heads", "2", "--dim", "16", "--backward", "--check", "--iters", "0"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"window", []string{"--seq", "48", "--window", "7,3"}},
		{"window-causal", []string{"--seq", "48", "--window", "9,0", "--causal"}},
		{"window-left-only", []string{"--nq", "40", "--nk", "56", "--window", "5,-1", "--align", "bottom-right"}},
		{"softcap", []string{"--seq", "48", "--softcap", "1.5"}},
		{"softcap-fp16", []string{"--seq", "48", "--softcap", "2", "--dtype", "f16", "--causal"}},
		{"alibi", []string{"--seq", "48", "--alibi"}},
		{"alibi-bottom-right", []string{"--nq", "24", "--nk", "56", "--alibi", "--align", "bottom-right"}},
		{"seqused-k", []string{"--seq", "48", "--seqused-k", "17,48"}},
		{"seqused-k-one", []string{"--seq", "48", "--seqused-k", "0"}},
		{"all", []string{"--nq", "40", "--nk", "56", "--causal", "--align", "bottom-right", "--window", "12,0", "--softcap", "4",
			"--alibi", "--seqused-k", "30,56", "--layout", "bhsd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The JSON's problem is the one checked, and its FLOPs are
			// attention.Flops with the options.
			_, f := runChecked(t, base, tc.args)
			want, err := attention.Flops(f.qShape(), f.kShape(), f.vShape(), f.options())
			if err != nil || !f.features.set() {
				t.Fatalf("%+v: %v", f, err)
			}
			if got := f.flops(false); got != want {
				t.Errorf("flops %v, want %v", got, want)
			}
		})
	}
	out := mustRun(t, slices.Concat([]string{"run"}, base, []string{"--seq", "48", "--causal", "--window", "9,0", "--alibi"})...)
	for _, want := range []string{"causal top-left window=9,0 alibi", "(visible (query, key) pairs counted exactly)", "\nPASS\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("run lacks %q:\n%s", want, out)
		}
	}
}

// readProblemJSON is the problem of run --json's problem object.
func readProblemJSON(j problemJSON) (problem, error) {
	dt, err := attention.ParseDType(j.DType)
	if err != nil {
		return problem{}, err
	}
	p := problem{B: j.B, Hq: j.H, Hkv: j.Hkv, Nq: j.Nq, Nk: j.Nk, D: j.D, Dv: j.Dv, DType: dt, Causal: j.Causal, Scale: j.Scale,
		features: j.features}
	p.Align, err = attention.ParseAlignment(j.Align)
	return p, err
}

// The JSON of run, explain and bench records the options, and leaves
// them out when unset.
func TestFeaturesJSON(t *testing.T) {
	out := mustRun(t, "run", "--backend", "cpu", "--seq", "32", "--heads", "2", "--dim", "8", "--iters", "0", "--json",
		"--window", "8,0", "--softcap", "30", "--alibi", "--seqused-k", "20,32")
	for _, want := range []string{`"window": [` + "\n      8,\n      0\n    ]", `"softcap": 30`, `"alibi": true`, `"seqused_k": [`} {
		if !strings.Contains(out, want) {
			t.Errorf("run --json lacks %q:\n%s", want, out)
		}
	}
	var rep runReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if f := rep.Problem.features; *f.Window != [2]int{8, 0} || f.Softcap != 30 || !f.ALiBi || !slices.Equal(f.SeqUsedK, []int{20, 32}) ||
		rep.Problem.B != 2 {
		t.Errorf("run --json problem: %+v", rep.Problem)
	}
	plain := mustRun(t, "run", "--backend", "cpu", "--seq", "32", "--heads", "2", "--dim", "8", "--iters", "0", "--json")
	for _, k := range []string{"window", "softcap", "alibi", "seqused_k"} {
		if strings.Contains(plain, `"`+k+`"`) {
			t.Errorf("run --json without options has %q:\n%s", k, plain)
		}
	}
	// One --seqused-k value is every sequence's.
	rep = runJSON(t, "--backend", "cpu", "--seq", "32", "-b", "3", "--heads", "2", "--dim", "8", "--iters", "0", "--seqused-k", "5")
	if !slices.Equal(rep.Problem.SeqUsedK, []int{5, 5, 5}) {
		t.Errorf("--seqused-k 5 with B = 3: %v", rep.Problem.SeqUsedK)
	}

	var an analysis
	if err := json.Unmarshal([]byte(mustRun(t, "explain", "--backend", "cpu", "--seq", "64", "--dim", "16", "--softcap", "5", "--json")), &an); err != nil {
		t.Fatal(err)
	}
	if an.Problem.Softcap != 5 || an.Problem.Window != nil {
		t.Errorf("explain --json problem: %+v", an.Problem)
	}

	dir := t.TempDir()
	f := tinyBench(t, filepath.Join(dir, "w.json"), "--window", "16,0", "--softcap", "20", "--alibi", "--seqused-k", "24", "--backward", "--check")
	if len(f.Results) != 2*2*2 {
		t.Fatalf("%d results, want 8", len(f.Results))
	}
	for _, r := range f.Results {
		if *r.Window != [2]int{16, 0} || r.Softcap != 20 || !r.ALiBi || len(r.SeqUsedK) != r.B || r.SeqUsedK[0] != 24 {
			t.Errorf("bench result %s N=%d: %+v", r.Direction, r.Nq, r.features)
		}
		if r.RelL2 == nil || float64(*r.RelL2) > 2e-3 {
			t.Errorf("%s N=%d causal %v: rel_l2 %v", r.Direction, r.Nq, r.Causal, r.RelL2)
		}
		// TFLOP/s counts the visible pairs: the library's FLOPs.
		p := r.problem()
		want, err := attention.Flops(p.qShape(), p.kShape(), p.vShape(), p.options())
		if r.Direction == "bwd" {
			want *= 2.5
		}
		if err != nil || r.flops() != want || math.Abs(r.TFLOPS-want/(r.MedianMS/1e3)/1e12) > 1e-9*r.TFLOPS {
			t.Errorf("%s N=%d: flops %v, want %v (%v); tflops %v", r.Direction, r.Nq, r.flops(), want, err, r.TFLOPS)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "w.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"seqused_k": [`) || !strings.Contains(string(b), `"alibi": true`) {
		t.Errorf("bench JSON lacks the options:\n%.2000s", b)
	}
	// Results without the fields (older files, other tools) have none.
	plainFile := tinyBench(t, filepath.Join(dir, "plain.json"), "--causal", "false")
	b, _ = os.ReadFile(filepath.Join(dir, "plain.json"))
	if plainFile.Results[0].features.set() || strings.Contains(string(b), `"window"`) || strings.Contains(string(b), `"alibi"`) {
		t.Errorf("bench without options: %+v", plainFile.Results[0].features)
	}
	// Options out of range are refused on reading.
	bad := plainFile.Results[0]
	bad.SeqUsedK = []int{1, 2, 3}
	badFile := *plainFile
	badFile.Results = []Result{bad}
	path := filepath.Join(dir, "bad.json")
	if err := writeResults(path, nil, &badFile); err != nil {
		t.Fatal(err)
	}
	if _, err := readResults(path); err == nil || !strings.Contains(err.Error(), "seqused_k") {
		t.Errorf("a result with %d seqused_k for B = %d: %v", len(bad.SeqUsedK), bad.B, err)
	}
}

// compare and report tell results with other options apart, and label
// them.
func TestCompareFeatures(t *testing.T) {
	r := Result{Direction: "fwd", DType: "float16", B: 2, H: 4, Hkv: 4, Nq: 64, Nk: 64, D: 16, Dv: 16, Causal: true, Align: "top-left"}
	w := r
	w.Window = &[2]int{8, 0}
	w2 := r
	w2.Window = &[2]int{16, 0}
	s := r
	s.Softcap = 30
	a := r
	a.ALiBi = true
	k := r
	k.SeqUsedK = []int{30, 64}
	kbr := k
	kbr.Align = "bottom-right"
	keys := map[rowKey]string{}
	for name, x := range map[string]Result{"plain": r, "window": w, "window2": w2, "softcap": s, "alibi": a, "seqused_k": k, "seqused_k br": kbr} {
		key := keyOf(&x)
		if other, dup := keys[key]; dup {
			t.Errorf("%s and %s share the key %+v", name, other, key)
		}
		keys[key] = name
	}
	if o := keyOf(&kbr).Options; o != "seqused_k=30,64 bottom-right" {
		t.Errorf("options label %q", o)
	}
	if o := keyOf(&r).Options; o != "" {
		t.Errorf("plain options label %q", o)
	}

	dir := t.TempDir()
	plain, win := filepath.Join(dir, "plain.json"), filepath.Join(dir, "win.json")
	tinyBench(t, plain, "--causal=true")
	tinyBench(t, win, "--causal=true", "--window", "8,0")
	code, out, errs := flashvk(t, "compare", plain, win)
	if code != 0 || !strings.Contains(errs, "share no problem") || !strings.Contains(out, "| options |") || !strings.Contains(out, "| window=8,0 |") {
		t.Errorf("compare of plain and windowed results: exit %d\n%s\n%s", code, out, errs)
	}
	out = mustRun(t, "compare", win, win, "--format", "json")
	if !strings.Contains(out, `"options": "window=8,0"`) || !strings.Contains(out, `"geomean_ratio": 1`) {
		t.Errorf("compare --format json:\n%s", out)
	}
	md := filepath.Join(dir, "r.md")
	mustRun(t, "report", plain, win, "--markdown", md)
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"forward, d = 16, causal, window=8,0", "| causal window=8,0 |", "| fp16 B=2 H=2 N=32 d=16 causal top-left window=8,0 |"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report.md lacks %q:\n%s", want, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "r-fwd-d16-causal-window-8-0.svg")); err != nil {
		t.Error(err)
	}
}

// explain prints, for each pass, how many of its tiles the kernels
// compute.
func TestExplainTiles(t *testing.T) {
	// CPU tiles are 64×64: Nq = Nk = 256 is 4×4 tiles, of which a causal
	// window of 64 keys leaves the diagonal tiles and those left of them
	// (1 + 2 + 2 + 2).
	args := []string{"explain", "--backend", "cpu", "--seq", "256", "--dim", "16", "--heads", "2", "--causal", "--window", "64,0"}
	out := mustRun(t, args...)
	for _, dir := range []string{"fwd", "bwd"} {
		if want := dir + "  runs cpu, 7 of 16 query×key tiles computed (43.8%)"; !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	var an analysis
	if err := json.Unmarshal([]byte(mustRun(t, append(args, "--json")...)), &an); err != nil {
		t.Fatal(err)
	}
	if len(an.Plans) != 2 {
		t.Fatalf("plans %+v", an.Plans)
	}
	for _, pl := range an.Plans {
		if pl.Tiles != 16 || pl.TilesComputed != 7 || pl.TilesFraction != 7./16 {
			t.Errorf("%s: tiles %d, computed %d, fraction %v", pl.Direction, pl.Tiles, pl.TilesComputed, pl.TilesFraction)
		}
	}
	// Without a mask every tile is computed; key counts leave fewer.
	out = mustRun(t, "explain", "--backend", "cpu", "--seq", "256", "--dim", "16", "--heads", "2")
	if !strings.Contains(out, "16 of 16 query×key tiles computed (100.0%)") {
		t.Errorf("explain without a mask:\n%s", out)
	}
	out = mustRun(t, "explain", "--backend", "cpu", "--seq", "256", "--dim", "16", "--heads", "2", "--seqused-k", "64,256")
	if !strings.Contains(out, "20 of 32 query×key tiles computed (62.5%)") {
		t.Errorf("explain with --seqused-k 64,256:\n%s", out)
	}
}
