package attentiontest

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flashvk/flashvk/attention"
)

// VarlenCase is a batch of variable-length sequences packed without
// padding (Options.CuSeqlensQ and CuSeqlensK): sequence b has LensQ[b]
// queries and LensK[b] keys (either may be 0), and the options apply to
// each sequence on its own (ALiBi per head; SeqUsedK per sequence).
type VarlenCase struct {
	Name           string
	Hq, Hkv, D, Dv int
	LensQ, LensK   []int
	Causal         bool
	Align          attention.Alignment
	Scale          float32
	Window         *attention.Window
	Softcap        float32
	ALiBi          bool
	SeqUsedK       []int32
	Dropout        *attention.Dropout
	Layout         attention.Layout
	// Bias is a bias per sequence ([B, H, S, max Nk] with B the number of
	// sequences, S 1 or (any S > 1) the longest Nq, H 1 or Hq; its B field
	// is not used): each sequence reads its own rows and keys, and every
	// element past them holds NaN, which no kernel may read.
	Bias *BiasCase
}

func (c VarlenCase) String() string {
	s := fmt.Sprintf("%s/Hq%d_Hkv%d_d%d_q%v_k%v", c.Name, c.Hq, c.Hkv, c.D, c.LensQ, c.LensK)
	s += dvMaskSuffix(c.D, c.Dv, c.Causal, c.Align)
	s += optionSuffix(c.Window, c.Softcap, c.alibi(), c.SeqUsedK) + dropSuffix(c.Dropout) + c.Bias.String()
	if c.Layout == attention.BHSD {
		s += "_bhsd"
	}
	return s
}

// alibi is the case's ALiBi as Case.ALiBi: 1 (per head) or 0 (none).
func (c VarlenCase) alibi() int {
	if c.ALiBi {
		return 1
	}
	return 0
}

// seq is sequence b as a one-sequence Case of the conformance table.
func (c VarlenCase) seq(b int) Case {
	s := Case{B: 1, Hq: c.Hq, Hkv: c.Hkv, Nq: c.LensQ[b], Nk: c.LensK[b], D: c.D, Dv: c.Dv,
		Causal: c.Causal, Align: c.Align, Scale: c.Scale, Window: c.Window, Softcap: c.Softcap, ALiBi: c.alibi(),
		Dropout: c.Dropout, dropBatch0: b}
	if c.SeqUsedK != nil {
		s.SeqUsedK = []int32{c.SeqUsedK[b]}
	}
	return s
}

// cu returns the offsets of lens (B+1, from 0).
func cu(lens []int) []int32 {
	out := make([]int32, len(lens)+1)
	for i, n := range lens {
		out[i+1] = out[i] + int32(n)
	}
	return out
}

func (c VarlenCase) options() attention.Options {
	o := c.seq(0).options()
	o.SeqUsedK, o.CuSeqlensQ, o.CuSeqlensK = c.SeqUsedK, cu(c.LensQ), cu(c.LensK)
	return o
}

