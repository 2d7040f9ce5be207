package attention_test

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/internal/vkattn"
	"github.com/flashvk/flashvk/reference"
)

// TestTuneCacheEngine: an engine opened on a tune cache dispatches the
// tuned configuration it names (Launches says "tuned"), still computes
// correct results, and ignores an entry that is invalid on the device
// (with a warning); Config.TuneCache "off" ignores the cache.
func TestTuneCacheEngine(t *testing.T) {
	devicetest.Skip(t)
	ctx := context.Background()
	const d = 16
	plain, err := attention.Open(attention.Config{Backend: attention.Vulkan, Kernel: "flash", TuneCache: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	vk := plain.Vulkan()
	// A legal non-default flash tile and backward tiles from the registry.
	sp := &spec.Problem{B: 1, Hq: 2, Hkv: 1, Nq: 50, Nk: 70, D: d, Dv: d, Scale: 0.25, Mask: spec.MaskCausalBottomRight}
	pick := map[string]string{}
	defaults := map[string]string{}
	for _, f := range vkattn.TuneFamilies() {
		if !f.Active(ctx, vk, sp, vkattn.F32) {
			continue
		}
		def, err := f.Default(ctx, vk, sp, vkattn.F32)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := f.Candidates(ctx, vk, sp, vkattn.F32)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.String() != def.String() {
				pick[f.Name], defaults[f.Name] = c.String(), def.String()
				break
			}
		}
	}
	if len(pick) != 3 {
		t.Fatalf("picked %v, want flash, bwd_dkdv and bwd_dq", pick)
	}
	c := &vkattn.TuneCache{}
	dev := vkattn.DeviceKeyOf(vk.Info())
	for fam, cand := range pick {
		dir := vkattn.DirFwd
		if strings.HasPrefix(fam, "bwd") {
			dir = vkattn.DirBwd
		}
		c.Put(vkattn.TuneEntry{Device: dev, Key: vkattn.TuneKey{Family: fam, Dir: dir, DType: "f32", D: d, DV: d, Causal: true},
			N: 2048, Candidate: cand, Default: defaults[fam]})
	}
	// An entry for a key of this device that no device can run.
	c.Put(vkattn.TuneEntry{Device: dev, Key: vkattn.TuneKey{Family: "flash", Dir: vkattn.DirFwd, DType: "f32", D: 32, DV: 32, Causal: true},
		N: 2048, Candidate: "wg8192-br128-bc64"})
	path := filepath.Join(t.TempDir(), "tune.json")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	e, err := attention.Open(attention.Config{Backend: attention.Vulkan, Kernel: "flash", TuneCache: path})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	q := attention.Shape{B: 1, S: 50, H: 2, D: d}
	k := attention.Shape{B: 1, S: 70, H: 1, D: d}
	opt := attention.Options{Causal: true, Align: attention.BottomRight}
	for _, bwd := range []bool{false, true} {
		ls, err := e.Launches(ctx, q, k, k, attention.BSHD, attention.Float32, opt, bwd)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			want, ok := pick[l.Kernel]
			got := vkattn.ScalarTile{WG: l.Workgroup, BR: l.BR, BC: l.BC}.String()
			switch {
			case ok && (l.Source != vkattn.SourceTuned || got != want):
				t.Errorf("%s: %s (%s), want the tuned %s", l.Kernel, got, l.Source, want)
			case !ok && l.Source != vkattn.SourceDefault:
				t.Errorf("%s: source %q", l.Kernel, l.Source)
			}
		}
	}
	// Results with the tuned tiles.
	rng := rand.New(rand.NewPCG(11, 12))
	rnd := func(s attention.Shape) ([]float32, []float64) {
		x := make([]float32, s.B*s.S*s.H*s.D)
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
	// The invalid entry (d = 32): default tile, a warning, correct result.
	q32 := attention.Shape{B: 1, S: 20, H: 1, D: 32}
	ls, err := e.Launches(ctx, q32, q32, q32, attention.BSHD, attention.Float32, opt, false)
	if err != nil || ls[0].Source != vkattn.SourceDefault {
		t.Errorf("invalid entry: %+v, %v", ls, err)
	}
	if w := e.Vulkan().TuneInfo().Warnings; len(w) != 1 || !strings.Contains(w[0], "wg8192-br128-bc64") {
		t.Errorf("warnings %q", w)
	}
	// Off.
	ls, _ = plain.Launches(ctx, q, k, k, attention.BSHD, attention.Float32, opt, false)
	if ls[0].Source != vkattn.SourceDefault {
		t.Errorf("TuneCache off: %+v", ls[0])
	}
}
