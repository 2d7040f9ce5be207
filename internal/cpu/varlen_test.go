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
)

// vcase is a packed (variable-length) problem: sequence b has lensQ[b]
// queries and lensK[b] stored keys, packed without padding in one batch
// of operands in the named layout ("bshd", "bhsd" or "padded").
type vcase struct {
	hq, hkv, d, dv int
	lensQ, lensK   []int
	mask           spec.Mask
	ext            spec.Ext // the options beyond the offsets (CuQ, CuK are set from the lengths)
	layout         string
	cfg            Config
}

func (c vcase) String() string {
	return fmt.Sprintf("Hq%d_Hkv%d_D%d_Dv%d_q%v_k%v_%s_%s_Br%d_Bc%d%s",
		c.hq, c.hkv, c.d, c.dv, c.lensQ, c.lensK, c.mask, c.layout, c.cfg.Br, c.cfg.Bc, extString(&c.ext))
}

// cuOf returns the B+1 offsets of lens.
func cuOf(lens []int) []int32 {
	cu := make([]int32, len(lens)+1)
	for b, n := range lens {
		cu[b+1] = cu[b] + int32(n)
	}
	return cu
}

// problem returns the packed problem (its operands' strides are set by
// packedViews).
func (c vcase) problem() *spec.Problem {
	e := c.ext
	e.CuQ, e.CuK = cuOf(c.lensQ), cuOf(c.lensK)
	p := &spec.Problem{B: len(c.lensQ), Hq: c.hq, Hkv: c.hkv, D: c.d, Dv: c.dv, Mask: c.mask,
		Scale: float32(1 / math.Sqrt(float64(c.d))), Ext: &e}
	for b := range p.B {
		p.Nq, p.Nk = max(p.Nq, c.lensQ[b]), max(p.Nk, c.lensK[b])
	}
	return p
}

// sequence returns sequence b of the packed problem p as its own plain
// (one-sequence) problem with the same options (its dropout drawing
// sequence b's mask: Batch0 + b).
func sequence(p *spec.Problem, b int) *spec.Problem {
	s := *p
	e := *p.Ext
	s.B, s.Nq, s.Nk, s.Ext = 1, p.Queries(b), p.StoredKeys(b), &e
	e.CuQ, e.CuK = nil, nil
	if e.SeqUsedK != nil {
		e.SeqUsedK = []int32{p.Ext.SeqUsedK[b]}
	}
	if e.SlopesPerBatch {
		e.Slopes = e.Slopes[b*p.Hq : (b+1)*p.Hq]
	}
	if d := e.Dropout; d != nil {
		c := *d
		c.Batch0 += b
		e.Dropout = &c
	}
	return &s
}

// packedView allocates a [1, t, h, w] operand in layout, NaN-filled (the
// padding of "padded" included), with a batch stride that would index
// out of range if it were ever used.
func packedView(layout string, t, h, w int) view {
	v := view{b: 1, n: t, h: h, w: w}
	switch layout {
	case "bshd":
		v.full, v.s = nanFull(t*h*w), spec.BSHD(t, h, w)
	case "bhsd":
		v.full, v.s = nanFull(t*h*w), spec.BHSD(t, h, w)
	case "padded":
		hs := w + 3
		ss := h*hs + 5
		v.full, v.off, v.s = nanFull(11+t*ss+2), 11, spec.Strides{Seq: ss, Head: hs}
	default:
		panic(layout)
	}
	v.s.Batch = math.MinInt32 // never used: the operands hold one batch
	return v
}

// packedViews allocates the packed operands and sets p's strides.
func packedViews(p *spec.Problem, layout string) operands {
	tq, tk := p.TotalQ(), p.TotalK()
	r := operands{
		q: packedView(layout, tq, p.Hq, p.D), o: packedView(layout, tq, p.Hq, p.Dv),
		do: packedView(layout, tq, p.Hq, p.Dv), dq: packedView(layout, tq, p.Hq, p.D),
		k: packedView(layout, tk, p.Hkv, p.D), v: packedView(layout, tk, p.Hkv, p.Dv),
		dk: packedView(layout, tk, p.Hkv, p.D), dv: packedView(layout, tk, p.Hkv, p.Dv),
	}
	p.Q, p.K, p.V, p.O = r.q.s, r.k.s, r.v.s, r.o.s
	return r
}

