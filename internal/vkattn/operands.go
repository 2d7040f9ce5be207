//go:build cgo

package vkattn

import (
	"context"
	"fmt"

	"github.com/flashvk/flashvk/internal/spec"
)

// operandSpec is the name, shape, strides and (for LSE) dtype of one
// operand of a problem.
type operandSpec struct {
	name  string
	shape spec.Shape
	st    spec.Strides
	dt    spec.DType // 0: the problem's storage type
}

// opSpec is operand op of p: Q, K, V and O (and their gradients, which
// share their strides), LSE (contiguous float32 [B, Hq, Nq]), the bias
// and dBias (spec.Bias: [B or 1, Nq or 1, Hq or 1, Nk], 1 where a stride
// of 0 broadcasts, in the bias's dtype).
func opSpec(p *spec.Problem, op Operand) operandSpec {
	s := operandSpec{name: op.String()}
	if op == OpBias || op == OpDBias {
		return biasSpec(p, op)
	}
	if kv := p.KV; kv != nil {
		switch op {
		case OpK:
			s.shape, s.st = spec.Shape{B: kv.Pages, S: kv.PageSize, H: p.Hkv, D: p.D}, p.K
			return s
		case OpV:
			s.shape, s.st = spec.Shape{B: kv.Pages, S: kv.PageSize, H: p.Hkv, D: p.Dv}, p.V
			return s
		case OpNewK:
			s.shape, s.st = spec.Shape{B: p.B, S: kv.New, H: p.Hkv, D: p.D}, kv.NewK
			return s
		case OpNewV:
			s.shape, s.st = spec.Shape{B: p.B, S: kv.New, H: p.Hkv, D: p.Dv}, kv.NewV
			return s
		}
	}
	// Packed sequences are one batch of Tq query and Tk key rows.
	nb, nq, nk := p.B, p.Nq, p.Nk
	if p.Varlen() {
		nb, nq, nk = 1, p.TotalQ(), p.TotalK()
	}
	switch op {
	case OpQ, OpDQ:
		s.shape, s.st = spec.Shape{B: nb, S: nq, H: p.Hq, D: p.D}, p.Q
	case OpK, OpDK:
		s.shape, s.st = spec.Shape{B: nb, S: nk, H: p.Hkv, D: p.D}, p.K
	case OpV, OpDV:
		s.shape, s.st = spec.Shape{B: nb, S: nk, H: p.Hkv, D: p.Dv}, p.V
	case OpO, OpDO:
		s.shape, s.st = spec.Shape{B: nb, S: nq, H: p.Hq, D: p.Dv}, p.O
	case OpLSE:
		s.shape, s.st, s.dt = LSEShape(p), LSEStrides(p), spec.Float32
	}
	return s
}

// passOperands lists the inputs and outputs of a submission of p's
// forward, backward, or both (a training step, whose backward reads the
// O and LSE its forward writes): tensorOperands', and p's bias (an
// input) and dBias (a backward's output) where p has them.
func passOperands(p *spec.Problem, fwd, bwd bool) (in, out []Operand) {
	in, out = tensorOperands(fwd, bwd)
	if x := p.Ext; x != nil && x.Bias != nil {
		in = append(in, OpBias)
		if bwd && x.Bias.Grad {
			out = append(out, OpDBias)
		}
	}
	return in, out
}

// tensorOperands lists the attention operands (Q, K, V, O, LSE and their
// gradients) of a submission of the forward, the backward or both.
func tensorOperands(fwd, bwd bool) (in, out []Operand) {
	switch {
	case fwd && bwd:
		return []Operand{OpQ, OpK, OpV, OpDO}, []Operand{OpO, OpLSE, OpDQ, OpDK, OpDV}
	case bwd:
		return []Operand{OpQ, OpK, OpV, OpO, OpLSE, OpDO}, []Operand{OpDQ, OpDK, OpDV}
	}
	return []Operand{OpQ, OpK, OpV}, []Operand{OpO, OpLSE}
}

// Operands are the resident tensors of a call, by operand (the inputs and
// outputs of its passes; nil for the rest).
type Operands [numOperands]*Tensor

// bindings are the call arguments of a submission of p's passes.
func (s *Operands) bindings(p *spec.Problem, fwd, bwd bool) []binding {
	in, out := passOperands(p, fwd, bwd)
	var args []binding
	for _, op := range in {
		args = append(args, binding{op, s[op], false})
	}
	for _, op := range out {
		args = append(args, binding{op, s[op], true})
	}
	return args
}

// bufs are the tensors' buffers by operand (nil for tensors not given).
func (s *Operands) bufs() operandBufs {
	var bufs operandBufs
	for op, t := range s {
		if t != nil {
			bufs[op] = t.buf
		}
	}
	return bufs
}

// tensorSet allocates the operand tensors of a problem and frees them
// together.
type tensorSet struct {
	b   *Backend
	p   *spec.Problem
	dt  spec.DType
	all []*Tensor
}

// alloc allocates operand op of the problem (contents undefined).
func (s *tensorSet) alloc(op Operand) (*Tensor, error) {
	os := opSpec(s.p, op)
	dt := s.dt
	if os.dt != 0 {
		dt = os.dt
	}
	t, err := s.b.NewTensor(dt, os.shape, os.st)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", os.name, err)
	}
	s.all = append(s.all, t)
	return t, nil
}

// free closes every tensor of the set.
func (s *tensorSet) free() {
	for _, t := range s.all {
		t.Close()
	}
	s.all = nil
}

// uploadOp fills t from data (which must cover its view).
func uploadOp[T Elem](ctx context.Context, t *Tensor, data []T) error {
	if int64(len(data)) < t.elems {
		return fmt.Errorf("%w: slice of %d elements, the view needs %d", ErrInvalid, len(data), t.elems)
	}
	return Upload(ctx, t, data[:t.elems])
}

// uploadBias is uploadOp of a bias slice: []float32 or []T.
func uploadBias[T Elem](ctx context.Context, t *Tensor, data any) error {
	switch d := data.(type) {
	case []float32:
		if t.dt == spec.Float32 {
			return uploadOp(ctx, t, d)
		}
	case []T:
		if t.dt == dtypeOf[T]() {
			return uploadOp(ctx, t, d)
		}
	}
	return fmt.Errorf("%w: bias: %T for a %v tensor", ErrInvalid, data, t.dt)
}

// biasSpec is opSpec of the bias (OpBias) or dBias (OpDBias) of p: its
// shape keeps a dimension where its stride is not 0.
func biasSpec(p *spec.Problem, op Operand) operandSpec {
	s := operandSpec{name: op.String()}
	if p.Ext == nil || p.Ext.Bias == nil {
		return s
	}
	x := p.Ext.Bias
	st := spec.Strides{Batch: x.Batch, Seq: x.Row, Head: x.Head}
	if op == OpDBias {
		st = spec.Strides{Batch: x.GradBatch, Seq: x.GradRow, Head: x.GradHead}
	}
	dim := func(n, stride int) int {
		if stride == 0 {
			return 1
		}
		return n
	}
	s.shape = spec.Shape{B: dim(p.B, st.Batch), S: dim(p.Nq, st.Seq), H: dim(p.Hq, st.Head), D: p.Nk}
	s.st, s.dt = st, x.DType
	return s
}
