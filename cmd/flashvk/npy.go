package main

import (
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
	"github.com/x448/float16"
)

// maxNpyBytes bounds the size of an input file (16 GiB): larger inputs
// are refused before anything is allocated for them.
const maxNpyBytes = 16 << 30

// maxNpyHeader bounds the header of a .npy file: the most a version 1.0
// header can hold, far more than any float array's header needs (numpy
// itself refuses headers over 10000 bytes by default).
const maxNpyHeader = math.MaxUint16

// maxNpyDims is numpy's limit on the number of dimensions of an array.
const maxNpyDims = 64

// npyMagic starts every .npy file.
const npyMagic = "\x93NUMPY"

// npyArray is a float array read from a .npy file (or, for --mask, a
// boolean one).
type npyArray struct {
	Shape []int
	DType attention.DType // 0 for a boolean array (see Elem)
	// Elem is "bool" or "uint8" for a boolean array ("" for a float one).
	Elem string
	Data any // []float32, []float16.Float16, or []uint8 (Elem), C order
}

// npyHead is what the header of a .npy file says, checked against the
// file's size: enough to know a problem's sizes before reading its data.
type npyHead struct {
	path  string
	Shape []int
	DType attention.DType
	// elem is "bool" or "uint8" for an array of bytes (--mask; DType is
	// then 0), "" for a float array.
	elem  string
	order binary.ByteOrder
	// data is where the array starts, n its number of elements and
	// nbytes its size in bytes.
	data   int64
	n      int
	nbytes int64
}

// npyElems says which element types a .npy reader takes.
type npyElems int

const (
	// floatNpy: float32 and float16 (the operands).
	floatNpy npyElems = iota
	// anyNpy: those and bool and uint8 (--bias and --mask, which check
	// which they got).
	anyNpy
)

// statNpy reads and checks the header of a C-order float32 or float16
// .npy file, without its data. Every error names the file and says what
// is wrong with it in one line.
func statNpy(path string) (*npyHead, error) { return statNpyOf(path, floatNpy) }

// statNpyAny is statNpy taking bool and uint8 arrays too (npyHead.elem).
func statNpyAny(path string) (*npyHead, error) { return statNpyOf(path, anyNpy) }

// npyTypeError is a .npy file's element type that flashvk does not read.
type npyTypeError struct{ err error }

func (e npyTypeError) Error() string { return e.err.Error() }
func (e npyTypeError) Unwrap() error { return e.err }

// statNpyOf is statNpy for the element types elems.
func statNpyOf(path string, elems npyElems) (*npyHead, error) {
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
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseNpyOf(path, f, st.Size(), elems)
}

// parseNpy reads and checks the preamble and header of a .npy file of
// size bytes, read through r, and checks the array they declare against
// the file's size. path names the file in errors. It reads and allocates
// no more than the header: its length is checked against size first.
func parseNpy(path string, r io.ReaderAt, size int64) (*npyHead, error) {
	return parseNpyOf(path, r, size, floatNpy)
}

