package attentiontest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/reference"
	"github.com/x448/float16"
)

// The KV-cache (decoding) suite: Engine.ForwardKVCache, ForwardKVCacheInto
// and ForwardKVCacheDevice on contiguous and paged caches, checked against
// the float64 reference run sequence by sequence over each sequence's first
// SeqLens[b]+New cache rows (gathered from the float64 copies of the stored
// inputs, the appended rows taken from newK and newV), with the tolerances
// of the forward suite (fp32: rel_l2 ≤ Float32Tol, the LSE's as
// lseTolerance where its scores cancel; fp16 and bf16: twice the
// PyTorch-style baseline in the same type, with its floor).
//
// Every cache row past a sequence's length (the rows the append is to
// write included), every block of the pool no table names and the padding
// of strided views hold NaN, so a read of any of them shows in the outputs;
// O and LSE are NaN before each call, so an unwritten output shows too.
// After each call the cache must equal, bit for bit, the cache before it
// with newK and newV copied into the appended rows, and SeqLens must have
// advanced by the rows appended.

// KVCase is one problem of the KV-cache suite (Window, Softcap and ALiBi
// as Case's: the reference of sequence b has its slopes, Slopes).
type KVCase struct {
	Name                  string
	B, Hq, Hkv, Nq, D, Dv int
	// Nmax is the rows a sequence can hold: a contiguous cache is
	// [B, Nmax, Hkv, D]; a paged one gives every sequence ⌈Nmax/BlockSize⌉
	// blocks in its table (its capacity is that many whole blocks).
	Nmax int
	// BlockSize > 0 makes the cache paged: a pool of
	// B·⌈Nmax/BlockSize⌉ + Extra blocks, handed out in shuffled order, and
	// table entries past each sequence's blocks set to −1.
	BlockSize, Extra int
	// Shared maps every sequence's first block to one physical block (a
	// prefix shared read-only: each sequence then holds ≥ BlockSize rows).
	Shared bool
	// Junk sets the table entries past each sequence's blocks to
	// out-of-range block numbers instead of −1 (they must not be read).
	Junk bool
	// New rows are appended to every sequence (0: no append).
	New int
	// Lens are the cached lengths before the call; nil draws them: one
	// sequence empty, one full (capacity − New), the others uniform, in
	// shuffled order.
	Lens   []int32
	Causal bool
	Align  attention.Alignment
	Scale  float32
	// Window, Softcap and ALiBi (0 none, 1 per head, 2 per sequence and
	// head) as Case's.
	Window  *attention.Window
	Softcap float32
	ALiBi   int
	// Layout of q, the cache, newK, newV and O.
	Layout attention.Layout
	// View places the cache and O inside larger buffers (padding after
	// every row and after every batch or block): strided views, and writes
	// outside O's view are caught.
	View bool
}

func (c KVCase) String() string {
	s := fmt.Sprintf("B%d_Hq%d_Hkv%d_Nq%d_Nmax%d_d%d", c.B, c.Hq, c.Hkv, c.Nq, c.Nmax, c.D)
	if c.Dv != c.D {
		s += fmt.Sprintf("_dv%d", c.Dv)
	}
	if c.paged() {
		s += fmt.Sprintf("_bs%d", c.BlockSize)
	}
	if c.Shared {
		s += "_shared"
	}
	if c.New > 0 {
		s += fmt.Sprintf("_new%d", c.New)
	}
	if c.Causal {
		s += "_causal-" + c.Align.String()
	}
	if c.Layout == attention.BHSD {
		s += "_bhsd"
	}
	if c.View {
		s += "_view"
	}
	if c.Scale != 0 {
		s += fmt.Sprintf("_scale%g", c.Scale)
	}
	s += optionSuffix(c.Window, c.Softcap, c.ALiBi, nil)
	if c.Name != "" {
		s = c.Name + "/" + s
	}
	return s
}

func (c KVCase) options() attention.Options {
	return attention.Options{Scale: c.Scale, Causal: c.Causal, Align: c.Align, Window: c.Window, Softcap: c.Softcap, ALiBi: c.Slopes()}
}

// Slopes are the case's ALiBi slopes (Case.Slopes of its B sequences and
// Hq heads); nil without ALiBi.
func (c KVCase) Slopes() []float32 { return Case{B: c.B, Hq: c.Hq, ALiBi: c.ALiBi}.Slopes() }

// seq is sequence b of n rows (after the append) as a one-sequence Case
// of the conformance table: its keys are its n rows, and its ALiBi slopes
// sequence b's.
func (c KVCase) seq(b, n int) Case {
	return Case{B: 1, Hq: c.Hq, Hkv: c.Hkv, Nq: c.Nq, Nk: n, D: c.D, Dv: c.Dv, Causal: c.Causal, Align: c.Align, Scale: c.Scale,
		Window: c.Window, Softcap: c.Softcap, ALiBi: c.ALiBi, alibiBatch0: b}
}

func (c KVCase) paged() bool { return c.BlockSize > 0 }

// maxBlocks is the number of table entries per sequence (1 when contiguous).
func (c KVCase) maxBlocks() int {
	if !c.paged() {
		return 1
	}
	return (c.Nmax + c.BlockSize - 1) / c.BlockSize
}

// pageSize is the rows per block (Nmax when contiguous).
func (c KVCase) pageSize() int {
	if !c.paged() {
		return c.Nmax
	}
	return c.BlockSize
}

// pages is the number of blocks in the cache tensors (B when contiguous).
func (c KVCase) pages() int {
	if !c.paged() {
		return c.B
	}
	return c.B*c.maxBlocks() + c.Extra
}

// capacity is the rows one sequence can hold.
func (c KVCase) capacity() int { return c.maxBlocks() * c.pageSize() }

