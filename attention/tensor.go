package attention

import (
	"fmt"
	"math"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

// DType is the element type of a tensor in memory: Float32, Float16 or
// BFloat16. Arithmetic is always float32 (with float32 accumulation),
// whatever the storage type; LSE is always float32. Its methods: String
// ("float32", "float16", "bfloat16", as PyTorch and numpy name them), Short
// ("f32", "f16", "bf16") and Size (bytes per element).
type DType = spec.DType

const (
	// Float32 stores IEEE binary32 ([]float32).
	Float32 = spec.Float32
	// Float16 stores IEEE binary16 ([]float16.Float16 from github.com/x448/float16).
	Float16 = spec.Float16
	// BFloat16 stores bfloat16 ([]bfloat16.BFloat16 from
	// github.com/flashvk/flashvk/bfloat16): float32's range with 8 bits of
	// precision. Loads widen exactly to float32; stores round to nearest even.
	BFloat16 = spec.BFloat16
)

// ParseDType accepts "float32"/"f32"/"fp32", "float16"/"f16"/"fp16"/"half"
// and "bfloat16"/"bf16".
func ParseDType(s string) (DType, error) {
	switch s {
	case "float32", "f32", "fp32":
		return Float32, nil
	case "float16", "f16", "fp16", "half":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	}
	return 0, fmt.Errorf("attention: dtype %q: %w", s, ErrDType)
}

// Layout names the two contiguous memory orders of a 4-D operand.
type Layout uint8

const (
	// BSHD stores [batch, sequence, head, feature] (FlashAttention's order).
	BSHD Layout = iota
	// BHSD stores [batch, head, sequence, feature] (PyTorch SDPA's order).
	BHSD
)

// String names the layout ("Layout(N)" for a value that is none).
func (l Layout) String() string {
	switch l {
	case BSHD:
		return "bshd"
	case BHSD:
		return "bhsd"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// checkLayout refuses a Layout that is neither BSHD nor BHSD (ErrOption).
func checkLayout(name string, l Layout) error {
	if l != BSHD && l != BHSD {
		return fmt.Errorf("attention: %s: layout %v (want BSHD or BHSD): %w", name, l, ErrOption)
	}
	return nil
}

// ParseLayout accepts "bshd" and "bhsd".
func ParseLayout(s string) (Layout, error) {
	switch s {
	case "bshd", "BSHD":
		return BSHD, nil
	case "bhsd", "BHSD":
		return BHSD, nil
	}
	return 0, fmt.Errorf("attention: layout %q: %w", s, ErrOption)
}

// Shape is the logical shape of an operand, whatever the memory order:
// fields B (batch), S (sequence length), H (heads) and D (feature, i.e.
// head, dimension); Len is B·S·H·D.
type Shape = spec.Shape

// Strides are element strides of the batch, sequence and head dimensions;
// the feature dimension is always contiguous.
type Strides = spec.Strides

// Contiguous returns the strides of shape s stored densely in layout l.
func Contiguous(s Shape, l Layout) Strides {
	if l == BHSD {
		return spec.BHSD(s.S, s.H, s.D)
	}
	return spec.BSHD(s.S, s.H, s.D)
}

// Tensor is a host-memory operand. Data is []float32 (Float32),
// []float16.Float16 (Float16) or []bfloat16.BFloat16 (BFloat16). A zero Strides means contiguous BSHD; set
// Strides to address BHSD data or a view (e.g. Q inside a packed QKV
// buffer) without copying.
type Tensor struct {
	Shape   Shape
	Strides Strides
	Data    any
}

// FromFloat32 wraps data as a contiguous tensor of the given shape and layout.
func FromFloat32(data []float32, s Shape, l Layout) Tensor {
	return Tensor{Shape: s, Strides: Contiguous(s, l), Data: data}
}

// FromFloat16 wraps data as a contiguous tensor of the given shape and layout.
func FromFloat16(data []float16.Float16, s Shape, l Layout) Tensor {
	return Tensor{Shape: s, Strides: Contiguous(s, l), Data: data}
}

// FromBFloat16 wraps data as a contiguous tensor of the given shape and layout.
func FromBFloat16(data []bfloat16.BFloat16, s Shape, l Layout) Tensor {
	return Tensor{Shape: s, Strides: Contiguous(s, l), Data: data}
}

// NewTensor allocates a zeroed contiguous tensor.
func NewTensor(dt DType, s Shape, l Layout) (Tensor, error) {
	if err := checkShape("tensor", s); err != nil {
		return Tensor{}, err
	}
	if err := checkLayout("tensor", l); err != nil {
		return Tensor{}, err
	}
	switch dt {
	case Float32:
		return FromFloat32(make([]float32, s.Len()), s, l), nil
	case Float16:
		return FromFloat16(make([]float16.Float16, s.Len()), s, l), nil
	case BFloat16:
		return FromBFloat16(make([]bfloat16.BFloat16, s.Len()), s, l), nil
	}
	return Tensor{}, fmt.Errorf("attention: tensor: %v: %w", dt, ErrDType)
}

// DType reports the element type of Data (0 when Data is of no supported type).
func (t Tensor) DType() DType {
	switch t.Data.(type) {
	case []float32:
		return Float32
	case []float16.Float16:
		return Float16
	case []bfloat16.BFloat16:
		return BFloat16
	}
	return 0
}

// dataLen is len(Data) for a supported type, else -1.
func (t Tensor) dataLen() int {
	switch d := t.Data.(type) {
	case []float32:
		return len(d)
	case []float16.Float16:
		return len(d)
	case []bfloat16.BFloat16:
		return len(d)
	}
	return -1
}

// strides returns t's strides, resolving the zero value to contiguous BSHD.
func (t Tensor) strides() Strides {
	if t.Strides == (Strides{}) {
		return Contiguous(t.Shape, BSHD)
	}
	return t.Strides
}

// Float64s returns the tensor's elements as a contiguous BSHD float64
// slice (a copy, exact): the input the float64 reference takes.
func (t Tensor) Float64s() []float64 {
	f := t.Float32s()
	out := make([]float64, len(f))
	for i, x := range f {
		out[i] = float64(x)
	}
	return out
}

// Float32s returns the tensor's elements as a contiguous BSHD float32 slice
// (a copy; fp16 and bf16 are converted exactly). Like indexing a slice, it
// panics on a tensor whose Data does not hold every element its Shape and
// Strides address — the tensors the package returns always do, and every
// call refuses such a tensor with an error before reading it.
func (t Tensor) Float32s() []float32 {
	out := make([]float32, t.Shape.Len())
	st := t.strides()
	dense := spec.BSHD(t.Shape.S, t.Shape.H, t.Shape.D)
	forEachRow(t.Shape, func(b, s, h int) {
		src, dst := st.Offset(b, s, h), dense.Offset(b, s, h)
		switch d := t.Data.(type) {
		case []float32:
			copy(out[dst:dst+t.Shape.D], d[src:src+t.Shape.D])
		case []float16.Float16:
			for i := range t.Shape.D {
				out[dst+i] = d[src+i].Float32()
			}
		case []bfloat16.BFloat16:
			for i := range t.Shape.D {
				out[dst+i] = d[src+i].Float32()
			}
		}
	})
	return out
}

// forEachRow calls f for every (batch, seq, head) row of shape s in order.
func forEachRow(s Shape, f func(b, seq, h int)) {
	for b := range s.B {
		for i := range s.S {
			for h := range s.H {
				f(b, i, h)
			}
		}
	}
}

// maxElements bounds an operand's B·S·H·D: far beyond any memory, and
// small enough that its bytes (8 per element at most) cannot overflow an
// int or pass what Go can allocate.
const maxElements = min(1<<40, math.MaxInt>>3)

// checkShape refuses a shape with a dimension below 1, or more elements
// than maxElements; name is the argument's name in the error.
func checkShape(name string, s Shape) error {
	if s.B < 1 || s.S < 1 || s.H < 1 || s.D < 1 {
		return fmt.Errorf("attention: %s: shape %v has a dimension < 1: %w", name, s, ErrShape)
	}
	n := 1
	for _, x := range []int{s.B, s.S, s.H, s.D} {
		if x > maxElements/n {
			return fmt.Errorf("attention: %s: shape %v has more than %d elements: %w", name, s, maxElements, ErrShape)
		}
		n *= x
	}
	return nil
}

// zerosLike allocates a dense BSHD tensor of t's shape and dtype (t valid).
func zerosLike(t Tensor) Tensor {
	z, _ := NewTensor(t.DType(), t.Shape, BSHD)
	return z
}

// densify returns a dense BSHD copy of t in t's dtype.
func densify(t Tensor) Tensor {
	d := zerosLike(t)
	scatter(d, t)
	return d
}

// scatter copies src's elements into dst row by row; both tensors have the
// same shape and dtype and any valid strides.
func scatter(dst, src Tensor) {
	ds, ss, n := dst.strides(), src.strides(), src.Shape.D
	forEachRow(src.Shape, func(b, s, h int) {
		copyRow(dst.Data, src.Data, ds.Offset(b, s, h), ss.Offset(b, s, h), n)
	})
}

// copyRow copies n elements from src[j:] to dst[i:] (same element type).
func copyRow(dst, src any, i, j, n int) {
	switch d := dst.(type) {
	case []float32:
		copy(d[i:i+n], src.([]float32)[j:j+n])
	case []float16.Float16:
		copy(d[i:i+n], src.([]float16.Float16)[j:j+n])
	case []bfloat16.BFloat16:
		copy(d[i:i+n], src.([]bfloat16.BFloat16)[j:j+n])
	}
}
