package attention_test

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
)

// tuneRef is the tuner's float64 verifier: package reference.
func tuneRef(p attention.ReferenceProblem, q, k, v, do []float64, backward bool) ([][]float64, error) {
	return reference.Outputs(reference.Params{B: p.B, Hq: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk, D: p.D, Dv: p.Dv,
		Scale: p.Scale, Causal: p.Causal, BottomRight: p.BottomRight}, q, k, v, do, backward)
}

// TestTuneCacheEngine: Engine.Tune searches a tiny problem; an engine
// opened on a cache naming non-default candidates plans them ("tuned"),
// still computes correct results, and ignores an entry that is invalid on
// the device (with a warning); Config.TuneCache "off" ignores the cache.
func TestTuneCacheEngine(t *testing.T) {
	plain := openVulkan(t, "flash")
	ctx := context.Background()
	const d = 16
	cpuE, _ := attention.Open(attention.Config{Backend: attention.CPU})
	defer cpuE.Close()
	if _, err := cpuE.Tune(ctx, attention.TuneOptions{Reference: tuneRef}); err == nil {
		t.Error("Tune on the CPU backend: no error")
	}
	if _, err := plain.Tune(ctx, attention.TuneOptions{}); err == nil {
		t.Error("Tune without a Reference: no error")
	}
	rs, err := plain.Tune(ctx, attention.TuneOptions{DTypes: []attention.DType{attention.Float32}, Dims: []int{d}, Causal: []bool{true},
		N: 64, Tokens: 64, Hidden: 2 * d, Warmup: 1, Iters: 2, MaxCandidates: 2, Reference: tuneRef})
	if err != nil {
		t.Fatal(err)
	}
	c := &attention.TuneCache{}
	pick := map[string]string{}
	for _, r := range rs {
		if r.Err != nil || r.Winner == "" || len(r.Events) < 2 || r.Device.Name == "" {
			t.Fatalf("%s: %+v", r.Key, r)
		}
		en := r.Entry()
		en.Candidate = r.Events[1].Candidate // a verified non-default candidate
		pick[r.Key.Family] = en.Candidate
		c.Put(en)
	}
	if len(pick) != 3 {
		t.Fatalf("tuned %v, want flash, bwd_dkdv and bwd_dq", pick)
	}
	// An entry for a key of this device that no device can run.
	bad := rs[0].Entry()
	bad.Key.D, bad.Key.DV, bad.Candidate = 32, 32, "wg8192-br128-bc64"
	c.Put(bad)
	path := filepath.Join(t.TempDir(), "tune.json")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	e, err := attention.Open(attention.Config{Backend: attention.Vulkan, Kernel: "flash", TuneCache: path})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if ti := e.TuneInfo(); ti.File != path || len(ti.Entries) != 4 || ti.Off {
		t.Errorf("TuneInfo %+v", ti)
	}
	q := attention.Shape{B: 1, S: 50, H: 2, D: d}
	k := attention.Shape{B: 1, S: 70, H: 1, D: d}
	opt := attention.Options{Causal: true, Align: attention.BottomRight}
	for _, bwd := range []bool{false, true} {
		pl, err := e.Plan(ctx, q, k, k, attention.BSHD, attention.Float32, opt, bwd)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range pl.Launches {
			want, ok := pick[l.Kernel]
			switch {
			case ok && (l.Source != attention.SourceTuned || l.Config != want):
				t.Errorf("%s: %s (%s), want the tuned %s", l.Kernel, l.Config, l.Source, want)
			case !ok && l.Source != attention.SourceDefault:
				t.Errorf("%s: source %q", l.Kernel, l.Source)
			}
		}
	}
	// Results with the tuned tiles.
	rng := rand.New(rand.NewPCG(11, 12))
	rnd := func(s attention.Shape) ([]float32, []float64) {
		x := make([]float32, s.Len())
		x64 := make([]float64, len(x))
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			x64[i] = float64(x[i])
		}
		return x, x64
	}
	qd, q64 := rnd(q)
	kd, k64 := rnd(k)
	vd, v64 := rnd(k)
	dod, do64 := rnd(q)
	Q := attention.FromFloat32(qd, q, attention.BSHD)
	K := attention.FromFloat32(kd, k, attention.BSHD)
	V := attention.FromFloat32(vd, k, attention.BSHD)
	out, err := e.Forward(ctx, Q, K, V, opt)
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.Backward(ctx, Q, K, V, out.O, out.LSE, attention.FromFloat32(dod, q, attention.BSHD), opt)
	if err != nil {
		t.Fatal(err)
	}
	rp := reference.Params{B: 1, Hq: 2, Hkv: 1, Nq: 50, Nk: 70, D: d, Dv: d, Scale: 1 / math.Sqrt(d), Causal: true, BottomRight: true}
	o, _, _ := reference.Forward(rp, q64, k64, v64)
	dq, dk, dv, _ := reference.Backward(rp, q64, k64, v64, do64)
	for name, pair := range map[string]struct {
		got  []float32
		want []float64
	}{"o": {out.O.Float32s(), o}, "dq": {g.DQ.Float32s(), dq}, "dk": {g.DK.Float32s(), dk}, "dv": {g.DV.Float32s(), dv}} {
		if e := reference.RelL2(pair.got, pair.want); !(e <= 1e-5) {
			t.Errorf("%s: rel_l2 %.3g with tuned tiles", name, e)
		}
	}
	// The invalid entry (d = 32): default tile, a warning.
	q32 := attention.Shape{B: 1, S: 20, H: 1, D: 32}
	pl, err := e.Plan(ctx, q32, q32, q32, attention.BSHD, attention.Float32, opt, false)
	if err != nil || pl.Launches[0].Source != attention.SourceDefault {
		t.Errorf("invalid entry: %+v, %v", pl, err)
	}
	if w := e.TuneInfo().Warnings; len(w) != 1 || !strings.Contains(w[0], "wg8192-br128-bc64") {
		t.Errorf("warnings %q", w)
	}
	// Off.
	off, err := attention.Open(attention.Config{Backend: attention.Vulkan, Kernel: "flash", TuneCache: attention.TuneOff})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	pl, _ = off.Plan(ctx, q, k, k, attention.BSHD, attention.Float32, opt, false)
	if pl.Launches[0].Source != attention.SourceDefault || !off.TuneInfo().Off {
		t.Errorf("TuneCache off: %+v %+v", pl.Launches[0], off.TuneInfo())
	}
	// FLASHVK_TUNE=off in the environment, and a corrupt file: a warning.
	t.Setenv("FLASHVK_TUNE", "off")
	env, err := attention.Open(attention.Config{Backend: attention.Vulkan, Kernel: "flash"})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if !env.TuneInfo().Off {
		t.Errorf("FLASHVK_TUNE=off: %+v", env.TuneInfo())
	}
}
