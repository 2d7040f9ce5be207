package vkattn

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/reference"
)

func testDeviceKey() DeviceKey {
	return DeviceKey{Name: "synthetic H200", VendorID: 0x10de, DeviceID: 0x2335, Driver: "NVIDIA 580.65.06", DriverVersion: "580.65.6",
		PipelineCacheUUID: "00112233445566778899aabbccddeeff"}
}

func testEntry(dev DeviceKey, fam string, d int, causal bool, n int, cand string) TuneEntry {
	return TuneEntry{Device: dev, Key: TuneKey{Family: fam, Dir: DirFwd, DType: "f32", D: d, DV: d, Causal: causal},
		N: n, Candidate: cand, Default: "wg64-br64-bc16", MedianMS: 1, DefaultMS: 1.5}
}

func TestDeviceKeyOf(t *testing.T) {
	info := device.Info{Name: "X", VendorID: 1, DeviceID: 2, DriverName: "drv", DriverInfo: "1.2 (foo)", DriverVersion: "1.2.0"}
	k := DeviceKeyOf(info)
	if k.Driver != "drv 1.2 (foo)" || k.PipelineCacheUUID != "" || k.Name != "X" || k.VendorID != 1 || k.DeviceID != 2 {
		t.Errorf("DeviceKeyOf = %+v", k)
	}
	info.PipelineCacheUUID[0] = 0xab
	if k2 := DeviceKeyOf(info); k2.PipelineCacheUUID != "ab000000000000000000000000000000" || k2 == k {
		t.Errorf("with UUID: %+v", k2)
	}
}

// TestTuneKeyMatching: entries apply only to their device and driver and
// to their exact key; among sequence lengths the nearest (log scale) wins.
func TestTuneKeyMatching(t *testing.T) {
	dev := testDeviceKey()
	other := dev
	other.DriverVersion = "590.1.0"
	otherUUID := dev
	otherUUID.PipelineCacheUUID = "ff112233445566778899aabbccddeeff"
	c := &TuneCache{}
	c.Put(testEntry(dev, "flash", 64, false, 512, "wg64-br32-bc32"))
	c.Put(testEntry(dev, "flash", 64, false, 4096, "wg128-br64-bc16"))
	c.Put(testEntry(dev, "flash", 64, true, 2048, "wg32-br16-bc16"))
	c.Put(testEntry(other, "flash", 64, false, 2048, "wg256-br64-bc64"))
	c.Put(testEntry(otherUUID, "flash", 64, false, 2048, "wg256-br64-bc64"))
	c.Put(testEntry(dev, "flash", 64, false, 512, "wg64-br16-bc32")) // replaces the first
	if len(c.Entries) != 5 {
		t.Fatalf("%d entries after Put, want 5 (same device, key and N replaces)", len(c.Entries))
	}
	ts := &tuneState{entries: c.ForDevice(dev)}
	if len(ts.entries) != 3 {
		t.Fatalf("ForDevice: %d entries, want 3 (driver version and pipeline cache UUID must match)", len(ts.entries))
	}
	key := TuneKey{Family: "flash", Dir: DirFwd, DType: "f32", D: 64, DV: 64}
	for _, tc := range []struct {
		nq   int
		want string
	}{{1, "wg64-br16-bc32"}, {512, "wg64-br16-bc32"}, {1024, "wg64-br16-bc32"}, {1440, "wg64-br16-bc32"},
		{1500, "wg128-br64-bc16"}, {4096, "wg128-br64-bc16"}, {65536, "wg128-br64-bc16"}} {
		if got, _, ok := ts.lookup(key, tc.nq); !ok || got != tc.want {
			t.Errorf("Nq=%d: lookup = %q, %v; want %q", tc.nq, got, ok, tc.want)
		}
	}
	// Equidistant (1024 and 4096 around 2048 in log2): the larger N wins.
	ts2 := &tuneState{entries: []TuneEntry{testEntry(dev, "flash", 64, false, 1024, "a"), testEntry(dev, "flash", 64, false, 4096, "b")}}
	if got, _, _ := ts2.lookup(key, 2048); got != "b" {
		t.Errorf("tie: %q, want the larger N's", got)
	}
	for name, k := range map[string]TuneKey{
		"other d":      {Family: "flash", Dir: DirFwd, DType: "f32", D: 128, DV: 128},
		"other dv":     {Family: "flash", Dir: DirFwd, DType: "f32", D: 64, DV: 32},
		"other dtype":  {Family: "flash", Dir: DirFwd, DType: "f16", D: 64, DV: 64},
		"other family": {Family: "flash_cm", Dir: DirFwd, DType: "f32", D: 64, DV: 64},
		"other dir":    {Family: "flash", Dir: DirBwd, DType: "f32", D: 64, DV: 64},
	} {
		if got, _, ok := ts.lookup(k, 2048); ok {
			t.Errorf("%s: matched %q", name, got)
		}
	}
	ck := key
	ck.Causal = true
	if got, _, _ := ts.lookup(ck, 100000); got != "wg32-br16-bc16" {
		t.Errorf("causal: %q", got)
	}
	// The tuner's override wins over the cache.
	ts.setOverride(key, "forced")
	if got, e, _ := ts.lookup(key, 512); got != "forced" || e != nil {
		t.Errorf("override: %q", got)
	}
	ts.clearOverrides()
	if got, _, _ := ts.lookup(key, 512); got != "wg64-br16-bc32" {
		t.Errorf("after clearOverrides: %q", got)
	}
}

func TestTuneCacheRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", TuneCacheName) // directories are created
	c := &TuneCache{Tool: "test"}
	c.Put(testEntry(testDeviceKey(), "flash", 64, false, 2048, "wg64-br16-bc32"))
	e := testEntry(testDeviceKey(), "flash_cm", 128, true, 2048, "nsg8-bc64-mode1-pf1")
	e.Key.DType = "f16"
	c.Put(e)
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := LoadTuneCache(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != TuneCacheVersion || !reflect.DeepEqual(got.Entries, c.Entries) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, c)
	}
	if sp := got.Entries[0].Speedup(); sp != 1.5 {
		t.Errorf("Speedup = %v", sp)
	}
	// Missing file: empty, no error.
	if c, err := LoadTuneCache(filepath.Join(t.TempDir(), "none.json")); err != nil || len(c.Entries) != 0 {
		t.Errorf("missing file: %v, %v", c, err)
	}
}

func TestTuneCacheVersionAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"other version": `{"version": 2, "entries": [{"candidate": "x"}]}`,
		"no version":    `{"entries": []}`,
		"corrupt":       `{"version": 1, "entries": [`,
		"garbage":       "\x00\x01not json",
		"wrong types":   `{"version": 1, "entries": {"a": 1}}`,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadTuneCache(path)
		if !errors.Is(err, ErrTuneCache) {
			t.Errorf("%s: err %v, want ErrTuneCache", name, err)
		}
		if c == nil || len(c.Entries) != 0 || c.Version != TuneCacheVersion {
			t.Errorf("%s: cache %+v, want an empty one", name, c)
		}
	}
	// Malformed entries are dropped, the rest kept.
	path := filepath.Join(dir, "partial.json")
	os.WriteFile(path, []byte(`{"version": 1, "entries": [{"key": {"family": "flash", "d": 64, "dv": 64}, "n": 2048, "candidate": "wg64-br16-bc32"}, {"n": 0}]}`), 0o644)
	if c, err := LoadTuneCache(path); err != nil || len(c.Entries) != 1 {
		t.Errorf("partial: %+v, %v", c, err)
	}
}

