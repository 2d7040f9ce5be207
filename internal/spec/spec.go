// Package spec describes one attention problem after validation: the sizes,
// the strides of every operand, the scale and the mask. It is the contract
// between the public attention package and the backends (cpu, Vulkan), which
// receive only problems the attention package has already checked.
//
// Conventions:
//   - Q is [B, Nq, Hq, D], K is [B, Nk, Hkv, D], V is [B, Nk, Hkv, Dv] and
//     O is [B, Nq, Hq, Dv], addressed through element strides (batch, seq,
//     head); the last dimension is always contiguous (stride 1).
//   - dO has O's strides, dQ has Q's, dK has K's and dV has V's.
//   - LSE (and the backward's D = rowsum(dO∘O)) are contiguous [B, Hq, Nq].
//   - A packed problem (Ext.CuQ, Varlen) stores sequence b's rows at
//     QRow(b, i) and KRow(b, j) of one batch (QOffset, KOffset), and LSE
//     as [Hq, Tq].
//   - Query head h reads key/value head h / (Hq/Hkv) (GQA; Hkv = 1 is MQA).
package spec

import (
	"fmt"
	"math"
	"strings"
)

// DType is the storage type of the operands Q, K, V, O and their
// gradients; arithmetic is float32 whatever the storage type, and LSE is
// always float32.
type DType uint8

const (
	// Float32 stores IEEE binary32.
	Float32 DType = iota + 1
	// Float16 stores IEEE binary16.
	Float16
	// BFloat16 stores bfloat16: float32's exponent range, 8 bits of
	// precision. Loads widen exactly; stores round to nearest even.
	BFloat16
)

// String names the type as PyTorch and numpy do ("float32", "float16",
// "bfloat16").
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Short is the short name ("f32", "f16", "bf16") that SPIR-V module names
// and tune keys use; "" for an unknown type.
func (d DType) Short() string {
	switch d {
	case Float32:
		return "f32"
	case Float16:
		return "f16"
	case BFloat16:
		return "bf16"
	}
	return ""
}

// Size is the element size in bytes (0 for an unknown type).
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float16, BFloat16:
		return 2
	}
	return 0
}

// Shape is the logical shape of an operand: batch, sequence length,
// heads and feature (head) dimension, whatever the memory order.
type Shape struct{ B, S, H, D int }

// Len is the number of elements B·S·H·D.
func (s Shape) Len() int { return s.B * s.S * s.H * s.D }

func (s Shape) String() string { return fmt.Sprintf("[B=%d S=%d H=%d D=%d]", s.B, s.S, s.H, s.D) }

// Mask selects which keys a query may see.
type Mask uint32

const (
	// MaskNone: every query sees every key.
	MaskNone Mask = 0
	// MaskCausalTopLeft: query i sees keys j ≤ i (PyTorch SDPA's is_causal).
	MaskCausalTopLeft Mask = 1
	// MaskCausalBottomRight: query i sees keys j ≤ i + Nk − Nq
	// (FlashAttention-2's rule; the last query sees every key).
	MaskCausalBottomRight Mask = 2
)

// String names the mask.
func (m Mask) String() string {
	switch m {
	case MaskNone:
		return "none"
	case MaskCausalTopLeft:
		return "causal-top-left"
	case MaskCausalBottomRight:
		return "causal-bottom-right"
	}
	return "invalid"
}

// Strides are element strides of a 4-D operand's batch, sequence and head
// dimensions. The innermost (feature) dimension has stride 1.
type Strides struct{ Batch, Seq, Head int }

// Offset returns the element offset of row (b, s, h).
func (s Strides) Offset(b, seq, h int) int { return b*s.Batch + seq*s.Seq + h*s.Head }

// BSHD returns contiguous strides for a [B, S, H, D] tensor.
func BSHD(s, h, d int) Strides { return Strides{Batch: s * h * d, Seq: h * d, Head: d} }

// BHSD returns contiguous strides for a tensor stored as [B, H, S, D].
func BHSD(s, h, d int) Strides { return Strides{Batch: h * s * d, Seq: d, Head: s * d} }

