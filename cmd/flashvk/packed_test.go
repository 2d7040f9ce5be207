package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
)

// --seqlens: good values make a packed problem (B the count, Nq = Nk the
// longest, operands [1, ΣNi, H, d], the library's offsets); bad ones and
// the flags it replaces are refused (exit 2) in one line naming the flag.
func TestSeqLensFlag(t *testing.T) {
	var an analysis
	if err := json.Unmarshal([]byte(mustRun(t, "explain", "--backend", "cpu", "--seqlens", "5,0,3", "--heads", "2", "--dim", "8", "--json")), &an); err != nil {
		t.Fatal(err)
	}
	p, err := readProblemJSON(an.Problem)
	if err != nil {
		t.Fatal(err)
	}
	if p.B != 3 || p.Nq != 5 || p.Nk != 5 || !slices.Equal(p.SeqLens, []int{5, 0, 3}) {
		t.Fatalf("--seqlens 5,0,3: %+v", an.Problem)
	}
	if q := p.qShape(); q != (attention.Shape{B: 1, S: 8, H: 2, D: 8}) {
		t.Errorf("packed Q shape %+v, want [1, 8, 2, 8]", q)
	}
	if o := p.options(); !slices.Equal(o.CuSeqlensQ, []int32{0, 5, 5, 8}) || !slices.Equal(o.CuSeqlensK, o.CuSeqlensQ) {
		t.Errorf("offsets %v, %v", o.CuSeqlensQ, o.CuSeqlensK)
	}
	if plain := mustRun(t, "explain", "--backend", "cpu", "--seq", "8", "--heads", "2", "--dim", "8", "--json"); strings.Contains(plain, `"seqlens"`) {
		t.Errorf("explain --json without --seqlens has seqlens:\n%s", plain)
	}
	// Each sequence's own pairs: 2·Hq·(d+dv)·(5² + 3²).
	if want := 2. * 2 * 16 * (25 + 9); an.Flops != want || p.flops(false) != want {
		t.Errorf("flops %v (%v), want %v", an.Flops, p.flops(false), want)
	}

	cpu := []string{"--backend", "cpu", "--heads", "2", "--dim", "8"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--seqlens", "4,-1"}, "--seqlens -1: a length must be ≥ 0"},
		{[]string{"--seqlens=-3"}, "--seqlens -3: a length must be ≥ 0"},
		{[]string{"--seqlens", "0,0"}, "--seqlens 0,0: every sequence is empty"},
		{[]string{"--seqlens", "4,x"}, `"x" is not an integer`},
		{[]string{"--seqlens", "4", "--seq", "4"}, "--seq does not apply with --seqlens"},
		{[]string{"--seqlens", "4", "--nq", "4"}, "--nq does not apply with --seqlens"},
		{[]string{"--seqlens", "4", "--nk", "4"}, "--nk does not apply with --seqlens"},
		{[]string{"--seqlens", "4,8", "--batch", "2"}, "--batch does not apply with --seqlens: B is the number of lengths"},
		{[]string{"--seqlens", "4,8", "--seqused-k", "1,2,3"}, "--seqused-k: 3 key counts for the 2 sequences of --seqlens"},
		{[]string{"--seqlens", "4,8", "--seqused-k", "5,8"}, "--seqused-k 5: want 0 … 4 for sequence 0 (its length in --seqlens)"},
		{[]string{"--seqlens", "4,8", "--seqused-k", "5"}, "--seqused-k 5: want 0 … 4 for sequence 0"},
		{[]string{"--seqlens", "4,8", "--seqused-k", "4,8"}, "--seqused-k has no effect: every sequence uses all its keys"},
		{[]string{"--seqlens", "4,8", "--causal", "--align", "bottom-right"}, "--align has no effect: every sequence of --seqlens has Nq = Nk"},
		{[]string{"--seqlens", "4,8", "--window", "-1,-1"}, "--window -1,-1 has no effect"},
	} {
		for _, cmd := range []string{"run", "explain"} {
			args := slices.Concat([]string{cmd}, cpu, tc.args)
			code, out, errs := appRun(t, func(a *app) { a.beforeInputs = func() { t.Error("the command started its work") } }, args...)
			if code != 2 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.msg) {
				t.Errorf("flashvk %s: exit %d: %q%s, want exit 2 and one line with %q", strings.Join(args, " "), code, errs, out, tc.msg)
			}
		}
	}
	grid := []string{"bench", "--backend", "cpu", "--dim", "8", "--hidden", "8", "--iters", "1", "--progress", "none"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--seqlens", "4", "--seq", "4,8"}, "--seq does not apply with --seqlens"},
		{[]string{"--seqlens", "4", "--tokens", "64"}, "--tokens does not apply with --seqlens"},
		{[]string{"--seqlens", "4,8", "--batch", "2"}, "--batch does not apply with --seqlens"},
		{[]string{"--seqlens", "0"}, "every sequence is empty"},
		{[]string{"--seqlens", "4,8", "--seqused-k", "6"}, "--seqused-k 6: want 0 … 4 for sequence 0"},
		{[]string{"--seqlens", "4,8", "--causal", "true", "--align", "bottom-right"}, "--align has no effect: every sequence of --seqlens has Nq = Nk"},
	} {
		args := slices.Concat(grid, tc.args)
		code, _, errs := appRun(t, func(a *app) { a.beforeInputs = func() { t.Error("the command started its work") } }, args...)
		if code != 2 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.msg) {
			t.Errorf("flashvk %s: exit %d: %q, want exit 2 and %q", strings.Join(args, " "), code, errs, tc.msg)
		}
	}
	// --seqused-k changes the diagonal of a sequence: --align applies.
	mustRun(t, "explain", "--backend", "cpu", "--seqlens", "4,8", "--seqused-k", "4,5", "--causal", "--align", "bottom-right")
}

