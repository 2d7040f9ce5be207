package attentiontest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
)

// BiasCase is a case's additive bias (Options.Bias): its leading
// dimensions (each 1, broadcast, or the case's B, Nq, Hq), how it is
// stored, what it hides, and whether the backward asks for its gradient.
type BiasCase struct {
	B, S, H int
	// F32 stores it as float32 (else in the case's storage type).
	F32 bool
	// Mask makes it a boolean mask (attention.KeepMask: 0 and −Inf)
	// instead of random values.
	Mask bool
	// Holes is the fraction of elements set to −Inf (hidden keys).
	Holes float64
	// Docs, when > 0, hides every key of another document: rows and keys
	// in blocks of Docs positions (a packed-documents mask), so that whole
	// tiles are hidden and skipped.
	Docs int
	// EmptyRows hides every key of every seventh row (from row 3): such
	// rows are empty (O = 0, LSE = −Inf).
	EmptyRows bool
	// Padded stores its rows with 5 elements of padding (strides).
	Padded bool
	// Grad asks the backward for dBias.
	Grad bool
}

func (x *BiasCase) String() string {
	if x == nil {
		return ""
	}
	s := fmt.Sprintf("_bias%d,%d,%d", x.B, x.H, x.S)
	if x.F32 {
		s += "f32"
	}
	if x.Mask {
		s += "-mask"
	}
	if x.Holes > 0 {
		s += fmt.Sprintf("-holes%g", x.Holes)
	}
	if x.Docs > 0 {
		s += fmt.Sprintf("-docs%d", x.Docs)
	}
	if x.EmptyRows {
		s += "-emptyrows"
	}
	if x.Padded {
		s += "-padded"
	}
	if x.Grad {
		s += "-grad"
	}
	return s
}

// hidden reports whether the case's bias hides key j from row i (Docs,
// EmptyRows).
func (x *BiasCase) hidden(i, j int) bool {
	if x.Docs > 0 && i/x.Docs != j/x.Docs {
		return true
	}
	return x.EmptyRows && i%7 == 3
}

// biasShape is the bias's logical shape: [B, S, H, Nk].
func (c Case) biasShape() attention.Shape {
	return attention.Shape{B: c.Bias.B, S: c.Bias.S, H: c.Bias.H, D: c.Nk}
}

// newBias draws the case's bias (in its dtype, values representable in
// it) into in.bias, its float64 copy into in.bias64 (row-major [B, H, S,
// Nk], as reference.Bias), and allocates the poisoned dBias.
func (in *Inputs) newBias(rng *rand.Rand) {
	c, x := in.Case, in.Case.Bias
	if x == nil {
		return
	}
	s := c.biasShape()
	dt := in.DType
	if x.F32 {
		dt = attention.Float32
	}
	in.bias = in.biasTensor(s, dt)
	st := in.bias.Strides
	in.bias64 = make([]float64, s.Len())
	for b := range s.B {
		for h := range s.H {
			for i := range s.S {
				for j := range s.D {
					v := 0.0
					switch {
					case x.hidden(i, j) || rng.Float64() < x.Holes:
						v = math.Inf(-1)
					case !x.Mask:
						v = rng.NormFloat64()
					}
					set(in.bias.Data, st.Offset(b, i, h)+j, float32(v))
					in.bias64[((b*s.H+h)*s.S+i)*s.D+j] = get(in.bias.Data, st.Offset(b, i, h)+j)
				}
			}
		}
	}
	if x.Mask {
		// The same mask through KeepMask, which must give this bias.
		keep := make([]bool, s.Len())
		for n, v := range in.bias64 {
			keep[n] = !math.IsInf(v, -1)
		}
		m, err := attention.KeepMask(keep, s, attention.BHSD, dt)
		if err != nil {
			panic(err)
		}
		if x.Padded {
			// (a dense KeepMask tensor copied into the padded view)
			dense := attention.Contiguous(s, attention.BHSD)
			forEachRow(in.bias, func(b, i, h, off int) {
				for j := range s.D {
					set(in.bias.Data, off+j, float32(get(m.Data, dense.Offset(b, i, h)+j)))
				}
			})
		} else {
			in.bias = m
		}
	}
	if x.Grad {
		in.dbias = in.biasTensor(s, dt)
		poison(in.dbias)
	}
}

// biasTensor allocates a bias-shaped tensor of dtype dt: dense BHSD, or
// with padded rows.
func (in *Inputs) biasTensor(s attention.Shape, dt attention.DType) attention.Tensor {
	if !in.Case.Bias.Padded {
		return attention.Tensor{Shape: s, Strides: attention.Contiguous(s, attention.BHSD), Data: alloc(dt, s.Len())}
	}
	row := s.D + 5
	st := attention.Strides{Batch: s.H * s.S * row, Head: s.S * row, Seq: row}
	return attention.Tensor{Shape: s, Strides: st, Data: alloc(dt, s.B*s.H*s.S*row)}
}