// Problem is one validated attention call.
type Problem struct {
	B, Hq, Hkv, Nq, Nk, D, Dv int
	// Scale multiplies QKᵀ before the softmax (already resolved: never 0).
	Scale float32
	Mask  Mask
	// Q, K, V, O are the operands' strides (see the package conventions
	// for the gradients).
	Q, K, V, O Strides
	// KV is set for a KV-cache (decoding) call: K and V are then the
	// cache and Nk its capacity per sequence (see KV).
	KV *KV
	// Ext is set when the call asks for more than Scale and Mask: a
	// sliding window, a softcap, ALiBi slopes or per-sequence key
	// counts (see Ext). With Ext set, Ext's window is the whole mask;
	// Mask still says whether the call was causal and how aligned. A
	// KV-cache problem's Ext holds a window, a softcap and ALiBi slopes
	// only (CheckExt), each sequence's keys being its cache rows
	// (Keys is KV.Len).
	Ext *Ext
}

// Ext holds the options of a problem beyond its scale and causal mask.
//
// Row i of sequence b has its diagonal at key Diag(b, i) = i + Keys(b) −
// Nq when BottomRight, else i; it sees the keys j with Diag − Left ≤ j ≤
// Diag + Right and j < Keys(b) (Left, Right = −1: unbounded on that
// side; a causal mask is Right = 0). Its score of key j is s = Scale·q·k,
// then c·tanh(s/c) with c = Softcap when Softcap > 0, then
// s − slope·|Diag(b, i) − j| with the ALiBi slope of (b, h) when Slopes
// is set, then plus the Bias element (b, h, i, j) when Bias is set (an
// element of −Inf hides key j from the row, as the window does). With
// Dropout the probabilities are dropped (see Dropout).
type Ext struct {
	Left, Right int
	BottomRight bool
	Softcap     float32
	// Slopes are per query head ([Hq]) or, with SlopesPerBatch, per
	// sequence and head ([B, Hq]); nil: no ALiBi.
	Slopes         []float32
	SlopesPerBatch bool
	// SeqUsedK is each sequence's key count (≤ its stored keys); nil:
	// every stored key counts.
	SeqUsedK []int32
	// CuQ and CuK, when set (B+1 offsets each, from 0, non-decreasing),
	// pack variable-length sequences: sequence b's queries are rows
	// CuQ[b] … CuQ[b+1]−1 of Q and O (and dO, dQ), its keys rows CuK[b]
	// … CuK[b+1]−1 of K and V (and dK, dV) — the operands hold one
	// batch, whose stride is never used (QOffset, KOffset) — and Nq, Nk
	// are the longest lengths. LSE and D are then [Hq, Tq]
	// (Tq = CuQ[B]). nil: every sequence has Nq queries and Nk keys.
	CuQ, CuK []int32
	// Dropout, when set, drops probabilities (see Dropout).
	Dropout *Dropout
	// Bias, when set, is added to the scores (see Bias).
	Bias *Bias
}

// Bias is an additive bias on the scores (PyTorch SDPA's attn_mask):
// element (b, h, i, j) of sequence b, query head h, query row i and key
// j lies at b·Batch + h·Head + i·Row + j of its buffer, stored
// as DType (Float32 or the problem's storage type); a stride of 0
// broadcasts the bias over that dimension. An element of −Inf hides its
// key from the row: the pair is masked, not scored.
//
// With Grad the backward also writes dBias, the loss's gradient with
// respect to the bias (that of the score: P∘(dP − D)), in DType:
// element (b, h, i, j) accumulates at b·GradBatch + h·GradHead +
// i·GradRow + j of the dBias buffer, summed over every
// (b, h, i) a stride of 0 folds together (a bias broadcast over the
// batch, the heads or the queries has its gradient summed over them).
type Bias struct {
	DType                        DType
	Batch, Head, Row             int
	Grad                         bool
	GradBatch, GradHead, GradRow int
}

// At is the element offset of bias element (b, h, i, j).
func (x *Bias) At(b, h, i, j int) int { return b*x.Batch + h*x.Head + i*x.Row + j }

// GradAt is the element offset of dBias element (b, h, i, j).
func (x *Bias) GradAt(b, h, i, j int) int { return b*x.GradBatch + h*x.GradHead + i*x.GradRow + j }

