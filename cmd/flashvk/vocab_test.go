package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The commands that describe a problem and open an engine share their
// flags: the same names, types and (per kind of command) help.
func TestOneVocabulary(t *testing.T) {
	root := newApp(nil, nil).rootCmd()
	cmds := map[string]*cobra.Command{}
	for _, c := range root.Commands() {
		cmds[c.Name()] = c
	}
	for _, name := range []string{"run", "explain", "bench", "tune"} {
		fs := cmds[name].Flags()
		for _, flag := range []string{"dim", "seq", "heads", "batch", "dtype", "causal", "backend", "device", "kernel", "validation"} {
			if fs.Lookup(flag) == nil {
				t.Errorf("%s has no --%s", name, flag)
			}
		}
		if fs.Lookup("causal").NoOptDefVal != "true" {
			t.Errorf("%s: a bare --causal is not true", name)
		}
		if name != "tune" {
			for _, flag := range []string{"nq", "nk", "kv-heads", "align", "workers"} {
				if fs.Lookup(flag) == nil {
					t.Errorf("%s has no --%s", name, flag)
				}
			}
		}
	}
	// One registration: the same flag reads the same on commands of a kind.
	same := func(a, b, flag string) {
		fa, fb := cmds[a].Flags().Lookup(flag), cmds[b].Flags().Lookup(flag)
		if fa.Usage != fb.Usage || fa.Value.Type() != fb.Value.Type() {
			t.Errorf("--%s: %s says %q (%s), %s says %q (%s)", flag, a, fa.Usage, fa.Value.Type(), b, fb.Usage, fb.Value.Type())
		}
	}
	cmds["run"].Flags().VisitAll(func(f *pflag.Flag) {
		// explain runs on one device: no --device all.
		if cmds["explain"].Flags().Lookup(f.Name) != nil && f.Name != "json" && f.Name != "device" {
			same("run", "explain", f.Name)
		}
	})
	for _, flag := range []string{"dim", "heads", "hidden", "causal", "kernel", "validation"} {
		same("bench", "tune", flag)
	}
	for _, flag := range []string{"kv-heads", "align", "kernel", "workers", "validation"} {
		same("run", "bench", flag)
	}
	for _, name := range []string{"run", "bench", "explain", "tune"} {
		if !strings.Contains(mustRun(t, name, "--help"), "--dim") {
			t.Errorf("%s --help lacks --dim", name)
		}
	}
}

// --causal takes its value after a space or an '=', alone means true, and
// takes "both" where the command runs a set of masks.
func TestCausalValues(t *testing.T) {
	small := []string{"--backend", "cpu", "--seq", "16", "--heads", "1", "--dim", "8", "--iters", "1", "--json"}
	for _, tc := range []struct {
		args   []string
		causal bool
	}{
		{[]string{"--causal"}, true},
		{[]string{"--causal", "true"}, true},
		{[]string{"--causal", "false"}, false},
		{[]string{"--causal=false"}, false},
		{[]string{"--causal", "--seed", "2"}, true},
		{[]string{"-b", "1", "--causal", "0"}, false},
		{nil, false},
	} {
		var rep runReport
		if err := json.Unmarshal([]byte(mustRun(t, append(append([]string{"run"}, small...), tc.args...)...)), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Problem.Causal != tc.causal {
			t.Errorf("run %v: causal %v, want %v", tc.args, rep.Problem.Causal, tc.causal)
		}
	}
	var an analysis
	if err := json.Unmarshal([]byte(mustRun(t, "explain", "--backend", "cpu", "--seq", "64", "--causal", "true", "--json")), &an); err != nil {
		t.Fatal(err)
	}
	if !an.Problem.Causal {
		t.Error("explain --causal true: not causal")
	}

	bench := []string{"bench", "--backend", "cpu", "--seq", "16", "--dim", "8", "--tokens", "16", "--hidden", "8",
		"--dtype", "f32", "--iters", "1", "--progress", "none", "--json", "-"}
	for _, tc := range []struct {
		args []string
		want []bool
	}{
		{[]string{"--causal", "false"}, []bool{false}},
		{[]string{"--causal", "true"}, []bool{true}},
		{[]string{"--causal", "both"}, []bool{false, true}},
		{[]string{"--causal"}, []bool{true}},
		{nil, []bool{false, true}},
	} {
		var f ResultsFile
		if err := json.Unmarshal([]byte(mustRun(t, append(bench, tc.args...)...)), &f); err != nil {
			t.Fatal(err)
		}
		var got []bool
		for _, r := range f.Results {
			got = append(got, r.Causal)
		}
		if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) || (len(got) > 1 && got[1] != tc.want[1]) {
			t.Errorf("bench %v: causal %v, want %v", tc.args, got, tc.want)
		}
	}
}

