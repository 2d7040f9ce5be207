package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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

// npyHead is what the header of a .npy file says, checked against the
// file's size: enough to know a problem's sizes before reading its data.
type npyHead struct {
	path  string
	Shape []int
	DType attention.DType
	order binary.ByteOrder
	// data is where the array starts, n its number of elements.
	data int64
	n    int
}

// statNpy reads and checks the header of a C-order float32 or float16
// .npy file, without its data. Every error names the file and says what
// is wrong with it in one line.
func statNpy(path string) (*npyHead, error) {
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
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pre := make([]byte, min(st.Size(), 12))
	if _, err := io.ReadFull(f, pre); err != nil {
		return nil, fmt.Errorf("%s: %s", path, oneLine(err.Error()))
	}
	end, err := npyPreamble(pre, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: not a valid .npy file: %s", path, err)
	}
	raw := make([]byte, end)
	if _, err := f.ReadAt(raw, 0); err != nil {
		return nil, fmt.Errorf("%s: %s", path, oneLine(err.Error()))
	}
	rd, err := npyHeader(bytes.NewReader(raw))
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
	h := &npyHead{path: path, Shape: d.Shape, DType: dt, order: order, data: int64(end), n: n}
	return h, h.checkSize(st.Size())
}

// checkSize checks that a file of size bytes holds exactly the array.
func (h *npyHead) checkSize(size int64) error {
	want := int64(h.n) * int64(h.DType.Size())
	have := size - h.data
	if have < want {
		return fmt.Errorf("%s: truncated: shape %v %s needs %d data bytes, file has %d", h.path, h.Shape, h.DType, want, have)
	}
	if have > want {
		return fmt.Errorf("%s: %d bytes of trailing data after the %v %s array", h.path, have-want, h.Shape, h.DType)
	}
	return nil
}

// read reads the array's data.
func (h *npyHead) read() (*npyArray, error) {
	raw, err := os.ReadFile(h.path)
	if err != nil {
		return nil, err
	}
	if err := h.checkSize(int64(len(raw))); err != nil {
		return nil, fmt.Errorf("%s (the file changed after its header was read)", err)
	}
	body := raw[h.data:]
	a := &npyArray{Shape: h.Shape, DType: h.DType}
	switch h.DType {
	case attention.Float32:
		x := make([]float32, h.n)
		for i := range x {
			x[i] = math.Float32frombits(h.order.Uint32(body[4*i:]))
		}
		a.Data = x
	case attention.Float16:
		x := make([]float16.Float16, h.n)
		for i := range x {
			x[i] = float16.Frombits(h.order.Uint16(body[2*i:]))
		}
		a.Data = x
	}
	return a, nil
}

// readNpy reads a C-order float32 or float16 .npy file. Every error names
// the file and says what is wrong with it in one line.
func readNpy(path string) (*npyArray, error) {
	h, err := statNpy(path)
	if err != nil {
		return nil, err
	}
	return h.read()
}

// npyHeader parses the header with npyio, turning a panic on a malformed
// header into an error.
func npyHeader(r *bytes.Reader) (rd *npy.Reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			rd, err = nil, errors.New("malformed header")
		}
	}()
	return npy.NewReader(r)
}

// npyPreamble checks the magic, version and header length of a file of
// size bytes whose first bytes are raw, and returns where the header ends,
// before npyio sees the file: npyio allocates whatever header length the
// file claims (a corrupt 4-byte length asks for gigabytes).
func npyPreamble(raw []byte, size int64) (int, error) {
	n := len(raw)
	if n < 10 || string(raw[:6]) != "\x93NUMPY" {
		return 0, errors.New("no .npy magic")
	}
	var hlen, pre int
	switch raw[6] {
	case 1:
		hlen, pre = int(binary.LittleEndian.Uint16(raw[8:10])), 10
	case 2, 3:
		if n < 12 {
			return 0, errors.New("truncated header")
		}
		hlen, pre = int(binary.LittleEndian.Uint32(raw[8:12])), 12
	default:
		return 0, fmt.Errorf("unsupported .npy version %d", raw[6])
	}
	if int64(hlen) > size-int64(pre) {
		return 0, fmt.Errorf("header length %d runs past the end of the file", hlen)
	}
	return pre + hlen, nil
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
