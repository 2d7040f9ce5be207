package attentiontest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/reference"
	"github.com/x448/float16"
)

// sentinel fills the elements of an output buffer that lie outside the
// output's view; they must survive every call unchanged (exact in fp16 and
// bf16).
const sentinel = 7776

// Inputs are one case's operands, drawn from a seeded normal distribution
// and stored in the case's dtype and layout, plus the float64 copies of
// exactly the stored values that the reference uses.
type Inputs struct {
	Case  Case
	DType attention.DType

	Q, K, V, DO       attention.Tensor
	q64, k64, v64, dO []float64

	// outputs: views into buffers that may be larger than the view.
	o, dq, dk, dv attention.Tensor
	lse           []float32

	// The bias (Case.Bias), its float64 copy (reference.Bias's order)
	// and the dBias output.
	bias, dbias attention.Tensor
	bias64      []float64
}

// NewInputs draws a case's inputs.
func NewInputs(c Case, dt attention.DType, seed uint64) *Inputs {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	in := &Inputs{Case: c, DType: dt}
	qs := attention.Shape{B: c.B, S: c.Nq, H: c.Hq, D: c.D}
	ks := attention.Shape{B: c.B, S: c.Nk, H: c.Hkv, D: c.D}
	vs := attention.Shape{B: c.B, S: c.Nk, H: c.Hkv, D: c.Dv}
	os := attention.Shape{B: c.B, S: c.Nq, H: c.Hq, D: c.Dv}
	if c.Packed {
		// One [B, N, 3, H, D] buffer holds Q, K and V.
		buf := alloc(dt, c.B*c.Nq*3*c.Hq*c.D)
		st := attention.Strides{Batch: c.Nq * 3 * c.Hq * c.D, Seq: 3 * c.Hq * c.D, Head: c.D}
		in.Q = attention.Tensor{Shape: qs, Strides: st, Data: buf}
		in.K = attention.Tensor{Shape: ks, Strides: st, Data: offset(buf, c.Hq*c.D)}
		in.V = attention.Tensor{Shape: vs, Strides: st, Data: offset(buf, 2*c.Hq*c.D)}
	} else {
		in.Q = attention.Tensor{Shape: qs, Strides: attention.Contiguous(qs, c.Layout), Data: alloc(dt, qs.Len())}
		in.K = attention.Tensor{Shape: ks, Strides: attention.Contiguous(ks, c.Layout), Data: alloc(dt, ks.Len())}
		in.V = attention.Tensor{Shape: vs, Strides: attention.Contiguous(vs, c.Layout), Data: alloc(dt, vs.Len())}
	}
	in.DO = attention.Tensor{Shape: os, Strides: attention.Contiguous(os, c.Layout), Data: alloc(dt, os.Len())}
	for _, t := range []attention.Tensor{in.Q, in.K, in.V, in.DO} {
		fillRandom(t, rng)
	}
	in.q64, in.k64, in.v64, in.dO = in.Q.Float64s(), in.K.Float64s(), in.V.Float64s(), in.DO.Float64s()
	in.o, in.dq, in.dk, in.dv = in.output(os), in.output(qs), in.output(ks), in.output(vs)
	in.lse = make([]float32, c.B*c.Hq*c.Nq)
	for _, t := range []attention.Tensor{in.o, in.dq, in.dk, in.dv} {
		poison(t)
	}
	in.newBias(rng)
	return in
}

// output allocates an output tensor: dense in the case's layout, or for
// packed cases a view with 3 elements of padding after every row.
func (in *Inputs) output(s attention.Shape) attention.Tensor {
	if !in.Case.Packed {
		return attention.Tensor{Shape: s, Strides: attention.Contiguous(s, in.Case.Layout), Data: alloc(in.DType, s.Len())}
	}
	row := s.D + 3
	st := attention.Strides{Batch: s.S * s.H * row, Seq: s.H * row, Head: row}
	return attention.Tensor{Shape: s, Strides: st, Data: alloc(in.DType, s.B*s.S*s.H*row)}
}

func alloc(dt attention.DType, n int) any {
	switch dt {
	case attention.Float16:
		return make([]float16.Float16, n)
	case attention.BFloat16:
		return make([]bfloat16.BFloat16, n)
	}
	return make([]float32, n)
}

func offset(buf any, off int) any {
	switch b := buf.(type) {
	case []float32:
		return b[off:]
	case []float16.Float16:
		return b[off:]
	case []bfloat16.BFloat16:
		return b[off:]
	}
	return nil
}

// forEach calls f with the flat index of every element of t's view.
func forEach(t attention.Tensor, f func(i int)) {
	st := t.Strides
	for b := range t.Shape.B {
		for s := range t.Shape.S {
			for h := range t.Shape.H {
				off := st.Offset(b, s, h)
				for d := range t.Shape.D {
					f(off + d)
				}
			}
		}
	}
}

func set(buf any, i int, x float32) {
	switch b := buf.(type) {
	case []float32:
		b[i] = x
	case []float16.Float16:
		b[i] = float16.Fromfloat32(x)
	case []bfloat16.BFloat16:
		b[i] = bfloat16.FromFloat32(x)
	}
}