// packRows copies the rows of d (a one-sequence [1, H, n, W] dense array)
// to rows row0 … row0+n−1 of the packed view v.
func packRows(v view, d dense, row0 int) {
	for i := range d.n {
		for h := range d.h {
			for c, x := range d.row(0, h, i) {
				v.full[v.idx(0, row0+i, h, c)] = float32(x)
			}
		}
	}
}

// vseq is one sequence's inputs, its own problem, operands and results.
type vseq struct {
	p           *spec.Problem
	q, k, v, do dense
	ops         operands
	lse         []float32
}

// vrun holds a packed case's problem, operands, LSE and sequences.
type vrun struct {
	p    *spec.Problem
	ops  operands
	lse  []float32
	seqs []vseq
}

// setup draws every sequence's inputs (the keys and values past its key
// count NaN), packs them and runs each sequence as its own problem.
func (c vcase) setup(t *testing.T) *vrun {
	t.Helper()
	r := &vrun{p: c.problem()}
	r.ops = packedViews(r.p, c.layout)
	ctx := context.Background()
	for b := range r.p.B {
		s := vseq{p: sequence(r.p, b)}
		rng := rand.New(rand.NewPCG(uint64(b+1), uint64(c.lensQ[b]*1000+c.lensK[b])))
		s.q = randDense(rng, 1, c.hq, s.p.Nq, c.d, 2)
		s.k = randDense(rng, 1, c.hkv, s.p.Nk, c.d, 2)
		s.v = randDense(rng, 1, c.hkv, s.p.Nk, c.dv, 1)
		s.do = randDense(rng, 1, c.hq, s.p.Nq, c.dv, 1)
		for _, d := range []dense{s.k, s.v} {
			for h := range d.h {
				for j := s.p.Keys(0); j < d.n; j++ {
					for x := range d.row(0, h, j) {
						d.row(0, h, j)[x] = math.NaN()
					}
				}
			}
		}
		q0, k0 := int(r.p.Ext.CuQ[b]), int(r.p.Ext.CuK[b])
		packRows(r.ops.q, s.q, q0)
		packRows(r.ops.do, s.do, q0)
		packRows(r.ops.k, s.k, k0)
		packRows(r.ops.v, s.v, k0)

		s.ops = layoutViews(s.p, "bshd")
		s.ops.q.set(s.q)
		s.ops.k.set(s.k)
		s.ops.v.set(s.v)
		s.ops.do.set(s.do)
		s.lse = nanFull(s.p.B * s.p.Hq * s.p.Nq)
		o := s.ops
		require.NoError(t, ForwardWith(ctx, c.cfg, s.p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), s.lse), "sequence %d", b)
		require.NoError(t, BackwardWith(ctx, c.cfg, s.p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), s.lse,
			o.do.buf(), o.dq.buf(), o.dk.buf(), o.dv.buf()), "sequence %d", b)
		r.seqs = append(r.seqs, s)
	}
	return r
}

// run runs the packed forward and backward with cfg and returns copies of
// the whole buffers of O, LSE, dQ, dK and dV.
func (r *vrun) run(t *testing.T, cfg Config) [][]float32 {
	t.Helper()
	p, o := r.p, r.ops
	ctx := context.Background()
	r.lse = nanFull(p.LSELen())
	for _, v := range []view{o.o, o.dq, o.dk, o.dv} {
		copy(v.full, nanFull(len(v.full)))
	}
	require.NoError(t, ForwardWith(ctx, cfg, p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), r.lse))
	require.NoError(t, BackwardWith(ctx, cfg, p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), r.lse,
		o.do.buf(), o.dq.buf(), o.dk.buf(), o.dv.buf()))
	cp := func(x []float32) []float32 { return append([]float32(nil), x...) }
	return [][]float32{cp(o.o.full), cp(r.lse), cp(o.dq.full), cp(o.dk.full), cp(o.dv.full)}
}

// sameBits reports whether x and y are the same float32 (NaN payloads
// included).
func sameBits(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }

