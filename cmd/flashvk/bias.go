package main

// --bias FILE.npy and --mask FILE.npy: an additive bias on the attention
// scores, or a boolean mask, read from a .npy file (the library's
// Options.Bias; PyTorch SDPA's float or boolean attn_mask), and
// --bias-grad, its gradient (Options.Bias.Grad, Grads.DBias), on run,
// bench and explain.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/reference"
	"github.com/x448/float16"
)

// biasFile is the file of --bias or --mask: its header, read and checked
// before any work, and its values, read once (load) after the plans.
type biasFile struct {
	// flag is "--bias" or "--mask"; path the file as given.
	flag, path string
	head       *npyHead
	// dims is the file's shape (2, 3 or 4 dimensions); shape the bias's,
	// [B or 1, H or 1, Nq or 1, Nk]: the file's with leading 1s.
	dims  []int
	shape [4]int

	mu sync.Mutex
	// The values, once loaded: --bias's as float32 (f16 holds a float16
	// file's as stored), --mask's as keep (true: attend).
	loaded bool
	f32    []float32
	f16    []float16.Float16
	keep   []bool
	// The library's tensors of each storage dtype (tensor), and zero
	// dBias tensors like them (gradTensor).
	tensors, grads map[attention.DType]attention.Tensor
}

// isMask reports whether x is --mask.
func (x *biasFile) isMask() bool { return x.flag == "--mask" }

// openBias reads and checks the header of --bias or --mask (flag) path:
// --bias takes float32 or float16, --mask bool or uint8 (0 or 1), each of
// 2, 3 or 4 positive dimensions [B|1, H|1, Nq|1, Nk] (2-D [Nq|1, Nk] and
// 3-D [H|1, Nq|1, Nk] broadcast over what they leave out). Errors name
// the flag and the file, in one line. The file is opened under ctx (a
// FIFO with no writer stops with ctx's error).
func openBias(ctx context.Context, flag, path string) (*biasFile, error) {
	h, err := await(ctx, func() (*npyHead, error) { return statNpyAny(path) })
	if err != nil {
		err = fmt.Errorf("%s %w", flag, err)
		if errors.As(err, new(npyTypeError)) {
			return nil, usageError{err} // (an element type neither flag takes, as the README says)
		}
		return nil, err
	}
	x := &biasFile{flag: flag, path: path, head: h, dims: h.Shape}
	switch {
	// A file of the other flag's element type or of no bias shape is a
	// usage error (exit status 2), as one whose shape does not fit.
	case flag == "--bias" && h.elem != "":
		return nil, usagef("--bias %s: a %s array: --bias takes an additive float bias (float32 or float16); give a boolean mask to --mask", path, h.elem)
	case flag == "--mask" && h.elem == "":
		return nil, usagef("--mask %s: a %s array: --mask takes a boolean mask (bool, or uint8 0 and 1: true attends); give an additive float bias to --bias", path, h.DType)
	case len(h.Shape) < 2 || len(h.Shape) > 4:
		return nil, usagef("%s %s: shape %s: want 4 dimensions [B|1, H|1, Nq|1, Nk] (or 3, [H|1, Nq|1, Nk], or 2, [Nq|1, Nk])", flag, path, dimsText(h.Shape))
	}
	for _, d := range h.Shape {
		if d <= 0 {
			return nil, usagef("%s %s: shape %s: every dimension must be positive", flag, path, dimsText(h.Shape))
		}
	}
	x.shape = [4]int{1, 1, 1, 1}
	copy(x.shape[4-len(h.Shape):], h.Shape)
	return x, nil
}

// fileType is the file's element type: float32, float16, bool or uint8.
func (x *biasFile) fileType() string { return x.head.typeName() }

// descriptor is how results record the bias: the file's name (without
// its folder, so that results of the same file made elsewhere match),
// its shape as the bias ([B|1,H|1,Nq|1,Nk]) and its element type:
// "mask.npy [1,1,512,512] bool".
func (x *biasFile) descriptor() string {
	return fmt.Sprintf("%s %s %s", filepath.Base(x.path), dimsText(x.shape[:]), x.fileType())
}

// libShape is the bias's shape as the library takes it: Shape{B, S: Nq,
// H, D: Nk} of a contiguous BHSD ([B, H, Nq, Nk]) array.
func (x *biasFile) libShape() attention.Shape {
	return attention.Shape{B: x.shape[0], H: x.shape[1], S: x.shape[2], D: x.shape[3]}
}

