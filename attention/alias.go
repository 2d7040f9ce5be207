package attention

import (
	"fmt"
	"reflect"
	"slices"
)

// Host outputs must not share memory with any other operand: a kernel
// writing an output while it still reads an input (or another output)
// returns wrong results, differently on every backend. The check is exact:
// interleaved views of one buffer (Q, K and V packed in a [B, N, 3, H, D]
// buffer, or dQ, dK and dV in one) share no element and pass.

// hostView is the memory a host operand addresses: rows of rowBytes bytes
// starting at base + Σ index·stride over the dims (in bytes, by stride,
// largest first; dims of extent 1 left out).
type hostView struct {
	name     string
	base     int64 // address of the view's element 0
	rowBytes int64
	dims     []viewDim
}

type viewDim struct{ n, stride int64 }

// viewOf describes a validated tensor (strides resolved and non-negative).
func viewOf(name string, t Tensor) hostView {
	st := t.strides()
	return newView(name, reflect.ValueOf(t.Data).Pointer(), int64(t.DType().Size()), t.Shape, st)
}

// sliceView describes a plain float32 slice (LSE).
func sliceView(name string, s []float32) hostView {
	return newView(name, reflect.ValueOf(s).Pointer(), 4, Shape{B: 1, S: 1, H: 1, D: len(s)}, Strides{})
}

func newView(name string, addr uintptr, size int64, s Shape, st Strides) hostView {
	v := hostView{name: name, base: int64(addr), rowBytes: int64(s.D) * size}
	for _, d := range [][2]int{{s.B, st.Batch}, {s.S, st.Seq}, {s.H, st.Head}} {
		if d[0] > 1 {
			v.dims = append(v.dims, viewDim{int64(d[0]), int64(d[1]) * size})
		}
	}
	slices.SortFunc(v.dims, func(a, b viewDim) int { return int(b.stride - a.stride) })
	return v
}

// end is one past the view's last byte.
func (v hostView) end() int64 {
	e := v.base + v.rowBytes
	for _, d := range v.dims {
		e += (d.n - 1) * d.stride
	}
	return e
}

// rows is the number of rows of the view.
func (v hostView) rows() int64 {
	n := int64(1)
	for _, d := range v.dims {
		n *= d.n
	}
	return n
}

// floorRow returns the index of v's last row that starts at or before
// address y (false when every row starts after y). The strides nest (an
// output's rows never overlap, checkOperand), so the greedy mixed-radix
// choice, largest stride first, is that row.
func (v hostView) floorRow(y int64, idx []int64) bool {
	y -= v.base
	if y < 0 {
		return false
	}
	for i, d := range v.dims {
		idx[i] = min(y/d.stride, d.n-1)
		y -= idx[i] * d.stride
	}
	return true
}

// rowStart is the address of the row at idx.
func (v hostView) rowStart(idx []int64) int64 {
	a := v.base
	for i, d := range v.dims {
		a += idx[i] * d.stride
	}
	return a
}

// nextRow advances idx to the next row in address order; false past the
// last.
func (v hostView) nextRow(idx []int64) bool {
	for i := len(v.dims) - 1; i >= 0; i-- {
		if idx[i]+1 < v.dims[i].n {
			idx[i]++
			return true
		}
		idx[i] = 0
	}
	return false
}

// hits reports whether the bytes [lo, hi) meet a row of v: the last row
// starting at or before lo, or the next one, which starts after lo.
func (v hostView) hits(lo, hi int64, idx []int64) bool {
	if v.floorRow(lo, idx) {
		if v.rowStart(idx)+v.rowBytes > lo {
			return true
		}
		if !v.nextRow(idx) {
			return false
		}
	} else {
		clear(idx) // the first row starts after lo
	}
	return v.rowStart(idx) < hi
}

// overlap reports whether a and b share a byte: a's rows are walked and
// looked up in b, whose strides must nest, once their address ranges meet.
func overlap(a, b hostView) bool {
	if a.end() <= b.base || b.end() <= a.base {
		return false
	}
	ia, ib := make([]int64, len(a.dims)), make([]int64, len(b.dims))
	for {
		lo := a.rowStart(ia)
		if b.hits(lo, lo+a.rowBytes, ib) {
			return true
		}
		if !a.nextRow(ia) {
			return false
		}
	}
}

// distinctHost fails when an output shares memory with another operand
// (inputs may share memory with each other: they are only read). Every
// view in outs must also be in all.
func distinctHost(outs, all []hostView) error {
	for i, o := range outs {
		for _, a := range all {
			if a.name == o.name || slices.ContainsFunc(outs[:i], func(p hostView) bool { return p.name == a.name }) {
				continue // itself, or an output pair already checked
			}
			// Walk one view's rows and look each up in the other, which must
			// nest (outputs always do): the one with fewer rows is walked.
			x, y := a, o
			if nests(a) && o.rows() < a.rows() {
				x, y = o, a
			}
			if overlap(x, y) {
				return fmt.Errorf("attention: %s: shares memory with %s (an output may not overlap any other operand): %w", o.name, a.name, ErrStride)
			}
		}
	}
	return nil
}

// nests reports whether v's rows can be walked by floorRow: each stride
// covers the span of the dims inside it.
func nests(v hostView) bool {
	span := v.rowBytes
	for i := len(v.dims) - 1; i >= 0; i-- {
		d := v.dims[i]
		if d.stride < span {
			return false
		}
		span += (d.n - 1) * d.stride
	}
	return true
}
