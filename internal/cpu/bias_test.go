package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/internal/spec/spectest"
	"github.com/flashvk/flashvk/reference"
)

// biasBuf is a bias or dBias buffer: nb × nh × ns rows of nk elements (an
// extent of 1 broadcasts, its stride 0), element (b, h, i, j) at full[off
// + b·sb + h·sh + i·si + j], with gaps between the rows, heads and
// batches and a leading offset, all NaN until written. The bias is laid
// out head-major ([B, H, S, Nk]), dBias row-major ([B, S, H, Nk]), so
// that the two have different strides.
type biasBuf struct {
	full           []float32
	off            int
	nb, nh, ns, nk int
	sb, sh, si     int
}

func newBiasBuf(nb, nh, ns, nk int, headMajor bool) biasBuf {
	x := biasBuf{off: 11, nb: nb, nh: nh, ns: ns, nk: nk}
	if headMajor {
		x.si = nk + 3
		x.sh = ns*x.si + 5
		x.sb = nh*x.sh + 7
	} else {
		x.sh = nk + 2
		x.si = nh*x.sh + 1
		x.sb = ns*x.si + 3
	}
	x.full = nanFull(x.off + (nb-1)*x.sb + (nh-1)*x.sh + (ns-1)*x.si + nk + 4)
	for _, d := range []struct {
		n int
		s *int
	}{{nb, &x.sb}, {nh, &x.sh}, {ns, &x.si}} {
		if d.n == 1 {
			*d.s = 0
		}
	}
	return x
}

func (x biasBuf) buf() []float32 { return x.full[x.off:] }

// idx is the position in full of element (b, h, i, j) (any index of a
// broadcast dimension).
func (x biasBuf) idx(b, h, i, j int) int { return x.off + b*x.sb + h*x.sh + i*x.si + j }

// values returns the elements as package reference's row-major [nb, nh,
// ns, nk].
func (x biasBuf) values() []float64 {
	v := make([]float64, 0, x.nb*x.nh*x.ns*x.nk)
	for b := range x.nb {
		for h := range x.nh {
			for i := range x.ns {
				for j := range x.nk {
					v = append(v, float64(x.full[x.idx(b, h, i, j)]))
				}
			}
		}
	}
	return v
}

// inView reports for each element of full whether the view addresses it.
func (x biasBuf) inView() []bool {
	in := make([]bool, len(x.full))
	for b := range x.nb {
		for h := range x.nh {
			for i := range x.ns {
				for j := range x.nk {
					in[x.idx(b, h, i, j)] = true
				}
			}
		}
	}
	return in
}

// bcase is a problem with a bias of shape "bhs" (a letter per dimension
// the bias has, 1 for one it broadcasts: "1hs" broadcasts over the batch,
// "b11" over the heads and the query rows, …), holes its share of −Inf
// elements and hide more of them.
type bcase struct {
	tcase
	shape string
	holes float64
	hide  func(b, h, i, j int) bool
	name  string // hide's name
}

func (c bcase) String() string {
	s := fmt.Sprintf("%s_bias%s", c.tcase.String(), c.shape)
	if c.holes > 0 {
		s += fmt.Sprintf("_holes%g", c.holes)
	}
	if c.name != "" {
		s += "_" + c.name
	}
	return s
}

// extents are the bias's batches, heads and rows for problem p.
func (c bcase) extents(p *spec.Problem) (nb, nh, ns int) {
	nb, nh, ns = p.B, p.Hq, p.Nq
	if c.shape[0] == '1' {
		nb = 1
	}
	if c.shape[1] == '1' {
		nh = 1
	}
	if c.shape[2] == '1' {
		ns = 1
	}
	return nb, nh, ns
}

// bstate is a bias case set up: its problem, operands, inputs, bias and
// dBias.
type bstate struct {
	p           *spec.Problem
	ops         operands
	q, k, v, do dense
	bias, db    biasBuf
	lse         []float32
}

// fillBias draws x's elements in ±2 (float32), with a share holes of −Inf
// and −Inf where hide says.
func fillBias(x biasBuf, rng *rand.Rand, holes float64, hide func(b, h, i, j int) bool) {
	for b := range x.nb {
		for h := range x.nh {
			for i := range x.ns {
				for j := range x.nk {
					v := float32(4*rng.Float64() - 2)
					if rng.Float64() < holes || hide != nil && hide(b, h, i, j) {
						v = negInf
					}
					x.full[x.idx(b, h, i, j)] = v
				}
			}
		}
	}
}

// attach sets p.Ext.Bias (on a copy of p.Ext) from the bias and dBias
// buffers' strides.
func attach(p *spec.Problem, bias, db biasBuf) {
	e := spec.Ext{Left: -1, Right: -1}
	if p.Ext != nil {
		e = *p.Ext
	}
	e.Bias = &spec.Bias{DType: spec.Float32, Batch: bias.sb, Head: bias.sh, Row: bias.si,
		Grad: true, GradBatch: db.sb, GradHead: db.sh, GradRow: db.si}
	p.Ext = &e
}

