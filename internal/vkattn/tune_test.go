//go:build cgo

package vkattn

import (
	"context"

	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/reference"
)

// testRef is the tuner's float64 verifier in tests: package reference.
func testRef(p *spec.Problem, q, k, v, do []float64, backward bool) ([][]float64, error) {
	rp := reference.Params{B: p.B, Hq: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk, D: p.D, Dv: p.Dv, Scale: float64(p.Scale),
		Causal: p.Causal(), BottomRight: p.Mask == spec.MaskCausalBottomRight}
	return reference.Outputs(rp, q, k, v, do, backward)
}

func tunedFlash(d int, causal bool, n int, cand string) Tuned {
	return Tuned{Key: TuneKey{Stage: "flash", Dir: Fwd, DType: spec.Float32, D: d, DV: d, Causal: causal}, N: n, Candidate: cand}
}

// TestTuneKeyMatching: entries apply only to their exact key; among
// sequence lengths the nearest (log scale) wins; the tuner's override wins.
func TestTuneKeyMatching(t *testing.T) {
	ts := &tuneState{entries: []Tuned{
		tunedFlash(64, false, 512, "wg64-br16-bc32"),
		tunedFlash(64, false, 4096, "wg128-br64-bc16"),
		tunedFlash(64, true, 2048, "wg32-br16-bc16"),
	}}
	key := TuneKey{Stage: "flash", Dir: Fwd, DType: spec.Float32, D: 64, DV: 64}
	for _, tc := range []struct {
		nq   int
		want string
	}{{1, "wg64-br16-bc32"}, {512, "wg64-br16-bc32"}, {1024, "wg64-br16-bc32"}, {1440, "wg64-br16-bc32"},
		{1500, "wg128-br64-bc16"}, {4096, "wg128-br64-bc16"}, {65536, "wg128-br64-bc16"}} {
		if got, ok := ts.lookup(key, tc.nq); !ok || got.Candidate != tc.want {
			t.Errorf("Nq=%d: lookup = %q, %v; want %q", tc.nq, got.Candidate, ok, tc.want)
		}
	}
	// Equidistant (1024 and 4096 around 2048 in log2): the larger N wins.
	ts2 := &tuneState{entries: []Tuned{tunedFlash(64, false, 1024, "a"), tunedFlash(64, false, 4096, "b")}}
	if got, _ := ts2.lookup(key, 2048); got.Candidate != "b" {
		t.Errorf("tie: %q, want the larger N's", got.Candidate)
	}
	for name, k := range map[string]TuneKey{
		"other d":     {Stage: "flash", Dir: Fwd, DType: spec.Float32, D: 128, DV: 128},
		"other dv":    {Stage: "flash", Dir: Fwd, DType: spec.Float32, D: 64, DV: 32},
		"other dtype": {Stage: "flash", Dir: Fwd, DType: spec.Float16, D: 64, DV: 64},
		"other stage": {Stage: "flash_cm", Dir: Fwd, DType: spec.Float32, D: 64, DV: 64},
		"other dir":   {Stage: "flash", Dir: Bwd, DType: spec.Float32, D: 64, DV: 64},
	} {
		if got, ok := ts.lookup(k, 2048); ok {
			t.Errorf("%s: matched %q", name, got.Candidate)
		}
	}
	ck := key
	ck.Causal = true
	if got, _ := ts.lookup(ck, 100000); got.Candidate != "wg32-br16-bc16" {
		t.Errorf("causal: %q", got.Candidate)
	}
	ts.setOverride(key, "forced")
	if got, _ := ts.lookup(key, 512); got.Candidate != "forced" {
		t.Errorf("override: %q", got.Candidate)
	}
	ts.clearOverrides()
	if got, _ := ts.lookup(key, 512); got.Candidate != "wg64-br16-bc32" {
		t.Errorf("after clearOverrides: %q", got.Candidate)
	}
}