// VarlenCases is the packed-sequence table: lengths 0, 1, 17, 127, 129
// inside one batch, queries and keys of different lengths (and keys
// without queries and queries without keys), both causal alignments,
// windows, softcap with ALiBi, key counts, dropout, GQA, D ≠ Dv and
// BHSD.
func VarlenCases() []VarlenCase {
	br, tl := attention.BottomRight, attention.TopLeft
	return []VarlenCase{
		{Name: "causal", Hq: 2, Hkv: 1, D: 64, Dv: 64, LensQ: []int{1, 17, 127, 0, 129, 64}, LensK: []int{1, 17, 127, 0, 129, 64}, Causal: true, Align: br},
		{Name: "cross", Hq: 2, Hkv: 2, D: 40, Dv: 40, LensQ: []int{5, 33, 70, 0, 9}, LensK: []int{40, 0, 90, 12, 9}},
		{Name: "cross-causal", Hq: 4, Hkv: 2, D: 32, Dv: 24, LensQ: []int{50, 3, 100}, LensK: []int{20, 77, 100}, Causal: true, Align: br, Window: &attention.Window{Left: 16, Right: 0}},
		{Name: "topleft", Hq: 1, Hkv: 1, D: 48, Dv: 48, LensQ: []int{30, 129, 17}, LensK: []int{60, 100, 17}, Causal: true, Align: tl},
		{Name: "softcap-alibi", Hq: 4, Hkv: 4, D: 64, Dv: 64, LensQ: []int{17, 129, 1}, LensK: []int{17, 129, 1}, Causal: true, Align: br, Softcap: 4, ALiBi: true, Scale: 0.5},
		{Name: "seqused", Hq: 2, Hkv: 1, D: 64, Dv: 64, LensQ: []int{10, 60, 33}, LensK: []int{50, 60, 40}, SeqUsedK: []int32{20, 60, 0}, Window: &attention.Window{Left: 8, Right: 8}, Align: br},
		{Name: "d128", Hq: 4, Hkv: 2, D: 128, Dv: 128, LensQ: []int{100, 257}, LensK: []int{100, 257}, Causal: true, Align: br, Window: &attention.Window{Left: 64, Right: 0}, Layout: attention.BHSD},
		{Name: "dropout", Hq: 2, Hkv: 1, D: 64, Dv: 64, LensQ: []int{17, 0, 129, 40}, LensK: []int{17, 5, 129, 90}, Causal: true, Align: br,
			Dropout: &attention.Dropout{P: 0.3, Seed: 0xfeed_0000_beef, Offset: 4}},
		{Name: "bias", Hq: 2, Hkv: 1, D: 64, Dv: 64, LensQ: []int{17, 0, 129, 40, 1}, LensK: []int{17, 5, 129, 90, 3}, Causal: true, Align: br,
			Bias: &BiasCase{S: 2, H: 2, Holes: 0.2, Grad: true}},
		{Name: "bias-padding", Hq: 4, Hkv: 2, D: 32, Dv: 32, LensQ: []int{33, 70, 9}, LensK: []int{40, 64, 9},
			Bias: &BiasCase{S: 1, H: 1, F32: true, Mask: true, Holes: 0.3, Grad: true}},
	}
}

// RunVarlen checks every packed case, forward and backward, on every
// dtype against the float64 reference of each sequence alone (within the
// suite's tolerance for that sequence): a sequence without keys must give
// O = 0, LSE = −Inf and dQ = 0, one without queries dK = dV = 0. Then the
// backward of the first case twice, bitwise alike.
func RunVarlen(t *testing.T, e *attention.Engine) {
	for _, dt := range dtypes(e) {
		for _, c := range VarlenCases() {
			t.Run(dt.String()+"/"+c.String(), func(t *testing.T) {
				runVarlen(t, e, c, dt, Seed(t))
			})
		}
		t.Run(dt.String()+"/deterministic", func(t *testing.T) {
			c := VarlenCases()[0]
			v := newVarlenInputs(c, dt, Seed(t))
			lse := v.refLSE(t)
			first := v.backward(t, e, lse)
			if again := v.backward(t, e, lse); !slices.Equal(bitsOf(first), bitsOf(again)) {
				t.Fatal("packed backward differs bitwise between two runs")
			}
		})
	}
}

// varlenInputs are a packed case's operands: each sequence's Inputs
// (drawn and checked as a one-sequence case) and the packed tensors.
type varlenInputs struct {
	c          VarlenCase
	dt         attention.DType
	seqs       []*Inputs // nil for an empty sequence
	refs       []*Ref
	cuQ, cuK   []int32
	q, k, v, o attention.Tensor
	dO         attention.Tensor
	// bias and dbias: Bias's packed tensors ([B, H, S, max Nk], BHSD).
	bias, dbias attention.Tensor
}

