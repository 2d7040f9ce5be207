package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/floats"

	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/reference"
)

const tol = 1e-5

// view is one operand inside a (possibly shared, possibly padded) float32
// allocation: element (b, n, h, c) lives at full[off + s.Offset(b, n, h) + c].
type view struct {
	full       []float32
	off        int
	s          spec.Strides
	b, n, h, w int
}

func (v view) buf() []float32 { return v.full[v.off:] }

func (v view) idx(b, n, h, c int) int { return v.off + v.s.Offset(b, n, h) + c }

func (v view) each(f func(b, n, h, c, i int)) {
	for b := range v.b {
		for n := range v.n {
			for h := range v.h {
				for c := range v.w {
					f(b, n, h, c, v.idx(b, n, h, c))
				}
			}
		}
	}
}

func (v view) set(d dense) {
	v.each(func(b, n, h, c, i int) { v.full[i] = float32(d.row(b, h, n)[c]) })
}

func (v view) get() dense {
	d := newDense(v.b, v.h, v.n, v.w)
	v.each(func(b, n, h, c, i int) { d.row(b, h, n)[c] = float64(v.full[i]) })
	return d
}

// nanFull returns n NaNs: padding that poisons any stray read and marks any
// element left unwritten.
func nanFull(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.NaN())
	}
	return x
}

// operands holds the eight operands of one test problem.
type operands struct{ q, k, v, o, do, dq, dk, dv view }

// layoutViews allocates the operands in the named layout and sets p's
// strides: "bshd", "bhsd", "padded" (gaps between heads, rows and batches
// and a leading offset) or "packed" (Q, K and V interleaved in one
// [B, N, Hq+2·Hkv, D] buffer, and dQ, dK, dV likewise).
func layoutViews(p *spec.Problem, layout string) operands {
	mk := func(n, h, w int) view {
		switch layout {
		case "bshd":
			return view{nanFull(p.B * n * h * w), 0, spec.BSHD(n, h, w), p.B, n, h, w}
		case "bhsd":
			return view{nanFull(p.B * n * h * w), 0, spec.BHSD(n, h, w), p.B, n, h, w}
		case "padded", "packed":
			hs := w + 3
			ss := h*hs + 5
			bs := n*ss + 7
			return view{nanFull(11 + p.B*bs), 11, spec.Strides{Batch: bs, Seq: ss, Head: hs}, p.B, n, h, w}
		}
		panic(layout)
	}
	var r operands
	r.o = mk(p.Nq, p.Hq, p.Dv)
	r.do = mk(p.Nq, p.Hq, p.Dv)
	if layout == "packed" {
		if p.Nq != p.Nk || p.D != p.Dv {
			panic("packed layout needs Nq = Nk and D = Dv")
		}
		t := p.Hq + 2*p.Hkv
		s := spec.BSHD(p.Nq, t, p.D)
		pack := func(full []float32) (q, k, v view) {
			q = view{full, 0, s, p.B, p.Nq, p.Hq, p.D}
			k = view{full, p.Hq * p.D, s, p.B, p.Nk, p.Hkv, p.D}
			v = view{full, (p.Hq + p.Hkv) * p.D, s, p.B, p.Nk, p.Hkv, p.D}
			return
		}
		n := p.B * p.Nq * t * p.D
		r.q, r.k, r.v = pack(nanFull(n))
		r.dq, r.dk, r.dv = pack(nanFull(n))
	} else {
		r.q, r.k, r.v = mk(p.Nq, p.Hq, p.D), mk(p.Nk, p.Hkv, p.D), mk(p.Nk, p.Hkv, p.Dv)
		r.dq, r.dk, r.dv = mk(p.Nq, p.Hq, p.D), mk(p.Nk, p.Hkv, p.D), mk(p.Nk, p.Hkv, p.Dv)
	}
	p.Q, p.K, p.V, p.O = r.q.s, r.k.s, r.v.s, r.o.s
	return r
}