func (c bcase) setup() *bstate {
	c.tcase = c.withDefaults()
	s := &bstate{p: c.problem()}
	s.ops = layoutViews(s.p, c.layout)
	rng := rand.New(rand.NewPCG(uint64(c.nq*1000+c.nk), uint64(c.d*100+len(c.shape))))
	s.q, s.k, s.v, s.do = s.ops.setInputs(s.p, rng, 2)
	nb, nh, ns := c.extents(s.p)
	s.bias = newBiasBuf(nb, nh, ns, s.p.Nk, true)
	s.db = newBiasBuf(nb, nh, ns, s.p.Nk, false)
	fillBias(s.bias, rng, c.holes, c.hide)
	attach(s.p, s.bias, s.db)
	return s
}

// run poisons the outputs (dBias included) with NaN, runs the forward and
// the backward with cfg and returns copies of the whole buffers of O,
// LSE, dQ, dK, dV and dBias.
func (s *bstate) run(t *testing.T, cfg Config) [][]float32 {
	t.Helper()
	p, o := s.p, s.ops
	for _, v := range []view{o.o, o.dq, o.dk, o.dv} {
		copy(v.full, nanFull(len(v.full)))
	}
	copy(s.db.full, nanFull(len(s.db.full)))
	s.lse = nanFull(p.LSELen())
	ctx := context.Background()
	x := Bias{Bias: s.bias.buf(), DBias: s.db.buf()}
	require.NoError(t, ForwardBias(ctx, cfg, p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), s.lse, x))
	require.NoError(t, BackwardBias(ctx, cfg, p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), s.lse,
		o.do.buf(), o.dq.buf(), o.dk.buf(), o.dv.buf(), x))
	cp := func(x []float32) []float32 { return append([]float32(nil), x...) }
	return [][]float32{cp(o.o.full), cp(s.lse), cp(o.dq.full), cp(o.dk.full), cp(o.dv.full), cp(s.db.full)}
}

// got returns the last run's O, LSE, dQ, dK, dV (package reference's
// layouts) and dBias (row-major [nb, nh, ns, Nk]).
func (s *bstate) got() [][]float64 {
	l := make([]float64, len(s.lse))
	for i, x := range s.lse {
		l[i] = float64(x)
	}
	return [][]float64{bshd(s.ops.o.get()), l, bshd(s.ops.dq.get()), bshd(s.ops.dk.get()), bshd(s.ops.dv.get()), s.db.values()}
}

// refBias returns p's reference.Params with the bias of x.
func refBias(p *spec.Problem, x biasBuf) reference.Params {
	rp := spectest.Reference(p)
	rp.Bias = &reference.Bias{B: x.nb, H: x.nh, S: x.ns, Values: x.values()}
	return rp
}

// reference returns package reference's O, LSE, dQ, dK, dV and dBias.
func (s *bstate) reference(t *testing.T) [][]float64 {
	t.Helper()
	rp := refBias(s.p, s.bias)
	q, k, v, do := bshd(s.q), bshd(s.k), bshd(s.v), bshd(s.do)
	o, lse, err := reference.Forward(rp, q, k, v)
	require.NoError(t, err)
	dq, dk, dv, err := reference.Backward(rp, q, k, v, do)
	require.NoError(t, err)
	db, err := reference.BiasGrad(rp, q, k, v, do)
	require.NoError(t, err)
	return [][]float64{o, lse, dq, dk, dv, db}
}

var biasOutputs = []string{"O", "LSE", "dQ", "dK", "dV", "dBias"}

// checkBiasCase runs c and compares every output, dBias included, with
// package reference; then checks that dBias's view is fully written (no
// NaN left of the poison) and nothing around it is, and that the rows
// the bias empties have O = 0, LSE = −Inf and dQ = 0.
func checkBiasCase(t *testing.T, c bcase) {
	s := c.setup()
	s.run(t, c.cfg)
	got, want := s.got(), s.reference(t)
	errs := make([]float64, len(got))
	for x := range got {
		errs[x] = relErr(got[x], want[x])
		assert.LessOrEqual(t, errs[x], tol, biasOutputs[x])
	}
	t.Logf("rel_l2: O %.2g LSE %.2g dQ %.2g dK %.2g dV %.2g dBias %.2g", errs[0], errs[1], errs[2], errs[3], errs[4], errs[5])

	in := s.db.inView()
	for i, x := range s.db.full {
		require.Equal(t, !in[i], math.IsNaN(float64(x)), "dBias element %d (in the view: %v) = %v", i, in[i], x)
	}
	for _, x := range [][]float64{got[0], got[2], got[3], got[4]} {
		for i, y := range x {
			require.False(t, math.IsNaN(y), "NaN at %d", i)
		}
	}
	p := s.p
	o, dq := s.ops.o.get(), s.ops.dq.get()
	for b := range p.B {
		for h := range p.Hq {
			for i := range p.Nq {
				if math.IsInf(want[1][p.LSEIndex(b, h, i)], -1) {
					checkDeadRow(t, p, s.lse, o, dq, b, h, i)
				}
			}
		}
	}
}

