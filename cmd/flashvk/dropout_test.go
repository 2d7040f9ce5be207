package main

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/reference"
)

// --dropout, --dropout-seed and --dropout-offset: good values are taken
// (P as given, the library's Options.Dropout and the reference's dropout
// with the library's threshold); bad ones are refused (exit 2) in one
// line naming the flag, on run, explain and bench, before any work.
func TestDropoutFlagValues(t *testing.T) {
	var p float64
	for _, in := range []string{"0.1", " 0.5 ", "2e-3", "0.998"} {
		if err := (dropoutValue{&p}).Set(in); err != nil || p != mustFloat(t, in) {
			t.Errorf("--dropout %q: %v, %v", in, p, err)
		}
	}
	var seed uint64
	if err := (uintValue[uint64]{&seed}).Set("18446744073709551615"); err != nil || seed != math.MaxUint64 {
		t.Errorf("--dropout-seed 2⁶⁴−1: %v, %v", seed, err)
	}
	var off uint32
	if err := (uintValue[uint32]{&off}).Set("4294967295"); err != nil || off != math.MaxUint32 {
		t.Errorf("--dropout-offset 2³²−1: %v, %v", off, err)
	}

	cpu := []string{"--backend", "cpu", "--seq", "16", "--heads", "2", "--dim", "8"}
	grid := []string{"--backend", "cpu", "--seq", "16", "--dim", "8", "--tokens", "16", "--hidden", "8", "--iters", "1", "--progress", "none"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--dropout", "1"}, `invalid argument "1" for "--dropout" flag: 1: want a probability 0 < P < 1`},
		{[]string{"--dropout", "1.5"}, "1.5: want a probability 0 < P < 1"},
		{[]string{"--dropout", "-0.1"}, `"--dropout" flag: -0.1: want a probability 0 < P < 1`},
		{[]string{"--dropout=-0.1"}, "-0.1: want a probability 0 < P < 1"},
		{[]string{"--dropout", "NaN"}, `"--dropout" flag: NaN: want a probability 0 < P < 1`},
		{[]string{"--dropout", "Inf"}, "+Inf: want a probability 0 < P < 1"},
		{[]string{"--dropout", "abc"}, `"--dropout" flag: "abc" is not a number`},
		{[]string{"--dropout", ""}, `"" is not a number`},
		{[]string{"--dropout", "0"}, "0 is no dropout: omit --dropout for none"},
		{[]string{"--dropout", "1e-6"}, "1e-06 has no effect: the library applies P at a resolution of 2⁻⁸"},
		{[]string{"--dropout", "0.0019"}, "0.0019 has no effect: the library applies P at a resolution of 2⁻⁸, and P below 2⁻⁹ ≈ 0.00195 drops nothing"},
		{[]string{"--dropout", "0.99999999"}, "0.99999999 rounds to 1 in float32"},
		{[]string{"--dropout", "0.999"}, "0.999 would drop every element: the library applies P at a resolution of 2⁻⁸, and P ≥ 511/512 ≈ 0.998 rounds to 1"},
		{[]string{"--dropout", "0.1", "--dropout-seed", "x"}, `"--dropout-seed" flag: "x": want an integer 0 … 18446744073709551615`},
		{[]string{"--dropout", "0.1", "--dropout-seed", "-1"}, `"-1": want an integer 0 … 18446744073709551615`},
		{[]string{"--dropout", "0.1", "--dropout-seed", "18446744073709551616"}, "want an integer 0 … 18446744073709551615"},
		{[]string{"--dropout", "0.1", "--dropout-offset", "4294967296"}, `"--dropout-offset" flag: "4294967296": want an integer 0 … 4294967295`},
		{[]string{"--dropout", "0.1", "--dropout-offset", "1.5"}, `"1.5": want an integer 0 … 4294967295`},
		{[]string{"--dropout-seed", "1"}, "--dropout-seed has no effect without --dropout"},
	} {
		for _, cmd := range [][]string{{"run"}, {"explain"}, {"bench"}} {
			base := cpu
			if cmd[0] == "bench" {
				base = grid
			}
			args := slices.Concat(cmd, base, tc.args)
			code, out, errs := appRun(t, func(a *app) { a.beforeInputs = func() { t.Error("the command started its work") } }, args...)
			if code != 2 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.msg) {
				t.Errorf("flashvk %s: exit %d: %q%s, want exit 2 and one line with %q", strings.Join(args, " "), code, errs, out, tc.msg)
			}
		}
	}
	for _, cmd := range []string{"run", "explain", "bench"} {
		help := mustRun(t, cmd, "--help")
		for _, flag := range []string{"--dropout P", "--dropout-seed uint ", "--dropout-offset uint32 "} {
			if !strings.Contains(help, flag) {
				t.Errorf("%s --help lacks %q", cmd, flag)
			}
		}
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	var x float64
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &x); err != nil {
		t.Fatal(err)
	}
	return x
}