// randDense returns uniform values in ±amp, rounded to float32 so that the
// kernels and the float64 reference see the same inputs.
func randDense(rng *rand.Rand, b, h, n, w int, amp float64) dense {
	d := newDense(b, h, n, w)
	for i := range d.x {
		d.x[i] = float64(float32(amp * (2*rng.Float64() - 1)))
	}
	return d
}

// setInputs draws Q, K, V and dO from rng, in that order (Q and K in ±qk,
// V and dO in ±1), sets them in the operands and returns them.
func (ops operands) setInputs(p *spec.Problem, rng *rand.Rand, qk float64) (q, k, v, do dense) {
	q = randDense(rng, p.B, p.Hq, p.Nq, p.D, qk)
	k = randDense(rng, p.B, p.Hkv, p.Nk, p.D, qk)
	v = randDense(rng, p.B, p.Hkv, p.Nk, p.Dv, 1)
	do = randDense(rng, p.B, p.Hq, p.Nq, p.Dv, 1)
	ops.q.set(q)
	ops.k.set(k)
	ops.v.set(v)
	ops.do.set(do)
	return q, k, v, do
}

type tcase struct {
	b, hq, hkv, nq, nk, d, dv int
	mask                      spec.Mask
	layout                    string
	cfg                       Config
	scale                     float32 // 0 → 1/√D
	ext                       *spec.Ext
	// edit, when set, changes the drawn Q, K and V before the call.
	edit func(q, k, v dense)
}

func (c tcase) String() string {
	s := fmt.Sprintf("B%d_Hq%d_Hkv%d_Nq%d_Nk%d_D%d_Dv%d_%s_%s", c.b, c.hq, c.hkv, c.nq, c.nk, c.d, c.dv, c.mask, c.layout)
	if c.cfg != (Config{}) {
		s += fmt.Sprintf("_Br%d_Bc%d_W%d", c.cfg.Br, c.cfg.Bc, c.cfg.Workers)
	}
	if c.scale != 0 {
		s += fmt.Sprintf("_scale%g", c.scale)
	}
	if c.ext != nil {
		s += extString(c.ext)
	}
	return s
}

func (c tcase) problem() *spec.Problem {
	p := &spec.Problem{B: c.b, Hq: c.hq, Hkv: c.hkv, Nq: c.nq, Nk: c.nk, D: c.d, Dv: c.dv, Mask: c.mask, Scale: c.scale, Ext: c.ext}
	if p.Scale == 0 {
		p.Scale = float32(1 / math.Sqrt(float64(c.d)))
	}
	return p
}

// runCase draws c's inputs, runs its forward and backward and returns the
// operands (outputs included), the LSE and the float64 reference.
func runCase(t *testing.T, c tcase) (ops operands, lse []float32, ref refResult) {
	p := c.problem()
	ops = layoutViews(p, c.layout)
	rng := rand.New(rand.NewPCG(uint64(c.nq*1000+c.nk), uint64(c.d*100+c.dv)))
	qd, kd, vd, dod := ops.setInputs(p, rng, 2)
	if c.edit != nil {
		c.edit(qd, kd, vd)
		ops.q.set(qd)
		ops.k.set(kd)
		ops.v.set(vd)
	}
	ref = refBackward(p, qd, kd, vd, dod)

	ctx := context.Background()
	lse = nanFull(p.B * p.Hq * p.Nq)
	require.NoError(t, ForwardWith(ctx, c.cfg, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse))
	require.NoError(t, BackwardWith(ctx, c.cfg, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse,
		ops.do.buf(), ops.dq.buf(), ops.dk.buf(), ops.dv.buf()))
	return ops, lse, ref
}