// biasShapes are every broadcast of a bias.
var biasShapes = []string{"bhs", "1hs", "b1s", "bh1", "11s", "b11", "111"}

// biasCases span every broadcast of the bias (its dBias folded over the
// batch, the heads, the rows, or all three), −Inf holes, rows and tiles
// that the bias empties, awkward sizes (1, 17, 127, 129), and the bias
// with causal masks of both alignments, windows, softcaps, ALiBi slopes,
// dropout, key counts (0 included), GQA and MQA, strided layouts and
// tiles that do not divide the sequences.
func biasCases() []bcase {
	var cases []bcase
	add := func(c bcase) { c.tcase = c.withDefaults(); cases = append(cases, c) }
	none := &spec.Ext{Left: -1, Right: -1}
	for _, sh := range biasShapes {
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 33, nk: 40, d: 16, ext: none, cfg: Config{Br: 8, Bc: 16}}, shape: sh})
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 129, nk: 127, d: 16, ext: none, layout: "padded"}, shape: sh, holes: 0.3})
		causal, m := window(-1, 0, true)
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 1, nq: 40, nk: 70, d: 16, mask: m, ext: causal, cfg: Config{Br: 16, Bc: 8, Workers: 3}},
			shape: sh, holes: 0.1})
	}
	for _, n := range [][2]int{{1, 1}, {1, 17}, {17, 1}, {17, 17}, {127, 129}, {129, 127}, {129, 129}} {
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: n[0], nk: n[1], d: 16, ext: none}, shape: "bhs", holes: 0.3})
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: n[0], nk: n[1], d: 24, dv: 8, ext: none, cfg: Config{Br: 16, Bc: 16}}, shape: "111"})
	}
	// Rows and tiles the bias empties.
	rows := func(_, _, i, _ int) bool { return i%5 == 2 }
	tiles := func(_, _, i, j int) bool { return (i/16+j/16)%3 == 1 }
	keys := func(b, _, _, j int) bool { return j >= 90-30*b } // key padding
	for _, sh := range []string{"bhs", "b1s", "11s"} {
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 70, nk: 90, d: 16, ext: none, cfg: Config{Br: 16, Bc: 16}},
			shape: sh, hide: rows, name: "rows"})
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 70, nk: 90, d: 16, ext: none, cfg: Config{Br: 16, Bc: 16}},
			shape: sh, holes: 0.2, hide: tiles, name: "tiles"})
	}
	for _, sh := range []string{"b11", "bh1", "bhs"} {
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 70, nk: 90, d: 16, ext: none, cfg: Config{Br: 16, Bc: 16}},
			shape: sh, hide: keys, name: "keys"})
	}
	// With the other options.
	for _, br := range []bool{false, true} {
		e, m := window(-1, 0, br)
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 33, nk: 129, d: 16, mask: m, ext: e, cfg: Config{Br: 8, Bc: 12}}, shape: "bhs", holes: 0.3})
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 129, nk: 33, d: 16, mask: m, ext: e}, shape: "1h1", holes: 0.3})
		e, m = window(7, 2, br)
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 129, nk: 127, d: 16, mask: m, ext: e, cfg: Config{Br: 8, Bc: 4}}, shape: "b1s", holes: 0.3})
	}
	for _, c := range []float32{1, 5} {
		softcap := with(none, func(e *spec.Ext) { e.Softcap = c })
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 65, nk: 70, d: 16, ext: softcap, layout: "padded"}, shape: "bhs", holes: 0.2})
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 65, nk: 70, d: 16, ext: softcap, cfg: Config{Br: 16, Bc: 8}}, shape: "111", holes: 0.2})
	}
	perHead := with(none, func(e *spec.Ext) { e.Slopes = alibi(4) })
	perBatch := with(none, func(e *spec.Ext) { e.Slopes, e.SlopesPerBatch = append(alibi(4), 0.7, 0.05, 0.3, 0.01), true })
	add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 65, nk: 65, d: 16, ext: perHead, layout: "bhsd"}, shape: "1hs", holes: 0.2})
	add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 65, nk: 65, d: 16, ext: perBatch, layout: "packed"}, shape: "b11", holes: 0.2})
	for k, pr := range dropProbs {
		drop := with(none, func(e *spec.Ext) { e.Dropout = dropOf(pr, k+50) })
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 37, nk: 131, d: 16, ext: drop, cfg: Config{Br: 8, Bc: 12}}, shape: "bhs", holes: 0.3})
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 37, nk: 131, d: 16, ext: drop}, shape: "11s", holes: 0.1})
	}
	used := with(none, func(e *spec.Ext) { e.SeqUsedK = []int32{0, 17, 100} })
	add(bcase{tcase: tcase{b: 3, hq: 8, hkv: 1, nq: 33, nk: 129, d: 16, ext: used, cfg: Config{Br: 16, Bc: 16}}, shape: "bhs", holes: 0.3})
	add(bcase{tcase: tcase{b: 3, hq: 8, hkv: 1, nq: 33, nk: 129, d: 16, ext: used}, shape: "1h1", holes: 0.3})
	w, m := window(11, 0, true)
	all := with(w, func(e *spec.Ext) {
		e.Softcap = 3
		e.Slopes, e.SlopesPerBatch = []float32{0.5, 0.25, 0.125, 0.0625, 0.3, 0.2, 0.1, 0.05}, true
		e.SeqUsedK = []int32{100, 33}
		e.Dropout = dropOf(0.3, 60)
	})
	for _, sh := range []string{"bhs", "111"} {
		add(bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 33, nk: 129, d: 40, dv: 24, mask: m, ext: all, cfg: Config{Br: 8, Bc: 16, Workers: 3}},
			shape: sh, holes: 0.2})
	}
	return cases
}

