package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/x448/float16"
)

// npyBuild returns a .npy file of the given version (major, minor 0)
// whose header is dict, padded with spaces to a multiple of 64 bytes as
// numpy writes it (unless pad is false) and ended by a newline, followed
// by data bytes of data.
func npyBuild(major byte, dict string, pad bool, data int) []byte {
	pre := 10
	if major > 1 {
		pre = 12
	}
	h := dict
	if pad {
		h += strings.Repeat(" ", (64-(pre+len(h)+1)%64)%64)
	}
	h += "\n"
	b := append([]byte(npyMagic), major, 0)
	if major == 1 {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(h)))
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(h)))
	}
	b = append(b, h...)
	for i := range data {
		b = append(b, byte(i*37+11))
	}
	return b
}

// npyDictOf is a header dict as numpy writes it.
func npyDictOf(descr, shape string) string {
	return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }"
}

// npyCase is a .npy file and what reading it gives: an array of shape
// (err empty) or an error containing err.
type npyCase struct {
	name  string
	file  []byte
	shape []int
	err   string
}

// npyCases are well-formed and malformed .npy files; FuzzNpyBytes seeds
// its corpus with them.
func npyCases() []npyCase {
	v1 := func(dict string, data int) []byte { return npyBuild(1, dict, true, data) }
	f4 := func(shape string, data int) []byte { return v1(npyDictOf("<f4", shape), data) }
	long2 := npyBuild(2, npyDictOf("<f4", "(2,)")+strings.Repeat(" ", 70000), false, 8)
	past := f4("(2, 3)", 24)
	binary.LittleEndian.PutUint16(past[8:], uint16(len(past)))
	past2 := npyBuild(2, npyDictOf("<f4", "(2, 3)"), true, 24)
	binary.LittleEndian.PutUint32(past2[8:], 0xfffffff0)
	valid := f4("(2, 3)", 24)
	pre := 10
	cut := valid[:pre+40] // ends inside the header
	deep := v1("{'descr': [[[[[[['a', '<f4']]]]]]], 'fortran_order': False, 'shape': (2,), }", 8)
	manyDims := f4("("+strings.Repeat("1, ", 65)+")", 4)
	unaligned := npyBuild(1, npyDictOf("<f4", "(2, 3)"), false, 24)
	noNewline := append([]byte(nil), valid...)
	noNewline[pre+len(npyDictOf("<f4", "(2, 3)"))+10] = 'x' // inside the padding
	lastByte := append([]byte(nil), valid...)
	lastByte[len(valid)-25] = ' ' // the newline
	return []npyCase{
		// Well-formed.
		{name: "f4 2-D", file: f4("(2, 3)", 24), shape: []int{2, 3}},
		{name: "f2 1-D v2", file: npyBuild(2, npyDictOf("<f2", "(4,)"), true, 8), shape: []int{4}},
		{name: "big-endian scalar v3", file: npyBuild(3, npyDictOf(">f4", "()"), true, 4), shape: []int{}},
		{name: "empty", file: f4("(0, 5)", 0), shape: []int{0, 5}},
		{name: "4-D", file: f4("(1, 16, 2, 8)", 4*16*2*8), shape: []int{1, 16, 2, 8}},
		{name: "keys reordered, double quotes, no spaces", file: v1(`{"shape":(3,2),"fortran_order":False,"descr":"<f2"}`, 12), shape: []int{3, 2}},
		{name: "trailing comma in tuple", file: f4("(2, 3,)", 24), shape: []int{2, 3}},
		{name: "Python 2 long", file: f4("(2L, 3L)", 24), shape: []int{2, 3}},
		{name: "unaligned header", file: unaligned, shape: []int{2, 3}},

		// The array does not fit the file, or is too large.
		{name: "f4 dims overflow", file: f4("(1, 4611686018427387904, 1, 1)", 0), err: "is larger than the 17179869184 bytes flashvk reads"},
		{name: "f4 dims overflow with data", file: f4("(1, 4611686018427387904, 1, 1)", 64), err: "is larger than the 17179869184 bytes flashvk reads"},
		{name: "f2 dims overflow", file: v1(npyDictOf("<f2", "(1, 4611686018427387904, 1, 1)"), 0), err: "is larger than the 17179869184 bytes flashvk reads"},
		{name: "product overflow", file: f4("(4294967296, 4294967296, 16)", 16), err: "is larger than"},
		{name: "product overflow with a zero", file: f4("(0, 4611686018427387904, 4)", 0), err: "is larger than"},
		{name: "too large", file: f4("(1073741824, 5)", 0), err: "is larger than"},
		{name: "dim past int64", file: f4("(99999999999999999999, 1)", 0), err: "dimension 99999999999999999999 is too large"},
		{name: "truncated data", file: f4("(2, 3)", 20), err: "truncated: shape [2 3] float32 needs 24 data bytes, file has 20"},
		{name: "trailing data", file: f4("(2, 3)", 28), err: "4 bytes of trailing data after the [2 3] float32 array"},

		// Malformed shapes.
		{name: "unclosed tuple", file: v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 16, 2, 8, 99 }", 4*16*2*8), err: "header byte 67: want ',' or ')', found '}'"},
		{name: "list shape", file: f4("[1,16,2,8]", 4*16*2*8), err: "'shape' is the list [1,16,2,8], want a tuple"},
		{name: "negative dim", file: f4("(2, -1)", 0), err: "dimension -1 is negative"},
		{name: "one-element tuple without comma", file: f4("(5)", 20), err: "a one-element shape is written (5,)"},
		{name: "int shape", file: f4("5", 20), err: "'shape' is the integer 5"},
		{name: "float dim", file: f4("(2, 2.5)", 20), err: "want ',' or ')', found '.'"},
		{name: "bool dim", file: f4("(True, 2)", 8), err: "dimension True is not an integer"},
		{name: "string dim", file: f4("('2', 2)", 16), err: "dimension '2' is not an integer"},
		{name: "leading zero", file: f4("(016,)", 64), err: "leading zero"},
		{name: "hex dim", file: f4("(0x10,)", 64), err: "want a separator, found 'x'"},
		{name: "long in v3", file: npyBuild(3, npyDictOf("<f4", "(2L,)"), true, 8), err: "want a separator, found 'L'"},
		{name: "65 dims", file: manyDims, err: "more than 64 values"},
		{name: "shape None", file: f4("None", 0), err: "unexpected name None"},

		// Malformed dicts.
		{name: "duplicate key", file: v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (2,), }", 8), err: "duplicate key 'shape'"},
		{name: "missing key", file: v1("{'descr': '<f4', 'shape': (2,), }", 8), err: "the header has no 'fortran_order' key"},
		{name: "unknown key", file: v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1, }", 8), err: "unknown key 'x'"},
		{name: "int key", file: v1("{1: '<f4', 'fortran_order': False, 'shape': (2,), }", 8), err: "key 1 is not a string"},
		{name: "trailing garbage in the dict", file: v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,) junk}", 8), err: "want ',' or '}', found 'j'"},
		{name: "trailing garbage after the dict", file: v1(npyDictOf("<f4", "(2,)")+" x", 8), err: "want only spaces and a newline after the dict, found 'x'"},
		{name: "two commas", file: v1("{'descr': '<f4',, 'fortran_order': False, 'shape': (2,), }", 8), err: "want a value, found ','"},
		{name: "missing colon", file: v1("{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }", 8), err: "want ':'"},
		{name: "not a dict", file: v1("('<f4', False, (2,))", 8), err: "want '{' (a dict), found '('"},
		{name: "leading space", file: v1(" "+npyDictOf("<f4", "(2,)"), 8), err: "want '{' (a dict), found a space"},
		{name: "unclosed dict", file: v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), ", 8), err: "found the end of the header"},
		{name: "unbalanced quotes", file: v1("{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", 8), err: "header byte 17: want a separator, found 'f'"},
		{name: "unterminated string", file: v1("{'descr': '<f4", 8), err: "header byte 10: unterminated string"},
		{name: "escape in string", file: v1(npyDictOf(`<f\x34`, "(2,)"), 8), err: "want a plain ASCII string"},
		{name: "non-ASCII", file: npyBuild(3, npyDictOf("<f4", "(2,)")+"é", true, 8), err: "found byte 0xc3"},
		{name: "tab", file: v1("{'descr':\t'<f4', 'fortran_order': False, 'shape': (2,), }", 8), err: "found byte 0x09"},
		{name: "newline inside", file: v1("{'descr': '<f4',\n'fortran_order': False, 'shape': (2,), }", 8), err: "found byte 0x0a"},
		{name: "nested too deep", file: deep, err: "nested more than 4 deep"},

		// Values of the wrong kind.
		{name: "unknown descr", file: v1(npyDictOf("<x9", "(2,)"), 8), err: `dtype unknown ("<x9") is not supported`},
		{name: "float64", file: v1(npyDictOf("<f8", "(2,)"), 16), err: "dtype float64"},
		{name: "structured descr", file: v1("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8), err: "structured dtypes are not supported"},
		{name: "descr int", file: v1("{'descr': 4, 'fortran_order': False, 'shape': (2,), }", 8), err: "'descr' is 4, want a string"},
		{name: "fortran_order True", file: v1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24), err: "Fortran-order array"},
		{name: "fortran_order 0", file: v1("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", 24), err: "'fortran_order' is 0, want True or False"},

		// Malformed preambles and header lengths.
		{name: "no magic", file: []byte("This is not a numpy file\n"), err: "no .npy magic"},
		{name: "empty file", file: nil, err: "no .npy magic"},
		{name: "magic only", file: []byte(npyMagic + "\x01"), err: "the file ends after 7 bytes, inside the preamble"},
		{name: "v2 short preamble", file: []byte(npyMagic + "\x02\x00\x10\x00"), err: "inside the preamble"},
		{name: "version 1.1", file: append([]byte(npyMagic+"\x01\x01"), valid[8:]...), err: "unsupported .npy version 1.1"},
		{name: "version 4.0", file: append([]byte(npyMagic+"\x04\x00"), valid[8:]...), err: "unsupported .npy version 4.0"},
		{name: "truncated header", file: cut, err: "header length 118 runs past the end of the file (40 bytes after the 10-byte preamble)"},
		{name: "header length past EOF", file: past, err: "runs past the end of the file"},
		{name: "v2 header length past EOF", file: past2, err: "header length 4294967280 runs past the end of the file"},
		{name: "header too long", file: long2, err: "header length 70058 is more than the 65535 bytes flashvk reads"},
		{name: "empty header", file: []byte(npyMagic + "\x01\x00\x00\x00"), err: "empty header"},
		{name: "no final newline", file: lastByte, err: "does not end with a newline"},
		{name: "garbage in the padding", file: noNewline, err: "want only spaces and a newline after the dict, found 'x'"},
		{name: "spaces only", file: v1(strings.Repeat(" ", 50), 0), err: "want '{' (a dict), found a space"},
	}
}

