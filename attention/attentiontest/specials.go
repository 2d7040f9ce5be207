package attentiontest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flashvk/flashvk/attention"
)

// RunSpecial checks the special-value contract (the attention package
// doc) on every dtype, forward and backward:
//   - a NaN in Q, K, V or dO gives NaN exactly where the float64 reference
//     does (IEEE arithmetic over the keys each row sees), every other
//     output is finite and within the case's tolerance;
//   - so does, in the forward, an infinite element of K (±Inf scores) or of
//     V (±Inf in a column of O);
//   - with a causal mask, a NaN may also reach the outputs of rows on the
//     same side of the diagonal within MaskBand positions of it, and nowhere
//     else;
//   - a row whose scores are all −Inf gives O = 0, LSE = −Inf, dQ = 0 and
//     adds nothing to dK and dV;
//   - a huge scale (scores of 1e30) gives the exact, one-hot softmax and
//     finite gradients within the bound fp32 rounding of dP − D allows;
//   - float32's range in base 2 (RangeEdge): a score just inside it gives
//     the exact one-hot softmax, one just beyond NaN;
//   - a backward handed an LSE of +Inf, or one whose base-2 value is not a
//     finite float32 (beyond ±2.3587e38), treats the row as empty.
func RunSpecial(t *testing.T, e *attention.Engine) { runSpecial(t, e, true) }

// RunSpecialForward is RunSpecial's forward half, for forward-only kernels.
func RunSpecialForward(t *testing.T, e *attention.Engine) { runSpecial(t, e, false) }

func runSpecial(t *testing.T, e *attention.Engine, backward bool) {
	plain := Case{B: 1, Hq: 2, Hkv: 1, Nq: 16, Nk: 20, D: 8, Dv: 8}
	for _, dt := range dtypes(e) {
		for _, s := range []struct {
			name    string
			c       Case
			mutate  func(in *Inputs)
			fwdOnly bool
		}{
			{"nan-q", plain, func(in *Inputs) { in.setQ(0, 5, 1, 2, nan) }, false},
			{"nan-k", plain, func(in *Inputs) { in.setK(0, 7, 0, 3, nan) }, false},
			{"nan-v", plain, func(in *Inputs) { in.setV(0, 11, 0, 4, nan) }, false},
			{"nan-do", plain, func(in *Inputs) { in.setDO(0, 9, 0, 6, nan) }, false},
			{"inf-k", plain, func(in *Inputs) { in.infK(0, 7, 0, 3) }, true},
			{"inf-v", plain, func(in *Inputs) { in.setV(0, 11, 0, 4, -inf) }, true},
			// One key: every row's probability of it is exactly 1.
			{"inf-v-one-key", Case{B: 1, Hq: 2, Hkv: 1, Nq: 16, Nk: 1, D: 8, Dv: 8},
				func(in *Inputs) { in.setV(0, 0, 0, 4, inf) }, true},
			{"dead-row", plain, func(in *Inputs) { in.killRow(0, 3, 1) }, false},
			{"dead-row-causal", Case{B: 2, Hq: 2, Hkv: 2, Nq: 24, Nk: 30, D: 16, Dv: 16, Causal: true, Align: attention.BottomRight},
				func(in *Inputs) { in.killRow(1, 20, 0) }, false},
		} {
			t.Run(dt.String()+"/"+s.name, func(t *testing.T) { specialValues(t, e, dt, s.c, s.mutate, backward && !s.fwdOnly) })
		}
		t.Run(dt.String()+"/nan-v-causal", func(t *testing.T) { nanBand(t, e, dt, backward) })
		t.Run(dt.String()+"/huge-scale", func(t *testing.T) { hugeScale(t, e, dt, backward) })
		t.Run(dt.String()+"/range-edge", func(t *testing.T) { rangeEdge(t, e, dt, backward) })
		if backward {
			t.Run(dt.String()+"/lse-out-of-range", func(t *testing.T) { lseOutOfRange(t, e, dt) })
		}
	}
}

// MaskBand bounds how far (in positions) a non-finite value may spread
// across the causal diagonal to rows the mask hides it from: a tile on the
// diagonal spans at most the largest query tile plus the largest key tile
// of any kernel (128 each).
const MaskBand = 256

var (
	nan = float32(math.NaN())
	inf = float32(math.Inf(1))
)