// --dtype takes the names and their aliases on every command.
func TestDTypeAliases(t *testing.T) {
	for _, tc := range []struct{ alias, want string }{
		{"f32", "float32"}, {"fp32", "float32"}, {"float32", "float32"},
		{"f16", "float16"}, {"fp16", "float16"}, {"FLOAT16", "float16"},
		{"bf16", "bfloat16"}, {"bfloat16", "bfloat16"},
	} {
		var rep runReport
		if err := json.Unmarshal([]byte(mustRun(t, "run", "--backend", "cpu", "--seq", "8", "--heads", "1", "--dim", "8", "--iters", "0",
			"--dtype", tc.alias, "--json")), &rep); err != nil {
			t.Fatal(err)
		}
		var an analysis
		if err := json.Unmarshal([]byte(mustRun(t, "explain", "--backend", "cpu", "--seq", "8", "--dtype", tc.alias, "--json")), &an); err != nil {
			t.Fatal(err)
		}
		if rep.Problem.DType != tc.want || an.Problem.DType != tc.want {
			t.Errorf("--dtype %s: run %s, explain %s, want %s", tc.alias, rep.Problem.DType, an.Problem.DType, tc.want)
		}
	}
	var f ResultsFile
	if err := json.Unmarshal([]byte(mustRun(t, "bench", "--backend", "cpu", "--seq", "16", "--dim", "8", "--tokens", "16", "--hidden", "8",
		"--causal", "false", "--dtype", "fp32,f16", "--dtype", "bf16", "--iters", "1", "--progress", "none", "--json", "-")), &f); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range f.Results {
		got = append(got, r.DType)
	}
	if strings.Join(got, ",") != "float32,float16,bfloat16" {
		t.Errorf("bench --dtype fp32,f16 --dtype bf16: %v", got)
	}
	// tune parses the same names: fp16 passes the flags and is refused
	// only for the CPU backend, bf16 is refused as not tuned.
	if code, _, errs := flashvk(t, "tune", "--dtype", "fp16", "--backend", "cpu"); code != 2 || !strings.Contains(errs, "--backend cpu") {
		t.Errorf("tune --dtype fp16 --backend cpu: exit %d: %s", code, errs)
	}
	if code, _, errs := flashvk(t, "tune", "--dtype", "bf16"); code != 2 || !strings.Contains(errs, "--dtype bfloat16: not tuned") {
		t.Errorf("tune --dtype bf16: exit %d: %s", code, errs)
	}
}