// checkPacked runs c packed and compares every sequence, bit for bit,
// with the same sequence run as its own problem (itself checked against
// the float64 reference), then checks the padding, the empty sequences
// and the keys past the key counts, and that the results do not depend
// on the worker count.
func checkPacked(t *testing.T, c vcase) {
	r := c.setup(t)
	p := r.p
	first := r.run(t, c.cfg)
	for b, s := range r.seqs {
		q0, k0 := int(p.Ext.CuQ[b]), int(p.Ext.CuK[b])
		nq, nk := s.p.Nq, s.p.Nk
		compare := func(name string, packed, own view, row0, n int) {
			t.Helper()
			for i := range n {
				for h := range own.h {
					for x := range own.w {
						got, want := packed.full[packed.idx(0, row0+i, h, x)], own.full[own.idx(0, i, h, x)]
						if !sameBits(got, want) {
							t.Fatalf("sequence %d: %s[row %d, head %d, %d] = %v, want %v (its own problem's)", b, name, i, h, x, got, want)
						}
						if math.IsNaN(float64(got)) {
							t.Fatalf("sequence %d: %s[row %d, head %d, %d] is NaN", b, name, i, h, x)
						}
					}
				}
			}
		}
		compare("O", r.ops.o, s.ops.o, q0, nq)
		compare("dQ", r.ops.dq, s.ops.dq, q0, nq)
		compare("dK", r.ops.dk, s.ops.dk, k0, nk)
		compare("dV", r.ops.dv, s.ops.dv, k0, nk)
		for h := range p.Hq {
			for i := range nq {
				if got, want := r.lse[p.LSEIndex(b, h, i)], s.lse[h*nq+i]; !sameBits(got, want) {
					t.Fatalf("sequence %d: LSE[head %d, row %d] = %v, want %v", b, h, i, got, want)
				}
			}
		}

		// The sequence's own results follow the reference; an empty one
		// has O = 0, LSE = −Inf and zero gradients, and keys past the key
		// count zero gradients.
		if nq > 0 && s.p.Keys(0) > 0 {
			ref := refBackward(s.p, s.q, s.k, s.v, s.do)
			assertLSE(t, s.lse, ref.lse)
			for _, o := range []struct {
				name      string
				got, want dense
			}{{"O", s.ops.o.get(), ref.o}, {"dQ", s.ops.dq.get(), ref.dq}, {"dK", s.ops.dk.get(), ref.dk}, {"dV", s.ops.dv.get(), ref.dv}} {
				assert.LessOrEqual(t, relErr(o.got.x, o.want.x), tol, "sequence %d: %s", b, o.name)
			}
		}
		if s.p.Keys(0) == 0 {
			for _, x := range s.ops.o.get().x {
				require.Zero(t, x, "sequence %d (no keys): O", b)
			}
			for _, x := range s.ops.dq.get().x {
				require.Zero(t, x, "sequence %d (no keys): dQ", b)
			}
			for _, x := range s.lse {
				require.True(t, math.IsInf(float64(x), -1), "sequence %d (no keys): LSE %v", b, x)
			}
		}
		for _, d := range []dense{s.ops.dk.get(), s.ops.dv.get()} {
			for h := range d.h {
				for j := range d.n {
					if nq == 0 || j >= s.p.Keys(0) {
						for _, x := range d.row(0, h, j) {
							require.Zero(t, x, "sequence %d: key %d's gradient", b, j)
						}
					}
				}
			}
		}
	}

	// Nothing outside the output views was written.
	for _, v := range []view{r.ops.o, r.ops.dq, r.ops.dk, r.ops.dv} {
		inside := make([]bool, len(v.full))
		v.each(func(_, _, _, _, i int) { inside[i] = true })
		for i, x := range v.full {
			if !inside[i] && !math.IsNaN(float64(x)) {
				t.Fatalf("element %d outside the output view was written", i)
			}
		}
	}
	require.Len(t, r.lse, p.LSELen())

	// The same bits with other worker counts.
	for _, workers := range []int{1, 3} {
		cfg := c.cfg
		cfg.Workers = workers
		again := r.run(t, cfg)
		for g := range again {
			for i := range again[g] {
				if !sameBits(again[g][i], first[g][i]) {
					t.Fatalf("workers=%d: output %d element %d: %v, want %v", workers, g, i, again[g][i], first[g][i])
				}
			}
		}
	}
}