// KVCases is the KV-cache conformance table: contiguous and paged caches
// (block sizes 16 and 5, shuffled tables, spare blocks, a shared prefix
// block, junk past the lengths), lengths from 0 to full, Nq 1, 2, 4 and
// 16, GQA groups 1, 2, 4 and 8, Dv < D and Dv > D, the three masks, BSHD,
// BHSD and strided views, awkward capacities (1, 17, 127, 129, 300), and
// appends of 1 and 4 rows; then the options: sliding windows (causal
// bottom-right as Mistral, on both sides, wider than the cache, over a
// long cache, leaving rows empty), softcap (50 with a window, as Gemma
// 2), ALiBi per head and per sequence and head, and all three together.
//
// Most cases share D = Dv = 32, and the others few query rows per kv
// head (group·Nq), so that kernels specialised per head dims and rows per
// workgroup (Vulkan's decode) build few pipelines: on a software driver
// (lavapipe) building them dominates the suite's time.
func KVCases() []KVCase {
	tl, br, bhsd := attention.TopLeft, attention.BottomRight, attention.BHSD
	win := func(l, r int) *attention.Window { return &attention.Window{Left: l, Right: r} }
	return []KVCase{
		// Contiguous caches, no append.
		{Name: "decode", B: 4, Hq: 8, Hkv: 8, Nq: 1, D: 32, Dv: 32, Nmax: 127},
		{Name: "decode", B: 3, Hq: 8, Hkv: 2, Nq: 1, D: 32, Dv: 32, Nmax: 129, Causal: true, Align: br},
		{Name: "mqa", B: 3, Hq: 8, Hkv: 1, Nq: 1, D: 32, Dv: 32, Nmax: 300, Causal: true, Align: br},
		{Name: "spec", B: 3, Hq: 8, Hkv: 2, Nq: 4, D: 32, Dv: 32, Nmax: 300, Causal: true, Align: br},
		{Name: "chunk", B: 4, Hq: 8, Hkv: 8, Nq: 16, D: 32, Dv: 32, Nmax: 129, Causal: true, Align: tl},
		{Name: "nmax1", B: 3, Hq: 4, Hkv: 1, Nq: 2, D: 32, Dv: 32, Nmax: 1, Causal: true, Align: br},
		{Name: "dv", B: 2, Hq: 4, Hkv: 4, Nq: 4, D: 32, Dv: 16, Nmax: 17, Causal: true, Align: br},
		{Name: "bhsd", B: 3, Hq: 8, Hkv: 2, Nq: 4, D: 32, Dv: 32, Nmax: 127, Layout: bhsd, Causal: true, Align: br},
		{Name: "view", B: 2, Hq: 4, Hkv: 4, Nq: 2, D: 32, Dv: 32, Nmax: 60, View: true, Causal: true, Align: tl},
		{Name: "scale", B: 2, Hq: 2, Hkv: 2, Nq: 16, D: 32, Dv: 32, Nmax: 40, Scale: -0.7},
		// Paged caches, no append.
		{Name: "paged", B: 4, Hq: 8, Hkv: 2, Nq: 1, D: 32, Dv: 32, Nmax: 129, BlockSize: 16, Extra: 5, Causal: true, Align: br},
		{Name: "paged", B: 3, Hq: 8, Hkv: 8, Nq: 4, D: 32, Dv: 16, Nmax: 37, BlockSize: 5, Extra: 3, Causal: true, Align: tl},
		{Name: "paged", B: 2, Hq: 4, Hkv: 4, Nq: 2, D: 32, Dv: 32, Nmax: 100, BlockSize: 16, Extra: 2, Layout: bhsd, View: true, Causal: true, Align: br},
		{Name: "paged-junk", B: 5, Hq: 4, Hkv: 2, Nq: 2, D: 32, Dv: 32, Nmax: 17, BlockSize: 5, Extra: 1, Junk: true},
		{Name: "shared", B: 3, Hq: 8, Hkv: 2, Nq: 4, D: 32, Dv: 32, Nmax: 64, BlockSize: 16, Extra: 2, Shared: true, Causal: true, Align: br},
		// Append, then attend.
		{Name: "append", B: 4, Hq: 8, Hkv: 2, Nq: 1, New: 1, D: 32, Dv: 32, Nmax: 127, Causal: true, Align: br},
		{Name: "append", B: 3, Hq: 8, Hkv: 8, Nq: 4, New: 4, D: 32, Dv: 32, Nmax: 17, Causal: true, Align: br},
		{Name: "append", B: 3, Hq: 4, Hkv: 4, Nq: 1, New: 1, D: 16, Dv: 32, Nmax: 1},
		{Name: "append", B: 2, Hq: 8, Hkv: 1, Nq: 16, New: 4, D: 32, Dv: 32, Nmax: 129, Layout: bhsd, Causal: true, Align: tl},
		{Name: "append", B: 2, Hq: 4, Hkv: 4, Nq: 2, New: 4, D: 32, Dv: 32, Nmax: 50, View: true, Causal: true, Align: br},
		{Name: "append-paged", B: 4, Hq: 8, Hkv: 8, Nq: 1, New: 1, D: 64, Dv: 64, Nmax: 129, BlockSize: 16, Extra: 4, Causal: true, Align: br},
		{Name: "append-paged", B: 3, Hq: 4, Hkv: 4, Nq: 4, New: 4, D: 32, Dv: 16, Nmax: 33, BlockSize: 5, Extra: 3, Layout: bhsd, Causal: true, Align: br},
		{Name: "append-paged", B: 3, Hq: 4, Hkv: 4, Nq: 2, New: 1, D: 32, Dv: 32, Nmax: 80, BlockSize: 5, Extra: 2, View: true},
		{Name: "append-shared", B: 3, Hq: 8, Hkv: 8, Nq: 4, New: 4, D: 32, Dv: 32, Nmax: 48, BlockSize: 16, Extra: 1, Shared: true, Causal: true, Align: br},
		// Options: sliding windows (Mistral, Gemma 2's local layers),
		// softcap (Gemma 2), ALiBi (BLOOM, MPT).
		{Name: "window", B: 4, Hq: 8, Hkv: 2, Nq: 1, New: 1, D: 32, Dv: 32, Nmax: 300, Causal: true, Align: br, Window: win(64, 0)},
		{Name: "window-long", B: 2, Hq: 4, Hkv: 4, Nq: 1, D: 32, Dv: 32, Nmax: 700, Causal: true, Align: br, Window: win(40, 0), Lens: []int32{700, 333}},
		{Name: "window-paged", B: 3, Hq: 8, Hkv: 2, Nq: 4, New: 4, D: 32, Dv: 32, Nmax: 129, BlockSize: 16, Extra: 3, Causal: true, Align: br, Window: win(16, 0)},
		{Name: "window-both", B: 3, Hq: 4, Hkv: 4, Nq: 4, D: 32, Dv: 32, Nmax: 100, Align: br, Window: win(8, 3)},
		{Name: "window-both", B: 2, Hq: 4, Hkv: 2, Nq: 16, D: 32, Dv: 32, Nmax: 40, Align: tl, Window: win(1, 1), Lens: []int32{5, 40}},
		{Name: "window-empty", B: 3, Hq: 4, Hkv: 2, Nq: 8, D: 32, Dv: 32, Nmax: 20, Causal: true, Align: br, Window: win(2, 0), Lens: []int32{0, 3, 20}},
		{Name: "window-wide", B: 2, Hq: 4, Hkv: 2, Nq: 2, New: 2, D: 32, Dv: 32, Nmax: 30, Causal: true, Align: br, Window: win(5000, 0)},
		{Name: "gemma2", B: 3, Hq: 8, Hkv: 4, Nq: 1, New: 1, D: 32, Dv: 32, Nmax: 200, BlockSize: 16, Extra: 2, Scale: 4, Softcap: 50, Causal: true, Align: br, Window: win(32, 0)},
		{Name: "softcap", B: 2, Hq: 4, Hkv: 4, Nq: 2, D: 32, Dv: 32, Nmax: 60, Scale: 1, Softcap: 5, Causal: true, Align: br},
		{Name: "alibi", B: 3, Hq: 8, Hkv: 8, Nq: 1, New: 1, D: 32, Dv: 32, Nmax: 127, Causal: true, Align: br, ALiBi: 1},
		{Name: "alibi", B: 3, Hq: 8, Hkv: 2, Nq: 4, D: 32, Dv: 32, Nmax: 129, BlockSize: 5, Extra: 2, Causal: true, Align: br, ALiBi: 2},
		// Long caches, few workgroups: several splits, each sequence's
		// starting at its first visible row (on Vulkan), some empty.
		{Name: "window-split", B: 2, Hq: 4, Hkv: 1, Nq: 2, D: 32, Dv: 32, Nmax: 700, Causal: true, Align: br, Window: win(300, 0), Lens: []int32{650, 100}},
		{Name: "window-split", B: 1, Hq: 4, Hkv: 1, Nq: 2, New: 2, D: 32, Dv: 32, Nmax: 700, BlockSize: 16, Extra: 3, Causal: true, Align: br, Window: win(250, 0), Softcap: 30, ALiBi: 2, Lens: []int32{640}},
		{Name: "all", B: 2, Hq: 4, Hkv: 1, Nq: 2, New: 2, D: 32, Dv: 32, Nmax: 50, Layout: bhsd, View: true, Causal: true, Align: br, Window: win(10, 0), Softcap: 3, ALiBi: 2},
	}
}

