package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/sbinet/npyio/npy"
	"github.com/x448/float16"
)

// flashvk runs the command line in-process and returns the exit status,
// stdout and stderr.
func flashvk(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := newApp(&out, &errb).execute(context.Background(), args)
	if strings.Contains(errb.String(), "internal error") || strings.Contains(errb.String(), "goroutine ") {
		t.Fatalf("flashvk %s: panicked:\n%s", strings.Join(args, " "), errb.String())
	}
	return code, out.String(), errb.String()
}

// mustRun runs flashvk and fails the test on a non-zero status.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := flashvk(t, args...)
	if code != 0 {
		t.Fatalf("flashvk %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

func td(name string) string { return filepath.Join("testdata", name) }

// skipWithoutVulkan skips t (or, with FLASHVK_REQUIRE_VULKAN=1, fails it)
// when there is no Vulkan device, saying why.
func skipWithoutVulkan(t *testing.T) {
	t.Helper()
	if _, err := attention.Devices(attention.Config{}); err != nil {
		if os.Getenv("FLASHVK_REQUIRE_VULKAN") == "1" {
			t.Fatalf("FLASHVK_REQUIRE_VULKAN=1 but no Vulkan device: %v", err)
		}
		t.Skipf("no Vulkan device (set FLASHVK_REQUIRE_VULKAN=1 to fail instead): %v", err)
	}
}

func TestHelpEverywhere(t *testing.T) {
	for _, cmd := range [][]string{{}, {"devices"}, {"run"}, {"bench"}, {"compare"}, {"report"}, {"explain"}, {"tune"}} {
		out := mustRun(t, append(cmd, "--help")...)
		if !strings.Contains(out, "Usage:") {
			t.Errorf("flashvk %v --help: no usage:\n%s", cmd, out)
		}
	}
	if out := mustRun(t, "--version"); !strings.HasPrefix(out, "flashvk ") {
		t.Errorf("--version: %q", out)
	}
	if out := mustRun(t, "run", "--help"); !strings.Contains(out, "2e-3") || !strings.Contains(out, "1e-5") {
		t.Errorf("run --help does not state the tolerances:\n%s", out)
	}
}

func TestDevices(t *testing.T) {
	out := mustRun(t, "devices")
	if !regexp.MustCompile(`(?m)^-\s+cpu\s`).MatchString(out) {
		t.Errorf("devices: no cpu row:\n%s", out)
	}
	gpus, err := attention.Devices(attention.Config{})
	if os.Getenv("FLASHVK_REQUIRE_VULKAN") == "1" && len(gpus) == 0 {
		t.Fatalf("FLASHVK_REQUIRE_VULKAN=1 but no Vulkan device: %v", err)
	}
	for _, g := range gpus {
		if !strings.Contains(out, g.Name) {
			t.Errorf("devices: %q missing:\n%s", g.Name, out)
		}
	}
	if len(gpus) == 0 && !strings.Contains(out, "note: no Vulkan device") {
		t.Errorf("devices without Vulkan: no note:\n%s", out)
	}

	var rep devicesReport
	if err := json.Unmarshal([]byte(mustRun(t, "devices", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	var names []string
	hasCPU := false
	for _, d := range rep.Devices {
		names = append(names, d.Name)
		hasCPU = hasCPU || (d.Backend == "cpu" && d.Runnable)
	}
	if !hasCPU || len(rep.Devices) != len(gpus)+1 {
		t.Errorf("devices --json: %v, want %d Vulkan devices and a runnable cpu", names, len(gpus))
	}
	for _, g := range gpus {
		if strings.Contains(g.Name, "llvmpipe") && !strings.Contains(strings.Join(names, "|"), "llvmpipe") {
			t.Errorf("devices --json: llvmpipe missing: %v", names)
		}
	}
}

// A Vulkan-less machine: only the CPU row and a note, exit 0.
func TestDevicesNoVulkan(t *testing.T) {
	var out, errb bytes.Buffer
	a := newApp(&out, &errb)
	a.gpus = func() ([]attention.DeviceInfo, error) { return nil, fmt.Errorf("no loader: %w", attention.ErrBackend) }
	if code := a.execute(context.Background(), []string{"devices"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "Go CPU backend") || !strings.Contains(out.String(), "note: no Vulkan device") {
		t.Errorf("devices without Vulkan:\n%s", out.String())
	}
}

func TestRunCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"fp32", []string{"--seq", "64", "--heads", "2", "--dim", "32"}},
		{"fp32-causal-gqa-bwd", []string{"-b", "2", "--heads", "4", "--kv-heads", "2", "--seq", "48", "--dim", "16", "--causal", "--backward"}},
		{"fp16-causal-gqa-bwd", []string{"-b", "2", "--heads", "4", "--kv-heads", "1", "--seq", "40", "--dim", "32", "--dtype", "float16", "--causal", "--backward"}},
		{"fp16-bottom-right-bhsd", []string{"--heads", "6", "--kv-heads", "3", "--nq", "40", "--nk", "24", "--dim", "16", "--dv", "8",
			"--dtype", "fp16", "--causal", "--align", "bottom-right", "--layout", "bhsd", "--backward"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := mustRun(t, append([]string{"run", "--backend", "cpu", "--check"}, tc.args...)...)
			if !strings.Contains(out, "\nPASS\n") || strings.Contains(out, "FAIL") {
				t.Errorf("no PASS:\n%s", out)
			}
			for _, o := range []string{"o ", "lse "} {
				if !strings.Contains(out, "\n"+o) {
					t.Errorf("no %q row:\n%s", o, out)
				}
			}
		})
	}
}

func TestRunJSON(t *testing.T) {
	out := mustRun(t, "run", "--backend", "cpu", "--seq", "32", "--heads", "2", "--dim", "16", "--check", "--backward", "--json")
	var rep runReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !rep.Pass || len(rep.Results) != 1 || len(rep.Results[0].Check) != 5 || rep.Problem.Nq != 32 {
		t.Errorf("run --json: %+v", rep)
	}
}

// loadF64 reads an .npy file written by numpy in float64.
func loadF64(t *testing.T, path string) []float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var x []float64
	if err := npy.Read(f, &x); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return x
}

func loadOut(t *testing.T, path string) ([]int, []float64) {
	t.Helper()
	a, err := readNpy(path)
	if err != nil {
		t.Fatal(err)
	}
	var x []float64
	switch d := a.Data.(type) {
	case []float32:
		for _, v := range d {
			x = append(x, float64(v))
		}
	case []float16.Float16:
		for _, v := range d {
			x = append(x, float64(v.Float32()))
		}
	}
	return a.Shape, x
}

// O from .npy inputs matches the numpy float64 attention of gen.py.
func TestRunNpy(t *testing.T) {
	for _, tc := range []struct {
		name           string
		args           []string
		expected       string
		shape          []int
		absTol, relTol float64
	}{
		{"fp32", []string{"--q", td("q.npy"), "--k", td("k.npy"), "--v", td("v.npy"), "--do", td("do.npy")}, "o_expected.npy", []int{2, 20, 4, 16}, 1e-5, 1e-5},
		{"fp32-causal-br", []string{"--q", td("q.npy"), "--k", td("k.npy"), "--v", td("v.npy"), "--do", td("do.npy"), "--causal", "--align", "bottom-right"},
			"o_causal_br_expected.npy", []int{2, 20, 4, 16}, 1e-5, 1e-5},
		{"fp32-bhsd", []string{"--q", td("q_bhsd.npy"), "--k", td("k_bhsd.npy"), "--v", td("v_bhsd.npy"), "--layout", "bhsd"},
			"o_bhsd_expected.npy", []int{2, 4, 20, 16}, 1e-5, 1e-5},
		{"fp16", []string{"--q", td("q16.npy"), "--k", td("k16.npy"), "--v", td("v16.npy")}, "o16_expected.npy", []int{2, 20, 4, 16}, 2e-3, 2e-3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := mustRun(t, append([]string{"run", "--backend", "cpu", "--check", "--backward", "--out", dir}, tc.args...)...)
			if !strings.Contains(out, "PASS") {
				t.Errorf("no PASS:\n%s", out)
			}
			a, err := readNpy(filepath.Join(dir, "o.npy"))
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{true: "float16", false: "float32"}[tc.name == "fp16"]; a.DType.String() != want {
				t.Errorf("o.npy dtype %s, want %s", a.DType, want)
			}
			shape, got := loadOut(t, filepath.Join(dir, "o.npy"))
			if !equalInts(shape, tc.shape) {
				t.Fatalf("o.npy shape %v, want %v", shape, tc.shape)
			}
			want := loadF64(t, td(tc.expected))
			compareClose(t, got, want, tc.absTol, tc.relTol)
			for _, f := range []string{"lse.npy", "dq.npy", "dk.npy", "dv.npy"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Error(err)
				}
			}
			if tc.name == "fp32" {
				_, lse := loadOut(t, filepath.Join(dir, "lse.npy"))
				compareClose(t, lse, loadF64(t, td("lse_expected.npy")), 1e-5, 1e-5)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// compareClose checks max |got−want| ≤ absTol and the relative L2 error.
func compareClose(t *testing.T, got, want []float64, absTol, relTol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	var num, den, maxAbs float64
	for i := range got {
		d := got[i] - want[i]
		num += d * d
		den += want[i] * want[i]
		maxAbs = max(maxAbs, math.Abs(d))
	}
	rel := math.Sqrt(num / den)
	if maxAbs > absTol || rel > relTol || math.IsNaN(rel) {
		t.Errorf("max_abs %.3g (tol %g), rel_l2 %.3g (tol %g)", maxAbs, absTol, rel, relTol)
	}
}

// Bad files are refused with one line naming the file.
func TestRunBadFiles(t *testing.T) {
	q, k, v := td("q.npy"), td("k.npy"), td("v.npy")
	for _, tc := range []struct {
		name    string
		args    []string
		file    string
		message string
	}{
		{"truncated", []string{"--q", td("truncated.npy"), "--k", k, "--v", v}, "truncated.npy", "truncated"},
		{"int32", []string{"--q", q, "--k", td("int32.npy"), "--v", v}, "int32.npy", "int32"},
		{"float64", []string{"--q", q, "--k", k, "--v", td("float64.npy")}, "float64.npy", "float64"},
		{"head dim", []string{"--q", q, "--k", td("k_baddim.npy"), "--v", v}, "k_baddim.npy", "head dim"},
		{"seq", []string{"--q", q, "--k", k, "--v", td("v_badseq.npy")}, "v_badseq.npy", "sequence length"},
		{"heads", []string{"--q", q, "--k", td("k_badheads.npy"), "--v", v}, "k_badheads.npy", "heads"},
		{"not 4-D", []string{"--q", td("not4d.npy"), "--k", k, "--v", v}, "not4d.npy", "4 dimensions"},
		{"garbage", []string{"--q", td("garbage.npy"), "--k", k, "--v", v}, "garbage.npy", "not a valid .npy"},
		{"missing", []string{"--q", td("nope.npy"), "--k", k, "--v", v}, "nope.npy", "no such file"},
		{"mixed dtypes", []string{"--q", td("q16.npy"), "--k", k, "--v", v}, "k.npy", "dtype"},
		{"dO shape", []string{"--q", q, "--k", k, "--v", v, "--do", k, "--backward"}, "k.npy", "want O's"},
		{"bhsd mismatch", []string{"--q", q, "--k", k, "--v", v, "--layout", "bhsd"}, "k.npy", "divide"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := flashvk(t, append([]string{"run", "--backend", "cpu"}, tc.args...)...)
			if code == 0 {
				t.Fatalf("accepted:\n%s", out)
			}
			lines := strings.Split(strings.TrimSpace(errs), "\n")
			if !strings.HasPrefix(lines[0], "flashvk: ") || !strings.Contains(lines[0], tc.file) || !strings.Contains(lines[0], tc.message) {
				t.Errorf("error %q: want one line naming %s and saying %q", errs, tc.file, tc.message)
			}
			if len(lines) != 1 {
				t.Errorf("error is %d lines:\n%s", len(lines), errs)
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.json")
	if err := os.WriteFile(empty, []byte(`{"schema":"other/1"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"nosuch"},
		{"run", "--nosuch"},
		{"run", "--heads", "0"},
		{"run", "--seq", "abc"},
		{"run", "--seq", "-5"},
		{"run", "--dim", "1000"},
		{"run", "--heads", "4", "--kv-heads", "3"},
		{"run", "--dtype", "int8"},
		{"run", "--layout", "nchw"},
		{"run", "--align", "middle"},
		{"run", "--scale", "NaN"},
		{"run", "--backend", "tpu"},
		{"run", "--backend", "cpu", "--device", "0"},
		{"run", "--seq", "10000000", "--heads", "1000"},
		{"run", "--seq", "100000", "--heads", "1", "--dim", "8", "--check"},
		{"run", "--q", "a.npy"},
		{"run", "--do", "a.npy"},
		{"run", "extra-arg"},
		{"bench", "--causal", "maybe"},
		{"bench", "--iters", "0"},
		{"bench", "--dim", "x"},
		{"bench", "--seq", "0"},
		{"bench", "--progress", "fancy"},
		{"bench", "--dtype", "bf8"},
		{"explain", "--device-preset", "a100"},
		{"explain", "--peak-tflops", "100"},
		{"compare", "one.json"},
		{"compare", "missing1.json", "missing2.json"},
		{"compare", empty, empty},
		{"compare", td("q.npy"), td("k.npy")},
		{"report", empty},
		{"report", empty, "-o", filepath.Join(t.TempDir(), "r.html")},
		{"devices", "extra"},
	} {
		code, out, errs := flashvk(t, args...)
		if code == 0 {
			t.Errorf("flashvk %s: accepted:\n%s", strings.Join(args, " "), out)
			continue
		}
		if !strings.HasPrefix(errs, "flashvk: ") || strings.Count(errs, "\n") != 1 {
			t.Errorf("flashvk %s: error %q is not one line starting with \"flashvk: \"", strings.Join(args, " "), errs)
		}
	}
}

// tinyBench runs a fast grid and returns the results file.
func tinyBench(t *testing.T, path string, extra ...string) *ResultsFile {
	t.Helper()
	return benchInto(t, path, append([]string{"bench", "--backend", "cpu", "--seq", "32,64", "--dim", "16", "--tokens", "64", "--hidden", "32",
		"--warmup", "0", "--iters", "3", "--progress", "lines"}, extra...)...)
}

// benchInto runs flashvk args (a bench) with --json path and returns the
// results it wrote.
func benchInto(t *testing.T, path string, args ...string) *ResultsFile {
	t.Helper()
	mustRun(t, append(args, "--json", path)...)
	f, err := readResults(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestBench(t *testing.T) {
	dir := t.TempDir()
	f := tinyBench(t, filepath.Join(dir, "a.json"), "--backward", "--check")
	if f.Schema != SchemaV1 || f.Tool != "flashvk" || f.Version == "" || f.Device.Backend != "cpu" {
		t.Errorf("header: %+v", f)
	}
	if len(f.Results) != 2*2*2 { // N × causal × direction
		t.Fatalf("%d results, want 8", len(f.Results))
	}
	for _, r := range f.Results {
		if r.Launch == nil || r.Launch.Kernel != "cpu" || !strings.Contains(r.Launch.Tile, "per worker") {
			t.Errorf("cpu result without its launch (tile): %+v", r.Launch)
		}
		if r.MedianMS <= 0 || r.P10MS > r.MedianMS || r.MedianMS > r.P90MS || r.TFLOPS <= 0 || r.Iters != 3 || r.Clock != "wall" ||
			r.Device == nil || r.D != 16 || r.H != 2 || r.B*r.Nq != 64 || r.Kernel == "" {
			t.Errorf("bad result %+v", r)
		}
		if r.RelL2 == nil || float64(*r.RelL2) > 2e-3 {
			t.Errorf("%s N=%d: rel_l2 %v", r.Direction, r.Nq, r.RelL2)
		}
	}

	// benchfmt lines for benchstat.
	out := mustRun(t, "bench", "--backend", "cpu", "--seq", "32", "--dim", "16", "--tokens", "32", "--hidden", "32", "--causal=true",
		"--warmup", "0", "--iters", "2", "--progress", "none", "--benchfmt")
	re := regexp.MustCompile(`(?m)^BenchmarkAttention/fwd/fp16/d16/N32/causal/B1H2-\d+\t2\t\d+ ns/op\t[0-9.e+-]+ TFLOP/s$`)
	if !re.MatchString(out) || !strings.Contains(out, "device: ") {
		t.Errorf("benchfmt:\n%s", out)
	}

	// The table, and a bare --causal.
	out = mustRun(t, "bench", "--backend", "cpu", "--seq", "32", "--dim", "16", "--tokens", "32", "--hidden", "16", "--causal",
		"--dtype", "float32", "--warmup", "0", "--iters", "2", "--progress", "none")
	if !strings.Contains(out, "TFLOP/s") || !strings.Contains(out, "fp32") || strings.Contains(out, "false") {
		t.Errorf("table:\n%s", out)
	}
}

func TestCompareAndReport(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.json")
	f := tinyBench(t, a, "--causal=false", "--check")
	// b.json: the same grid, twice as fast, from "another tool".
	f.Tool = "torch"
	f.Device = DeviceInfo{Name: "Fake GPU", Driver: "1.0", Backend: "cuda"}
	for i := range f.Results {
		f.Results[i].TFLOPS *= 2
		f.Results[i].Device = nil
		f.Results[i].Launch = &Launch{Grid: []int{4, 2, 1}, Workgroup: []int{128, 1, 1}, SharedBytes: 16384, Tile: "Br=64 Bc=64"}
		f.Results[i].Launches = nil // "another tool" writes only the main launch
	}
	b := filepath.Join(dir, "b.json")
	if err := writeResults(b, nil, f); err != nil {
		t.Fatal(err)
	}

	md := mustRun(t, "compare", a, b)
	if !strings.Contains(md, "| a.json TFLOP/s | b.json TFLOP/s | ×b.json |") || strings.Count(md, "| 2.00 |") < 3 {
		t.Errorf("compare markdown:\n%s", md)
	}
	plain := mustRun(t, "compare", a, b, "--format", "plain")
	if !strings.Contains(plain, "geomean") || strings.Contains(plain, "|") {
		t.Errorf("compare plain:\n%s", plain)
	}

	html := filepath.Join(dir, "report.html")
	mdPath := filepath.Join(dir, "report.md")
	mustRun(t, "report", a, b, "-o", html, "--markdown", mdPath)
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	for _, want := range []string{"<svg", "forward, d = 16, non-causal", "Fake GPU", "Go CPU backend", "Errors against the float64 reference",
		"Launch configuration", "Br=64 Bc=64", "16384", "Memory traffic", "</html>"} {
		if !strings.Contains(s, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(s, "<?xml") || strings.Contains(s, "src=\"http") || strings.Contains(s, "<script") {
		t.Error("report.html is not self-contained inline HTML")
	}
	m, err := os.ReadFile(mdPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m), "report-fwd-d16-non-causal.svg") {
		t.Errorf("report.md:\n%s", m)
	}
	if _, err := os.Stat(filepath.Join(dir, "report-fwd-d16-non-causal.svg")); err != nil {
		t.Error(err)
	}
}

func TestExplain(t *testing.T) {
	var an analysis
	out := mustRun(t, "explain", "-b", "1", "--heads", "2", "--seq", "64", "--dim", "16", "--json")
	if err := json.Unmarshal([]byte(out), &an); err != nil {
		t.Fatal(err)
	}
	const B, H, N, d = 1, 2, 64, 16
	if an.FlashElems != 4*B*H*N*d || an.NaiveElems != 4*B*H*N*N+4*B*H*N*d || an.FlashBytes != 2*an.FlashElems ||
		an.Flops != 4*B*H*N*N*d || an.Ridge != 0 {
		t.Errorf("explain: %+v", an)
	}
	out = mustRun(t, "explain", "--seq", "4096", "--dim", "128", "--heads", "16", "--causal", "--device-preset", "h200")
	for _, want := range []string{"ridge point 183.7 FLOP/byte", "naive: memory-bound", "flash: compute-bound",
		"launch configuration", "halved: causal"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	out = mustRun(t, "explain", "--peak-tflops", "100", "--bandwidth-gbs", "1000")
	if !strings.Contains(out, "ridge point 100.0 FLOP/byte") {
		t.Errorf("explain with peak flags:\n%s", out)
	}
}

// --device all runs every Vulkan device and the CPU; devices whose
// backend is not available are skipped with a note.
func TestDeviceAll(t *testing.T) {
	code, out, errs := flashvk(t, "run", "--device", "all", "--seq", "16", "--heads", "2", "--dim", "8", "--check")
	if code != 0 {
		t.Fatalf("exit %d:\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "Go CPU backend") || !strings.Contains(out, "PASS") {
		t.Errorf("run --device all:\n%s", out)
	}
	gpus, _ := attention.Devices(attention.Config{})
	for _, g := range gpus {
		ran := strings.Contains(out, g.Name)
		if !ran && (os.Getenv("FLASHVK_REQUIRE_VULKAN") == "1" || !strings.Contains(errs, "skipping")) {
			t.Errorf("run --device all did not run on %s:\n%s\n%s", g.Name, out, errs)
		}
	}
	path := filepath.Join(t.TempDir(), "all.json")
	mustRun(t, "bench", "--device", "all", "--seq", "16", "--dim", "8", "--tokens", "16", "--hidden", "16", "--causal=false", "--dtype", "float32",
		"--iters", "2", "--warmup", "0", "--progress", "none", "--json", path)
	f, err := readResults(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Results {
		if r.Device == nil || r.Device.Name == "" {
			t.Errorf("result without device: %+v", r)
		}
	}
}

func TestNpyRoundTrip(t *testing.T) {
	dir := t.TempDir()
	h := []float16.Float16{float16.Fromfloat32(1.5), float16.Fromfloat32(-2), float16.Fromfloat32(0.1), 0, 0, 0}
	p := filepath.Join(dir, "h.npy")
	if err := writeNpy(p, []int{1, 2, 1, 3}, h); err != nil {
		t.Fatal(err)
	}
	a, err := readNpy(p)
	if err != nil {
		t.Fatal(err)
	}
	if !equalInts(a.Shape, []int{1, 2, 1, 3}) || a.Data.([]float16.Float16)[2] != h[2] {
		t.Errorf("round trip: %+v", a)
	}
	if err := writeNpy(p, []int{2, 2}, h); err == nil {
		t.Error("writeNpy accepted a shape that does not match")
	}
	if _, err := readNpy(td("int32.npy")); err == nil || !strings.Contains(err.Error(), "int32.npy") {
		t.Errorf("int32: %v", err)
	}
	var pe *os.PathError
	if _, err := readNpy(filepath.Join(dir, "none.npy")); err == nil || errors.As(err, &pe) {
		t.Errorf("missing file: %v", err)
	}
}

// TestExplainRatesFinite: roofline rates that are not finite, or whose
// ridge point is not, are usage errors (they printed +Inf and failed
// writing the JSON).
func TestExplainRatesFinite(t *testing.T) {
	for _, rates := range [][]string{{"Inf", "10"}, {"NaN", "10"}, {"100", "+Inf"}, {"1e300", "1e-300"}} {
		args := []string{"explain", "--backend", "cpu", "--seq", "16", "--dim", "8", "--heads", "2",
			"--peak-tflops", rates[0], "--bandwidth-gbs", rates[1], "--json"}
		code, out, errs := flashvk(t, args...)
		if code != 2 || !strings.Contains(errs, "finite") || out != "" {
			t.Errorf("flashvk %s: exit %d, %q %q; want exit 2 naming finite rates", strings.Join(args, " "), code, errs, out)
		}
	}
}

// TestBenchDuplicatePoints: a value given twice in a list (or two names of
// one dtype) runs its points once — compare would keep only one of two
// identical results.
func TestBenchDuplicatePoints(t *testing.T) {
	f := benchInto(t, filepath.Join(t.TempDir(), "dup.json"), "bench", "--backend", "cpu", "--seq", "16,16", "--dim", "8,8",
		"--dtype", "f16,fp16", "--heads", "2", "--batch", "1", "--causal", "false", "--warmup", "0", "--iters", "2", "--progress", "none")
	if len(f.Results) != 1 {
		t.Errorf("%d results, want 1: %+v", len(f.Results), f.Results)
	}
}
