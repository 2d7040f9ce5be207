package attention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashvk/flashvk/internal/spec"
)

// fakeTune is a backend whose tune session is scripted: stages per pass,
// candidates per stage, and for each forced configuration its rel_l2 and
// time, so the search's decisions are tested without a device.
type fakeTune struct {
	passes  map[bool][]string          // backward → stages
	cands   map[string][]string        // stage → candidates, the default first
	relL2   map[string]float64         // candidate → rel_l2 (default 1e-7)
	times   map[string][]time.Duration // candidate → successive medians (the last repeats)
	forced  map[string]string          // stage → candidate now forced
	history []string                   // "stage=candidate" each time a verification ran
	timed   map[string]int
	sleep   time.Duration   // per timing
	warms   []time.Duration // each timing's least warm-up, in order
	// The problems the last verifier and timer were given.
	verified, timedP *spec.Problem
}

func (f *fakeTune) Info() BackendInfo {
	return BackendInfo{Name: "fake", DTypes: []DType{Float32, Float16}}
}
func (f *fakeTune) Forward(context.Context, *spec.Problem, *forwardArgs) error   { return nil }
func (f *fakeTune) Backward(context.Context, *spec.Problem, *backwardArgs) error { return nil }
func (f *fakeTune) plan(context.Context, *spec.Problem, DType, bool) (*Plan, error) {
	return &Plan{}, nil
}
func (f *fakeTune) Close() error                      { return nil }
func (f *fakeTune) tuneInfo() TuneInfo                { return TuneInfo{} }
func (f *fakeTune) tuneSession() (tuneSession, error) { return f, nil }

func (f *fakeTune) stages(_ context.Context, _ *spec.Problem, _ DType, backward bool) ([]string, []string, error) {
	return f.passes[backward], []string{"kernel_a", "kernel_b"}, nil
}

func (f *fakeTune) deviceKey() DeviceKey { return DeviceKey{Name: "fake"} }
func (f *fakeTune) close() error         { return nil }

func (f *fakeTune) defaultOf(_ context.Context, stage string, _ *spec.Problem, _ DType) (string, error) {
	return f.cands[stage][0], nil
}
func (f *fakeTune) candidates(_ context.Context, stage string, _ *spec.Problem, _ DType) ([]string, error) {
	return f.cands[stage], nil
}
func (f *fakeTune) check(_ context.Context, _ string, _ *spec.Problem, _ DType, c string) error {
	if strings.HasPrefix(c, "invalid") {
		return errors.New("does not fit")
	}
	return nil
}
func (f *fakeTune) force(stage string, _ *spec.Problem, _ DType, c string) { f.forced[stage] = c }
func (f *fakeTune) unforce()                                               { clear(f.forced) }

func (f *fakeTune) verifier(_ context.Context, p *spec.Problem, _ DType, _ bool, _ uint64, _ ReferenceFunc) (tuneVerifier, error) {
	f.verified = p
	return fakeVerifier{f}, nil
}
func (f *fakeTune) timer(_ context.Context, p *spec.Problem, _ DType, _ bool, _ uint64) (tuneTimer, error) {
	f.timedP = p
	return fakeTimer{f}, nil
}

type fakeVerifier struct{ f *fakeTune }

func (v fakeVerifier) run(context.Context) (float64, error) {
	worst := 1e-7
	for st, c := range v.f.forced {
		v.f.history = append(v.f.history, st+"="+c)
		if e, ok := v.f.relL2[c]; ok && e > worst {
			worst = e
		}
	}
	return worst, nil
}
func (fakeVerifier) close() {}

type fakeTimer struct{ f *fakeTune }

func (t fakeTimer) median(_ context.Context, _, _ int, minWarm time.Duration) (time.Duration, error) {
	t.f.warms = append(t.f.warms, minWarm)
	time.Sleep(t.f.sleep)
	var total time.Duration
	for _, c := range t.f.forced {
		ts := t.f.times[c]
		i := min(t.f.timed[c], len(ts)-1)
		t.f.timed[c]++
		if i >= 0 {
			total += ts[i]
		}
	}
	return total, nil
}
func (fakeTimer) close() {}

func newFakeTune() *fakeTune {
	return &fakeTune{
		passes: map[bool][]string{false: {"fa"}, true: {"ba", "bb"}},
		cands: map[string][]string{
			"fa": {"fa-def", "fa-fast", "fa-wrong", "invalid-fa"},
			"ba": {"ba-def", "ba-fast"},
			"bb": {"bb-def", "bb-noise"},
		},
		relL2:  map[string]float64{"fa-wrong": 0.5},
		times:  map[string][]time.Duration{},
		forced: map[string]string{},
		timed:  map[string]int{},
	}
}

