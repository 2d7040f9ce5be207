package main

// Decode mode: run, bench and explain on a KV-cache call
// (Engine.ForwardKVCache) instead of a plain forward. It is selected by
// --cache-seqlens, --paged or --append, or by --decode with --nk: B
// sequences, each holding --cache-seqlens rows (default --nk − --append)
// of a cache of --nk rows (contiguous, or paged in blocks of --paged
// rows), get --append new K/V rows each, and --nq queries per sequence
// (default 1) attend to the first length + --append rows. The mask
// defaults to FlashAttention's decoding rule, causal bottom-right (query
// i sees rows j ≤ i + L − Nq, L the sequence's length after the append),
// which for Nq = 1 is no mask. --window, --softcap and --alibi apply as
// in a plain call, each sequence's keys being its cache rows (L above);
// --seqused-k and --seqlens do not (a cache's lengths are its key counts).

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/reference"
	"github.com/x448/float16"
)

// decodeProblem is one KV-cache call as the commands see it. The
// embedded problem's Nk is the cache capacity per sequence (Nmax); its
// Causal and Align are the mask applied per sequence, and its features
// a window, softcap and ALiBi only (no packed lengths or key counts).
type decodeProblem struct {
	problem
	// Lens are the rows each sequence holds before the call (B entries).
	Lens []int32
	// Block is the rows per block of a paged cache (0: contiguous).
	Block int
	// Append rows of new K and V are appended to every sequence.
	Append int
}

// decodeMode reports whether the flags select decode mode.
func (s *shapeFlags) decodeMode() bool {
	return s.decode || len(s.cacheLens) > 0 || s.given("paged") || s.given("append")
}

// decodeBy names the flag that selects decode mode, for messages.
func (s *shapeFlags) decodeBy() string {
	switch {
	case len(s.cacheLens) > 0:
		return "--cache-seqlens"
	case s.given("paged"):
		return "--paged"
	case s.given("append"):
		return "--append"
	}
	return "--decode"
}

// checkDecodeSizes refuses decode-mode sizes out of range, naming the flag.
func (s *shapeFlags) checkDecodeSizes() error {
	if err := s.checkSizes(); err != nil {
		return err
	}
	for _, n := range s.cacheLens {
		switch {
		case n < 0:
			return usagef("--cache-seqlens %d: must be ≥ 0", n)
		case n > math.MaxInt32:
			return usagef("--cache-seqlens %d: at most %d rows", n, math.MaxInt32)
		}
	}
	if s.given("paged") {
		if err := positive(intFlag{"--paged", s.paged}); err != nil {
			return err
		}
	}
	return nonNegative(intFlag{"--append", s.appendN})
}

// decodeAlign is the causal diagonal of decode mode: --align, else
// bottom-right (the decoding rule).
func (s *shapeFlags) decodeAlign() (attention.Alignment, error) {
	if !s.given("align") {
		return attention.BottomRight, nil
	}
	return s.alignment()
}

// decodeProblem turns the flags of run or explain into their decode
// problem.
func (s *shapeFlags) decodeProblem() (decodeProblem, error) {
	if err := s.checkDecodeSizes(); err != nil {
		return decodeProblem{}, err
	}
	nq, nk := 1, 0
	if len(s.nq) > 0 {
		nq = s.nq[0]
	}
	if len(s.nk) > 0 {
		nk = s.nk[0]
	}
	align, err := s.decodeAlign()
	if err != nil {
		return decodeProblem{}, err
	}
	causal := nq > 1
	if s.given("causal") {
		causal = s.causal.one()
	}
	return s.decodePoint(s.batch, s.heads, nq, nk, s.dim[0], s.dtypes[0], causal, align)
}

