package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/reference"
)

// extString names e's options for a test name.
func extString(e *spec.Ext) string {
	s := fmt.Sprintf("_win%d,%d", e.Left, e.Right)
	if e.BottomRight {
		s += "_br"
	}
	if e.Softcap > 0 {
		s += fmt.Sprintf("_cap%g", e.Softcap)
	}
	if e.Slopes != nil {
		s += "_alibi"
		if e.SlopesPerBatch {
			s += "B"
		}
	}
	if e.SeqUsedK != nil {
		s += fmt.Sprintf("_used%v", e.SeqUsedK)
	}
	if d := e.Dropout; d != nil {
		s += fmt.Sprintf("_drop%d_seed%d_off%d", d.Threshold, d.Seed, d.Offset)
		if d.Batch0 != 0 {
			s += fmt.Sprintf("_b0%d", d.Batch0)
		}
	}
	return s
}

// window returns a sliding window (left, right; −1 unbounded) with its
// matching mask: a causal one when right is 0.
func window(left, right int, bottomRight bool) (*spec.Ext, spec.Mask) {
	e := &spec.Ext{Left: left, Right: right, BottomRight: bottomRight}
	switch {
	case right != 0:
		return e, spec.MaskNone
	case bottomRight:
		return e, spec.MaskCausalBottomRight
	}
	return e, spec.MaskCausalTopLeft
}

// alibi returns n slopes 2^(−8(i+1)/n), the ALiBi paper's geometric series.
func alibi(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(math.Exp2(-8 * float64(i+1) / float64(n)))
	}
	return s
}

// with returns a copy of e changed by f.
func with(e *spec.Ext, f func(*spec.Ext)) *spec.Ext {
	c := *e
	f(&c)
	return &c
}

// extCases spans windows (left only, right only, both, causal, both
// alignments, Nq ≠ Nk both ways with rows that see no key), softcaps,
// ALiBi slopes per head and per sequence, per-sequence key counts (0 and
// Nk included) and their combinations, on GQA heads, odd sizes, tile
// sizes larger and smaller than the window, and strided layouts.
func extCases() []tcase {
	var cases []tcase
	add := func(c tcase) { cases = append(cases, c.withDefaults()) }
	sizes := [][2]int{{33, 33}, {17, 129}, {129, 17}}
	for _, br := range []bool{false, true} {
		for _, lr := range [][2]int{{5, -1}, {-1, 3}, {7, 2}, {-1, 0}, {10, 0}, {0, 0}, {40, 40}} {
			e, m := window(lr[0], lr[1], br)
			for _, n := range sizes {
				add(tcase{b: 2, hq: 4, hkv: 2, nq: n[0], nk: n[1], d: 16, mask: m, ext: e, cfg: Config{Br: 8, Bc: 4}})
			}
			add(tcase{b: 1, hq: 2, hkv: 1, nq: 129, nk: 129, d: 32, mask: m, ext: e})
		}
		// Tiles wider than the window, and a window wider than the tiles.
		e, m := window(20, 0, br)
		add(tcase{b: 1, hq: 2, hkv: 1, nq: 300, nk: 260, d: 8, mask: m, ext: e, cfg: Config{Br: 7, Bc: 5}})
		add(tcase{b: 1, hq: 2, hkv: 1, nq: 260, nk: 300, d: 8, mask: m, ext: e})
	}

	none := &spec.Ext{Left: -1, Right: -1}
	causal, cm := window(-1, 0, true)
	for _, c := range []float32{1, 5, 30} {
		softcap := func(e *spec.Ext) { e.Softcap = c }
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 33, nk: 33, d: 16, ext: with(none, softcap)})
		add(tcase{b: 1, hq: 4, hkv: 2, nq: 17, nk: 129, d: 24, mask: cm, ext: with(causal, softcap), cfg: Config{Br: 16, Bc: 32}})
		e, m := window(9, 4, false)
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 129, nk: 33, d: 16, mask: m, ext: with(e, softcap), layout: "padded"})
	}

	perHead := func(e *spec.Ext) { e.Slopes = alibi(4) }
	perBatch := func(e *spec.Ext) { e.Slopes, e.SlopesPerBatch = append(alibi(4), 0.7, 0.05, 0.3, 0.01), true }
	for _, f := range []func(*spec.Ext){perHead, perBatch} {
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 33, nk: 33, d: 16, ext: with(none, f)})
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 33, nk: 129, d: 16, mask: cm, ext: with(causal, f), cfg: Config{Br: 16, Bc: 8}})
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 129, nk: 17, d: 16, mask: cm, ext: with(causal, f), layout: "bhsd"})
		tl, tm := window(-1, 0, false)
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 65, nk: 65, d: 16, mask: tm, ext: with(tl, f), layout: "packed"})
	}

	for _, used := range [][]int32{{0, 129}, {5, 17}, {129, 0, 64}} {
		b := len(used)
		counts := func(e *spec.Ext) { e.SeqUsedK = used }
		add(tcase{b: b, hq: 4, hkv: 2, nq: 33, nk: 129, d: 16, ext: with(none, counts), cfg: Config{Br: 8, Bc: 16}})
		add(tcase{b: b, hq: 4, hkv: 2, nq: 33, nk: 129, d: 16, mask: cm, ext: with(causal, counts)})
		w, m := window(6, 3, true)
		add(tcase{b: b, hq: 4, hkv: 2, nq: 17, nk: 129, d: 16, mask: m, ext: with(w, counts), cfg: Config{Br: 4, Bc: 8}})
		w, m = window(6, 3, false)
		add(tcase{b: b, hq: 4, hkv: 2, nq: 17, nk: 129, d: 16, mask: m, ext: with(w, counts), layout: "padded"})
	}

	// Everything at once.
	all := func(e *spec.Ext) {
		e.Softcap = 3
		e.Slopes, e.SlopesPerBatch = []float32{0.5, 0.25, 0.125, 0.0625, 0.3, 0.2, 0.1, 0.05}, true
		e.SeqUsedK = []int32{100, 33}
	}
	for _, br := range []bool{false, true} {
		w, m := window(11, 0, br)
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 33, nk: 129, d: 40, dv: 24, mask: m, ext: with(w, all), cfg: Config{Br: 8, Bc: 16, Workers: 3}})
		w, m = window(-1, 7, br)
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 129, nk: 129, d: 8, mask: m, ext: with(w, all), layout: "padded"})
	}
	return cases
}

