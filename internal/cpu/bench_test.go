package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/flashvk/flashvk/internal/spec"
)

type benchSize struct {
	b, h, n, d int
	mask       spec.Mask
}

func (s benchSize) String() string {
	name := fmt.Sprintf("B%d_H%d_N%d_d%d", s.b, s.h, s.n, s.d)
	if s.mask != spec.MaskNone {
		name += "_causal"
	}
	return name
}

var benchSizes = []benchSize{
	{1, 1, 2048, 64, spec.MaskNone},
	{1, 8, 2048, 64, spec.MaskNone},
	{1, 8, 2048, 64, spec.MaskCausalBottomRight},
	{1, 8, 1024, 128, spec.MaskNone},
	{4, 8, 512, 64, spec.MaskNone},
}

// benchProblem builds a BSHD problem with random inputs.
func benchProblem(s benchSize) (p *spec.Problem, q, k, v, o, lse, do []float32) {
	p = &spec.Problem{B: s.b, Hq: s.h, Hkv: s.h, Nq: s.n, Nk: s.n, D: s.d, Dv: s.d, Mask: s.mask,
		Scale: 0.125, Q: spec.BSHD(s.n, s.h, s.d), K: spec.BSHD(s.n, s.h, s.d),
		V: spec.BSHD(s.n, s.h, s.d), O: spec.BSHD(s.n, s.h, s.d)}
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := func() []float32 {
		x := make([]float32, s.b*s.n*s.h*s.d)
		for i := range x {
			x[i] = 2*rng.Float32() - 1
		}
		return x
	}
	return p, rnd(), rnd(), rnd(), rnd(), make([]float32, s.b*s.h*s.n), rnd()
}

func reportFlops(b *testing.B, flops float64) {
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkForward(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.String(), func(b *testing.B) {
			p, q, k, v, o, lse, _ := benchProblem(s)
			ctx := context.Background()
			for b.Loop() {
				if err := Forward(ctx, p, q, k, v, o, lse); err != nil {
					b.Fatal(err)
				}
			}
			reportFlops(b, p.Flops())
		})
	}
}

func BenchmarkBackward(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.String(), func(b *testing.B) {
			p, q, k, v, o, lse, do := benchProblem(s)
			ctx := context.Background()
			if err := Forward(ctx, p, q, k, v, o, lse); err != nil {
				b.Fatal(err)
			}
			dq, dk, dv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
			for b.Loop() {
				if err := Backward(ctx, p, q, k, v, o, lse, do, dq, dk, dv); err != nil {
					b.Fatal(err)
				}
			}
			reportFlops(b, 2.5*p.Flops())
		})
	}
}

// naiveInputs returns the dense float64 operands of benchProblem(s).
func naiveInputs(s benchSize) (p *spec.Problem, q, k, v, do dense) {
	p, q32, k32, v32, _, _, do32 := benchProblem(s)
	toDense := func(x []float32) dense {
		d := newDense(s.b, s.h, s.n, s.d)
		st := spec.BSHD(s.n, s.h, s.d)
		for bb := range s.b {
			for h := range s.h {
				for i := range s.n {
					r := d.row(bb, h, i)
					for c := range r {
						r[c] = float64(x[st.Offset(bb, i, h)+c])
					}
				}
			}
		}
		return d
	}
	return p, toDense(q32), toDense(k32), toDense(v32), toDense(do32)
}

// BenchmarkNaiveForward times the float64 reference of the tests (full
// score matrix, one goroutine) as the baseline for the speed-up.
func BenchmarkNaiveForward(b *testing.B) {
	for _, s := range []benchSize{{1, 1, 2048, 64, spec.MaskNone}} {
		b.Run(s.String(), func(b *testing.B) {
			p, qd, kd, vd, _ := naiveInputs(s)
			for b.Loop() {
				refForward(p, qd, kd, vd)
			}
			reportFlops(b, p.Flops())
		})
	}
}

// BenchmarkNaiveBackward times the float64 reference backward (which also
// recomputes the forward).
func BenchmarkNaiveBackward(b *testing.B) {
	for _, s := range []benchSize{{1, 1, 2048, 64, spec.MaskNone}} {
		b.Run(s.String(), func(b *testing.B) {
			p, qd, kd, vd, dod := naiveInputs(s)
			for b.Loop() {
				refBackward(p, qd, kd, vd, dod)
			}
			reportFlops(b, 2.5*p.Flops())
		})
	}
}