// checkCase runs the forward and backward of c and compares them with the
// float64 reference.
func checkCase(t *testing.T, c tcase) {
	ops, lse, ref := runCase(t, c)
	assertLSE(t, lse, ref.lse)
	eo := relErr(ops.o.get().x, ref.o.x)
	eq := relErr(ops.dq.get().x, ref.dq.x)
	ek := relErr(ops.dk.get().x, ref.dk.x)
	ev := relErr(ops.dv.get().x, ref.dv.x)
	t.Logf("rel_l2: O %.2g dQ %.2g dK %.2g dV %.2g", eo, eq, ek, ev)
	assert.LessOrEqual(t, eo, tol, "O")
	assert.LessOrEqual(t, eq, tol, "dQ")
	assert.LessOrEqual(t, ek, tol, "dK")
	assert.LessOrEqual(t, ev, tol, "dV")

	// Nothing outside the outputs' views was written: the padding is still
	// NaN (and, as NaN reads would have shown, nothing outside the inputs'
	// views was read).
	for _, o := range []view{ops.o, ops.dq, ops.dk, ops.dv} {
		used := make([]bool, len(o.full))
		for _, v := range []view{ops.o, ops.dq, ops.dk, ops.dv} {
			if &v.full[0] == &o.full[0] {
				v.each(func(_, _, _, _, i int) { used[i] = true })
			}
		}
		for i, x := range o.full {
			if !used[i] && !math.IsNaN(float64(x)) {
				t.Fatalf("element %d outside the output views was written", i)
			}
		}
	}
}

// relErr is reference.RelL2, or the absolute L2 error where the
// reference is 0 but for float64 rounding (below 1e-10 in L2 norm): the
// gradients of sequences whose rows see one key each, dS = P·(Z∘dP − D)
// = 0 exactly, which float64 leaves at 1e-17 where dropout's Scale is not
// a power of 2.
func relErr(got, want []float64) float64 {
	if floats.Norm(want, 2) <= 1e-10 {
		d := make([]float64, len(want))
		floats.SubTo(d, got, want)
		return floats.Norm(d, 2)
	}
	return reference.RelL2(got, want)
}

func assertLSE(t *testing.T, got []float32, want []float64) {
	t.Helper()
	g := make([]float64, len(want))
	w := make([]float64, len(want))
	for i, x := range want {
		if math.IsInf(x, -1) {
			require.True(t, math.IsInf(float64(got[i]), -1), "LSE[%d] = %v, want -Inf", i, got[i])
			continue
		}
		g[i], w[i] = float64(got[i]), x
	}
	assert.LessOrEqual(t, reference.RelL2(g, w), tol, "LSE")
}

var masks = []spec.Mask{spec.MaskNone, spec.MaskCausalTopLeft, spec.MaskCausalBottomRight}

// withDefaults is c with an unset dv made d and an unset layout "bshd".
func (c tcase) withDefaults() tcase {
	if c.dv == 0 {
		c.dv = c.d
	}
	if c.layout == "" {
		c.layout = "bshd"
	}
	return c
}