func TestParseCandidates(t *testing.T) {
	for _, c := range []ScalarTile{{64, 64, 16}, {256, 8, 128}} {
		got, err := ParseScalarTile(c.String())
		if err != nil || got != c {
			t.Errorf("%v: %v, %v", c, got, err)
		}
	}
	for _, c := range []CMTile{{NSG: 8, BC: 128, Mode: 1, Prefetch: true}, {NSG: 2, BC: 32}, {NSG: 8, BC: 32, Mode: 1, Pairs: true},
		{NSG: 4, BC: 64, Mode: 1, Prefetch: true, Pairs: true}, {NSG: 4, BC: 32, Mode: 1, Prefetch: true, RowBlocks: 2}, {NSG: 2, BC: 64, Mode: 1, RowBlocks: 3},
		{NSG: 8, BC: 16, Mode: 1, Stagger: true}, {NSG: 4, BC: 32, Mode: 1, Prefetch: true, RowBlocks: 2, Stagger: true}, {NSG: 8, BC: 32, Mode: 1, Pairs: true, Stagger: true}} {
		got, err := parseCMTile(c.String())
		if err != nil || got != c {
			t.Errorf("%v: %v, %v", c, got, err)
		}
	}
	for _, c := range []bwdCMTile{{NSG: 4, Step: 32, Mode: 1}, {NSG: 1, Step: 16, Mode: 1, KVReg: true, Prefetch: true, Split: true},
		{NSG: 2, Step: 16, Split: true}, {NSG: 4, Step: 16, Mode: 1, KVReg: true, Split: true, Halves: true}, {NSG: 4, Step: 32, Mode: 1, Pairs: true},
		{NSG: 8, Step: 32, Mode: 1, Prefetch: true, Pairs: true}, {NSG: 4, Step: 16, Mode: 1, FHalves: true}, {NSG: 8, Step: 16, Mode: 1, Prefetch: true, FHalves: true},
		{NSG: 8, Step: 16, Mode: 1, KVReg: true, FHalves: true}, {NSG: 4, Step: 64, Mode: 1, KVReg: true, Stagger: true},
		{NSG: 8, Step: 16, Mode: 1, FHalves: true, Stagger: true}, {NSG: 4, Step: 32, Mode: 1, KVReg: true, Split: true, Halves: true, Stagger: true},
		{NSG: 4, Step: 32, Mode: 1, Prefetch: true, RowBlocks: 2}, {NSG: 2, Step: 64, Mode: 1, RowBlocks: 2, Stagger: true}} {
		got, err := parseBwdCMTile(c.String())
		if err != nil || got != c {
			t.Errorf("%v: %v, %v", c, got, err)
		}
	}
	for _, s := range []string{"nsg1-step16-mode1-qs1", "nsg1-step16-mode1-sp1-kv1", "nsg1-step16-mode1-sp2", "nsg1-step16-mode1-dk2-sp1", "nsg1-step16-mode1-dk2",
		"nsg4-step32-mode1-dq2-pf1", "nsg4-step32-mode1-kv1-dq2", "nsg4-step32-mode1-sp1-dq2", "nsg4-step32-mode1-dq2-dq2",
		"nsg4-step16-mode1-fh2-pf1", "nsg4-step16-mode1-fh2-kv1", "nsg4-step16-mode1-sp1-fh2", "nsg4-step16-mode1-dq2-fh2", "nsg4-step16-mode1-fh2-fh2",
		"nsg4-step64-mode1-sw1-kv1", "nsg4-step64-mode1-kv1-sw1-sw1", "nsg4-step64-mode1-kv1-sw2", "nsg4-step16-mode1-sw1-fh2",
		"nsg4-step32-mode1-pf1-rb1", "nsg4-step32-mode1-pf1-rb0", "nsg4-step32-mode1-pf1-rb", "nsg4-step32-mode1-pf1-rb2x", "nsg4-step32-mode1-pf1-rb2-rb2",
		"nsg4-step32-mode1-pf1-sw1-rb2", "nsg4-step32-mode1-rb2-pf1", "nsg4-step32-mode1-kv1-rb2", "nsg4-step32-mode1-dq2-rb2", "nsg4-step32-mode1-fh2-rb2", "nsg4-step32-mode1-sp1-rb2"} {
		if _, err := parseBwdCMTile(s); err == nil {
			t.Errorf("parseBwdCMTile(%q) accepted", s)
		}
	}
	for _, s := range []string{"", "wg64", "wg64-br64-bc16x", "wg064-br64-bc16", "nsg8-bc64-mode1-pf2", "garbage"} {
		if _, err := ParseScalarTile(s); err == nil {
			t.Errorf("ParseScalarTile(%q) accepted", s)
		}
		if _, err := parseCMTile(s); err == nil {
			t.Errorf("parseCMTile(%q) accepted", s)
		}
	}
	for _, s := range []string{"nsg8-bc32-mode1-p2", "nsg8-bc32-mode1-pf0-p2-p2", "nsg8-bc32-mode1-pf0-p3", "nsg8-bc32-mode1-p2-pf0", "nsg8-bc32-mode1-pf0-dq2",
		"nsg4-bc32-mode1-pf1-rb1", "nsg4-bc32-mode1-pf1-rb0", "nsg4-bc32-mode1-pf1-rb-2", "nsg4-bc32-mode1-pf1-rb", "nsg4-bc32-mode1-pf1-rb2x", "nsg4-bc32-mode1-pf1-rb2-p2", "nsg4-bc32-mode1-pf1-rb2-rb2",
		"nsg4-bc32-mode1-pf1-sw1-rb2", "nsg4-bc32-mode1-pf1-sw1-sw1", "nsg4-bc32-mode1-pf1-sw0", "nsg4-bc32-mode1-sw1", "nsg8-bc32-mode1-pf0-sw1-p2"} {
		if _, err := parseCMTile(s); err == nil {
			t.Errorf("parseCMTile(%q) accepted", s)
		}
	}
}

