package main

import (
	"path/filepath"
	"regexp"
	"testing"
)

// bench --count N times every point N times; --benchfmt prints each
// series' median, so benchstat has N samples.
func TestBenchCount(t *testing.T) {
	args := []string{"bench", "--backend", "cpu", "--seq", "16,32", "--dim", "8", "--tokens", "32", "--hidden", "8", "--causal", "false",
		"--warmup", "1", "--iters", "2", "--count", "3", "--progress", "none"}
	out := mustRun(t, append(args, "--benchfmt")...)
	for _, n := range []string{"16", "32"} {
		re := regexp.MustCompile(`(?m)^BenchmarkAttention/fwd/fp16/d8/N` + n + `/noncausal/B\d+H1-\d+\t2\t\d+ ns/op\t[0-9.e+-]+ TFLOP/s$`)
		if got := len(re.FindAllString(out, -1)); got != 3 {
			t.Errorf("N=%s: %d benchfmt lines, want 3:\n%s", n, got, out)
		}
	}
	path := filepath.Join(t.TempDir(), "count.json")
	mustRun(t, append(args, "--json", path)...)
	f, err := readResults(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Results {
		if len(r.SamplesMS) != 3 || r.Iters != 6 || len(r.TimesMS) != 6 {
			t.Errorf("N=%d: samples %v, iters %d, %d times", r.Nq, r.SamplesMS, r.Iters, len(r.TimesMS))
		}
	}
	// Without --count: one series, no samples.
	f = tinyBench(t, filepath.Join(t.TempDir(), "one.json"), "--causal", "false")
	if len(f.Results) == 0 || f.Results[0].SamplesMS != nil {
		t.Errorf("bench without --count: %+v", f.Results)
	}
}