// dtype is the bias's dtype in a call of storage dt: a float32 file
// stays float32 (the library takes float32 or the storage type); a
// float16 file and a mask are in dt.
func (x *biasFile) dtype(dt attention.DType) attention.DType {
	if !x.isMask() && x.head.DType == attention.Float32 {
		return attention.Float32
	}
	return dt
}

// check refuses a bias that does not fit a problem of b sequences, hq
// query heads, nq queries and nk keys (with --seqlens the longest
// lengths), naming the shape it wants.
func (x *biasFile) check(b, hq, nq, nk int, packed bool) error {
	s := x.shape
	if (s[0] == 1 || s[0] == b) && (s[1] == 1 || s[1] == hq) && (s[2] == 1 || s[2] == nq) && s[3] == nk {
		return nil
	}
	what := "B, Hq, Nq, Nk"
	if packed {
		what = "B sequences, Hq, the longest Nq, the longest Nk (--seqlens)"
	}
	shape := dimsText(x.dims)
	if len(x.dims) < 4 {
		shape += " (as [B, H, Nq, Nk]: " + dimsText(x.shape[:]) + ")"
	}
	return usagef("%s %s: shape %s does not fit the problem: want [%d,%d,%d,%d] (%s), each of the first three 1 to broadcast",
		x.flag, x.path, shape, b, hq, nq, nk, what)
}

// load reads the file's values, once (ctx stops it). A --mask of uint8
// must hold 0s and 1s only.
func (x *biasFile) load(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.loaded {
		return nil
	}
	a, err := await(ctx, x.head.read)
	if err != nil {
		return fmt.Errorf("%s %w", x.flag, err)
	}
	switch d := a.Data.(type) {
	case []uint8:
		x.keep = make([]bool, len(d))
		for i, v := range d {
			if v > 1 {
				return fmt.Errorf("--mask %s: element %s is %d: a uint8 mask holds 0 (hide the key) and 1 (attend) only", x.path, dimsText(unravel(x.dims, i)), v)
			}
			x.keep[i] = v != 0
		}
	case []float32:
		x.f32 = d
	case []float16.Float16:
		x.f16 = d
		x.f32 = make([]float32, len(d))
		for i, v := range d {
			x.f32[i] = v.Float32()
		}
	}
	x.loaded = true
	return nil
}

// unravel is the index of element i of a C-order array of shape dims.
func unravel(dims []int, i int) []int {
	idx := make([]int, len(dims))
	for k := len(dims) - 1; k >= 0; k-- {
		idx[k] = i % dims[k]
		i /= dims[k]
	}
	return idx
}

// tensor is the bias of a call of storage dt as the library takes it
// (see dtype): a float32 file as read, a float16 file converted to dt (a
// float32 widening is exact; bfloat16 rounds to nearest even), a mask as
// 0 and −Inf (attention.KeepMask). Before load it is a placeholder with
// the shape and dtype only, which planning reads.
func (x *biasFile) tensor(dt attention.DType) attention.Tensor {
	x.mu.Lock()
	defer x.mu.Unlock()
	bt := x.dtype(dt)
	s := x.libShape()
	if !x.loaded {
		var data any
		switch bt {
		case attention.Float16:
			data = []float16.Float16(nil)
		case attention.BFloat16:
			data = []bfloat16.BFloat16(nil)
		default:
			data = []float32(nil)
		}
		return attention.Tensor{Shape: s, Strides: attention.Contiguous(s, attention.BHSD), Data: data}
	}
	if t, ok := x.tensors[bt]; ok {
		return t
	}
	var t attention.Tensor
	switch {
	case x.keep != nil:
		t, _ = attention.KeepMask(x.keep, s, attention.BHSD, bt) // the shape is the keep's
	case bt == attention.Float32:
		t = attention.FromFloat32(x.f32, s, attention.BHSD)
	case bt == attention.Float16:
		t = attention.FromFloat16(x.f16, s, attention.BHSD)
	default:
		t = attention.FromBFloat16(bfloat16.Slice(x.f32), s, attention.BHSD)
	}
	if x.tensors == nil {
		x.tensors = map[attention.DType]attention.Tensor{}
	}
	x.tensors[bt] = t
	return t
}

// gradTensor is a zero dBias tensor for a call of storage dt (shaped and
// typed as the bias), made once: where a call writes dBias into a
// caller's tensor (Benchmark).
func (x *biasFile) gradTensor(dt attention.DType) attention.Tensor {
	x.mu.Lock()
	defer x.mu.Unlock()
	bt := x.dtype(dt)
	if t, ok := x.grads[bt]; ok {
		return t
	}
	t, _ := attention.NewTensor(bt, x.libShape(), attention.BHSD)
	if x.grads == nil {
		x.grads = map[attention.DType]attention.Tensor{}
	}
	x.grads[bt] = t
	return t
}

