package attention

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/flashvk/flashvk/internal/spec"
)

// checkOperand validates one tensor against its expected dtype and returns
// its resolved strides. name is the argument's name in errors.
func checkOperand(name string, t Tensor, dt DType, output bool) (Strides, error) {
	return checkTensor(name, t, dt, output, MaxHeadDim)
}

// namedShape is an operand's shape and its argument's name.
type namedShape struct {
	name string
	s    Shape
}

// checkShapes checks operand shapes given without their data (Plan,
// PlanKVCache, Flops) as checkOperand checks a tensor's: dimensions ≥ 1,
// at most maxElements elements, the head dim at most MaxHeadDim.
func checkShapes(ss ...namedShape) error {
	for _, a := range ss {
		if err := checkShape(a.name, a.s); err != nil {
			return err
		}
		if a.s.D > MaxHeadDim {
			return fmt.Errorf("attention: %s: head dim %d > %d: %w", a.name, a.s.D, MaxHeadDim, ErrShape)
		}
	}
	return nil
}

// checkTensor is checkOperand with the last dimension bounded by maxD
// (0: unbounded).
func checkTensor(name string, t Tensor, dt DType, output bool, maxD int) (Strides, error) {
	if t.Data == nil {
		return Strides{}, fmt.Errorf("attention: %s: no data: %w", name, ErrLength)
	}
	got := t.DType()
	if got == 0 {
		return Strides{}, fmt.Errorf("attention: %s: data of type %T (want []float32, []float16.Float16 or []bfloat16.BFloat16): %w", name, t.Data, ErrDType)
	}
	if dt != 0 && got != dt {
		return Strides{}, fmt.Errorf("attention: %s: %v, want %v (one dtype: q's for the operands and their gradients, the bias's for dBias, the device tensor's for a transfer): %w", name, got, dt, ErrDType)
	}
	if err := checkShape(name, t.Shape); err != nil {
		return Strides{}, err
	}
	if maxD > 0 && t.Shape.D > maxD {
		return Strides{}, fmt.Errorf("attention: %s: head dim %d > %d: %w", name, t.Shape.D, maxD, ErrShape)
	}
	st := t.strides()
	if st.Batch < 0 || st.Seq < 0 || st.Head < 0 {
		return Strides{}, fmt.Errorf("attention: %s: negative strides %+v: %w", name, st, ErrStride)
	}
	span, ok := extent(t.Shape, st)
	if !ok {
		return Strides{}, fmt.Errorf("attention: %s: shape %v with strides %+v overflows: %w", name, t.Shape, st, ErrShape)
	}
	if n := t.dataLen(); n < span {
		return Strides{}, fmt.Errorf("attention: %s: shape %v with strides %+v needs %d elements, slice has %d: %w", name, t.Shape, st, span, n, ErrLength)
	}
	if output && overlapping(t.Shape, st) {
		return Strides{}, fmt.Errorf("attention: %s: strides %+v make output rows of %v overlap: %w", name, st, t.Shape, ErrStride)
	}
	return st, nil
}

// extent is 1 + the largest element offset the tensor addresses, with
// overflow detection.
func extent(s Shape, st Strides) (int, bool) {
	total := uint64(s.D)
	for _, p := range [][2]int{{s.B, st.Batch}, {s.S, st.Seq}, {s.H, st.Head}} {
		hi, lo := bits.Mul64(uint64(p[0]-1), uint64(p[1]))
		if hi != 0 || lo > math.MaxInt64/4 {
			return 0, false
		}
		total += lo
		if total > math.MaxInt64/4 {
			return 0, false
		}
	}
	return int(total), true
}

// overlapping reports whether two distinct elements share an offset. Rows
// must nest: sorted by stride, each dimension's stride covers the span of
// the ones inside it (dimensions of extent 1 do not count).
func overlapping(s Shape, st Strides) bool {
	dims := [][2]int{{s.B, st.Batch}, {s.S, st.Seq}, {s.H, st.Head}}
	slices.SortFunc(dims, func(a, b [2]int) int { return a[1] - b[1] })
	span := s.D
	for _, d := range dims {
		if d[0] == 1 {
			continue
		}
		if d[1] < span {
			return true
		}
		span = d[1]*(d[0]-1) + span
	}
	return false
}