// GradFolds reports whether dBias folds several (b, h, i) of a problem
// of B sequences, Hq heads and Nq queries into one element (a stride of
// 0 over a dimension longer than 1): the backward must then sum them.
func (x *Bias) GradFolds(b, hq, nq int) bool {
	return (x.GradBatch == 0 && b > 1) || (x.GradHead == 0 && hq > 1) || (x.GradRow == 0 && nq > 1)
}

// CheckExt reports what in p.Ext would break the methods above or index
// out of range (nil without Ext): window sides below −1 or so wide that
// KeyRange's arithmetic overflows, a softcap that is negative or not
// finite, packed offsets that are not B+1 from 0 or make a sequence
// longer than Nq or Nk (or shorter than 0), key counts that are not B of
// 0 … StoredKeys, a slope table of the wrong length, and on a KV-cache
// problem anything but a window, a softcap and slopes (its keys are the
// cache rows: no key counts, packed sequences or dropout). Backends wrap
// its error with their sentinel.
func (p *Problem) CheckExt() error {
	e := p.Ext
	if e == nil {
		return nil
	}
	if e.Left < -1 || e.Right < -1 || e.Left > math.MaxInt/4 || e.Right > math.MaxInt/4 {
		return fmt.Errorf("window (%d, %d)", e.Left, e.Right)
	}
	if p.KV != nil && (e.SeqUsedK != nil || e.CuQ != nil || e.CuK != nil || e.Dropout != nil) {
		return fmt.Errorf("a KV-cache problem with key counts, packed sequences or dropout")
	}
	if c := float64(e.Softcap); c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
		return fmt.Errorf("softcap %v", e.Softcap)
	}
	if e.CuQ != nil || e.CuK != nil {
		if err := checkCu("CuQ", e.CuQ, p.B, p.Nq); err != nil {
			return err
		}
		if err := checkCu("CuK", e.CuK, p.B, p.Nk); err != nil {
			return err
		}
	}
	if e.SeqUsedK != nil && len(e.SeqUsedK) != p.B {
		return fmt.Errorf("%d key counts for %d sequences", len(e.SeqUsedK), p.B)
	}
	for b, n := range e.SeqUsedK {
		if n < 0 || int(n) > p.StoredKeys(b) {
			return fmt.Errorf("key count %d of sequence %d (%d stored)", n, b, p.StoredKeys(b))
		}
	}
	if d := e.Dropout; d != nil && (d.Threshold == 0 || d.Threshold >= DropLevels || d.Batch0 < 0) {
		return fmt.Errorf("dropout threshold %d (1 … %d), first sequence %d", d.Threshold, DropLevels-1, d.Batch0)
	}
	if x := e.Bias; x != nil {
		if p.KV != nil {
			return fmt.Errorf("a KV-cache problem with a bias")
		}
		if x.DType != Float32 && x.DType != Float16 && x.DType != BFloat16 {
			return fmt.Errorf("bias dtype %v", x.DType)
		}
		for _, v := range []int{x.Batch, x.Head, x.Row, x.GradBatch, x.GradHead, x.GradRow} {
			if v < 0 {
				return fmt.Errorf("bias offsets and strides %+v: negative", *x)
			}
		}
	}
	if want := p.Hq; e.Slopes != nil {
		if e.SlopesPerBatch {
			want *= p.B
		}
		if len(e.Slopes) != want {
			return fmt.Errorf("%d ALiBi slopes, want %d", len(e.Slopes), want)
		}
	}
	return nil
}

// checkCu validates packed sequences' offsets: B+1 of them from 0, no
// sequence shorter than 0 or longer than n.
func checkCu(name string, cu []int32, b, n int) error {
	if len(cu) != b+1 || cu[0] != 0 {
		return fmt.Errorf("%s: %d offsets from %v, want %d from 0", name, len(cu), cu[:min(len(cu), 1)], b+1)
	}
	for i := 1; i < len(cu); i++ {
		if d := cu[i] - cu[i-1]; d < 0 || int(d) > n {
			return fmt.Errorf("%s: sequence %d has %d rows (0 … %d)", name, i-1, d, n)
		}
	}
	return nil
}

// Varlen reports whether p packs variable-length sequences (Ext.CuQ).
func (p *Problem) Varlen() bool { return p.Ext != nil && p.Ext.CuQ != nil }

