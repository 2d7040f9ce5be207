package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
	"github.com/x448/float16"
)

// writeTestNpy writes data ([]float32, []float16.Float16, []bool, []uint8,
// []float64) as the .npy file name in dir and returns its path.
func writeTestNpy(t *testing.T, dir, name string, shape []int, data any) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := writeNpy(p, shape, data); err != nil {
		t.Fatal(err)
	}
	return p
}

// randomBias is n standard normal values with every seventh −Inf (no row
// left without a key when the rows are at least 7 keys long).
func randomBias(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 9))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
		if i%7 == 3 {
			x[i] = float32(math.Inf(-1))
		}
	}
	return x
}

// blockMask is an n×n mask that keeps the keys of each query's own block
// of blk rows (a block-diagonal mask).
func blockMask(n, blk int) []bool {
	keep := make([]bool, n*n)
	for i := range n {
		for j := range n {
			keep[i*n+j] = i/blk == j/blk
		}
	}
	return keep
}

// biasFiles writes the files the bias tests read into a temporary folder.
type biasFiles struct {
	dir                                   string
	bias, bias2d, bias16, biasRow, biasB3 string // [1,2,64,64], [64,64], f16 [64,64], [3,1,1,64], [3,2,64,64]
	mask, mask3d, maskU8, maskBad         string // bool [64,64] blocks of 16, bool [1,64,64], uint8 [64,64], uint8 holding a 2
	blocks                                string // bool [256,256], blocks of 64
}

func newBiasFiles(t *testing.T) *biasFiles {
	t.Helper()
	d := t.TempDir()
	f := &biasFiles{dir: d}
	f.bias = writeTestNpy(t, d, "bias.npy", []int{1, 2, 64, 64}, randomBias(2*64*64, 1))
	f.bias2d = writeTestNpy(t, d, "bias2d.npy", []int{64, 64}, randomBias(64*64, 2))
	h := make([]float16.Float16, 64*64)
	for i, v := range randomBias(64*64, 3) {
		h[i] = float16.Fromfloat32(v)
	}
	f.bias16 = writeTestNpy(t, d, "bias16.npy", []int{64, 64}, h)
	f.biasRow = writeTestNpy(t, d, "row.npy", []int{3, 1, 1, 64}, randomBias(3*64, 4))
	f.biasB3 = writeTestNpy(t, d, "b3.npy", []int{3, 2, 64, 64}, randomBias(3*2*64*64, 5))
	f.mask = writeTestNpy(t, d, "mask.npy", []int{64, 64}, blockMask(64, 16))
	f.mask3d = writeTestNpy(t, d, "mask3d.npy", []int{1, 64, 64}, blockMask(64, 16))
	u := make([]uint8, 64*64)
	for i, k := range blockMask(64, 32) {
		if k {
			u[i] = 1
		}
	}
	f.maskU8 = writeTestNpy(t, d, "mask_u8.npy", []int{64, 64}, u)
	u = slices.Clone(u)
	u[5*64+9] = 2
	f.maskBad = writeTestNpy(t, d, "mask_bad.npy", []int{64, 64}, u)
	f.blocks = writeTestNpy(t, d, "blocks.npy", []int{256, 256}, blockMask(256, 64))
	return f
}