// problem validates q, k, v (and o and lse when non-nil) and builds the
// Problem. o may be the zero Tensor (forward allocating its own output).
func problem(q, k, v, o Tensor, lse []float32, opt Options, haveOut bool) (*spec.Problem, error) {
	dt := q.DType()
	qs, err := checkOperand("q", q, 0, false)
	if err != nil {
		return nil, err
	}
	ks, err := checkOperand("k", k, dt, false)
	if err != nil {
		return nil, err
	}
	vs, err := checkOperand("v", v, dt, false)
	if err != nil {
		return nil, err
	}
	p, err := newProblem(q.Shape, k.Shape, v.Shape, qs, ks, vs, opt)
	if err != nil {
		return nil, err
	}
	bias, _, err := hostBias(opt, false)
	if err != nil {
		return nil, err
	}
	if err := attachBias(p, dt, bias, nil); err != nil {
		return nil, err
	}
	if !haveOut {
		return p, nil
	}
	if p.O, err = checkLike("o", o, outShape(p), dt, true); err != nil {
		return nil, err
	}
	if want := p.LSELen(); len(lse) != want {
		return nil, fmt.Errorf("attention: lse: length %d, want %s = %d: %w", len(lse), lseLenName(p), want, ErrLength)
	}
	return p, nil
}

// checkLike validates a tensor that must have exactly the given shape.
func checkLike(name string, t Tensor, want Shape, dt DType, output bool) (Strides, error) {
	if t.Shape != want {
		return Strides{}, fmt.Errorf("attention: %s: shape %v, want %v: %w", name, t.Shape, want, ErrShape)
	}
	// want bounds the shape (no head-dim limit here: a device bias's last
	// dimension is its key count).
	return checkTensor(name, t, dt, output, 0)
}

// outShape is O's shape: [B, Nq, Hq, Dv], or packed [1, Tq, Hq, Dv].
func outShape(p *spec.Problem) Shape {
	if p.Varlen() {
		return Shape{B: 1, S: p.TotalQ(), H: p.Hq, D: p.Dv}
	}
	return Shape{B: p.B, S: p.Nq, H: p.Hq, D: p.Dv}
}

// lseShape is the LSE's shape as a DeviceTensor: LSEShape(B, Hq, Nq), or
// packed LSEShape(1, Hq, Tq).
func lseShape(p *spec.Problem) Shape {
	if p.Varlen() {
		return LSEShape(1, p.Hq, p.TotalQ())
	}
	return LSEShape(p.B, p.Hq, p.Nq)
}

// lseLenName names the LSE's length in errors.
func lseLenName(p *spec.Problem) string {
	if p.Varlen() {
		return "Hq·Tq"
	}
	return "B·Hq·Nq"
}

// layoutOf returns BHSD when t is dense BHSD, else BSHD; outputs are
// allocated in the layout of the input they derive from.
func layoutOf(t Tensor) Layout {
	if t.strides() == Contiguous(t.Shape, BHSD) && t.Shape.H > 1 && t.Shape.S > 1 {
		return BHSD
	}
	return BSHD
}

// newProblem checks that q, k and v agree (batch, head dims, key length,
// kv heads dividing query heads), resolves the scale and mask of opt, and
// builds the Problem with the operands' strides (O's is left to the caller).
// Every entry point — host tensors, device tensors, launch queries — goes
// through it.
func newProblem(q, k, v Shape, qs, ks, vs Strides, opt Options) (*spec.Problem, error) {
	switch {
	case k.B != q.B:
		return nil, fmt.Errorf("attention: k: batch %d ≠ q's %d: %w", k.B, q.B, ErrShape)
	case v.B != q.B:
		return nil, fmt.Errorf("attention: v: batch %d ≠ q's %d: %w", v.B, q.B, ErrShape)
	case k.D != q.D:
		return nil, fmt.Errorf("attention: k: head dim %d ≠ q's %d: %w", k.D, q.D, ErrShape)
	case v.S != k.S:
		return nil, fmt.Errorf("attention: v: sequence length %d ≠ k's %d: %w", v.S, k.S, ErrShape)
	case v.H != k.H:
		return nil, fmt.Errorf("attention: v: %d heads ≠ k's %d: %w", v.H, k.H, ErrShape)
	case q.H%k.H != 0:
		return nil, fmt.Errorf("attention: k: %d kv heads do not divide q's %d heads: %w", k.H, q.H, ErrShape)
	}
	scale, mask, err := opt.resolve(q.D)
	if err != nil {
		return nil, err
	}
	b, nq, nk := q.B, q.S, k.S
	if opt.varlen() {
		if q.B != 1 {
			return nil, fmt.Errorf("attention: q: batch %d with cu_seqlens, want 1 (packed [1, Tq, Hq, D]): %w", q.B, ErrShape)
		}
		if b, nq, nk, err = opt.packed(q.S, k.S); err != nil {
			return nil, err
		}
	}
	ext, err := opt.ext(b, q.H, nq, nk)
	if err != nil {
		return nil, err
	}
	return &spec.Problem{
		B: b, Hq: q.H, Hkv: k.H, Nq: nq, Nk: nk, D: q.D, Dv: v.D,
		Scale: scale, Mask: mask, Q: qs, K: ks, V: vs, Ext: ext,
	}, nil
}