// referenceCases spans sequence lengths around the tile sizes, Nq ≠ Nk
// both ways, head dimensions (multiples of the vector width and not), Dv ≠
// D, the three masks, GQA ratios 1, 2, 3 and 8, batches up to 3, BHSD,
// padded and packed-QKV layouts, odd tile sizes and a negative scale.
func referenceCases() []tcase {
	var cases []tcase
	add := func(c tcase) { cases = append(cases, c.withDefaults()) }
	for _, m := range masks {
		// Sequence lengths around the tile boundaries.
		for _, n := range []int{1, 2, 17, 64, 127, 128, 129} {
			add(tcase{b: 1, hq: 2, hkv: 1, nq: n, nk: n, d: 64, mask: m})
		}
		add(tcase{b: 1, hq: 1, hkv: 1, nq: 1000, nk: 1000, d: 8, mask: m})
		// Nq ≠ Nk both ways, odd tiles.
		add(tcase{b: 1, hq: 2, hkv: 2, nq: 50, nk: 130, d: 32, mask: m})
		add(tcase{b: 1, hq: 2, hkv: 2, nq: 130, nk: 50, d: 32, mask: m})
		add(tcase{b: 2, hq: 2, hkv: 1, nq: 37, nk: 300, d: 16, dv: 24, mask: m, cfg: Config{Br: 7, Bc: 5}})
		add(tcase{b: 2, hq: 2, hkv: 1, nq: 300, nk: 37, d: 16, dv: 24, mask: m, cfg: Config{Br: 16, Bc: 32, Workers: 3}})
		add(tcase{b: 1, hq: 1, hkv: 1, nq: 1, nk: 200, d: 8, mask: m})
		add(tcase{b: 1, hq: 1, hkv: 1, nq: 200, nk: 1, d: 8, mask: m})
		// Head dimensions, Dv ≠ D.
		for _, d := range []int{1, 8, 40, 64, 80, 96, 128, 256} {
			add(tcase{b: 1, hq: 2, hkv: 1, nq: 70, nk: 70, d: d, mask: m})
		}
		add(tcase{b: 1, hq: 2, hkv: 2, nq: 90, nk: 90, d: 64, dv: 32, mask: m})
		add(tcase{b: 1, hq: 2, hkv: 2, nq: 90, nk: 90, d: 24, dv: 80, mask: m})
		add(tcase{b: 1, hq: 2, hkv: 1, nq: 61, nk: 83, d: 13, dv: 21, mask: m, cfg: Config{Br: 9, Bc: 13}})
		add(tcase{b: 1, hq: 2, hkv: 1, nq: 83, nk: 61, d: 3, dv: 47, mask: m})
		// GQA ratios, batch, layouts.
		add(tcase{b: 3, hq: 4, hkv: 4, nq: 65, nk: 65, d: 32, mask: m, layout: "bhsd"})
		add(tcase{b: 2, hq: 4, hkv: 2, nq: 65, nk: 65, d: 32, mask: m, layout: "padded"})
		add(tcase{b: 2, hq: 8, hkv: 1, nq: 65, nk: 65, d: 32, mask: m, layout: "packed"})
		add(tcase{b: 3, hq: 8, hkv: 1, nq: 33, nk: 100, d: 40, dv: 8, mask: m, layout: "padded"})
		add(tcase{b: 1, hq: 6, hkv: 3, nq: 100, nk: 33, d: 16, mask: m, layout: "bhsd", cfg: Config{Br: 128, Bc: 16}})
		// A negative softmax scale.
		add(tcase{b: 1, hq: 2, hkv: 1, nq: 40, nk: 60, d: 16, mask: m, scale: -0.3})
	}
	return cases
}

func TestAgainstReference(t *testing.T) {
	runCases(t, referenceCases(), checkCase)
}

// runCases runs check on each case in a parallel subtest named by the
// case.
func runCases[C fmt.Stringer](t *testing.T, cases []C, check func(*testing.T, C)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			check(t, c)
		})
	}
}

// portableKernels switches to the portable Go kernels until t ends; when
// the vector kernels are not in use it skips t instead, as covered (the
// test named) has already run the portable ones.
func portableKernels(t *testing.T, covered string) {
	t.Helper()
	if !useSIMD {
		t.Skip("the vector kernels are not in use: " + covered + " covered the portable ones")
	}
	useSIMD = false
	t.Cleanup(func() { useSIMD = true })
}

// TestAgainstReferencePortable repeats the comparison on the portable Go
// kernels when the vector kernels are in use.
func TestAgainstReferencePortable(t *testing.T) {
	portableKernels(t, "TestAgainstReference")
	runCases(t, referenceCases(), checkCase)
}

