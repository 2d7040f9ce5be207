package attentiontest

import (
	"fmt"
	"math"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
)

// RunEdges checks numerics at the edges, forward and backward: scores as
// large as ±1e4 before scaling, NaN inputs, fp16 values near the fp16
// maximum, and bf16 values far outside fp16's range (bf16 has fp32's
// exponent range, so it must never be computed through fp16). Rows without
// visible keys are covered by Cases.
func RunEdges(t *testing.T, e *attention.Engine) {
	for _, dt := range dtypes(e) {
		t.Run(dt.String()+"/large-scores", func(t *testing.T) { largeScores(t, e, dt) })
		t.Run(dt.String()+"/nan", func(t *testing.T) { nanPropagation(t, e, dt) })
		if dt == attention.Float16 {
			t.Run("float16/near-max", func(t *testing.T) { nearMax(t, e) })
		}
		if dt == attention.BFloat16 {
			t.Run("bfloat16/range", func(t *testing.T) { bf16Range(t, e) })
		}
		if dt == attention.Float32 {
			t.Run("float32/d-cancels", func(t *testing.T) { dCancels(t, e) })
		}
	}
}

// dCancels: the backward's D = rowsum(dO∘O) whose terms cancel in fp32.
// One query (Q = 0: equal scores, P = ½, ½) sees two keys; V's rows are
// (1, 0, 0, −1, 0, …) and (0, 2⁻²⁹, 0, …), so O = (½, 2⁻³⁰, 0, −½, 0, …),
// and dO is 1 on features 0, 1 and 3: dP = (0, 2⁻²⁹), each exact in any
// order of addition, but D = ½ + 2⁻³⁰ − ½ = 2⁻³⁰ loses its 2⁻³⁰ in a plain
// fp32 sum whichever pair it adds first (½ + 2⁻³⁰ and 2⁻³⁰ − ½ round it
// away, ½ − ½ does not, and features 0 and 3 never meet first in a sum
// split over lanes by feature index: 0 and 1, or 0 and 3 after 1 and 3).
// Then dS = (−2⁻³¹, 2⁻³¹) and dQ = scale·2⁻³¹·(k₂ − k₁); a D of 0 would
// give dS = (0, 2⁻³⁰), a dQ that is not even parallel to it. dK = 0 (Q =
// 0) and dV = ½·dO.
func dCancels(t *testing.T, e *attention.Engine) {
	c := Case{B: 1, Hq: 1, Hkv: 1, Nq: 1, Nk: 2, D: 16, Dv: 16}
	seed := Seed(t)
	in := NewInputs(c, attention.Float32, seed)
	for d := range c.D {
		in.setQ(0, 0, 0, d, 0)
	}
	for j := range c.Nk {
		for d := range c.Dv {
			in.setV(0, j, 0, d, 0)
		}
	}
	for d := range c.Dv {
		in.setDO(0, 0, 0, d, 0)
	}
	in.setV(0, 0, 0, 0, 1)
	in.setV(0, 0, 0, 3, -1)
	in.setV(0, 1, 0, 1, 0x1p-29)
	for _, d := range []int{0, 1, 3} {
		in.setDO(0, 0, 0, d, 1)
	}
	ref := in.Reference(t)
	g := in.backward(t, e, ref, refLSE(ref))
	Check(t, "dq", g[0], ref.DQ, Float32Tol, seed)
	Check(t, "dk", g[1], ref.DK, Float32Tol, seed)
	Check(t, "dv", g[2], ref.DV, Float32Tol, seed)
}

// scaleInputs multiplies the stored values of t by f (re-rounding to t's
// dtype) and returns the new float64 copy.
func scaleInputs(t attention.Tensor, f float64) []float64 {
	x := t.Float64s()
	dense := attention.Contiguous(t.Shape, attention.BSHD)
	forEachRow(t, func(b, s, h, off int) {
		for d := range t.Shape.D {
			set(t.Data, off+d, float32(x[dense.Offset(b, s, h)+d]*f))
		}
	})
	return t.Float64s()
}

// largeScores: scores of ~1e4 and more, where an fp32 score carries an
// absolute error of about ε·Σ|q_i k_i|, so no fp32 computation is exact.
// float32 storage is held to a plain fp32 computation of the same
// attention (every product accumulated and rounded in fp32, the softmax in
// fp32: lowPrecisionBaseline with fp32 rounding), 8 ulps at least where
// that happens to be exact: within 2× of its error where the softmax is
// spread over many keys (shared-key: keys sharing a large component, so
// the scores of a row differ by O(1), and the error is the sum of many
// elements'), within 4× where it is nearly one-hot (Q and K scaled ×35 and
// ×100: the error then comes from the few rows with near-ties) — or, there,
// within what scoreUlps fp32 ulp of every score's terms moves O through
// the softmax, if that is larger (scoreSensitivity): at a near tie the
// baseline's own error can fall far below it on a lucky draw, which no
// other summation order is bound to match (one draw in 20 did, 30× below
// the CPU backend's, before this bound). 16-bit storage:
// its usual bound or 4·ε32·max|s|, whichever is larger. The backward must
// stay finite.
func largeScores(t *testing.T, e *attention.Engine, dt attention.DType) {
	for _, f := range []float64{35, 100} {
		t.Run(fmt.Sprintf("x%g", f), func(t *testing.T) { largeScoresBy(t, e, dt, f, 0, 4) })
	}
	t.Run("shared-key", func(t *testing.T) { largeScoresBy(t, e, dt, 1, 1200, 2) })
}