func newVarlenInputs(c VarlenCase, dt attention.DType, seed uint64) *varlenInputs {
	v := &varlenInputs{c: c, dt: dt, cuQ: cu(c.LensQ), cuK: cu(c.LensK)}
	tq, tk := int(v.cuQ[len(c.LensQ)]), int(v.cuK[len(c.LensK)])
	packed := func(s, h, d int) attention.Tensor {
		sh := attention.Shape{B: 1, S: s, H: h, D: d}
		return attention.Tensor{Shape: sh, Strides: attention.Contiguous(sh, c.Layout), Data: alloc(dt, sh.Len())}
	}
	v.q, v.k, v.v, v.dO = packed(tq, c.Hq, c.D), packed(tk, c.Hkv, c.D), packed(tk, c.Hkv, c.Dv), packed(tq, c.Hq, c.Dv)
	v.o = packed(tq, c.Hq, c.Dv)
	v.newBias()
	for b := range c.LensQ {
		// Draw every sequence's rows (a one-row stand-in for an empty
		// side), pack the rows it has.
		sc := c.seq(b)
		empty := sc.Nq == 0 || sc.Nk == 0
		sc.Nq, sc.Nk = max(sc.Nq, 1), max(sc.Nk, 1)
		if x := c.Bias; x != nil {
			bx := *x
			bx.B = 1
			if x.S > 1 {
				bx.S = sc.Nq // (else 1: one row for every query)
			}
			sc.Bias = &bx
		}
		in := NewInputs(sc, dt, seed+uint64(b))
		nq, nk := c.LensQ[b], c.LensK[b]
		pack(v.q, in.q64, int(v.cuQ[b]), nq, c.Hq, c.D)
		pack(v.dO, in.dO, int(v.cuQ[b]), nq, c.Hq, c.Dv)
		pack(v.k, in.k64, int(v.cuK[b]), nk, c.Hkv, c.D)
		pack(v.v, in.v64, int(v.cuK[b]), nk, c.Hkv, c.Dv)
		v.packBias(b, in)
		if empty {
			v.seqs, v.refs = append(v.seqs, nil), append(v.refs, nil)
			continue
		}
		v.seqs = append(v.seqs, in)
		v.refs = append(v.refs, nil)
	}
	return v
}

// pack copies n rows of a dense [1, n', h, d] float64 array into rows
// row0 … row0+n−1 of the packed tensor t.
func pack(t attention.Tensor, src []float64, row0, n, h, d int) {
	for i := range n {
		for hh := range h {
			off := t.Strides.Offset(0, row0+i, hh)
			for x := range d {
				set(t.Data, off+x, float32(src[(i*h+hh)*d+x]))
			}
		}
	}
}

// unpack returns rows row0 … row0+n−1 of a dense BSHD [1, T, h, d]
// float32 array as a dense [1, n, h, d] slice.
func unpack(all []float32, row0, n, h, d int) []float32 {
	return all[row0*h*d : (row0+n)*h*d]
}

func (v *varlenInputs) ref(t *testing.T, b int) *Ref {
	if v.refs[b] == nil {
		v.refs[b] = v.seqs[b].Reference(t)
	}
	return v.refs[b]
}