// TestExtAgainstReference compares spec.Ext problems with the float64
// reference of spec.Ext's definition.
func TestExtAgainstReference(t *testing.T) {
	runCases(t, extCases(), checkCase)
}

// TestExtAgainstReferencePortable repeats the comparison on the portable
// Go kernels when the vector kernels are in use.
func TestExtAgainstReferencePortable(t *testing.T) {
	portableKernels(t, "TestExtAgainstReference")
	runCases(t, extCases(), checkCase)
}

// scaleRows multiplies the even query rows of q by x.
func scaleRows(x float64) func(q, k, v dense) {
	return func(q, _, _ dense) {
		for b := range q.b {
			for h := range q.h {
				for i := 0; i < q.n; i += 2 {
					for c := range q.row(b, h, i) {
						q.row(b, h, i)[c] *= x
					}
				}
			}
		}
	}
}

// TestExtHugeScores: a softcap keeps scores of 1e16 finite (±c), with zero
// gradients through the saturated tanh; without one they give a one-hot
// softmax.
func TestExtHugeScores(t *testing.T) {
	w, m := window(20, 3, false)
	for _, c := range []tcase{
		{b: 1, hq: 4, hkv: 2, nq: 33, nk: 129, d: 16, ext: &spec.Ext{Left: -1, Right: -1, Softcap: 5}},
		{b: 2, hq: 4, hkv: 2, nq: 129, nk: 33, d: 16, mask: m, ext: with(w, func(e *spec.Ext) { e.Softcap = 2; e.Slopes = alibi(4) })},
	} {
		c.dv, c.layout, c.edit = c.d, "bshd", scaleRows(1e8)
		t.Run(c.String(), func(t *testing.T) { checkCase(t, c) })
	}
}

// TestExtExtremeOptions: a softcap and ALiBi slopes beyond
// MaxFloat32/log2e (where softcap·log2e and slope·log2e would overflow)
// follow the reference: such a softcap is the identity on these scores,
// such slopes leave each row its diagonal key alone.
func TestExtExtremeOptions(t *testing.T) {
	huge := float32(3e38)
	for _, e := range []*spec.Ext{
		{Left: -1, Right: -1, Softcap: huge},
		{Left: -1, Right: -1, Softcap: huge, Slopes: []float32{huge, 0.5, huge, 0.01}},
		{Left: -1, Right: -1, Slopes: []float32{huge, huge, 1, 0}},
	} {
		c := tcase{b: 2, hq: 4, hkv: 2, nq: 33, nk: 33, d: 16, dv: 16, layout: "bshd", ext: e}
		t.Run(c.String(), func(t *testing.T) { checkCase(t, c) })
	}
}

// infRows sets feature 0 of query rows 3 and 5 of every (batch, head) to
// +Inf and −Inf and makes feature 0 of every key positive, so that row
// 3's raw scores are all +Inf and row 5's all −Inf.
func infRows(q, k, _ dense) {
	for b := range q.b {
		for h := range q.h {
			q.row(b, h, 3)[0] = math.Inf(1)
			q.row(b, h, 5)[0] = math.Inf(-1)
		}
		for h := range k.h {
			for j := range k.n {
				k.row(b, h, j)[0] = math.Abs(k.row(b, h, j)[0]) + 0.25
			}
		}
	}
}