// TestTuneRegistry: every family's tunable stages, unique names, in the
// expected passes.
func TestTuneRegistry(t *testing.T) {
	seen := map[string]bool{}
	var names []string
	for _, f := range Tunables() {
		if seen[f.Name] {
			t.Errorf("stage %q twice", f.Name)
		}
		seen[f.Name] = true
		if f.Default == nil || f.Candidates == nil || f.Parse == nil || f.Check == nil {
			t.Errorf("stage %q lacks a hook", f.Name)
		}
		names = append(names, f.Dir.String()+":"+f.Name)
	}
	want := []string{"fwd:flash_cm", "fwd:flash", "bwd:bwd_cm_dkdv", "bwd:bwd_cm_dq", "bwd:bwd_dkdv", "bwd:bwd_dq"}
	if !slices.Equal(names, want) {
		t.Errorf("stages %v, want %v", names, want)
	}
}

// TestScalarCandidates: on H200-like limits every candidate passes
// CheckConfig and the set is of a size worth timing.
func TestScalarCandidates(t *testing.T) {
	b := syntheticBackend(t, h200Info(), "", nil)
	for _, k := range []string{shaders.KernelFlash, shaders.KernelBwdDKDV, shaders.KernelBwdDQ} {
		for _, d := range []int{64, 128, 256} {
			cs, err := tunableByName(k).Candidates(context.Background(), b, bshdProblem(16384/2048, 2048/d, 2048/d, 2048, 2048, d), spec.Float16)
			if err != nil {
				t.Fatal(err)
			}
			if len(cs) == 0 && d < 256 {
				t.Errorf("%s d=%d: no candidates", k, d)
			}
			if len(cs) > 80 {
				t.Errorf("%s d=%d: %d candidates (too many to time)", k, d, len(cs))
			}
			for _, c := range cs {
				if err := shaders.CheckConfig(k, shaders.Config(c.(ScalarTile)), d, d, true, b.lim); err != nil {
					t.Errorf("%s d=%d %v: %v", k, d, c, err)
				}
			}
			t.Logf("%s d=%d: %d candidates", k, d, len(cs))
		}
	}
}

// TestTuneInvalidTuned: tuned configurations that do not parse or do not
// fit this device are ignored with warnings (one per configuration, not
// per call); the defaults run and results stay correct.
func TestTuneInvalidTuned(t *testing.T) {
	b := openBackend(t, "flash")
	ctx := context.Background()
	bad := tunedFlash(32, true, 64, "wg4096-br64-bc64") // workgroup too large everywhere
	notTile := Tuned{Key: TuneKey{Stage: "bwd_dkdv", Dir: Bwd, DType: spec.Float32, D: 32, DV: 32, Causal: true}, N: 64, Candidate: "not a tile"}
	b.SetTuned("test.json", []Tuned{bad, notTile})
	h := newHostProblem(3, 1, 2, 1, 40, 50, 32, 32, spec.MaskCausalBottomRight)
	for range 2 {
		for _, bwd := range []bool{false, true} {
			ls, err := b.Launches(ctx, h.p, spec.Float32, bwd)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				if l.Source != SourceDefault {
					t.Errorf("%s: source %q, want default", l.Kernel, l.Source)
				}
			}
		}
	}
	if err := ForwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, HostBias{}); err != nil {
		t.Fatal(err)
	}
	o, _, _ := reference.Forward(h.ref(), to64(h.q), to64(h.k), to64(h.v))
	checkClose(t, "o", h.o, o, 1e-5)
	if err := BackwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, h.dO, h.dq, h.dk, h.dv, HostBias{}); err != nil {
		t.Fatal(err)
	}
	_, dk2, _, _ := reference.Backward(h.ref(), to64(h.q), to64(h.k), to64(h.v), to64(h.dO))
	checkClose(t, "dk", h.dk, dk2, 1e-5)
	w := strings.Join(b.TuneWarnings(), "\n")
	if !strings.Contains(w, "wg4096-br64-bc64") || !strings.Contains(w, "not a tile") || !strings.Contains(w, "test.json") {
		t.Errorf("warnings do not name the invalid configurations and their file:\n%s", w)
	}
	if n := len(b.TuneWarnings()); n != 2 {
		t.Errorf("%d warnings, want 2 (one per invalid entry, not per call):\n%s", n, w)
	}
}