// TestBiasAgainstReference compares problems with a bias, forward and
// backward, dBias included, with package reference.
func TestBiasAgainstReference(t *testing.T) {
	runCases(t, biasCases(), checkBiasCase)
}

// TestBiasAgainstReferencePortable repeats the comparison on the portable
// Go kernels when the vector kernels are in use.
func TestBiasAgainstReferencePortable(t *testing.T) {
	portableKernels(t, "TestBiasAgainstReference")
	runCases(t, biasCases(), checkBiasCase)
}

// TestBiasDeterminism: with a bias whose dBias folds (over the batch, the
// heads, the rows, or all three: the sums of several work items) or does
// not, the forward and the backward, dBias included, give the same bits
// with 1, 2 and 7 workers, on the vector and the portable kernels.
func TestBiasDeterminism(t *testing.T) {
	w, m := window(30, 0, true)
	opts := with(w, func(e *spec.Ext) {
		e.Softcap = 4
		e.Slopes = alibi(4)
		e.SeqUsedK = []int32{200, 260}
		e.Dropout = dropOf(0.2, 70)
	})
	var cases []bcase
	for _, sh := range []string{"111", "11s", "bh1", "1hs", "bhs"} {
		cases = append(cases, bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 300, nk: 260, d: 40, dv: 40, layout: "bshd",
			ext: &spec.Ext{Left: -1, Right: -1}}, shape: sh, holes: 0.1})
	}
	cases = append(cases, bcase{tcase: tcase{b: 2, hq: 4, hkv: 2, nq: 300, nk: 260, d: 40, dv: 40, layout: "bshd", mask: m, ext: opts},
		shape: "b11", holes: 0.1})
	for _, portable := range []bool{false, true} {
		for _, c := range cases {
			name := c.String()
			if portable {
				name += "_portable"
			}
			t.Run(name, func(t *testing.T) {
				if portable {
					portableKernels(t, "the vector run")
				}
				s := c.setup()
				var first [][]float32
				for _, workers := range []int{1, 2, 7} {
					got := s.run(t, Config{Br: 32, Bc: 16, Workers: workers})
					if first == nil {
						first = got
						continue
					}
					for g := range got {
						for i := range got[g] {
							if !sameBits(got[g][i], first[g][i]) {
								t.Fatalf("workers=%d: %s element %d: %v, want %v", workers, biasOutputs[g], i, got[g][i], first[g][i])
							}
						}
					}
				}
			})
		}
	}
}

// TestBiasFoldPlan: a folding dBias's work units cover every dQ item
// once, each chunk's items within its group and in item order, and the
// scratch stays within its bound.
func TestBiasFoldPlan(t *testing.T) {
	for _, sh := range []string{"111", "11s", "bh1", "1hs", "b11"} {
		c := bcase{tcase: tcase{b: 3, hq: 4, hkv: 2, nq: 300, nk: 50, d: 8, ext: &spec.Ext{Left: -1, Right: -1}}, shape: sh}
		p := c.setup().p
		tl := queryTiling(p, 16)
		f := newFoldPlan(p, tl, 16)
		seen := make([]bool, tl.items())
		for _, u := range f.units {
			g := f.groups[u.group]
			require.Less(t, u.chunk, g.chunks)
			for n, it := range u.items {
				require.False(t, seen[it], "%s: item %d twice", sh, it)
				seen[it] = true
				if n > 0 {
					require.Less(t, u.items[n-1], it)
				}
				// The item's first dBias row is its group's (its tile's).
				b, h, r0, _ := tl.at(it)
				x := p.Ext.Bias
				require.Equal(t, x.GradAt(g.b, g.h, g.i0, 0), x.GradAt(b, h, r0, 0), "%s: item %d in group %+v", sh, it, g)
			}
		}
		for it, ok := range seen {
			require.True(t, ok, "%s: item %d in no unit", sh, it)
		}
		require.GreaterOrEqual(t, len(f.units), min(foldUnits, tl.items()), sh)
		require.LessOrEqual(t, len(f.scratch), foldScratch, sh)
	}
}