// varlenCases span lengths 0, 1, 17 and 129 in one batch (a sequence
// without queries, one without keys, one without either), queries and
// keys of different lengths both ways, GQA and MQA, D ≠ Dv, both causal
// alignments, windows, softcaps, ALiBi slopes per head and per sequence,
// key counts below the stored keys (their data NaN), the three layouts,
// and tiles smaller and larger than the sequences.
func varlenCases() []vcase {
	causalBR := spec.Ext{Left: -1, Right: 0, BottomRight: true}
	causalTL := spec.Ext{Left: -1, Right: 0}
	none := spec.Ext{Left: -1, Right: -1}
	return []vcase{
		{hq: 4, hkv: 2, d: 32, dv: 32, lensQ: []int{1, 17, 129, 0, 5, 0}, lensK: []int{1, 17, 129, 7, 0, 0},
			mask: spec.MaskCausalBottomRight, ext: causalBR, layout: "padded"},
		{hq: 4, hkv: 2, d: 32, dv: 32, lensQ: []int{1, 17, 129, 0, 5}, lensK: []int{1, 17, 129, 7, 0},
			mask: spec.MaskCausalBottomRight, ext: causalBR, layout: "bshd", cfg: Config{Br: 16, Bc: 8}},
		{hq: 2, hkv: 1, d: 16, dv: 24, lensQ: []int{17, 0, 129, 1}, lensK: []int{129, 17, 1, 0},
			ext: none, layout: "bhsd", cfg: Config{Br: 8, Bc: 16}},
		{hq: 3, hkv: 3, d: 8, dv: 8, lensQ: []int{40, 129, 17}, lensK: []int{70, 100, 17},
			mask: spec.MaskCausalTopLeft, ext: causalTL, layout: "bshd", cfg: Config{Br: 7, Bc: 5}},
		{hq: 4, hkv: 1, d: 16, dv: 16, lensQ: []int{33, 129, 17, 0, 1}, lensK: []int{40, 129, 17, 3, 1},
			mask: spec.MaskCausalTopLeft, layout: "padded", cfg: Config{Br: 8, Bc: 16},
			ext: spec.Ext{Left: 5, Right: 0, Softcap: 3,
				Slopes: append(append(append(append(alibi(4), 0.7, 0.05, 0.3, 0.01), alibi(4)...), 0.2, 0.1, 0.4, 0.9), 1, 0.5, 0.25, 0.125), SlopesPerBatch: true,
				SeqUsedK: []int32{20, 129, 0, 2, 1}}},
		{hq: 4, hkv: 2, d: 24, dv: 16, lensQ: []int{129, 17, 1, 64}, lensK: []int{129, 33, 129, 64},
			ext: spec.Ext{Left: 7, Right: 2, BottomRight: true, Softcap: 5, Slopes: alibi(4)}, layout: "bhsd", cfg: Config{Br: 4, Bc: 8}},
		{hq: 2, hkv: 1, d: 16, dv: 16, lensQ: []int{10, 60, 33, 5}, lensK: []int{50, 60, 40, 9},
			ext: spec.Ext{Left: 8, Right: 8, BottomRight: true, SeqUsedK: []int32{20, 60, 0, 3}}, layout: "bshd"},
		{hq: 2, hkv: 1, d: 16, dv: 16, lensQ: []int{129, 17}, lensK: []int{17, 129},
			mask: spec.MaskCausalBottomRight, layout: "padded", cfg: Config{Br: 32, Bc: 16},
			ext: spec.Ext{Left: -1, Right: 0, BottomRight: true, Softcap: 2, Slopes: alibi(2), SeqUsedK: []int32{9, 100}}},
	}
}

// TestVarlen compares packed problems with their sequences run alone.
func TestVarlen(t *testing.T) {
	runCases(t, varlenCases(), checkPacked)
}

// TestVarlenPortable repeats TestVarlen on the portable Go kernels when the
// vector kernels are in use.
func TestVarlenPortable(t *testing.T) {
	portableKernels(t, "TestVarlen")
	runCases(t, varlenCases(), checkPacked)
}