// TestExtInfScores: the softcap turns ±Inf raw scores into ±c, so the rows
// holding them have a finite softmax and dQ = 0 (the tanh is flat there).
// dK is not compared: a key those rows see gets 0·(±Inf) = NaN.
func TestExtInfScores(t *testing.T) {
	w, m := window(8, 8, true)
	for _, c := range []tcase{
		{b: 1, hq: 4, hkv: 2, nq: 33, nk: 17, d: 16, ext: &spec.Ext{Left: -1, Right: -1, Softcap: 4}},
		{b: 2, hq: 4, hkv: 2, nq: 17, nk: 33, d: 16, mask: m, ext: with(w, func(e *spec.Ext) { e.Softcap = 1; e.Slopes = alibi(4) }),
			cfg: Config{Br: 4, Bc: 8}},
	} {
		c.dv, c.layout, c.edit = c.d, "bshd", infRows
		t.Run(c.String(), func(t *testing.T) {
			ops, lse, ref := runCase(t, c)
			assertLSE(t, lse, ref.lse)
			for _, o := range []struct {
				name      string
				got, want dense
			}{{"O", ops.o.get(), ref.o}, {"dQ", ops.dq.get(), ref.dq}, {"dV", ops.dv.get(), ref.dv}} {
				assert.LessOrEqual(t, reference.RelL2(o.got.x, o.want.x), tol, o.name)
			}
		})
	}
}

// TestExtDeadRows: rows whose visible raw scores are all −Inf (without a
// softcap) or that see no key (the window, or a key count of 0) get O = 0,
// LSE = −Inf and zero gradients, never NaN.
func TestExtDeadRows(t *testing.T) {
	w, m := window(2, 0, true)
	e := with(w, func(e *spec.Ext) { e.Slopes = alibi(4); e.SeqUsedK = []int32{0, 9} })
	c := tcase{b: 2, hq: 4, hkv: 2, nq: 17, nk: 33, d: 16, dv: 16, mask: m, layout: "bshd", ext: e, edit: func(q, k, v dense) {
		for b := range q.b {
			for h := range q.h {
				q.row(b, h, 12)[0] = math.Inf(-1)
			}
			for h := range k.h {
				for j := range k.n {
					k.row(b, h, j)[0] = math.Abs(k.row(b, h, j)[0]) + 0.25
				}
			}
		}
	}}
	checkCase(t, c)
	ops, lse, _ := runCase(t, c)
	p := c.problem()
	o, dq := ops.o.get(), ops.dq.get()
	for b := range p.B {
		for h := range p.Hq {
			for i := range p.Nq {
				lo, hi := p.KeyRange(b, i)
				if lo < hi && i != 12 {
					continue
				}
				checkDeadRow(t, p, lse, o, dq, b, h, i)
			}
		}
	}
	requireNoNaN(t, o, dq, ops.dk.get(), ops.dv.get())
}

// TestExtUnusedKeys: the keys beyond a sequence's key count are never
// read into a result: NaN there changes nothing, and their dK and dV are
// 0.
func TestExtUnusedKeys(t *testing.T) {
	used := []int32{0, 40, 97}
	nan := func(_, k, v dense) {
		for b, n := range used {
			for h := range k.h {
				for j := int(n); j < k.n; j++ {
					for _, r := range [][]float64{k.row(b, h, j), v.row(b, h, j)} {
						for c := range r {
							r[c] = math.NaN()
						}
					}
				}
			}
		}
	}
	for _, e := range []*spec.Ext{{Left: -1, Right: -1}, {Left: 5, Right: 0, BottomRight: true}, {Left: -1, Right: 9, Softcap: 2}} {
		e.SeqUsedK = used
		c := tcase{b: 3, hq: 4, hkv: 2, nq: 33, nk: 129, d: 16, dv: 16, layout: "bshd", ext: e, edit: nan, cfg: Config{Br: 8, Bc: 16}}
		t.Run(c.String(), func(t *testing.T) { checkCase(t, c) })
	}
}

// TestExtDeterminism: an Ext problem's backward gives the same bits
// whatever the worker count.
func TestExtDeterminism(t *testing.T) {
	w, m := window(30, 0, true)
	e := with(w, func(e *spec.Ext) { e.Softcap = 4; e.Slopes = alibi(4); e.SeqUsedK = []int32{200, 260} })
	c := tcase{b: 2, hq: 4, hkv: 2, nq: 300, nk: 260, d: 40, dv: 40, mask: m, layout: "bshd", ext: e}
	checkWorkerDeterminism(t, c)
}