func noRef(ReferenceProblem, []float64, []float64, []float64, []float64, bool) ([][]float64, error) {
	return nil, nil
}

func tuneFake(t *testing.T, f *fakeTune, o TuneOptions) ([]TuneResult, error) {
	t.Helper()
	e := newEngine(f)
	o.DTypes, o.Dims, o.Causal, o.Reference = []DType{Float32}, []int{16}, []bool{false}, noRef
	return e.Tune(context.Background(), o)
}

// TestTuneSearch: a wrong candidate is rejected, never timed, never chosen;
// an invalid one fails; a faster one wins once it is faster again back to
// back with the default; one within the noise margin does not; later
// stages of a pass run with the earlier stages' winners; every result
// names its key and device.
func TestTuneSearch(t *testing.T) {
	f := newFakeTune()
	ms := time.Millisecond
	f.times = map[string][]time.Duration{
		"fa-def": {10 * ms}, "fa-fast": {8 * ms}, "fa-wrong": {1 * ms},
		"ba-def": {10 * ms}, "ba-fast": {5 * ms},
		"bb-def": {10 * ms}, "bb-noise": {9 * ms, 9950 * time.Microsecond},
	}
	var events []TuneEvent
	rs, err := tuneFake(t, f, TuneOptions{Progress: func(ev TuneEvent) { events = append(events, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 {
		t.Fatalf("%d results, want 3 (fa; ba, bb)", len(rs))
	}
	want := map[string]string{"fa": "fa-fast", "ba": "ba-fast", "bb": "bb-def"}
	for _, r := range rs {
		if r.Err != nil || r.Winner != want[r.Key.Family] || r.Device.Name != "fake" || r.Key.DType != "f32" || r.Key.D != 16 {
			t.Errorf("%s: winner %q (%v), want %q; %+v", r.Key, r.Winner, r.Err, want[r.Key.Family], r)
		}
	}
	fa := rs[0]
	if fa.Candidates != 4 || fa.Tried != 4 || len(fa.Events) != 5 {
		t.Errorf("fa: %d candidates, %d tried, %d events", fa.Candidates, fa.Tried, len(fa.Events))
	}
	for _, ev := range fa.Events {
		switch ev.Candidate {
		case "fa-wrong":
			if ev.Status != TuneRejected || ev.Median != 0 || !strings.Contains(fmt.Sprint(ev.Err), "rel_l2") {
				t.Errorf("wrong candidate: %+v", ev)
			}
		case "invalid-fa":
			if ev.Status != TuneFailed || !strings.Contains(fmt.Sprint(ev.Err), "not valid") {
				t.Errorf("invalid candidate: %+v", ev)
			}
		}
	}
	if last := fa.Events[len(fa.Events)-1]; last.Status != TuneConfirm || last.DefaultMedian != 10*ms || last.Median != 8*ms {
		t.Errorf("confirm event %+v", last)
	}
	if sp := fa.Speedup(); sp != 1.25 {
		t.Errorf("fa speedup %v", sp)
	}
	// bb is tuned with ba's winner forced.
	var bbWithBaFast bool
	for _, h := range f.history {
		bbWithBaFast = bbWithBaFast || h == "ba=ba-fast"
	}
	if !bbWithBaFast {
		t.Errorf("bb was not verified with ba's winner forced: %v", f.history)
	}
	if len(events) != 4+1+2+1+2+1 {
		t.Errorf("%d progress events", len(events))
	}
	// Each key's first timing warms up longest (it follows the host-side
	// reference); the others, confirmations included, 100 ms. Each of fa,
	// ba and bb times 2 candidates, then confirms its winner (2 more).
	long, short := tuneFirstWarm, tuneWarm
	wantWarms := []time.Duration{long, short, short, short, long, short, short, short, long, short, short, short}
	if !slices.Equal(f.warms, wantWarms) {
		t.Errorf("warm-ups %v, want %v", f.warms, wantWarms)
	}
	// The Entry of a result is what the cache stores.
	if en := fa.Entry(); en.Candidate != "fa-fast" || en.Default != "fa-def" || en.MedianMS != 8 || en.Date == "" {
		t.Errorf("entry %+v", en)
	}
}

// TestTuneSearchEdges: families filter the stages; a pass without a
// tunable stage is a result with an error that names its kernels, not a
// quiet skip; a spent budget decides the stage in progress among the
// candidates measured and stops with ErrTuneBudget; bad options are
// refused.
func TestTuneSearchEdges(t *testing.T) {
	f := newFakeTune()
	f.times = map[string][]time.Duration{"fa-def": {time.Millisecond}, "fa-fast": {time.Millisecond / 2}}
	rs, err := tuneFake(t, f, TuneOptions{Families: []string{"ba"}, Dirs: []string{"bwd"}})
	if err != nil || len(rs) != 1 || rs[0].Key.Family != "ba" {
		t.Errorf("families ba: %+v, %v", rs, err)
	}
	f = newFakeTune()
	f.passes[false] = nil
	rs, err = tuneFake(t, f, TuneOptions{Dirs: []string{"fwd"}})
	if err != nil || len(rs) != 1 || rs[0].Err == nil || !strings.Contains(rs[0].Err.Error(), "kernel_a") || rs[0].Winner != "" {
		t.Errorf("no stage: %+v, %v", rs, err)
	}
	f = newFakeTune()
	f.sleep = 30 * time.Millisecond
	rs, err = tuneFake(t, f, TuneOptions{Dirs: []string{"fwd", "bwd"}, Budget: 10 * time.Millisecond})
	if !errors.Is(err, ErrTuneBudget) {
		t.Fatalf("budget: %v", err)
	}
	if len(rs) != 1 || rs[0].Tried != 1 || rs[0].Candidates != 4 || rs[0].Winner != "fa-def" || rs[0].Err != nil {
		t.Errorf("budget: %+v", rs)
	}
	e := newEngine(newFakeTune())
	for name, o := range map[string]TuneOptions{
		"no reference": {},
		"head dim":     {Reference: noRef, Dims: []int{300}},
		"direction":    {Reference: noRef, Dirs: []string{"sideways"}},
		"bfloat16":     {Reference: noRef, DTypes: []DType{BFloat16}},
	} {
		if _, err := e.Tune(context.Background(), o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestTuneFeatures: the options of TuneOptions.Features reach both the
// timed and the verification problem (whose window is narrowed to stay a
// window there), the results' keys name them, and options that are
// invalid or that a timed problem would lose are refused before any key.
func TestTuneFeatures(t *testing.T) {
	f := newFakeTune()
	f.times = map[string][]time.Duration{"fa-def": {time.Millisecond}}
	feat := TuneFeatures{Window: &Window{Left: 300, Right: 10}, Softcap: 30, ALiBi: true, Dropout: 0.1}
	rs, err := tuneFake(t, f, TuneOptions{Dirs: []string{"fwd"}, N: 1024, Features: feat, MaxCandidates: 1})
	if err != nil || len(rs) != 1 {
		t.Fatalf("%+v, %v", rs, err)
	}
	const want = "window+softcap+alibi+dropout"
	if rs[0].Key.Options != want || !strings.Contains(rs[0].Key.String(), want) {
		t.Errorf("key %+v (%s), want options %q", rs[0].Key, rs[0].Key, want)
	}
	p, pv := f.timedP, f.verified
	for name, x := range map[string]*spec.Problem{"timed": p, "verification": pv} {
		e := x.Ext
		if e == nil || e.Softcap != 30 || len(e.Slopes) != x.Hq || e.Slopes[0] != ALiBiSlopes(x.Hq)[0] ||
			e.Dropout == nil || e.Dropout.Threshold != 26 || x.Features() != want {
			t.Errorf("%s problem: %+v (%s)", name, e, x.Features())
		}
	}
	if p.Nq != 1024 || p.Ext.Left != 300 || p.Ext.Right != 10 || pv.Ext.Left != verifyWindow || pv.Ext.Right != 10 {
		t.Errorf("windows: timed %d,%d (N %d), verification %d,%d", p.Ext.Left, p.Ext.Right, p.Nq, pv.Ext.Left, pv.Ext.Right)
	}
	// The reference sees the verification problem's options.
	r := referenceProblem(pv)
	if r.Window == nil || *r.Window != (Window{Left: verifyWindow, Right: 10}) || r.Softcap != 30 || len(r.ALiBi) != pv.Hq ||
		r.Dropout != 26.0/256 || r.DropoutSeed != 0 || r.Causal {
		t.Errorf("reference problem %+v", r)
	}
	if r := referenceProblem(verifyProblem(16, 16, true)); r.Window != nil || r.Softcap != 0 || r.ALiBi != nil || r.Dropout != 0 || !r.Causal || !r.BottomRight {
		t.Errorf("plain reference problem %+v", r)
	}
	e := newEngine(newFakeTune())
	for name, ft := range map[string]TuneFeatures{
		"window side":    {Window: &Window{Left: -2, Right: 0}},
		"softcap":        {Softcap: -1},
		"dropout":        {Dropout: 1.5},
		"dropout to 0":   {Dropout: 1e-4},
		"window too far": {Window: &Window{Left: 4096, Right: 4096}, Softcap: 30},
	} {
		_, err := e.Tune(context.Background(), TuneOptions{Reference: noRef, Dims: []int{16}, Causal: []bool{false}, N: 1024, Features: ft})
		if !errors.Is(err, ErrOption) {
			t.Errorf("%s: %v, want ErrOption", name, err)
		}
	}
}
