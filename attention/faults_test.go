package attention_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/attention/attentiontest"
)

// faultEnv names the fault a child of TestSuiteCatchesFaults runs the
// suite on; only the parent sets it, for its children.
const faultEnv = "FLASHVK_TEST_SUITE_FAULT"

// TestSuiteCatchesFaults runs part of the conformance suite (forward and
// backward, every dtype) on CPU engines that each carry one deliberate
// error (attention.Fault): every one must fail it with a check of the
// output it corrupts out of tolerance, and the same engine without the
// error must pass — a check that cannot fail is no check. Each runs in a
// child process, since a failing subtest fails its parent.
func TestSuiteCatchesFaults(t *testing.T) {
	if f, ok := os.LookupEnv(faultEnv); ok {
		runSuiteWithFault(t, attention.Fault(f))
		return
	}
	// The output whose check must fail on each fault.
	want := map[attention.Fault]string{
		attention.FaultScale: "o", attention.FaultLastRow: "o", attention.FaultLSE: "lse", attention.FaultDK: "dk",
	}
	for _, f := range attention.Faults {
		t.Run(string(f), func(t *testing.T) {
			out, code := runChild(t, f)
			var failed []string
			for _, m := range outOfTolerance.FindAllStringSubmatch(out, -1) {
				failed = append(failed, m[1])
			}
			switch {
			case strings.Contains(out, "panic:"):
				t.Errorf("the child panicked:\n%s", head(out, 4000))
			case f == attention.FaultNone:
				if code != 0 {
					t.Errorf("the engine without a fault failed the suite (exit %d):\n%s", code, head(out, 4000))
				}
			case code != 1 || !slices.Contains(failed, want[f]):
				t.Errorf("no %s check out of tolerance (exit %d; failed checks %v):\n%s", want[f], code, failed, head(out, 4000))
			default:
				t.Logf("%d checks out of tolerance", len(failed))
			}
		})
	}
}

// runSuiteWithFault is a child's work: the suite's tail, GQA and BHSD
// cases, forward and backward, on an engine with fault f.
func runSuiteWithFault(t *testing.T, f attention.Fault) {
	e, err := attention.OpenFaulty(f)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var cases []attentiontest.Case
	for _, c := range attentiontest.Cases() {
		if c.Name == "tail" || c.Name == "gqa" || c.Name == "bhsd" {
			cases = append(cases, c)
		}
	}
	t.Run("forward", func(t *testing.T) { attentiontest.RunForwardCases(t, e, cases) })
	t.Run("backward", func(t *testing.T) { attentiontest.RunBackwardCases(t, e, cases) })
}

// runChild runs this test in a child process with fault f and returns its
// output and exit code (the parent's deadline bounds it).
func runChild(t *testing.T, f attention.Fault) (string, int) {
	ctx := context.Background()
	timeout := 5 * time.Minute
	if d, ok := t.Deadline(); ok {
		timeout = min(timeout, time.Until(d)-10*time.Second)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSuiteCatchesFaults$", "-test.count=1", "-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(), faultEnv+"="+string(f))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("child with fault %q: %v", f, err)
	return "", -1
}

// outOfTolerance matches attentiontest.Check's report of a check out of
// tolerance; group 1 is the output checked.
var outOfTolerance = regexp.MustCompile(`(\w+): rel_l2 \S+ \(tol \S+\) max_abs \S+ NaN \d+ \(seed \d+\)`)

// head is the first n bytes of s.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