// setIn sets element (b, s, h, d) of the input t to x and refreshes its
// float64 copy c.
func setIn(t attention.Tensor, c *[]float64, b, s, h, d int, x float32) {
	set(t.Data, t.Strides.Offset(b, s, h)+d, x)
	*c = t.Float64s()
}

func (in *Inputs) setQ(b, i, h, d int, x float32)  { setIn(in.Q, &in.q64, b, i, h, d, x) }
func (in *Inputs) setK(b, j, h, d int, x float32)  { setIn(in.K, &in.k64, b, j, h, d, x) }
func (in *Inputs) setV(b, j, h, d int, x float32)  { setIn(in.V, &in.v64, b, j, h, d, x) }
func (in *Inputs) setDO(b, i, h, d int, x float32) { setIn(in.DO, &in.dO, b, i, h, d, x) }

// infK sets element d of key (b, j, kh) to +Inf and feature d of every
// query of batch b to a nonzero multiple of 1/4 (exact in one bf16: a
// kernel that splits fp32 operands into bf16 planes meets zero planes of Q
// there, and +Inf times a zero plane must not make a score NaN).
func (in *Inputs) infK(b, j, kh, d int) {
	c := in.Case
	for i := range c.Nq {
		for h := range c.Hq {
			x := quarter(in.q64[c.qOff(b, i, h)+d])
			set(in.Q.Data, in.Q.Strides.Offset(b, i, h)+d, float32(x))
		}
	}
	in.q64 = in.Q.Float64s()
	in.setK(b, j, kh, d, inf)
}

// quarter is the nonzero multiple of 1/4 nearest x (0.25 for |x| ≤ 1/8):
// exact in every storage type, and in one bf16 plane.
func quarter(x float64) float64 {
	if q := math.Round(x*4) / 4; q != 0 {
		return q
	}
	return 0.25
}

// killRow makes every score of query row (b, i, h) −Inf: q = (−Inf, 0, …)
// and the first element of every key of batch b positive — for odd keys a
// multiple of 1/4 (exact in every storage type and in one bf16: a kernel
// that splits fp32 operands into bf16 planes meets zero planes there, and
// −Inf times a zero plane must not make the row NaN). Its dO row is made
// huge, so any use of it in a gradient would show.
func (in *Inputs) killRow(b, i, h int) {
	c := in.Case
	for j := range c.Nk {
		for kh := range c.Hkv {
			x := math.Abs(in.k64[c.kOff(b, j, kh)]) + 0.25
			if j%2 == 1 {
				x = quarter(x)
			}
			set(in.K.Data, in.K.Strides.Offset(b, j, kh), float32(x))
		}
	}
	in.k64 = in.K.Float64s()
	for d := range c.D {
		in.setQ(b, i, h, d, 0)
	}
	in.setQ(b, i, h, 0, float32(math.Inf(-1)))
	for d := range c.Dv {
		in.setDO(b, i, h, d, 3e4)
	}
}

// specialValues runs a case whose inputs mutate changes and demands the
// reference's NaN and ±Inf pattern exactly, the finite outputs within the
// tolerance of the unmutated case.
func specialValues(t *testing.T, e *attention.Engine, dt attention.DType, c Case, mutate func(in *Inputs), backward bool) {
	seed := Seed(t)
	in := NewInputs(c, dt, seed)
	tol := in.tolerance(t, in.Reference(t))
	mutate(in)
	ref := in.Reference(t)
	out := in.forward(t, e)
	CheckSpecial(t, "o", out.o, ref.O, tol.O, seed)
	CheckSpecial(t, "lse", out.lse, ref.LSE, tol.LSE, seed)
	if !backward {
		return
	}
	g := in.backward(t, e, ref, refLSE(ref))
	CheckSpecial(t, "dq", g[0], ref.DQ, tol.DQ, seed)
	CheckSpecial(t, "dk", g[1], ref.DK, tol.DK, seed)
	CheckSpecial(t, "dv", g[2], ref.DV, tol.DV, seed)
	in.checkOutsideUntouched(t)
}

// CheckSpecial fails t unless got has NaN, +Inf and −Inf exactly where
// want has them and its finite elements are within tol (rel_l2) of want's.
func CheckSpecial(t testing.TB, name string, got []float32, want []float64, tol float64, seed uint64) {
	t.Helper()
	var g []float32
	var w []float64
	bad := 0
	for i, x := range want {
		y := float64(got[i])
		if kind(x) != kind(y) {
			if bad < 5 {
				t.Errorf("%s[%d] = %v, want %v (seed %d)", name, i, y, x, seed)
			}
			bad++
			continue
		}
		if kind(x) == "finite" {
			g, w = append(g, got[i]), append(w, x)
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d elements differ in kind (NaN, ±Inf, finite) from the reference", name, bad)
		return
	}
	Check(t, name+" (finite elements)", g, w, tol, seed)
}

func kind(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 1):
		return "+Inf"
	case math.IsInf(x, -1):
		return "-Inf"
	}
	return "finite"
}

