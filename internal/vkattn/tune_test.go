//go:build cgo

package vkattn

import (
	"context"
	"errors"

	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/reference"
)

// testRef is the tuner's float64 verifier in tests: package reference.
func testRef(p *spec.Problem, q, k, v, do []float64, backward bool) ([][]float64, error) {
	rp := reference.Params{B: p.B, Hq: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk, D: p.D, Dv: p.Dv, Scale: float64(p.Scale),
		Causal: p.Causal(), BottomRight: p.Mask == spec.MaskCausalBottomRight}
	if backward {
		dq, dk, dv, err := reference.Backward(rp, q, k, v, do)
		return [][]float64{dq, dk, dv}, err
	}
	o, lse, err := reference.Forward(rp, q, k, v)
	return [][]float64{o, lse}, err
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
		if got, ok := ts.lookup(key, tc.nq); !ok || got != tc.want {
			t.Errorf("Nq=%d: lookup = %q, %v; want %q", tc.nq, got, ok, tc.want)
		}
	}
	// Equidistant (1024 and 4096 around 2048 in log2): the larger N wins.
	ts2 := &tuneState{entries: []Tuned{tunedFlash(64, false, 1024, "a"), tunedFlash(64, false, 4096, "b")}}
	if got, _ := ts2.lookup(key, 2048); got != "b" {
		t.Errorf("tie: %q, want the larger N's", got)
	}
	for name, k := range map[string]TuneKey{
		"other d":     {Stage: "flash", Dir: Fwd, DType: spec.Float32, D: 128, DV: 128},
		"other dv":    {Stage: "flash", Dir: Fwd, DType: spec.Float32, D: 64, DV: 32},
		"other dtype": {Stage: "flash", Dir: Fwd, DType: spec.Float16, D: 64, DV: 64},
		"other stage": {Stage: "flash_cm", Dir: Fwd, DType: spec.Float32, D: 64, DV: 64},
		"other dir":   {Stage: "flash", Dir: Bwd, DType: spec.Float32, D: 64, DV: 64},
	} {
		if got, ok := ts.lookup(k, 2048); ok {
			t.Errorf("%s: matched %q", name, got)
		}
	}
	ck := key
	ck.Causal = true
	if got, _ := ts.lookup(ck, 100000); got != "wg32-br16-bc16" {
		t.Errorf("causal: %q", got)
	}
	ts.setOverride(key, "forced")
	if got, _ := ts.lookup(key, 512); got != "forced" {
		t.Errorf("override: %q", got)
	}
	ts.clearOverrides()
	if got, _ := ts.lookup(key, 512); got != "wg64-br16-bc32" {
		t.Errorf("after clearOverrides: %q", got)
	}
}

