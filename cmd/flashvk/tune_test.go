package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flashvk/flashvk/attention"
)

func TestTuneShow(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.json")
	if out := mustRun(t, "tune", "--show", "--cache", missing); !strings.Contains(out, "no entries") || !strings.Contains(out, missing) {
		t.Errorf("show of a missing cache:\n%s", out)
	}
	corrupt := filepath.Join(dir, "corrupt.json")
	os.WriteFile(corrupt, []byte("{not json"), 0o644)
	code, out, errs := flashvk(t, "tune", "--show", "--cache", corrupt)
	if code != 0 || !strings.Contains(errs, "corrupt") || !strings.Contains(out, "no entries") {
		t.Errorf("show of a corrupt cache: exit %d\n%s\n%s", code, out, errs)
	}
	c := &attention.TuneCache{}
	c.Put(attention.TuneEntry{Device: attention.DeviceKey{Name: "GPU X", VendorID: 0x10de, Driver: "drv 1"},
		Key: attention.TuneKey{Family: "flash", Dir: "fwd", DType: "f16", D: 128, DV: 128, Causal: true},
		N:   2048, Candidate: "wg128-br64-bc32", Default: "wg128-br64-bc16", MedianMS: 2, DefaultMS: 3})
	good := filepath.Join(dir, "good.json")
	if err := c.Save(good); err != nil {
		t.Fatal(err)
	}
	out = mustRun(t, "tune", "--show", "--cache", good)
	for _, want := range []string{"GPU X", "wg128-br64-bc32", "wg128-br64-bc16", "1.50×", "2048"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "options") {
		t.Errorf("show of plain entries has an options column:\n%s", out)
	}
	// An entry tuned with options: the column appears, "-" for the plain one.
	c.Put(attention.TuneEntry{Device: attention.DeviceKey{Name: "GPU X", VendorID: 0x10de, Driver: "drv 1"},
		Key: attention.TuneKey{Family: "flash", Dir: "fwd", DType: "f16", D: 128, DV: 128, Causal: true, Options: "window+softcap"},
		N:   2048, Candidate: "wg64-br32-bc32", Default: "wg128-br64-bc16", MedianMS: 4, DefaultMS: 4})
	if err := c.Save(good); err != nil {
		t.Fatal(err)
	}
	out = mustRun(t, "tune", "--show", "--cache", good)
	if !regexp.MustCompile(`options\s+family`).MatchString(out) || !regexp.MustCompile(`true\s+window\+softcap\s+flash`).MatchString(out) ||
		!regexp.MustCompile(`true\s+-\s+flash`).MatchString(out) {
		t.Errorf("show with an options entry:\n%s", out)
	}
}

func TestTuneBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"tune", "--dtype", "f64"}, {"tune", "--dim", "0"}, {"tune", "--dim", "512"}, {"tune", "--dir", "sideways"},
		{"tune", "--causal", "maybe"}, {"tune", "--seq", "0"}, {"tune", "--iters", "0"}, {"tune", "--family", "nope"},
		{"tune", "--max-candidates", "-1"}, {"tune", "--budget", "-1s"}, {"tune", "--budget", "soon"}, {"tune", "extra"},
		{"tune", "--window", "8,4", "--causal"}, {"tune", "--window", "8,4"}, {"tune", "--window", "-1,-1", "--causal", "false"},
		{"tune", "--window", "-1,0", "--causal"}, {"tune", "--window", "100,-1", "--seq", "32"}, {"tune", "--dropout", "2"},
		{"tune", "--softcap", "-1"}, {"tune", "--show", "--softcap", "30"},
	} {
		if code, _, errs := flashvk(t, args...); code != 2 {
			t.Errorf("flashvk %v: exit %d, want 2\n%s", args, code, errs)
		}
	}
	// The flags are named as on every other command: --dim and --seq.
	for _, old := range []string{"--d", "--n"} {
		if code, _, errs := flashvk(t, "tune", old, "64"); code != 2 || !strings.Contains(errs, "unknown flag: "+old) {
			t.Errorf("tune %s 64: exit %d\n%s", old, code, errs)
		}
	}
}