// TestFullyMaskedRows: with the bottom-right mask and Nq > Nk the first
// Nq − Nk rows see no key: O = 0, LSE = −Inf, dQ = 0, never NaN.
func TestFullyMaskedRows(t *testing.T) {
	for _, nk := range []int{0, 1, 8} {
		c := tcase{b: 2, hq: 2, hkv: 1, nq: 20, nk: nk, d: 16, dv: 16, mask: spec.MaskCausalBottomRight, layout: "bshd"}
		t.Run(c.String(), func(t *testing.T) {
			if nk > 0 {
				checkCase(t, c)
			}
			p := c.problem()
			ops := layoutViews(p, c.layout)
			ops.setInputs(p, rand.New(rand.NewPCG(1, 2)), 1)
			lse := nanFull(p.B * p.Hq * p.Nq)
			ctx := context.Background()
			require.NoError(t, Forward(ctx, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse))
			require.NoError(t, Backward(ctx, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse,
				ops.do.buf(), ops.dq.buf(), ops.dk.buf(), ops.dv.buf()))
			o, dq := ops.o.get(), ops.dq.get()
			for b := range p.B {
				for h := range p.Hq {
					for i := range p.Nq - p.Nk {
						checkDeadRow(t, p, lse, o, dq, b, h, i)
					}
				}
			}
			requireNoNaN(t, o, dq, ops.dk.get(), ops.dv.get())
		})
	}
}

// checkDeadRow checks query row i of sequence b and head h, one that
// sees no key: its LSE is −Inf and its O and dQ rows are 0.
func checkDeadRow(t *testing.T, p *spec.Problem, lse []float32, o, dq dense, b, h, i int) {
	t.Helper()
	require.True(t, math.IsInf(float64(lse[p.LSEIndex(b, h, i)]), -1), "b%d h%d row %d", b, h, i)
	assert.Equal(t, make([]float64, p.Dv), o.row(b, h, i))
	assert.Equal(t, make([]float64, p.D), dq.row(b, h, i))
}

// requireNoNaN fails t if any of ds holds a NaN.
func requireNoNaN(t *testing.T, ds ...dense) {
	t.Helper()
	for _, d := range ds {
		for _, x := range d.x {
			require.False(t, math.IsNaN(x))
		}
	}
}

// TestDeterminism: the backward gives the same bits whatever the worker
// count.
func TestDeterminism(t *testing.T) {
	for _, m := range masks {
		c := tcase{b: 2, hq: 4, hkv: 2, nq: 300, nk: 260, d: 40, dv: 40, mask: m, layout: "bshd"}
		t.Run(c.String(), func(t *testing.T) { checkWorkerDeterminism(t, c) })
	}
}

// checkWorkerDeterminism runs c's forward once, then its backward with
// 1, 2 and 7 workers, and fails unless every gradient has the same bits
// each time (any NaN matching any NaN).
func checkWorkerDeterminism(t *testing.T, c tcase) {
	t.Helper()
	p := c.problem()
	ops := layoutViews(p, c.layout)
	ops.setInputs(p, rand.New(rand.NewPCG(3, 4)), 2)
	ctx := context.Background()
	lse := make([]float32, p.B*p.Hq*p.Nq)
	require.NoError(t, Forward(ctx, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse))
	var first [][]float32
	for _, workers := range []int{1, 2, 7} {
		cfg := Config{Br: 32, Bc: 16, Workers: workers}
		require.NoError(t, BackwardWith(ctx, cfg, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse,
			ops.do.buf(), ops.dq.buf(), ops.dk.buf(), ops.dv.buf()))
		got := [][]float32{
			append([]float32(nil), ops.dq.full...),
			append([]float32(nil), ops.dk.full...),
			append([]float32(nil), ops.dv.full...),
		}
		if first == nil {
			first = got
			continue
		}
		for g := range got {
			for i := range got[g] {
				a, b := got[g][i], first[g][i]
				if math.Float32bits(a) != math.Float32bits(b) && !(math.IsNaN(float64(a)) && math.IsNaN(float64(b))) {
					t.Fatalf("workers=%d: gradient %d element %d: %v, want %v", workers, g, i, a, b)
				}
			}
		}
	}
}

