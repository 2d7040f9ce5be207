package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/x448/float16"
)

// npyFuzzName names the fuzzed file in errors.
const npyFuzzName = "fuzz.npy"

// checkNpyBytes reads a .npy file held in memory and checks what any
// reader must hold: either an array or a one-line error naming the file;
// an accepted file holds exactly the declared data bytes, and the array
// written again with encodeNpy reads back with the same shape and bits.
func checkNpyBytes(t *testing.T, b []byte) (*npyArray, error) {
	t.Helper()
	h, err := parseNpy(npyFuzzName, bytes.NewReader(b), int64(len(b)))
	var a *npyArray
	if err == nil {
		a, err = h.readFrom(bytes.NewReader(b), int64(len(b)))
	}
	if err != nil {
		msg := err.Error()
		if a != nil || !strings.HasPrefix(msg, npyFuzzName+": ") || strings.ContainsAny(msg, "\n\r") {
			t.Fatalf("bad error (array %v): %q", a != nil, msg)
		}
		return nil, err
	}
	n, ok := npyBytes(a.Shape, 1, math.MaxInt64)
	if !ok || int64(len(b))-h.data != n*int64(a.DType.Size()) {
		t.Fatalf("accepted %d data bytes for shape %v %s", int64(len(b))-h.data, a.Shape, a.DType)
	}
	var length int
	switch d := a.Data.(type) {
	case []float32:
		length = len(d)
	case []float16.Float16:
		length = len(d)
	default:
		t.Fatalf("data %T", a.Data)
	}
	if int64(length) != n {
		t.Fatalf("%d elements for shape %v", length, a.Shape)
	}
	var w bytes.Buffer
	if err := encodeNpy(&w, a.Shape, a.Data); err != nil {
		t.Fatalf("writing shape %v %s: %v", a.Shape, a.DType, err)
	}
	h2, err := parseNpy(npyFuzzName, bytes.NewReader(w.Bytes()), int64(w.Len()))
	if err != nil {
		t.Fatalf("rereading shape %v %s: %v", a.Shape, a.DType, err)
	}
	a2, err := h2.readFrom(bytes.NewReader(w.Bytes()), int64(w.Len()))
	if err != nil {
		t.Fatalf("rereading shape %v %s: %v", a.Shape, a.DType, err)
	}
	if len(a2.Shape) != len(a.Shape) || (len(a.Shape) > 0 && !reflect.DeepEqual(a2.Shape, a.Shape)) ||
		a2.DType != a.DType || !reflect.DeepEqual(npyBits(a2.Data), npyBits(a.Data)) {
		t.Fatalf("reread %v %s, want %v %s", a2.Shape, a2.DType, a.Shape, a.DType)
	}
	return a, nil
}

// npyBits returns the bits of []float32 or []float16.Float16 data (NaNs
// compare equal by their bits).
func npyBits(data any) []uint32 {
	var b []uint32
	switch x := data.(type) {
	case []float32:
		for _, v := range x {
			b = append(b, math.Float32bits(v))
		}
	case []float16.Float16:
		for _, v := range x {
			b = append(b, uint32(v.Bits()))
		}
	}
	return b
}

// FuzzNpyBytes feeds arbitrary bytes to the .npy reader (checkNpyBytes).
// Seeds are the files of npyCases, well-formed and malformed.
func FuzzNpyBytes(f *testing.F) {
	for _, c := range npyCases() {
		f.Add(c.file)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkNpyBytes(t, data)
	})
}

// npyFuzzDescrs are the descr strings FuzzReadNpy draws from: the first
// six are read, the others refused.
var npyFuzzDescrs = []string{"<f4", "<f2", ">f4", ">f2", "f4", "=f2", "<f8", "<i4", "|u1", "|b1", "<c8", "|O", "", "<f16", "float32", "<F4"}

