//go:build cgo

package vkattn

import (
	"context"
	"fmt"
	"math/bits"
	"reflect"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/gate"
	"github.com/flashvk/flashvk/internal/spec"
)

// MaxElements bounds the extent (1 + its largest element offset) of an
// operand read through a binding: those kernels compute offsets in 32
// bits. Addressed kernels (addressing.go) compute them in 64.
const MaxElements = 1 << 32

// Elem are the host element types: float32 for spec.Float32, bfloat16.BFloat16 for
// spec.BFloat16, and other uint16 bit patterns (uint16, float16.Float16, …) for spec.Float16.
type Elem interface{ ~float32 | ~uint16 }

func dtypeOf[T Elem]() spec.DType {
	switch t := reflect.TypeFor[T](); {
	case t.Kind() == reflect.Float32:
		return spec.Float32
	case t == reflect.TypeFor[bfloat16.BFloat16]():
		return spec.BFloat16
	}
	return spec.Float16
}

// LSEShape is the shape of the LSE (and of the backward's D) as a Tensor:
// [B, Nq, Hq, 1], stored as contiguous [B, Hq, Nq] (LSEStrides).
func LSEShape(p *spec.Problem) spec.Shape {
	if p.Varlen() {
		return spec.Shape{B: 1, S: p.TotalQ(), H: p.Hq, D: 1}
	}
	return spec.Shape{B: p.B, S: p.Nq, H: p.Hq, D: 1}
}

// LSEStrides are the strides of contiguous [B, Hq, Nq] for LSEShape.
func LSEStrides(p *spec.Problem) spec.Strides { s := LSEShape(p); return spec.BHSD(s.S, s.H, 1) }

// extent returns 1 + the largest element offset of shape s with strides
// st, and false on negative strides, empty shapes or overflow past 2^62.
func extent(s spec.Shape, st spec.Strides) (int64, bool) {
	if s.B < 1 || s.S < 1 || s.H < 1 || s.D < 1 || st.Batch < 0 || st.Seq < 0 || st.Head < 0 {
		return 0, false
	}
	const lim = 1 << 62
	total := uint64(s.D)
	for _, d := range [3][2]int{{s.B, st.Batch}, {s.S, st.Seq}, {s.H, st.Head}} {
		hi, lo := bits.Mul64(uint64(d[0]-1), uint64(d[1]))
		if hi != 0 || lo > lim {
			return 0, false
		}
		if total += lo; total > lim {
			return 0, false
		}
	}
	return int64(total), true
}

// sameAddressing reports whether strides a and b address the same
// elements for shape s (strides of dimensions of extent 1 do not matter).
func sameAddressing(s spec.Shape, a, b spec.Strides) bool {
	return (s.B <= 1 || a.Batch == b.Batch) && (s.S <= 1 || a.Seq == b.Seq) && (s.H <= 1 || a.Head == b.Head)
}

// dense reports whether a non-overlapping view of shape s with extent ext
// covers every element of [0, ext).
func dense(s spec.Shape, ext int64) bool { return ext == int64(s.Len()) }

// Tensor is a device-resident operand: a storage buffer holding a view of
// shape spec.Shape with element strides Strides (feature stride 1) in spec.DType.
// Methods are safe for concurrent use; Close waits for calls using it.
type Tensor struct {
	b     *Backend
	buf   *device.Buffer
	dt    spec.DType
	shape spec.Shape
	st    spec.Strides
	elems int64
	life  gate.Gate
}

// NewTensor allocates a tensor (contents undefined). Zero strides mean
// contiguous BSHD. It fails with ErrTooLarge when the view is larger than
// one binding reaches (MaxElements, BindingBytes) and the kernels cannot
// read it by device address, or larger than MaxBufferBytes.
func (b *Backend) NewTensor(dt spec.DType, s spec.Shape, st spec.Strides) (*Tensor, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.leave()
	if dt != spec.Float32 && dt != spec.Float16 && dt != spec.BFloat16 {
		return nil, fmt.Errorf("%w: tensor dtype %v", ErrInvalid, dt)
	}
	if err := b.supports(dt); err != nil {
		return nil, err
	}
	if st == (spec.Strides{}) {
		st = spec.BSHD(s.S, s.H, s.D)
	}
	n, err := b.checkExtent("tensor", s, st, dt)
	if err != nil {
		return nil, err
	}
	buf, err := b.dev.NewBuffer((n*int64(dt.Size()) + 3) &^ 3)
	if err != nil {
		return nil, fmt.Errorf("vkattn: tensor %v: %w", s, err)
	}
	return &Tensor{b: b, buf: buf, dt: dt, shape: s, st: st, elems: n}, nil
}