func TestParseCandidates(t *testing.T) {
	for _, c := range []ScalarTile{{64, 64, 16}, {256, 8, 128}} {
		got, err := ParseScalarTile(c.String())
		if err != nil || got != c {
			t.Errorf("%v: %v, %v", c, got, err)
		}
	}
	for _, c := range []cmTile{{NSG: 8, BC: 128, Mode: 1, Prefetch: true}, {NSG: 2, BC: 32}} {
		got, err := parseCMTile(c.String())
		if err != nil || got != c {
			t.Errorf("%v: %v, %v", c, got, err)
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
			cs, err := tunableByName(k).Candidates(context.Background(), b, TuneProblem(d, d, 2048, 16384, 2048, false), spec.Float16)
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
	if err := ForwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse); err != nil {
		t.Fatal(err)
	}
	o, _, _ := reference.Forward(h.ref(), to64(h.q), to64(h.k), to64(h.v))
	checkClose(t, "o", h.o, o, 1e-5)
	if err := BackwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, h.dO, h.dq, h.dk, h.dv); err != nil {
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

// TestTuneEndToEnd tunes a tiny problem on the device (lavapipe in CI:
// two candidates per family), writes the cache, reopens a Backend on it
// and checks that the tuned configurations are the ones dispatched and
// that results still match the reference.
func TestTuneEndToEnd(t *testing.T) {
	dev := devicetest.Open(t)
	ctx := context.Background()
	b, err := New(dev, Options{Kernel: "flash"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const d = 32
	var events []TuneEvent
	rs, err := b.Tune(ctx, TuneOptions{DTypes: []spec.DType{spec.Float32}, Dims: []int{d}, Causal: []bool{true}, N: 64, Tokens: 64, Hidden: 2 * d,
		Bench: BenchOptions{Warmup: 1, MinWarmup: -1, Iters: 3}, MaxCandidates: 2, Reference: testRef,
		Progress: func(e TuneEvent) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("%d results, want 3 (flash, bwd_dkdv, bwd_dq)", len(rs))
	}
	timed := 0
	for _, e := range events {
		if e.Status != TuneConfirm {
			timed++
		} else if e.DefaultMedian <= 0 || e.Median <= 0 {
			t.Errorf("confirm event %+v", e)
		}
	}
	if timed != 6 {
		t.Errorf("%d candidate events, want 6", timed)
	}
	var tuned []Tuned
	for _, r := range rs {
		t.Logf("%s: default %s %v, winner %s %v (×%.2f)", r.Key, r.Default, r.DefaultTime, r.Winner, r.WinnerTime, r.Speedup())
		for _, e := range r.Events {
			t.Logf("  %s %s rel_l2 %.2g ≤ %.2g %v %v", e.Candidate, e.Status, e.RelL2, e.Bound, e.Median, e.Err)
			if e.Status != TuneTimed && e.Status != TuneConfirm {
				t.Errorf("%s %s: %s: %v", r.Key, e.Candidate, e.Status, e.Err)
			}
		}
		if r.Err != nil || r.Winner == "" {
			t.Fatalf("%s: %v", r.Key, r.Err)
		}
		tuned = append(tuned, Tuned{Key: r.Key, N: r.N, Candidate: r.Winner})
	}
	// Force a non-default winner for flash, so that the test sees a tuned
	// choice differ from the default.
	flashIdx := slices.IndexFunc(tuned, func(e Tuned) bool { return e.Key.Stage == shaders.KernelFlash })
	if flashIdx < 0 {
		t.Fatal("no flash entry")
	}
	tuned[flashIdx].Candidate = rs[0].Events[1].Candidate

	tb, err := New(dev, Options{Kernel: "flash"})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	tb.SetTuned("test.json", tuned)
	// Another shape of the same key (different N, B, H): the entries apply.
	h := newHostProblem(5, 2, 3, 1, 77, 101, d, d, spec.MaskCausalBottomRight)
	want := map[string]string{}
	for _, e := range tuned {
		want[e.Key.Stage] = e.Candidate
	}
	for _, bwd := range []bool{false, true} {
		ls, err := tb.Launches(ctx, h.p, spec.Float32, bwd)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			w, tuned := want[l.Kernel]
			if !tuned {
				if l.Source != SourceDefault {
					t.Errorf("%s: source %q", l.Kernel, l.Source)
				}
				continue
			}
			if got := (ScalarTile{WG: l.Workgroup, BR: l.BR, BC: l.BC}).String(); got != w || l.Source != SourceTuned {
				t.Errorf("%s: dispatched %s (%s), the cache says %s", l.Kernel, got, l.Source, w)
			}
		}
	}
	if ft := want[shaders.KernelFlash]; ft == rs[0].Default {
		t.Errorf("flash: tuned %s equals the default", ft)
	}
	// The untuned backend dispatches the defaults.
	ls, _ := b.Launches(ctx, h.p, spec.Float32, false)
	if got := (ScalarTile{WG: ls[0].Workgroup, BR: ls[0].BR, BC: ls[0].BC}).String(); got != rs[0].Default || ls[0].Source != SourceDefault {
		t.Errorf("untuned backend dispatches %s (%s), want the default %s", got, ls[0].Source, rs[0].Default)
	}
	// Results with the tuned configurations.
	if err := ForwardHost(ctx, tb, h.p, h.q, h.k, h.v, h.o, h.lse); err != nil {
		t.Fatal(err)
	}
	o, lse, _ := reference.Forward(h.ref(), to64(h.q), to64(h.k), to64(h.v))
	checkClose(t, "o", h.o, o, 1e-5)
	checkClose(t, "lse", h.lse, lse, 1e-5)
	if err := BackwardHost(ctx, tb, h.p, h.q, h.k, h.v, h.o, h.lse, h.dO, h.dq, h.dk, h.dv); err != nil {
		t.Fatal(err)
	}
	dq, dk, dv, _ := reference.Backward(h.ref(), to64(h.q), to64(h.k), to64(h.v), to64(h.dO))
	checkClose(t, "dq", h.dq, dq, 1e-5)
	checkClose(t, "dk", h.dk, dk, 1e-5)
	checkClose(t, "dv", h.dv, dv, 1e-5)
}

// TestTuneRejectsWrongResults: a candidate whose results are wrong is
// rejected (with the error), never timed and never chosen; the reference
// check itself catches a wrong element.
func TestTuneRejectsWrongResults(t *testing.T) {
	dev := devicetest.Open(t)
	ctx := context.Background()
	b, err := New(dev, Options{Kernel: "flash"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := VerifyProblem(16, 16, true)
	vc, err := b.newVerifyCase(ctx, p, spec.Float32, false, 1, testRef)
	if err != nil {
		t.Fatal(err)
	}
	defer vc.close()
	e, err := vc.run(ctx, b)
	if err != nil || !(e <= verifyBound(spec.Float32, e)) {
		t.Fatalf("default configuration: rel_l2 %v, %v", e, err)
	}
	vc.ref[0][7] += 1 // a wrong output element
	if e, err := vc.run(ctx, b); err != nil || e <= verifyBound(spec.Float32, 0) {
		t.Errorf("perturbed reference: rel_l2 %v (bound %v), %v: not rejected", e, verifyBound(spec.Float32, 0), err)
	}
	if got := verifyBound(spec.Float16, 3e-4); got != 6e-4 {
		t.Errorf("verifyBound(f16, 3e-4) = %v", got)
	}
	if got := verifyBound(spec.Float16, 1e-6); got != 1.0/4096 {
		t.Errorf("verifyBound(f16, 1e-6) = %v", got)
	}

	// In Tune: every candidate but the default "computes wrong results".
	var def string
	tuneTestHook = func(c Candidate, e float64) float64 {
		if def != "" && c.String() != def {
			return 0.5
		}
		return e
	}
	defer func() { tuneTestHook = nil }()
	c, _ := b.Config(shaders.KernelFlash, 16, 16, spec.Float32)
	def = ScalarTile(c).String()
	rs, err := b.Tune(ctx, TuneOptions{DTypes: []spec.DType{spec.Float32}, Dims: []int{16}, Causal: []bool{false}, Dirs: []Dir{Fwd},
		N: 32, Tokens: 32, Hidden: 16, Bench: BenchOptions{Warmup: 1, MinWarmup: -1, Iters: 2}, MaxCandidates: 3, Reference: testRef})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || len(rs[0].Events) != 3 {
		t.Fatalf("results %+v", rs)
	}
	r := rs[0]
	if r.Winner != def {
		t.Errorf("winner %s, want the default %s (the others are wrong)", r.Winner, def)
	}
	for _, e := range r.Events[1:] {
		if e.Status != TuneRejected || e.Err == nil || e.Median != 0 || !strings.Contains(e.Err.Error(), "rel_l2") {
			t.Errorf("%s: status %s err %v median %v: want rejected, untimed", e.Candidate, e.Status, e.Err, e.Median)
		}
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

// TestTuneNoFamily: a pass no family covers (the minimal forward) is
// reported, not skipped silently.
func TestTuneNoFamily(t *testing.T) {
	dev := devicetest.Open(t)
	b, err := New(dev, Options{Kernel: "minimal"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rs, err := b.Tune(context.Background(), TuneOptions{DTypes: []spec.DType{spec.Float32}, Dims: []int{16}, Causal: []bool{false}, Dirs: []Dir{Fwd}, N: 32, Tokens: 32, Hidden: 16, Reference: testRef})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Err == nil || !strings.Contains(rs[0].Err.Error(), "minimal") || rs[0].Winner != "" {
		t.Errorf("results %+v", rs)
	}
}

// TestTuneBudget: a spent budget decides the family in progress among
// the candidates measured and leaves later keys untuned.
func TestTuneBudget(t *testing.T) {
	dev := devicetest.Open(t)
	b, err := New(dev, Options{Kernel: "flash"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o := TuneOptions{DTypes: []spec.DType{spec.Float32}, Dims: []int{16}, Causal: []bool{false, true}, Dirs: []Dir{Fwd}, N: 32, Tokens: 32, Hidden: 16,
		Bench: BenchOptions{Warmup: 1, MinWarmup: -1, Iters: 2}, MaxCandidates: 3, Budget: 300 * time.Millisecond, Reference: testRef,
		Progress: func(TuneEvent) { time.Sleep(400 * time.Millisecond) }}
	rs, err := b.Tune(context.Background(), o)
	if !errors.Is(err, ErrTuneBudget) {
		t.Fatalf("err %v, want ErrTuneBudget", err)
	}
	if len(rs) != 1 || rs[0].Tried != 1 || rs[0].Candidates != 3 || rs[0].Winner != rs[0].Default || rs[0].Err != nil || rs[0].Key.Causal {
		t.Errorf("results %+v", rs)
	}
}

// TestFlashCMFamily exercises the flash_cm stage on a synthetic H200-like
// backend (no device: the probe's layout is preset): default, candidates,
// checks, and a tuned tile applied by the plan, an invalid one ignored.
func TestFlashCMFamily(t *testing.T) {
	l, err := ParseCMProbe(nvidiaProbe(32), shape16, 32)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := syntheticBackend(t, h200Info(), "", l)
	f := tunableByName(shaders.KernelFlashCM)
	p := TuneProblem(64, 64, 2048, 16384, 2048, false)
	if !b.planUses(ctx, p, spec.Float16, Fwd, f.Name) || b.planUses(ctx, p, spec.Float32, Fwd, f.Name) {
		t.Error("flash_cm: want planned for f16, not f32")
	}
	if b.planUses(ctx, p, spec.Float16, Fwd, "flash") || !b.planUses(ctx, p, spec.Float32, Fwd, "flash") {
		t.Error("flash: want planned for f32 only")
	}
	def, err := f.Default(ctx, b, p, spec.Float16)
	if err != nil || def.String() != "nsg8-bc128-mode1-pf1" {
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
		if c.(cmTile).Mode != 0 {
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
	p256 := TuneProblem(256, 256, 2048, 16384, 2048, false)
	ls, err = bt.Launches(ctx, p256, spec.Float16, false)
	if err != nil || len(ls) != 1 || ls[0].Source != SourceDefault {
		t.Errorf("invalid tuned tile: %+v, %v", ls, err)
	}
	if w := bt.TuneWarnings(); len(w) != 1 || !strings.Contains(w[0], "nsg8-bc128-mode1-pf1") || !strings.Contains(w[0], "shared memory") {
		t.Errorf("warnings %q", w)
	}
}