func TestCancel(t *testing.T) {
	c := tcase{b: 1, hq: 2, hkv: 1, nq: 256, nk: 256, d: 16, dv: 16, layout: "bshd"}
	p := c.problem()
	ops := layoutViews(p, c.layout)
	lse := make([]float32, p.B*p.Hq*p.Nq)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Forward(ctx, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse)
	require.ErrorIs(t, err, context.Canceled)
	err = Backward(ctx, p, ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf(), lse,
		ops.do.buf(), ops.dq.buf(), ops.dk.buf(), ops.dv.buf())
	require.ErrorIs(t, err, context.Canceled)

	// Cancelled while running: the pool stops taking items.
	for _, workers := range []int{1, 2, 4} {
		ctx, cancel := context.WithCancel(context.Background())
		var ran atomic.Int64
		err := parallel(ctx, workers, 1000, func() struct{} { return struct{}{} }, func(_ struct{}, i int) {
			ran.Add(1)
			if i == 10 {
				cancel()
			}
		})
		require.ErrorIs(t, err, context.Canceled, "workers=%d", workers)
		assert.Less(t, ran.Load(), int64(1000))
		cancel()
	}
}

func TestShortSlices(t *testing.T) {
	c := tcase{b: 2, hq: 2, hkv: 1, nq: 10, nk: 12, d: 8, dv: 8, layout: "bshd"}
	p := c.problem()
	ops := layoutViews(p, c.layout)
	ctx := context.Background()
	q, k, v, o := ops.q.buf(), ops.k.buf(), ops.v.buf(), ops.o.buf()
	do, dq, dk, dv := ops.do.buf(), ops.dq.buf(), ops.dk.buf(), ops.dv.buf()
	lse := make([]float32, p.B*p.Hq*p.Nq)
	short := func(x []float32) []float32 { return x[:len(x)-1] }

	assert.Error(t, Forward(ctx, p, short(q), k, v, o, lse))
	assert.Error(t, Forward(ctx, p, q, short(k), v, o, lse))
	assert.Error(t, Forward(ctx, p, q, k, short(v), o, lse))
	assert.Error(t, Forward(ctx, p, q, k, v, short(o), lse))
	assert.Error(t, Forward(ctx, p, q, k, v, o, short(lse)))
	assert.Error(t, Forward(ctx, p, q, k, v, o, nil))
	assert.Error(t, Backward(ctx, p, q, k, v, o, lse, short(do), dq, dk, dv))
	assert.Error(t, Backward(ctx, p, q, k, v, o, lse, do, short(dq), dk, dv))
	assert.Error(t, Backward(ctx, p, q, k, v, o, lse, do, dq, short(dk), dv))
	assert.Error(t, Backward(ctx, p, q, k, v, o, lse, do, dq, dk, short(dv)))
	assert.Error(t, Backward(ctx, p, q, k, v, o, short(lse), do, dq, dk, dv))
	assert.Error(t, Forward(ctx, nil, q, k, v, o, lse))
	bad := *p
	bad.Hkv = 0
	assert.Error(t, Forward(ctx, &bad, q, k, v, o, lse))
	bad = *p
	bad.Hq = 3
	assert.Error(t, Forward(ctx, &bad, q, k, v, o, lse))
	bad = *p
	bad.Q.Seq = -bad.Q.Seq
	assert.Error(t, Forward(ctx, &bad, q, k, v, o, lse))
	require.NoError(t, Forward(ctx, p, q, k, v, o, lse))
	require.NoError(t, Backward(ctx, p, q, k, v, o, lse, do, dq, dk, dv))
}

// TestExp2 checks the polynomial exp2 against math.Exp2.
func TestExp2(t *testing.T) {
	assert.Equal(t, float32(0), exp2(float32(math.Inf(-1))))
	assert.Equal(t, float32(0), exp2(-127))
	assert.Equal(t, float32(1), exp2(0))
	assert.True(t, math.IsNaN(float64(exp2(float32(math.NaN())))))
	assert.False(t, math.IsInf(float64(exp2(1000)), 0))
	var worst float64
	for x := float32(-126); x <= 127; x += 0.0037 {
		want := math.Exp2(float64(x))
		worst = max(worst, math.Abs(float64(exp2(x))-want)/want)
	}
	assert.Less(t, worst, 3e-7)
}