// RunKVCache runs the KV-cache suite: every case of KVCases on every dtype
// the engine supports, in the host (ForwardKVCacheInto, ForwardKVCache)
// and device (ForwardKVCacheDevice, twice: bitwise identical) forms, then
// the argument checks (RunKVCacheErrors).
func RunKVCache(t *testing.T, e *attention.Engine) {
	t.Run("forward", func(t *testing.T) { RunKVCacheCases(t, e, KVCases()) })
	t.Run("errors", func(t *testing.T) { RunKVCacheErrors(t, e) })
}

// RunKVCacheCases checks the given cases on every dtype the engine supports.
func RunKVCacheCases(t *testing.T, e *attention.Engine, cases []KVCase) {
	for _, dt := range dtypes(e) {
		for _, c := range cases {
			t.Run(dt.String()+"/"+c.String(), func(t *testing.T) {
				seed := Seed(t)
				in := mustInputs(t, c, dt, seed)
				t.Logf("seed %d; SeqLens before the call %v, block table %v", seed, in.SeqLens, in.Table)
				ref := in.Reference(t)
				t.Run("into", func(t *testing.T) { in.check(t, ref, in.runHost(t, e, false), seed) })
				t.Run("alloc", func(t *testing.T) { in.check(t, ref, in.runHost(t, e, true), seed) })
				t.Run("device", func(t *testing.T) {
					first := in.runDevice(t, e)
					in.check(t, ref, first, seed)
					again := in.runDevice(t, e)
					if !slices.Equal(bitsOf(first.o), bitsOf(again.o)) {
						t.Errorf("o: a second identical call differs bitwise from the first")
					}
					if !slices.Equal(bitsOf(first.lse), bitsOf(again.lse)) {
						t.Errorf("lse: a second identical call differs bitwise from the first")
					}
				})
			})
		}
	}
}