// package reference has no packed form: packedReference runs each
// sequence as a batch of one. With equal lengths the packed rows are the
// padded batch's, so its outputs are the padded reference's (the LSE
// [Hq, T] instead of [B, Hq, N]); an empty sequence adds no row.
func TestPackedReference(t *testing.T) {
	const b, hq, n = 3, 4, 7
	p := problem{B: b, Hq: hq, Hkv: 2, Nq: n, Nk: n, D: 8, Dv: 8, DType: attention.Float32, Causal: true,
		features: features{ALiBi: true, Window: &[2]int{3, 0}, SeqUsedK: []int{7, 5, 2}}}
	in, got, _ := packedMatchesPadded(t, p, 3)
	ctx := context.Background()
	packed := p
	packed.SeqLens = []int{n, n, n}
	// An empty sequence: the others' rows only.
	packed.SeqLens, packed.SeqUsedK, packed.B = []int{n, 0, n}, nil, 3
	p.B, p.SeqUsedK = 2, nil
	two := func(x []float64) []float64 { return x[:len(x)*2/3] }
	got, err := packedReference(ctx, packed, two(in[0]), two(in[1]), two(in[2]), nil)
	if err != nil {
		t.Fatal(err)
	}
	o, _, err := reference.Forward(p.params(), two(in[0]), two(in[1]), two(in[2]))
	if err != nil || !slices.Equal(got.o, o) || len(got.lse) != hq*2*n || got.dq != nil {
		t.Errorf("with an empty sequence: %v; o equal %v, %d LSE values", err, slices.Equal(got.o, o), len(got.lse))
	}
}