// Bits of FuzzReadNpy's flags: the first ones vary a well-formed file,
// the others (npyBreaks) make it one flashvk must refuse.
const (
	npyDoubleQuotes = 1 << iota // "descr" instead of 'descr'
	npyNoSpaces                 // {'descr':'<f4',...}
	npyDictComma                // a comma after the last item
	npyTupleComma               // a comma after the last dimension of 2 or more
	npyNoPadding                // no alignment padding (as npyio writes)
	npyLong                     // Python 2 long dims (3L): versions 1.0 and 2.0 only
	npyFortran                  // fortran_order True
	npyDuplicate                // the shape twice
	npyMissing                  // one key left out
	npyList                     // [2, 3] for the shape
	npyNoComma                  // (5) for a one-element shape
	npyMinor                    // version x.1
	npyWrongSize                // data bytes off by extra
	npyUnknownKey               // a fourth key
)

// npyBreaks are the flags that make a file one flashvk must refuse.
const npyBreaks = npyFortran | npyDuplicate | npyMissing | npyList | npyMinor | npyUnknownKey

// npyFuzzMax bounds the data built for a fuzzed file: a larger declared
// array gets a few bytes only (and is refused).
const npyFuzzMax = 4096

// npyFuzzFile builds the .npy file of FuzzReadNpy's arguments, and
// whether it is well-formed (the shape of dims, a supported descr, the
// exact data) and must be read with the shape dims.
func npyFuzzFile(version, descr uint8, flags uint16, dims []int64, mut uint8, pos uint16, ins string, extra int32) (file []byte, valid bool) {
	major := 1 + version%3
	if version >= 0xf0 {
		major = version & 0x0f
	}
	d := npyFuzzDescrs[int(descr)%len(npyFuzzDescrs)]
	q := "'"
	if flags&npyDoubleQuotes != 0 {
		q = `"`
	}
	colon, sep := ": ", ", "
	if flags&npyNoSpaces != 0 {
		colon, sep = ":", ","
	}
	suffix := ""
	if flags&npyLong != 0 {
		suffix = "L"
	}
	// The first six descrs are read; the array's bytes as numpy counts
	// them (the non-zero dimensions must fit) or -1 if too large.
	valid = int(descr)%len(npyFuzzDescrs) < 6
	size := uint64(4)
	if strings.HasSuffix(d, "f2") {
		size = 2
	}
	nbytes, empty := int64(size), false
	var parts []string
	for _, x := range dims {
		parts = append(parts, strconv.FormatInt(x, 10)+suffix)
		switch {
		case x < 0:
			valid = false
		case x == 0:
			empty = true
		case nbytes >= 0:
			hi, lo := bits.Mul64(uint64(nbytes), uint64(x))
			if hi != 0 || lo > maxNpyBytes {
				nbytes = -1
			} else {
				nbytes = int64(lo)
			}
		}
	}
	if empty && nbytes > 0 {
		nbytes = 0
	}
	open, end := "(", ")"
	if flags&npyList != 0 {
		open, end = "[", "]"
	}
	shape := open + strings.Join(parts, sep)
	switch {
	case len(dims) == 1 && flags&npyNoComma == 0:
		shape += ","
	case len(dims) > 1 && flags&npyTupleComma != 0:
		shape += ","
	}
	shape += end
	fortran := "False"
	if flags&npyFortran != 0 {
		fortran = "True"
	}
	item := func(k, v string) string { return q + k + q + colon + v }
	items := []string{item("descr", q+d+q), item("fortran_order", fortran), item("shape", shape)}
	if flags&npyMissing != 0 {
		items = append(items[:int(pos)%3], items[int(pos)%3+1:]...)
	}
	if flags&npyDuplicate != 0 {
		items = append(items, item("shape", shape))
	}
	if flags&npyUnknownKey != 0 {
		items = append(items, item("x", "1"))
	}
	// Rotate the items: numpy sorts its keys, any order is a dict.
	r := int(extra>>8) % len(items)
	if r < 0 {
		r += len(items)
	}
	items = append(items[r:], items[:r]...)
	dict := "{" + strings.Join(items, sep)
	if flags&npyDictComma != 0 {
		dict += ","
	}
	dict += "}"

	// Mutations of the header dict, before it is padded.
	if mut%8 == 1 && len(dict) > 0 {
		i := int(pos) % (len(dict) + 1)
		dict = dict[:i] + ins + dict[i:]
	}
	if mut%8 == 2 && len(dict) > 0 {
		i := int(pos) % len(dict)
		dict = dict[:i] + dict[i+1:]
	}
	if mut%8 == 3 && len(dict) > 0 && ins != "" {
		i := int(pos) % len(dict)
		dict = dict[:i] + ins[:1] + dict[i+1:]
	}
	if mut%8 == 4 {
		dict = dict[:int(pos)%(len(dict)+1)]
	}
	pre := 10
	if major > 1 {
		pre = 12
	}
	h := dict
	if flags&npyNoPadding == 0 {
		h += strings.Repeat(" ", (64-(pre+len(h)+1)%64)%64)
	}
	h += "\n"
	if mut%8 == 5 {
		h = h[:len(h)-1] + ins // no final newline
	}
	minor := byte(0)
	if flags&npyMinor != 0 {
		minor = 1
	}
	file = append([]byte(npyMagic), major, minor)
	if major == 1 {
		file = binary.LittleEndian.AppendUint16(file, uint16(len(h)))
	} else {
		file = binary.LittleEndian.AppendUint32(file, uint32(len(h)))
	}
	if mut%8 == 6 {
		// A wrong header length.
		if major == 1 {
			binary.LittleEndian.PutUint16(file[8:], uint16(len(h)+int(int16(extra))))
		} else {
			binary.LittleEndian.PutUint32(file[8:], uint32(len(h)+int(extra)))
		}
	}
	file = append(file, h...)
	data := nbytes
	if data < 0 || data > npyFuzzMax {
		valid = false
		data = int64(uint32(extra) % 64)
	}
	if flags&npyWrongSize != 0 {
		data += int64(extra % 17)
		data = max(data, 0)
	}
	for i := range data {
		file = append(file, byte(int64(extra)+i*131))
	}
	if mut%8 == 7 {
		// Truncated anywhere.
		file = file[:int(pos)%(len(file)+1)]
	}
	valid = valid && major >= 1 && major <= 3 && flags&npyBreaks == 0 && mut%8 == 0 &&
		!(flags&npyLong != 0 && major == 3 && len(dims) > 0) &&
		!(flags&npyNoComma != 0 && len(dims) == 1) &&
		!(flags&npyWrongSize != 0 && extra%17 != 0)
	return file, valid
}