// TestTuneLavapipeLoopLimit: on lavapipe a tuned scalar tile that would
// cross the loop limit where the default does not is refused by Check.
func TestTuneLavapipeLoopLimit(t *testing.T) {
	info := device.Info{Name: "llvmpipe (LLVM 15.0.6, 256 bits)", SubgroupSize: 8, MaxSharedMemory: 32 << 10, MaxWorkgroupInvocations: 1024,
		MaxWorkgroupSize: [3]uint32{1024, 1024, 1024}}
	b := syntheticBackend(t, info, "flash", nil)
	f := tunableByName(shaders.KernelFlash)
	def, err := b.Config(shaders.KernelFlash, 64, 64, spec.Float32)
	if err != nil {
		t.Fatal(err)
	}
	cand := ScalarTile{WG: 8, BR: 8, BC: 8}
	p := &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: 64, D: 64, Dv: 64}
	found := false
	for nk := 1024; nk < 1<<20; nk += 1024 {
		p.Nk = nk
		nd := shaders.LoopIterations(shaders.KernelFlash, def, 64, 64, 64, nk, 1)
		nc := shaders.LoopIterations(shaders.KernelFlash, shaders.Config(cand), 64, 64, 64, nk, 1)
		if nd <= shaders.LavapipeLoopLimit && nc > shaders.LavapipeLoopLimit {
			found = true
			if err := f.Check(context.Background(), b, p, spec.Float32, cand); err == nil || !strings.Contains(err.Error(), "lavapipe") {
				t.Errorf("Nk=%d: Check = %v, want the loop-limit refusal", nk, err)
			}
			break
		}
	}
	if !found {
		t.Fatal("no Nk separates the default from the candidate")
	}
	p.Nk = 256
	if err := f.Check(context.Background(), b, p, spec.Float32, cand); err != nil {
		t.Errorf("Nk=256: %v", err)
	}
	b.info.Name = "NVIDIA H200" // no such limit elsewhere
	p.Nk = 1 << 19
	if err := f.Check(context.Background(), b, p, spec.Float32, cand); err != nil {
		t.Errorf("non-lavapipe: %v", err)
	}
}