// The problem's dropout goes to the library's Options as the float32 P
// with the seed and offset, and to the float64 reference with the
// probability the library applies: the reference's threshold is the
// library's (spec.DropThreshold of the float32 P) for every P, the
// rounding edges included (the P the library refuses left out).
func TestDropoutOptionsParams(t *testing.T) {
	ps := []float64{0.1, 0.5, 1. / 3, 0.9, 0.998, 0.99999, 0.9999999, math.Exp2(-9), 0.5 / 256 * 3, 1.5 / 256, 2.5 / 256, 254.5 / 256}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		ps = append(ps, r.Float64(), float64(r.IntN(256))/256+0.5/256)
	}
	for _, x := range ps {
		if x <= 0 || float32(x) >= 1 || dropThreshold(x) == 0 || math.Round(float64(float32(x))*256) >= 256 {
			continue
		}
		p := problem{B: 2, Hq: 2, Hkv: 1, Nq: 8, Nk: 8, D: 4, Dv: 4, DType: attention.Float32,
			features: features{Dropout: x, DropoutSeed: 1<<40 + 3, DropoutOffset: 9}}
		o := p.options()
		if d := o.Dropout; d == nil || d.P != float32(x) || d.Seed != 1<<40+3 || d.Offset != 9 {
			t.Fatalf("P %v: options' dropout %+v", x, o.Dropout)
		}
		want := spec.DropThreshold(float64(float32(x)))
		rp := p.params()
		if rp.Dropout == nil || rp.Dropout.Threshold() != want || rp.Dropout.Seed != 1<<40+3 || rp.Dropout.Offset != 9 {
			t.Fatalf("P %v: reference dropout %+v (threshold %d), want threshold %d", x, rp.Dropout, rp.Dropout.Threshold(), want)
		}
		if dropThreshold(x) != want {
			t.Fatalf("P %v: dropThreshold %d, want %d", x, dropThreshold(x), want)
		}
	}
	// Without --dropout neither has any.
	p := problem{B: 1, Hq: 1, Hkv: 1, Nq: 4, Nk: 4, D: 4, Dv: 4, DType: attention.Float32}
	if p.options().Dropout != nil || p.params().Dropout != nil {
		t.Error("a problem without dropout has some")
	}
}