func runVarlen(t *testing.T, e *attention.Engine, c VarlenCase, dt attention.DType, seed uint64) {
	v := newVarlenInputs(c, dt, seed)
	tq := int(v.cuQ[len(c.LensQ)])
	poison(v.o)
	lse := make([]float32, c.Hq*tq)
	for i := range lse {
		lse[i] = float32(math.NaN())
	}
	if err := e.ForwardInto(t.Context(), v.q, v.k, v.v, v.o, lse, v.options()); err != nil {
		t.Fatalf("forward: %v", err)
	}
	o := v.o.Float32s()
	for b := range c.LensQ {
		nq := c.LensQ[b]
		q0 := int(v.cuQ[b])
		seqLSE := make([]float32, c.Hq*nq)
		for h := range c.Hq {
			copy(seqLSE[h*nq:(h+1)*nq], lse[h*tq+q0:h*tq+q0+nq])
		}
		gotO := unpack(o, q0, nq, c.Hq, c.Dv)
		if v.seqs[b] == nil {
			checkZeros(t, fmt.Sprintf("sequence %d (no keys): o", b), gotO)
			for i, x := range seqLSE {
				if !math.IsInf(float64(x), -1) {
					t.Errorf("sequence %d (no keys): lse[%d] = %v, want -Inf", b, i, x)
					break
				}
			}
			continue
		}
		ref := v.ref(t, b)
		tol := v.seqs[b].tolerance(t, ref)
		Check(t, fmt.Sprintf("sequence %d: o", b), gotO, ref.O, tol.O, seed)
		CheckLSE(t, seqLSE, ref.LSE, tol.LSE, seed)
	}
	g := v.backward(t, e, lse) // (the forward's own LSE: RunBackward says why)
	tk := int(v.cuK[len(c.LensK)])
	dq, dk, dv := g[:tq*c.Hq*c.D], g[tq*c.Hq*c.D:tq*c.Hq*c.D+tk*c.Hkv*c.D], g[tq*c.Hq*c.D+tk*c.Hkv*c.D:]
	for b := range c.LensQ {
		nq, nk := c.LensQ[b], c.LensK[b]
		gq := unpack(dq, int(v.cuQ[b]), nq, c.Hq, c.D)
		gk, gv := unpack(dk, int(v.cuK[b]), nk, c.Hkv, c.D), unpack(dv, int(v.cuK[b]), nk, c.Hkv, c.Dv)
		if v.seqs[b] == nil {
			checkZeros(t, fmt.Sprintf("sequence %d (empty): dq", b), gq)
			checkZeros(t, fmt.Sprintf("sequence %d (empty): dk", b), gk)
			checkZeros(t, fmt.Sprintf("sequence %d (empty): dv", b), gv)
			continue
		}
		ref := v.ref(t, b)
		tol := v.seqs[b].tolerance(t, ref)
		Check(t, fmt.Sprintf("sequence %d: dq", b), gq, ref.DQ, tol.DQ, seed)
		Check(t, fmt.Sprintf("sequence %d: dk", b), gk, ref.DK, tol.DK, seed)
		Check(t, fmt.Sprintf("sequence %d: dv", b), gv, ref.DV, tol.DV, seed)
	}
	v.checkDBias(t, seed)
}

// backward runs the packed backward on each sequence's reference O (O = 0
// for a sequence without keys) and the packed LSE [Hq, Tq] given, and
// returns dQ, dK and dV, dense BSHD, one after the other.
func (v *varlenInputs) backward(t *testing.T, e *attention.Engine, lse []float32) []float32 {
	t.Helper()
	c := v.c
	tq := int(v.cuQ[len(c.LensQ)])
	oRef := make([]float64, tq*c.Hq*c.Dv)
	for b := range c.LensQ {
		if v.seqs[b] != nil {
			copy(oRef[int(v.cuQ[b])*c.Hq*c.Dv:], v.ref(t, b).O)
		}
	}
	pack(v.o, oRef, 0, tq, c.Hq, c.Dv)
	dq, dk, dv := zerosLike(v.q), zerosLike(v.k), zerosLike(v.v)
	for _, g := range []attention.Tensor{dq, dk, dv, v.dbias} {
		if g.Data != nil {
			poison(g)
		}
	}
	if err := e.BackwardInto(t.Context(), v.q, v.k, v.v, v.o, lse, v.dO, dq, dk, dv, v.options()); err != nil {
		t.Fatalf("backward: %v", err)
	}
	return slices.Concat(dq.Float32s(), dk.Float32s(), dv.Float32s())
}

// refLSE is the packed LSE [Hq, Tq] of each sequence's reference, −Inf
// for a sequence without keys.
func (v *varlenInputs) refLSE(t *testing.T) []float32 {
	c := v.c
	tq := int(v.cuQ[len(c.LensQ)])
	lse := make([]float32, c.Hq*tq)
	for i := range lse {
		lse[i] = float32(math.Inf(-1))
	}
	for b := range c.LensQ {
		if v.seqs[b] == nil {
			continue
		}
		ref, nq, q0 := v.ref(t, b), c.LensQ[b], int(v.cuQ[b])
		for h := range c.Hq {
			for i := range nq {
				lse[h*tq+q0+i] = float32(ref.LSE[h*nq+i])
			}
		}
	}
	return lse
}