// nanBand: a NaN in one value row under a causal mask. Rows that see it
// must be NaN in that column; rows more than MaskBand before it must be
// finite and exact; rows in between may be either (see RunSpecial).
func nanBand(t *testing.T, e *attention.Engine, dt attention.DType, backward bool) {
	c := Case{B: 1, Hq: 1, Hkv: 1, Nq: 600, Nk: 600, D: 16, Dv: 16, Causal: true, Align: attention.TopLeft}
	const bad, col = 450, 3
	seed := Seed(t)
	in := NewInputs(c, dt, seed)
	tol := in.tolerance(t, in.Reference(t))
	in.setV(0, bad, 0, col, nan)
	ref := in.Reference(t)
	out := in.forward(t, e)
	var g [3][]float32
	if backward {
		g = in.backward(t, e, ref, refLSE(ref))
	}
	// Rows of O and dQ: NaN where the reference is, clean before the band.
	for _, o := range []struct {
		name      string
		got       []float32
		want      []float64
		width     int
		tol       float64
		rowOffset func(i int) int
	}{
		{"o", out.o, ref.O, c.Dv, tol.O, func(i int) int { return c.oOff(0, i, 0) }},
		{"dq", g[0], ref.DQ, c.D, tol.DQ, func(i int) int { return c.qOff(0, i, 0) }},
	} {
		if o.got == nil {
			continue
		}
		var cg []float32
		var cw []float64
		for i := range c.Nq {
			for x := range o.width {
				k := o.rowOffset(i) + x
				y, w := float64(o.got[k]), o.want[k]
				switch {
				case math.IsNaN(w) && !math.IsNaN(y):
					t.Fatalf("%s[%d][%d] = %v, want NaN (seed %d)", o.name, i, x, y, seed)
				case math.IsNaN(y) && !math.IsNaN(w) && i < bad-MaskBand:
					t.Fatalf("%s[%d][%d] = NaN: row %d is more than %d rows before the NaN value row %d (seed %d)", o.name, i, x, i, MaskBand, bad, seed)
				case !math.IsNaN(y) && !math.IsNaN(w):
					cg, cw = append(cg, o.got[k]), append(cw, w)
				}
			}
		}
		Check(t, o.name+" (non-NaN elements)", cg, cw, o.tol, seed)
	}
	if !backward {
		return
	}
	// dK and dV: every NaN of the reference.
	CheckSpecialSuperset(t, "dk", g[1], ref.DK, seed)
	CheckSpecialSuperset(t, "dv", g[2], ref.DV, seed)
}

// CheckSpecialSuperset fails t when got lacks a NaN that want has.
func CheckSpecialSuperset(t testing.TB, name string, got []float32, want []float64, seed uint64) {
	t.Helper()
	for i, w := range want {
		if math.IsNaN(w) && !math.IsNaN(float64(got[i])) {
			t.Fatalf("%s[%d] = %v, want NaN (seed %d)", name, i, got[i], seed)
		}
	}
}

