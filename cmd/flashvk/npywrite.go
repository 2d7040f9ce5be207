package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/sbinet/npyio/npy"
	"github.com/x448/float16"
)

// encodeNpy writes a C-order float32, float16, float64, bool or uint8
// array with the given shape to w as a version 1.0 .npy file, its data in
// chunks (w may stop it: see ctxWriter). (npyio writes only 1-D shapes and no float16,
// so the header is formatted here, as numpy does.) numpy has no bfloat16:
// []bfloat16.BFloat16 is written as float32 ('<f4'), which holds every
// bfloat16 value exactly.
func encodeNpy(w io.Writer, shape []int, data any) error {
	var descr string
	var count, size int
	var put func(dst []byte, i int)
	switch x := data.(type) {
	case []float32:
		descr, count, size = "<f4", len(x), 4
		put = func(dst []byte, i int) { binary.LittleEndian.PutUint32(dst, math.Float32bits(x[i])) }
	case []float16.Float16:
		descr, count, size = "<f2", len(x), 2
		put = func(dst []byte, i int) { binary.LittleEndian.PutUint16(dst, x[i].Bits()) }
	case []bfloat16.BFloat16:
		descr, count, size = "<f4", len(x), 4
		put = func(dst []byte, i int) { binary.LittleEndian.PutUint32(dst, math.Float32bits(x[i].Float32())) }
	case []float64:
		descr, count, size = "<f8", len(x), 8
		put = func(dst []byte, i int) { binary.LittleEndian.PutUint64(dst, math.Float64bits(x[i])) }
	case []bool:
		descr, count, size = "|b1", len(x), 1
		put = func(dst []byte, i int) {
			dst[0] = 0
			if x[i] {
				dst[0] = 1
			}
		}
	case []uint8:
		descr, count, size = "|u1", len(x), 1
		put = func(dst []byte, i int) { dst[0] = x[i] }
	default:
		return fmt.Errorf("cannot write %T", data)
	}
	dims := make([]string, len(shape))
	n := 1
	for i, s := range shape {
		dims[i] = strconv.Itoa(s)
		n *= s
	}
	if n != count {
		return fmt.Errorf("shape %v does not match %d elements", shape, count)
	}
	tuple := "(" + strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	tuple += ")"
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, tuple)
	// Magic (6) + version (2) + length (2) + header, padded with spaces to
	// a multiple of 64 and ended by a newline.
	total := 10 + len(h) + 1
	h += strings.Repeat(" ", (64-total%64)%64) + "\n"
	if len(h) > math.MaxUint16 {
		return errors.New("header too long")
	}
	head := append([]byte{}, npy.Magic[:]...)
	head = append(head, 1, 0)
	head = binary.LittleEndian.AppendUint16(head, uint16(len(h)))
	head = append(head, h...)
	if _, err := w.Write(head); err != nil {
		return err
	}
	const chunk = 1 << 16 // elements
	buf := make([]byte, min(count, chunk)*size)
	for start := 0; start < count; start += chunk {
		m := min(chunk, count-start)
		for i := range m {
			put(buf[i*size:], start+i)
		}
		if _, err := w.Write(buf[:m*size]); err != nil {
			return err
		}
	}
	return nil
}

// writeNpy writes one .npy file (see encodeNpy) all or nothing: into a
// temporary file beside path, renamed over path once complete.
func writeNpy(path string, shape []int, data any) error {
	o := (*app)(nil).newOutputs(context.Background())
	defer o.abort()
	if err := o.write("", path, func(w io.Writer) error { return encodeNpy(w, shape, data) }); err != nil {
		return err
	}
	return o.commit()
}