// run --check with a bias or a mask on the CPU backend, forward and
// backward with dBias: every output, dBias included, passes against the
// float64 reference (which applies the very bias the kernels get), in
// each dtype, broadcast, packed, and beside the other options.
func TestRunCheckBias(t *testing.T) {
	f := newBiasFiles(t)
	base := []string{"--backend", "cpu", "--heads", "2", "--dim", "16", "--iters", "0", "--check", "--backward", "--bias-grad"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"bias", []string{"--seq", "64", "--bias", f.bias}},
		{"bias 2-D", []string{"--seq", "64", "-b", "2", "--kv-heads", "1", "--bias", f.bias2d, "--causal"}},
		{"bias f16 file", []string{"--seq", "64", "--bias", f.bias16}},
		{"bias f16 file at f16", []string{"--seq", "64", "--bias", f.bias16, "--dtype", "f16"}},
		{"bias f16 file at bf16", []string{"--seq", "64", "--bias", f.bias16, "--dtype", "bf16", "--layout", "bhsd"}},
		{"bias f32 at f16", []string{"--seq", "64", "--bias", f.bias, "--dtype", "f16", "--causal"}},
		{"bias per sequence", []string{"--seq", "64", "-b", "3", "--bias", f.biasB3}},
		{"bias row per sequence", []string{"--seq", "64", "-b", "3", "--bias", f.biasRow, "--causal"}},
		{"bias with options", []string{"--seq", "64", "--bias", f.bias, "--causal", "--window", "20,0", "--alibi", "--softcap", "3",
			"--seqused-k", "40", "--dropout", "0.2"}},
		{"mask", []string{"--seq", "64", "--mask", f.mask}},
		{"mask 3-D causal", []string{"--seq", "64", "--mask", f.mask3d, "--causal"}},
		{"mask uint8 f16", []string{"--seq", "64", "--mask", f.maskU8, "--dtype", "f16"}},
		{"packed bias", []string{"--seqlens", "64,20,0,33", "--bias", f.bias, "--causal"}},
		{"packed per sequence", []string{"--seqlens", "64,20,33", "--bias", f.biasB3}},
		{"packed row", []string{"--seqlens", "64,20,33", "--bias", f.biasRow}},
		{"packed mask", []string{"--seqlens", "64,20,33", "--mask", f.mask, "--kv-heads", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := runJSON(t, slices.Concat(base, tc.args)...)
			checks := rep.Results[0].Check
			if !rep.Pass || len(checks) != 6 || checks[5].Output != "dbias" {
				t.Fatalf("run --check: pass %v: %+v", rep.Pass, checks)
			}
			if !rep.Problem.BiasGrad || !rep.Problem.biased() {
				t.Errorf("problem %+v", rep.Problem)
			}
		})
	}
	// With .npy inputs the files give the sizes the bias must fit.
	keep := make([]bool, 20*24)
	for i := range keep {
		keep[i] = i%24 <= i/24+4
	}
	m := writeTestNpy(t, f.dir, "m20x24.npy", []int{20, 24}, keep)
	files := []string{"--backend", "cpu", "--q", td("q.npy"), "--k", td("k.npy"), "--v", td("v.npy"), "--iters", "0", "--check", "--backward", "--bias-grad"}
	if rep := runJSON(t, slices.Concat(files, []string{"--mask", m, "--causal", "--align", "bottom-right"})...); !rep.Pass || len(rep.Results[0].Check) != 6 ||
		rep.Problem.Nq != 20 || rep.Problem.Nk != 24 {
		t.Errorf("run --q/--k/--v --mask: %+v", rep)
	}
	code, _, errs := flashvk(t, slices.Concat([]string{"run"}, files, []string{"--mask", f.mask})...)
	if code != 2 || !strings.Contains(errs, "does not fit the problem: want [2,4,20,24]") {
		t.Errorf("a mask that does not fit the input files: exit %d: %s", code, errs)
	}
	// The bias changes the outputs: the same run without it (and with
	// another bias) differs from the reference with it.
	out := t.TempDir()
	mustRun(t, slices.Concat([]string{"run"}, base, []string{"--seq", "64", "--bias", f.bias2d, "--out", filepath.Join(out, "a")})...)
	mustRun(t, "run", "--backend", "cpu", "--heads", "2", "--dim", "16", "--iters", "0", "--seq", "64", "--backward", "--out", filepath.Join(out, "b"))
	_, a := loadOut(t, filepath.Join(out, "a", "o.npy"))
	_, b := loadOut(t, filepath.Join(out, "b", "o.npy"))
	if slices.Equal(a, b) {
		t.Error("the bias changed nothing")
	}
	// The text says what the library gets.
	txt := mustRun(t, slices.Concat([]string{"run"}, base, []string{"--seq", "64", "--mask", f.mask, "--causal"})...)
	for _, want := range []string{
		"causal top-left mask=mask.npy [1,1,64,64] bool bias_grad scale=0.25",
		"bias     --mask " + f.mask + ": bool [64,64] as [1,1,64,64], 0 and −Inf in float32; dBias asked (--bias-grad)",
		"; mask=" + f.mask + "\n",
		"(visible (query, key) pairs counted exactly)",
		"\ndbias  ", "\nPASS\n",
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("run lacks %q:\n%s", want, txt)
		}
	}
	txt = mustRun(t, slices.Concat([]string{"run"}, base, []string{"--seq", "64", "--bias", f.bias16, "--dtype", "bf16"})...)
	if want := ": float16 [64,64] as [1,1,64,64], converted to bfloat16;"; !strings.Contains(txt, want) {
		t.Errorf("run lacks %q:\n%s", want, txt)
	}
}