// TestFlashCMFamily exercises the flash_cm stage on a synthetic H200-like
// backend (no device: the probe's layout is preset): default, candidates,
// checks, and a tuned tile applied by the plan, an invalid one ignored,
// one that kept an older default rule's choice replaced by today's.
func TestFlashCMFamily(t *testing.T) {
	l, err := ParseCMProbe(nvidiaProbe(32), shape16, 32)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := syntheticBackend(t, h200Info(), "", l)
	f := tunableByName(shaders.KernelFlashCM)
	p := bshdProblem(8, 32, 32, 2048, 2048, 64)
	if !b.planUses(ctx, p, spec.Float16, Fwd, f.Name) || b.planUses(ctx, p, spec.Float32, Fwd, f.Name) {
		t.Error("flash_cm: want planned for f16, not f32")
	}
	if b.planUses(ctx, p, spec.Float16, Fwd, "flash") || !b.planUses(ctx, p, spec.Float32, Fwd, "flash") {
		t.Error("flash: want planned for f32 only")
	}
	def, err := f.Default(ctx, b, p, spec.Float16)
	if err != nil || def.String() != "nsg4-bc32-mode1-pf1-rb2" {
		t.Fatalf("Default = %v, %v", def, err)
	}
	cs, err := f.Candidates(ctx, b, p, spec.Float16)
	if err != nil || len(cs) < 10 || cs[0].String() != def.String() {
		t.Fatalf("Candidates: %d, first %v, %v", len(cs), cs, err)
	}
	for _, c := range cs {
		if err := f.Check(ctx, b, p, spec.Float16, c); err != nil {
			t.Errorf("%v: %v", c, err)
		}
		back, err := f.Parse(c.String())
		if err != nil || back != c {
			t.Errorf("Parse(%v) = %v, %v", c, back, err)
		}
	}
	if err := f.Check(ctx, b, p, spec.Float32, cs[0]); err == nil {
		t.Error("Check accepted f32")
	}
	mode0 := *l
	mode0.Mode1, mode0.Why = false, "synthetic"
	b0 := syntheticBackend(t, h200Info(), "", &mode0)
	cs0, _ := f.Candidates(ctx, b0, p, spec.Float16)
	for _, c := range cs0 {
		if c.(CMTile).Mode != 0 {
			t.Errorf("MODE 1 candidate %v on a layout without MODE 1", c)
		}
	}
	if err := f.Check(ctx, b0, p, spec.Float16, cs[0]); err == nil {
		t.Error("Check accepted MODE 1 on a layout without it")
	}

	// A tuned tile is planned; an invalid one falls back with a warning.
	key := TuneKey{Stage: shaders.KernelFlashCM, Dir: Fwd, DType: spec.Float16, D: 64, DV: 64}
	bad := key
	bad.D, bad.DV = 256, 256
	bt := syntheticBackend(t, h200Info(), "", l,
		Tuned{Key: key, N: 2048, Candidate: "nsg4-bc64-mode1-pf0"}, Tuned{Key: bad, N: 2048, Candidate: "nsg8-bc128-mode1-pf1"})
	ls, err := bt.Launches(ctx, p, spec.Float16, false)
	if err != nil || len(ls) != 1 || ls[0].Config != "nsg4-bc64-mode1-pf0" || ls[0].Source != SourceTuned || ls[0].BR != 64 {
		t.Errorf("tuned launch %+v, %v", ls, err)
	}
	p256 := bshdProblem(8, 8, 8, 2048, 2048, 256)
	ls, err = bt.Launches(ctx, p256, spec.Float16, false)
	if err != nil || len(ls) != 1 || ls[0].Source != SourceDefault {
		t.Errorf("invalid tuned tile: %+v, %v", ls, err)
	}
	if w := bt.TuneWarnings(); len(w) != 1 || !strings.Contains(w[0], "nsg8-bc128-mode1-pf1") || !strings.Contains(w[0], "shared memory") {
		t.Errorf("warnings %q", w)
	}

	// An entry that kept the default of its day gives way to today's
	// default rule where it now differs; one that beat its default, or
	// whose default is today's, stays.
	for _, c := range []struct {
		cand, def, want, source string
	}{
		{"nsg4-bc64-mode1-pf0", "nsg4-bc64-mode1-pf0", def.String(), SourceDefault},
		{"nsg4-bc64-mode1-pf0", "nsg2-bc32-mode1-pf0", "nsg4-bc64-mode1-pf0", SourceTuned},
		{def.String(), def.String(), def.String(), SourceTuned},
		{"nsg4-bc64-mode1-pf0", "", "nsg4-bc64-mode1-pf0", SourceTuned},
	} {
		bd := syntheticBackend(t, h200Info(), "", l, Tuned{Key: key, N: 2048, Candidate: c.cand, Default: c.def})
		ls, err := bd.Launches(ctx, p, spec.Float16, false)
		if err != nil || len(ls) != 1 || ls[0].Config != c.want || ls[0].Source != c.source {
			t.Errorf("entry %s (default then %q): launch %+v, %v; want %s from %s", c.cand, c.def, ls, err, c.want, c.source)
		}
	}
}