func mustInputs(t testing.TB, c KVCase, dt attention.DType, seed uint64) *KVInputs {
	t.Helper()
	in, err := NewKVInputs(c, dt, seed)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// KVInputs are one KV-cache case's operands, drawn from a seed: q, the
// cache as it is before the call (in k0 and v0; K and V describe its
// views), newK and newV, plus what the call must leave.
type KVInputs struct {
	Case  KVCase
	DType attention.DType

	Q, K, V, NewK, NewV attention.Tensor // K, V: the cache's views (Data: k0, v0)
	SeqLens, Table      []int32          // before the call

	q0, nk0, nv0 []uint32 // bits of Q, NewK, NewV: inputs are never written
	k0, v0       any      // the cache buffers before the call
	wantK, wantV any      // … and after it (the append applied)
	appK, appV   map[int]bool

	q64        []float64   // Q, dense BSHD
	seqK, seqV [][]float64 // per sequence: its rows after the append, [Len, Hkv, D]
}

// NewKVInputs draws a case's inputs; the error names a malformed case.
func NewKVInputs(c KVCase, dt attention.DType, seed uint64) (*KVInputs, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	in := &KVInputs{Case: c, DType: dt}
	lo, hi := 0, c.capacity()-c.New
	if c.Shared {
		lo = c.BlockSize
	}
	if hi < lo || c.New < 0 {
		return nil, fmt.Errorf("kv case %v: no length fits (lengths %d … %d)", c, lo, hi)
	}
	switch {
	case c.Lens != nil:
		if len(c.Lens) != c.B {
			return nil, fmt.Errorf("kv case %v: %d lengths for %d sequences", c, len(c.Lens), c.B)
		}
		in.SeqLens = slices.Clone(c.Lens)
	default:
		in.SeqLens = make([]int32, c.B)
		for b := range in.SeqLens {
			n := lo + rng.IntN(hi-lo+1)
			switch b {
			case 0:
				n = lo
			case 1:
				n = hi
			}
			in.SeqLens[b] = int32(n)
		}
		rng.Shuffle(c.B, func(i, j int) { in.SeqLens[i], in.SeqLens[j] = in.SeqLens[j], in.SeqLens[i] })
	}
	for _, n := range in.SeqLens {
		if int(n) < lo || int(n) > hi {
			return nil, fmt.Errorf("kv case %v: length %d outside %d … %d", c, n, lo, hi)
		}
	}
	if c.paged() {
		mb := c.maxBlocks()
		perm := rng.Perm(c.pages())
		next := 0
		take := func() int32 { next++; return int32(perm[next-1]) }
		shared := int32(-1)
		if c.Shared {
			shared = take()
		}
		in.Table = make([]int32, c.B*mb)
		for b := range c.B {
			need := (int(in.SeqLens[b]) + c.New + c.BlockSize - 1) / c.BlockSize
			for blk := range mb {
				x := &in.Table[b*mb+blk]
				switch {
				case blk >= need && c.Junk:
					*x = int32(c.pages() + blk)
					if blk%2 == 1 {
						*x = math.MaxInt32 - int32(b)
					}
				case blk >= need:
					*x = -1
				case c.Shared && blk == 0:
					*x = shared
				default:
					*x = take()
				}
			}
		}
	}

	l := c.Layout
	qs := attention.Shape{B: c.B, S: c.Nq, H: c.Hq, D: c.D}
	in.Q = attention.Tensor{Shape: qs, Strides: attention.Contiguous(qs, l), Data: alloc(dt, qs.Len())}
	fillRandom(in.Q, rng)
	in.q64 = in.Q.Float64s()
	in.q0 = rawBits(in.Q.Data)

	// The cache: NaN everywhere (padding, spare blocks, rows past each
	// length), random values in the rows each sequence holds.
	in.K = viewTensor(dt, attention.Shape{B: c.pages(), S: c.pageSize(), H: c.Hkv, D: c.D}, l, c.View)
	in.V = viewTensor(dt, attention.Shape{B: c.pages(), S: c.pageSize(), H: c.Hkv, D: c.Dv}, l, c.View)
	for _, t := range []attention.Tensor{in.K, in.V} {
		for i := range elems(t.Data) {
			set(t.Data, i, nan)
		}
		for b := range c.B {
			for j := range int(in.SeqLens[b]) {
				pg, r := in.row(b, j)
				for h := range c.Hkv {
					off := t.Strides.Offset(pg, r, h)
					for d := range t.Shape.D {
						set(t.Data, off+d, float32(rng.NormFloat64()))
					}
				}
			}
		}
	}
	in.k0, in.v0 = in.K.Data, in.V.Data

	in.wantK, in.wantV = cloneBuf(in.k0), cloneBuf(in.v0)
	in.appK, in.appV = map[int]bool{}, map[int]bool{}
	if c.New > 0 {
		ks := attention.Shape{B: c.B, S: c.New, H: c.Hkv, D: c.D}
		vs := attention.Shape{B: c.B, S: c.New, H: c.Hkv, D: c.Dv}
		in.NewK = attention.Tensor{Shape: ks, Strides: attention.Contiguous(ks, l), Data: alloc(dt, ks.Len())}
		in.NewV = attention.Tensor{Shape: vs, Strides: attention.Contiguous(vs, l), Data: alloc(dt, vs.Len())}
		fillRandom(in.NewK, rng)
		fillRandom(in.NewV, rng)
		in.nk0, in.nv0 = rawBits(in.NewK.Data), rawBits(in.NewV.Data)
		for b := range c.B {
			for r := range c.New {
				pg, row := in.row(b, int(in.SeqLens[b])+r)
				for h := range c.Hkv {
					for _, x := range []struct {
						dst, src attention.Tensor
						want     any
						app      map[int]bool
					}{{in.K, in.NewK, in.wantK, in.appK}, {in.V, in.NewV, in.wantV, in.appV}} {
						i, j, n := x.dst.Strides.Offset(pg, row, h), x.src.Strides.Offset(b, r, h), x.dst.Shape.D
						rawCopy(x.want, i, x.src.Data, j, n)
						for d := range n {
							x.app[i+d] = true
						}
					}
				}
			}
		}
	}

	// The reference's inputs: each sequence's rows after the append, read
	// from the stored values.
	in.seqK, in.seqV = make([][]float64, c.B), make([][]float64, c.B)
	for b := range c.B {
		n := int(in.SeqLens[b]) + c.New
		in.seqK[b], in.seqV[b] = make([]float64, n*c.Hkv*c.D), make([]float64, n*c.Hkv*c.Dv)
		for j := range n {
			for h := range c.Hkv {
				for _, x := range []struct {
					cache, add attention.Tensor
					out        []float64
				}{{in.K, in.NewK, in.seqK[b]}, {in.V, in.NewV, in.seqV[b]}} {
					d := x.cache.Shape.D
					src, off := x.cache.Data, 0
					if j < int(in.SeqLens[b]) {
						pg, r := in.row(b, j)
						off = x.cache.Strides.Offset(pg, r, h)
					} else {
						src, off = x.add.Data, x.add.Strides.Offset(b, j-int(in.SeqLens[b]), h)
					}
					for y := range d {
						x.out[(j*c.Hkv+h)*d+y] = get(src, off+y)
					}
				}
			}
		}
	}
	return in, nil
}

// row returns the block and the row in it of row j of sequence b.
func (in *KVInputs) row(b, j int) (page, r int) {
	c := in.Case
	if !c.paged() {
		return b, j
	}
	return int(in.Table[b*c.maxBlocks()+j/c.BlockSize]), j % c.BlockSize
}

func (in *KVInputs) outShape() attention.Shape {
	c := in.Case
	return attention.Shape{B: c.B, S: c.Nq, H: c.Hq, D: c.Dv}
}

// newOutput is O's view (a strided one for View cases), NaN inside and
// sentinel outside.
func (in *KVInputs) newOutput() attention.Tensor {
	o := viewTensor(in.DType, in.outShape(), in.Case.Layout, in.Case.View)
	poison(o)
	return o
}

func (in *KVInputs) lseLen() int { return in.Case.B * in.Case.Hq * in.Case.Nq }

// cache is a fresh host cache: copies of the buffers as drawn, the lengths
// before the call.
func (in *KVInputs) cache() *attention.KVCache {
	k, v := in.K, in.V
	k.Data, v.Data = cloneBuf(in.k0), cloneBuf(in.v0)
	return &attention.KVCache{K: k, V: v, SeqLens: slices.Clone(in.SeqLens), BlockTable: slices.Clone(in.Table), BlockSize: in.Case.BlockSize}
}

// KVRef holds a case's float64 results (O dense BSHD, LSE [B, Hq, Nq]) and
// its rel_l2 bounds.
type KVRef struct {
	O, LSE       []float64
	TolO, TolLSE float64
}

// Reference runs the float64 reference on each sequence's rows after the
// append, and sets the tolerances from the low-precision baseline on the
// same rows (16-bit types).
func (in *KVInputs) Reference(t testing.TB) *KVRef {
	t.Helper()
	c := in.Case
	nq, nO, nL := c.Nq*c.Hq*c.D, c.Nq*c.Hq*c.Dv, c.Hq*c.Nq
	r := &KVRef{O: make([]float64, c.B*nO), LSE: make([]float64, c.B*nL), TolO: Float32Tol, TolLSE: Float32Tol}
	low := in.DType != attention.Float32
	round, floor, name := r16, f16Floor, "fp16"
	if in.DType == attention.BFloat16 {
		round, floor, name = rb16, bf16Floor, "bf16"
	}
	baseO, baseLSE := make([]float64, len(r.O)), make([]float64, len(r.LSE))
	var lseMag, lseRef []float64 // (fp32: the LSE's magnitudes, lseTolerance)
	for b := range c.B {
		n := int(in.SeqLens[b]) + c.New
		o, lse := r.O[b*nO:(b+1)*nO], r.LSE[b*nL:(b+1)*nL]
		if n == 0 { // sees no row: O = 0, LSE = −Inf
			for i := range lse {
				lse[i], baseLSE[b*nL+i] = math.Inf(-1), math.Inf(-1)
			}
			continue
		}
		sc := c.seq(b, n)
		q := in.q64[b*nq : (b+1)*nq]
		ro, rl, err := reference.Forward(sc.params(), q, in.seqK[b], in.seqV[b])
		if err != nil {
			t.Fatalf("reference forward, sequence %d: %v", b, err)
		}
		copy(o, ro)
		copy(lse, rl)
		seq := &Inputs{Case: sc, DType: in.DType, q64: q, k64: in.seqK[b], v64: in.seqV[b], dO: make([]float64, nO)}
		if !low {
			m, l := seq.lseMagnitudes(&Ref{LSE: rl})
			lseMag, lseRef = append(lseMag, m...), append(lseRef, l...)
		} else {
			base := seq.lowPrecisionBaseline(round, round, ro)
			copy(baseO[b*nO:], base.O)
			copy(baseLSE[b*nL:], base.LSE)
		}
	}
	if !low {
		r.TolLSE = lseBound(t, lseMag, lseRef)
	} else {
		eo, el := reference.RelL2(baseO, r.O), reference.RelL2(baseLSE, r.LSE)
		t.Logf("PyTorch-style %s baseline: o rel_l2 %.3g, lse rel_l2 %.3g", name, eo, el)
		r.TolO, r.TolLSE = math.Max(2*eo, floor), math.Max(2*el, floor)
	}
	return r
}

// kvGot is what one call left: O (dense BSHD), LSE, the lengths and the
// cache buffers.
type kvGot struct {
	o, lse  []float32
	seqLens []int32
	k, v    any
}

// runHost runs ForwardKVCacheInto (or ForwardKVCache when alloc) on a
// fresh copy of the cache.
func (in *KVInputs) runHost(t *testing.T, e *attention.Engine, alloc bool) kvGot {
	t.Helper()
	cache := in.cache()
	var newK, newV attention.Tensor
	if in.Case.New > 0 {
		newK, newV = in.NewK, in.NewV
	}
	var g kvGot
	if alloc {
		out, err := e.ForwardKVCache(t.Context(), in.Q, cache, newK, newV, in.Case.options())
		if err != nil {
			t.Fatalf("ForwardKVCache: %v", err)
		}
		if out.O.Shape != in.outShape() || len(out.LSE) != in.lseLen() {
			t.Fatalf("ForwardKVCache: O %v and %d LSE entries, want %v and %d", out.O.Shape, len(out.LSE), in.outShape(), in.lseLen())
		}
		g.o, g.lse = out.O.Float32s(), out.LSE
	} else {
		o, lse := in.newOutput(), nans(in.lseLen())
		if err := e.ForwardKVCacheInto(t.Context(), in.Q, cache, newK, newV, o, lse, in.Case.options()); err != nil {
			t.Fatalf("ForwardKVCacheInto: %v", err)
		}
		checkOutsideView(t, "o", o)
		g.o, g.lse = o.Float32s(), lse
	}
	in.checkInputs(t)
	g.seqLens, g.k, g.v = cache.SeqLens, cache.K.Data, cache.V.Data
	return g
}

// checkInputs fails t when a call wrote q, newK or newV.
func (in *KVInputs) checkInputs(t testing.TB) {
	t.Helper()
	for _, x := range []struct {
		name string
		t    attention.Tensor
		bits []uint32
	}{{"q", in.Q, in.q0}, {"newK", in.NewK, in.nk0}, {"newV", in.NewV, in.nv0}} {
		if x.t.Data != nil && !slices.Equal(rawBits(x.t.Data), x.bits) {
			t.Errorf("%s: an input was written by the call", x.name)
		}
	}
}

// runDevice runs ForwardKVCacheDevice on device tensors holding the
// inputs (O and LSE NaN) and downloads the results: O, LSE and the cache
// (into copies of the host buffers as drawn, so padding compares too).
func (in *KVInputs) runDevice(t *testing.T, e *attention.Engine) kvGot {
	t.Helper()
	c, ctx := in.Case, t.Context()
	mk := func(name string, dt attention.DType, s attention.Shape, l attention.Layout, src attention.Tensor) *attention.DeviceTensor {
		d, err := e.NewDeviceTensor(dt, s, l)
		if err != nil {
			t.Fatalf("NewDeviceTensor %s %v: %v", name, s, err)
		}
		t.Cleanup(func() { d.Close() })
		if err := d.Upload(ctx, src); err != nil {
			t.Fatalf("upload %s: %v", name, err)
		}
		return d
	}
	dt, l := in.DType, c.Layout
	k, v := in.K, in.V
	k.Data, v.Data = in.k0, in.v0
	q := mk("q", dt, in.Q.Shape, l, in.Q)
	dk := mk("cache.K", dt, k.Shape, l, k)
	dv := mk("cache.V", dt, v.Shape, l, v)
	var nk, nv *attention.DeviceTensor
	if c.New > 0 {
		nk = mk("newK", dt, in.NewK.Shape, l, in.NewK)
		nv = mk("newV", dt, in.NewV.Shape, l, in.NewV)
	}
	ls := attention.LSEShape(c.B, c.Hq, c.Nq)
	o := mk("o", dt, in.outShape(), l, in.newOutput())
	lse := mk("lse", attention.Float32, ls, attention.BHSD, attention.FromFloat32(nans(in.lseLen()), ls, attention.BHSD))
	cache := &attention.DeviceKVCache{K: dk, V: dv, SeqLens: slices.Clone(in.SeqLens), BlockTable: slices.Clone(in.Table), BlockSize: c.BlockSize}
	if err := e.ForwardKVCacheDevice(ctx, q, cache, nk, nv, o, lse, c.options()); err != nil {
		t.Fatalf("ForwardKVCacheDevice: %v", err)
	}
	ho := in.newOutput()
	hl := attention.FromFloat32(nans(in.lseLen()), ls, attention.BHSD)
	k.Data, v.Data = cloneBuf(in.k0), cloneBuf(in.v0)
	for _, x := range []struct {
		name string
		d    *attention.DeviceTensor
		h    attention.Tensor
	}{{"o", o, ho}, {"lse", lse, hl}, {"cache.K", dk, k}, {"cache.V", dv, v}} {
		if err := x.d.Download(ctx, x.h); err != nil {
			t.Fatalf("download %s: %v", x.name, err)
		}
	}
	checkOutsideView(t, "o (downloaded)", ho)
	return kvGot{o: ho.Float32s(), lse: hl.Data.([]float32), seqLens: cache.SeqLens, k: k.Data, v: v.Data}
}

// check compares a call's results with the reference and the cache and
// lengths with what the call must leave.
func (in *KVInputs) check(t *testing.T, ref *KVRef, g kvGot, seed uint64) {
	t.Helper()
	c := in.Case
	for b, n := range g.seqLens {
		if want := in.SeqLens[b] + int32(c.New); n != want {
			t.Errorf("SeqLens[%d] = %d after the call, want %d (%d before, %d appended)", b, n, want, in.SeqLens[b], c.New)
		}
	}
	checkCache(t, "cache.K", g.k, in.wantK, in.appK)
	checkCache(t, "cache.V", g.v, in.wantV, in.appV)
	checkFinite(t, "o", g.o, ref.O)
	checkFinite(t, "lse", g.lse, ref.LSE)
	Check(t, "o", g.o, ref.O, ref.TolO, seed)
	CheckLSE(t, g.lse, ref.LSE, ref.TolLSE, seed)
}

// checkCache compares a cache buffer after the call bitwise with the one
// expected: the appended rows newK's (newV's), every other element as
// before the call.
func checkCache(t testing.TB, name string, got, want any, appended map[int]bool) {
	t.Helper()
	g, w := rawBits(got), rawBits(want)
	if len(g) != len(w) {
		t.Errorf("%s: %d elements after the call, want %d", name, len(g), len(w))
		return
	}
	var app, other int
	first := -1
	for i := range w {
		if g[i] == w[i] {
			continue
		}
		if appended[i] {
			app++
		} else {
			other++
		}
		if first < 0 {
			first = i
		}
	}
	if app > 0 {
		t.Errorf("%s: %d elements of the appended rows differ bitwise from newK/newV (first at %d: %#x, want %#x)", name, app, first, g[first], w[first])
	}
	if other > 0 {
		t.Errorf("%s: %d elements outside the appended rows changed (first at %d: %#x, was %#x)", name, other, first, g[first], w[first])
	}
}

// checkFinite fails t where got is NaN or ±Inf and want is finite: a read
// of a row past a sequence's length (they hold NaN) or an unwritten output
// (NaN before the call).
func checkFinite(t testing.TB, name string, got []float32, want []float64) {
	t.Helper()
	bad, first := 0, -1
	for i, w := range want {
		x := float64(got[i])
		if !math.IsInf(w, 0) && !math.IsNaN(w) && (math.IsNaN(x) || math.IsInf(x, 0)) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d non-finite elements where the reference is finite (first %s[%d] = %v): a cache row past a sequence's length (NaN) was read, or the output was not written",
			name, bad, name, first, got[first])
	}
}

