//go:build cgo

package vkattn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

// TestChunkCostModel checks the closed-form pair counts behind the
// chunks' work model against direct sums over KeyLimit.
func TestChunkCostModel(t *testing.T) {
	for _, c := range []struct{ t, c, n int64 }{{0, 1, 5}, {7, 1, 5}, {7, -3, 5}, {9, 12, 4}, {30, -40, 3}, {12, 1, 1}} {
		var want float64
		for i := range c.t {
			want += float64(min(max(i+c.c, 0), c.n))
		}
		if got := clampSum(c.t, c.c, c.n); got != want {
			t.Errorf("clampSum%+v = %v, want %v", c, got, want)
		}
	}
	for _, sz := range [][2]int{{1, 1}, {5, 9}, {9, 5}, {64, 64}, {37, 100}, {100, 37}} {
		for _, m := range []spec.Mask{spec.MaskNone, spec.MaskCausalTopLeft, spec.MaskCausalBottomRight} {
			p := &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: sz[0], Nk: sz[1], D: 8, Dv: 8, Mask: m}
			for i0 := 0; i0 <= p.Nq; i0 += 3 {
				for i1 := i0; i1 <= p.Nq; i1 += 4 {
					var want float64
					for i := i0; i < i1; i++ {
						want += float64(p.KeyLimit(i))
					}
					if got := pairsOfRows(p, i0, i1); got != want {
						t.Fatalf("%v mask %d: pairsOfRows(%d, %d) = %v, want %v", sz, m, i0, i1, got, want)
					}
				}
			}
			for j0 := 0; j0 <= p.Nk; j0 += 3 {
				for j1 := j0; j1 <= p.Nk; j1 += 4 {
					var want float64
					for j := j0; j < j1; j++ {
						for i := range p.Nq {
							if p.KeyLimit(i) > j {
								want++
							}
						}
					}
					if got := pairsOfKeys(p, j0, j1); got != want {
						t.Fatalf("%v mask %d: pairsOfKeys(%d, %d) = %v, want %v", sz, m, j0, j1, got, want)
					}
				}
			}
		}
	}
}

// TestChunkCostModelAddressed: an addressed build's launches have their
// base kernel's work model (the dK/dV kernels' over key tiles, not the
// forward's over query rows).
func TestChunkCostModelAddressed(t *testing.T) {
	p := &spec.Problem{B: 1, Hq: 2, Hkv: 1, Nq: 100, Nk: 37, D: 8, Dv: 8, Mask: spec.MaskCausalBottomRight}
	for _, k := range []string{shaders.KernelBwdCMDKDV, shaders.KernelBwdDKDV, shaders.KernelBwdCMDQ, shaders.KernelFlashCM} {
		if !shaders.HasAddressed(k) {
			t.Fatalf("%s has no addressed build", k)
		}
		base := &Launch{Kernel: k, Grid: [3]uint32{5, 1, 1}, BR: 16, BC: 8}
		addr := *base
		addr.Kernel = shaders.Addressed(k)
		cb, ca := costOf(p, base, 0), costOf(p, &addr, 0)
		for x := uint32(0); x <= 5; x++ {
			if b, a := cb.row(0, x), ca.row(0, x); a != b {
				t.Errorf("%s: addressed work of groups 0…%d %v, base %v", k, x, a, b)
			}
		}
	}
}

// TestChunkCostModelExt: with a window and key counts the work model
// counts the visible pairs: by rows, by keys and in total alike, and a
// key range's pairs directly.
func TestChunkCostModelExt(t *testing.T) {
	p := &spec.Problem{B: 2, Hq: 1, Hkv: 1, Nq: 37, Nk: 50, D: 8, Dv: 8,
		Ext: &spec.Ext{Left: 5, Right: 2, BottomRight: true, SeqUsedK: []int32{50, 21}}}
	total := p.Pairs() / float64(p.B)
	if r, k := pairsOfRows(p, 0, p.Nq), pairsOfKeys(p, 0, p.Nk); r != total || k != total {
		t.Fatalf("pairs by rows %v, by keys %v, want %v", r, k, total)
	}
	var want float64
	for b := range p.B {
		for i := range p.Nq {
			for j := 10; j < 30; j++ {
				if lo, hi := p.KeyRange(b, i); j >= lo && j < hi {
					want++
				}
			}
		}
	}
	if got := pairsOfKeys(p, 10, 30); got != want/float64(p.B) {
		t.Fatalf("pairsOfKeys(10, 30) = %v, want %v", got, want/float64(p.B))
	}
}