// TestTuneNonPositiveTiles: a tune cache is user input; tiles whose sizes
// parse but are zero or negative are refused by Check (a workgroup of no
// subgroups, a tile of no keys or rows would divide by zero in the grid
// and the shader, a negative one wrap in the specialization), so a cache
// naming them falls back to the default with a warning, never a panic.
func TestTuneNonPositiveTiles(t *testing.T) {
	l, err := ParseCMProbe(nvidiaProbe(32), shape16, 32)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := bshdProblem(2, 4, 4, 256, 256, 64)
	for _, c := range []struct{ stage, tile string }{
		{shaders.KernelFlashCM, "nsg0-bc32-mode0-pf1"},
		{shaders.KernelFlashCM, "nsg4-bc0-mode1-pf0"},
		{shaders.KernelFlashCM, "nsg4-bc-32-mode0-pf1"},
		{shaders.KernelFlashCM, "nsg-4-bc32-mode1-pf1"},
		{shaders.KernelBwdCMDKDV, "nsg0-step16-mode1"},
		{shaders.KernelBwdCMDKDV, "nsg4-step-16-mode1"},
		{shaders.KernelBwdCMDQ, "nsg-1-step16-mode0"},
		{shaders.KernelBwdCMDQ, "nsg4-step0-mode1"},
	} {
		f := tunableByName(c.stage)
		cand, err := f.Parse(c.tile)
		if err != nil {
			continue // refused already
		}
		b := syntheticBackend(t, h200Info(), "", l)
		if err := f.Check(ctx, b, p, spec.Float16, cand); err == nil {
			t.Errorf("%s: Check accepted %q", c.stage, c.tile)
		}
		key := TuneKey{Stage: c.stage, Dir: f.Dir, DType: spec.Float16, D: 64, DV: 64}
		bt := syntheticBackend(t, h200Info(), "", l, Tuned{Key: key, N: 256, Candidate: c.tile})
		ls, err := bt.Launches(ctx, p, spec.Float16, f.Dir == Bwd)
		if err != nil {
			t.Errorf("%s %q: %v", c.stage, c.tile, err)
			continue
		}
		for _, x := range ls {
			if x.Kernel == c.stage && x.Source != SourceDefault {
				t.Errorf("%s %q: launch %+v, want the default", c.stage, c.tile, x)
			}
		}
		if w := bt.TuneWarnings(); len(w) != 1 || !strings.Contains(w[0], c.tile) {
			t.Errorf("%s %q: warnings %q", c.stage, c.tile, w)
		}
	}
}

// TestTuneSession: a session's stages are the tunable launches of the
// plan; forcing a candidate changes what the session (not the Backend it
// came from) plans; the verifier accepts the default and catches a wrong
// output element; the timer times.
func TestTuneSession(t *testing.T) {
	b := openBackend(t, "flash")
	ctx := context.Background()
	s, err := b.NewTuneSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := bshdProblem(1, 2, 1, 64, 80, 16)
	p.Mask = spec.MaskCausalBottomRight
	for _, x := range []struct {
		dir  Dir
		want []string
	}{{Fwd, []string{"flash"}}, {Bwd, []string{"bwd_dkdv", "bwd_dq"}}} {
		st, ks, err := s.Stages(ctx, p, spec.Float32, x.dir)
		if err != nil || !slices.Equal(st, x.want) || len(ks) == 0 {
			t.Errorf("%v stages %v (kernels %v), %v; want %v", x.dir, st, ks, err, x.want)
		}
	}
	def, err := s.Default(ctx, "flash", p, spec.Float32)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.Candidates(ctx, "flash", p, spec.Float32)
	if err != nil || len(cs) < 2 {
		t.Fatalf("candidates %v, %v", cs, err)
	}
	other := cs[0]
	if other == def {
		other = cs[1]
	}
	if err := s.Check(ctx, "flash", p, spec.Float32, other); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, "flash", p, spec.Float32, "wg99999-br1-bc1"); err == nil {
		t.Error("Check accepted a workgroup of 99999")
	}
	s.Force("flash", p, spec.Float32, other)
	ls, err := s.tb.Launches(ctx, p, spec.Float32, false)
	if err != nil || ls[0].Config != other || ls[0].Source != SourceTuned {
		t.Errorf("forced %s: session plans %+v, %v", other, ls, err)
	}
	if ls, _ := b.Launches(ctx, p, spec.Float32, false); ls[0].Config != def {
		t.Errorf("the Backend plans %s, want its default %s (the session's forcing leaked)", ls[0].Config, def)
	}
	v, err := s.Verifier(ctx, p, spec.Float32, false, 1, testRef)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if e, err := v.Run(ctx); err != nil || !(e <= 1e-5) {
		t.Errorf("forced %s: rel_l2 %v, %v", other, e, err)
	}
	s.Unforce()
	if e, err := v.Run(ctx); err != nil || !(e <= 1e-5) {
		t.Errorf("default: rel_l2 %v, %v", e, err)
	}
	v.vc.ref[0][7] += 1 // a wrong output element
	if e, err := v.Run(ctx); err != nil || e <= 1e-5 {
		t.Errorf("perturbed reference: rel_l2 %v, %v: not caught", e, err)
	}
	tm, err := s.Timer(ctx, p, spec.Float32, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	if m, err := tm.Median(ctx, BenchOptions{Warmup: 1, MinWarmup: -1, Iters: 2}); err != nil || m <= 0 {
		t.Errorf("timer: %v, %v", m, err)
	}
}