// TestVarlenTiling: the packed work items cover every (sequence, tile,
// head) once, within its sequence, ordered by the tile's index in its
// sequence (last first with reverse), then by sequence.
func TestVarlenTiling(t *testing.T) {
	p := vcase{hq: 2, hkv: 1, d: 8, dv: 8, lensQ: []int{0, 17, 5, 40, 0, 1}, lensK: []int{3, 0, 5, 40, 1, 1}, ext: spec.Ext{Left: -1, Right: -1}}.problem()
	for _, keys := range []bool{false, true} {
		for _, reverse := range []bool{false, true} {
			tl := newTiling(p, 8, p.Hq, keys, reverse)
			seen := map[[3]int]bool{}
			var last [3]int // the previous item's (tile index in item order, sequence, head)
			for it := range tl.items() {
				b, h, r0, nr := tl.at(it)
				n := p.Queries(b)
				if keys {
					n = p.StoredKeys(b)
				}
				require.True(t, nr >= 1 && r0%8 == 0 && r0+nr <= n && (nr == 8 || r0+nr == n), "item %d: sequence %d rows %d+%d of %d", it, b, r0, nr, n)
				require.False(t, seen[[3]int{b, h, r0}], "item %d", it)
				seen[[3]int{b, h, r0}] = true
				k := r0 / 8
				if reverse {
					k = 1000 - k
				}
				cur := [3]int{k, b, h}
				if it > 0 {
					require.True(t, cur[0] > last[0] || cur[0] == last[0] && (cur[1] > last[1] || cur[1] == last[1] && cur[2] > last[2]),
						"item %d: %v after %v", it, cur, last)
				}
				last = cur
			}
			want := 0
			for b := range p.B {
				n := p.Queries(b)
				if keys {
					n = p.StoredKeys(b)
				}
				want += (n + 7) / 8 * p.Hq
			}
			require.Len(t, seen, want)
		}
	}
}

// TestVarlenChecks: offsets and key counts that would index out of range
// or past their sequences, and slices too short for the packed extents,
// are errors, not panics.
func TestVarlenChecks(t *testing.T) {
	c := vcase{hq: 2, hkv: 1, d: 8, dv: 8, lensQ: []int{3, 5}, lensK: []int{4, 6}, ext: spec.Ext{Left: -1, Right: -1}, layout: "bshd"}
	p := c.problem()
	ops := packedViews(p, c.layout)
	ctx := context.Background()
	q, k, v, o := ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf()
	do, dq, dk, dv := ops.do.buf(), ops.dq.buf(), ops.dk.buf(), ops.dv.buf()
	lse := make([]float32, p.LSELen())
	require.NoError(t, Forward(ctx, p, q, k, v, o, lse))
	require.NoError(t, Backward(ctx, p, q, k, v, o, lse, do, dq, dk, dv))

	short := func(x []float32) []float32 { return x[:len(x)-1] }
	assert.Error(t, Forward(ctx, p, short(q), k, v, o, lse))
	assert.Error(t, Forward(ctx, p, q, short(k), v, o, lse))
	assert.Error(t, Forward(ctx, p, q, k, v, short(o), lse))
	assert.Error(t, Forward(ctx, p, q, k, v, o, short(lse)))
	assert.Error(t, Backward(ctx, p, q, k, v, o, lse, do, dq, short(dk), dv))
	assert.Error(t, Backward(ctx, p, q, k, v, o, lse, do, dq, dk, short(dv)))

	for _, f := range []func(e *spec.Ext){
		func(e *spec.Ext) { e.CuQ = []int32{0, 3} },                              // too few offsets
		func(e *spec.Ext) { e.CuQ = []int32{1, 3, 8} },                           // not from 0
		func(e *spec.Ext) { e.CuQ = []int32{0, 6, 5} },                           // decreasing (and longer than Nq)
		func(e *spec.Ext) { e.CuK = nil },                                        // keys not packed
		func(e *spec.Ext) { e.CuK = []int32{0, 1, 10} },                          // longer than Nk
		func(e *spec.Ext) { e.SeqUsedK = []int32{5, 6} },                         // more keys than stored
		func(e *spec.Ext) { e.SeqUsedK = []int32{4} },                            // one count short
		func(e *spec.Ext) { e.Slopes, e.SlopesPerBatch = []float32{1, 2}, true }, // per batch, too few
	} {
		bad := *p
		e := *p.Ext
		f(&e)
		bad.Ext = &e
		assert.Error(t, Forward(ctx, &bad, q, k, v, o, lse), "%+v", e)
		assert.Error(t, Backward(ctx, &bad, q, k, v, o, lse, do, dq, dk, dv), "%+v", e)
	}
}