// TestBiasSkipsTiles: a bias that leaves each query tile one key tile
// (−Inf elsewhere: a block-diagonal mask) follows the reference, and the
// forward and both backward passes skip the tiles it hides: a context
// check or two per item, not one per tile.
func TestBiasSkipsTiles(t *testing.T) {
	const tiles, n = 12, 12 * 16
	blocks := func(_, _, i, j int) bool { return i/16 != j/16 }
	for _, sh := range []string{"bhs", "11s"} {
		c := bcase{tcase: tcase{b: 1, hq: 1, hkv: 1, nq: n, nk: n, d: 16, layout: "bshd", ext: &spec.Ext{Left: -1, Right: -1},
			cfg: Config{Br: 16, Bc: 16, Workers: 1}}, shape: sh, hide: blocks, name: "blocks"}
		c.tcase = c.withDefaults()
		t.Run(c.String(), func(t *testing.T) {
			checkBiasCase(t, c)
			s := c.setup()
			s.run(t, c.cfg)
			o := s.ops
			x := Bias{Bias: s.bias.buf(), DBias: s.db.buf()}
			ctx := newCountCtx(math.MaxInt64)
			require.NoError(t, ForwardBias(ctx, c.cfg, s.p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), s.lse, x))
			// One check before the items, one before each and one for its
			// only tile, one at the end (not one per key tile).
			assert.LessOrEqual(t, ctx.calls.Load(), int64(2*tiles+2), "forward")

			ctx = newCountCtx(math.MaxInt64)
			require.NoError(t, BackwardBias(ctx, c.cfg, s.p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), s.lse,
				o.do.buf(), o.dq.buf(), o.dk.buf(), o.dv.buf(), x))
			// The D pass (a check per item), dBias's clearing (one item),
			// the dK/dV and dQ passes (two per item: the item and its only
			// tile), each pass two more (before and after its items).
			assert.LessOrEqual(t, ctx.calls.Load(), int64(tiles+2+3+2*(2*tiles+2)), "backward")
		})
	}
}

// TestBiasZeroIsPlain: a bias of zeros gives the plain problem's results
// (to rounding: its scores are rewritten).
func TestBiasZeroIsPlain(t *testing.T) {
	for _, m := range masks {
		c := tcase{b: 2, hq: 4, hkv: 2, nq: 70, nk: 45, d: 16, dv: 16, mask: m, layout: "bshd", cfg: Config{Br: 16, Bc: 8}}
		t.Run(c.String(), func(t *testing.T) {
			ops, lse, ref := runCase(t, c)
			plain := [][]float64{ops.o.get().x, ops.dq.get().x, ops.dk.get().x, ops.dv.get().x}
			p := c.problem()
			bias, db := newBiasBuf(1, 1, 1, p.Nk, true), newBiasBuf(p.B, p.Hq, p.Nq, p.Nk, false)
			clear(bias.full)
			attach(p, bias, db)
			p.Ext.Right, p.Ext.BottomRight = -1, false
			if m != spec.MaskNone {
				p.Ext.Right, p.Ext.BottomRight = 0, m == spec.MaskCausalBottomRight
			}
			ops = layoutViews(p, c.layout)
			rng := rand.New(rand.NewPCG(uint64(c.nq*1000+c.nk), uint64(c.d*100+c.dv)))
			ops.setInputs(p, rng, 2)
			ctx := context.Background()
			got := nanFull(len(lse))
			x := Bias{Bias: bias.buf(), DBias: db.buf()}
			require.NoError(t, ForwardBias(ctx, c.cfg, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), got, x))
			require.NoError(t, BackwardBias(ctx, c.cfg, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), got,
				ops.do.buf(), ops.dq.buf(), ops.dk.buf(), ops.dv.buf(), x))
			assertLSE(t, got, ref.lse)
			for i, d := range [][]float64{ops.o.get().x, ops.dq.get().x, ops.dk.get().x, ops.dv.get().x} {
				assert.LessOrEqual(t, relErr(d, plain[i]), tol, "output %d", i)
			}
		})
	}
}