// Queries is the number of query rows sequence b has: Nq, or its packed
// length.
func (p *Problem) Queries(b int) int {
	if p.Varlen() {
		return int(p.Ext.CuQ[b+1] - p.Ext.CuQ[b])
	}
	return p.Nq
}

// StoredKeys is the number of key rows sequence b has in K and V: Nk, or
// its packed length (Keys may count fewer).
func (p *Problem) StoredKeys(b int) int {
	if p.Varlen() {
		return int(p.Ext.CuK[b+1] - p.Ext.CuK[b])
	}
	return p.Nk
}

// QRow and KRow are the rows of query i and key j of sequence b in their
// operands' sequence dimension (with batch b's stride: 0 when packed).
func (p *Problem) QRow(b, i int) int {
	if p.Varlen() {
		return int(p.Ext.CuQ[b]) + i
	}
	return i
}

func (p *Problem) KRow(b, j int) int {
	if p.Varlen() {
		return int(p.Ext.CuK[b]) + j
	}
	return j
}

// QOffset is the element offset of query row i of sequence b, head h, in
// an operand with strides st shaped like Q or O (Q, O, dO, dQ).
func (p *Problem) QOffset(st Strides, b, i, h int) int {
	if p.Varlen() {
		return st.Offset(0, p.QRow(b, i), h)
	}
	return st.Offset(b, i, h)
}

// KOffset is QOffset for key row j in an operand shaped like K or V (K,
// V, dK, dV).
func (p *Problem) KOffset(st Strides, b, j, h int) int {
	if p.Varlen() {
		return st.Offset(0, p.KRow(b, j), h)
	}
	return st.Offset(b, j, h)
}

// TotalQ is the number of query rows over the batch: B·Nq, or CuQ[B].
func (p *Problem) TotalQ() int {
	if p.Varlen() {
		return int(p.Ext.CuQ[p.B])
	}
	return p.B * p.Nq
}

// TotalK is the number of key rows over the batch: B·Nk, or CuK[B].
func (p *Problem) TotalK() int {
	if p.Varlen() {
		return int(p.Ext.CuK[p.B])
	}
	return p.B * p.Nk
}

// LSELen is the number of LSE (and D) entries: Hq per query row.
func (p *Problem) LSELen() int { return p.Hq * p.TotalQ() }

// Whole reports whether p runs only as a whole batch: packed sequences
// (Varlen) share their operands' one batch, and a dBias summed over the
// batch needs every sequence's share in one pass.
func (p *Problem) Whole() bool {
	return p.Varlen() || (p.Ext != nil && p.Ext.Bias != nil && p.Ext.Bias.Grad && p.Ext.Bias.GradBatch == 0 && p.B > 1)
}

// Batches is p restricted to sequences b0 … b0+n−1: its per-sequence
// options sliced (the operands' offsets, the bias's and dBias's too, are
// the caller's).
// A problem that runs only whole (Whole) is not split: it returns p for
// the whole batch and panics otherwise.
func (p *Problem) Batches(b0, n int) *Problem {
	if p.Whole() {
		if b0 != 0 || n != p.B {
			panic("spec: Batches of a problem that runs whole")
		}
		return p
	}
	c := *p
	c.B = n
	if e := p.Ext; e != nil {
		x := *e
		if e.SeqUsedK != nil {
			x.SeqUsedK = e.SeqUsedK[b0 : b0+n]
		}
		if e.SlopesPerBatch {
			x.Slopes = e.Slopes[b0*p.Hq : (b0+n)*p.Hq]
		}
		if e.Dropout != nil {
			d := *e.Dropout
			d.Batch0 += b0
			x.Dropout = &d
		}
		c.Ext = &x
	}
	return &c
}

// Keys is the number of keys sequence b has: its SeqUsedK, or its stored
// keys; in a KV-cache problem its cache rows after the append (KV.Len).
func (p *Problem) Keys(b int) int {
	switch {
	case p.KV != nil:
		return p.KV.Len(b)
	case p.Ext != nil && p.Ext.SeqUsedK != nil:
		return int(p.Ext.SeqUsedK[b])
	}
	return p.StoredKeys(b)
}

// Diag is the key on the diagonal of query row i of sequence b (it may
// lie outside 0 … Keys(b)−1): i + Keys(b) − Queries(b) bottom-right
// (Ext.BottomRight, else a bottom-right causal Mask), else i.
func (p *Problem) Diag(b, i int) int {
	br := p.Mask == MaskCausalBottomRight
	if e := p.Ext; e != nil {
		br = e.BottomRight
	}
	if br {
		return i + p.Keys(b) - p.Queries(b)
	}
	return i
}