// hugeScale: scale 1e30 makes every score about 1e30 and the softmax one-hot
// (inputs drawn without near ties: nearTie). O and LSE must be the
// reference's; dV (sums of dO rows) too; dQ and dK
// are 0 in exact arithmetic, and fp32 rounding of dP − D (two dot products
// of Dv terms each) bounds each element by scale·2·Dv·u·Σ|dO∘v|·|x|
// (u = 2⁻²⁴), past fp16's range where the storage is fp16.
func hugeScale(t *testing.T, e *attention.Engine, dt attention.DType, backward bool) {
	c := Case{B: 1, Hq: 2, Hkv: 1, Nq: 40, Nk: 50, D: 16, Dv: 16, Causal: true, Align: attention.BottomRight, Scale: 1e30}
	seed := Seed(t)
	in := NewInputs(c, dt, seed)
	// The one-hot softmax survives fp32 only where each row's largest
	// score is resolved to the few ulps the backward's careful rows allow
	// (the LSE handed to it is the reference's): a score q·k carries fp32
	// rounding of its terms q_x·k_x, so a largest score far smaller than
	// those terms, or one a hair from the next, is not. Draw again until
	// every row's largest score is at least 1 and stands out from the
	// next (nearTie).
	for k := uint64(1); in.nearTie(); k++ {
		in = NewInputs(c, dt, seed+k)
	}
	ref := in.Reference(t)
	rel := Float32Tol
	switch dt {
	case attention.Float16:
		rel = 2 * f16Floor
	case attention.BFloat16:
		rel = 2 * bf16Floor
	}
	out := in.forward(t, e)
	CheckSpecial(t, "o", out.o, ref.O, rel, seed)
	CheckSpecial(t, "lse", out.lse, ref.LSE, Float32Tol, seed)
	if !backward {
		return
	}
	g := in.backward(t, e, ref, refLSE(ref))
	CheckSpecial(t, "dv", g[2], ref.DV, rel, seed)
	mq, mk := in.dsRoundingBounds()
	for i, m := range [][]float64{mq, mk} {
		name, got, want := []string{"dq", "dk"}[i], g[i], [][]float64{ref.DQ, ref.DK}[i]
		worst := 0.0
		for x := range want {
			bound := 2*float64(c.Dv)*0x1p-24*m[x]*(1+rel) + rel*math.Abs(want[x])
			y := float64(got[x])
			// fp16 cannot hold noise past its range: ±Inf is then the
			// correctly rounded value.
			if dt == attention.Float16 && math.IsInf(y, 0) && bound > 65504 {
				continue
			}
			err := math.Abs(y - want[x])
			if !(err <= bound) {
				t.Fatalf("%s[%d] = %v, want %v within %.3g (seed %d)", name, x, y, want[x], bound, seed)
			}
			if bound > 0 {
				worst = max(worst, err/bound)
			}
		}
		t.Logf("%s: largest error %.2f of its bound", name, worst)
	}
}

// RangeEdge is where scaled scores leave the range every backend computes
// in: the kernels exponentiate in base 2, 2^(scale·q·k·log₂e), so a score
// is in range while |scale·q·k| < 2^128/log₂e (float32's largest finite
// value, 3.4028e38, over log₂e), not up to float32's own limit.
const RangeEdge = 2.3587e38

// rangeEdge: one query, two keys with products 1 and 0.5, scale just inside
// RangeEdge and just beyond it. Inside, the softmax is exactly one-hot (O
// is v₀, LSE the score, dV = (dO, 0), dQ = dK = 0); beyond, O, LSE and the
// gradients are NaN (the naive and minimal kernels, forward only, may
// still give the exact O and LSE) — on every backend, never an Inf or a
// wrong finite value.
func rangeEdge(t *testing.T, e *attention.Engine, dt attention.DType, backward bool) {
	ctx := context.Background()
	mk := func(n int, xs ...float32) attention.Tensor {
		x, err := attention.NewTensor(dt, attention.Shape{B: 1, S: n, H: 1, D: 1}, attention.BSHD)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range xs {
			set(x.Data, i, v)
		}
		return x
	}
	q, k, v, dO := mk(1, 1), mk(2, 1, 0.5), mk(2, 3, 5), mk(1, 1)
	for _, c := range []struct {
		scale  float32
		inside bool
	}{{0.999 * RangeEdge, true}, {1.001 * RangeEdge, false}} {
		opt := attention.Options{Scale: c.scale}
		out, err := e.Forward(ctx, q, k, v, opt)
		if err != nil {
			t.Fatalf("scale %g: %v", c.scale, err)
		}
		o, lse := out.O.Float64s()[0], float64(out.LSE[0])
		var g *attention.Grads
		if backward {
			if g, err = e.Backward(ctx, q, k, v, out.O, out.LSE, dO, opt); err != nil {
				t.Fatalf("scale %g: backward: %v", c.scale, err)
			}
		}
		if c.inside {
			if o != 3 || lse != float64(c.scale) {
				t.Errorf("scale %g (inside the range): o %v, lse %v; want 3 and %v", c.scale, o, lse, c.scale)
			}
			if g != nil && (!slices.Equal(g.DV.Float64s(), []float64{1, 0}) || g.DQ.Float64s()[0] != 0 ||
				!slices.Equal(g.DK.Float64s(), []float64{0, 0})) {
				t.Errorf("scale %g (inside the range): dv %v, dq %v, dk %v; want [1 0], [0], [0 0]", c.scale,
					g.DV.Float64s(), g.DQ.Float64s(), g.DK.Float64s())
			}
			continue
		}
		// Beyond it: NaN, or — the forward-only naive and minimal kernels,
		// which exponentiate in base e — still the exact result.
		exact := o == 3 && lse == float64(c.scale)
		if !exact && (!math.IsNaN(o) || !math.IsNaN(lse)) {
			t.Errorf("scale %g (beyond the range): o %v, lse %v; want NaN (or 3 and %v)", c.scale, o, lse, c.scale)
		}
		if g != nil && math.IsNaN(lse) && (!math.IsNaN(g.DV.Float64s()[0]) || !math.IsNaN(g.DQ.Float64s()[0])) {
			t.Errorf("scale %g (beyond the range): dv %v, dq %v; want NaN", c.scale, g.DV.Float64s(), g.DQ.Float64s())
		}
	}
}