// TestTuneEndToEnd tunes a tiny problem on the Vulkan device, writes the
// cache, and checks that explain reports the tuned launches.
func TestTuneEndToEnd(t *testing.T) {
	skipWithoutVulkan(t)
	path := filepath.Join(t.TempDir(), "tune.json")
	args := []string{"tune", "--cache", path, "--kernel", "flash", "--dtype", "f32", "--dim", "16", "--causal", "false", "--seq", "32",
		"--tokens", "32", "--hidden", "16", "--max-candidates", "2", "--iters", "2", "--warmup", "0"}
	jsonPath := filepath.Join(t.TempDir(), "new", "tune.json") // its folder is made
	// A dry run writes no cache (so it takes no --cache): the default
	// cache, here $FLASHVK_TUNE_CACHE, stays as it is.
	t.Setenv("FLASHVK_TUNE_CACHE", path)
	code, out, errs := flashvk(t, append(append([]string{"tune"}, args[3:]...), "--dry-run", "--json", jsonPath)...)
	if code != 0 || !strings.Contains(errs, "dry run") {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("dry run wrote the cache: %v", err)
	}
	checkTuneJSON(t, jsonPath, 3)

	// --json -: the JSON on stdout instead of the table.
	out = mustRun(t, "tune", "--kernel", "flash", "--dtype", "f32", "--dim", "16", "--causal", "false", "--seq", "32", "--dir", "fwd",
		"--tokens", "32", "--hidden", "16", "--max-candidates", "2", "--iters", "2", "--dry-run", "--json", "-")
	var rep tuneReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Results) != 1 || rep.Cache != "" {
		t.Errorf("tune --json -: %v: %+v\n%s", err, rep, out)
	}
	code, out, errs = flashvk(t, args...)
	if code != 0 {
		t.Fatalf("tune: exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"(default): verified", "TFLOP/s", "wrote 3 entries to " + path} {
		if !strings.Contains(errs, want) {
			t.Errorf("tune progress lacks %q:\n%s", want, errs)
		}
	}
	for _, want := range []string{"winner", "speedup", "flash", "bwd_dkdv", "bwd_dq"} {
		if !strings.Contains(out, want) {
			t.Errorf("tune table lacks %q:\n%s", want, out)
		}
	}
	c, err := attention.LoadTuneCache(path)
	if err != nil || len(c.Entries) != 3 {
		t.Fatalf("cache: %+v, %v", c, err)
	}
	t.Setenv("FLASHVK_TUNE_CACHE", path)
	var an analysis
	if err := json.Unmarshal([]byte(mustRun(t, "explain", "--backend", "vulkan", "--seq", "40", "--dim", "16", "--heads", "1", "--dtype", "float32", "--json")), &an); err != nil {
		t.Fatal(err)
	}
	tuned := 0
	for _, l := range an.Launches {
		if l.Source == attention.SourceTuned {
			tuned++
		}
	}
	if tuned != 3 || !strings.Contains(an.Tuning, "3 tuned configurations") {
		t.Errorf("explain: %d tuned launches (want 3: flash, bwd_dkdv, bwd_dq), tuning %q: %+v", tuned, an.Tuning, an.Launches)
	}
	t.Setenv("FLASHVK_TUNE", "off")
	out = mustRun(t, "explain", "--backend", "vulkan", "--seq", "40", "--dim", "16", "--heads", "1", "--dtype", "float32")
	if regexp.MustCompile(`(?m)\stuned\s*$`).MatchString(out) || !strings.Contains(out, "FLASHVK_TUNE=off") {
		t.Errorf("explain with FLASHVK_TUNE=off:\n%s", out)
	}
}

// TestTuneOptionsEndToEnd tunes a tiny problem with options on the Vulkan
// device: the entries are keyed by the options' names, and they apply to
// calls with those options only (explain).
func TestTuneOptionsEndToEnd(t *testing.T) {
	skipWithoutVulkan(t)
	path := filepath.Join(t.TempDir(), "tune.json")
	feats := []string{"--window", "8,0", "--softcap", "30", "--alibi", "--dropout", "0.1"}
	args := append([]string{"tune", "--cache", path, "--kernel", "flash", "--dtype", "f32", "--dim", "16", "--causal", "--seq", "32",
		"--tokens", "32", "--hidden", "16", "--max-candidates", "2", "--iters", "2", "--warmup", "0"}, feats...)
	code, out, errs := flashvk(t, args...)
	if code != 0 {
		t.Fatalf("tune: exit %d\n%s\n%s", code, out, errs)
	}
	const opts = "window+softcap+alibi+dropout"
	for _, want := range []string{"window=8,0 softcap=30 alibi dropout=0.1", "causal " + opts + " flash N=32", "wrote 3 entries"} {
		if !strings.Contains(errs, want) {
			t.Errorf("tune progress lacks %q:\n%s", want, errs)
		}
	}
	if !regexp.MustCompile(`options\s+family`).MatchString(out) || !strings.Contains(out, opts) {
		t.Errorf("tune table lacks the options column:\n%s", out)
	}
	c, err := attention.LoadTuneCache(path)
	if err != nil || len(c.Entries) != 3 {
		t.Fatalf("cache: %+v, %v", c, err)
	}
	for _, e := range c.Entries {
		if e.Key.Options != opts || !e.Key.Causal {
			t.Errorf("entry key %+v, want options %q", e.Key, opts)
		}
	}
	t.Setenv("FLASHVK_TUNE_CACHE", path)
	tunedLaunches := func(extra ...string) int {
		t.Helper()
		var an analysis
		args := append([]string{"explain", "--backend", "vulkan", "--seq", "40", "--dim", "16", "--heads", "1", "--dtype", "float32", "--causal", "--json"}, extra...)
		if err := json.Unmarshal([]byte(mustRun(t, args...)), &an); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range an.Launches {
			if l.Source == attention.SourceTuned {
				n++
			}
		}
		return n
	}
	if n := tunedLaunches(feats...); n != 3 {
		t.Errorf("explain with the tuned options: %d tuned launches, want 3 (flash, bwd_dkdv, bwd_dq)", n)
	}
	for _, other := range [][]string{nil, {"--softcap", "30"}, {"--window", "8,0", "--softcap", "30", "--alibi"}} {
		if n := tunedLaunches(other...); n != 0 {
			t.Errorf("explain %v: %d tuned launches, want 0 (no entry for its options)", other, n)
		}
	}
}