// checkOutsideView fails t when a call wrote an element of o's buffer
// outside its view (they hold sentinel).
func checkOutsideView(t testing.TB, name string, o attention.Tensor) {
	t.Helper()
	inside := make([]bool, elems(o.Data))
	forEach(o, func(i int) { inside[i] = true })
	bad := 0
	for i, in := range inside {
		if !in && get(o.Data, i) != sentinel {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d elements outside the output view were overwritten", name, bad)
	}
}

// viewTensor allocates a tensor of shape s in layout l: dense, or with 3
// elements of padding after every row and 5 after every batch (block)
// when view.
func viewTensor(dt attention.DType, s attention.Shape, l attention.Layout, view bool) attention.Tensor {
	if !view {
		return attention.Tensor{Shape: s, Strides: attention.Contiguous(s, l), Data: alloc(dt, s.Len())}
	}
	row := s.D + 3
	st := attention.Strides{Head: row, Seq: s.H * row, Batch: s.S*s.H*row + 5}
	if l == attention.BHSD {
		st = attention.Strides{Seq: row, Head: s.S * row, Batch: s.H*s.S*row + 5}
	}
	n := (s.B-1)*st.Batch + (s.S-1)*st.Seq + (s.H-1)*st.Head + s.D + 2
	return attention.Tensor{Shape: s, Strides: st, Data: alloc(dt, n)}
}

func nans(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = nan
	}
	return x
}