// decodePoint builds and validates one decode problem: b sequences
// (--cache-seqlens, when given, sets B), nk rows of capacity each (0: the
// longest sequence after the append).
func (s *shapeFlags) decodePoint(b, hq, nq, nk, d int, dt attention.DType, causal bool, align attention.Alignment) (decodeProblem, error) {
	p := decodeProblem{problem: problem{B: b, Hq: hq, Hkv: s.kvHeads, Nq: nq, Nk: nk, D: d, Dv: s.dv, DType: dt,
		Causal: causal, Align: align, Scale: s.scale, features: s.decodeFeatures()}, Block: s.paged, Append: s.appendN}
	if p.Hkv == 0 {
		p.Hkv = hq
	}
	if p.Dv == 0 {
		p.Dv = d
	}
	if s.mode == oneProblem {
		var err error
		if p.Layout, err = attention.ParseLayout(strings.ToLower(s.layout)); err != nil {
			return p, usagef("--layout %q: want bshd or bhsd", s.layout)
		}
	}
	if len(s.cacheLens) > 0 {
		if s.given("batch") && s.batch != len(s.cacheLens) {
			return p, usagef("--batch %d disagrees with --cache-seqlens (%d lengths, one per sequence)", s.batch, len(s.cacheLens))
		}
		p.B = len(s.cacheLens)
		longest := slices.Max(s.cacheLens)
		if nk == 0 {
			p.Nk = max(longest+p.Append, 1)
		}
		for i, n := range s.cacheLens {
			if n+p.Append > p.Nk {
				return p, usagef("--cache-seqlens: sequence %d holds %d rows and --append adds %d: more than --nk %d, the cache's capacity", i, n, p.Append, p.Nk)
			}
			p.Lens = append(p.Lens, int32(n))
		}
	} else {
		switch {
		case nk == 0:
			return p, usagef("decode mode (%s) needs --nk (the cache capacity per sequence) or --cache-seqlens", s.decodeBy())
		case p.Append > nk:
			return p, usagef("--append %d: more rows than the cache holds (--nk %d)", p.Append, nk)
		}
		if err := positive(intFlag{"--batch", b}); err != nil {
			return p, err
		}
		for range b {
			p.Lens = append(p.Lens, int32(nk-p.Append))
		}
	}
	if p.Align == attention.BottomRight && p.Nq == 1 {
		p.Causal = false // one query sees every row: no mask
	}
	return p, p.validate()
}

// decodeFeatures are the features a KV-cache call takes: --window,
// --softcap and --alibi (checkDecodeFlags refuses the others).
func (s *shapeFlags) decodeFeatures() features {
	return features{Window: s.window, Softcap: s.softcap, ALiBi: s.alibi}
}

// paged reports whether the cache is paged.
func (p decodeProblem) paged() bool { return p.Block > 0 }

// maxBlocks is the blocks each sequence's table holds (paged).
func (p decodeProblem) maxBlocks() int { return (p.Nk + p.Block - 1) / p.Block }

// cacheShape is the shape of the cache tensor of head dim d: [B, Nmax,
// Hkv, d], or paged [NumBlocks, Block, Hkv, d] with NumBlocks enough for
// every sequence's capacity.
func (p decodeProblem) cacheShape(d int) attention.Shape {
	if p.paged() {
		return attention.Shape{B: p.B * p.maxBlocks(), S: p.Block, H: p.Hkv, D: d}
	}
	return attention.Shape{B: p.B, S: p.Nk, H: p.Hkv, D: d}
}

// newShape is the shape of the appended rows of head dim d.
func (p decodeProblem) newShape(d int) attention.Shape {
	return attention.Shape{B: p.B, S: p.Append, H: p.Hkv, D: d}
}

// seqLen is the rows sequence b attends to (after the append).
func (p decodeProblem) seqLen(b int) int { return int(p.Lens[b]) + p.Append }

// lens are the lengths before the call, as ints.
func (p decodeProblem) lens() []int {
	out := make([]int, len(p.Lens))
	for i, n := range p.Lens {
		out[i] = int(n)
	}
	return out
}

// table is the block table of a paged cache: every block of the pool, in
// an order shuffled by seed, MaxBlocks per sequence (nil: contiguous).
func (p decodeProblem) table(seed uint64) []int32 {
	if !p.paged() {
		return nil
	}
	perm := rngFor(seed, 7).Perm(p.B * p.maxBlocks())
	t := make([]int32, len(perm))
	for i, x := range perm {
		t[i] = int32(x)
	}
	return t
}