// checkTuneJSON reads a tune --json file and checks it holds n results
// with their candidates, on the device the engine reports.
func checkTuneJSON(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep tuneReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Schema != TuneSchema || rep.Version == "" || rep.Device.Backend != "vulkan" || rep.DeviceKey.Name == "" || rep.Cache != "" || rep.Error != "" {
		t.Errorf("tune --json header: %+v", rep)
	}
	if len(rep.Results) != n {
		t.Fatalf("tune --json: %d results, want %d: %+v", len(rep.Results), n, rep.Results)
	}
	for _, r := range rep.Results {
		if r.Key.D != 16 || r.N != 32 || r.B != 1 || r.H != 1 || r.Winner == "" || r.WinnerMS <= 0 || r.Tried < 1 || len(r.Events) < r.Tried {
			t.Errorf("tune --json result: %+v", r)
		}
		timed := 0
		for _, ev := range r.Events {
			if ev.Status == attention.TuneTimed {
				timed++
				if ev.RelL2 == nil || ev.Bound == nil || float64(*ev.RelL2) > float64(*ev.Bound) || ev.MedianMS <= 0 {
					t.Errorf("%s: timed event %+v", r.Key, ev)
				}
			}
		}
		if timed == 0 {
			t.Errorf("%s: no timed candidate: %+v", r.Key, r.Events)
		}
	}
}

// TestTuneKeepsConcurrentEntries: entries that another writer puts into
// the cache (under its lock) while a tune runs are all there after the
// tune has written its own: tune reads, merges and writes under the lock.
func TestTuneKeepsConcurrentEntries(t *testing.T) {
	skipWithoutVulkan(t)
	path := filepath.Join(t.TempDir(), "tune.json")
	done := make(chan struct{})
	var code int
	var out, errb bytes.Buffer
	go func() { // (not flashvk(t, …): no t.Fatal off the test's goroutine)
		defer close(done)
		code = newApp(&out, &errb).execute(context.Background(), []string{"tune", "--cache", path, "--kernel", "flash", "--dtype", "f32",
			"--dim", "16", "--causal", "false", "--seq", "32", "--dir", "fwd", "--tokens", "32", "--hidden", "16", "--max-candidates", "2",
			"--iters", "2", "--warmup", "0"})
	}()
	others := 0
	var werr error // the other writer's first error (the tune is waited for first)
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		if werr != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		unlock, err := attention.LockTuneCache(context.Background(), path)
		if err != nil {
			werr = err
			continue
		}
		c, err := attention.LoadTuneCache(path)
		if err == nil {
			others++
			c.Put(attention.TuneEntry{Device: attention.DeviceKey{Name: "other"}, Key: attention.TuneKey{Family: "flash", D: 64, DV: 64},
				N: others, Candidate: "x"})
			err = c.Save(path)
		}
		unlock()
		werr = err
		time.Sleep(time.Millisecond)
	}
	if werr != nil {
		t.Fatal(werr)
	}
	if code != 0 {
		t.Fatalf("tune: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	c, err := attention.LoadTuneCache(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Entries) != others+1 {
		t.Errorf("%d entries, want the tune's 1 and the other writer's %d", len(c.Entries), others)
	}
}