func TestTuneCacheAtomicSave(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, TuneCacheName)
	c := &TuneCache{}
	for i := range 50 {
		c.Put(testEntry(testDeviceKey(), "flash", 64, false, 1<<i%20+i, "wg64-br16-bc32"))
		if err := c.Save(path); err != nil {
			t.Fatal(err)
		}
		got, err := LoadTuneCache(path)
		if err != nil || len(got.Entries) != len(c.Entries) {
			t.Fatalf("save %d: %d entries, %v", i, len(got.Entries), err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v: temporary files left behind", names)
	}
	// A failed save (the target is a directory) leaves no temporary file
	// and does not touch what is there.
	bad := filepath.Join(dir, "isdir")
	if err := os.Mkdir(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(bad); !errors.Is(err, ErrTuneCache) {
		t.Errorf("save onto a directory: %v", err)
	}
	ents, _ = os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("after a failed save: %d entries in the directory, want 2", len(ents))
	}
	if _, err := LoadTuneCache(path); err != nil {
		t.Errorf("the good file was damaged: %v", err)
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

func TestTuneRegistry(t *testing.T) {
	var names []string
	for _, f := range TuneFamilies() {
		names = append(names, f.Dir+":"+f.Name)
	}
	for _, want := range []string{"fwd:flash", "fwd:flash_cm", "bwd:bwd_dkdv", "bwd:bwd_dq"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("registry %v lacks %s", names, want)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("duplicate registration did not panic")
			}
		}()
		registerTuneFamily(tuneFamily("flash"))
	}()
}

// TestScalarCandidates: on H200-like limits every candidate passes
// CheckConfig and the set is of a size worth timing.
func TestScalarCandidates(t *testing.T) {
	b := &Backend{lim: LimitsOf(h200Info()), info: h200Info(), cfgs: map[cfgKey]cfgResult{}}
	for _, k := range []string{shaders.KernelFlash, shaders.KernelBwdDKDV, shaders.KernelBwdDQ} {
		for _, d := range []int{64, 128, 256} {
			cs := scalarCandidates(b, k, d, d, F16)
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

// TestTuneInvalidCachedConfig: a cache naming configurations that do not
// parse or do not fit this device is ignored with warnings; the defaults
// run and results stay correct. A corrupt cache file is a warning too.
func TestTuneInvalidCachedConfig(t *testing.T) {
	dev := devicetest.Open(t)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, TuneCacheName)
	dk := DeviceKeyOf(dev.Info())
	c := &TuneCache{}
	e := testEntry(dk, "flash", 32, true, 64, "wg4096-br64-bc64") // workgroup too large everywhere
	c.Put(e)
	e = testEntry(dk, "bwd_dkdv", 32, true, 64, "not a tile")
	e.Key.Dir = DirBwd
	c.Put(e)
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	b, err := New(dev, Options{Kernel: "flash", TuneCache: path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if n := len(b.TuneInfo().Entries); n != 2 {
		t.Fatalf("%d entries for this device, want 2", n)
	}
	h := newHostProblem(3, 1, 2, 1, 40, 50, 32, 32, spec.MaskCausalBottomRight)
	for _, bwd := range []bool{false, true} {
		ls, err := b.Launches(ctx, h.p, F32, bwd)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Source != SourceDefault {
				t.Errorf("%s: source %q, want default", l.Kernel, l.Source)
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
	w := strings.Join(b.TuneInfo().Warnings, "\n")
	if !strings.Contains(w, "wg4096-br64-bc64") || !strings.Contains(w, "not a tile") {
		t.Errorf("warnings do not name the invalid configurations:\n%s", w)
	}
	if n := len(b.TuneInfo().Warnings); n != 2 {
		t.Errorf("%d warnings, want 2 (one per invalid entry, not per call):\n%s", n, w)
	}

	// A corrupt file: Open succeeds with a warning.
	if err := os.WriteFile(path, []byte("{corrupt"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logged []string
	b2, err := New(dev, Options{Kernel: "flash", TuneCache: path, Log: func(s string) { logged = append(logged, s) }})
	if err != nil {
		t.Fatalf("corrupt cache: %v", err)
	}
	defer b2.Close()
	if ti := b2.TuneInfo(); len(ti.Warnings) != 1 || !strings.Contains(ti.Warnings[0], "corrupt") || len(logged) != 1 {
		t.Errorf("corrupt cache: warnings %q, logged %q", ti.Warnings, logged)
	}
	// Off: no file, no entries.
	b3, err := New(dev, Options{Kernel: "flash", TuneCache: TuneOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b3.Close()
	if ti := b3.TuneInfo(); !ti.Off || ti.File != "" {
		t.Errorf("off: %+v", ti)
	}
	t.Setenv("FLASHVK_TUNE", "off")
	b4, err := New(dev, Options{Kernel: "flash"})
	if err != nil {
		t.Fatal(err)
	}
	defer b4.Close()
	if ti := b4.TuneInfo(); !ti.Off {
		t.Errorf("FLASHVK_TUNE=off: %+v", ti)
	}
}

// TestTuneEndToEnd tunes a tiny problem on the device (lavapipe in CI:
// two candidates per family), writes the cache, reopens a Backend on it
// and checks that the tuned configurations are the ones dispatched and
// that results still match the reference.
func TestTuneEndToEnd(t *testing.T) {
	dev := devicetest.Open(t)
	ctx := context.Background()
	b, err := New(dev, Options{Kernel: "flash", TuneCache: TuneOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const d = 32
	var events []TuneEvent
	rs, err := b.Tune(ctx, TuneOptions{DTypes: []DType{F32}, Dims: []int{d}, Causal: []bool{true}, N: 64, Tokens: 64, Hidden: 2 * d,
		Bench: BenchOptions{Warmup: 1, MinWarmup: -1, Iters: 3}, MaxCandidates: 2,
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
	path := filepath.Join(t.TempDir(), TuneCacheName)
	c := &TuneCache{}
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
		c.Put(r.Entry())
	}
	// Force a non-default winner for flash, so that the test sees a tuned
	// choice differ from the default.
	flashIdx := -1
	for i, e := range c.Entries {
		if e.Key.Family == shaders.KernelFlash {
			flashIdx = i
		}
	}
	if flashIdx < 0 {
		t.Fatal("no flash entry")
	}
	c.Entries[flashIdx].Candidate = rs[0].Events[1].Candidate
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}

	tb, err := New(dev, Options{Kernel: "flash", TuneCache: path})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if ti := tb.TuneInfo(); len(ti.Entries) != 3 || len(ti.Warnings) != 0 || ti.File != path {
		t.Fatalf("TuneInfo %+v", ti)
	}
	// Another shape of the same key (different N, B, H): the entries apply.
	h := newHostProblem(5, 2, 3, 1, 77, 101, d, d, spec.MaskCausalBottomRight)
	want := map[string]string{}
	for _, e := range c.Entries {
		want[e.Key.Family] = e.Candidate
	}
	for _, bwd := range []bool{false, true} {
		ls, err := tb.Launches(ctx, h.p, F32, bwd)
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
	ls, _ := b.Launches(ctx, h.p, F32, false)
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
	b, err := New(dev, Options{Kernel: "flash", TuneCache: TuneOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := VerifyProblem(16, 16, true)
	vc, err := b.newVerifyCase(ctx, p, F32, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer vc.close()
	e, err := vc.run(ctx, b)
	if err != nil || !(e <= verifyBound(F32, e)) {
		t.Fatalf("default configuration: rel_l2 %v, %v", e, err)
	}
	vc.ref[0][7] += 1 // a wrong output element
	if e, err := vc.run(ctx, b); err != nil || e <= verifyBound(F32, 0) {
		t.Errorf("perturbed reference: rel_l2 %v (bound %v), %v: not rejected", e, verifyBound(F32, 0), err)
	}
	if got := verifyBound(F16, 3e-4); got != 6e-4 {
		t.Errorf("verifyBound(f16, 3e-4) = %v", got)
	}
	if got := verifyBound(F16, 1e-6); got != 1.0/4096 {
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
	c, _ := b.Config(shaders.KernelFlash, 16, 16, F32)
	def = ScalarTile(c).String()
	rs, err := b.Tune(ctx, TuneOptions{DTypes: []DType{F32}, Dims: []int{16}, Causal: []bool{false}, Dirs: []string{DirFwd},
		N: 32, Tokens: 32, Hidden: 16, Bench: BenchOptions{Warmup: 1, MinWarmup: -1, Iters: 2}, MaxCandidates: 3})
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
	b := &Backend{info: info, lim: LimitsOf(info), cfgs: map[cfgKey]cfgResult{}}
	f := tuneFamily(shaders.KernelFlash)
	def, err := b.Config(shaders.KernelFlash, 64, 64, F32)
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
			if err := f.Check(context.Background(), b, p, F32, cand); err == nil || !strings.Contains(err.Error(), "lavapipe") {
				t.Errorf("Nk=%d: Check = %v, want the loop-limit refusal", nk, err)
			}
			break
		}
	}
	if !found {
		t.Fatal("no Nk separates the default from the candidate")
	}
	p.Nk = 256
	if err := f.Check(context.Background(), b, p, F32, cand); err != nil {
		t.Errorf("Nk=256: %v", err)
	}
	b.info.Name = "NVIDIA H200" // no such limit elsewhere
	p.Nk = 1 << 19
	if err := f.Check(context.Background(), b, p, F32, cand); err != nil {
		t.Errorf("non-lavapipe: %v", err)
	}
}

// TestTuneNoFamily: a pass no family covers (the minimal forward) is
// reported, not skipped silently.
func TestTuneNoFamily(t *testing.T) {
	dev := devicetest.Open(t)
	b, err := New(dev, Options{Kernel: "minimal", TuneCache: TuneOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rs, err := b.Tune(context.Background(), TuneOptions{DTypes: []DType{F32}, Dims: []int{16}, Causal: []bool{false}, Dirs: []string{DirFwd}, N: 32, Tokens: 32, Hidden: 16})
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
	b, err := New(dev, Options{Kernel: "flash", TuneCache: TuneOff})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o := TuneOptions{DTypes: []DType{F32}, Dims: []int{16}, Causal: []bool{false, true}, Dirs: []string{DirFwd}, N: 32, Tokens: 32, Hidden: 16,
		Bench: BenchOptions{Warmup: 1, MinWarmup: -1, Iters: 2}, MaxCandidates: 3, Budget: 300 * time.Millisecond,
		Progress: func(TuneEvent) { time.Sleep(400 * time.Millisecond) }}
	rs, err := b.Tune(context.Background(), o)
	if !errors.Is(err, ErrTuneBudget) {
		t.Fatalf("err %v, want ErrTuneBudget", err)
	}
	if len(rs) != 1 || rs[0].Tried != 1 || rs[0].Candidates != 3 || rs[0].Winner != rs[0].Default || rs[0].Err != nil || rs[0].Key.Causal {
		t.Errorf("results %+v", rs)
	}
}

// TestFlashCMFamily exercises the flash_cm family on a synthetic H200-like
// backend (no device: the probe's layout is preset): default, candidates,
// checks, and a tuned tile applied by Launches, an invalid one ignored.
func TestFlashCMFamily(t *testing.T) {
	l, err := ParseCMProbe(nvidiaProbe(32), shape16, 32)
	if err != nil {
		t.Fatal(err)
	}
	newB := func(l *CMLayout, entries ...TuneEntry) *Backend {
		cm := &flashCM{shape: shape16}
		cm.once.Do(func() { cm.layout = l })
		info := h200Info()
		return &Backend{info: info, lim: LimitsOf(info), kernel: shaders.KernelFlash, dtypes: []DType{F32, F16}, cm: cm,
			cfgs: map[cfgKey]cfgResult{}, tune: &tuneState{file: "test.json", entries: entries}}
	}
	ctx := context.Background()
	b := newB(l)
	f := tuneFamily(shaders.KernelFlashCM)
	p := TuneProblem(64, 64, 2048, 16384, 2048, false)
	if !f.Active(ctx, b, p, F16) || f.Active(ctx, b, p, F32) {
		t.Errorf("Active: f16 %v f32 %v, want true, false", f.Active(ctx, b, p, F16), f.Active(ctx, b, p, F32))
	}
	if fl := tuneFamily(shaders.KernelFlash); fl.Active(ctx, b, p, F16) || !fl.Active(ctx, b, p, F32) {
		t.Error("flash family: want active for f32 only")
	}
	def, err := f.Default(ctx, b, p, F16)
	if err != nil || def.String() != "nsg8-bc128-mode1-pf1" {
		t.Fatalf("Default = %v, %v", def, err)
	}
	cs, err := f.Candidates(ctx, b, p, F16)
	if err != nil || len(cs) < 10 || cs[0].String() != def.String() {
		t.Fatalf("Candidates: %d, first %v, %v", len(cs), cs, err)
	}
	for _, c := range cs {
		if err := f.Check(ctx, b, p, F16, c); err != nil {
			t.Errorf("%v: %v", c, err)
		}
		back, err := f.Parse(c.String())
		if err != nil || back != c {
			t.Errorf("Parse(%v) = %v, %v", c, back, err)
		}
	}
	if err := f.Check(ctx, b, p, F32, cs[0]); err == nil {
		t.Error("Check accepted f32")
	}
	mode0 := *l
	mode0.Mode1, mode0.Why = false, "synthetic"
	b0 := newB(&mode0)
	cs0, _ := f.Candidates(ctx, b0, p, F16)
	for _, c := range cs0 {
		if c.(cmTile).Mode != 0 {
			t.Errorf("MODE 1 candidate %v on a layout without MODE 1", c)
		}
	}
	if err := f.Check(ctx, b0, p, F16, cs[0]); err == nil {
		t.Error("Check accepted MODE 1 on a layout without it")
	}

	// A tuned tile is dispatched; an invalid one falls back with a warning.
	dev := DeviceKeyOf(h200Info())
	key := TuneKey{Family: shaders.KernelFlashCM, Dir: DirFwd, DType: "f16", D: 64, DV: 64}
	bad := key
	bad.D, bad.DV = 256, 256
	bt := newB(l, TuneEntry{Device: dev, Key: key, N: 2048, Candidate: "nsg4-bc64-mode1-pf0"},
		TuneEntry{Device: dev, Key: bad, N: 2048, Candidate: "nsg8-bc128-mode1-pf1"})
	ls, err := bt.Launches(ctx, p, F16, false)
	if err != nil || len(ls) != 1 || ls[0].Mode != "nsg4-bc64-mode1-pf0" || ls[0].Source != SourceTuned || ls[0].BR != 64 {
		t.Errorf("tuned launch %+v, %v", ls, err)
	}
	p256 := TuneProblem(256, 256, 2048, 16384, 2048, false)
	ls, err = bt.Launches(ctx, p256, F16, false)
	if err != nil || len(ls) != 1 || ls[0].Source != SourceDefault {
		t.Errorf("invalid tuned tile: %+v, %v", ls, err)
	}
	if w := bt.TuneInfo().Warnings; len(w) != 1 || !strings.Contains(w[0], "nsg8-bc128-mode1-pf1") || !strings.Contains(w[0], "shared memory") {
		t.Errorf("warnings %q", w)
	}
}