// refBias is the case's bias as the reference's (nil without one).
func (in *Inputs) refBias() *reference.Bias {
	if in.Case.Bias == nil {
		return nil
	}
	x := in.Case.Bias
	return &reference.Bias{B: x.B, H: x.H, S: x.S, Values: in.bias64}
}

// options are the case's options with its bias (and dBias output).
func (in *Inputs) options() attention.Options {
	o := in.Case.options()
	if x := in.Case.Bias; x != nil {
		o.Bias = &attention.Bias{Tensor: in.bias, Grad: x.Grad, GradTensor: in.dbias}
	}
	return o
}

// params are the case's reference parameters with its bias.
func (in *Inputs) params() reference.Params {
	p := in.Case.params()
	p.Bias = in.refBias()
	return p
}

// dbiasFloats is dBias as a dense [B, H, S, Nk] float32 slice (the
// reference's order).
func (in *Inputs) dbiasFloats() []float32 {
	s := in.dbias.Shape
	out := make([]float32, s.Len())
	forEachRow(in.dbias, func(b, i, h, off int) {
		for j := range s.D {
			out[((b*s.H+h)*s.S+i)*s.D+j] = float32(get(in.dbias.Data, off+j))
		}
	})
	return out
}

// BiasCases is the bias table: a bias broadcast every way (over the
// batch, the heads, the queries: a key-padding mask), stored as float32
// or the storage type, dense or strided, random values or a boolean mask,
// with −Inf holes, hidden documents (whole tiles skipped) and empty rows,
// alone and with causal masks, windows, softcap, ALiBi, dropout, GQA,
// d256 and awkward lengths; most ask for dBias (summed over what the bias
// broadcasts).
func BiasCases() []Case {
	tl, br := attention.TopLeft, attention.BottomRight
	win := func(l, r int) *attention.Window { return &attention.Window{Left: l, Right: r} }
	return []Case{
		{Name: "bias", B: 1, Hq: 1, Hkv: 1, Nq: 1, Nk: 17, D: 8, Dv: 8, Bias: &BiasCase{B: 1, S: 1, H: 1, Grad: true}},
		{Name: "bias", B: 2, Hq: 4, Hkv: 2, Nq: 127, Nk: 129, D: 64, Dv: 64, Bias: &BiasCase{B: 2, S: 127, H: 4, Holes: 0.2, Grad: true}},
		{Name: "bias", B: 2, Hq: 2, Hkv: 1, Nq: 100, Nk: 70, D: 32, Dv: 48, Bias: &BiasCase{B: 1, S: 100, H: 2, F32: true, Grad: true}},
		{Name: "bias", B: 2, Hq: 4, Hkv: 4, Nq: 129, Nk: 129, D: 64, Dv: 64, Causal: true, Align: br,
			Bias: &BiasCase{B: 2, S: 129, H: 1, Holes: 0.1, EmptyRows: true, Grad: true}},
		// One bias row per query of each sequence, broadcast over six query
		// heads (three KV heads): the heads of a query tile run together.
		{Name: "bias-heads", B: 2, Hq: 6, Hkv: 3, Nq: 150, Nk: 90, D: 32, Dv: 32, Causal: true, Align: br,
			Bias: &BiasCase{B: 2, S: 150, H: 1, Holes: 0.1, Grad: true}},
		{Name: "bias-padding", B: 3, Hq: 2, Hkv: 2, Nq: 64, Nk: 100, D: 64, Dv: 64, Bias: &BiasCase{B: 3, S: 1, H: 1, Mask: true, Holes: 0.3}},
		{Name: "bias-padding", B: 2, Hq: 2, Hkv: 1, Nq: 33, Nk: 47, D: 16, Dv: 16, Causal: true, Align: tl,
			Bias: &BiasCase{B: 2, S: 1, H: 1, F32: true, Holes: 0.3, Grad: true}},
		{Name: "bias-docs", B: 1, Hq: 2, Hkv: 2, Nq: 300, Nk: 300, D: 64, Dv: 64, Bias: &BiasCase{B: 1, S: 300, H: 1, Mask: true, Docs: 100, Grad: true}},
		{Name: "bias-docs", B: 2, Hq: 2, Hkv: 1, Nq: 257, Nk: 257, D: 128, Dv: 128, Causal: true, Align: br, Softcap: 5, ALiBi: 1,
			Bias: &BiasCase{B: 1, S: 257, H: 2, Docs: 64, Holes: 0.05, Grad: true}},
		// Hidden runs longer than a summary word (512 keys) and than eight
		// row blocks (128 rows), over two query heads of one KV head.
		{Name: "bias-docs-long", B: 1, Hq: 2, Hkv: 1, Nq: 1100, Nk: 1100, D: 32, Dv: 32,
			Bias: &BiasCase{B: 1, S: 1100, H: 1, Mask: true, Docs: 300, Grad: true}},
		{Name: "bias-window", B: 1, Hq: 2, Hkv: 2, Nq: 129, Nk: 127, D: 48, Dv: 48, Causal: true, Align: tl, Window: win(40, 0),
			Dropout: &attention.Dropout{P: 0.2, Seed: 11, Offset: 3}, Bias: &BiasCase{B: 1, S: 129, H: 2, Holes: 0.1, Grad: true}},
		{Name: "bias-long", B: 1, Hq: 1, Hkv: 1, Nq: 2048, Nk: 300, D: 96, Dv: 96, Causal: true, Align: tl,
			Bias: &BiasCase{B: 1, S: 2048, H: 1, Holes: 0.1, Grad: true}},
		{Name: "bias-d256", B: 1, Hq: 1, Hkv: 1, Nq: 129, Nk: 129, D: 256, Dv: 256, Causal: true, Bias: &BiasCase{B: 1, S: 129, H: 1, F32: true, Grad: true}},
		{Name: "bias-padded", B: 2, Hq: 4, Hkv: 2, Nq: 96, Nk: 80, D: 64, Dv: 64, Layout: attention.BHSD,
			Bias: &BiasCase{B: 2, S: 96, H: 4, Padded: true, Holes: 0.2, Grad: true}},
		{Name: "bias-seqused", B: 3, Hq: 2, Hkv: 1, Nq: 40, Nk: 100, D: 32, Dv: 32, SeqUsedK: []int32{1, 100, 63},
			Bias: &BiasCase{B: 3, S: 40, H: 2, Holes: 0.1, Grad: true}},
		// A sequence with no key beside a key-padding mask (one row
		// broadcast over the queries): its key tiles have no key, and the
		// dK/dV kernels' scan of the bias summary must read nothing.
		{Name: "bias-seqused", B: 2, Hq: 2, Hkv: 1, Nq: 20, Nk: 40, D: 16, Dv: 16, SeqUsedK: []int32{0, 40},
			Bias: &BiasCase{B: 2, S: 1, H: 1, Mask: true, Holes: 0.2, Grad: true}},
	}
}