// KeyRange returns the keys query row i of sequence b sees: lo … hi−1
// (lo = hi when none; none for a row past the sequence's queries). Both
// bounds are non-decreasing in i. Without Ext it is Mask's rule with the
// sequence's keys (KeyLimit's, per sequence in a KV-cache problem).
func (p *Problem) KeyRange(b, i int) (lo, hi int) {
	e := p.Ext
	if e == nil {
		if p.KV != nil {
			return 0, maskLimit(p.Mask, i, p.Nq, p.Keys(b))
		}
		return 0, p.KeyLimit(i)
	}
	if i >= p.Queries(b) {
		n := p.Keys(b)
		return n, n
	}
	n, d := p.Keys(b), p.Diag(b, i)
	lo, hi = 0, n
	if e.Left >= 0 {
		lo = min(max(d-e.Left, 0), n)
	}
	if e.Right >= 0 {
		hi = min(max(d+e.Right+1, 0), n)
	}
	return lo, max(lo, hi)
}

// Slope is the ALiBi slope of sequence b, query head h (0 without
// ALiBi).
func (p *Problem) Slope(b, h int) float32 {
	e := p.Ext
	if e == nil || e.Slopes == nil {
		return 0
	}
	if e.SlopesPerBatch {
		return e.Slopes[b*p.Hq+h]
	}
	return e.Slopes[h]
}

// Pairs is the number of (query row, key) pairs each head computes,
// summed over the batch: what every mask, window and key count leaves.
func (p *Problem) Pairs() float64 {
	var n float64
	for b := range p.B {
		for i := range p.Queries(b) {
			lo, hi := p.KeyRange(b, i)
			n += float64(hi - lo)
		}
		if p.Ext == nil && p.KV == nil { // every sequence alike
			return n * float64(p.B)
		}
	}
	return n
}

// KV describes a KV-cache call: sequence b's Nq queries attend to its
// first Len(b) cache rows (its cached rows, then the New rows appended
// at SeqLens[b] by the same call). The mask places its diagonal per
// sequence with Nk = Len(b) (bottom-right: query i sees rows
// j ≤ i + Len(b) − Nq).
//
// The cache is Pages pages of PageSize rows each: K is [Pages, PageSize,
// Hkv, D] and V [Pages, PageSize, Hkv, Dv] through Problem.K and
// Problem.V (Batch is the page stride). Row j of sequence b lies in page
// Table[b·MaxPages + j/PageSize], row j mod PageSize. A contiguous cache
// [B, Nmax, Hkv, D] is one page of Nmax rows per sequence (Table
// 0, 1, …, B−1, MaxPages 1). Problem.Nk is MaxPages·PageSize.
type KV struct {
	// SeqLens are the cached lengths per sequence before the append.
	SeqLens []int32
	// New is the number of rows appended per sequence (0: none);
	// NewK [B, New, Hkv, D] and NewV [B, New, Hkv, Dv] have strides
	// NewK and NewV.
	New        int
	NewK, NewV Strides
	// Paged: the caller gave a block table (else Table is synthesised).
	Paged              bool
	PageSize, MaxPages int
	Pages              int
	Table              []int32
}

// Len is the number of cache rows sequence b attends to (after the
// append).
func (kv *KV) Len(b int) int { return int(kv.SeqLens[b]) + kv.New }

// Row returns the page and the row in it of row j of sequence b.
func (kv *KV) Row(b, j int) (page, row int) {
	return int(kv.Table[b*kv.MaxPages+j/kv.PageSize]), j % kv.PageSize
}

// MaxLen is the longest Len over the sequences.
func (kv *KV) MaxLen() int {
	m := 0
	for b := range kv.SeqLens {
		m = max(m, kv.Len(b))
	}
	return m
}

