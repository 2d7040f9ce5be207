package attentiontest

import (
	"math"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/flashvk/flashvk/attention"
)

// RunConcurrent uses one engine from 16 goroutines at once, each with its
// own inputs and outputs, and demands the very bits that serial calls give
// (the kernels are deterministic, so any difference is a race).
func RunConcurrent(t *testing.T, e *attention.Engine) {
	const workers = 16
	c := Case{B: 1, Hq: 4, Hkv: 2, Nq: 65, Nk: 80, D: 32, Dv: 32, Causal: true, Align: attention.BottomRight}
	for _, dt := range dtypes(e) {
		t.Run(dt.String(), func(t *testing.T) {
			seed := Seed(t)
			ins := make([]*Inputs, workers)
			refs := make([]*Ref, workers)
			want := make([][4][]float32, workers)
			for i := range ins {
				ins[i] = NewInputs(c, dt, seed+uint64(i))
				refs[i] = ins[i].Reference(t)
				want[i] = run(t, e, ins[i], refs[i])
			}
			var wg sync.WaitGroup
			got := make([][4][]float32, workers)
			for i := range ins {
				wg.Go(func() { got[i] = run(goroutineTB{t}, e, ins[i], refs[i]) })
			}
			wg.Wait()
			for i := range ins {
				for j, name := range []string{"o", "dq", "dk", "dv"} {
					if !slices.Equal(bitsOf(want[i][j]), bitsOf(got[i][j])) {
						t.Errorf("goroutine %d: %s differs from the serial call", i, name)
					}
					if slices.ContainsFunc(got[i][j], func(x float32) bool { return math.IsNaN(float64(x)) }) {
						t.Errorf("goroutine %d: %s has NaN", i, name)
					}
				}
			}
		})
	}
}

// run is one forward and one backward of in; it must be safe to call from
// several goroutines on distinct inputs.
func run(t testing.TB, e *attention.Engine, in *Inputs, ref *Ref) [4][]float32 {
	f := in.forward(t, e)
	g := in.backward(t, e, ref, refLSE(ref))
	return [4][]float32{f.o, g[0], g[1], g[2]}
}

// goroutineTB lets the shared helpers fail from a goroutine other than the
// test's: Fatalf reports the error and ends only that goroutine.
type goroutineTB struct{ testing.TB }

func (g goroutineTB) Fatalf(format string, args ...any) {
	g.Errorf(format, args...)
	runtime.Goexit()
}