// RunBias runs the bias table forward and backward on every dtype, then
// the backward of a case whose dBias sums over the batch and the heads n
// times (bitwise-identical gradients and dBias), then a TrainStep on
// DeviceTensors with a bias and dBias against the host calls (the same
// bits).
func RunBias(t *testing.T, e *attention.Engine) {
	t.Run("forward", func(t *testing.T) { RunForwardCases(t, e, BiasCases()) })
	t.Run("backward", func(t *testing.T) { RunBackwardCases(t, e, BiasCases()) })
	c := Case{B: 2, Hq: 4, Hkv: 2, Nq: 150, Nk: 130, D: 64, Dv: 64, Causal: true, Align: attention.BottomRight,
		Bias: &BiasCase{B: 1, S: 150, H: 1, Holes: 0.1, Grad: true}}
	t.Run("deterministic", func(t *testing.T) { runDeterminism(t, e, c, 3) })
	t.Run("device", func(t *testing.T) { runBiasDevice(t, e) })
	for _, dt := range dtypes(e) {
		t.Run("skips-hidden/"+dt.String(), func(t *testing.T) { biasSkipsHidden(t, e, dt) })
	}
}

// biasSkipsHidden checks that the tiles a mask hides are never visited: two
// documents of 256 rows and keys, the second document's K and V all NaN.
// Every tile of every backend (16 to 128 rows or keys, dividing 256) lies
// in one document, so the first document's rows and keys — forward O and
// LSE, backward dQ, dK, dV — must match the reference of the same inputs
// without the NaNs; a kernel that visited a hidden tile would multiply a
// zero probability by NaN.
func biasSkipsHidden(t *testing.T, e *attention.Engine, dt attention.DType) {
	const doc = 256
	c := Case{B: 1, Hq: 2, Hkv: 1, Nq: 2 * doc, Nk: 2 * doc, D: 32, Dv: 32,
		Bias: &BiasCase{B: 1, S: 2 * doc, H: 1, Mask: true, Docs: doc}}
	seed := Seed(t)
	clean := NewInputs(c, dt, seed)
	ref := clean.Reference(t)
	tol := clean.tolerance(t, ref)
	in := NewInputs(c, dt, seed)
	nan := float32(math.NaN())
	for s := doc; s < 2*doc; s++ {
		for h := range c.Hkv {
			for d := range c.D {
				set(in.K.Data, in.K.Strides.Offset(0, s, h)+d, nan)
			}
			for d := range c.Dv {
				set(in.V.Data, in.V.Strides.Offset(0, s, h)+d, nan)
			}
		}
	}
	in.k64, in.v64 = in.K.Float64s(), in.V.Float64s()
	// Dense BSHD with B = 1: the first document is each array's first half.
	out := in.forward(t, e)
	Check(t, "o of the first document", out.o[:doc*c.Hq*c.Dv], ref.O[:doc*c.Hq*c.Dv], tol.O, seed)
	for h := range c.Hq { // LSE is [B, Hq, Nq]
		l := out.lse[h*c.Nq : h*c.Nq+doc]
		if i := slices.IndexFunc(l, func(x float32) bool { return math.IsNaN(float64(x)) }); i >= 0 {
			t.Errorf("lse[head %d][row %d] = NaN: a hidden tile was read (seed %d)", h, i, seed)
		}
	}
	g := in.backward(t, e, ref, refLSE(ref))
	Check(t, "dq of the first document", g[0][:doc*c.Hq*c.D], ref.DQ[:doc*c.Hq*c.D], tol.DQ, seed)
	Check(t, "dk of the first document", g[1][:doc*c.Hkv*c.D], ref.DK[:doc*c.Hkv*c.D], tol.DK, seed)
	Check(t, "dv of the first document", g[2][:doc*c.Hkv*c.Dv], ref.DV[:doc*c.Hkv*c.Dv], tol.DV, seed)
}

