package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
)

// TestExplainStats: explain --stats prints each launch's compiler
// statistics on a device whose driver reports them
// (VK_KHR_pipeline_executable_properties), all of them in --json; on a
// device without them it fails and says why.
func TestExplainStats(t *testing.T) {
	skipWithoutVulkan(t)
	devs, err := attention.Devices(attention.Config{})
	if err != nil || len(devs) == 0 {
		t.Fatalf("devices: %v %v", devs, err)
	}
	d := devs[0]
	for _, g := range devs {
		if g.PipelineStatistics { // prefer a device with statistics: the success path
			d = g
			break
		}
	}
	args := []string{"explain", "--backend", "vulkan", "--device", strconv.Itoa(d.Index), "--seq", "256", "--dim", "32", "--heads", "2",
		"--dtype", "float32", "--stats"}
	code, out, errs := flashvk(t, append(args, "--json")...)
	if !d.PipelineStatistics {
		if code != 1 || !strings.Contains(errs, "reports no compiler statistics") || !strings.Contains(errs, "--stats needs a device") ||
			strings.Count(errs, "\n") != 1 {
			t.Errorf("explain --stats on %s (no VK_KHR_pipeline_executable_properties): exit %d, stderr %q, want exit 1 and why", d.Name, code, errs)
		}
		t.Logf("%s reports no compiler statistics: the refusal is checked; printing them needs a device with VK_KHR_pipeline_executable_properties (e.g. NVIDIA)", d.Name)
		return
	}
	if code != 0 {
		t.Fatalf("explain --stats --json on %s: exit %d\n%s", d.Name, code, errs)
	}
	var an analysis
	if err := json.Unmarshal([]byte(out), &an); err != nil {
		t.Fatal(err)
	}
	if len(an.Launches) == 0 {
		t.Fatalf("explain --stats --json: no launches:\n%s", out)
	}
	n := 0
	for _, l := range an.Launches {
		for _, s := range l.Statistics {
			n++
			if s.Name == "" || s.Value == nil {
				t.Errorf("%s %s: statistic %+v", l.Direction, l.Kernel, s)
			}
		}
	}
	if n == 0 {
		t.Errorf("explain --stats --json on %s: no statistics:\n%s", d.Name, out)
	}
	text := mustRun(t, args...)
	if !strings.Contains(text, "compiler statistics (the driver's, per launch") {
		t.Errorf("explain --stats lacks the statistics:\n%s", text)
	}
	t.Logf("%s", text)
}

// TestKeyStatistics: explain's text shows the registers, spills and
// shared memory a driver reports, else its first few statistics.
func TestKeyStatistics(t *testing.T) {
	st := func(names ...string) []attention.Statistic {
		var out []attention.Statistic
		for _, n := range names {
			out = append(out, attention.Statistic{Name: n, Value: uint64(1)})
		}
		return out
	}
	for _, tc := range []struct {
		in   []attention.Statistic
		want []string
		more int
	}{
		{st("Register Count", "Binary Size", "Local Memory Size", "Shared Memory Size"), []string{"Register Count", "Local Memory Size", "Shared Memory Size"}, 1},
		{st("Driver pipeline hash", "SGPRs", "VGPRs", "Spilled SGPRs", "Spilled VGPRs", "Code size", "LDS size", "Scratch size", "Subgroups per SIMD"),
			[]string{"SGPRs", "VGPRs", "Spilled SGPRs", "Spilled VGPRs", "LDS size", "Scratch size", "Subgroups per SIMD"}, 2},
		{st("Instruction Count", "SEND Count", "Spill count", "Fill count", "Scratch Memory Size", "Workgroup Memory Size"),
			[]string{"Spill count", "Scratch Memory Size", "Workgroup Memory Size"}, 3},
		{st("a", "b", "c", "d", "e", "f", "g"), []string{"a", "b", "c", "d", "e", "f"}, 1},
		{nil, nil, 0},
	} {
		shown, more := keyStatistics(tc.in)
		var names []string
		for _, s := range shown {
			names = append(names, s.Name)
		}
		if strings.Join(names, "|") != strings.Join(tc.want, "|") || more != tc.more {
			t.Errorf("keyStatistics(%v) = %v, +%d; want %v, +%d", tc.in, names, more, tc.want, tc.more)
		}
	}
}

// TestPrintStatistics: one line per launch with its key statistics; none
// without --stats.
func TestPrintStatistics(t *testing.T) {
	ls := []explainLaunch{
		{Direction: "fwd", Launch: Launch{Kernel: "flash"}, Statistics: []attention.Statistic{
			{Name: "Register Count", Value: uint64(96)}, {Name: "Binary Size", Value: uint64(4096)}, {Name: "Shared Memory Size", Value: uint64(25152)}}},
		{Direction: "bwd", Launch: Launch{Kernel: "bwd_pre"}, Statistics: []attention.Statistic{}},
	}
	var b strings.Builder
	printStatistics(&b, ls)
	for _, want := range []string{"compiler statistics", "fwd  flash    Register Count 96, Shared Memory Size 25152 (+1 more)", "bwd  bwd_pre  none reported"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printStatistics lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	printStatistics(&b, []explainLaunch{{Direction: "fwd", Launch: Launch{Kernel: "flash"}}})
	if b.Len() != 0 {
		t.Errorf("printStatistics without statistics: %q", b.String())
	}
}