// parseNpyOf is parseNpy taking the element types elems.
func parseNpyOf(path string, r io.ReaderAt, size int64, elems npyElems) (*npyHead, error) {
	if size > maxNpyBytes {
		return nil, fmt.Errorf("%s: %d bytes is larger than the %d bytes flashvk reads", path, size, int64(maxNpyBytes))
	}
	invalid := func(err error) error {
		return fmt.Errorf("%s: not a valid .npy file: %s", path, oneLine(err.Error()))
	}
	var pre [12]byte
	if err := readFullAt(r, pre[:min(size, int64(len(pre)))], 0); err != nil {
		return nil, fmt.Errorf("%s: %s", path, oneLine(err.Error()))
	}
	major, start, end, err := npyPreamble(pre[:min(size, int64(len(pre)))], size)
	if err != nil {
		return nil, invalid(err)
	}
	raw := make([]byte, end-start)
	if err := readFullAt(r, raw, int64(start)); err != nil {
		return nil, fmt.Errorf("%s: %s", path, oneLine(err.Error()))
	}
	d, err := parseNpyDict(raw, major <= 2)
	if err != nil {
		return nil, invalid(err)
	}
	if d.fortran {
		return nil, fmt.Errorf("%s: Fortran-order array; save it in C order (np.ascontiguousarray)", path)
	}
	h := &npyHead{path: path, Shape: d.shape, data: int64(end)}
	if h.elem = npyByteElem(d.descr); h.elem == "" || elems != anyNpy {
		h.elem = ""
		if h.DType, h.order, err = npyDType(d.descr); err != nil {
			if elems == anyNpy {
				err = fmt.Errorf("%v, or bool or uint8 (a mask)", err)
			}
			return nil, fmt.Errorf("%s: %w", path, npyTypeError{err})
		}
	}
	esize := h.elemSize()
	nbytes, ok := npyBytes(d.shape, esize, maxNpyBytes)
	if !ok {
		return nil, fmt.Errorf("%s: shape %v %s is larger than the %d bytes flashvk reads (the file has %d data bytes)", path, d.shape, h.typeName(), int64(maxNpyBytes), size-h.data)
	}
	h.nbytes, h.n = nbytes, int(nbytes/int64(esize))
	if err := h.checkSize(size); err != nil {
		return nil, err
	}
	return h, nil
}

