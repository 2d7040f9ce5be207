//go:build cgo

package vkattn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

// biasProblem is a GQA problem with a bias of dtype dt broadcast over the
// batch (its dBias, with grad, folds when B > 1) or not (bcast false).
func biasProblem(dt spec.DType, bcast, grad bool) *spec.Problem {
	p := bshdProblem(2, 4, 2, 100, 77, 40)
	x := &spec.Bias{DType: dt, Batch: 4 * 100 * 77, Head: 100 * 77, Row: 77, Grad: grad,
		GradBatch: 4 * 100 * 77, GradHead: 100 * 77, GradRow: 77}
	if bcast {
		x.Batch, x.GradBatch = 0, 0
	}
	p.Ext = &spec.Ext{Left: -1, Right: -1, Bias: x}
	return p
}

// TestBiasPlan: a pass with a bias starts with bias_summary (the kernels
// after it behind a barrier, binding the bias and its summary), a backward
// with dBias zeroes the dQ kernel's dS target before it runs, and one
// whose dBias folds ends with bias_reduce over a float32 scratch; the
// recorder does exactly that — the Ext update, the fills and their
// barriers, the dispatches.
func TestBiasPlan(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t, "")
	for _, dt := range b.DTypes() {
		for _, c := range []struct{ bcast, grad bool }{{false, false}, {false, true}, {true, true}} {
			bdt := spec.Float32
			if c.grad && !c.bcast {
				bdt = dt
			}
			p := biasProblem(bdt, c.bcast, c.grad)
			set := allocBiasOperands(t, b, p, dt)
			for _, dir := range []Dir{Fwd, Bwd} {
				name := fmt.Sprintf("%v %+v %v", dt, c, dir)
				pl, err := b.Plan(ctx, p, dt, dir)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				ls := pl.Launches
				if ls[0].Kernel != shaders.KernelBiasSummary || !ls[1].Barrier || pl.Scratch[OpBiasSum] != 4*int64(shaders.BiasSummary(p).Len()) {
					t.Errorf("%s: launches %v scratch %v: want bias_summary first, a barrier after it", name, kernelsOf(ls), pl.Scratch)
				}
				folds := dir == Bwd && c.grad && c.bcast
				if last := ls[len(ls)-1]; folds != (last.Kernel == shaders.KernelBiasReduce) || (folds && !last.Barrier) ||
					folds != (pl.Scratch[OpDBiasAcc] == shaders.DSChunking(p, b.dsBytes).Bytes(p)) {
					t.Errorf("%s: launches %v scratch %v: bias_reduce last (behind a barrier) and its scratch exactly when dBias folds", name, kernelsOf(ls), pl.Scratch)
				}
				for _, l := range ls {
					scores := slices.Contains(shaders.ExtKernels, l.Kernel) && l.Kernel != shaders.KernelBwdPre
					if !isBiasKernel(&l) && scores != (slices.Contains(l.Bindings, OpBias) && slices.Contains(l.Bindings, OpBiasSum)) {
						t.Errorf("%s: %s binds %v", name, l.Kernel, l.Bindings)
					}
					dq := l.Kernel == shaders.KernelBwdDQ || l.Kernel == shaders.KernelBwdCMDQ
					want := []Operand(nil)
					switch {
					case dq && folds:
						want = []Operand{OpDBiasAcc}
					case dq && c.grad:
						want = []Operand{OpDBias}
					}
					if !slices.Equal(l.Zero, want) {
						t.Errorf("%s: %s zeroes %v, want %v", name, l.Kernel, l.Zero, want)
					}
				}
				r := b.dev.Record()
				s := &scratch{b: b}
				if err := b.recordPasses(r, s, p, []*Plan{pl}, set.bufs()); err != nil {
					t.Fatalf("%s: record: %v", name, err)
				}
				s.done(true)
				var got, exp []string
				for _, cmd := range r.Commands() {
					got = append(got, cmd.Kind)
				}
				for i, l := range ls {
					if i == 0 || len(l.Zero) > 0 {
						exp = append(exp, "barrier") // (after the work that may read them)
					}
					for range l.Zero {
						exp = append(exp, "fill")
					}
					if i == 0 {
						exp = append(exp, "update")
					}
					if i == 0 || len(l.Zero) > 0 {
						exp = append(exp, "barrier")
					}
					if l.Barrier {
						exp = append(exp, "barrier")
					}
					exp = append(exp, "dispatch")
				}
				if !slices.Equal(got, exp) {
					t.Errorf("%s: recorded %v, want %v", name, got, exp)
				}
			}
		}
	}
}