// The results record seqlens (omitted when unset; files without it still
// read), reading refuses seqlens that do not fit B, Nq and Nk, and
// compare tells packed results apart and labels them.
func TestSeqLensResults(t *testing.T) {
	r := Result{Direction: "fwd", DType: "float16", B: 3, H: 4, Hkv: 4, Nq: 100, Nk: 100, D: 16, Dv: 16, Align: "top-left", Kernel: "flash",
		MedianMS: 1, TFLOPS: 1, Iters: 1, Clock: "gpu-timestamps"}
	packed := r
	packed.SeqLens = []int{100, 0, 37}
	other := r
	other.SeqLens = []int{100, 37, 0}
	long := r
	long.B, long.SeqLens = 9, []int{100, 1, 2, 3, 4, 5, 6, 7, 8}
	long2 := long
	long2.SeqLens = []int{100, 2, 1, 3, 4, 5, 6, 7, 8}
	dir := t.TempDir()
	path := filepath.Join(dir, "p.json")
	file := &ResultsFile{Schema: SchemaV1, Tool: "flashvk", Device: DeviceInfo{Name: "dev"}, Results: []Result{r, packed, other, long, long2}}
	if err := writeResults(path, nil, file); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), `"seqlens": [`) != 4 {
		t.Errorf("seqlens written %d times, want 4 (not for the padded result):\n%s", strings.Count(string(b), `"seqlens"`), b)
	}
	rf, err := readResults(path)
	if err != nil {
		t.Fatal(err)
	}
	if rf.Results[0].SeqLens != nil || !slices.Equal(rf.Results[1].SeqLens, []int{100, 0, 37}) {
		t.Errorf("read back: %v, %v", rf.Results[0].SeqLens, rf.Results[1].SeqLens)
	}
	// The FLOPs of a packed result are each sequence's own pairs.
	if got, want := rf.Results[1].flops(), 4*4.*16*(100*100+37*37); got != want {
		t.Errorf("packed result flops %v, want %v", got, want)
	}
	keys := map[rowKey]int{}
	for i, x := range rf.Results {
		k := keyOf(&x)
		if other, dup := keys[k]; dup {
			t.Errorf("results %d and %d share the key %+v", i, other, k)
		}
		keys[k] = i
	}
	if k := keyOf(&rf.Results[1]); k.Options != "seqlens=100,0,37" || k.SeqLens != "100,0,37" {
		t.Errorf("packed key %+v", k)
	}
	if k := keyOf(&rf.Results[0]); k.Options != "" || k.SeqLens != "" {
		t.Errorf("padded key %+v", k)
	}
	code, out, errs := flashvk(t, "compare", path, path)
	if code != 0 || !strings.Contains(out, "| seqlens=100,0,37 |") || !strings.Contains(out, "| seqlens=100,37,0 |") {
		t.Errorf("compare of packed results: exit %d\n%s\n%s", code, out, errs)
	}
	if out := mustRun(t, "compare", path, path, "--format", "json"); !strings.Contains(out, `"seqlens": "100,2,1,3,4,5,6,7,8"`) {
		t.Errorf("compare --format json lacks the lengths:\n%s", out)
	}

	for _, tc := range []struct {
		lens []int
		msg  string
	}{
		{[]int{100, 0}, "2 seqlens, want one per sequence (B = 3)"},
		{[]int{90, 0, 37}, "want lengths ≥ 0, the longest Nq = Nk"},
		{[]int{100, -1, 37}, "want lengths ≥ 0"},
	} {
		bad := packed
		bad.SeqLens = tc.lens
		f := *file
		f.Results = []Result{bad}
		p := filepath.Join(dir, "bad.json")
		if err := writeResults(p, nil, &f); err != nil {
			t.Fatal(err)
		}
		if _, err := readResults(p); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("seqlens %v: %v, want %q", tc.lens, err, tc.msg)
		}
	}
	bad := packed
	bad.SeqUsedK = []int{50, 1, 37}
	f := *file
	f.Results = []Result{bad}
	if err := writeResults(filepath.Join(dir, "bad.json"), nil, &f); err != nil {
		t.Fatal(err)
	}
	if _, err := readResults(filepath.Join(dir, "bad.json")); err == nil || !strings.Contains(err.Error(), "seqused_k 1: want 0 … 0, the keys of sequence 1") {
		t.Errorf("seqused_k past a packed sequence's length: %v", err)
	}
}

