package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
)

// runJSON runs flashvk run --json and decodes the report.
func runJSON(t *testing.T, args ...string) runReport {
	t.Helper()
	var rep runReport
	out := mustRun(t, append(append([]string{"run"}, args...), "--json")...)
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return rep
}

// runChecked runs flashvk run --json with base and args (for --check and
// --backward), fails t unless all five checks passed, and returns the
// JSON's problem and that problem read back.
func runChecked(t *testing.T, base, args []string) (problemJSON, problem) {
	t.Helper()
	rep := runJSON(t, slices.Concat(base, args)...)
	if !rep.Pass || len(rep.Results[0].Check) != 5 {
		t.Fatalf("run --check %s: %+v", strings.Join(args, " "), rep.Results)
	}
	p, err := readProblemJSON(rep.Problem)
	if err != nil {
		t.Fatal(err)
	}
	return rep.Problem, p
}

// run times each pass twice: the steady median of --iters calls by the
// backend's clock, and the first (checked) call by the wall clock.
func TestRunSteadyTime(t *testing.T) {
	rep := runJSON(t, "--backend", "cpu", "--seq", "32", "--heads", "2", "--dim", "16", "--backward", "--check")
	if rep.Schema != RunSchema || rep.Iters != 10 || rep.Warmup != 3 || len(rep.Results) != 1 || !rep.Pass {
		t.Fatalf("run --json: %+v", rep)
	}
	ps := rep.Results[0].Passes
	if len(ps) != 2 || ps[0].Direction != "fwd" || ps[1].Direction != "bwd" {
		t.Fatalf("passes: %+v", ps)
	}
	for _, p := range ps {
		if p.Kernel != "cpu" || p.Iters != 10 || p.Clock != "wall" || p.MedianMS <= 0 || p.P10MS > p.MedianMS || p.MedianMS > p.P90MS ||
			p.TFLOPS <= 0 || p.FirstCallMS <= 0 || p.FirstCallTFLOPS <= 0 || p.TimingError != "" {
			t.Errorf("%s: %+v", p.Direction, p)
		}
	}

	rep = runJSON(t, "--backend", "cpu", "--seq", "32", "--heads", "2", "--dim", "16", "--iters", "3", "--warmup", "1")
	if p := rep.Results[0].Passes; len(p) != 1 || p[0].Iters != 3 || rep.Warmup != 1 {
		t.Errorf("--iters 3: %+v", rep)
	}
	// --warmup 0 runs the library's 3 warm-up calls, and says so.
	rep = runJSON(t, "--backend", "cpu", "--seq", "32", "--heads", "2", "--dim", "16", "--iters", "2", "--warmup", "0")
	if rep.Warmup != 3 {
		t.Errorf("--warmup 0: recorded %d, want the 3 run", rep.Warmup)
	}
	// --iters 0: the first call only.
	rep = runJSON(t, "--backend", "cpu", "--seq", "32", "--heads", "2", "--dim", "16", "--iters", "0")
	if p := rep.Results[0].Passes[0]; p.Iters != 0 || p.MedianMS != 0 || p.Clock != "" || p.FirstCallMS <= 0 {
		t.Errorf("--iters 0: %+v", p)
	}

	out := mustRun(t, "run", "--backend", "cpu", "--seq", "32", "--heads", "2", "--dim", "16", "--backward", "--check", "--iters", "2")
	for _, want := range []string{"time", "TFLOP/s", "first call", "median of 2 timed calls after warm-up (cpu: host wall clock around each call)",
		"incl. transfers and pipeline creation"} {
		if !strings.Contains(out, want) {
			t.Errorf("run lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(out, "\nPASS\n") {
		t.Errorf("run --check does not end in PASS:\n%s", out)
	}
	out = mustRun(t, "run", "--backend", "cpu", "--seq", "32", "--heads", "2", "--dim", "16", "--iters", "0")
	if !strings.Contains(out, "not measured (--iters 0)") {
		t.Errorf("run --iters 0:\n%s", out)
	}
}

// On Vulkan the steady time comes from GPU timestamps, and each pass
// names the kernel family its plan runs.
func TestRunSteadyTimeVulkan(t *testing.T) {
	skipWithoutVulkan(t)
	rep := runJSON(t, "--backend", "vulkan", "--seq", "64", "--heads", "2", "--dim", "16", "--backward", "--check", "--iters", "2",
		"--validation="+boolEnv("FLASHVK_VALIDATION"))
	if !rep.Pass || len(rep.Results) != 1 || rep.Results[0].Device.Backend != "vulkan" {
		t.Fatalf("run --backend vulkan: %+v", rep)
	}
	for _, p := range rep.Results[0].Passes {
		if p.Iters != 2 || p.Clock != "gpu-timestamps" || p.MedianMS <= 0 || p.FirstCallMS <= 0 || p.Kernel == "" {
			t.Errorf("%s: %+v", p.Direction, p)
		}
	}
	if k := rep.Results[0].Passes[1].Kernel; !strings.HasPrefix(k, "bwd") {
		t.Errorf("bwd pass runs kernel %q", k)
	}
	out := mustRun(t, "run", "--backend", "vulkan", "--seq", "64", "--heads", "2", "--dim", "16", "--iters", "2")
	if !strings.Contains(out, "vulkan: GPU timestamps around the kernels") || !strings.Contains(out, "first call") {
		t.Errorf("run --backend vulkan:\n%s", out)
	}
}

func boolEnv(k string) string {
	if os.Getenv(k) == "1" {
		return "true"
	}
	return "false"
}

// A problem the device cannot hold is refused before any input is made:
// every pass is planned first.
func TestRefusedBeforeInputs(t *testing.T) {
	refused := func(t *testing.T, args ...string) (int, string) {
		t.Helper()
		var out, errb bytes.Buffer
		a := newApp(&out, &errb)
		a.beforeInputs = func() { panic("inputs were made for a problem the device cannot hold") }
		code := a.execute(context.Background(), args)
		if strings.Contains(errb.String(), "internal error") {
			t.Fatalf("flashvk %s: %s", strings.Join(args, " "), errb.String())
		}
		return code, errb.String()
	}
	// The host: operands beyond three quarters of the machine's memory.
	if code, errs := refused(t, "run", "--backend", "cpu", "--seq", "10000000", "--heads", "1000"); code != 2 || !strings.Contains(errs, "GB of operands") {
		t.Errorf("run of a problem larger than the host: exit %d: %s", code, errs)
	}
	skipWithoutVulkan(t)
	// One batch of Q is 256 MiB: beyond lavapipe's largest storage buffer
	// (128 MiB). A device that holds it is not refused.
	p := problem{B: 1, Hq: 16, Hkv: 16, Nq: 65536, Nk: 65536, D: 64, Dv: 64, DType: attention.Float32}
	e, err := attention.Open(attention.Config{Backend: attention.Vulkan})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Plan(context.Background(), p.qShape(), p.kShape(), p.vShape(), p.Layout, p.DType, p.options(), false)
	e.Close()
	if err == nil {
		t.Skip("the device holds the problem")
	}
	big := []string{"--backend", "vulkan", "--heads", "16", "--dim", "64", "--dtype", "f32"}
	code, errs := refused(t, append([]string{"run", "--backward", "--seq", "65536"}, big...)...)
	if code == 0 || !strings.Contains(errs, "bad shape") || !strings.Contains(errs, "fwd B=1 Hq=16") {
		t.Errorf("run of a problem larger than the device: exit %d: %s", code, errs)
	}
	code, errs = refused(t, append([]string{"bench", "--seq", "32,65536", "--batch", "1", "--causal", "false", "--backward", "--progress", "lines"}, big...)...)
	if code == 0 || !strings.Contains(errs, "2 of 4 points cannot run") || strings.Contains(errs, "[1/") {
		t.Errorf("bench with a point larger than the device: exit %d: %s", code, errs)
	}
}