// --out writes dbias.npy in the bias file's shape and the bias's dtype,
// equal (within the check's bound) to the reference's dBias.
func TestRunOutDBias(t *testing.T) {
	f := newBiasFiles(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		file  string
		dtype string
		shape []int
		descr string
	}{
		{f.bias2d, "f32", []int{64, 64}, "float32"},
		{f.bias16, "f16", []int{64, 64}, "float16"},
		{f.bias, "f16", []int{1, 2, 64, 64}, "float32"}, // a float32 bias stays float32
		{f.mask3d, "bf16", []int{1, 64, 64}, "float32"}, // bfloat16 written as float32
	} {
		out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(tc.file), ".npy")+"-"+tc.dtype)
		flag := "--bias"
		if strings.Contains(tc.file, "mask") {
			flag = "--mask"
		}
		mustRun(t, "run", "--backend", "cpu", "--seq", "64", "--heads", "2", "--dim", "16", "--iters", "0", "--dtype", tc.dtype,
			flag, tc.file, "--backward", "--bias-grad", "--out", out)
		if names := listDir(t, out); !slices.Equal(names, []string{"dbias.npy", "dk.npy", "dq.npy", "dv.npy", "lse.npy", "o.npy"}) {
			t.Errorf("%s: --out wrote %v", out, names)
		}
		h, err := statNpy(filepath.Join(out, "dbias.npy"))
		if err != nil || !slices.Equal(h.Shape, tc.shape) || h.DType.String() != tc.descr {
			t.Errorf("%s: dbias.npy %v %v (%v), want %v %s", out, h.Shape, h.DType, err, tc.shape, tc.descr)
		}
	}
	// Without --bias-grad there is no dbias.npy.
	out := filepath.Join(dir, "plain")
	mustRun(t, "run", "--backend", "cpu", "--seq", "64", "--heads", "2", "--dim", "16", "--iters", "0", "--bias", f.bias, "--backward", "--out", out)
	if slices.Contains(listDir(t, out), "dbias.npy") {
		t.Error("dbias.npy without --bias-grad")
	}
}