// cache is the KVCache of k and v with table, with its own copy of the
// lengths (ForwardKVCache advances them).
func (p decodeProblem) cache(k, v attention.Tensor, table []int32) *attention.KVCache {
	return &attention.KVCache{K: k, V: v, SeqLens: slices.Clone(p.Lens), BlockTable: table, BlockSize: p.Block}
}

// shapes is the cache without data: what PlanKVCache and KVCacheBytes read.
func (p decodeProblem) shapes(table []int32) *attention.KVCache {
	return p.cache(attention.Tensor{Shape: p.cacheShape(p.D)}, attention.Tensor{Shape: p.cacheShape(p.Dv)}, table)
}

// cacheBytes is the cache bytes the call must read (KVCacheBytes).
func (p decodeProblem) cacheBytes() float64 {
	return attention.KVCacheBytes(p.shapes(nil), p.Append, p.DType)
}

// flops counts the visible (query, cache row) pairs exactly (as
// BenchResult.Flops does for a KV-cache call), the window included.
func (p decodeProblem) flops() float64 {
	return kvFlops(p.lens(), p.Append, p.Nq, p.Hq, p.D, p.Dv, p.Causal, p.Align == attention.BottomRight, p.Window)
}

// kvFlops is 2·(d+dv) per query head and visible (query, cache row) pair
// of a KV-cache call over sequences of lens rows plus appendN: query i of
// a sequence of L rows has its diagonal at row i + L − nq (bottomRight)
// or i, and sees rows j < L from window[0] before it to window[1] after
// it (nil or −1: unbounded; causal: nothing after it).
func kvFlops(lens []int, appendN, nq, hq, d, dv int, causal, bottomRight bool, window *[2]int) float64 {
	left, right := -1, -1
	if window != nil {
		left, right = window[0], window[1]
	}
	if causal {
		right = 0
	}
	var pairs float64
	for _, n := range lens {
		l := n + appendN
		if left < 0 && right < 0 {
			pairs += float64(nq) * float64(l)
			continue
		}
		for i := range nq {
			diag := i
			if bottomRight {
				diag += l - nq
			}
			lo, hi := 0, l
			if left >= 0 {
				lo = min(max(diag-left, 0), l)
			}
			if right >= 0 {
				hi = min(max(diag+right+1, 0), l)
			}
			pairs += float64(max(hi-lo, 0))
		}
	}
	return 2 * float64(hq) * float64(d+dv) * pairs
}

// validate checks the sizes the way attention does, with flag names.
func (p decodeProblem) validate() error {
	if err := positive(intFlag{"--batch", p.B}, intFlag{"--heads", p.Hq}, intFlag{"--kv-heads", p.Hkv}, intFlag{"--nq", p.Nq},
		intFlag{"--dim", p.D}, intFlag{"--dv", p.Dv}); err != nil {
		return err
	}
	if err := checkHeads(p.Hq, p.Hkv, p.D, p.Dv, p.Scale); err != nil {
		return err
	}
	if err := p.features.check(p.B, p.Nk, p.Causal); err != nil {
		return err
	}
	// Refuse caches that cannot fit in memory before allocating anything.
	return checkHostBytes("decode problem", p, p.DType, p.qShape(), p.oShape(), p.cacheShape(p.D), p.cacheShape(p.Dv), p.newShape(p.D), p.newShape(p.Dv))
}

// checkable refuses --check where the float64 reference of the longest
// sequence would not fit (it materialises Nq×L matrices per head).
func (p decodeProblem) checkable() error {
	longest := 0
	for b := range p.B {
		longest = max(longest, p.seqLen(b))
	}
	if per := 2 * 8 * float64(p.Nq) * float64(longest); per > maxRefMatrixBytes {
		return usagef("--check: the float64 reference materialises Nq×L = %d×%d matrices for the longest sequence (%.3g GB per head); at most %.3g GB",
			p.Nq, longest, per/1e9, maxRefMatrixBytes/1e9)
	}
	return nil
}