// elems is the length of a buffer.
func elems(buf any) int {
	switch b := buf.(type) {
	case []float32:
		return len(b)
	case []float16.Float16:
		return len(b)
	case []bfloat16.BFloat16:
		return len(b)
	}
	return 0
}

// get returns element i of a buffer, widened exactly.
func get(buf any, i int) float64 {
	switch b := buf.(type) {
	case []float32:
		return float64(b[i])
	case []float16.Float16:
		return float64(b[i].Float32())
	case []bfloat16.BFloat16:
		return float64(b[i].Float32())
	}
	return math.NaN()
}

// rawBits returns a buffer's elements as bit patterns.
func rawBits(buf any) []uint32 {
	switch b := buf.(type) {
	case []float32:
		return bitsOf(b)
	case []float16.Float16:
		out := make([]uint32, len(b))
		for i, x := range b {
			out[i] = uint32(x)
		}
		return out
	case []bfloat16.BFloat16:
		out := make([]uint32, len(b))
		for i, x := range b {
			out[i] = uint32(x)
		}
		return out
	}
	return nil
}

func cloneBuf(buf any) any {
	switch b := buf.(type) {
	case []float32:
		return slices.Clone(b)
	case []float16.Float16:
		return slices.Clone(b)
	case []bfloat16.BFloat16:
		return slices.Clone(b)
	}
	return nil
}

// rawCopy copies n elements from src[j:] to dst[i:] (one element type).
func rawCopy(dst any, i int, src any, j, n int) {
	switch d := dst.(type) {
	case []float32:
		copy(d[i:i+n], src.([]float32)[j:j+n])
	case []float16.Float16:
		copy(d[i:i+n], src.([]float16.Float16)[j:j+n])
	case []bfloat16.BFloat16:
		copy(d[i:i+n], src.([]bfloat16.BFloat16)[j:j+n])
	}
}

// RunKVCacheErrors checks the KV-cache calls' argument checks, host and
// device form, on every dtype the engine supports: each bad argument is an
// error wrapping the sentinel the attention package documents, and the
// call writes nothing: the cache, SeqLens, the block table, O, LSE and the
// inputs are bitwise as before. The unchanged base call must succeed.
func RunKVCacheErrors(t *testing.T, e *attention.Engine) {
	for _, dt := range dtypes(e) {
		for _, x := range kvErrCases(dt) {
			t.Run(dt.String()+"/"+x.name, func(t *testing.T) {
				base := KVCase{Name: "errors", B: 3, Hq: 4, Hkv: 2, Nq: 2, New: 2, D: 32, Dv: 32, Nmax: 20, Lens: []int32{7, 12, 0}}
				if x.paged {
					base.BlockSize, base.Extra = 5, 2
				}
				seed := Seed(t)
				in := mustInputs(t, base, dt, seed)
				t.Run("host", func(t *testing.T) {
					c := in.call()
					x.mutate(in, c)
					c.runHost(t, e, x.host, false)
				})
				if !x.out {
					t.Run("alloc", func(t *testing.T) {
						c := in.call()
						x.mutate(in, c)
						c.runHost(t, e, x.host, true)
					})
				}
				if !x.hostOnly {
					t.Run("device", func(t *testing.T) {
						c := in.call()
						x.mutate(in, c)
						want := x.host
						if x.device != nil {
							want = x.device
						}
						c.runDevice(t, e, want)
					})
				}
			})
		}
	}
}

// kvErrCase is one bad argument: mutate breaks the base call (3 sequences
// of lengths 7, 12 and 0 appending 2 rows each; paged: blocks of 5 rows, 4
// per sequence, sequence 0 writing its block 1 and sequence 1 its block 2).
type kvErrCase struct {
	name     string
	paged    bool
	mutate   func(in *KVInputs, c *kvCall)
	host     error // the sentinel (nil: the call must succeed)
	device   error // the device form's, when it differs
	hostOnly bool  // no device form of this argument
	out      bool  // breaks O or LSE (no ForwardKVCache form)
}

