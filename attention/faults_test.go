package attention_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/attention/attentiontest"
)

// faultEnv names the fault a child run of TestSuiteCatchesFaults runs the
// suite on.
const faultEnv = "FLASHVK_TEST_FAULT"

// TestSuiteCatchesFaults runs part of the conformance suite (forward and
// backward, every dtype) on CPU engines that each carry one deliberate
// error (attention.Fault): every one must fail it, with a check out of
// tolerance, and the same engine without the error must pass — a check
// that cannot fail is no check. Each runs in a child process, since a
// failing subtest fails its parent.
func TestSuiteCatchesFaults(t *testing.T) {
	if f, ok := os.LookupEnv(faultEnv); ok {
		e := attention.OpenFaulty(attention.Fault(f))
		defer e.Close()
		var cases []attentiontest.Case
		for _, c := range attentiontest.Cases() {
			if c.Name == "tail" || c.Name == "gqa" || c.Name == "bhsd" {
				cases = append(cases, c)
			}
		}
		t.Run("forward", func(t *testing.T) { attentiontest.RunForwardCases(t, e, cases) })
		t.Run("backward", func(t *testing.T) { attentiontest.RunBackwardCases(t, e, cases) })
		return
	}
	// Each fault and the output whose check must fail on it.
	for _, c := range []struct {
		f   attention.Fault
		out string
	}{
		{attention.FaultNone, ""}, {attention.FaultScale, "o"}, {attention.FaultLastRow, "o"},
		{attention.FaultLSE, "lse"}, {attention.FaultDK, "dk"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteCatchesFaults$", "-test.count=1")
		cmd.Env = append(os.Environ(), faultEnv+"="+string(c.f))
		out, err := cmd.CombinedOutput()
		failed := outOfTolerance.FindAllStringSubmatch(string(out), -1)
		var names []string
		for _, m := range failed {
			names = append(names, m[1])
		}
		switch {
		case c.f == attention.FaultNone:
			if err != nil {
				t.Errorf("the engine without a fault failed the suite (%v):\n%s", err, tail(string(out), 4000))
			}
		case err == nil || !slices.Contains(names, c.out):
			t.Errorf("fault %q: no %s check out of tolerance (exit: %v; failed checks %v):\n%s", c.f, c.out, err, names, tail(string(out), 4000))
		default:
			t.Logf("fault %q: %d checks out of tolerance", c.f, len(failed))
		}
	}
}

// outOfTolerance matches Check's report of a check out of tolerance; group
// 1 is the output checked.
var outOfTolerance = regexp.MustCompile(`(?m)(\w+): rel_l2 \S+ \(tol \S+\) max_abs \S+ NaN \d+ \(seed \d+\)`)

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