// BenchmarkSpeedupVsNaive interleaves the naive float64 forward and Forward
// and reports the ratio of their best times (robust to a busy machine).
func BenchmarkSpeedupVsNaive(b *testing.B) {
	for _, s := range []benchSize{{1, 1, 2048, 64, spec.MaskNone}} {
		b.Run(s.String(), func(b *testing.B) {
			p, qd, kd, vd, _ := naiveInputs(s)
			_, q, k, v, o, lse, _ := benchProblem(s)
			ctx := context.Background()
			naive, fast := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
			for b.Loop() {
				t := time.Now()
				refForward(p, qd, kd, vd)
				naive = min(naive, time.Since(t))
				for range 5 {
					t = time.Now()
					if err := Forward(ctx, p, q, k, v, o, lse); err != nil {
						b.Fatal(err)
					}
					fast = min(fast, time.Since(t))
				}
			}
			b.ReportMetric(float64(naive)/float64(fast), "speedup")
			b.ReportMetric(float64(naive.Nanoseconds()), "naive-ns")
			b.ReportMetric(float64(fast.Nanoseconds()), "fwd-ns")
		})
	}
}

// extBenchOpts are the options BenchmarkExtCost times against the plain
// problem. At its sizes |Scale·q·k| is about 0.3 (d = 64) to 0.5 (d = 128)
// rms: a softcap of 30 (Grok-1's; Gemma 2 uses 50) keeps every tanh
// argument on the polynomial; a softcap of 1 sends a tenth to a quarter
// of them past 0.55, to the exponential, and most groups of 8 lanes then
// need both (the worst case). Dropout's cost does not depend on its
// probability (its mask is applied without branches).
var extBenchOpts = []struct {
	name string
	ext  func(hq int) *spec.Ext
}{
	{"softcap30", func(int) *spec.Ext { return &spec.Ext{Left: -1, Right: -1, Softcap: 30} }},
	{"softcap1", func(int) *spec.Ext { return &spec.Ext{Left: -1, Right: -1, Softcap: 1} }},
	{"alibi", func(hq int) *spec.Ext { return &spec.Ext{Left: -1, Right: -1, Slopes: alibi(hq)} }},
	{"softcap1_alibi", func(hq int) *spec.Ext { return &spec.Ext{Left: -1, Right: -1, Softcap: 1, Slopes: alibi(hq)} }},
	{"dropout0.1", func(int) *spec.Ext { return &spec.Ext{Left: -1, Right: -1, Dropout: dropOf(0.1, 0)} }},
}

// BenchmarkExtCost times the forward or the backward (one worker) of a
// problem with a softcap and/or ALiBi slopes, or with dropout, against
// the same problem without them, in pairs run back to back (in
// alternating order), and reports the median of the pairs' time ratios
// as "x-plain" (robust to a busy machine) with the best time of each.
func BenchmarkExtCost(b *testing.B) {
	for _, s := range []benchSize{{1, 4, 1024, 64, spec.MaskNone}, {1, 4, 1024, 128, spec.MaskNone}} {
		for _, opt := range extBenchOpts {
			for _, pass := range []string{"fwd", "bwd"} {
				b.Run(s.String()+"_"+opt.name+"_"+pass, func(b *testing.B) {
					plain, q, k, v, o, lse, do := benchProblem(s)
					ext := *plain
					ext.Ext = opt.ext(s.h)
					dq, dk, dv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
					ctx, cfg := context.Background(), Config{Workers: 1}
					run := func(p *spec.Problem) time.Duration {
						if pass == "bwd" { // the backward reads the problem's O and LSE
							if err := ForwardWith(ctx, cfg, p, q, k, v, o, lse); err != nil {
								b.Fatal(err)
							}
						}
						t := time.Now()
						var err error
						if pass == "fwd" {
							err = ForwardWith(ctx, cfg, p, q, k, v, o, lse)
						} else {
							err = BackwardWith(ctx, cfg, p, q, k, v, o, lse, do, dq, dk, dv)
						}
						if err != nil {
							b.Fatal(err)
						}
						return time.Since(t)
					}
					var ratios []float64
					best := [2]time.Duration{math.MaxInt64, math.MaxInt64}
					for b.Loop() {
						var t [2]time.Duration
						for _, i := range [][2]int{{0, 1}, {1, 0}}[len(ratios)%2] {
							t[i] = run([]*spec.Problem{plain, &ext}[i])
							best[i] = min(best[i], t[i])
						}
						ratios = append(ratios, float64(t[1])/float64(t[0]))
					}
					slices.Sort(ratios)
					b.ReportMetric(ratios[len(ratios)/2], "x-plain")
					b.ReportMetric(float64(best[0].Microseconds()), "plain-µs")
					b.ReportMetric(float64(best[1].Microseconds()), "ext-µs")
				})
			}
		}
	}
}