// FuzzReadNpy builds .npy files from a version, a descr, flags that vary
// or break the header, dims, a mutation of the header (an insertion, a
// deletion, a replacement, a cut, no final newline, a wrong header
// length, a truncated file) and a data length, so that most inputs get
// past the magic into the header parser. Every file must pass
// checkNpyBytes; a well-formed one must be read with its shape and bytes.
func FuzzReadNpy(f *testing.F) {
	type seed struct {
		version, descr uint8
		flags          uint16
		ndim           uint8
		d0, d1, d2, d3 int64
		mut            uint8
		pos            uint16
		ins            string
		extra          int32
	}
	const big = 4611686018427387904
	for _, s := range []seed{
		{ndim: 4, d0: 2, d1: 3, d2: 4, d3: 5},                                  // well-formed, v1 <f4
		{version: 1, descr: 1, ndim: 1, d0: 7},                                 // v2 <f2 (7,)
		{version: 2, descr: 2, ndim: 0},                                        // v3 >f4 scalar
		{descr: 3, flags: npyFortran - 1, ndim: 2, d0: 3, d1: 2, extra: 0x300}, // every variation
		{ndim: 2, d0: 0, d1: 5},                                                // empty
		{ndim: 4, d0: 1, d1: big, d2: 1, d3: 1},                                // f4 dims overflow
		{descr: 1, ndim: 4, d0: 1, d1: big, d2: 1, d3: 1},                      // f2 dims overflow
		{ndim: 3, d0: 1 << 32, d1: 1 << 32, d2: 16, extra: 16},                 // product overflow
		{ndim: 2, d0: 2, d1: -1},                                               // negative dim
		{ndim: 4, d0: 1, d1: 16, d2: 2, d3: 8, mut: 3, pos: 61, ins: "}"},      // (1, 16, 2, 8}
		{ndim: 4, d0: 1, d1: 16, d2: 2, d3: 8, flags: npyList},                 // [1, 16, 2, 8]
		{ndim: 1, d0: 5, flags: npyNoComma},                                    // (5)
		{ndim: 2, d0: 2, d1: 3, flags: npyDuplicate},                           // duplicate key
		{ndim: 2, d0: 2, d1: 3, flags: npyMissing, pos: 1},                     // missing key
		{ndim: 2, d0: 2, d1: 3, flags: npyUnknownKey},                          // unknown key
		{descr: 7, ndim: 2, d0: 2, d1: 3},                                      // <i4
		{descr: 15, ndim: 2, d0: 2, d1: 3},                                     // unknown descr
		{ndim: 2, d0: 2, d1: 3, flags: npyFortran},                             // fortran_order True
		{ndim: 2, d0: 2, d1: 3, mut: 4, pos: 30},                               // truncated header
		{ndim: 2, d0: 2, d1: 3, mut: 7, pos: 40},                               // truncated file
		{ndim: 2, d0: 2, d1: 3, mut: 6, extra: 1000},                           // header length past EOF
		{version: 1, ndim: 2, d0: 2, d1: 3, mut: 6, extra: -1 << 30},           // v2 header length past EOF
		{ndim: 2, d0: 2, d1: 3, mut: 1, pos: 200, ins: " junk"},                // trailing garbage after the dict
		{ndim: 2, d0: 2, d1: 3, mut: 1, pos: 57, ins: " x"},                    // garbage in the dict
		{ndim: 2, d0: 2, d1: 3, mut: 5, ins: " "},                              // no final newline
		{ndim: 2, d0: 2, d1: 3, mut: 2, pos: 0},                                // no '{'
		{ndim: 2, d0: 2, d1: 3, flags: npyWrongSize, extra: 5},                 // trailing data
		{ndim: 2, d0: 2, d1: 3, flags: npyWrongSize, extra: -3},                // truncated data
		{version: 0xf4, ndim: 1, d0: 1},                                        // version 4.0
		{ndim: 1, d0: 1, flags: npyMinor},                                      // version 1.1
		{version: 2, ndim: 2, d0: 2, d1: 3, flags: npyLong},                    // long in v3
	} {
		f.Add(s.version, s.descr, s.flags, s.ndim, s.d0, s.d1, s.d2, s.d3, s.mut, s.pos, s.ins, s.extra)
	}
	f.Fuzz(func(t *testing.T, version, descr uint8, flags uint16, ndim uint8, d0, d1, d2, d3 int64, mut uint8, pos uint16, ins string, extra int32) {
		if len(ins) > 64 {
			ins = ins[:64]
		}
		dims := []int64{d0, d1, d2, d3, d0, d1}[:ndim%7]
		file, valid := npyFuzzFile(version, descr, flags, dims, mut, pos, ins, extra)
		a, err := checkNpyBytes(t, file)
		if !valid {
			return
		}
		if err != nil {
			t.Fatalf("well-formed file refused: %v\n%q", err, file)
		}
		if len(a.Shape) != len(dims) {
			t.Fatalf("shape %v, want %v", a.Shape, dims)
		}
		for i, x := range dims {
			if int64(a.Shape[i]) != x {
				t.Fatalf("shape %v, want %v", a.Shape, dims)
			}
		}
		d := npyFuzzDescrs[int(descr)%len(npyFuzzDescrs)]
		order := binary.ByteOrder(binary.LittleEndian)
		if d[0] == '>' {
			order = binary.BigEndian
		}
		switch x := a.Data.(type) {
		case []float32:
			body := file[len(file)-4*len(x):]
			for i, v := range x {
				if math.Float32bits(v) != order.Uint32(body[4*i:]) {
					t.Fatalf("element %d: bits %#x, want %#x", i, math.Float32bits(v), order.Uint32(body[4*i:]))
				}
			}
			if !strings.HasSuffix(d, "f4") {
				t.Fatalf("float32 for %q", d)
			}
		case []float16.Float16:
			body := file[len(file)-2*len(x):]
			for i, v := range x {
				if v.Bits() != order.Uint16(body[2*i:]) {
					t.Fatalf("element %d: bits %#x, want %#x", i, v.Bits(), order.Uint16(body[2*i:]))
				}
			}
			if !strings.HasSuffix(d, "f2") {
				t.Fatalf("float16 for %q", d)
			}
		}
	})
}