// option is the library's Options.Bias of a call of storage dt (grad:
// asking for dBias).
func (x *biasFile) option(dt attention.DType, grad bool) *attention.Bias {
	b := &attention.Bias{Tensor: x.tensor(dt), Grad: grad}
	if grad && x.loaded {
		b.GradTensor = x.gradTensor(dt)
	}
	return b
}

// values are the bias the kernels get in a call of storage dt, as the
// float64 reference takes it: row-major [B|1, H|1, Nq|1, Nk] (a mask's
// −Inf included). load must have run.
func (x *biasFile) values(dt attention.DType) []float64 {
	return bhsdFloat64s(x.tensor(dt))
}

// bhsdFloat64s are a tensor's elements in [B, H, S, D] row-major order
// (the order of a contiguous BHSD tensor, the bias's and dBias's), as
// float64.
func bhsdFloat64s(t attention.Tensor) []float64 {
	f := bhsdFloat32s(t)
	out := make([]float64, len(f))
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}

// bhsdFloat32s are a tensor's elements in [B, H, S, D] row-major order.
func bhsdFloat32s(t attention.Tensor) []float32 {
	f := t.Float32s() // [B, S, H, D]
	s := t.Shape
	if s.H == 1 || s.S == 1 {
		return f // the same order
	}
	out := make([]float32, len(f))
	for b := range s.B {
		for h := range s.H {
			for i := range s.S {
				copy(out[((b*s.H+h)*s.S+i)*s.D:][:s.D], f[((b*s.S+i)*s.H+h)*s.D:][:s.D])
			}
		}
	}
	return out
}

// checkFinite refuses, for --check, a bias holding NaN or +Inf (the
// library takes them, IEEE arithmetic deciding what the row gets; the
// float64 reference takes finite values and −Inf only). load must have
// run.
func (x *biasFile) checkFinite() error {
	for i, v := range x.f32 {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 1) {
			return usagef("--check: --bias %s holds %v (element %s): the float64 reference takes finite values and −Inf only (omit --check to run it)",
				x.path, v, dimsText(unravel(x.dims, i)))
		}
	}
	return nil
}

// refBias is the reference's bias of a problem of storage dt. load must
// have run.
func (x *biasFile) refBias(dt attention.DType) *reference.Bias {
	return &reference.Bias{B: x.shape[0], H: x.shape[1], S: x.shape[2], Values: x.values(dt)}
}

// sequenceBias is the reference's bias of sequence b of a packed batch, of n
// rows and keys, from a bias of the longest lengths nk keys per row: its
// rows and keys within the sequence (reference.Bias of one batch).
func sequenceBias(x *reference.Bias, b, n, nk int) *reference.Bias {
	bb := 0
	if x.B > 1 {
		bb = b
	}
	s := min(x.S, n) // 1 (broadcast) or the sequence's rows
	out := &reference.Bias{B: 1, H: x.H, S: s, Values: make([]float64, 0, x.H*s*n)}
	for h := range x.H {
		for i := range s {
			row := ((bb*x.H+h)*x.S + i) * nk
			out.Values = append(out.Values, x.Values[row:row+n]...)
		}
	}
	return out
}

// addSequenceGrad adds sequence b's dBias (in sequenceBias's shape, n rows
// and keys) into the whole dBias db, shaped as x (nk keys per row).
func addSequenceGrad(db []float64, x *reference.Bias, b, n, nk int, seq []float64) {
	bb := 0
	if x.B > 1 {
		bb = b
	}
	s := min(x.S, n)
	for h := range x.H {
		for i := range s {
			row := ((bb*x.H+h)*x.S + i) * nk
			src := seq[(h*s+i)*n:][:n]
			for j, v := range src {
				db[row+j] += v
			}
		}
	}
}

// describe is run's line on the bias of a call of storage dt: the flag
// and file, its type and shape (and as the bias's, where it leaves
// dimensions out), what the library gets, and --bias-grad:
// "--mask mask.npy: bool [512,512] as [1,1,512,512], 0 and −Inf in float32".
func (x *biasFile) describe(dt attention.DType, grad bool) string {
	s := fmt.Sprintf("%s %s: %s %s", x.flag, x.path, x.fileType(), dimsText(x.dims))
	if len(x.dims) < 4 {
		s += " as " + dimsText(x.shape[:])
	}
	bt := x.dtype(dt)
	switch {
	case x.isMask():
		s += fmt.Sprintf(", 0 and −Inf in %s", bt)
	case x.head.DType != bt:
		s += fmt.Sprintf(", converted to %s", bt)
	}
	if grad {
		s += "; dBias asked (--bias-grad)"
	}
	return s
}