// TestTunedPlainOnly: flash_cm's and bwd_cm_dkdv's tiles tuned without
// options (PlainOnly: their default rules depend on the options) never
// replace an extended problem's default, while a stage without the flag
// (the scalar forward) keeps its plain choice for a problem with options;
// an entry tuned with a problem's own options applies to it first, and
// to no problem with other options.
func TestTunedPlainOnly(t *testing.T) {
	for name, want := range map[string]bool{"flash_cm": true, "bwd_cm_dkdv": true, "bwd_cm_dq": false, "flash": false} {
		if got := tunableByName(name).PlainOnly; got != want {
			t.Errorf("%s: PlainOnly %v, want %v", name, got, want)
		}
	}
	cm := Tuned{Key: TuneKey{Stage: "flash_cm", Dir: Fwd, DType: spec.Float16, D: 64, DV: 64, Causal: true}, N: 1024, Candidate: "nsg8-bc128-mode1-pf1"}
	b := &Backend{tune: &tuneState{entries: []Tuned{cm, tunedFlash(64, true, 1024, "wg64-br16-bc32")}},
		lim: shaders.Limits{SharedBytes: 48 << 10, MaxWorkgroupSize: 1024, Subgroup: 32},
		cm:  map[spec.DType]*cmState{spec.Float16: {dt: spec.Float16, layout: &CMLayout{M: 16, N: 16, K: 16, SG: 32, Mode1: true}}}}
	ctx := context.Background()
	p := &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: 1024, Nk: 1024, D: 64, Dv: 64, Scale: 0.125, Mask: spec.MaskCausalBottomRight}
	if c, ok := b.tuned(ctx, "flash_cm", p, spec.Float16); !ok || c.String() != cm.Candidate {
		t.Fatalf("flash_cm, plain: %v, %v; want the tuned %s (%v)", c, ok, cm.Candidate, b.TuneWarnings())
	}
	p.Ext = &spec.Ext{Left: -1, Right: 0, BottomRight: true, Softcap: 30}
	if c, ok := b.tuned(ctx, "flash_cm", p, spec.Float16); ok {
		t.Errorf("flash_cm with options: tuned %v, want the extended variant's default", c)
	}
	if c, ok := b.tuned(ctx, "flash", p, spec.Float32); !ok || c.String() != "wg64-br16-bc32" {
		t.Errorf("flash with options: %v, %v; want the tuned wg64-br16-bc32", c, ok)
	}
	// Entries tuned with the softcap.
	cmSoft := cm
	cmSoft.Key.Options, cmSoft.Candidate = "softcap", "nsg4-bc64-mode1-pf1"
	flashSoft := tunedFlash(64, true, 1024, "wg128-br32-bc32")
	flashSoft.Key.Options = "softcap"
	b.tune.entries = append(b.tune.entries, cmSoft, flashSoft)
	for _, c := range []struct {
		stage, want string
		dt          spec.DType
	}{{"flash_cm", cmSoft.Candidate, spec.Float16}, {"flash", flashSoft.Candidate, spec.Float32}} {
		if got, ok := b.tuned(ctx, c.stage, p, c.dt); !ok || got.String() != c.want {
			t.Errorf("%s with a softcap: %v, %v; want the softcap's %s", c.stage, got, ok, c.want)
		}
	}
	p.Ext.Slopes = []float32{0.5} // softcap+alibi: no entry of its own
	if c, ok := b.tuned(ctx, "flash_cm", p, spec.Float16); ok {
		t.Errorf("flash_cm with softcap and ALiBi: tuned %v, want the extended variant's default", c)
	}
	if c, ok := b.tuned(ctx, "flash", p, spec.Float32); !ok || c.String() != "wg64-br16-bc32" {
		t.Errorf("flash with softcap and ALiBi: %v, %v; want the plain entry's wg64-br16-bc32", c, ok)
	}
	p.Ext = nil
	if c, ok := b.tuned(ctx, "flash_cm", p, spec.Float16); !ok || c.String() != cm.Candidate {
		t.Errorf("flash_cm, plain, beside the softcap's entry: %v, %v; want %s", c, ok, cm.Candidate)
	}
	dkdv := Tuned{Key: TuneKey{Stage: "bwd_cm_dkdv", Dir: Bwd, DType: spec.Float16, D: 128, DV: 128, Causal: true}, N: 1024, Candidate: "nsg4-step32-mode1-kv1"}
	b.tune.entries = append(b.tune.entries, dkdv)
	p = &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: 1024, Nk: 1024, D: 128, Dv: 128, Scale: 0.125, Mask: spec.MaskCausalBottomRight}
	if c, ok := b.tuned(ctx, "bwd_cm_dkdv", p, spec.Float16); !ok || c.String() != dkdv.Candidate {
		t.Fatalf("bwd_cm_dkdv, plain: %v, %v; want the tuned %s (%v)", c, ok, dkdv.Candidate, b.TuneWarnings())
	}
	p.Ext = &spec.Ext{Left: -1, Right: 0, BottomRight: true, Bias: &spec.Bias{DType: spec.Float32, Row: 1024}}
	if c, ok := b.tuned(ctx, "bwd_cm_dkdv", p, spec.Float16); ok {
		t.Errorf("bwd_cm_dkdv with a bias: tuned %v, want the default rule's tile", c)
	}
	// The dQ kernel's plain choice applies to a call with a bias, walking
	// in order (a bias does not take the staggered walk); to a call
	// without one as tuned.
	dq := Tuned{Key: TuneKey{Stage: "bwd_cm_dq", Dir: Bwd, DType: spec.Float16, D: 128, DV: 128, Causal: true}, N: 1024, Candidate: "nsg4-step32-mode1-sw1"}
	b.tune.entries = append(b.tune.entries, dq)
	if c, ok := b.tuned(ctx, "bwd_cm_dq", p, spec.Float16); !ok || c.String() != "nsg4-step32-mode1" {
		t.Errorf("bwd_cm_dq with a bias: %v, %v; want the plain entry's tile walking in order, nsg4-step32-mode1 (%v)", c, ok, b.TuneWarnings())
	}
	p.Ext = &spec.Ext{Left: -1, Right: 0, BottomRight: true, Softcap: 30}
	if c, ok := b.tuned(ctx, "bwd_cm_dq", p, spec.Float16); !ok || c.String() != dq.Candidate {
		t.Errorf("bwd_cm_dq with a softcap: %v, %v; want the plain entry's %s (%v)", c, ok, dq.Candidate, b.TuneWarnings())
	}
	// A dQ tile with row blocks, tuned without options, keeps them for the
	// calls the rule gives them (dropout) and runs one block per subgroup
	// for the others (a softcap, ALiBi, a window, a bias).
	dq64 := Tuned{Key: TuneKey{Stage: "bwd_cm_dq", Dir: Bwd, DType: spec.Float16, D: 64, DV: 64, Causal: true}, N: 1024, Candidate: "nsg8-step32-mode1-pf1-rb2"}
	b.tune.entries = append(b.tune.entries, dq64)
	p64 := &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: 1024, Nk: 1024, D: 64, Dv: 64, Scale: 0.125, Mask: spec.MaskCausalBottomRight}
	for _, c := range []struct {
		ext  *spec.Ext
		want string
	}{{nil, dq64.Candidate}, {&spec.Ext{Left: -1, Right: 0, BottomRight: true, Dropout: &spec.Dropout{Threshold: 26}}, dq64.Candidate},
		{&spec.Ext{Left: -1, Right: 0, BottomRight: true, Softcap: 30}, "nsg8-step32-mode1-pf1"}, {&spec.Ext{Left: 255, Right: 0, BottomRight: true}, "nsg8-step32-mode1-pf1"},
		{&spec.Ext{Left: -1, Right: 0, BottomRight: true, Slopes: []float32{0.5}}, "nsg8-step32-mode1-pf1"},
		{&spec.Ext{Left: -1, Right: 0, BottomRight: true, Bias: &spec.Bias{DType: spec.Float32, Row: 1024}}, "nsg8-step32-mode1-pf1"}} {
		p64.Ext = c.ext
		if got, ok := b.tuned(ctx, "bwd_cm_dq", p64, spec.Float16); !ok || got.String() != c.want {
			t.Errorf("bwd_cm_dq d 64 (options %q): %v, %v; want %s (%v)", p64.Features(), got, ok, c.want, b.TuneWarnings())
		}
	}
	if w := b.TuneWarnings(); len(w) > 0 {
		t.Errorf("warnings %v", w)
	}
}