// allocBiasOperands is allocOperands with p's bias and dBias too.
func allocBiasOperands(t *testing.T, b *Backend, p *spec.Problem, dt spec.DType) Operands {
	t.Helper()
	set := allocOperands(t, b, p, dt)
	ts := &tensorSet{b: b, p: p, dt: dt}
	t.Cleanup(ts.free)
	for _, op := range []Operand{OpBias, OpDBias} {
		x, err := ts.alloc(op)
		if err != nil {
			t.Fatal(err)
		}
		set[op] = x
	}
	return set
}

func kernelsOf(ls []Launch) []string {
	var ks []string
	for _, l := range ls {
		ks = append(ks, l.Kernel)
	}
	return ks
}

// TestBiasSummary runs bias_summary on a bias with hidden blocks and
// checks every word of the summary against the bias on the host.
func TestBiasSummary(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t, "")
	for _, dt := range b.DTypes() {
		for _, row := range []bool{true, false} {
			p := bshdProblem(2, 3, 3, 70, 600, 16)
			x := &spec.Bias{DType: dt, Batch: 3 * 70 * 600, Head: 70 * 600, Row: 600}
			nq := 70
			if !row {
				x.Batch, x.Head, x.Row, nq = 3*600, 600, 0, 1
			}
			p.Ext = &spec.Ext{Left: -1, Right: -1, Bias: x}
			// −Inf everywhere but a few elements, one per chosen block.
			n := 2 * 3 * nq * 600
			vals := make([]float64, n)
			for i := range vals {
				vals[i] = math.Inf(-1)
			}
			for _, e := range []int{0, 17, 600*5 + 599, 600 * 33, 3*nq*600 + 600*(nq-1) + 40, n - 1} {
				vals[e%n] = 0.5
			}
			bias := uploadBiasValues(t, b, p, dt, vals)
			sum := shaders.BiasSummary(p)
			out, err := b.NewTensor(spec.Float32, spec.Shape{B: 1, S: 1, H: 1, D: sum.Len()}, spec.Strides{})
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			l, err := b.biasLaunch(shaders.KernelBiasSummary, p, dt, sum.Grid(), OpExt, OpBias, OpBiasSum)
			if err != nil {
				t.Fatal(err)
			}
			ext, err := b.NewTensor(spec.Float32, spec.Shape{B: 1, S: 1, H: 1, D: len(shaders.ExtWords(p, shaders.ExtPlan{}))}, spec.Strides{})
			if err != nil {
				t.Fatal(err)
			}
			defer ext.Close()
			pipe, err := b.cache.Get(l.key)
			if err != nil {
				t.Fatal(err)
			}
			r := b.dev.Record()
			r.Update(ext.buf, 0, shaders.ExtBytes(p, shaders.ExtPlan{}))
			r.BarrierTransferToCompute()
			pc := params(p)
			if err := r.Dispatch(pipe, pc.Bytes(), l.Grid, ext.buf, bias.buf, out.buf); err != nil {
				t.Fatal(err)
			}
			if _, err := b.dev.Submit(ctx, r); err != nil {
				t.Fatal(err)
			}
			words := make([]float32, sum.Len())
			if err := Download(ctx, out, words); err != nil {
				t.Fatal(err)
			}
			for bb := range sum.Batches {
				for hb := range sum.Heads {
					for rb := range sum.Rows {
						for w := range sum.Words {
							var want uint32
							for k := range 32 {
								for i := rb * 16; i < min(rb*16+16, nq); i++ {
									for j := (w*32 + k) * 16; j < min((w*32+k)*16+16, 600); j++ {
										if !math.IsInf(vals[x.At(bb, hb, i, j)], -1) {
											want |= 1 << k
										}
									}
								}
							}
							at := bb*sum.BatchStride + hb*sum.HeadStride + rb*sum.RowStride + w
							if got := math.Float32bits(words[at]); got != want {
								t.Errorf("%v row %v: word (%d, %d, %d, %d) = %#x, want %#x", dt, row, bb, hb, rb, w, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// uploadBiasValues uploads vals as p's bias tensor of dtype dt.
func uploadBiasValues(t *testing.T, b *Backend, p *spec.Problem, dt spec.DType, vals []float64) *Tensor {
	t.Helper()
	os := opSpec(p, OpBias)
	x, err := b.NewTensor(dt, os.shape, os.st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	var err2 error
	switch dt {
	case spec.Float32:
		f := make([]float32, len(vals))
		for i, v := range vals {
			f[i] = float32(v)
		}
		err2 = Upload(context.Background(), x, f)
	case spec.Float16:
		f := make([]float16.Float16, len(vals))
		for i, v := range vals {
			f[i] = float16.Fromfloat32(float32(v))
		}
		err2 = Upload(context.Background(), x, f)
	case spec.BFloat16:
		f := make([]bfloat16.BFloat16, len(vals))
		for i, v := range vals {
			f[i] = bfloat16.FromFloat32(float32(v))
		}
		err2 = Upload(context.Background(), x, f)
	}
	if err2 != nil {
		t.Fatal(err2)
	}
	return x
}

// TestDBiasChunks: a dBias folded over the batch, the heads or the query
// rows gives the same bits (and so do dQ, dK, dV) whether its dS scratch
// holds every (b, h) plane or one chunk of them at a time — chunks of
// whole batches (or, head-major, whole heads), of a divisor of the inner
// dimension, of one plane — in float32 and in a 16-bit storage type,
// whose dBias is rounded once, at the end.
func TestDBiasChunks(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t, "")
	saved := b.dsBytes
	t.Cleanup(func() { b.dsBytes = saved })
	const nb, hq, nq, nk = 3, 4, 33, 50
	shapes := []struct {
		name             string
		batch, head, row int
	}{
		{"batch", 0, nq * nk, nk},
		{"batch,heads", 0, 0, nk},
		{"heads,rows", nk, 0, 0},
	}
	for _, dt := range []spec.DType{spec.Float32, spec.Float16} {
		if !slices.Contains(b.DTypes(), dt) {
			continue
		}
		for _, sh := range shapes {
			p := bshdProblem(nb, hq, 2, nq, nk, 32)
			p.Mask = spec.MaskCausalBottomRight
			x := &spec.Bias{DType: dt, Batch: sh.batch, Head: sh.head, Row: sh.row, Grad: true,
				GradBatch: sh.batch, GradHead: sh.head, GradRow: sh.row}
			p.Ext = &spec.Ext{Left: -1, Right: -1, BottomRight: true, Bias: x}
			var want [][]float32
			seen := map[int]bool{}
			for _, most := range []int{nb * hq, 6, 4, 2, 1} {
				b.dsBytes = int64(most) * shaders.DSPlaneBytes(p)
				ds := shaders.DSChunking(p, b.dsBytes)
				if seen[ds.Planes] {
					continue
				}
				seen[ds.Planes] = true
				name := fmt.Sprintf("%v %s planes %d", dt, sh.name, ds.Planes)
				pl, err := b.Plan(ctx, p, dt, Bwd)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if pl.ds != ds || ds.HeadMajor != (sh.batch == 0 && sh.head != 0) || countKernel(pl.Launches, shaders.KernelBiasReduce) != ds.Chunks {
					t.Fatalf("%s: launches %v with %+v, want %+v", name, kernelsOf(pl.Launches), pl.ds, ds)
				}
				checkDSChunks(t, name, p, pl.Launches)
				run := func(ctx context.Context) [][]float32 {
					if dt == spec.Float32 {
						return biasRun(t, ctx, b, p, func(x float32) float32 { return x }, func(x float32) float32 { return x })
					}
					return biasRun(t, ctx, b, p, float16.Fromfloat32, float16.Float16.Float32)
				}
				same := func(how string, got [][]float32) {
					for i, n := range []string{"dq", "dk", "dv", "dbias"} {
						if !bitsEqual(got[i], want[i]) {
							t.Errorf("%s%s: %s differs from the one-chunk run", name, how, n)
						}
					}
				}
				s0 := b.dev.Stats().Submissions
				got := run(ctx)
				whole := b.dev.Stats().Submissions - s0
				if want == nil {
					want = got
					continue
				}
				same("", got)
				if ds.Planes > 1 {
					continue
				}
				// One plane a chunk, each launch (its parts of the grids
				// among them) split over submissions of a workgroup or more.
				cctx, cancel := context.WithCancel(ctx)
				restore := chunkedBackend(b, 1)
				s0 = b.dev.Stats().Submissions
				got = run(cctx)
				if n := b.dev.Stats().Submissions - s0; n <= whole {
					t.Errorf("%s: %d submissions chunked, %d whole: not chunked", name, n, whole)
				}
				restore()
				cancel()
				same(", chunked submissions", got)
			}
		}
	}
}

// checkDSChunks checks a folding dBias's launches: each dQ launch is
// followed by bias_reduce's part for its chunk (behind a barrier: the
// k-th part at x = k·its width, every row, the dBias planes its (head,
// batch) pairs fold into), and the dQ launches cover the (heads, batches)
// of the dQ grid exactly once, every tile of queries.
func checkDSChunks(t *testing.T, name string, p *spec.Problem, ls []Launch) {
	t.Helper()
	x := p.Ext.Bias
	keptOf := func(h, b uint32) uint32 { // bias_reduce's z of (b, h)
		z := uint32(0)
		if x.GradBatch != 0 {
			z = b
		}
		if x.GradHead != 0 {
			z = z*uint32(p.Hq) + h
		}
		return z
	}
	full := shaders.BiasReduceGrid(p)
	seen := map[[2]uint32]int{}
	k := uint32(0)
	for i, l := range ls {
		if l.Kernel != shaders.KernelBwdDQ && l.Kernel != shaders.KernelBwdCMDQ {
			continue
		}
		if tiles := shaders.BwdDQGrid(p.B, p.Hq, p.Nq, l.BR)[0]; l.Base[0] != 0 || l.Grid[0] != tiles {
			t.Errorf("%s: dQ launch %d covers tiles %d from %d, want %d from 0", name, i, l.Grid[0], l.Base[0], tiles)
		}
		zs := map[uint32]bool{}
		for y := l.Base[1]; y < l.Base[1]+l.Grid[1]; y++ {
			for z := l.Base[2]; z < l.Base[2]+l.Grid[2]; z++ {
				seen[[2]uint32{y, z}]++
				zs[keptOf(y, z)] = true
			}
		}
		if i+1 == len(ls) || ls[i+1].Kernel != shaders.KernelBiasReduce || !ls[i+1].Barrier {
			t.Errorf("%s: dQ launch %d not followed by bias_reduce: %v", name, i, kernelsOf(ls))
		} else if r := ls[i+1]; r.Base[0] != k*full[0] || r.Grid[0] != full[0] || r.Base[1] != 0 || r.Grid[1] != full[1] || int(r.Grid[2]) != len(zs) {
			t.Errorf("%s: bias_reduce's part %d runs %v from %v; want x %d from %d, every row, the %d dBias planes %v", name, k, r.Grid, r.Base, full[0], k*full[0], len(zs), zs)
		} else {
			for z := r.Base[2]; z < r.Base[2]+r.Grid[2]; z++ {
				if !zs[z] {
					t.Errorf("%s: bias_reduce's part %d runs dBias plane %d, which its chunk does not fold into (%v)", name, k, z, zs)
				}
			}
		}
		k++
	}
	for h := range uint32(p.Hq) {
		for b := range uint32(p.B) {
			if n := seen[[2]uint32{h, b}]; n != 1 {
				t.Errorf("%s: head %d batch %d in %d dQ launches", name, h, b, n)
			}
		}
	}
	if len(seen) != p.Hq*p.B {
		t.Errorf("%s: the dQ launches cover %d (head, batch) pairs, want %d", name, len(seen), p.Hq*p.B)
	}
}

func countKernel(ls []Launch, kernel string) int {
	n := 0
	for _, l := range ls {
		if l.Kernel == kernel {
			n++
		}
	}
	return n
}

// biasRun runs the forward and backward of p (bias of storage T) on b with
// fixed random inputs and returns dQ, dK, dV, dBias, O and LSE as float32.
func biasRun[T Elem](t *testing.T, ctx context.Context, b *Backend, p *spec.Problem, from func(float32) T, to func(T) float32) [][]float32 {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 5))
	conv := func(x []float32) []T { return mapped(x, from) }
	back := func(x []T) []float32 { return mapped(x, to) }
	nq, nk := p.B*p.Nq*p.Hq, p.B*p.Nk*p.Hkv
	q, k, v, do := conv(randn(rng, nq*p.D)), conv(randn(rng, nk*p.D)), conv(randn(rng, nk*p.Dv)), conv(randn(rng, nq*p.Dv))
	bx := opSpec(p, OpBias)
	n, _ := extent(bx.shape, bx.st)
	bias, dbias := conv(randn(rng, int(n))), make([]T, n)
	o, dq, dk, dv := make([]T, nq*p.Dv), make([]T, nq*p.D), make([]T, nk*p.D), make([]T, nk*p.Dv)
	lse := make([]float32, p.B*p.Hq*p.Nq)
	hb := HostBias{Bias: bias, DBias: dbias}
	if err := ForwardHost(ctx, b, p, q, k, v, o, lse, hb); err != nil {
		t.Fatal(err)
	}
	if err := BackwardHost(ctx, b, p, q, k, v, o, lse, do, dq, dk, dv, hb); err != nil {
		t.Fatal(err)
	}
	return [][]float32{back(dq), back(dk), back(dv), back(dbias), back(o), lse}
}

// TestHeadGroup: a kernel groups heads only for a bias broadcast over
// query heads, on tiles of at most maxGroupRows rows — the largest divisor
// of its grid's heads up to maxHeadGroup — and the plan's Ext buffer
// carries bwd_cm_dkdv's group in word 28, the others' in word 27
// (ext.glsl grid_tile).
func TestHeadGroup(t *testing.T) {
	for _, c := range []struct {
		hq, head, br, want int
		bias               bool
	}{
		{32, 0, 64, 8, true}, {16, 0, 32, 8, true}, {12, 0, 64, 6, true}, {6, 0, 64, 6, true}, {7, 0, 16, 7, true},
		{11, 0, 64, 0, true}, {1, 0, 64, 0, true}, {32, 77, 64, 0, true}, {32, 0, 64, 0, false}, {32, 0, 128, 0, true},
	} {
		p := bshdProblem(2, c.hq, 1, 100, 77, 64)
		if c.bias {
			p.Ext = &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{DType: spec.Float32, Head: c.head, Row: 77}}
		}
		name := fmt.Sprintf("Hq %d, bias head stride %d (bias %v), %d-row tiles", c.hq, c.head, c.bias, c.br)
		g := headGroup(p, c.hq, c.br)
		if g != c.want {
			t.Errorf("%s: head group %d, want %d", name, g, c.want)
		}
		for _, k := range []struct {
			kernel string
			word   int
		}{
			{shaders.KernelFlashCM, 27}, {shaders.KernelBwdCMDQ, 27},
			{shaders.KernelBwdCMDKDV, 28}, {shaders.Addressed(shaders.KernelBwdCMDKDV), 28},
		} {
			pl := &Plan{Launches: []Launch{{Kernel: shaders.KernelBiasSummary}, {Kernel: k.kernel, HeadGroup: g}}}
			w := shaders.ExtWords(p, pl.extPlan())
			if w[k.word] != uint32(c.want) || w[27]+w[28] != uint32(c.want) {
				t.Errorf("%s, %s: Ext words 27, 28 = %d, %d; want %d in word %d", name, k.kernel, w[27], w[28], c.want, k.word)
			}
		}
	}
}

// TestPassInitOrdered: a call recording its forward and backward passes
// together (a training step) writes each pass's Ext buffer — the one
// scratch both passes bind, whose words differ between them (the head
// group, the dS chunks) — and fills its zeroed buffers only behind a
// barrier after every dispatch before, which may still read them.
func TestPassInitOrdered(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t, "")
	dt := b.DTypes()[0]
	p := biasProblem(spec.Float32, true, true)
	set := allocBiasOperands(t, b, p, dt)
	var pls []*Plan
	for _, dir := range []Dir{Fwd, Bwd} {
		pl, err := b.Plan(ctx, p, dt, dir)
		if err != nil {
			t.Fatal(err)
		}
		pls = append(pls, pl)
	}
	r := b.dev.Record()
	s := &scratch{b: b}
	if err := b.recordPasses(r, s, p, pls, set.bufs()); err != nil {
		t.Fatal(err)
	}
	s.done(true)
	var kinds []string
	for _, cmd := range r.Commands() {
		kinds = append(kinds, cmd.Kind)
	}
	updates, dispatched := 0, false
	for i, k := range kinds {
		switch k {
		case "dispatch":
			dispatched = true
		case "barrier":
			dispatched = false
		case "update", "fill":
			if k == "update" {
				updates++
			}
			if dispatched {
				t.Errorf("command %d (%s) follows a dispatch with no barrier between them: %v", i, k, kinds)
			}
		}
	}
	if updates != len(pls) {
		t.Errorf("%d Ext updates for %d passes: %v", updates, len(pls), kinds)
	}
}