func (p decodeProblem) String() string {
	return fmt.Sprintf("B=%d Hq=%d Hkv=%d Nq=%d Nmax=%d d=%d dv=%d %s %s %s scale=%.4g",
		p.B, p.Hq, p.Hkv, p.Nq, p.Nk, p.D, p.Dv, p.DType, p.Layout, p.optionsString(), p.effectiveScale())
}

// optionsString is the mask and the features; a window or ALiBi without
// a causal mask names the diagonal they measure from ("non-causal
// bottom-right window=64,64").
func (p decodeProblem) optionsString() string {
	s := p.maskString()
	if !p.Causal && p.diagonal() {
		s += " " + p.Align.String()
	}
	if f := p.features.String(); f != "" {
		s += " " + f
	}
	return s
}

// cacheString describes the cache: lengths, append, storage.
func (p decodeProblem) cacheString() string {
	s := "lengths " + compactLens(p.lens(), ",")
	if p.Append > 0 {
		att := make([]int, p.B)
		for b := range att {
			att[b] = p.seqLen(b)
		}
		s += fmt.Sprintf(", +%d appended: attends to %s rows", p.Append, compactLens(att, ","))
	}
	if p.paged() {
		return s + fmt.Sprintf("; paged: %d blocks of %d rows, %d per sequence, in shuffled order", p.B*p.maxBlocks(), p.Block, p.maxBlocks())
	}
	return s + fmt.Sprintf("; contiguous [%d, %d, %d, %d]", p.B, p.Nk, p.Hkv, p.D)
}

// compactLens joins up to 8 lengths with sep; more are summarised.
func compactLens(xs []int, sep string) string {
	if len(xs) <= 8 {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = strconv.Itoa(x)
		}
		return strings.Join(s, sep)
	}
	sum := 0
	for _, x := range xs {
		sum += x
	}
	return fmt.Sprintf("%d…%d (%d sequences, mean %d)", slices.Min(xs), slices.Max(xs), len(xs), sum/len(xs))
}

// cacheJSON describes the cache of a decode problem in the JSON of run and
// explain.
type cacheJSON struct {
	// SeqLens are the rows each sequence holds before the call; Append
	// the rows appended to each.
	SeqLens []int `json:"seqlens"`
	Append  int   `json:"append"`
	// BlockSize and Blocks describe a paged cache (0 for a contiguous one).
	BlockSize int `json:"block_size,omitempty"`
	Blocks    int `json:"blocks,omitempty"`
	// Bytes are the cache bytes the call reads (attention.KVCacheBytes).
	Bytes float64 `json:"bytes"`
}

func (p decodeProblem) json() problemJSON {
	j := p.problem.json()
	c := &cacheJSON{SeqLens: p.lens(), Append: p.Append, Bytes: p.cacheBytes()}
	if p.paged() {
		c.BlockSize, c.Blocks = p.Block, p.B*p.maxBlocks()
	}
	j.Cache = c
	return j
}

// checkDecodeEffect refuses the problem flags that change nothing in
// decode mode (flashvk ignores no flag).
func (s *shapeFlags) checkDecodeEffect(p decodeProblem) error {
	if err := s.checkDecodeFlags(); err != nil {
		return err
	}
	if err := p.features.effect(p.Nk, p.Causal); err != nil {
		return err
	}
	if w := p.Window; w != nil {
		q := p
		q.features.Window = nil
		if p.flops() == q.flops() {
			return windowNoEffect(w)
		}
	}
	switch {
	case s.given("causal") && p.Nq == 1 && p.Align == attention.BottomRight:
		return usagef("--causal has no effect: with Nq = 1 the decoding mask (bottom-right) shows the query every cache row (add --align top-left for a top-left mask)")
	case !s.given("align"):
	case !p.Causal && !p.diagonal():
		return usagef("--align has no effect: the mask is not causal (with Nq = 1 decode mode masks nothing unless --causal is given) and there is no --window or --alibi")
	case slices.IndexFunc(p.Lens, func(n int32) bool { return int(n)+p.Append != p.Nq }) < 0:
		return usagef("--align has no effect: every sequence attends to Nq = %d rows, where top-left and bottom-right are the same diagonal", p.Nq)
	}
	return nil
}