// readFullAt fills b from r at offset off.
func readFullAt(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// npyBytes returns the size in bytes of an array of the given shape (no
// negative dimension) and element size, or false if the product of size
// and the non-zero dimensions is more than limit (numpy, too, refuses an
// empty array whose other dimensions overflow). It never overflows.
func npyBytes(shape []int, size int, limit int64) (int64, bool) {
	total, empty := int64(size), false
	for _, d := range shape {
		if d == 0 {
			empty = true
			continue
		}
		if int64(d) > limit/total {
			return 0, false
		}
		total *= int64(d)
	}
	if total > limit || total/int64(size) > math.MaxInt {
		return 0, false
	}
	if empty {
		return 0, true
	}
	return total, true
}

// elemSize is the size in bytes of an element.
func (h *npyHead) elemSize() int {
	if h.elem != "" {
		return 1
	}
	return h.DType.Size()
}

// typeName is the element type: "float32", "float16", "bool", "uint8".
func (h *npyHead) typeName() string {
	if h.elem != "" {
		return h.elem
	}
	return h.DType.String()
}

// checkSize checks that a file of size bytes holds exactly the array.
func (h *npyHead) checkSize(size int64) error {
	have := max(size-h.data, 0)
	if have < h.nbytes {
		return fmt.Errorf("%s: truncated: shape %v %s needs %d data bytes, file has %d", h.path, h.Shape, h.typeName(), h.nbytes, have)
	}
	if have > h.nbytes {
		return fmt.Errorf("%s: %d bytes of trailing data after the %v %s array", h.path, have-h.nbytes, h.Shape, h.typeName())
	}
	return nil
}

// read reads the array's data.
func (h *npyHead) read() (*npyArray, error) {
	f, err := os.Open(h.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return h.readFrom(f, st.Size())
}

// readFrom reads the array's data from r, a file of size bytes whose
// header is h: it checks the size again (the file may have changed since
// h was read), then allocates the array and fills it in chunks.
func (h *npyHead) readFrom(r io.ReaderAt, size int64) (*npyArray, error) {
	if err := h.checkSize(size); err != nil {
		return nil, fmt.Errorf("%s (the file changed after its header was read)", err)
	}
	body := io.NewSectionReader(r, h.data, h.nbytes)
	a := &npyArray{Shape: h.Shape, DType: h.DType, Elem: h.elem}
	var err error
	switch {
	case h.elem != "":
		x := make([]uint8, h.n)
		err = readChunks(body, h.nbytes, func(off int64, b []byte) { copy(x[off:], b) })
		a.Data = x
	case h.DType == attention.Float32:
		x := make([]float32, h.n)
		err = readChunks(body, h.nbytes, func(off int64, b []byte) {
			y := x[off/4:]
			for i := range len(b) / 4 {
				y[i] = math.Float32frombits(h.order.Uint32(b[4*i:]))
			}
		})
		a.Data = x
	case h.DType == attention.Float16:
		x := make([]float16.Float16, h.n)
		err = readChunks(body, h.nbytes, func(off int64, b []byte) {
			y := x[off/2:]
			for i := range len(b) / 2 {
				y[i] = float16.Frombits(h.order.Uint16(b[2*i:]))
			}
		})
		a.Data = x
	default:
		return nil, fmt.Errorf("%s: cannot read %s", h.path, h.DType)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("%s: truncated while its data was read (the file changed after its header was read)", h.path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s", h.path, oneLine(err.Error()))
	}
	return a, nil
}

// npyChunk is how many data bytes readChunks reads at a time (a multiple
// of every element size).
const npyChunk = 1 << 20

// readChunks reads n bytes from r in chunks, passing each with its offset
// to each.
func readChunks(r io.Reader, n int64, each func(off int64, b []byte)) error {
	buf := make([]byte, min(n, npyChunk))
	for off := int64(0); off < n; {
		b := buf[:min(n-off, int64(len(buf)))]
		if _, err := io.ReadFull(r, b); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		each(off, b)
		off += int64(len(b))
	}
	return nil
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

// npyPreamble checks the magic, version and header length of a file of
// size bytes whose first bytes (up to 12) are raw. It returns the major
// version and where the header starts and ends: it ends within the file
// and at most maxNpyHeader bytes after it starts.
func npyPreamble(raw []byte, size int64) (major, start, end int, err error) {
	if len(raw) < len(npyMagic) || string(raw[:len(npyMagic)]) != npyMagic {
		return 0, 0, 0, errors.New("no .npy magic")
	}
	if len(raw) < 8 {
		return 0, 0, 0, fmt.Errorf("the file ends after %d bytes, inside the preamble", size)
	}
	major, minor := int(raw[6]), int(raw[7])
	var hlen int64
	switch {
	case minor != 0 || major < 1 || major > 3:
		return 0, 0, 0, fmt.Errorf("unsupported .npy version %d.%d (flashvk reads 1.0, 2.0 and 3.0)", major, minor)
	case major == 1 && len(raw) >= 10:
		hlen, start = int64(binary.LittleEndian.Uint16(raw[8:10])), 10
	case major > 1 && len(raw) >= 12:
		hlen, start = int64(binary.LittleEndian.Uint32(raw[8:12])), 12
	default:
		return 0, 0, 0, fmt.Errorf("the file ends after %d bytes, inside the preamble", size)
	}
	if hlen > size-int64(start) {
		return 0, 0, 0, fmt.Errorf("header length %d runs past the end of the file (%d bytes after the %d-byte preamble)", hlen, size-int64(start), start)
	}
	if hlen > maxNpyHeader {
		return 0, 0, 0, fmt.Errorf("header length %d is more than the %d bytes flashvk reads", hlen, maxNpyHeader)
	}
	return major, start, start + int(hlen), nil
}

// npyDict is what a .npy header's dictionary says.
type npyDict struct {
	descr   string
	fortran bool
	shape   []int
}

// parseNpyDict parses a .npy header as numpy writes it: a Python dict
// literal with exactly the keys 'descr' (a string), 'fortran_order' (True
// or False) and 'shape' (a tuple of non-negative ints: () or (n,) or
// (n, m, ...)), in any order, then spaces and a final newline. Tokens may
// be separated by spaces; strings are quoted with ' or " and hold no
// escapes. long accepts Python 2's long suffix (3L), as numpy does for
// versions 1.0 and 2.0. The padding need not align the data: numpy reads
// unaligned headers, and some writers (npyio) make them. Errors say where
// the header is wrong.
func parseNpyDict(hdr []byte, long bool) (npyDict, error) {
	var d npyDict
	if len(hdr) == 0 {
		return d, errors.New("empty header")
	}
	if hdr[len(hdr)-1] != '\n' {
		return d, fmt.Errorf("the %d-byte header does not end with a newline", len(hdr))
	}
	p := &pyScanner{b: hdr[:len(hdr)-1], long: long}
	if !p.eat('{') {
		return d, p.want("'{' (a dict)")
	}
	var vals [3]*pyValue
	keys := [3]string{"descr", "fortran_order", "shape"}
	for n, comma := 0, false; ; n++ {
		p.space()
		if p.eat('}') {
			break
		}
		if n > 0 && !comma {
			return d, p.want("',' or '}'")
		}
		at := p.i
		k, err := p.value(1)
		if err != nil {
			return d, err
		}
		if k.kind != pyStr {
			return d, fmt.Errorf("header byte %d: key %s is not a string", at, clip(k.text))
		}
		slot := -1
		for i, name := range keys {
			if k.s == name {
				slot = i
			}
		}
		if slot < 0 {
			return d, fmt.Errorf("header byte %d: unknown key %s: want exactly 'descr', 'fortran_order' and 'shape'", at, clip(k.text))
		}
		if vals[slot] != nil {
			return d, fmt.Errorf("header byte %d: duplicate key '%s'", at, k.s)
		}
		p.space()
		if !p.eat(':') {
			return d, p.want("':'")
		}
		v, err := p.value(1)
		if err != nil {
			return d, err
		}
		vals[slot] = &v
		p.space()
		comma = p.eat(',')
	}
	for ; p.i < len(p.b); p.i++ {
		if p.b[p.i] != ' ' {
			return d, p.want("only spaces and a newline after the dict")
		}
	}
	for i, name := range keys {
		if vals[i] == nil {
			return d, fmt.Errorf("the header has no '%s' key", name)
		}
	}
	descr, fortran, shape := vals[0], vals[1], vals[2]
	switch descr.kind {
	case pyStr:
		d.descr = descr.s
	case pyList:
		return d, fmt.Errorf("'descr' is a list: structured dtypes are not supported, want float32 or float16")
	default:
		return d, fmt.Errorf("'descr' is %s, want a string such as '<f4'", clip(descr.text))
	}
	if fortran.kind != pyBool {
		return d, fmt.Errorf("'fortran_order' is %s, want True or False", clip(fortran.text))
	}
	d.fortran = fortran.b
	switch shape.kind {
	case pyTuple:
	case pyList:
		return d, fmt.Errorf("'shape' is the list %s, want a tuple such as (2, 3)", clip(shape.text))
	case pyInt:
		return d, fmt.Errorf("'shape' is the integer %s, want a tuple: a one-element shape is written (%s,)", clip(shape.text), clip(strings.Trim(shape.text, "( )")))
	default:
		return d, fmt.Errorf("'shape' is %s, want a tuple such as (2, 3)", clip(shape.text))
	}
	d.shape = make([]int, len(shape.elems))
	for i, e := range shape.elems {
		switch {
		case e.kind != pyInt:
			return d, fmt.Errorf("'shape' %s: dimension %s is not an integer", clip(shape.text), clip(e.text))
		case e.neg:
			return d, fmt.Errorf("'shape' %s: dimension %s is negative", clip(shape.text), clip(e.text))
		case e.big:
			return d, fmt.Errorf("'shape' %s: dimension %s is too large", clip(shape.text), clip(e.text))
		}
		d.shape[i] = e.n
	}
	return d, nil
}

// pyKind is the kind of a Python literal in a .npy header.
type pyKind int

const (
	pyStr pyKind = iota
	pyBool
	pyInt
	pyTuple
	pyList
)

// pyValue is a Python literal of a .npy header.
type pyValue struct {
	kind  pyKind
	text  string // as written
	s     string // pyStr: the string
	b     bool   // pyBool
	n     int    // pyInt: the value, unless neg or big
	neg   bool   // pyInt: negative
	big   bool   // pyInt: larger than an int holds
	elems []pyValue
}

// pyScanner scans the Python literals of a .npy header.
type pyScanner struct {
	b    []byte
	i    int
	long bool // accept the long suffix (3L)
}

// maxPyDepth bounds the nesting of tuples and lists in a header (a
// structured dtype's descr nests three deep).
const maxPyDepth = 4

func (p *pyScanner) space() {
	for p.i < len(p.b) && p.b[p.i] == ' ' {
		p.i++
	}
}

// eat consumes c if it comes next.
func (p *pyScanner) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// want is the error of finding something other than what at p.i.
func (p *pyScanner) want(what string) error {
	return fmt.Errorf("header byte %d: want %s, found %s", p.i, what, p.found())
}

// found describes the byte at p.i.
func (p *pyScanner) found() string {
	if p.i >= len(p.b) {
		return "the end of the header"
	}
	c := p.b[p.i]
	switch {
	case c == '\'':
		return `"'"`
	case c > ' ' && c < 0x7f:
		return "'" + string(rune(c)) + "'"
	case c == ' ':
		return "a space"
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// value scans a literal, after optional spaces: a string, True or False,
// an int, a tuple or a list of literals, nested at most maxPyDepth deep.
func (p *pyScanner) value(depth int) (pyValue, error) {
	p.space()
	start := p.i
	var v pyValue
	if p.i >= len(p.b) {
		return v, p.want("a value")
	}
	switch c := p.b[p.i]; {
	case c == '\'' || c == '"':
		p.i++
		for ; p.i < len(p.b) && p.b[p.i] != c; p.i++ {
			if b := p.b[p.i]; b == '\\' || b < ' ' || b >= 0x7f {
				return v, p.want("a plain ASCII string")
			}
		}
		if p.i >= len(p.b) {
			return v, fmt.Errorf("header byte %d: unterminated string", start)
		}
		p.i++
		v.kind, v.s = pyStr, string(p.b[start+1:p.i-1])
	case c == '(' || c == '[':
		if depth > maxPyDepth {
			return v, fmt.Errorf("header byte %d: tuples or lists nested more than %d deep", start, maxPyDepth)
		}
		end := byte(')')
		v.kind = pyTuple
		if c == '[' {
			end, v.kind = ']', pyList
		}
		p.i++
		comma := false // a comma after the last element
		for {
			p.space()
			if p.eat(end) {
				break
			}
			if len(v.elems) > 0 && !comma {
				return v, p.want(fmt.Sprintf("',' or '%c'", end))
			}
			if len(v.elems) == maxNpyDims {
				return v, fmt.Errorf("header byte %d: more than %d values in a tuple or list", p.i, maxNpyDims)
			}
			e, err := p.value(depth + 1)
			if err != nil {
				return v, err
			}
			v.elems = append(v.elems, e)
			p.space()
			comma = p.eat(',')
		}
		if v.kind == pyTuple && len(v.elems) == 1 && !comma {
			// (x) is x in parentheses, not a tuple.
			v = v.elems[0]
		}
	case c == '-' || (c >= '0' && c <= '9'):
		v.kind, v.neg = pyInt, c == '-'
		if v.neg {
			p.i++
		}
		d := p.i
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
		}
		digits := string(p.b[d:p.i])
		switch {
		case digits == "":
			return v, p.want("a digit")
		case len(digits) > 1 && digits[0] == '0':
			return v, fmt.Errorf("header byte %d: integer %s has a leading zero", start, digits)
		}
		if p.long && p.i < len(p.b) && p.b[p.i] == 'L' {
			p.i++
		}
		n, err := strconv.Atoi(digits)
		v.n, v.big = n, err != nil
	case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_':
		for p.i < len(p.b) && isPyName(p.b[p.i]) {
			p.i++
		}
		switch w := string(p.b[start:p.i]); w {
		case "True", "False":
			v.kind, v.b = pyBool, w == "True"
		default:
			return v, fmt.Errorf("header byte %d: unexpected name %s", start, clip(w))
		}
	default:
		return v, p.want("a value")
	}
	if p.i < len(p.b) && isPyName(p.b[p.i]) {
		return v, p.want("a separator")
	}
	v.text = string(p.b[start:p.i])
	return v, nil
}

func isPyName(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
}

// clip shortens s for an error message.
func clip(s string) string {
	const n = 60
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// npyByteElem is "bool" or "uint8" for numpy's one-byte boolean and
// unsigned types ('|b1', '|u1', any byte-order mark), else "".
func npyByteElem(s string) string {
	if s != "" && strings.ContainsRune("<>|=", rune(s[0])) {
		s = s[1:]
	}
	switch s {
	case "b1", "?":
		return "bool"
	case "u1":
		return "uint8"
	}
	return ""
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