// largeScoresBy runs largeScores with Q and K scaled by f, every key
// moved by shared times key 0 when shared ≠ 0, and the float32 bound
// ratio times the plain fp32 error.
func largeScoresBy(t *testing.T, e *attention.Engine, dt attention.DType, f, shared, ratio float64) {
	c := Case{B: 1, Hq: 2, Hkv: 1, Nq: 70, Nk: 90, D: 64, Dv: 64, Causal: true, Align: attention.BottomRight}
	seed := Seed(t)
	in := NewInputs(c, dt, seed)
	in.q64 = scaleInputs(in.Q, f)
	in.k64 = scaleInputs(in.K, f)
	if shared != 0 {
		u := in.k64[c.kOff(0, 0, 0):][:c.D] // key 0, the shared direction
		u = append([]float64(nil), u...)
		forEachRow(in.K, func(b, s, h, off int) {
			for d := range c.D {
				set(in.K.Data, off+d, float32(in.k64[c.kOff(b, s, h)+d]*0.05+shared*u[d]))
			}
		})
		in.k64 = in.K.Float64s()
	}
	ref := in.Reference(t)
	maxS := 0.0
	for i := range c.Nq {
		for j := range c.Nk {
			s := 0.0
			for d := range c.D {
				s += in.q64[i*c.Hq*c.D+d] * in.k64[j*c.D+d]
			}
			maxS = math.Max(maxS, math.Abs(s))
		}
	}
	t.Logf("max |q·k| = %.3g", maxS)
	if maxS < 5e3 {
		t.Fatalf("inputs too small for this test: max |q·k| = %g", maxS)
	}
	var tolO, tolLSE float64
	var base *Ref // (float32: the plain fp32 computation)
	if dt == attention.Float32 {
		base = in.lowPrecisionBaseline(r32, r32, ref.O)
		cond := 0.0
		if shared == 0 { // (near one-hot: rows with near ties)
			cond = scoreUlps * in.scoreSensitivity(ref)
		}
		tolO = max(ratio*reference.RelL2(base.O, ref.O), 8*0x1p-24, cond)
		tolLSE = max(2*reference.RelL2(base.LSE, ref.LSE), Float32Tol)
		t.Logf("plain fp32: o rel_l2 %.3g, lse %.3g (bound %g× that); %d fp32 ulps of the scores through the softmax: o rel_l2 %.3g",
			reference.RelL2(base.O, ref.O), reference.RelL2(base.LSE, ref.LSE), ratio, scoreUlps, cond)
	} else {
		tol := in.tolerance(t, ref)
		tolO = math.Max(4*math.Pow(2, -24)*maxS*float64(c.Hq)/8, tol.O)
		tolLSE = Float32Tol
	}
	out := in.forward(t, e)
	Check(t, "o", out.o, ref.O, tolO, seed)
	CheckLSE(t, out.lse, ref.LSE, tolLSE, seed)
	g := in.backward(t, e, ref, refLSE(ref))
	for i, name := range []string{"dq", "dk", "dv"} {
		want := [][]float64{ref.DQ, ref.DK, ref.DV}[i]
		s := reference.Compare(g[i], want)
		if s.NaN > 0 || s.Inf > 0 {
			t.Errorf("%s: %d NaN, %d Inf with large scores", name, s.NaN, s.Inf)
		}
		if base != nil { // (only finiteness is required of the gradients here)
			t.Logf("%s: rel_l2 %.3g (plain fp32 %.3g)", name, s.RelL2, reference.RelL2([][]float64{base.DQ, base.DK, base.DV}[i], want))
		}
	}
}

// scoreUlps is how many fp32 units of its terms' magnitude every score
// may be off by at once in the near-one-hot large-score bound
// (scoreSensitivity, a worst case of the signs: the errors measured over
// 300 draws on the CPU backend reach 0.22 of it).
const scoreUlps = 1