// chunkPlans are the passes of problem p the chunk tests record: the
// forward, the backward and the step.
func chunkPlans(t *testing.T, b *Backend, p *spec.Problem) map[string][]*Plan {
	t.Helper()
	out := map[string][]*Plan{}
	for _, c := range []struct {
		name     string
		fwd, bwd bool
	}{{"fwd", true, false}, {"bwd", false, true}, {"step", true, true}} {
		pls, err := b.passes(context.Background(), p, spec.Float32, c.fwd, c.bwd)
		if err != nil {
			t.Fatal(err)
		}
		out[c.name] = pls
	}
	return out
}

// TestChunksCoverGrid records the chunks of several problems' passes
// with budgets from one workgroup to whole batches and checks that every
// workgroup of every launch is dispatched exactly once, in launch order,
// each launch that needs a barrier recorded after one when it shares a
// submission with the launch before it.
func TestChunksCoverGrid(t *testing.T) {
	b := openBackend(t, "")
	for _, c := range []hostCase{
		{2, 4, 2, 150, 130, 16, 16, spec.MaskCausalBottomRight},
		{3, 2, 1, 70, 90, 8, 24, spec.MaskCausalTopLeft},
		{1, 1, 1, 200, 33, 16, 16, spec.MaskNone},
	} {
		p := c.problem(1).p
		for name, pls := range chunkPlans(t, b, p) {
			for _, one := range []bool{false, true} {
				b.chunkCPU = one
				for _, minGroups := range []float64{1, 3, 50, 1e9} {
					for _, budget := range []float64{0, 1e-9, 1e-6, 1e-3} {
						checkChunkCover(t, b, p, pls, minGroups, budget, fmt.Sprintf("%v %s one run %v min %v budget %v", c, name, one, minGroups, budget))
					}
				}
			}
		}
	}
}

func checkChunkCover(t *testing.T, b *Backend, p *spec.Problem, pls []*Plan, minGroups, budget float64, name string) {
	t.Helper()
	s := &scratch{b: b}
	defer s.done(true)
	var bufs operandBufs
	for op := range OpD {
		buf, err := s.get(256)
		if err != nil {
			t.Fatal(err)
		}
		bufs[op] = buf
	}
	cls, err := b.prepareAll(s, p, pls, bufs)
	if err != nil {
		t.Fatal(err)
	}
	saved := b.chunkMinGroups
	b.chunkMinGroups = minGroups
	defer func() { b.chunkMinGroups = saved }()
	seen := map[string][]int{} // per launch name, the times each workgroup ran
	order := map[string]int{}
	for i := range cls {
		g := cls[i].cost.grid
		seen[cls[i].ready.l.Name()] = make([]int, g[0]*g[1]*g[2])
		order[cls[i].ready.l.Name()] = i
	}
	last := -1
	for n := 0; !allDone(cls); n++ {
		if n > 100000 {
			t.Fatalf("%s: no progress", name)
		}
		barrier := true // each submission starts with a full barrier
		r := b.dev.Record()
		if _, _, _, err := b.recordChunk(r, cls, budget); err != nil {
			t.Fatal(err)
		}
		dispatches := 0
		runs := map[int]int{}
		for _, cmd := range r.Commands() {
			if cmd.Kind == "barrier" {
				barrier = true
				continue
			}
			li := order[cmd.Pipeline]
			if li < last {
				t.Fatalf("%s: launch %d dispatched after launch %d", name, li, last)
			}
			if li != last && cls[li].barrier && !barrier {
				t.Fatalf("%s: launch %d follows launch %d without a barrier", name, li, last)
			}
			last, barrier = li, false
			dispatches++
			if runs[li]++; b.chunkCPU && runs[li] > 1 {
				t.Fatalf("%s: launch %d has %d runs in one chunk", name, li, runs[li])
			}
			g := cls[li].cost.grid
			cov := seen[cmd.Pipeline]
			for z := cmd.Base[2]; z < cmd.Base[2]+cmd.Groups[2]; z++ {
				for y := cmd.Base[1]; y < cmd.Base[1]+cmd.Groups[1]; y++ {
					for x := cmd.Base[0]; x < cmd.Base[0]+cmd.Groups[0]; x++ {
						if x >= g[0] || y >= g[1] || z >= g[2] {
							t.Fatalf("%s: workgroup (%d %d %d) outside grid %v", name, x, y, z, g)
						}
						cov[(z*g[1]+y)*g[0]+x]++
					}
				}
			}
		}
		if dispatches == 0 {
			t.Fatalf("%s: an empty chunk", name)
		}
	}
	for l, cov := range seen {
		for i, n := range cov {
			if n != 1 {
				t.Fatalf("%s: %s workgroup %d ran %d times", name, l, i, n)
			}
		}
	}
}