// lseOutOfRange: the backward is handed one row's LSE replaced by +Inf
// (P = e^(s−∞) = 0), 3e38 or −3e38 (base-2 values past float32's range);
// every backend treats that row as empty — dQ_i = 0 and nothing added to
// dK and dV, even from its dO — which is the reference's backward with
// that row's dO zeroed.
func lseOutOfRange(t *testing.T, e *attention.Engine, dt attention.DType) {
	c := Case{B: 1, Hq: 2, Hkv: 1, Nq: 16, Nk: 20, D: 8, Dv: 8}
	const b, i, h = 0, 5, 1
	seed := Seed(t)
	in := NewInputs(c, dt, seed)
	ref := in.Reference(t)
	tol := in.tolerance(t, ref)
	row := (b*c.Hq+h)*c.Nq + i
	vals := []float64{math.Inf(1), 3e38, -3e38}
	var got [][3][]float32
	for _, x := range vals {
		mod := *ref
		mod.LSE = slices.Clone(ref.LSE)
		mod.LSE[row] = x
		g := in.backward(t, e, &mod, refLSE(&mod))
		got = append(got, [3][]float32{slices.Clone(g[0]), slices.Clone(g[1]), slices.Clone(g[2])})
	}
	for d := range c.Dv {
		in.setDO(b, i, h, d, 0)
	}
	want := in.Reference(t)
	for k, x := range vals {
		for n, w := range [][]float64{want.DQ, want.DK, want.DV} {
			name := fmt.Sprintf("lse %g: %s", x, []string{"dq", "dk", "dv"}[n])
			CheckSpecial(t, name, got[k][n], w, []float64{tol.DQ, tol.DK, tol.DV}[n], seed)
		}
	}
}

// nearTie reports whether a row's largest visible product q·k is below 1
// (fp32 rounding of its terms may then exceed what the backward's careful
// rows absorb) or lies within 2⁻¹⁸ of the next, relatively (closer than
// fp32 arithmetic can order them).
func (in *Inputs) nearTie() bool {
	c := in.Case
	p := c.params()
	for b := range c.B {
		for h := range c.Hq {
			kh := h / (c.Hq / c.Hkv)
			for i := range c.Nq {
				top, next := math.Inf(-1), math.Inf(-1)
				for j := range c.Nk {
					if !p.Visible(b, i, j) {
						continue
					}
					var s float64
					for x := range c.D {
						s += in.q64[c.qOff(b, i, h)+x] * in.k64[c.kOff(b, j, kh)+x]
					}
					if s > top {
						top, next = s, top
					} else if s > next {
						next = s
					}
				}
				if top < 1 || !math.IsInf(next, -1) && top-next <= 0x1p-18*math.Max(math.Abs(top), math.Abs(next)) {
					return true
				}
			}
		}
	}
	return false
}

// dsRoundingBounds returns, per element of dQ and dK, Σ scale·P_ij·Σ_c|dO_ic·v_jc|·|x|
// over the (i, j) pairs, x = k_j for dQ and q_i for dK: what a relative
// rounding error of dP and D turns into.
func (in *Inputs) dsRoundingBounds() (dq, dk []float64) {
	c := in.Case
	return in.pairSums(func(b, h, kh, i, j int) float64 {
		var a float64
		for x := range c.Dv {
			a += math.Abs(in.dO[c.oOff(b, i, h)+x] * in.v64[c.vOff(b, j, kh)+x])
		}
		return a
	})
}