// decodeFeatureFlags are the flags of featureFlags that decode mode takes
// (decodeFeatures).
var decodeFeatureFlags = []string{"window", "softcap", "alibi"}

// checkDecodeFlags refuses the flags decode mode does not read, on every
// command: --seqlens, the bias's, and the features beyond
// decodeFeatureFlags.
func (s *shapeFlags) checkDecodeFlags() error {
	by := s.decodeBy()
	if s.given("seqlens") {
		return usagef("--seqlens does not apply in decode mode (%s): a KV-cache call packs no sequences (--cache-seqlens gives the rows each sequence holds)", by)
	}
	for _, name := range biasFlags {
		if s.given(name) {
			return usagef("--%s does not apply in decode mode (%s): a KV-cache call takes no bias or mask (Engine.ForwardKVCache refuses Options.Bias; decoding has no backward)", name, by)
		}
	}
	for _, name := range featureFlags {
		if s.given(name) && !slices.Contains(decodeFeatureFlags, name) {
			return usagef("--%s does not apply in decode mode (%s): a KV-cache call takes --window, --softcap and --alibi only (no dropout; each sequence's cache length is its key count)", name, by)
		}
	}
	switch {
	case s.given("decode") && by != "--decode":
		return usagef("--decode has no effect: %s selects decode mode", by)
	case s.given("seq"):
		return usagef("--seq has no effect in decode mode (%s): --nq (default 1) and --nk or --cache-seqlens give the lengths", by)
	case s.mode == oneProblem:
	case s.given("tokens") && len(s.cacheLens) > 0:
		return usagef("--tokens has no effect: --cache-seqlens sets B")
	}
	if s.mode == oneProblem {
		return nil
	}
	return s.checkEffect()
}

// decodeInputs are the random operands of a decode problem.
type decodeInputs struct {
	q, k, v, newK, newV attention.Tensor
	table               []int32
}