// The bias's flags and files are checked before any work, each refusal
// one line naming the flag (and the file, and for a shape the shape it
// wants).
func TestBiasRefused(t *testing.T) {
	f := newBiasFiles(t)
	garbage := filepath.Join(f.dir, "garbage.npy")
	os.WriteFile(garbage, []byte("not numpy"), 0o644)
	oneD := writeTestNpy(t, f.dir, "oned.npy", []int{64}, make([]float32, 64))
	fiveD := writeTestNpy(t, f.dir, "fived.npy", []int{1, 1, 1, 64, 64}, make([]float32, 64*64))
	empty := writeTestNpy(t, f.dir, "empty.npy", []int{0, 64}, []float32{})
	f64 := writeTestNpy(t, f.dir, "f64.npy", []int{64, 64}, make([]float64, 64*64))
	run := []string{"run", "--backend", "cpu", "--seq", "64", "--heads", "2", "--dim", "16", "--iters", "0"}
	bench := []string{"bench", "--backend", "cpu", "--dim", "16", "--heads", "2", "--batch", "1", "--iters", "1", "--progress", "none"}
	explain := []string{"explain", "--backend", "cpu", "--seq", "64", "--heads", "2", "--dim", "16"}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{slices.Concat(run, []string{"--bias", f.bias, "--mask", f.mask}), 2, "--bias and --mask go apart"},
		{slices.Concat(bench, []string{"--seq", "64", "--bias", f.bias, "--mask", f.mask}), 2, "--bias and --mask go apart"},
		{slices.Concat(explain, []string{"--bias", f.bias, "--mask", f.mask}), 2, "--bias and --mask go apart"},
		{slices.Concat(run, []string{"--bias-grad", "--backward"}), 2, "--bias-grad needs --bias or --mask"},
		{slices.Concat(explain, []string{"--bias-grad"}), 2, "--bias-grad needs --bias or --mask"},
		{slices.Concat(run, []string{"--bias", f.bias, "--bias-grad"}), 2, "--bias-grad has no effect without --backward"},
		{slices.Concat(bench, []string{"--seq", "64", "--mask", f.mask, "--bias-grad"}), 2, "--bias-grad has no effect without --backward"},
		{slices.Concat(run, []string{"--bias", f.mask}), 2, "--bias " + f.mask + ": a bool array: --bias takes an additive float bias (float32 or float16); give a boolean mask to --mask"},
		{slices.Concat(run, []string{"--mask", f.bias}), 2, "--mask " + f.bias + ": a float32 array: --mask takes a boolean mask (bool, or uint8 0 and 1"},
		{slices.Concat(run, []string{"--bias", f64}), 2, `dtype float64 ("<f8") is not supported: want float32 or float16 (convert with a.astype(np.float32)), or bool or uint8 (a mask)`},
		{slices.Concat(run, []string{"--mask", f64}), 2, `dtype float64 ("<f8") is not supported`},
		{slices.Concat(bench, []string{"--seq", "64", "--bias", f64}), 2, `dtype float64 ("<f8") is not supported`},
		{slices.Concat(run, []string{"--bias", filepath.Join(f.dir, "none.npy")}), 1, "--bias " + filepath.Join(f.dir, "none.npy") + ": no such file"},
		{slices.Concat(run, []string{"--mask", garbage}), 1, "--mask " + garbage + ": not a valid .npy file"},
		{slices.Concat(run, []string{"--bias", oneD}), 2, "shape [64]: want 4 dimensions [B|1, H|1, Nq|1, Nk] (or 3, [H|1, Nq|1, Nk], or 2, [Nq|1, Nk])"},
		{slices.Concat(run, []string{"--bias", fiveD}), 2, "shape [1,1,1,64,64]: want 4 dimensions"},
		{slices.Concat(run, []string{"--bias", empty}), 2, "shape [0,64]: every dimension must be positive"},
		{slices.Concat(run, []string{"--bias", f.bias, "--heads", "4"}), 2,
			"--bias " + f.bias + ": shape [1,2,64,64] does not fit the problem: want [1,4,64,64] (B, Hq, Nq, Nk), each of the first three 1 to broadcast"},
		{slices.Concat(run, []string{"--bias", f.biasB3, "-b", "2"}), 2, "want [2,2,64,64] (B, Hq, Nq, Nk)"},
		{slices.Concat(run, []string{"--mask", f.mask, "--nk", "32"}), 2, "shape [64,64] (as [B, H, Nq, Nk]: [1,1,64,64]) does not fit the problem: want [1,2,64,32]"},
		{slices.Concat([]string{"run", "--backend", "cpu", "--heads", "2", "--dim", "16", "--seqlens", "64,70"}, []string{"--bias", f.bias}), 2,
			"want [2,2,70,70] (B sequences, Hq, the longest Nq, the longest Nk (--seqlens))"},
		{slices.Concat(explain, []string{"--mask", f.mask, "--heads", "2", "--seq", "32"}), 2, "does not fit the problem: want [1,2,32,32]"},
		{slices.Concat(bench, []string{"--bias", f.bias, "--seq", "64,128"}), 2,
			"--bias " + f.bias + ": shape [1,2,64,64] does not fit the problem: want [1,2,128,128] (B, Hq, Nq, Nk) at the point d=16 B=1 H=2 N=128: bench applies the bias to every point"},
		{slices.Concat(bench, []string{"--mask", f.mask, "--nq", "64", "--nk", "64,32"}), 2, "at the point d=16 B=1 H=2 Nq=64 Nk=32"},
		// Decode mode refuses them.
		{[]string{"run", "--backend", "cpu", "--cache-seqlens", "8", "--bias", f.bias}, 2,
			"--bias does not apply in decode mode (--cache-seqlens): a KV-cache call takes no bias or mask"},
		{[]string{"run", "--backend", "cpu", "--decode", "--nk", "64", "--mask", f.mask}, 2, "--mask does not apply in decode mode (--decode)"},
		{[]string{"run", "--backend", "cpu", "--append", "1", "--nk", "8", "--bias-grad"}, 2, "--bias-grad does not apply in decode mode (--append)"},
		{[]string{"bench", "--backend", "cpu", "--decode", "--nk", "64", "--mask", f.mask}, 2, "--mask does not apply in decode mode (--decode)"},
		{[]string{"explain", "--backend", "cpu", "--cache-seqlens", "64", "--bias", f.bias}, 2, "--bias does not apply in decode mode (--cache-seqlens)"},
	} {
		code, out, errs := appRun(t, func(a *app) { a.beforeInputs = func() { t.Error("the command started its work") } }, tc.args...)
		if code != tc.code || !strings.HasPrefix(errs, "flashvk: ") || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.msg) {
			t.Errorf("flashvk %s: exit %d: %q%s, want exit %d and one line with %q", strings.Join(tc.args, " "), code, errs, out, tc.code, tc.msg)
		}
	}
	// What the values hold is known only once they are read, after the
	// plans: a uint8 mask of another value than 0 and 1, and for --check
	// a bias holding NaN or +Inf.
	nan := randomBias(64*64, 6)
	nan[64+3] = float32(math.NaN())
	nanFile := writeTestNpy(t, f.dir, "nan.npy", []int{64, 64}, nan)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{slices.Concat(run, []string{"--mask", f.maskBad}), 1, "--mask " + f.maskBad + ": element [5,9] is 2: a uint8 mask holds 0 (hide the key) and 1 (attend) only"},
		{slices.Concat(run, []string{"--bias", nanFile, "--check"}), 2,
			"--check: --bias " + nanFile + " holds NaN (element [1,3]): the float64 reference takes finite values and −Inf only (omit --check to run it)"},
	} {
		code, out, errs := flashvk(t, tc.args...)
		if code != tc.code || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.msg) {
			t.Errorf("flashvk %s: exit %d: %q%s, want exit %d and one line with %q", strings.Join(tc.args, " "), code, errs, out, tc.code, tc.msg)
		}
	}
	// Without --check the library takes a NaN: the run completes.
	mustRun(t, slices.Concat(run, []string{"--bias", nanFile})...)
	for _, cmd := range []string{"run", "explain", "bench"} {
		help := mustRun(t, cmd, "--help")
		for _, flag := range []string{"--bias string", "--mask string", "--bias-grad "} {
			if !strings.Contains(help, flag) {
				t.Errorf("%s --help lacks %q", cmd, flag)
			}
		}
	}
}