// TestBiasChecks: bias and dBias buffers too short for their strides,
// missing, given without a bias, or dBias strides that overlap, are
// errors, not panics.
func TestBiasChecks(t *testing.T) {
	c := bcase{tcase: tcase{b: 2, hq: 2, hkv: 1, nq: 10, nk: 12, d: 8, ext: &spec.Ext{Left: -1, Right: -1}}, shape: "bhs"}
	s := c.setup()
	p, o := s.p, s.ops
	ctx := context.Background()
	lse := make([]float32, p.LSELen())
	fwd := func(p *spec.Problem, x Bias) error {
		return ForwardBias(ctx, Config{}, p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), lse, x)
	}
	bwd := func(p *spec.Problem, x Bias) error {
		return BackwardBias(ctx, Config{}, p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), lse, o.do.buf(), o.dq.buf(), o.dk.buf(), o.dv.buf(), x)
	}
	bias, db := s.bias.buf(), s.db.buf()
	last := s.bias.idx(1, 1, 9, 11) - s.bias.off
	lastDB := s.db.idx(1, 1, 9, 11) - s.db.off
	require.NoError(t, fwd(p, Bias{Bias: bias[:last+1]}))
	require.NoError(t, bwd(p, Bias{Bias: bias[:last+1], DBias: db[:lastDB+1]}))
	assert.Error(t, fwd(p, Bias{Bias: bias[:last]}))
	assert.Error(t, fwd(p, Bias{}))
	assert.Error(t, bwd(p, Bias{Bias: bias[:last], DBias: db}))
	assert.Error(t, bwd(p, Bias{Bias: bias, DBias: db[:lastDB]}))
	assert.Error(t, bwd(p, Bias{Bias: bias}))
	assert.Error(t, bwd(p, Bias{DBias: db}))
	assert.Error(t, ForwardWith(ctx, Config{}, p, o.q.buf(), o.k.buf(), o.v.buf(), o.o.buf(), lse))

	plain := *p
	e := *p.Ext
	e.Bias = nil
	plain.Ext = &e
	assert.Error(t, fwd(&plain, Bias{Bias: bias}))
	assert.Error(t, bwd(&plain, Bias{DBias: db}))
	require.NoError(t, bwd(&plain, Bias{}))

	noGrad := *p
	e = *p.Ext
	xb := *p.Ext.Bias
	xb.Grad = false
	e.Bias = &xb
	noGrad.Ext = &e
	require.NoError(t, bwd(&noGrad, Bias{Bias: bias}))
	assert.Error(t, bwd(&noGrad, Bias{Bias: bias, DBias: db}))

	for _, f := range []func(x *spec.Bias){
		func(x *spec.Bias) { x.GradRow = 5 },          // rows overlap (12 keys)
		func(x *spec.Bias) { x.GradHead = x.GradRow }, // heads on rows
		func(x *spec.Bias) { x.Row = -1 },             // negative
		func(x *spec.Bias) { x.Head = 1 << 62 },       // overflow
	} {
		bad := *p
		e := *p.Ext
		xb := *p.Ext.Bias
		f(&xb)
		e.Bias = &xb
		bad.Ext = &e
		assert.Error(t, bwd(&bad, Bias{Bias: bias, DBias: db}), "%+v", xb)
	}
}

// TestBiasVarlen: packed sequences with a bias (rows and keys counted
// within each sequence) match package reference sequence by sequence;
// dBias folded over the sequences sums theirs, and its rows and keys past
// a sequence's lengths are 0; the results do not depend on the workers.
func TestBiasVarlen(t *testing.T) {
	cases := []struct {
		c     vcase
		shape string
		holes float64
	}{
		{vcase{hq: 4, hkv: 2, d: 16, dv: 16, lensQ: []int{1, 17, 129, 0, 5}, lensK: []int{1, 17, 129, 7, 0},
			mask: spec.MaskCausalBottomRight, ext: spec.Ext{Left: -1, Right: 0, BottomRight: true}, layout: "padded",
			cfg: Config{Br: 16, Bc: 8}}, "bhs", 0.3},
		{vcase{hq: 2, hkv: 1, d: 16, dv: 24, lensQ: []int{17, 0, 127, 1}, lensK: []int{129, 17, 1, 5},
			ext: spec.Ext{Left: -1, Right: -1}, layout: "bhsd", cfg: Config{Br: 8, Bc: 16}}, "1hs", 0.3},
		{vcase{hq: 4, hkv: 1, d: 16, dv: 16, lensQ: []int{33, 129, 17, 0, 1}, lensK: []int{40, 129, 17, 3, 1},
			mask: spec.MaskCausalTopLeft, layout: "bshd", cfg: Config{Br: 16, Bc: 16},
			ext: spec.Ext{Left: 5, Right: 0, Softcap: 3, Slopes: alibi(4), SeqUsedK: []int32{20, 127, 0, 2, 1},
				Dropout: dropOf(0.3, 80)}}, "b11", 0.2},
		{vcase{hq: 2, hkv: 1, d: 16, dv: 16, lensQ: []int{10, 60, 33, 5}, lensK: []int{50, 60, 40, 9},
			ext: spec.Ext{Left: 8, Right: 8, BottomRight: true}, layout: "bshd"}, "111", 0.1},
		{vcase{hq: 2, hkv: 1, d: 16, dv: 16, lensQ: []int{10, 60, 33, 5}, lensK: []int{50, 60, 40, 9},
			ext: spec.Ext{Left: -1, Right: -1, Softcap: 2}, layout: "padded", cfg: Config{Br: 8, Bc: 8}}, "11s", 0.1},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s_bias%s", tc.c, tc.shape), func(t *testing.T) {
			t.Parallel()
			checkBiasPacked(t, tc.c, tc.shape, tc.holes)
		})
	}
}