// scoreSensitivity is the rel_l2 of O that an error of one fp32 ulp of
// its terms in every score causes, to first order: each score s_ij off by
// 2⁻²⁴·(scale·Σ_d|q_id·k_jd| + |s_ij|) moves O_i by
// Σ_j P_ij·|V_j − O_i|·that (∂O_i/∂s_ij = P_ij·(V_j − O_i)). Rows with a
// near tie between their largest scores are where it is large: a fp32
// computation there is only as good as that, whichever way its products
// are summed, while the plain-fp32 baseline's error swings far below it
// on draws where its own rounding happens to fall right.
func (in *Inputs) scoreSensitivity(ref *Ref) float64 {
	c := in.Case
	p := in.params()
	scale := math.Abs(p.EffectiveScale())
	var dO []float64
	for b := range c.B {
		for h := range c.Hq {
			kh := h / (c.Hq / c.Hkv)
			P := reference.Probabilities(p, in.q64, in.k64, b, h)
			for i := range c.Nq {
				row := make([]float64, c.Dv)
				for j := range c.Nk {
					pij := P.At(i, j)
					if pij == 0 {
						continue
					}
					var terms, s float64
					for d := range c.D {
						x := in.q64[c.qOff(b, i, h)+d] * in.k64[c.kOff(b, j, kh)+d]
						terms += math.Abs(x)
						s += x
					}
					ds := 0x1p-24 * (scale*terms + math.Abs(scale*s))
					for d := range c.Dv {
						row[d] += pij * math.Abs(in.v64[c.vOff(b, j, kh)+d]-ref.O[c.oOff(b, i, h)+d]) * ds
					}
				}
				dO = append(dO, row...)
			}
		}
	}
	return norm2(dO) / norm2(ref.O)
}

// nanPropagation: a NaN in one key. Rows that cannot see it must be exact
// and finite; rows that see it must come out NaN, as in the reference.
func nanPropagation(t *testing.T, e *attention.Engine, dt attention.DType) {
	c := Case{B: 1, Hq: 1, Hkv: 1, Nq: 40, Nk: 40, D: 16, Dv: 16, Causal: true, Align: attention.TopLeft}
	seed := Seed(t)
	in := NewInputs(c, dt, seed)
	const bad = 25 // key row with the NaN: rows 0…24 never see it
	set(in.K.Data, in.K.Strides.Offset(0, bad, 0)+3, float32(math.NaN()))
	in.k64 = in.K.Float64s()
	ref := in.Reference(t)
	out := in.forward(t, e)
	var clean []float32
	var cleanRef []float64
	for i := range c.Nq {
		row := out.o[i*c.Dv : (i+1)*c.Dv]
		if i < bad {
			clean = append(clean, row...)
			cleanRef = append(cleanRef, ref.O[i*c.Dv:(i+1)*c.Dv]...)
			continue
		}
		for d, x := range row {
			if !math.IsNaN(float64(x)) {
				t.Errorf("o[%d][%d] = %v: row sees the NaN key, want NaN", i, d, x)
				return
			}
		}
	}
	tol := Float32Tol
	switch dt {
	case attention.Float16:
		tol = 4e-3
	case attention.BFloat16:
		tol = 8 * 4e-3 // bf16's ulp is 8× fp16's
	}
	Check(t, "o rows before the NaN key", clean, cleanRef, tol, seed)
}

// nearMax: fp16 values of V near the fp16 maximum (65504) and large Q, K:
// the output is a convex combination of V rows, so it stays finite.
func nearMax(t *testing.T, e *attention.Engine) {
	c := Case{B: 1, Hq: 1, Hkv: 1, Nq: 33, Nk: 47, D: 32, Dv: 32}
	seed := Seed(t)
	in := NewInputs(c, attention.Float16, seed)
	in.v64 = scaleInputs(in.V, 60000.0/4.5) // |N(0,1)| < 4.5 for these sizes, all but surely
	in.q64 = scaleInputs(in.Q, 20)
	ref := in.Reference(t)
	out := in.forward(t, e)
	Check(t, "o", out.o, ref.O, math.Max(2*f16Floor, in.tolerance(t, ref).O), seed)
}

// bf16Range: bf16 values far outside fp16's range (fp16 overflows past 65504
// and flushes below 6e-8 to zero), inside bf16's (fp32's). Forward: V ≈ 1e30,
// Q ≈ 1e-20, K ≈ 1e20 (scores of ordinary size); O ≈ 1e30 must match the
// reference. Backward: Q ≈ 1e-20, K ≈ 1e20, V ordinary, so dQ ≈ 1e20 and
// dK ≈ 1e-20. Any pass through fp16 turns these into Inf, NaN or 0.
func bf16Range(t *testing.T, e *attention.Engine) {
	c := Case{B: 1, Hq: 2, Hkv: 1, Nq: 37, Nk: 45, D: 32, Dv: 32, Causal: true, Align: attention.BottomRight}
	seed := Seed(t)
	in := NewInputs(c, attention.BFloat16, seed)
	in.q64 = scaleInputs(in.Q, 1e-20)
	in.k64 = scaleInputs(in.K, 1e20)
	ref := in.Reference(t)
	tol := in.tolerance(t, ref)
	g := in.backward(t, e, ref, refLSE(ref))
	Check(t, "dq", g[0], ref.DQ, tol.DQ, seed)
	Check(t, "dk", g[1], ref.DK, tol.DK, seed)
	Check(t, "dv", g[2], ref.DV, tol.DV, seed)

	in.v64 = scaleInputs(in.V, 1e30)
	ref = in.Reference(t)
	tol = in.tolerance(t, ref)
	out := in.forward(t, e)
	Check(t, "o", out.o, ref.O, tol.O, seed)
	CheckLSE(t, out.lse, ref.LSE, tol.LSE, seed)
	in.checkOutsideUntouched(t)
}