func kvErrCases(dt attention.DType) []kvErrCase {
	const mb = 4 // table entries per sequence of the paged base
	other := attention.Float16
	if dt == attention.Float16 {
		other = attention.Float32
	}
	zeros := func(dt attention.DType, s attention.Shape) attention.Tensor {
		t, _ := attention.NewTensor(dt, s, attention.BSHD)
		return t
	}
	resize := func(t attention.Tensor, f func(s *attention.Shape)) attention.Tensor {
		s := t.Shape
		f(&s)
		return zeros(t.DType(), s)
	}
	none := func(*KVInputs, *kvCall) {}
	return []kvErrCase{
		{name: "valid", mutate: none},
		{name: "valid-paged", paged: true, mutate: none},
		{name: "table-out-of-range", paged: true, host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.table[0*mb+1] = int32(in.Case.pages()) }},
		{name: "table-negative", paged: true, host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.table[1*mb+0] = -1 }},
		{name: "table-entry-of-append", paged: true, host: attention.ErrOption, // sequence 2 (length 0) appends into its block 0
			mutate: func(in *KVInputs, c *kvCall) { c.table[2*mb+0] = 1 << 20 }},
		{name: "table-length", paged: true, host: attention.ErrLength,
			mutate: func(in *KVInputs, c *kvCall) { c.table = c.table[:len(c.table)-1] }},
		{name: "table-nil", paged: true, host: attention.ErrLength,
			mutate: func(in *KVInputs, c *kvCall) { c.table = nil }},
		{name: "block-size", paged: true, host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.blockSize = 4 }},
		{name: "block-size-zero", paged: true, host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.blockSize = 0 }},
		{name: "negative-seqlen", host: attention.ErrLength,
			mutate: func(in *KVInputs, c *kvCall) { c.seqLens[2] = -1 }},
		{name: "negative-seqlen", paged: true, host: attention.ErrLength,
			mutate: func(in *KVInputs, c *kvCall) { c.seqLens[0] = -1 }},
		{name: "seqlen-past-capacity", host: attention.ErrLength,
			mutate: func(in *KVInputs, c *kvCall) {
				c.newK, c.newV, c.seqLens[1] = attention.Tensor{}, attention.Tensor{}, 21
			}},
		{name: "seqlen-past-capacity", paged: true, host: attention.ErrLength,
			mutate: func(in *KVInputs, c *kvCall) {
				c.newK, c.newV, c.seqLens[1] = attention.Tensor{}, attention.Tensor{}, 21
			}},
		{name: "append-overflow", host: attention.ErrLength,
			mutate: func(in *KVInputs, c *kvCall) { c.seqLens[1] = 19 }},
		{name: "append-overflow", paged: true, host: attention.ErrLength,
			mutate: func(in *KVInputs, c *kvCall) { c.seqLens[0] = 19 }},
		{name: "seqlens-length", host: attention.ErrLength,
			mutate: func(in *KVInputs, c *kvCall) { c.seqLens = c.seqLens[:2] }},
		{name: "seqlens-length", paged: true, host: attention.ErrLength,
			mutate: func(in *KVInputs, c *kvCall) { c.seqLens = append(c.seqLens, 0) }},
		{name: "append-same-block", paged: true, host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.table[1*mb+2] = c.table[0*mb+1] }},
		{name: "append-into-read-block", paged: true, host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.table[1*mb+0] = c.table[0*mb+1] }},
		{name: "append-into-own-block", paged: true, host: attention.ErrOption, // sequence 0's block 1 (written) is its block 0 (rows 0–4)
			mutate: func(in *KVInputs, c *kvCall) { c.table[0*mb+1] = c.table[0*mb+0] }},
		{name: "append-through-second-use", paged: true, host: attention.ErrOption, // sequence 1 reads the block sequence 0 writes through its second use
			mutate: func(in *KVInputs, c *kvCall) { c.table[0*mb+0], c.table[1*mb+0] = c.table[0*mb+1], c.table[0*mb+1] }},
		{name: "shared-read-only-block", paged: true, // two sequences reading one block the append does not write: fine
			mutate: func(in *KVInputs, c *kvCall) { c.table[1*mb+0] = c.table[0*mb+0] }},
		{name: "newK-without-newV", host: attention.ErrLength, device: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.newV = attention.Tensor{} }},
		{name: "newV-without-newK", paged: true, host: attention.ErrLength, device: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.newK = attention.Tensor{} }},
		{name: "newK-batch", host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.newK = resize(c.newK, func(s *attention.Shape) { s.B++ }) }},
		{name: "newV-batch", paged: true, host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.newV = resize(c.newV, func(s *attention.Shape) { s.B-- }) }},
		{name: "newK-heads", paged: true, host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.newK = resize(c.newK, func(s *attention.Shape) { s.H *= 2 }) }},
		{name: "newK-dim", host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.newK = resize(c.newK, func(s *attention.Shape) { s.D++ }) }},
		{name: "newV-dim", paged: true, host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.newV = resize(c.newV, func(s *attention.Shape) { s.D *= 2 }) }},
		{name: "newV-rows", host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.newV = resize(c.newV, func(s *attention.Shape) { s.S++ }) }},
		{name: "newK-dtype", paged: true, host: attention.ErrDType,
			mutate: func(in *KVInputs, c *kvCall) { c.newK = zeros(other, c.newK.Shape) }},
		{name: "cache-batch", host: attention.ErrShape, // a contiguous cache holds B sequences
			mutate: func(in *KVInputs, c *kvCall) {
				c.k = resize(c.k, func(s *attention.Shape) { s.B++ })
				c.v = resize(c.v, func(s *attention.Shape) { s.B++ })
			}},
		{name: "cache-v-rows", host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.v = resize(c.v, func(s *attention.Shape) { s.S-- }) }},
		{name: "cache-k-dim", paged: true, host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.k = resize(c.k, func(s *attention.Shape) { s.D *= 2 }) }},
		{name: "head-dim", paged: true, host: attention.ErrShape, // past MaxHeadDim, q, cache and newK agreeing
			mutate: func(in *KVInputs, c *kvCall) {
				big := func(s *attention.Shape) { s.D = attention.MaxHeadDim + 16 }
				c.q, c.k, c.newK = resize(c.q, big), resize(c.k, big), resize(c.newK, big)
			}},
		{name: "o-shape", out: true, host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.o = poisoned(resize(c.o, func(s *attention.Shape) { s.S++ })) }},
		{name: "o-shape", paged: true, out: true, host: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.o = poisoned(resize(c.o, func(s *attention.Shape) { s.D-- })) }},
		{name: "lse-length", out: true, host: attention.ErrLength, device: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.lse = c.lse[:len(c.lse)-1] }},
		{name: "lse-length", paged: true, out: true, host: attention.ErrLength, device: attention.ErrShape,
			mutate: func(in *KVInputs, c *kvCall) { c.lse = nans(len(c.lse) + 1) }},
		{name: "scale-nan", paged: true, host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.opt.Scale = nan }},
		{name: "align", host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.opt.Causal, c.opt.Align = true, 7 }},
		// Window, Softcap and ALiBi are taken (and checked as for any
		// call); SeqUsedK, CuSeqlens and Dropout are refused.
		{name: "options", paged: true,
			mutate: func(in *KVInputs, c *kvCall) {
				c.opt.Causal, c.opt.Align, c.opt.Window, c.opt.Softcap = true, attention.BottomRight, &attention.Window{Left: 3, Right: 0}, 30
				c.opt.ALiBi = []float32{0.5, 0.25, 0.125, 0.0625}
			}},
		{name: "alibi-per-sequence",
			mutate: func(in *KVInputs, c *kvCall) { c.opt.ALiBi = make([]float32, 3*4) }},
		{name: "window-causal-right", host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.opt.Causal, c.opt.Window = true, &attention.Window{Left: 3, Right: 1} }},
		{name: "window-side", paged: true, host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.opt.Window = &attention.Window{Left: -2, Right: 0} }},
		{name: "softcap-negative", host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.opt.Softcap = -1 }},
		{name: "alibi-length", paged: true, host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.opt.ALiBi = []float32{1, 2, 3} }},
		{name: "alibi-nan", host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.opt.ALiBi = []float32{1, nan, 1, 1} }},
		{name: "seqused-k", host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.opt.SeqUsedK = []int32{7, 12, 0} }},
		{name: "cu-seqlens", paged: true, host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) {
				c.opt.CuSeqlensQ, c.opt.CuSeqlensK = []int32{0, 2, 4, 6}, []int32{0, 9, 23, 25}
			}},
		{name: "dropout", host: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.opt.Dropout = &attention.Dropout{P: 0.1, Seed: 1} }},
		{name: "dropout-zero", // P = 0 drops nothing: a plain call
			mutate: func(in *KVInputs, c *kvCall) { c.opt.Dropout = &attention.Dropout{P: 0, Seed: 1} }},
		{name: "cache-k-is-v", paged: true, host: attention.ErrStride, device: attention.ErrOption, // the append writes both
			mutate: func(in *KVInputs, c *kvCall) { c.v, c.vIsK = c.k, true }},
		{name: "o-is-q", out: true, host: attention.ErrStride, device: attention.ErrOption,
			mutate: func(in *KVInputs, c *kvCall) { c.o, c.oIsQ = c.q, true }},
		{name: "newK-in-cache", paged: true, hostOnly: true, host: attention.ErrStride, // the append would read what it writes
			mutate: func(in *KVInputs, c *kvCall) { c.newK.Data, c.newK.Strides = c.k.Data, attention.Strides{} }},
	}
}

