package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/bfloat16"
	"github.com/sbinet/npyio/npy"
	"github.com/x448/float16"
)

// maxNpyBytes bounds the size of an input file (16 GiB): larger inputs
// are refused before anything is allocated for them.
const maxNpyBytes = 16 << 30

// npyArray is a float array read from a .npy file.
type npyArray struct {
	Shape []int
	DType attention.DType
	Data  any // []float32 or []float16.Float16, C order
}

// readNpy reads a C-order float32 or float16 .npy file. Every error names
// the file and says what is wrong with it in one line.
func readNpy(path string) (*npyArray, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such file", path)
	}
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s: is a directory, want a .npy file", path)
	}
	if st.Size() > maxNpyBytes {
		return nil, fmt.Errorf("%s: %d bytes is larger than the %d bytes flashvk reads", path, st.Size(), int64(maxNpyBytes))
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	br := bytes.NewReader(raw)
	rd, err := npyHeader(br)
	if err != nil {
		return nil, fmt.Errorf("%s: not a valid .npy file: %s", path, oneLine(err.Error()))
	}
	d := rd.Header.Descr
	if d.Fortran {
		return nil, fmt.Errorf("%s: Fortran-order array; save it in C order (np.ascontiguousarray)", path)
	}
	dt, order, err := npyDType(d.Type)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	n := 1
	for _, s := range d.Shape {
		if s < 0 || (s > 0 && n > math.MaxInt/s) {
			return nil, fmt.Errorf("%s: invalid shape %v", path, d.Shape)
		}
		n *= s
	}
	want := int64(n) * int64(dt.Size())
	have := int64(br.Len())
	if have < want {
		return nil, fmt.Errorf("%s: truncated: shape %v %s needs %d data bytes, file has %d", path, d.Shape, dt, want, have)
	}
	if have > want {
		return nil, fmt.Errorf("%s: %d bytes of trailing data after the %v %s array", path, have-want, d.Shape, dt)
	}
	a := &npyArray{Shape: d.Shape, DType: dt}
	body := raw[len(raw)-int(have):]
	switch dt {
	case attention.Float32:
		x := make([]float32, n)
		if order == binary.LittleEndian {
			// npyio decodes float32 of either byte order.
			if err := npyRead(rd, &x); err != nil {
				return nil, fmt.Errorf("%s: %s", path, oneLine(err.Error()))
			}
		} else {
			for i := range x {
				x[i] = math.Float32frombits(order.Uint32(body[4*i:]))
			}
		}
		a.Data = x
	case attention.Float16:
		// npyio has no float16: decode the IEEE binary16 payload here.
		x := make([]float16.Float16, n)
		for i := range x {
			x[i] = float16.Frombits(order.Uint16(body[2*i:]))
		}
		a.Data = x
	}
	return a, nil
}

// npyHeader parses the header with npyio, turning a panic on a malformed
// header into an error. The returned reader decodes the data that follows.
func npyHeader(r *bytes.Reader) (rd *npy.Reader, err error) {
	if err := checkNpyPreamble(r); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			rd, err = nil, errors.New("malformed header")
		}
	}()
	return npy.NewReader(r)
}

// checkNpyPreamble checks the magic, version and header length before
// npyio sees the file: npyio allocates whatever header length the file
// claims (a corrupt 4-byte length asks for gigabytes).
func checkNpyPreamble(r *bytes.Reader) error {
	raw := make([]byte, 12)
	n, _ := r.ReadAt(raw, 0)
	raw = raw[:n]
	if n < 10 || string(raw[:6]) != "\x93NUMPY" {
		return errors.New("no .npy magic")
	}
	var hlen, pre int
	switch raw[6] {
	case 1:
		hlen, pre = int(binary.LittleEndian.Uint16(raw[8:10])), 10
	case 2, 3:
		if n < 12 {
			return errors.New("truncated header")
		}
		hlen, pre = int(binary.LittleEndian.Uint32(raw[8:12])), 12
	default:
		return fmt.Errorf("unsupported .npy version %d", raw[6])
	}
	if hlen > int(r.Size())-pre {
		return fmt.Errorf("header length %d runs past the end of the file", hlen)
	}
	return nil
}

// npyRead decodes the data after the header into x.
func npyRead(rd *npy.Reader, x *[]float32) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errors.New("malformed data")
		}
	}()
	return rd.Read(x)
}

// npyDType maps a numpy type string to a flashvk dtype and byte order.
func npyDType(s string) (attention.DType, binary.ByteOrder, error) {
	order := binary.ByteOrder(binary.LittleEndian)
	t := s
	if t != "" && strings.ContainsRune("<>|=", rune(t[0])) {
		if t[0] == '>' {
			order = binary.BigEndian
		}
		t = t[1:]
	}
	switch t {
	case "f4":
		return attention.Float32, order, nil
	case "f2":
		return attention.Float16, order, nil
	}
	names := map[string]string{
		"f8": "float64", "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64",
		"u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64", "b1": "bool",
		"c8": "complex64", "c16": "complex128",
	}
	name := names[t]
	if name == "" {
		name = "unknown"
	}
	hint := ""
	if t == "f8" {
		hint = " (convert with a.astype(np.float32))"
	}
	return 0, nil, fmt.Errorf("dtype %s (%q) is not supported: want float32 or float16%s", name, s, hint)
}

// writeNpy writes a C-order float32, float16 or float64 array with the
// given shape as a version 1.0 .npy file. (npyio writes only 1-D shapes
// and no float16, so the header is formatted here, as numpy does.) numpy has
// no bfloat16: []bfloat16.BFloat16 is written as float32 ('<f4'), which
// holds every bfloat16 value exactly.
func writeNpy(path string, shape []int, data any) error {
	var descr string
	var body []byte
	var count int
	switch x := data.(type) {
	case []float32:
		descr, count = "<f4", len(x)
		body = make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(body[4*i:], math.Float32bits(v))
		}
	case []float16.Float16:
		descr, count = "<f2", len(x)
		body = make([]byte, 2*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint16(body[2*i:], v.Bits())
		}
	case []bfloat16.BFloat16:
		descr, count = "<f4", len(x)
		body = make([]byte, 4*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint32(body[4*i:], math.Float32bits(v.Float32()))
		}
	case []float64:
		descr, count = "<f8", len(x)
		body = make([]byte, 8*len(x))
		for i, v := range x {
			binary.LittleEndian.PutUint64(body[8*i:], math.Float64bits(v))
		}
	default:
		return fmt.Errorf("%s: cannot write %T", path, data)
	}
	dims := make([]string, len(shape))
	n := 1
	for i, s := range shape {
		dims[i] = strconv.Itoa(s)
		n *= s
	}
	if n != count {
		return fmt.Errorf("%s: shape %v does not match %d elements", path, shape, count)
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
	var buf bytes.Buffer
	buf.Write(npy.Magic[:])
	buf.Write([]byte{1, 0})
	if len(h) > math.MaxUint16 {
		return errors.New(path + ": header too long")
	}
	_ = binary.Write(&buf, binary.LittleEndian, uint16(len(h)))
	buf.WriteString(h)
	buf.Write(body)
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