// TestExtWindowSkipsTiles: a narrow window visits only the key tiles (the
// forward and dQ items) and query tiles (the dK/dV items) near the
// diagonal: a few context checks per item, not one per tile of the
// sequence.
func TestExtWindowSkipsTiles(t *testing.T) {
	const d, tiles = 8, 50
	n := tiles * DefaultBr
	p := &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: n, Nk: n, D: d, Dv: d, Scale: 0.25,
		Q: spec.BSHD(n, 1, d), K: spec.BSHD(n, 1, d), V: spec.BSHD(n, 1, d), O: spec.BSHD(n, 1, d),
		Ext: &spec.Ext{Left: 3, Right: 2}}
	buf := func() []float32 { return make([]float32, n*d) }
	q, k, v, o, do, dq, dk, dv := buf(), buf(), buf(), buf(), buf(), buf(), buf(), buf()
	lse := make([]float32, n)
	cfg := Config{Workers: 1}

	ctx := newCountCtx(math.MaxInt64)
	require.NoError(t, ForwardWith(ctx, cfg, p, q, k, v, o, lse))
	// Per item: one check before it and one per key tile (two or three).
	assert.LessOrEqual(t, ctx.calls.Load(), int64(5*tiles), "forward")

	ctx = newCountCtx(math.MaxInt64)
	require.NoError(t, BackwardWith(ctx, cfg, p, q, k, v, o, lse, do, dq, dk, dv))
	// The D pass, then the dK/dV and dQ passes at most four checks per item.
	assert.LessOrEqual(t, ctx.calls.Load(), int64(2*tiles+2*4*tiles), "backward")
}

// TestExtWindowIsMask: an Ext problem with only a causal or no window and
// every key counted is the plain problem of its mask, bit for bit.
func TestExtWindowIsMask(t *testing.T) {
	for _, m := range masks {
		c := tcase{b: 2, hq: 4, hkv: 2, nq: 70, nk: 45, d: 16, dv: 16, mask: m, layout: "bshd", cfg: Config{Br: 16, Bc: 8}}
		t.Run(c.String(), func(t *testing.T) {
			run := func(e *spec.Ext) [][]float32 {
				p := c.problem()
				p.Ext = e
				ops := layoutViews(p, c.layout)
				ops.setInputs(p, rand.New(rand.NewPCG(5, 6)), 2)
				lse := nanFull(p.B * p.Hq * p.Nq)
				ctx := context.Background()
				require.NoError(t, ForwardWith(ctx, c.cfg, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse))
				require.NoError(t, BackwardWith(ctx, c.cfg, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse,
					ops.do.buf(), ops.dq.buf(), ops.dk.buf(), ops.dv.buf()))
				return [][]float32{ops.o.full, lse, ops.dq.full, ops.dk.full, ops.dv.full}
			}
			e := &spec.Ext{Left: -1, Right: -1, SeqUsedK: []int32{45, 45}}
			if m != spec.MaskNone {
				e.Right, e.BottomRight = 0, m == spec.MaskCausalBottomRight
			}
			want, got := run(nil), run(e)
			for g := range got {
				for i, x := range got[g] {
					if y := want[g][i]; math.Float32bits(x) != math.Float32bits(y) && !(math.IsNaN(float64(x)) && math.IsNaN(float64(y))) {
						t.Fatalf("output %d element %d: %v, want %v", g, i, x, y)
					}
				}
			}
		})
	}
}

// TestExtChecks: options that would index out of range are errors, not
// panics.
func TestExtChecks(t *testing.T) {
	c := tcase{b: 2, hq: 2, hkv: 1, nq: 10, nk: 12, d: 8, dv: 8, layout: "bshd"}
	p := c.problem()
	ops := layoutViews(p, c.layout)
	ctx := context.Background()
	lse := make([]float32, p.B*p.Hq*p.Nq)
	for _, e := range []*spec.Ext{
		{Left: -2, Right: -1},
		{Left: -1, Right: math.MaxInt},
		{Left: -1, Right: -1, SeqUsedK: []int32{3}},
		{Left: -1, Right: -1, SeqUsedK: []int32{3, 13}},
		{Left: -1, Right: -1, SeqUsedK: []int32{-1, 3}},
		{Left: -1, Right: -1, Slopes: []float32{1}},
		{Left: -1, Right: -1, Slopes: []float32{1, 2}, SlopesPerBatch: true},
	} {
		p.Ext = e
		assert.Error(t, Forward(ctx, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse), "%+v", *e)
		assert.Error(t, Backward(ctx, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse,
			ops.do.buf(), ops.dq.buf(), ops.dk.buf(), ops.dv.buf()), "%+v", *e)
	}
	p.Ext = &spec.Ext{Left: 1, Right: 0, Slopes: []float32{1, 2, 3, 4}, SlopesPerBatch: true, SeqUsedK: []int32{0, 12}}
	require.NoError(t, Forward(ctx, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse))
}