// Every flag error is a usage error (exit 2) whose one line names the
// flag.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"run", "--causal", "both"}, "--causal"},
		{[]string{"run", "--causal", "maybe"}, "--causal"},
		{[]string{"explain", "--causal", "both"}, "--causal"},
		{[]string{"bench", "--causal", "maybe"}, "--causal"},
		{[]string{"tune", "--causal", "sometimes"}, "--causal"},
		{[]string{"run", "--dtype", "int8"}, "--dtype"},
		{[]string{"bench", "--dtype", "f16,f64"}, "--dtype"},
		{[]string{"tune", "--dtype", "f64"}, "--dtype"},
		{[]string{"run", "--seq", "64,128"}, "--seq"},
		{[]string{"run", "--seq", "-5"}, "--seq"},
		{[]string{"run", "--nq", "0"}, "--nq"},
		{[]string{"explain", "--dim", "x"}, "--dim"},
		{[]string{"run", "--dim", "1000"}, "--dim"},
		{[]string{"run", "--dv", "1000"}, "--dv"},
		{[]string{"bench", "--nq", "0"}, "--nq"},
		{[]string{"bench", "--nk", "8,-1"}, "--nk"},
		{[]string{"bench", "--dim", "512"}, "--dim"},
		{[]string{"bench", "--batch", "-1"}, "--batch"},
		{[]string{"bench", "--hidden", "0"}, "--hidden"},
		{[]string{"bench", "--count", "0"}, "--count"},
		{[]string{"bench", "--rotate", "0"}, "--rotate"},
		{[]string{"bench", "--warmup", "-1"}, "--warmup"},
		{[]string{"run", "--iters", "-1"}, "--iters"},
		{[]string{"run", "--warmup", "-2"}, "--warmup"},
		{[]string{"tune", "--seq", "0"}, "--seq"},
		{[]string{"tune", "--heads", "-1"}, "--heads"},
		{[]string{"tune", "--kv-heads", "2"}, "--kv-heads"},
		{[]string{"tune", "--nq", "2"}, "--nq"},
		{[]string{"tune", "--workers", "2"}, "--workers"},
		{[]string{"tune", "--backend", "cpu"}, "--backend"},
		{[]string{"tune", "--backend", "tpu"}, "--backend"},
		{[]string{"tune", "--device", "all"}, "--device"},
		{[]string{"explain", "--device", "all"}, "--device"},
		{[]string{"explain", "--backend", "cpu", "--device", "0"}, "--device"},
		{[]string{"explain", "--kernel", "nope"}, "--kernel"},
		{[]string{"run", "--kernel", "nope"}, "--kernel"},
		{[]string{"bench", "--backend", "cpu", "--kernel", "flash"}, "--kernel"},
		{[]string{"run", "--workers", "-1"}, "--workers"},
		{[]string{"run", "--heads", "4", "--kv-heads", "3"}, "--kv-heads"},
	} {
		code, out, errs := flashvk(t, tc.args...)
		if code != 2 {
			t.Errorf("flashvk %s: exit %d, want 2\n%s%s", strings.Join(tc.args, " "), code, out, errs)
			continue
		}
		if !strings.HasPrefix(errs, "flashvk: ") || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.flag) {
			t.Errorf("flashvk %s: error %q is not one line naming %s", strings.Join(tc.args, " "), errs, tc.flag)
		}
	}
}

// bench --nq/--nk/--kv-heads: Nq ≠ Nk and grouped-query grids.
func TestBenchShapes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gqa.json")
	mustRun(t, "bench", "--backend", "cpu", "--nq", "16", "--nk", "24,40", "--dim", "8", "--heads", "4", "--kv-heads", "2",
		"--batch", "2", "--causal", "true", "--align", "bottom-right", "--dtype", "f32", "--iters", "1", "--progress", "none",
		"--check", "--backward", "--json", path)
	f, err := readResults(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Results) != 4 {
		t.Fatalf("%d results, want 4 (Nk 24, 40 × fwd, bwd)", len(f.Results))
	}
	for i, r := range f.Results {
		if r.Nq != 16 || r.Nk != []int{24, 24, 40, 40}[i] || r.H != 4 || r.Hkv != 2 || r.B != 2 || r.Align != "bottom-right" ||
			r.RelL2 == nil || float64(*r.RelL2) > 1e-5 {
			t.Errorf("result %d: %+v (rel_l2 %v)", i, r, r.RelL2)
		}
	}
	// --seq with --nk: Nq from --seq; B = tokens / max(Nq, Nk).
	var g ResultsFile
	if err := json.Unmarshal([]byte(mustRun(t, "bench", "--backend", "cpu", "--seq", "8,16", "--nk", "32", "--dim", "8", "--tokens", "64",
		"--hidden", "8", "--causal", "false", "--iters", "1", "--progress", "none", "--json", "-")), &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Results) != 2 || g.Results[0].Nq != 8 || g.Results[1].Nq != 16 || g.Results[0].Nk != 32 || g.Results[0].B != 2 {
		t.Errorf("bench --seq 8,16 --nk 32: %+v", g.Results)
	}
	out := mustRun(t, "bench", "--backend", "cpu", "--nq", "8", "--nk", "32", "--dim", "8", "--heads", "2", "--kv-heads", "1",
		"--causal", "false", "--iters", "1", "--progress", "none")
	if !strings.Contains(out, "8×32") || !strings.Contains(out, "2/1") {
		t.Errorf("bench table does not show Nq×Nk and H/Hkv:\n%s", out)
	}
}