// openBias reads the file's header: a 2-D or 3-D file is the bias with
// leading 1s, and the problem takes it where each dimension is 1 or its
// size.
func TestBiasShapes(t *testing.T) {
	f := newBiasFiles(t)
	ctx := context.Background()
	for _, tc := range []struct {
		flag, path string
		shape      [4]int
		desc       string
	}{
		{"--bias", f.bias, [4]int{1, 2, 64, 64}, "bias.npy [1,2,64,64] float32"},
		{"--bias", f.bias16, [4]int{1, 1, 64, 64}, "bias16.npy [1,1,64,64] float16"},
		{"--bias", f.biasRow, [4]int{3, 1, 1, 64}, "row.npy [3,1,1,64] float32"},
		{"--mask", f.mask3d, [4]int{1, 1, 64, 64}, "mask3d.npy [1,1,64,64] bool"},
		{"--mask", f.maskU8, [4]int{1, 1, 64, 64}, "mask_u8.npy [1,1,64,64] uint8"},
	} {
		x, err := openBias(ctx, tc.flag, tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if x.shape != tc.shape || x.descriptor() != tc.desc {
			t.Errorf("%s: shape %v, descriptor %q; want %v, %q", tc.path, x.shape, x.descriptor(), tc.shape, tc.desc)
		}
		if err := x.check(tc.shape[0], tc.shape[1], tc.shape[2], tc.shape[3], false); err != nil {
			t.Errorf("%s: %v", tc.path, err)
		}
		if err := x.check(3, 2, 64, 64, false); err != nil {
			t.Errorf("%s on B=3 H=2 N=64: %v", tc.path, err)
		}
		if x.check(3, 2, 64, 65, false) == nil {
			t.Errorf("%s takes Nk = 65", tc.path)
		}
		// Before its values are read, the library gets its shape and
		// dtype (for the plans); after, the values in [B, H, Nq, Nk].
		for _, dt := range []attention.DType{attention.Float32, attention.Float16, attention.BFloat16} {
			want := dt
			if tc.flag == "--bias" && x.head.DType == attention.Float32 {
				want = attention.Float32
			}
			if pt := x.tensor(dt); pt.DType() != want || pt.Shape != x.libShape() {
				t.Errorf("%s at %s: placeholder %v %v", tc.path, dt, pt.DType(), pt.Shape)
			}
		}
		if err := x.load(ctx); err != nil {
			t.Fatal(err)
		}
		a, err := readNpyAny(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		got := x.values(attention.Float32)
		for i, v := range got {
			var want float64
			switch d := a.Data.(type) {
			case []float32:
				want = float64(d[i])
			case []float16.Float16:
				want = float64(d[i].Float32())
			case []uint8:
				if d[i] == 0 {
					want = math.Inf(-1)
				}
			}
			if v != want {
				t.Fatalf("%s: value %d is %v, want %v", tc.path, i, v, want)
			}
		}
	}
	// The [B, H, S, D] order of a tensor, whatever its layout.
	s := attention.Shape{B: 2, H: 3, S: 4, D: 5}
	x := make([]float32, s.Len())
	for i := range x {
		x[i] = float32(i)
	}
	bhsd := attention.FromFloat32(x, s, attention.BHSD)
	if got := bhsdFloat32s(bhsd); !slices.Equal(got, x) {
		t.Errorf("bhsdFloat32s of a BHSD tensor: %v", got[:8])
	}
	bshd := attention.FromFloat32(bhsd.Float32s(), s, attention.BSHD)
	if got := bhsdFloat32s(bshd); !slices.Equal(got, x) {
		t.Errorf("bhsdFloat32s of a BSHD tensor: %v", got[:8])
	}
}

// readNpyAny reads a .npy file of any element type flashvk takes.
func readNpyAny(path string) (*npyArray, error) {
	h, err := statNpyAny(path)
	if err != nil {
		return nil, err
	}
	return h.read()
}

// The packed reference slices the padded grid's bias per sequence and
// adds each sequence's dBias back: a packed batch of sequences of equal
// lengths is the padded batch.
func TestPackedBiasReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const b, h, n = 3, 2, 5
	vals := make([]float64, b*h*n*n)
	for i := range vals {
		vals[i] = rng.NormFloat64()
	}
	full := &reference.Bias{B: b, H: h, S: n, Values: vals}
	db := make([]float64, len(vals))
	for s := range b {
		seq := sequenceBias(full, s, n, n)
		if want := vals[s*h*n*n : (s+1)*h*n*n]; !slices.Equal(seq.Values, want) || seq.B != 1 || seq.S != n {
			t.Fatalf("sequence %d: %+v", s, seq)
		}
		addSequenceGrad(db, full, s, n, n, seq.Values)
	}
	if !slices.Equal(db, vals) {
		t.Error("addSequenceGrad does not invert sequenceBias")
	}
	// A shorter sequence takes its own rows and keys of the grid.
	seq := sequenceBias(full, 1, 2, n)
	if want := []float64{vals[50], vals[51], vals[55], vals[56], vals[75], vals[76], vals[80], vals[81]}; !slices.Equal(seq.Values, want) {
		t.Errorf("sequence 1 of 2 rows: %v, want %v", seq.Values, want)
	}
	// A bias broadcast over the batch and the rows serves every
	// sequence, and sums their gradients.
	row := &reference.Bias{B: 1, H: 1, S: 1, Values: []float64{1, 2, 3, 4, 5}}
	db = make([]float64, 5)
	for s, m := range []int{5, 2, 0} {
		seq := sequenceBias(row, s, m, n)
		if !slices.Equal(seq.Values, row.Values[:m]) {
			t.Errorf("sequence %d of %d: %v", s, m, seq.Values)
		}
		addSequenceGrad(db, row, s, m, n, seq.Values)
	}
	if want := []float64{2, 4, 3, 4, 5}; !slices.Equal(db, want) {
		t.Errorf("summed dBias %v, want %v", db, want)
	}
}

// run, bench and explain record the bias in their JSON ("bias" or "mask",
// "bias_grad"), compare and report keep such results apart and label
// them, and results with inconsistent bias fields are refused.
func TestBiasJSON(t *testing.T) {
	f := newBiasFiles(t)
	raw := mustRun(t, "run", "--backend", "cpu", "--seq", "64", "--heads", "2", "--dim", "16", "--iters", "0", "--json",
		"--mask", f.mask, "--backward", "--bias-grad")
	for _, want := range []string{`"mask": "mask.npy [1,1,64,64] bool",`, `"bias_grad": true`, `"inputs": "random N(0,1), seed 1; mask=` + f.mask + `"`} {
		if !strings.Contains(raw, want) {
			t.Errorf("run --json lacks %q:\n%s", want, raw)
		}
	}
	var rep runReport
	if err := json.Unmarshal([]byte(raw), &rep); err != nil {
		t.Fatal(err)
	}
	p, err := readProblemJSON(rep.Problem)
	if err != nil {
		t.Fatal(err)
	}
	// A problem read back without its file counts FLOPs as the run did
	// (the bias makes attention.Flops count the visible pairs).
	if got := p.flops(false); got != 4*2*16*64*64 || rep.Results[0].Passes[0].FirstCallTFLOPS <= 0 {
		t.Errorf("flops %v", got)
	}
	if plain := mustRun(t, "run", "--backend", "cpu", "--seq", "64", "--heads", "2", "--dim", "16", "--iters", "0", "--json"); strings.Contains(plain, `"bias`) ||
		strings.Contains(plain, `"mask"`) {
		t.Errorf("run --json without a bias:\n%s", plain)
	}

	var an analysis
	if err := json.Unmarshal([]byte(mustRun(t, "explain", "--backend", "cpu", "--seq", "64", "--heads", "2", "--dim", "16", "--bias", f.bias, "--json")), &an); err != nil {
		t.Fatal(err)
	}
	if an.Problem.Bias != "bias.npy [1,2,64,64] float32" || an.Problem.BiasGrad {
		t.Errorf("explain --json problem: %+v", an.Problem)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "b.json")
	bench := []string{"bench", "--backend", "cpu", "--seq", "64", "--dim", "16", "--heads", "2", "--batch", "1", "--warmup", "0", "--iters", "2",
		"--progress", "none", "--backward"}
	mustRun(t, slices.Concat(bench, []string{"--bias", f.bias, "--bias-grad", "--check", "--json", path})...)
	bf, err := readResults(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(bf.Results) != 2*2 {
		t.Fatalf("%d results, want 4", len(bf.Results))
	}
	for _, r := range bf.Results {
		if r.Bias != "bias.npy [1,2,64,64] float32" || r.Mask != "" || r.BiasGrad != (r.Direction == "bwd") {
			t.Errorf("bench result %s causal %v: %+v", r.Direction, r.Causal, r.features)
		}
		if r.RelL2 == nil || float64(*r.RelL2) > 2e-3 {
			t.Errorf("%s causal %v: rel_l2 %v", r.Direction, r.Causal, r.RelL2)
		}
		suffix := "/bias_bias.npy_1x2x64x64_float32"
		if r.Direction == "bwd" {
			suffix += "/dbias"
		}
		if !strings.HasSuffix(benchName(r), suffix) {
			t.Errorf("benchmark name %q, want the suffix %q", benchName(r), suffix)
		}
		p := r.problem()
		p.bias = nil
		o := p.options()
		o.Bias = &attention.Bias{}
		want, err := attention.Flops(p.qShape(), p.kShape(), p.vShape(), o)
		if r.Direction == "bwd" {
			want *= 2.5
		}
		if err != nil || r.flops() != want {
			t.Errorf("%s: flops %v, want %v (%v)", r.Direction, r.flops(), want, err)
		}
	}
	// compare keeps biased results apart from plain ones and from other
	// masks, and labels them.
	plain := filepath.Join(dir, "plain.json")
	mustRun(t, slices.Concat(bench, []string{"--json", plain})...)
	code, out, errs := flashvk(t, "compare", plain, path)
	if code != 0 || !strings.Contains(errs, "share no problem") {
		t.Errorf("compare of plain and biased results: exit %d\n%s\n%s", code, out, errs)
	}
	out = mustRun(t, "compare", path, path, "--format", "json")
	for _, want := range []string{`"options": "bias=bias.npy [1,2,64,64] float32"`, `"options": "bias=bias.npy [1,2,64,64] float32 bias_grad"`} {
		if !strings.Contains(out, want) {
			t.Errorf("compare --format json lacks %q:\n%s", want, out)
		}
	}
	r := bf.Results[0]
	m := r
	m.Bias, m.Mask = "", "mask.npy [1,1,64,64] bool"
	m2 := m
	m2.Mask = "other.npy [1,1,64,64] bool"
	keys := map[rowKey]bool{}
	for _, x := range []Result{r, m, m2} {
		keys[keyOf(&x)] = true
	}
	if len(keys) != 3 {
		t.Errorf("bias, mask and another mask share keys: %v", keys)
	}
	md := filepath.Join(dir, "r.md")
	mustRun(t, "report", path, "--markdown", md)
	if b, err := os.ReadFile(md); err != nil || !strings.Contains(string(b), "backward, d = 16, causal, bias=bias.npy [1,2,64,64] float32 bias_grad") {
		t.Errorf("report.md (%v):\n%s", err, b)
	}
	// Inconsistent bias fields are refused on reading.
	checkRefusedResults(t, dir, bf, []refusedResult{
		{func(r *Result) { r.Mask = "m.npy [1,1,64,64] bool" }, "both a bias and a mask"},
		{func(r *Result) { r.Bias, r.BiasGrad = "", true; r.Direction = "bwd" }, "bias_grad without a bias or mask"},
		{func(r *Result) { r.Direction, r.BiasGrad = "fwd", true }, "bias_grad on a fwd result (only the backward computes dBias)"},
		{func(r *Result) { r.Direction, r.CacheSeqLens = "kv", slices.Repeat([]int{1}, r.B) }, "a kv result has no bias or mask"},
	})
}

// explain counts the tiles a mask leaves nothing to compute in: a
// block-diagonal mask of 64-key blocks on the CPU backend's 64×64 tiles
// hides every tile off the diagonal.
func TestExplainBiasTiles(t *testing.T) {
	f := newBiasFiles(t)
	args := []string{"explain", "--backend", "cpu", "--seq", "256", "--dim", "16", "--heads", "2", "--mask", f.blocks}
	for _, tc := range []struct {
		extra []string
		plan  string
		tiles biasTiles
	}{
		// 16 tiles per head, 12 off the diagonal; × 2 heads.
		{nil, "runs cpu, 16 of 16 query×key tiles computed (100.0%), tiles skipped by the bias: 24 of 32", biasTiles{24, 32, 64, 64}},
		// Causal: 10 tiles per head, 6 below the diagonal.
		{[]string{"--causal"}, "runs cpu, 10 of 16 query×key tiles computed (62.5%), tiles skipped by the bias: 12 of 20", biasTiles{12, 20, 64, 64}},
		// A window of 64 keys: the diagonal tiles and those left of them
		// (7 per head), of which the 3 left ones are hidden.
		{[]string{"--causal", "--window", "64,0"}, "tiles skipped by the bias: 6 of 14", biasTiles{6, 14, 64, 64}},
		// Key counts: sequence 0 sees 64 keys (its 4 first-column tiles,
		// 3 hidden), sequence 1 all 256 (16 tiles, 12 hidden).
		{[]string{"--seqused-k", "64,256"}, "20 of 32 query×key tiles computed (62.5%), tiles skipped by the bias: 30 of 40", biasTiles{30, 40, 64, 64}},
	} {
		a := slices.Concat(args, tc.extra)
		out := mustRun(t, a...)
		for _, dir := range []string{"fwd", "bwd"} {
			i := strings.Index(out, "\n"+dir+"  runs cpu, ")
			if line, _, _ := strings.Cut(out[i+1:], "\n"); i < 0 || !strings.Contains(line, tc.plan) {
				t.Errorf("explain %v: the %s plan lacks %q:\n%s", tc.extra, dir, tc.plan, out)
			}
		}
		var an analysis
		if err := json.Unmarshal([]byte(mustRun(t, append(a, "--json")...)), &an); err != nil {
			t.Fatal(err)
		}
		if len(an.Plans) != 2 {
			t.Fatalf("plans %+v", an.Plans)
		}
		for _, pl := range an.Plans {
			if pl.BiasTiles == nil || *pl.BiasTiles != tc.tiles {
				t.Errorf("explain %v: %s: bias_tiles %+v, want %+v", tc.extra, pl.Direction, pl.BiasTiles, tc.tiles)
			}
		}
	}
	// A packed batch counts each sequence's own tiles: sequence 0 (256
	// rows) as above, sequence 1 (100 rows: 2×2 tiles, the mask's
	// 64-blocks hiding the 2 off the diagonal).
	out := mustRun(t, "explain", "--backend", "cpu", "--seqlens", "256,100", "--dim", "16", "--heads", "1", "--mask", f.blocks)
	if want := "tiles skipped by the bias: 14 of 20"; !strings.Contains(out, want) {
		t.Errorf("explain --seqlens lacks %q:\n%s", want, out)
	}
	// Without a bias, nothing about it.
	if out := mustRun(t, "explain", "--backend", "cpu", "--seq", "256", "--dim", "16"); strings.Contains(out, "by the bias") {
		t.Errorf("explain without a bias mentions one:\n%s", out)
	}
	// A bias that hides nothing whole skips no tile.
	if out := mustRun(t, "explain", "--backend", "cpu", "--seq", "64", "--dim", "16", "--heads", "2", "--bias", f.bias); !strings.Contains(out, "tiles skipped by the bias: 0 of 2") {
		t.Errorf("explain with a finite bias:\n%s", out)
	}
}

// The features' label and benchmark name carry the bias.
func TestBiasLabels(t *testing.T) {
	f := features{Window: &[2]int{8, 0}, Mask: "m.npy [1,1,64,64] bool", BiasGrad: true}
	if got, want := f.String(), "window=8,0 mask=m.npy [1,1,64,64] bool bias_grad"; got != want {
		t.Errorf("String %q, want %q", got, want)
	}
	if got, want := f.nameSuffix(), "/window8_0/mask_m.npy_1x1x64x64_bool/dbias"; got != want {
		t.Errorf("nameSuffix %q, want %q", got, want)
	}
	if !(features{Bias: "b.npy [1,1,1,8] float16"}).set() || (features{}).biased() {
		t.Error("set/biased")
	}
}

// The .npy reader takes bool and uint8 arrays where asked (--mask), and
// only there: the operands stay float32 or float16.
func TestNpyBoolArrays(t *testing.T) {
	for _, tc := range []struct {
		data any
		elem string
	}{
		{[]bool{true, false, true, true, false, false}, "bool"},
		{[]uint8{1, 0, 1, 1, 0, 0}, "uint8"},
	} {
		var b bytes.Buffer
		if err := encodeNpy(&b, []int{2, 3}, tc.data); err != nil {
			t.Fatal(err)
		}
		if _, err := parseNpy("m.npy", bytes.NewReader(b.Bytes()), int64(b.Len())); err == nil || !strings.Contains(err.Error(), "m.npy: dtype "+tc.elem) {
			t.Errorf("%s: the float reader: %v", tc.elem, err)
		}
		h, err := parseNpyOf("m.npy", bytes.NewReader(b.Bytes()), int64(b.Len()), anyNpy)
		if err != nil || h.elem != tc.elem || h.typeName() != tc.elem || !slices.Equal(h.Shape, []int{2, 3}) {
			t.Fatalf("%s: %+v, %v", tc.elem, h, err)
		}
		a, err := h.readFrom(bytes.NewReader(b.Bytes()), int64(b.Len()))
		if err != nil || !slices.Equal(a.Data.([]uint8), []uint8{1, 0, 1, 1, 0, 0}) || a.Elem != tc.elem {
			t.Errorf("%s: read %+v, %v", tc.elem, a, err)
		}
		// A truncated file says so with the element type.
		short := b.Bytes()[:b.Len()-1]
		if _, err := parseNpyOf("m.npy", bytes.NewReader(short), int64(len(short)), anyNpy); err == nil ||
			!strings.Contains(err.Error(), "m.npy: truncated: shape [2 3] "+tc.elem+" needs 6 data bytes, file has 5") {
			t.Errorf("%s truncated: %v", tc.elem, err)
		}
	}
}