// chunkedBackend sets b to split every cancellable call into chunks of
// about minGroups workgroups.
func chunkedBackend(b *Backend, minGroups float64) func() {
	saved, savedMin, savedOne := b.chunkTarget, b.chunkMinGroups, b.chunkCPU
	b.chunkTarget, b.chunkMinGroups = time.Nanosecond, minGroups
	return func() { b.chunkTarget, b.chunkMinGroups, b.chunkCPU = saved, savedMin, savedOne }
}

// TestChunkedBits: a call split into many submissions gives the bits of
// one submission — forward, backward and step, host and resident — and
// leaves no pooled buffer behind.
func TestChunkedBits(t *testing.T) {
	b := openBackend(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, c := range []hostCase{
		{2, 4, 2, 150, 130, 16, 16, spec.MaskCausalBottomRight},
		{1, 2, 1, 70, 90, 8, 24, spec.MaskCausalTopLeft},
		{2, 2, 2, 40, 40, 16, 16, spec.MaskNone},
	} {
		t.Run(c.name(i), func(t *testing.T) {
			h := c.problem(uint64(i))
			p := h.p
			run := func(ctx context.Context) ([][]float32, int64) {
				outs := [][]float32{make([]float32, len(h.o)), make([]float32, len(h.lse)),
					make([]float32, len(h.dq)), make([]float32, len(h.dk)), make([]float32, len(h.dv))}
				s0 := b.dev.Stats().Submissions
				if err := ForwardHost(ctx, b, p, h.q, h.k, h.v, outs[0], outs[1], HostBias{}); err != nil {
					t.Fatal(err)
				}
				if err := BackwardHost(ctx, b, p, h.q, h.k, h.v, outs[0], outs[1], h.dO, outs[2], outs[3], outs[4], HostBias{}); err != nil {
					t.Fatal(err)
				}
				// The step on resident tensors.
				qs, ks, vs, os := spec.Shape{B: p.B, S: p.Nq, H: p.Hq, D: p.D}, spec.Shape{B: p.B, S: p.Nk, H: p.Hkv, D: p.D}, spec.Shape{B: p.B, S: p.Nk, H: p.Hkv, D: p.Dv}, spec.Shape{B: p.B, S: p.Nq, H: p.Hq, D: p.Dv}
				q, k, v, do := resident(t, b, qs, p.Q, h.q), resident(t, b, ks, p.K, h.k), resident(t, b, vs, p.V, h.v), resident(t, b, os, p.O, h.dO)
				o, lse := resident(t, b, os, p.O, nil), resident(t, b, LSEShape(p), LSEStrides(p), nil)
				dq, dk, dv := resident(t, b, qs, p.Q, nil), resident(t, b, ks, p.K, nil), resident(t, b, vs, p.V, nil)
				s1 := b.dev.Stats().Submissions
				if err := b.Step(ctx, p, q, k, v, do, o, lse, dq, dk, dv); err != nil {
					t.Fatal(err)
				}
				n := s1 - s0 + b.dev.Stats().Submissions - s1
				for _, x := range []*Tensor{o, lse, dq, dk, dv} {
					outs = append(outs, fetch(t, x))
				}
				return outs, n
			}
			want, n1 := run(context.Background())
			for _, minGroups := range []float64{1, 7} {
				restore := chunkedBackend(b, minGroups)
				b.chunkCPU = minGroups == 1
				got, n := run(ctx)
				restore()
				if n <= n1 {
					t.Errorf("min %v: %d submissions chunked, %d whole: not chunked", minGroups, n, n1)
				}
				for j := range want {
					if !bitsEqual(got[j], want[j]) {
						t.Errorf("min %v: output %d of the chunked calls differs from one submission", minGroups, j)
					}
				}
				t.Logf("min %v: %d submissions (%d whole)", minGroups, n, n1)
			}
		})
	}
	if live, _, _ := b.PoolStats(); live != 0 {
		t.Errorf("%d pooled buffers handed out after the calls", live)
	}
}

// bigForward is a host forward expected to take seconds on lavapipe.
func bigForward(b *Backend) *hostProblem {
	h, n := 4, 2048
	if b.info.Type != "cpu" {
		h, n = 16, 32768 // a GPU: still well over a chunk
	}
	return newHostProblem(5, 1, h, h, n, n, 64, 64, spec.MaskNone)
}

// TestChunkedCancel cancels a long call after 200 ms: it returns the
// context's error within about a chunk, no work of it left running (its
// buffers back in the pool), and the next call does not wait for it.
func TestChunkedCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of work on lavapipe")
	}
	b := openBackend(t, "")
	small := newHostProblem(6, 1, 1, 1, 16, 16, 16, 16, spec.MaskNone)
	if err := ForwardHost(context.Background(), b, small.p, small.q, small.k, small.v, small.o, small.lse, HostBias{}); err != nil {
		t.Fatal(err)
	}
	h := bigForward(b)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := ForwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, HostBias{})
	took := time.Since(start)
	if err == nil {
		t.Skipf("the call finished in %v, before its cancellation", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled call: %v", err)
	}
	if errors.Is(err, device.ErrTimeout) {
		t.Errorf("cancelled call abandoned its work: %v", err)
	}
	t.Logf("cancelled at 200 ms, returned after %v: %v", took, err)
	if took > 1200*time.Millisecond {
		t.Errorf("cancelled call returned after %v", took)
	}
	if live, _, _ := b.PoolStats(); live != 0 {
		t.Errorf("%d pooled buffers still handed out", live)
	}
	start = time.Now()
	if err := ForwardHost(context.Background(), b, small.p, small.q, small.k, small.v, small.o, small.lse, HostBias{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("next small call: %v", time.Since(start))
	if d := time.Since(start); d > time.Second {
		t.Errorf("the next small call took %v", d)
	}
}

// TestChunkedClose closes the backend during a long resident call: the
// call returns ErrClosed, Close returns within about a chunk, and nothing
// the device created outlives it.
func TestChunkedClose(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of work on lavapipe")
	}
	b, err := New(devicetest.Open(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := bigForward(b)
	p := h.p
	qs, os := spec.Shape{B: p.B, S: p.Nq, H: p.Hq, D: p.D}, spec.Shape{B: p.B, S: p.Nq, H: p.Hq, D: p.Dv}
	q, k, v := resident(t, b, qs, p.Q, h.q), resident(t, b, qs, p.K, h.k), resident(t, b, qs, p.V, h.v)
	o, lse := resident(t, b, os, p.O, nil), resident(t, b, LSEShape(p), LSEStrides(p), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Forward(ctx, p, q, k, v, o, lse) }()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	err = <-done
	t.Logf("Close during the call: %v; the call: %v", took, err)
	if err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("call during Close: %v, want ErrClosed", err)
	}
	if took > 1200*time.Millisecond {
		t.Errorf("Close during a call took %v", took)
	}
	if live, _, _ := b.PoolStats(); live != 0 {
		t.Errorf("%d pooled buffers still handed out", live)
	}
	for _, x := range []*Tensor{q, k, v, o, lse} {
		x.Close()
	}
}

// TestCloseWaitsForAbandonedWork: a chunk that overruns its drain (the
// rate table far too optimistic, as after a GPU clock drop) leaves work on
// the GPU when Close stops its call; Close must wait for that work before
// it destroys the pipelines and buffers it uses (the validation layer
// reports vkDestroyPipeline on a pipeline in use otherwise), and the call's
// error says both that Close stopped it and why its wait ended.
func TestCloseWaitsForAbandonedWork(t *testing.T) {
	if testing.Short() {
		t.Skip("runs seconds of work")
	}
	dev := devicetest.Open(t)
	b, err := New(dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.rates.prior = 1e15 // every chunk far longer than expected
	h := newHostProblem(5, 1, 8, 8, 4096, 4096, 64, 64, spec.MaskNone)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done <- ForwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, HostBias{})
	}()
	time.Sleep(300 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("call stopped by Close: %v, want ErrClosed", err)
	}
}

// TestChunkedHeadGroups: a call whose kernels run the heads of a tile
// together (a bias broadcast over heads, on a device with cooperative
// matrices) gives the bits of one submission when it is split into many —
// parts of each grid, recorded with a base — since the kernels map their
// absolute workgroup IDs over the whole grid (ext.glsl grid_tile, whose
// width the plan's grid must be).
func TestChunkedHeadGroups(t *testing.T) {
	b := openBackend(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dt := spec.Float32
	if slices.Contains(b.DTypes(), spec.Float16) {
		dt = spec.Float16
	}
	p := bshdProblem(2, 8, 4, 150, 90, 32)
	p.Mask = spec.MaskCausalBottomRight
	p.Ext = &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{DType: dt, Row: p.Nk}}
	grouped := 0
	for _, dir := range []Dir{Fwd, Bwd} {
		pl, err := b.Plan(ctx, p, dt, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range pl.Launches {
			if l.HeadGroup <= 1 {
				continue
			}
			grouped++
			n, rows, heads := p.Nq, l.BR, p.Hq
			if shaders.BaseKernel(l.Kernel) == shaders.KernelBwdCMDKDV {
				n, rows, heads = p.Nk, l.BC, p.Hkv
			}
			if l.Grid[0] != uint32((n+rows-1)/rows) || l.Grid[1] != uint32(heads) || heads%l.HeadGroup != 0 || l.Base != ([3]uint32{}) {
				t.Errorf("%s: grid %v from %v, tile rows %d, head group %d: not the whole grid of ceil(%d/%d) tiles × %d heads", l.Kernel, l.Grid, l.Base, rows, l.HeadGroup, n, rows, heads)
			}
		}
	}
	t.Logf("%v: %d launches with head groups", dt, grouped)
	run := func(ctx context.Context) [][]float32 {
		if dt == spec.Float32 {
			return biasRun(t, ctx, b, p, func(x float32) float32 { return x }, func(x float32) float32 { return x })
		}
		return biasRun(t, ctx, b, p, float16.Fromfloat32, float16.Float16.Float32)
	}
	s0 := b.dev.Stats().Submissions
	want := run(context.Background())
	s1 := b.dev.Stats().Submissions
	restore := chunkedBackend(b, 7)
	got := run(ctx)
	restore()
	if n := b.dev.Stats().Submissions - s1; n <= s1-s0 {
		t.Errorf("%d submissions chunked, %d whole: not chunked", n, s1-s0)
	}
	for i, name := range []string{"dq", "dk", "dv", "dbias", "o", "lse"} {
		if !bitsEqual(got[i], want[i]) {
			t.Errorf("%s of the chunked call differs from one submission", name)
		}
	}
}