func checkBiasPacked(t *testing.T, c vcase, shape string, holes float64) {
	p := c.problem()
	ops := packedViews(p, c.layout)
	rng := rand.New(rand.NewPCG(uint64(p.TotalQ()), uint64(p.TotalK()+len(shape))))
	q := randDense(rng, 1, p.Hq, p.TotalQ(), p.D, 2)
	k := randDense(rng, 1, p.Hkv, p.TotalK(), p.D, 2)
	v := randDense(rng, 1, p.Hkv, p.TotalK(), p.Dv, 1)
	do := randDense(rng, 1, p.Hq, p.TotalQ(), p.Dv, 1)
	ops.q.set(q)
	ops.k.set(k)
	ops.v.set(v)
	ops.do.set(do)
	bc := bcase{shape: shape}
	nb, nh, ns := bc.extents(p)
	s := &bstate{p: p, ops: ops, bias: newBiasBuf(nb, nh, ns, p.Nk, true), db: newBiasBuf(nb, nh, ns, p.Nk, false)}
	fillBias(s.bias, rng, holes, nil)
	attach(p, s.bias, s.db)
	first := s.run(t, c.cfg)

	// Sequence by sequence against the reference, dBias's expected sums
	// gathered in want ([nb, nh, ns, Nk]).
	want := make([]float64, nb*nh*ns*p.Nk)
	covered := make([]bool, len(want)) // the dBias elements a sequence adds to
	at := func(b, h, i, j int) int {
		return ((min(b, nb-1)*nh+min(h, nh-1))*ns+min(i, ns-1))*p.Nk + j
	}
	rows := func(d dense, row0, n int) []float64 { // rows row0 … row0+n−1 of a packed [1, H, T, W] array, BSHD
		x := make([]float64, 0, n*d.h*d.w)
		for i := range n {
			for h := range d.h {
				x = append(x, d.row(0, h, row0+i)...)
			}
		}
		return x
	}
	o, dq, dk, dv := ops.o.get(), ops.dq.get(), ops.dk.get(), ops.dv.get()
	for b := range p.B {
		q0, k0 := int(p.Ext.CuQ[b]), int(p.Ext.CuK[b])
		nq, nk := p.Queries(b), p.StoredKeys(b)
		if nq == 0 {
			for _, d := range []dense{dk, dv} {
				for _, x := range rows(d, k0, nk) {
					require.Zero(t, x, "sequence %d (no queries): dK, dV", b)
				}
			}
			continue
		}
		lse := make([]float64, 0, p.Hq*nq)
		for h := range p.Hq {
			for i := range nq {
				lse = append(lse, float64(s.lse[p.LSEIndex(b, h, i)]))
			}
		}
		if nk == 0 {
			for _, x := range append(rows(o, q0, nq), rows(dq, q0, nq)...) {
				require.Zero(t, x, "sequence %d (no keys): O, dQ", b)
			}
			for _, x := range lse {
				require.True(t, math.IsInf(x, -1), "sequence %d (no keys): LSE %v", b, x)
			}
			continue
		}
		sp := sequence(p, b)
		rp := spectest.Reference(sp)
		if rp.Dropout != nil {
			rp.Dropout.Batch0 = sp.Ext.Dropout.Batch0
		}
		sns := min(ns, nq)
		rb := &reference.Bias{B: 1, H: nh, S: sns}
		for h := range nh {
			for i := range sns {
				for j := range nk {
					rb.Values = append(rb.Values, float64(s.bias.full[s.bias.idx(b, h, i, j)]))
				}
			}
		}
		rp.Bias = rb
		sq, sk, sv, sdo := rows(q, q0, nq), rows(k, k0, nk), rows(v, k0, nk), rows(do, q0, nq)
		ro, rl, err := reference.Forward(rp, sq, sk, sv)
		require.NoError(t, err)
		rdq, rdk, rdv, err := reference.Backward(rp, sq, sk, sv, sdo)
		require.NoError(t, err)
		rdb, err := reference.BiasGrad(rp, sq, sk, sv, sdo)
		require.NoError(t, err)
		for x, pair := range []struct {
			got, want []float64
		}{{rows(o, q0, nq), ro}, {lse, rl}, {rows(dq, q0, nq), rdq}, {rows(dk, k0, nk), rdk}, {rows(dv, k0, nk), rdv}} {
			assert.LessOrEqual(t, relErr(pair.got, pair.want), tol, "sequence %d: %s", b, biasOutputs[x])
		}
		for h := range nh {
			for i := range sns {
				for j := range nk {
					want[at(b, h, i, j)] += rdb[(h*sns+i)*nk+j]
					covered[at(b, h, i, j)] = true
				}
			}
		}
	}
	got := s.db.values()
	assert.LessOrEqual(t, relErr(got, want), tol, "dBias")
	for x, c := range covered {
		if !c { // rows or keys past every sequence's lengths
			require.Zero(t, got[x], "dBias element %d", x)
		}
	}
	in := s.db.inView()
	for i, x := range s.db.full {
		require.Equal(t, !in[i], math.IsNaN(float64(x)), "dBias element %d (in the view: %v) = %v", i, in[i], x)
	}

	for _, workers := range []int{1, 3} {
		cfg := c.cfg
		cfg.Workers = workers
		again := s.run(t, cfg)
		for g := range again {
			for i := range again[g] {
				if !sameBits(again[g][i], first[g][i]) {
					t.Fatalf("workers=%d: %s element %d: %v, want %v", workers, biasOutputs[g], i, again[g][i], first[g][i])
				}
			}
		}
	}
}