// Sequence is the attention problem of sequence b of a KV-cache call
// over its gathered cache rows (B = 1, Nk = Len(b), K and V contiguous
// [1, Len(b), Hkv, D]), with the call's Ext restricted to sequence b
// (its ALiBi slopes): it has the same keys, diagonals and scores as
// sequence b of p. Q and O keep their strides, offset to batch b by the
// caller.
func (p *Problem) Sequence(b int) *Problem {
	n := p.KV.Len(b)
	s := *p
	if p.Ext != nil {
		s.Ext = p.Batches(b, 1).Ext
		s.Ext.SlopesPerBatch = false
	}
	s.B, s.Nk, s.KV = 1, n, nil
	s.K, s.V = BSHD(n, p.Hkv, p.D), BSHD(n, p.Hkv, p.Dv)
	return &s
}

// Group is the number of query heads per key/value head.
func (p *Problem) Group() int { return p.Hq / p.Hkv }

// KVHead returns the key/value head read by query head h.
func (p *Problem) KVHead(h int) int { return h / p.Group() }

// Causal reports whether a causal mask is applied.
func (p *Problem) Causal() bool { return p.Mask != MaskNone }

// Features names the options beyond the scale and the causal mask that p
// carries, joined by "+" in this order: "window", "keys" (SeqUsedK),
// "packed" (CuQ), "softcap", "alibi", "dropout", "bias"; "" when p.Ext is
// nil. An Ext with none of them (a window whose sides reach every key) is
// "window": it runs the extended kernels all the same. Tuned tiles are
// keyed by it.
func (p *Problem) Features() string {
	e := p.Ext
	if e == nil {
		return ""
	}
	var fs []string
	add := func(on bool, name string) {
		if on {
			fs = append(fs, name)
		}
	}
	add(e.Left >= 0 || e.Right > 0 || e.Right == 0 && !p.Causal(), "window")
	add(e.SeqUsedK != nil, "keys")
	add(e.CuQ != nil, "packed")
	add(e.Softcap != 0, "softcap")
	add(e.Slopes != nil, "alibi")
	add(e.Dropout != nil, "dropout")
	add(e.Bias != nil, "bias")
	if len(fs) == 0 {
		return "window"
	}
	return strings.Join(fs, "+")
}

// KeyLimit returns how many leading keys query row i may see under Mask:
// keys 0 … KeyLimit(i)−1. It is 0 for a row that sees no key (bottom-right
// alignment with Nq > Nk leaves the first Nq−Nk rows empty) and Nk when
// unmasked. It ignores Ext (KeyRange does not).
func (p *Problem) KeyLimit(i int) int { return maskLimit(p.Mask, i, p.Nq, p.Nk) }

// maskLimit is the number of leading keys row i of nq sees among nk
// under mask m.
func maskLimit(m Mask, i, nq, nk int) int {
	var lim int
	switch m {
	case MaskCausalTopLeft:
		lim = i + 1
	case MaskCausalBottomRight:
		lim = i + 1 + nk - nq
	default:
		return nk
	}
	return min(max(lim, 0), nk)
}

// LSEIndex returns the index of row (b, h, i) in LSE and D: contiguous
// [B, Hq, Nq], or [Hq, Tq] when packed.
func (p *Problem) LSEIndex(b, h, i int) int {
	if p.Varlen() {
		return h*p.TotalQ() + p.QRow(b, i)
	}
	return (b*p.Hq+h)*p.Nq + i
}

// Flops returns the FlashAttention convention FLOP count of the forward
// pass: 4·B·Hq·Nq·Nk·d (d the mean of D and Dv), halved when causal; with
// Ext, 2·Hq·(D+Dv) per visible (query, key) pair (Pairs). The backward
// is counted as 2.5× this.
func (p *Problem) Flops() float64 {
	if p.Ext != nil {
		return 2 * float64(p.Hq) * float64(p.D+p.Dv) * p.Pairs()
	}
	f := 2 * float64(p.B) * float64(p.Hq) * float64(p.Nq) * float64(p.Nk) * float64(p.D+p.Dv)
	if p.Causal() {
		f /= 2
	}
	return f
}

// NegInf is the LSE of a row with no visible key.
var NegInf = float32(math.Inf(-1))

// KVFlops is the FLOP count of a KV-cache call's attention: 2·(D+Dv)
// per (query row, head, visible cache row), every mask and window
// counted exactly (Pairs).
func (p *Problem) KVFlops() float64 {
	return 2 * float64(p.Hq) * float64(p.D+p.Dv) * p.Pairs()
}