// TestNpyHeaders reads each case both from a file and from memory: the
// same array or the same one-line error naming the file, and never more
// allocated than the file's size justifies.
func TestNpyHeaders(t *testing.T) {
	dir := t.TempDir()
	for _, c := range npyCases() {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "x.npy")
			if err := os.WriteFile(path, c.file, 0o600); err != nil {
				t.Fatal(err)
			}
			a, err := readNpy(path)
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			b, berr := readNpyBytes(path, c.file)
			runtime.ReadMemStats(&ms1)
			if alloc := ms1.TotalAlloc - ms0.TotalAlloc; alloc > uint64(2*len(c.file))+64<<10 {
				t.Errorf("allocated %d bytes for a %d-byte file", alloc, len(c.file))
			}
			if (err == nil) != (berr == nil) || err != nil && err.Error() != berr.Error() {
				t.Errorf("file and memory differ: %v; %v", err, berr)
			}
			if c.err == "" {
				if err != nil {
					t.Fatalf("error %v, want shape %v", err, c.shape)
				}
				if !reflect.DeepEqual(a.Shape, c.shape) || !reflect.DeepEqual(b.Shape, c.shape) {
					t.Fatalf("shapes %v and %v, want %v", a.Shape, b.Shape, c.shape)
				}
				return
			}
			if err == nil {
				t.Fatalf("read shape %v, want an error containing %q", a.Shape, c.err)
			}
			msg := err.Error()
			if a != nil || !strings.HasPrefix(msg, path+": ") || strings.ContainsAny(msg, "\n\r") || !strings.Contains(msg, c.err) {
				t.Errorf("error %q, want one line starting with %q containing %q", msg, path+": ", c.err)
			}
		})
	}
}