func poisoned(t attention.Tensor) attention.Tensor {
	poison(t)
	return t
}

// kvCall are the arguments of one call of the error suite.
type kvCall struct {
	q, k, v, newK, newV, o attention.Tensor
	lse                    []float32
	seqLens, table         []int32
	blockSize              int
	opt                    attention.Options
	// The device form passes one device tensor twice.
	vIsK, oIsQ bool
}

// call is the base call of in: fresh copies of everything it may write.
func (in *KVInputs) call() *kvCall {
	c := in.cache()
	q := in.Q
	q.Data = cloneBuf(q.Data)
	k := &kvCall{q: q, k: c.K, v: c.V, o: in.newOutput(), lse: nans(in.lseLen()),
		seqLens: c.SeqLens, table: c.BlockTable, blockSize: c.BlockSize, opt: in.Case.options()}
	if in.Case.New > 0 {
		k.newK, k.newV = in.NewK, in.NewV
		k.newK.Data, k.newV.Data = cloneBuf(in.NewK.Data), cloneBuf(in.NewV.Data)
	}
	return k
}

// kvSnap is the bits of a call's arguments.
type kvSnap struct {
	t              [6][]uint32 // q, k, v, newK, newV, o
	lse            []uint32
	seqLens, table []int32
}

func (c *kvCall) tensors() [6]attention.Tensor {
	return [6]attention.Tensor{c.q, c.k, c.v, c.newK, c.newV, c.o}
}

var kvNames = [6]string{"q", "cache.K", "cache.V", "newK", "newV", "o"}

func (c *kvCall) snapshot() kvSnap {
	var s kvSnap
	for i, x := range c.tensors() {
		s.t[i] = rawBits(x.Data)
	}
	s.lse, s.seqLens, s.table = bitsOf(c.lse), slices.Clone(c.seqLens), slices.Clone(c.table)
	return s
}

// checkErr fails t unless err wraps want (or is nil when want is).
func checkErr(t *testing.T, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("want success, got %v", err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("got error %v, want one wrapping %q", err, want)
	}
	if err != nil {
		t.Logf("%v", err)
	}
}

// untouched fails t where the arguments' bits differ from s.
func (c *kvCall) untouched(t *testing.T, s kvSnap, skipOut bool) {
	t.Helper()
	for i, x := range c.tensors() {
		if skipOut && i == 5 {
			continue
		}
		if !slices.Equal(rawBits(x.Data), s.t[i]) {
			t.Errorf("%s: written by a call that failed", kvNames[i])
		}
	}
	if !skipOut && !slices.Equal(bitsOf(c.lse), s.lse) {
		t.Errorf("lse: written by a call that failed")
	}
	if !slices.Equal(c.seqLens, s.seqLens) {
		t.Errorf("SeqLens: %v after a call that failed, was %v", c.seqLens, s.seqLens)
	}
	if !slices.Equal(c.table, s.table) {
		t.Errorf("BlockTable: changed by a call that failed")
	}
}

// runHost makes the host call (ForwardKVCache when alloc, else
// ForwardKVCacheInto) and checks its error and, on failure, that nothing
// was written.
func (c *kvCall) runHost(t *testing.T, e *attention.Engine, want error, alloc bool) {
	t.Helper()
	s := c.snapshot()
	cache := &attention.KVCache{K: c.k, V: c.v, SeqLens: c.seqLens, BlockTable: c.table, BlockSize: c.blockSize}
	var err error
	if alloc {
		var out *attention.Output
		out, err = e.ForwardKVCache(t.Context(), c.q, cache, c.newK, c.newV, c.opt)
		if err != nil && out != nil {
			t.Errorf("ForwardKVCache returned an output with error %v", err)
		}
	} else {
		err = e.ForwardKVCacheInto(t.Context(), c.q, cache, c.newK, c.newV, c.o, c.lse, c.opt)
	}
	checkErr(t, err, want)
	if err != nil {
		c.untouched(t, s, alloc)
	}
}

// runDevice makes the device call on device tensors holding the
// arguments and checks its error and, on failure, that the device tensors
// and the host lengths and table are as before.
func (c *kvCall) runDevice(t *testing.T, e *attention.Engine, want error) {
	t.Helper()
	ctx := t.Context()
	mk := func(name string, h attention.Tensor, l attention.Layout) *attention.DeviceTensor {
		if h.Data == nil {
			return nil
		}
		d, err := e.NewDeviceTensor(h.DType(), h.Shape, l)
		if errors.Is(err, attention.ErrDType) {
			t.Skipf("%s: %v", name, err) // a dtype the engine does not run: no device form
		}
		if err != nil {
			t.Fatalf("NewDeviceTensor %s: %v", name, err)
		}
		t.Cleanup(func() { d.Close() })
		if h.Shape.D > attention.MaxHeadDim {
			return d // no transfer takes it: contents undefined, not compared
		}
		if err := d.Upload(ctx, h); err != nil {
			t.Fatalf("upload %s: %v", name, err)
		}
		return d
	}
	s := c.snapshot()
	ls := attention.LSEShape(c.q.Shape.B, c.q.Shape.H, c.q.Shape.S)
	if len(c.lse) != ls.Len() {
		ls = attention.Shape{B: 1, S: len(c.lse), H: 1, D: 1}
	}
	hl := attention.FromFloat32(c.lse, ls, attention.BHSD)
	d := [6]*attention.DeviceTensor{}
	for i, x := range c.tensors() {
		switch {
		case i == 2 && c.vIsK:
			d[i] = d[1]
		case i == 5 && c.oIsQ:
			d[i] = d[0]
		default:
			d[i] = mk(kvNames[i], x, attention.BSHD)
		}
	}
	lse := mk("lse", hl, attention.BHSD)
	cache := &attention.DeviceKVCache{K: d[1], V: d[2], SeqLens: c.seqLens, BlockTable: c.table, BlockSize: c.blockSize}
	err := e.ForwardKVCacheDevice(ctx, d[0], cache, d[3], d[4], d[5], lse, c.opt)
	checkErr(t, err, want)
	if err == nil {
		return
	}
	for i, x := range c.tensors() {
		if d[i] == nil || x.Shape.D > attention.MaxHeadDim {
			continue
		}
		h := x
		h.Data = cloneBuf(x.Data)
		if err := d[i].Download(ctx, h); err != nil {
			t.Fatalf("download %s: %v", kvNames[i], err)
		}
		if !slices.Equal(rawBits(h.Data), s.t[i]) {
			t.Errorf("%s: written by a call that failed", kvNames[i])
		}
	}
	got := nans(len(c.lse))
	if err := lse.Download(ctx, attention.FromFloat32(got, ls, attention.BHSD)); err != nil {
		t.Fatalf("download lse: %v", err)
	}
	if !slices.Equal(bitsOf(got), s.lse) {
		t.Errorf("lse: written by a call that failed")
	}
	if !slices.Equal(c.seqLens, s.seqLens) {
		t.Errorf("SeqLens: %v after a call that failed, was %v", c.seqLens, s.seqLens)
	}
	if !slices.Equal(c.table, s.table) {
		t.Errorf("BlockTable: changed by a call that failed")
	}
}