// dimsText is a shape as "[1,8,512,512]".
func dimsText(d []int) string { return "[" + joinInts(d) + "]" }

// biasNameRE is what a benchmark name may not hold of a bias descriptor.
var biasNameRE = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// biasName is a bias descriptor in a Go benchmark name:
// "mask.npy [1,1,512,512] bool" → "mask.npy_1x1x512x512_bool".
func biasName(desc string) string {
	return strings.Trim(biasNameRE.ReplaceAllString(strings.ReplaceAll(desc, ",", "x"), "_"), "_")
}

// loadBias checks the flags of the bias (--bias and --mask together,
// --bias-grad without either) and reads the header of its file (once;
// see openBias). It runs before the problem is built.
func (s *shapeFlags) loadBias(ctx context.Context) error {
	switch {
	case s.biasPath != "" && s.maskPath != "":
		return usagef("--bias and --mask go apart: give an additive float bias (--bias) or a boolean mask (--mask), not both (a mask is a bias of 0 and −Inf: fold it into the bias)")
	case s.biasGrad && s.biasPath == "" && s.maskPath == "":
		return usagef("--bias-grad needs --bias or --mask: it asks for the gradient of the bias")
	case s.bias != nil:
		return nil
	}
	flag, path := "--bias", s.biasPath
	if s.maskPath != "" {
		flag, path = "--mask", s.maskPath
	}
	if path == "" {
		return nil
	}
	x, err := openBias(ctx, flag, path)
	if err != nil {
		return err
	}
	s.bias = x
	return nil
}

// biasFlags are the flags of the bias, which decode mode refuses.
var biasFlags = []string{"bias", "mask", "bias-grad"}

// skippedTiles counts, for a problem p and tiles of br query rows × bc
// keys, the query×key tiles of every sequence and query head that the
// causal mask, window and key counts leave a visible pair in (of), and
// those of them whose every visible pair the bias hides (−Inf): the tiles
// the bias leaves nothing to compute in. A packed sequence's tiles are
// those of its own rows and keys. load must have run. (It reads the
// file's values: −Inf stays −Inf in every dtype the library gets, and
// no finite float16 value becomes −Inf in bfloat16.)
func skippedTiles(p problem, br, bc int) (skipped, of int64) {
	x := p.bias
	hidden := func(i int) bool { return math.IsInf(float64(x.f32[i]), -1) }
	if x.keep != nil {
		hidden = func(i int) bool { return !x.keep[i] }
	}
	nk := x.shape[3]
	hb := x.shape[1] // the bias's heads: 1 broadcasts over the Hq
	plain := p
	plain.bias = nil
	mask := plain.params() // the causal mask, window and key counts (Visible)
	for b := range p.B {
		rp := mask
		rows, keys := p.Nq, p.Nk
		seq := b
		if p.packed() {
			rows, keys = p.SeqLens[b], p.SeqLens[b]
			rp.B, rp.Nq, rp.Nk = 1, rows, keys
			if rp.SeqUsedK != nil {
				rp.SeqUsedK = rp.SeqUsedK[b : b+1]
			}
			seq = 0
		}
		bb := 0
		if x.shape[0] > 1 {
			bb = b
		}
		kt := (keys + bc - 1) / bc
		vis, live := make([]bool, kt), make([]bool, kt)
		for h := range hb {
			for t := 0; t < rows; t += br {
				clear(vis)
				clear(live)
				for i := t; i < min(t+br, rows); i++ {
					ri := i
					if x.shape[2] == 1 {
						ri = 0
					}
					row := ((bb*hb+h)*x.shape[2] + ri) * nk
					for j := range keys {
						if !rp.Visible(seq, i, j) {
							continue
						}
						vis[j/bc] = true
						if !hidden(row + j) {
							live[j/bc] = true
						}
					}
				}
				for u := range kt {
					if vis[u] {
						n := int64(p.Hq / hb) // the heads this bias head serves
						of += n
						if !live[u] {
							skipped += n
						}
					}
				}
			}
		}
	}
	return skipped, of
}

// lensLabel is a problem's lengths as a bench point's label says them:
// "N=512", "Nq=1 Nk=4096", "seqlens=300,77".
func lensLabel(p problem) string {
	switch {
	case p.packed():
		return "seqlens=" + compactLens(p.SeqLens, ",")
	case p.Nq != p.Nk:
		return fmt.Sprintf("Nq=%d Nk=%d", p.Nq, p.Nk)
	}
	return fmt.Sprintf("N=%d", p.Nq)
}