// readNpyBytes reads a .npy file held in memory, named path in errors.
func readNpyBytes(path string, b []byte) (*npyArray, error) {
	h, err := parseNpy(path, bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	return h.readFrom(bytes.NewReader(b), int64(len(b)))
}

// TestNpyChanged reads data from a file that changed after its header
// was read: shorter or longer than the header says, or shorter than its
// size claims.
func TestNpyChanged(t *testing.T) {
	b := npyBuild(1, npyDictOf("<f4", "(2, 3)"), true, 24)
	h, err := parseNpy("x.npy", bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    []byte
		size int64
		want string
	}{
		{b[:len(b)-4], int64(len(b)), "x.npy: truncated while its data was read (the file changed after its header was read)"},
		{b, int64(len(b)) - 4, "x.npy: truncated: shape [2 3] float32 needs 24 data bytes, file has 20 (the file changed after its header was read)"},
		{b, int64(len(b)) + 4, "x.npy: 4 bytes of trailing data after the [2 3] float32 array (the file changed after its header was read)"},
		{b, 5, "x.npy: truncated: shape [2 3] float32 needs 24 data bytes, file has 0 (the file changed after its header was read)"},
	} {
		a, err := h.readFrom(bytes.NewReader(c.r), c.size)
		if a != nil || err == nil || err.Error() != c.want {
			t.Errorf("error %v, want %s", err, c.want)
		}
	}
}

// TestNpyValues checks the values read in either byte order against the
// bytes of the file.
func TestNpyValues(t *testing.T) {
	for _, c := range []struct {
		descr string
		order binary.ByteOrder
	}{{"<f4", binary.LittleEndian}, {">f4", binary.BigEndian}, {"<f2", binary.LittleEndian}, {">f2", binary.BigEndian}} {
		b := npyBuild(1, npyDictOf(c.descr, "(3, 1)"), true, 3*int(c.descr[2]-'0'))
		a, err := readNpyBytes("x.npy", b)
		if err != nil {
			t.Fatalf("%s: %v", c.descr, err)
		}
		body := b[len(b)-3*int(c.descr[2]-'0'):]
		for i := range 3 {
			switch x := a.Data.(type) {
			case []float32:
				if got, want := math.Float32bits(x[i]), c.order.Uint32(body[4*i:]); got != want {
					t.Errorf("%s [%d]: bits %#x, want %#x", c.descr, i, got, want)
				}
			case []float16.Float16:
				if got, want := x[i].Bits(), c.order.Uint16(body[2*i:]); got != want {
					t.Errorf("%s [%d]: bits %#x, want %#x", c.descr, i, got, want)
				}
			}
		}
	}
}

// TestNpyFixtures parses the headers numpy wrote for the fixtures (with
// numpy's growth padding).
func TestNpyFixtures(t *testing.T) {
	paths, _ := filepath.Glob("testdata/*.npy")
	for _, p := range paths {
		if strings.HasSuffix(p, "garbage.npy") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		_, start, end, err := npyPreamble(b[:12], int64(len(b)))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if _, err := parseNpyDict(b[start:end], true); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestNpyWriteRead writes arrays with the package's writer and reads them
// back: the same shape and bits.
func TestNpyWriteRead(t *testing.T) {
	dir := t.TempDir()
	for _, shape := range [][]int{{}, {0}, {5}, {2, 3}, {1, 2, 0, 4}, {2, 1, 3, 2}} {
		n := 1
		for _, s := range shape {
			n *= s
		}
		f32 := make([]float32, n)
		f16 := make([]float16.Float16, n)
		for i := range n {
			f32[i] = float32(i) - 1.25
			f16[i] = float16.Fromfloat32(float32(i) * 0.5)
		}
		for _, data := range []any{f32, f16} {
			p := filepath.Join(dir, "w.npy")
			if err := writeNpy(p, shape, data); err != nil {
				t.Fatal(err)
			}
			a, err := readNpy(p)
			if err != nil {
				t.Fatalf("%v %T: %v", shape, data, err)
			}
			if len(a.Shape) != len(shape) || (len(shape) > 0 && !reflect.DeepEqual(a.Shape, shape)) || !reflect.DeepEqual(a.Data, data) {
				t.Errorf("%v %T: read %v %v", shape, data, a.Shape, a.Data)
			}
		}
	}
}

// TestNpyTooLarge refuses a file over maxNpyBytes before reading it (a
// sparse file, where the file system allows).
func TestNpyTooLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.npy")
	if err := os.WriteFile(p, npyBuild(1, npyDictOf("<f4", "(2,)"), true, 8), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, maxNpyBytes+1); err != nil {
		t.Skip(err)
	}
	if _, err := readNpy(p); err == nil || !strings.Contains(err.Error(), "is larger than the 17179869184 bytes flashvk reads") {
		t.Errorf("error %v", err)
	}
}