// run --check with --seqlens on Vulkan: the float64 reference runs
// sequence by sequence, every output passes, and the JSON records the
// lengths with the library's FLOPs; bench records them too.
func TestRunCheckPacked(t *testing.T) {
	skipWithoutVulkan(t)
	base := []string{"--backend", "vulkan", "--heads", "4", "--kv-heads", "2", "--dim", "16", "--backward", "--check", "--iters", "0",
		"--validation=" + boolEnv("FLASHVK_VALIDATION")}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"plain", []string{"--seqlens", "70,0,17,33"}},
		{"causal-fp16-bhsd", []string{"--seqlens", "40,65", "--causal", "--dtype", "f16", "--layout", "bhsd"}},
		{"one", []string{"--seqlens", "50", "--causal", "--dtype", "bf16"}},
		{"all", []string{"--seqlens", "70,0,17,33", "--causal", "--align", "bottom-right", "--window", "9,0", "--softcap", "3", "--alibi",
			"--seqused-k", "50,0,17,5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, p := runChecked(t, base, tc.args)
			want, err := attention.Flops(p.qShape(), p.kShape(), p.vShape(), p.options())
			if err != nil || !p.packed() || p.flops(false) != want {
				t.Errorf("%+v: flops %v, want %v (%v)", j, p.flops(false), want, err)
			}
		})
	}
	out := mustRun(t, slices.Concat([]string{"run"}, base, []string{"--seqlens", "20,9", "--causal"})...)
	for _, want := range []string{"B=2 Hq=4 Hkv=2 T=29 (packed)", "causal top-left seqlens=20,9", "each sequence's own visible (query, key) pairs",
		"sequence by sequence over its packed rows", "\nPASS\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("run lacks %q:\n%s", want, out)
		}
	}

	// --out writes the packed outputs (the LSE [1, Hq, T]), and .npy
	// inputs of packed rows run as the same batch.
	dir := t.TempDir()
	mustRun(t, "run", "--backend", "vulkan", "--seqlens", "20,0,9", "--heads", "2", "--dim", "16", "--iters", "0", "--out", dir)
	o := filepath.Join(dir, "o.npy")
	for name, want := range map[string][]int{"o.npy": {1, 29, 2, 16}, "lse.npy": {1, 2, 29}} {
		if h, err := statNpy(filepath.Join(dir, name)); err != nil || !slices.Equal(h.Shape, want) {
			t.Errorf("%s: %v, shape %v, want %v", name, err, h, want)
		}
	}
	rep := runJSON(t, "--backend", "vulkan", "--seqlens", "20,0,9", "--q", o, "--k", o, "--v", o, "--causal", "--backward", "--check", "--iters", "0")
	if !rep.Pass || rep.Problem.B != 3 || rep.Problem.Nq != 20 || !slices.Equal(rep.Problem.SeqLens, []int{20, 0, 9}) {
		t.Errorf("run --check on packed .npy inputs: pass %v, problem %+v", rep.Pass, rep.Problem)
	}
	code, _, errs := flashvk(t, "run", "--backend", "vulkan", "--seqlens", "20,8", "--q", o, "--k", o, "--v", o, "--iters", "0")
	if code != 2 || !strings.Contains(errs, "--seqlens packs 28 rows in all, but the input files hold B=1, Nq=29, Nk=29") {
		t.Errorf("packed inputs of other lengths: exit %d: %s", code, errs)
	}

	f := benchInto(t, filepath.Join(t.TempDir(), "packed.json"), "bench", "--backend", "vulkan", "--seqlens", "40,0,9", "--dim", "16",
		"--heads", "2", "--dtype", "f32", "--causal", "both", "--backward", "--check", "--warmup", "0", "--iters", "2", "--progress", "none")
	if len(f.Results) != 4 {
		t.Fatalf("%d results, want 4", len(f.Results))
	}
	for _, r := range f.Results {
		if r.B != 3 || r.Nq != 40 || !slices.Equal(r.SeqLens, []int{40, 0, 9}) || r.RelL2 == nil || float64(*r.RelL2) > tolFloat32 {
			t.Errorf("bench result %s causal %v: B %d Nq %d seqlens %v rel_l2 %v", r.Direction, r.Causal, r.B, r.Nq, r.SeqLens, r.RelL2)
		}
	}
}

// packedMatchesPadded checks packedReference of p's batch packed (every
// sequence of length Nq = Nk) against the padded reference of p, forward
// and backward, on inputs drawn from seed; it returns the inputs, the
// packed result and the padded O.
func packedMatchesPadded(t *testing.T, p problem, seed uint64) ([4][]float64, *refResult, []float64) {
	t.Helper()
	packed := p
	packed.SeqLens = slices.Repeat([]int{p.Nq}, p.B)
	packed.SeqUsedK = slices.Clone(p.SeqUsedK)
	var in [4][]float64
	for i, s := range []attention.Shape{p.qShape(), p.kShape(), p.vShape(), p.oShape()} {
		if s.Len() != []attention.Shape{packed.qShape(), packed.kShape(), packed.vShape(), packed.oShape()}[i].Len() {
			t.Fatalf("operand %d: padded %+v and packed shapes hold different counts", i, s)
		}
		in[i] = randomTensor(attention.Float32, s, attention.BSHD, rngFor(seed, uint64(i+1))).Float64s()
	}
	ctx := context.Background()
	got, err := packedReference(ctx, packed, in[0], in[1], in[2], in[3])
	if err != nil {
		t.Fatal(err)
	}
	pp := p.params()
	o, lse, err := reference.Forward(pp, in[0], in[1], in[2])
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv, err := reference.Backward(pp, in[0], in[1], in[2], in[3])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want []float64
	}{{"o", got.o, o}, {"dq", got.dq, dq}, {"dk", got.dk, dk}, {"dv", got.dv, dv}} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s differs from the padded reference", c.name)
		}
	}
	b, hq, n := p.B, p.Hq, p.Nq
	for s := range b {
		for h := range hq {
			for i := range n {
				if g, w := got.lse[h*b*n+s*n+i], lse[(s*hq+h)*n+i]; g != w && !(math.IsInf(g, -1) && math.IsInf(w, -1)) {
					t.Fatalf("lse of sequence %d head %d row %d: %v, want %v", s, h, i, g, w)
				}
			}
		}
	}
	return in, got, o
}