// runBiasDevice checks that TrainStep with a bias gives the O, LSE,
// gradients and dBias of ForwardInto followed by BackwardInto, bit for
// bit, for a bias stored as float32 and as the storage type.
func runBiasDevice(t *testing.T, e *attention.Engine) {
	for _, dt := range dtypes(e) {
		for _, f32 := range []bool{false, true} {
			c := Case{B: 2, Hq: 4, Hkv: 2, Nq: 45, Nk: 61, D: 32, Dv: 16, Causal: true, Align: attention.BottomRight,
				Bias: &BiasCase{B: 2, S: 1, H: 4, F32: f32, Holes: 0.2, Grad: true}}
			t.Run(dt.String()+"/"+c.String(), func(t *testing.T) {
				in := NewInputs(c, dt, Seed(t))
				ctx := t.Context()
				opt := in.options()
				out, err := e.Forward(ctx, in.Q, in.K, in.V, opt)
				if err != nil {
					t.Fatal(err)
				}
				g, err := e.Backward(ctx, in.Q, in.K, in.V, out.O, out.LSE, in.DO, opt)
				if err != nil {
					t.Fatal(err)
				}
				dev := func(h attention.Tensor, upload bool) *attention.DeviceTensor {
					d, err := e.NewDeviceTensor(h.DType(), h.Shape, attention.BHSD)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { d.Close() })
					if upload {
						if err := d.Upload(ctx, h); err != nil {
							t.Fatal(err)
						}
					}
					return d
				}
				q, k, v, do := dev(in.Q, true), dev(in.K, true), dev(in.V, true), dev(in.DO, true)
				o, dq, dk, dv := dev(out.O, false), dev(in.Q, false), dev(in.K, false), dev(in.V, false)
				lse := dev(attention.FromFloat32(out.LSE, attention.LSEShape(c.B, c.Hq, c.Nq), attention.BHSD), false)
				bias, dbias := dev(in.bias, true), dev(in.bias, false)
				dopt := in.Case.options()
				dopt.Bias = &attention.Bias{Device: bias, Grad: true, GradDevice: dbias}
				if err := e.TrainStep(ctx, q, k, v, do, o, lse, dq, dk, dv, dopt); err != nil {
					t.Fatal(err)
				}
				lseHost := attention.FromFloat32(out.LSE, attention.LSEShape(c.B, c.Hq, c.Nq), attention.BHSD)
				for _, p := range []struct {
					name string
					d    *attention.DeviceTensor
					h    attention.Tensor
				}{{"o", o, out.O}, {"lse", lse, lseHost}, {"dq", dq, g.DQ}, {"dk", dk, g.DK}, {"dv", dv, g.DV}, {"dbias", dbias, g.DBias}} {
					h, _ := attention.NewTensor(p.d.DType(), p.d.Shape(), attention.BHSD)
					if err := p.d.Download(ctx, h); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(bitsOf(h.Float32s()), bitsOf(p.h.Float32s())) {
						t.Errorf("%s: TrainStep differs from the host calls", p.name)
					}
				}
			})
		}
	}
}