// TestBiasKernel: addBias (vector where available) against the scalar
// arithmetic: k·r + bias to a rounding (the vector kernel fuses it), −Inf
// wherever the bias is −Inf whatever r holds, and the row's maximum.
func TestBiasKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	inf, nan := math.Inf(1), math.NaN()
	for n := range 40 {
		for _, k := range []float32{1, 0.3} {
			r, bias := make([]float32, n), make([]float32, n)
			for i := range r {
				r[i] = 4 * (2*rng.Float32() - 1)
				bias[i] = 2 * (2*rng.Float32() - 1)
				switch rng.IntN(6) {
				case 0:
					bias[i] = negInf
				case 1:
					bias[i] = negInf
					r[i] = float32([]float64{inf, -inf, nan}[rng.IntN(3)])
				}
			}
			got := append([]float32(nil), r...)
			mx := addBias(got, bias, k)
			want := negInf
			for i, x := range r {
				if bias[i] == negInf {
					require.Equal(t, negInf, got[i], "n=%d i=%d", n, i)
					continue
				}
				w := float64(k)*float64(x) + float64(bias[i])
				assert.InDelta(t, w, got[i], 4e-7*(math.Abs(w)+math.Abs(float64(bias[i]))+1), "n=%d i=%d", n, i)
				want = max(want, got[i])
			}
			assert.Equal(t, want, mx, "max n=%d", n)
		}
	}
}

// biasBenchOpts are the biases BenchmarkBiasCost times: a full [B, H, Nq,
// Nk] bias of finite values (against the plain problem), a key-padding
// mask broadcast over the heads and rows whose last quarter of keys is
// −Inf (against the plain problem), and a causal mask given as a [1, 1,
// Nq, Nk] bias (against the plain causal problem: the tiles above the
// diagonal are skipped).
var biasBenchOpts = []struct {
	name, shape string
	causal      bool
	value       func(b, h, i, j, n int) float32
}{
	{"full", "bhs", false, func(b, h, i, j, _ int) float32 { return float32((b+h+i*7+j*3)%11)/11 - 0.5 }},
	{"keypad", "b11", false, func(_, _, _, j, n int) float32 {
		if j >= n*3/4 {
			return negInf
		}
		return 0
	}},
	{"causalmask", "11s", true, func(_, _, i, j, _ int) float32 {
		if j > i {
			return negInf
		}
		return 0
	}},
}

// BenchmarkBiasCost times the forward or the backward (one worker, with
// dBias) of a problem with a bias against the same problem without it,
// as BenchmarkExtCost does ("x-plain": the median of the pairs' ratios).
func BenchmarkBiasCost(b *testing.B) {
	for _, s := range []benchSize{{1, 4, 1024, 64, spec.MaskNone}} {
		for _, opt := range biasBenchOpts {
			for _, pass := range []string{"fwd", "bwd"} {
				s := s
				if opt.causal {
					s.mask = spec.MaskCausalBottomRight
				}
				b.Run(s.String()+"_"+opt.name+"_"+pass, func(b *testing.B) {
					plain, q, k, v, o, lse, do := benchProblem(s)
					c := bcase{shape: opt.shape}
					nb, nh, ns := c.extents(plain)
					bias, db := newBiasBuf(nb, nh, ns, s.n, true), newBiasBuf(nb, nh, ns, s.n, false)
					for bb := range nb {
						for h := range nh {
							for i := range ns {
								for j := range s.n {
									bias.full[bias.idx(bb, h, i, j)] = opt.value(bb, h, i, j, s.n)
								}
							}
						}
					}
					biased := *plain
					biased.Mask = spec.MaskNone
					attach(&biased, bias, db)
					x := Bias{Bias: bias.buf(), DBias: db.buf()}
					dq, dk, dv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
					ctx, cfg := context.Background(), Config{Workers: 1}
					run := func(p *spec.Problem, x Bias) time.Duration {
						if pass == "bwd" { // the backward reads the problem's O and LSE
							if err := ForwardBias(ctx, cfg, p, q, k, v, o, lse, x); err != nil {
								b.Fatal(err)
							}
						}
						t := time.Now()
						var err error
						if pass == "fwd" {
							err = ForwardBias(ctx, cfg, p, q, k, v, o, lse, x)
						} else {
							err = BackwardBias(ctx, cfg, p, q, k, v, o, lse, do, dq, dk, dv, x)
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
							if i == 0 {
								t[i] = run(plain, Bias{})
							} else {
								t[i] = run(&biased, x)
							}
							best[i] = min(best[i], t[i])
						}
						ratios = append(ratios, float64(t[1])/float64(t[0]))
					}
					slices.Sort(ratios)
					b.ReportMetric(ratios[len(ratios)/2], "x-plain")
					b.ReportMetric(float64(best[0].Microseconds()), "plain-µs")
					b.ReportMetric(float64(best[1].Microseconds()), "bias-µs")
				})
			}
		}
	}
}