func fillRandom(t attention.Tensor, rng *rand.Rand) {
	forEach(t, func(i int) { set(t.Data, i, float32(rng.NormFloat64())) })
}

// poison fills the view with NaN and the rest of the buffer with sentinel.
func poison(t attention.Tensor) {
	n := 0
	switch b := t.Data.(type) {
	case []float32:
		n = len(b)
	case []float16.Float16:
		n = len(b)
	case []bfloat16.BFloat16:
		n = len(b)
	}
	for i := range n {
		set(t.Data, i, sentinel)
	}
	forEach(t, func(i int) { set(t.Data, i, float32(math.NaN())) })
}

// checkOutsideUntouched fails when a call wrote outside an output's view.
func (in *Inputs) checkOutsideUntouched(t testing.TB) {
	t.Helper()
	for _, o := range []struct {
		name string
		t    attention.Tensor
	}{{"o", in.o}, {"dq", in.dq}, {"dk", in.dk}, {"dv", in.dv}, {"dbias", in.dbias}} {
		if o.t.Data == nil {
			continue
		}
		inside := map[int]bool{}
		forEach(o.t, func(i int) { inside[i] = true })
		bad := 0
		switch b := o.t.Data.(type) {
		case []float32:
			for i, x := range b {
				if !inside[i] && x != sentinel {
					bad++
				}
			}
		case []float16.Float16:
			for i, x := range b {
				if !inside[i] && x.Float32() != sentinel {
					bad++
				}
			}
		case []bfloat16.BFloat16:
			for i, x := range b {
				if !inside[i] && x.Float32() != sentinel {
					bad++
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d elements outside the output view were overwritten", o.name, bad)
		}
	}
}

type fwdOut struct {
	o   []float32
	lse []float32
}

func (in *Inputs) forward(t testing.TB, e *attention.Engine) fwdOut {
	t.Helper()
	poison(in.o)
	for i := range in.lse {
		in.lse[i] = float32(math.NaN())
	}
	if err := e.ForwardInto(t.Context(), in.Q, in.K, in.V, in.o, in.lse, in.options()); err != nil {
		t.Fatalf("forward: %v", err)
	}
	return fwdOut{o: in.o.Float32s(), lse: append([]float32(nil), in.lse...)}
}

// backward runs the backward with the reference's O (in the case's dtype)
// and the given LSE and returns dense dQ, dK, dV.
func (in *Inputs) backward(t testing.TB, e *attention.Engine, ref *Ref, lse []float32) [3][]float32 {
	t.Helper()
	o := in.output(attention.Shape{B: in.Case.B, S: in.Case.Nq, H: in.Case.Hq, D: in.Case.Dv})
	poison(o)
	dense := attention.Contiguous(o.Shape, attention.BSHD)
	forEachRow(o, func(b, s, h, off int) {
		for d := range o.Shape.D {
			set(o.Data, off+d, float32(ref.O[dense.Offset(b, s, h)+d]))
		}
	})
	for _, g := range []attention.Tensor{in.dq, in.dk, in.dv, in.dbias} {
		if g.Data != nil {
			poison(g)
		}
	}
	if err := e.BackwardInto(t.Context(), in.Q, in.K, in.V, o, lse, in.DO, in.dq, in.dk, in.dv, in.options()); err != nil {
		t.Fatalf("backward: %v", err)
	}
	return [3][]float32{in.dq.Float32s(), in.dk.Float32s(), in.dv.Float32s()}
}

// refLSE is the reference's LSE rounded to fp32, for a backward judged
// apart from the engine's forward.
func refLSE(ref *Ref) []float32 {
	lse := make([]float32, len(ref.LSE))
	for i, x := range ref.LSE {
		lse[i] = float32(x)
	}
	return lse
}

func forEachRow(t attention.Tensor, f func(b, s, h, off int)) {
	for b := range t.Shape.B {
		for s := range t.Shape.S {
			for h := range t.Shape.H {
				f(b, s, h, t.Strides.Offset(b, s, h))
			}
		}
	}
}

// Ref holds the float64 reference results (dense BSHD; LSE [B, Hq, Nq];
// DB, with a bias whose gradient the case asks for, [B, H, S, Nk]).
type Ref struct {
	O, LSE, DQ, DK, DV, DB []float64
}

// Reference computes the float64 results for the stored inputs.
func (in *Inputs) Reference(t testing.TB) *Ref {
	t.Helper()
	p := in.params()
	o, lse, err := reference.Forward(p, in.q64, in.k64, in.v64)
	if err != nil {
		t.Fatalf("reference forward: %v", err)
	}
	dq, dk, dv, err := reference.Backward(p, in.q64, in.k64, in.v64, in.dO)
	if err != nil {
		t.Fatalf("reference backward: %v", err)
	}
	r := &Ref{O: o, LSE: lse, DQ: dq, DK: dk, DV: dv}
	if x := in.Case.Bias; x != nil && x.Grad {
		if r.DB, err = reference.BiasGrad(p, in.q64, in.k64, in.v64, in.dO); err != nil {
			t.Fatalf("reference dbias: %v", err)
		}
	}
	return r
}