// inputs draws the operands from seed (Q, the whole cache, and the rows
// to append; the block table is made beforehand, for the plan).
func (p decodeProblem) inputs(ctx context.Context, seed uint64, table []int32) (*decodeInputs, error) {
	in := &decodeInputs{table: table}
	type operand struct {
		t      *attention.Tensor
		s      attention.Shape
		stream uint64
	}
	ops := []operand{{&in.q, p.qShape(), 1}, {&in.k, p.cacheShape(p.D), 2}, {&in.v, p.cacheShape(p.Dv), 3}}
	if p.Append > 0 {
		ops = append(ops, operand{&in.newK, p.newShape(p.D), 5}, operand{&in.newV, p.newShape(p.Dv), 6})
	}
	for _, o := range ops {
		var err error
		if *o.t, err = randomTensorCtx(ctx, p.DType, o.s, p.Layout, rngFor(seed, o.stream)); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// computeDecodeReference is the float64 reference of a decode problem:
// each sequence as a plain forward (package reference) over its rows
// gathered from the cache through the block table, the appended rows
// taken from newK and newV (so a wrong append shows). A sequence that
// attends to no row has O = 0 and LSE = −Inf. O is [B, Nq, Hq, Dv] and
// LSE [B, Hq, Nq], as the library returns them.
func computeDecodeReference(ctx context.Context, p decodeProblem, in *decodeInputs) (*refResult, error) {
	return await(ctx, func() (*refResult, error) {
		r := &refResult{}
		for b := range p.B {
			o, lse, err := p.referenceSeq(ctx, in, b)
			if err != nil {
				return nil, fmt.Errorf("reference: sequence %d: %w", b, err)
			}
			r.o, r.lse = append(r.o, o...), append(r.lse, lse...)
		}
		return r, nil
	})
}

// referenceSeq is the float64 reference of sequence b.
func (p decodeProblem) referenceSeq(ctx context.Context, in *decodeInputs, b int) (o, lse []float64, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	n := p.seqLen(b)
	if n == 0 {
		lse = make([]float64, p.Hq*p.Nq)
		for i := range lse {
			lse[i] = math.Inf(-1)
		}
		return make([]float64, p.Nq*p.Hq*p.Dv), lse, nil
	}
	var q, k, v []float64
	for i := range p.Nq {
		for h := range p.Hq {
			q = elems64(q, in.q, in.q.Strides.Offset(b, i, h), p.D)
		}
	}
	held := int(p.Lens[b])
	for j := range n {
		for h := range p.Hkv {
			if j < held {
				pg, row := b, j
				if p.paged() {
					pg, row = int(in.table[b*p.maxBlocks()+j/p.Block]), j%p.Block
				}
				k = elems64(k, in.k, in.k.Strides.Offset(pg, row, h), p.D)
				v = elems64(v, in.v, in.v.Strides.Offset(pg, row, h), p.Dv)
			} else {
				k = elems64(k, in.newK, in.newK.Strides.Offset(b, j-held, h), p.D)
				v = elems64(v, in.newV, in.newV.Strides.Offset(b, j-held, h), p.Dv)
			}
		}
	}
	rp := reference.Params{B: 1, Hq: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: n, D: p.D, Dv: p.Dv,
		Scale: float64(p.scale32()), Causal: p.Causal, BottomRight: p.Align == attention.BottomRight}
	p.features.setParams(&rp) // the window, softcap and slopes (per head: every sequence alike)
	return reference.ForwardContext(ctx, rp, q, k, v)
}

// elems64 appends the n elements of t's data from offset off to dst, as
// float64 (exactly).
func elems64(dst []float64, t attention.Tensor, off, n int) []float64 {
	switch d := t.Data.(type) {
	case []float32:
		for _, x := range d[off : off+n] {
			dst = append(dst, float64(x))
		}
	case []float16.Float16:
		for _, x := range d[off : off+n] {
			dst = append(dst, float64(x.Float32()))
		}
	case []bfloat16.BFloat16:
		for _, x := range d[off : off+n] {
			dst = append(dst, x.Float64())
		}
	}
	return dst
}

// decodeCheck compares a call's O and LSE with the reference.
func decodeCheck(dt attention.DType, out *attention.Output, ref *refResult) []checkRow {
	tol := tolerance(dt)
	return []checkRow{checkRowOf("o", out.O.Float32s(), ref.o, tol), checkRowOf("lse", out.LSE, ref.lse, tol)}
}

// gbs is a bandwidth in GB/s: bytes over a time in ms.
func gbs(bytes, ms float64) float64 {
	if ms <= 0 {
		return 0
	}
	return bytes / (ms / 1e3) / 1e9
}

// fmtGBs formats a bandwidth with four significant digits.
func fmtGBs(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// checkDecodeGrid is checkDecodeEffect for bench's grid.
func (s *shapeFlags) checkDecodeGrid() error {
	if err := s.checkDecodeFlags(); err != nil {
		return err
	}
	align, err := s.decodeAlign()
	if err != nil {
		return err
	}
	oneQuery := len(s.nq) == 0 || !slices.ContainsFunc(s.nq, func(n int) bool { return n != 1 })
	diagonal := s.decodeFeatures().diagonal() // a window or ALiBi measures from --align's diagonal
	switch {
	case s.given("causal") && oneQuery && align == attention.BottomRight:
		return usagef("--causal has no effect: with Nq = 1 the decoding mask (bottom-right) shows the query every cache row (add --align top-left for a top-left mask)")
	case !s.given("align") || diagonal:
	case s.given("causal") && !slices.Contains(s.causal.vals, true):
		return usagef("--align has no effect: --causal false runs no causal mask")
	case !s.given("causal") && oneQuery:
		return usagef("--align has no effect: the mask is not causal (with Nq = 1 decode mode masks nothing unless --causal is given)")
	}
	if w := s.window; w != nil && w[0] == -1 && w[1] == -1 {
		return usagef("--window -1,-1 has no effect: both sides are unbounded (omit --window)")
	}
	return nil
}