// zerosLike allocates a tensor of t's shape, dtype and strides.
func zerosLike(t attention.Tensor) attention.Tensor {
	return attention.Tensor{Shape: t.Shape, Strides: t.Strides, Data: alloc(t.DType(), t.Shape.Len())}
}

// checkZeros fails t unless every element of got is exactly 0.
func checkZeros(t *testing.T, name string, got []float32) {
	t.Helper()
	for i, x := range got {
		if x != 0 {
			t.Errorf("%s[%d] = %v, want 0", name, i, x)
			return
		}
	}
}

// newBias allocates the packed bias, NaN everywhere (the sequences' own
// elements are written by packBias), and the dBias, if the case has them.
func (v *varlenInputs) newBias() {
	c, x := v.c, v.c.Bias
	if x == nil {
		return
	}
	s := attention.Shape{B: len(c.LensQ), S: 1, H: x.H, D: slices.Max(c.LensK)}
	if x.S > 1 {
		s.S = slices.Max(c.LensQ)
	}
	dt := v.dt
	if x.F32 {
		dt = attention.Float32
	}
	v.bias = attention.Tensor{Shape: s, Strides: attention.Contiguous(s, attention.BHSD), Data: alloc(dt, s.Len())}
	forEach(v.bias, func(i int) { set(v.bias.Data, i, float32(math.NaN())) })
	if x.Grad {
		v.dbias = attention.Tensor{Shape: s, Strides: v.bias.Strides, Data: alloc(dt, s.Len())}
	}
}

// packBias copies sequence b's bias (its Inputs', [1, H, S_b, Nk_b]) into
// the packed bias.
func (v *varlenInputs) packBias(b int, in *Inputs) {
	if v.c.Bias == nil {
		return
	}
	s := in.bias.Shape
	for h := range s.H {
		for i := range s.S {
			for j := range v.c.LensK[b] {
				set(v.bias.Data, v.bias.Strides.Offset(b, i, h)+j, float32(in.bias64[(h*s.S+i)*s.D+j]))
			}
		}
	}
}

// options are the case's options with its packed bias.
func (v *varlenInputs) options() attention.Options {
	o := v.c.options()
	if x := v.c.Bias; x != nil {
		o.Bias = &attention.Bias{Tensor: v.bias, Grad: x.Grad, GradTensor: v.dbias}
	}
	return o
}

// checkDBias checks the packed dBias: each sequence's rows and keys
// against its reference (a sequence without keys, or one whose reference
// is a stand-in, 0), every other element 0.
func (v *varlenInputs) checkDBias(t *testing.T, seed uint64) {
	if v.dbias.Data == nil {
		return
	}
	s := v.dbias.Shape
	for b := range s.B {
		nq, nk := min(s.S, v.c.LensQ[b]), v.c.LensK[b]
		var got []float32
		var want []float64
		for h := range s.H {
			for i := range s.S {
				for j := range s.D {
					x := float32(get(v.dbias.Data, v.dbias.Strides.Offset(b, i, h)+j))
					if i >= nq || j >= nk || v.seqs[b] == nil {
						if x != 0 {
							t.Errorf("sequence %d: dbias (h %d, i %d, j %d) = %v outside the sequence's (or of an empty one), want 0", b, h, i, j, x)
							return
						}
						continue
					}
					ref := v.ref(t, b)
					got, want = append(got, x), append(want, ref.DB[(h*nq+i)*nk+j])
				}
			}
		}
		if v.seqs[b] != nil {
			ref := v.ref(t, b)
			Check(t, fmt.Sprintf("sequence %d: dbias", b), got, want, v.seqs[b].tolerance(t, ref).DB, seed)
		}
	}
}