// run, explain and bench record the dropout in their text and JSON, and
// leave it out when unset; the seed and offset only where given (not 0).
func TestDropoutJSON(t *testing.T) {
	args := []string{"--backend", "cpu", "--seq", "32", "--heads", "2", "--dim", "8", "--iters", "0"}
	out := mustRun(t, slices.Concat([]string{"run"}, args, []string{"--causal", "--dropout", "0.1", "--dropout-seed", "7", "--dropout-offset", "3"})...)
	if want := "causal top-left dropout=0.1 dropout_seed=7 dropout_offset=3"; !strings.Contains(out, want) {
		t.Errorf("run lacks %q:\n%s", want, out)
	}
	if want := "(visible (query, key) pairs counted exactly)"; !strings.Contains(out, want) {
		t.Errorf("run lacks %q:\n%s", want, out)
	}
	raw := mustRun(t, slices.Concat([]string{"run"}, args, []string{"--json", "--dropout", "0.1", "--dropout-seed", "7", "--dropout-offset", "3"})...)
	for _, want := range []string{`"dropout": 0.1,`, `"dropout_seed": 7,`, `"dropout_offset": 3`} {
		if !strings.Contains(raw, want) {
			t.Errorf("run --json lacks %q:\n%s", want, raw)
		}
	}
	var rep runReport
	if err := json.Unmarshal([]byte(raw), &rep); err != nil {
		t.Fatal(err)
	}
	if f := rep.Problem.features; f.Dropout != 0.1 || f.DropoutSeed != 7 || f.DropoutOffset != 3 || f.Window != nil {
		t.Errorf("run --json problem: %+v", rep.Problem)
	}
	p, err := readProblemJSON(rep.Problem)
	if err != nil {
		t.Fatal(err)
	}
	// With dropout the FLOPs are the library's: the visible pairs.
	want, err := attention.Flops(p.qShape(), p.kShape(), p.vShape(), p.options())
	if err != nil || p.flops(false) != want || rep.Results[0].Passes[0].FirstCallTFLOPS <= 0 {
		t.Errorf("flops %v, want %v (%v)", p.flops(false), want, err)
	}
	rep = runJSON(t, slices.Concat(args, []string{"--dropout", "0.5"})...)
	raw = mustRun(t, slices.Concat([]string{"run"}, args, []string{"--json", "--dropout", "0.5"})...)
	if rep.Problem.Dropout != 0.5 || strings.Contains(raw, `"dropout_seed"`) || strings.Contains(raw, `"dropout_offset"`) {
		t.Errorf("run --json --dropout 0.5 (no seed or offset): %+v\n%s", rep.Problem, raw)
	}
	if plain := mustRun(t, slices.Concat([]string{"run"}, args, []string{"--json"})...); strings.Contains(plain, `"dropout`) {
		t.Errorf("run --json without --dropout has a dropout field:\n%s", plain)
	}

	var an analysis
	if err := json.Unmarshal([]byte(mustRun(t, "explain", "--backend", "cpu", "--seq", "64", "--dim", "16", "--dropout", "0.25", "--dropout-seed", "11", "--json")), &an); err != nil {
		t.Fatal(err)
	}
	if an.Problem.Dropout != 0.25 || an.Problem.DropoutSeed != 11 || an.Problem.DropoutOffset != 0 {
		t.Errorf("explain --json problem: %+v", an.Problem)
	}
	if out := mustRun(t, "explain", "--backend", "cpu", "--seq", "64", "--dim", "16", "--dropout", "0.25"); !strings.Contains(out, "non-causal dropout=0.25") {
		t.Errorf("explain lacks the dropout:\n%s", out)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "d.json")
	f := tinyBench(t, path, "--dropout", "0.2", "--dropout-seed", "5", "--dropout-offset", "1", "--causal", "true", "--backward")
	if len(f.Results) != 2*2 {
		t.Fatalf("%d results, want 4", len(f.Results))
	}
	for _, r := range f.Results {
		if r.Dropout != 0.2 || r.DropoutSeed != 5 || r.DropoutOffset != 1 {
			t.Errorf("bench result %s N=%d: %+v", r.Direction, r.Nq, r.features)
		}
		if !strings.HasSuffix(benchName(r), "/dropout0.2") {
			t.Errorf("benchmark name %q", benchName(r))
		}
		p := r.problem()
		want, err := attention.Flops(p.qShape(), p.kShape(), p.vShape(), p.options())
		if r.Direction == "bwd" {
			want *= 2.5
		}
		if err != nil || r.flops() != want {
			t.Errorf("%s N=%d: flops %v, want %v (%v)", r.Direction, r.Nq, r.flops(), want, err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"dropout": 0.2,`, `"dropout_seed": 5,`, `"dropout_offset": 1,`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("bench JSON lacks %q:\n%.2000s", want, b)
		}
	}

	// Out-of-range dropout is refused on reading, and so are a seed or
	// offset without it and a kv result with any.
	checkRefusedResults(t, dir, f, []refusedResult{
		{func(r *Result) { r.Dropout = 1 }, "dropout 1: want a probability 0 ≤ P < 1"},
		{func(r *Result) { r.Dropout = -0.1 }, "dropout -0.1"},
		{func(r *Result) { r.Dropout, r.DropoutSeed = 0, 3 }, "dropout_seed or dropout_offset without dropout"},
		{func(r *Result) { r.Dropout, r.DropoutOffset = 0, 3 }, "dropout_seed or dropout_offset without dropout"},
		{func(r *Result) { r.Direction, r.CacheSeqLens = "kv", slices.Repeat([]int{1}, r.B) }, "a kv result has no seqlens, seqused_k or dropout"},
	})
}

// refusedResult is an edit of a result that reading a results file must
// refuse, with an error containing msg.
type refusedResult struct {
	edit func(*Result)
	msg  string
}

// checkRefusedResults writes f's first result, edited by each case, as
// the only result of a file in dir, and checks that reading it is
// refused with the case's message.
func checkRefusedResults(t *testing.T, dir string, f *ResultsFile, cases []refusedResult) {
	t.Helper()
	for _, tc := range cases {
		bad := *f
		bad.Results = []Result{f.Results[0]}
		tc.edit(&bad.Results[0])
		p := filepath.Join(dir, "bad.json")
		if err := writeResults(p, nil, &bad); err != nil {
			t.Fatal(err)
		}
		if _, err := readResults(p); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("reading %+v: %v, want %q", bad.Results[0].features, err, tc.msg)
		}
	}
}

// compare and report keep results of another dropout probability apart,
// and label them; the seed and offset, which change which elements drop
// but not the work, do not split a cell (so a PyTorch anchor, which
// records P alone, its mask being its own, matches on P).
func TestCompareDropout(t *testing.T) {
	r := Result{Direction: "fwd", DType: "float16", B: 2, H: 4, Hkv: 4, Nq: 64, Nk: 64, D: 16, Dv: 16, Causal: true, Align: "top-left"}
	d1 := r
	d1.Dropout = 0.1
	d2 := r
	d2.Dropout = 0.2
	s := d1
	s.DropoutSeed, s.DropoutOffset = 42, 7
	br := d1
	br.Nk, br.Align = 96, "bottom-right"
	keys := map[rowKey]string{}
	for name, x := range map[string]Result{"plain": r, "dropout 0.1": d1, "dropout 0.2": d2, "dropout 0.1 bottom-right": br} {
		key := keyOf(&x)
		if other, dup := keys[key]; dup {
			t.Errorf("%s and %s share the key %+v", name, other, key)
		}
		keys[key] = name
	}
	if keyOf(&s) != keyOf(&d1) {
		t.Errorf("another seed and offset split the cell: %+v, %+v", keyOf(&s), keyOf(&d1))
	}
	if o := keyOf(&d1).Options; o != "dropout=0.1" {
		t.Errorf("options label %q", o)
	}
	if o := keyOf(&br).Options; o != "dropout=0.1 bottom-right" {
		t.Errorf("options label %q", o)
	}
	if benchName(s) != benchName(d1) || benchName(d1) == benchName(d2) {
		t.Errorf("benchmark names %q, %q, %q", benchName(s), benchName(d1), benchName(d2))
	}

	dir := t.TempDir()
	plain, drop, seeded := filepath.Join(dir, "plain.json"), filepath.Join(dir, "drop.json"), filepath.Join(dir, "seeded.json")
	tinyBench(t, plain, "--causal=true")
	tinyBench(t, drop, "--causal=true", "--dropout", "0.1")
	tinyBench(t, seeded, "--causal=true", "--dropout", "0.1", "--dropout-seed", "3", "--dropout-offset", "4")
	code, out, errs := flashvk(t, "compare", plain, drop)
	if code != 0 || !strings.Contains(errs, "share no problem") || !strings.Contains(out, "| dropout=0.1 |") {
		t.Errorf("compare of plain and dropout results: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = flashvk(t, "compare", drop, seeded, "--format", "json")
	if code != 0 || !strings.Contains(out, `"options": "dropout=0.1"`) || strings.Contains(errs, "share no problem") {
		t.Errorf("compare of dropout results of other seeds: exit %d\n%s\n%s", code, out, errs)
	}
	md := filepath.Join(dir, "r.md")
	mustRun(t, "report", plain, drop, "--markdown", md)
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if want := "forward, d = 16, causal, dropout=0.1"; !strings.Contains(string(b), want) {
		t.Errorf("report.md lacks %q:\n%s", want, b)
	}
}

// packedReference with dropout: each sequence's mask is drawn by its
// index in the batch (reference.Dropout.Batch0), so with equal lengths the packed
// reference is the padded one, which draws sequence b's mask as b; and
// the dropout changes the outputs.
func TestPackedReferenceDropout(t *testing.T) {
	const b = 3
	p := problem{B: b, Hq: 4, Hkv: 2, Nq: 9, Nk: 9, D: 8, Dv: 8, DType: attention.Float32, Causal: true,
		features: features{ALiBi: true, SeqUsedK: []int{9, 6, 4}, Dropout: 0.3, DropoutSeed: 12345, DropoutOffset: 2}}
	in, got, o := packedMatchesPadded(t, p, 5)
	pp := p.params()
	undropped := p
	undropped.Dropout, undropped.DropoutSeed, undropped.DropoutOffset = 0, 0, 0
	o0, _, err := reference.Forward(undropped.params(), in[0], in[1], in[2])
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(o0, o) {
		t.Error("dropout 0.3 left O as it was")
	}
	// The last sequence's mask is its own: with it drawn as sequence 0's
	// (a batch of one) the packed outputs would differ.
	first := pp
	first.B, first.SeqUsedK = 1, pp.SeqUsedK[2:]
	last := func(x []float64) []float64 { return x[len(x)/b*(b-1):] }
	o2, _, err := reference.Forward(first, last(in[0]), last(in[1]), last(in[2]))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(o2, last(got.o)) {
		t.Error("sequence 2's reference is that of a mask drawn as sequence 0's")
	}
}

// run --check (and bench --check) with dropout on the CPU backend: the
// float64 reference drops the very elements the library drops (the same
// threshold, seed, offset and sequence indices), so every output passes,
// padded, packed, with GQA, a causal mask and the other options. It needs
// the CPU backend's dropout: before it, the CPU backend's outputs are
// undropped and the checks fail.
func TestRunCheckDropout(t *testing.T) {
	base := []string{"--backend", "cpu", "--heads", "4", "--kv-heads", "2", "--dim", "16", "--backward", "--check", "--iters", "0"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"plain", []string{"-b", "2", "--seq", "48", "--dropout", "0.2"}},
		{"seed-offset", []string{"-b", "2", "--seq", "48", "--dropout", "0.5", "--dropout-seed", "18446744073709551615", "--dropout-offset", "4294967295"}},
		{"causal-nq-nk", []string{"-b", "2", "--nq", "40", "--nk", "72", "--causal", "--align", "bottom-right", "--dropout", "0.1", "--dropout-seed", "3"}},
		{"fp16", []string{"-b", "2", "--seq", "48", "--dtype", "f16", "--causal", "--dropout", "0.3", "--dropout-seed", "9", "--dropout-offset", "1"}},
		{"options", []string{"-b", "2", "--seq", "48", "--window", "9,0", "--softcap", "4", "--alibi", "--seqused-k", "30,48",
			"--dropout", "0.25", "--dropout-seed", "1"}},
		{"packed", []string{"--seqlens", "40,0,17,65", "--causal", "--dropout", "0.15", "--dropout-seed", "77", "--dropout-offset", "5"}},
		{"high", []string{"-b", "1", "--seq", "48", "--dropout", "0.99"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, _ := runChecked(t, base, tc.args)
			if j.Dropout == 0 {
				t.Errorf("the problem has no dropout: %+v", j)
			}
		})
	}
	// bench --check records the error against the same reference.
	t.Run("bench", func(t *testing.T) {
		f := tinyBench(t, filepath.Join(t.TempDir(), "b.json"), "--dropout", "0.2", "--dropout-seed", "6", "--backward", "--check")
		for _, r := range f.Results {
			if r.RelL2 == nil {
				t.Errorf("%s %s N=%d causal %v: no rel_l2 recorded", r.Direction, r.DType, r.Nq, r.Causal)
			} else if float64(*r.RelL2) > 2e-3 || r.Dropout != 0.2 {
				t.Errorf("%s %s N=%d causal %v: rel_l2 %v, dropout %v", r.Direction, r.DType, r.Nq, r.Causal, *r.RelL2, r.Dropout)
			}
		}
	})
}
