package main

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/bfloat16"
)

func TestRunCheckBF16(t *testing.T) {
	for _, args := range [][]string{
		{"-b", "2", "--heads", "4", "--kv-heads", "2", "--seq", "40", "--dim", "32", "--dtype", "bf16", "--causal", "--backward"},
		{"--heads", "2", "--nq", "33", "--nk", "20", "--dim", "16", "--dtype", "bfloat16", "--causal", "--align", "bottom-right",
			"--layout", "bhsd", "--backward"},
	} {
		out := mustRun(t, append([]string{"run", "--backend", "cpu", "--check"}, args...)...)
		if !strings.Contains(out, "\nPASS\n") || strings.Contains(out, "FAIL") || !strings.Contains(out, "bfloat16: rel_l2 ≤ 1.6e-2") {
			t.Errorf("run %v:\n%s", args, out)
		}
	}
}

// run --dtype bf16 on float32 .npy files rounds the inputs to bfloat16
// and writes float32 outputs holding exactly the bfloat16 results.
func TestRunNpyBF16(t *testing.T) {
	dir := t.TempDir()
	out := mustRun(t, "run", "--backend", "cpu", "--check", "--backward", "--dtype", "bf16", "--out", dir,
		"--q", td("q.npy"), "--k", td("k.npy"), "--v", td("v.npy"), "--do", td("do.npy"))
	if !strings.Contains(out, "PASS") || !strings.Contains(out, "bfloat16") {
		t.Errorf("no PASS:\n%s", out)
	}
	// The library on the same rounded inputs gives the same bits.
	load := func(name string) attention.Tensor {
		a, err := readNpy(td(name))
		if err != nil {
			t.Fatal(err)
		}
		s := shapeOf(a.Shape, attention.BSHD)
		return attention.FromBFloat16(bfloat16.Slice(a.Data.([]float32)), s, attention.BSHD)
	}
	q, k, v, do := load("q.npy"), load("k.npy"), load("v.npy"), load("do.npy")
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	fw, err := e.Forward(ctx, q, k, v, attention.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Backward(ctx, q, k, v, fw.O, fw.LSE, do, attention.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file string
		want attention.Tensor
	}{{"o.npy", fw.O}, {"dq.npy", g.DQ}, {"dk.npy", g.DK}, {"dv.npy", g.DV}} {
		a, err := readNpy(filepath.Join(dir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		if a.DType != attention.Float32 {
			t.Errorf("%s: dtype %s, want float32", c.file, a.DType)
			continue
		}
		got := a.Data.([]float32)
		want := c.want.Data.([]bfloat16.BFloat16)
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", c.file, len(got), len(want))
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i].Float32()) {
				t.Fatalf("%s[%d] = %v, want the bfloat16 %v exactly", c.file, i, got[i], want[i])
			}
		}
	}
	// Close to numpy's float64 attention on the unrounded inputs.
	_, o := loadOut(t, filepath.Join(dir, "o.npy"))
	compareClose(t, o, loadF64(t, td("o_expected.npy")), 5e-2, 1.6e-2)

	// float16 files do not turn into bfloat16.
	code, _, errs := flashvk(t, "run", "--backend", "cpu", "--dtype", "bf16", "--q", td("q16.npy"), "--k", td("k16.npy"), "--v", td("v16.npy"))
	if code == 0 || !strings.Contains(errs, "disagrees") {
		t.Errorf("bf16 on float16 files: exit %d, %s", code, errs)
	}
}

func TestNpyBF16(t *testing.T) {
	p := filepath.Join(t.TempDir(), "b.npy")
	x := []bfloat16.BFloat16{bfloat16.FromFloat32(1.5), bfloat16.FromFloat32(-3e38), bfloat16.SmallestNonzero, bfloat16.NaN}
	if err := writeNpy(p, []int{2, 2}, x); err != nil {
		t.Fatal(err)
	}
	a, err := readNpy(p)
	if err != nil {
		t.Fatal(err)
	}
	f := a.Data.([]float32)
	for i := range x {
		if math.Float32bits(f[i]) != math.Float32bits(x[i].Float32()) {
			t.Errorf("[%d] = %v, want %v", i, f[i], x[i])
		}
	}
	// saveTensor of a bfloat16 view (not dense in the layout) writes float32 too.
	s := attention.Shape{B: 1, S: 2, H: 1, D: 2}
	tt := attention.Tensor{Shape: s, Strides: attention.Strides{Batch: 6, Seq: 3, Head: 3}}
	tt.Data = []bfloat16.BFloat16{bfloat16.FromFloat32(1), bfloat16.FromFloat32(2), 0, bfloat16.FromFloat32(3), bfloat16.FromFloat32(4), 0}
	dir := t.TempDir()
	if err := saveTensor(dir, "v.npy", tt, attention.BHSD); err != nil {
		t.Fatal(err)
	}
	a, err = readNpy(filepath.Join(dir, "v.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if g := a.Data.([]float32); a.DType != attention.Float32 || len(g) != 4 || g[0] != 1 || g[1] != 2 || g[2] != 3 || g[3] != 4 {
		t.Errorf("saveTensor bf16 view: %+v", a)
	}
}

func TestBF16Commands(t *testing.T) {
	out := mustRun(t, "bench", "--backend", "cpu", "--seq", "32", "--dim", "16", "--tokens", "32", "--hidden", "16", "--causal",
		"--dtype", "bf16", "--warmup", "0", "--iters", "2", "--progress", "none", "--backward", "--check")
	if !strings.Contains(out, "bf16") {
		t.Errorf("bench --dtype bf16:\n%s", out)
	}
	dir := t.TempDir()
	a := filepath.Join(dir, "a.json")
	mustRun(t, "bench", "--backend", "cpu", "--seq", "32", "--dim", "16", "--tokens", "32", "--hidden", "16", "--causal=true",
		"--dtype", "bfloat16", "--warmup", "0", "--iters", "2", "--progress", "none", "--json", a)
	out = mustRun(t, "compare", a, a, "--format", "plain")
	if !strings.Contains(out, "bf16") {
		t.Errorf("compare bf16:\n%s", out)
	}
	out = mustRun(t, "explain", "--seq", "256", "--dim", "64", "--heads", "2", "--dtype", "bf16", "--device-preset", "h200")
	if !strings.Contains(out, "bfloat16") || !strings.Contains(out, "BF16 matrix peak") {
		t.Errorf("explain --dtype bf16:\n%s", out)
	}
	var rep devicesReport
	if err := json.Unmarshal([]byte(mustRun(t, "devices", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	for _, d := range rep.Devices {
		if d.Runnable && !strings.Contains(strings.Join(d.DTypes, ","), "bfloat16") {
			t.Errorf("devices: %s runs but lists dtypes %v", d.Name, d.DTypes)
		}
	}
	out = mustRun(t, "devices")
	if !strings.Contains(out, "DTYPES") || !strings.Contains(out, "fp32,fp16,bf16") {
		t.Errorf("devices:\n%s", out)
	}
}