// checkExtent returns the extent of a view, refusing views neither a
// binding nor (where the Backend has them) device addresses reach, and
// views the device cannot hold in one buffer.
func (b *Backend) checkExtent(name string, s spec.Shape, st spec.Strides, dt spec.DType) (int64, error) {
	n, ok := extent(s, st)
	if !ok {
		return 0, fmt.Errorf("%w: %s: shape %v with strides %+v is empty, negative or overflows", ErrInvalid, name, s, st)
	}
	bytes := n * int64(dt.Size())
	switch {
	case b.bindable(n, bytes):
		return n, nil
	case b.addrWhy != "":
		return 0, fmt.Errorf("%w: %s: shape %v with strides %+v spans %d elements (%d bytes); one binding reaches %d elements and %d bytes, and %s",
			ErrTooLarge, name, s, st, n, bytes, int64(MaxElements), b.bindBytes, b.addrWhy)
	case bytes > b.maxBuf:
		return 0, fmt.Errorf("%w: %s: shape %v spans %d bytes; the device's largest buffer is %d bytes",
			ErrTooLarge, name, s, bytes, b.maxBuf)
	}
	return n, checkStrides(name, s, st)
}

// spec.DType is the storage type.
func (t *Tensor) DType() spec.DType { return t.dt }

// spec.Shape is the logical shape.
func (t *Tensor) Shape() spec.Shape { return t.shape }

// Strides are the element strides.
func (t *Tensor) Strides() spec.Strides { return t.st }

// Len is the number of elements the buffer holds (the view's extent).
func (t *Tensor) Len() int64 { return t.elems }

// Backend returns the tensor's backend.
func (t *Tensor) Backend() *Backend { return t.b }

// Close frees the buffer, after calls using the tensor returned. It is
// safe to call twice, also after the Backend was closed.
func (t *Tensor) Close() error {
	if t == nil {
		return nil
	}
	if t.life.Close() {
		return t.buf.Close()
	}
	return nil
}

// use acquires t for a call (the caller releases it).
func (t *Tensor) use(name string) error {
	if t == nil {
		return fmt.Errorf("%w: %s: nil tensor", ErrInvalid, name)
	}
	if !t.life.Acquire() {
		return fmt.Errorf("vkattn: %s: tensor: %w", name, ErrClosed)
	}
	return nil
}

// Upload copies src into the tensor's buffer from element 0 (src is laid
// out like the tensor: len(src) ≤ Len()). T must match the dtype: float32
// for spec.Float32, bfloat16.BFloat16 for spec.BFloat16, another uint16 type for spec.Float16.
func Upload[T Elem](ctx context.Context, t *Tensor, src []T) error {
	return transfer[T](t, "upload", len(src), func() error { return device.Upload(ctx, t.buf, 0, src) })
}

// Download copies len(dst) ≤ Len() elements from element 0 of the tensor's
// buffer into dst.
func Download[T Elem](ctx context.Context, t *Tensor, dst []T) error {
	return transfer[T](t, "download", len(dst), func() error { return device.Download(ctx, t.buf, 0, dst) })
}

// transfer runs move (an upload or a download of n elements of type T)
// with t and its Backend held, once T is t's dtype and n ≤ Len(); op names
// the call in errors.
func transfer[T Elem](t *Tensor, op string, n int, move func() error) error {
	if err := t.use(op); err != nil {
		return err
	}
	defer t.life.Release()
	if err := t.b.enter(); err != nil {
		return err
	}
	defer t.b.leave()
	dt := dtypeOf[T]()
	if op == "upload" {
		if dt != t.dt {
			return fmt.Errorf("%w: upload: %v data into a %v tensor", ErrInvalid, dt, t.dt)
		}
		if int64(n) > t.elems {
			return fmt.Errorf("%w: upload: %d elements into a tensor of %d", ErrInvalid, n, t.elems)
		}
	} else {
		if dt != t.dt {
			return fmt.Errorf("%w: download: %v tensor into %v data", ErrInvalid, t.dt, dt)
		}
		if int64(n) > t.elems {
			return fmt.Errorf("%w: download: %d elements from a tensor of %d", ErrInvalid, n, t.elems)
		}
	}
	if err := move(); err != nil {
		return fmt.Errorf("vkattn: %s: %w", op, err)
	}
	return nil
}

// Fill sets every 32-bit word of the buffer to word (0x7FC00000 poisons
// float32 data with NaN; 0x7E007E00 float16 data; 0x7FC07FC0 bfloat16
// data).
func (t *Tensor) Fill(ctx context.Context, word uint32) error {
	if err := t.use("fill"); err != nil {
		return err
	}
	defer t.life.Release()
	if err := t.b.enter(); err != nil {
		return err
	}
	defer t.b.leave()
	return t.b.dev.Fill(ctx, t.buf, word)
}
