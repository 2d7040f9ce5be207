package attention

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

// KVCache is the key/value cache of a batch of B sequences being decoded,
// in host memory. Two forms:
//   - contiguous (BlockTable nil): K is [B, Nmax, Hkv, D] and V
//     [B, Nmax, Hkv, Dv]; sequence b's row j is row (b, j);
//   - paged (vLLM's and FlashAttention's block_table): K is
//     [NumBlocks, BlockSize, Hkv, D] and V [NumBlocks, BlockSize, Hkv, Dv]
//     (Shape.B counts the blocks, Shape.S is BlockSize) and BlockTable,
//     row-major [B, MaxBlocks], names the block holding each BlockSize
//     rows of each sequence: row j of sequence b lies in block
//     BlockTable[b·MaxBlocks + j/BlockSize], row j mod BlockSize. Entries
//     past a sequence's length are not read (any value, e.g. −1).
//
// Any strides (BSHD, BHSD, views) are allowed, as for Tensor.
type KVCache struct {
	K, V Tensor
	// SeqLens are the rows of each sequence already in the cache (B
	// entries, 0 … capacity). ForwardKVCache advances them by the rows
	// it appends, once it has succeeded.
	SeqLens []int32
	// BlockTable and BlockSize describe a paged cache (nil and 0 for a
	// contiguous one).
	BlockTable []int32
	BlockSize  int
}

// DeviceKVCache is KVCache with the cache on the engine's device: K and V
// are DeviceTensors of the shapes KVCache describes; SeqLens and
// BlockTable stay on the host (a few bytes per sequence, sent with each
// call).
type DeviceKVCache struct {
	K, V       *DeviceTensor
	SeqLens    []int32
	BlockTable []int32
	BlockSize  int
}

// ForwardKVCache is the decoding step: for each sequence b it first
// appends newK and newV (optional: the zero Tensor for none; [B, Nnew,
// Hkv, D] and [B, Nnew, Hkv, Dv]) into the cache at rows SeqLens[b] …
// SeqLens[b]+Nnew−1, then computes attention of q [B, Nq, Hq, D] over
// the sequence's first SeqLens[b]+Nnew cache rows, and on success
// advances SeqLens[b] by Nnew. Options.Causal masks per sequence with
// Nk = SeqLens[b]+Nnew, placed by Align (BottomRight, FlashAttention's
// rule for decoding: query i sees rows j ≤ i + Nk − Nq, so the Nq new
// tokens see the cache and each other causally; set it, since the zero
// Alignment is TopLeft). Options.Window, Softcap and ALiBi apply as in
// Forward with the same Nk_b (a sliding window of decoding: Window{Left:
// W−1, Right: 0} with Causal and BottomRight); SeqUsedK, CuSeqlensQ,
// CuSeqlensK, Dropout and Bias are refused with ErrOption. A sequence (or a
// query row) that sees no row gives O = 0 and LSE = −Inf.
//
// Nothing is written before every argument has been checked (errors wrap
// ErrShape, ErrLength, ErrOption, ErrStride or ErrDType and name the
// argument): lengths past the cache's capacity, block tables naming
// blocks that do not exist, appends that would write a block the tables
// use more than once (another sequence's, or the same sequence's twice:
// the write would change rows that use reads). If the call fails after
// the append, the appended rows lie
// past the unchanged SeqLens, where no call reads them.
func (e *Engine) ForwardKVCache(ctx context.Context, q Tensor, cache *KVCache, newK, newV Tensor, opt Options) (*Output, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	p, err := hostKVProblem(q, cache, newK, newV, opt)
	if err != nil {
		return nil, err
	}
	o, err := NewTensor(q.DType(), outShape(p), layoutOf(q))
	if err != nil {
		return nil, err
	}
	out := &Output{O: o, LSE: make([]float32, p.B*p.Hq*p.Nq)}
	if err := e.ForwardKVCacheInto(ctx, q, cache, newK, newV, out.O, out.LSE, opt); err != nil {
		return nil, err
	}
	return out, nil
}

// ForwardKVCacheInto is ForwardKVCache writing into caller-provided O
// ([B, Nq, Hq, Dv]) and LSE (B·Hq·Nq), which may not share memory with
// any other operand.
func (e *Engine) ForwardKVCacheInto(ctx context.Context, q Tensor, cache *KVCache, newK, newV, o Tensor, lse []float32, opt Options) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	p, err := hostKVProblem(q, cache, newK, newV, opt)
	if err != nil {
		return err
	}
	dt := q.DType()
	if p.O, err = checkLike("o", o, outShape(p), dt, true); err != nil {
		return err
	}
	if want := p.B * p.Hq * p.Nq; len(lse) != want {
		return fmt.Errorf("attention: lse: length %d, want B·Hq·Nq = %d: %w", len(lse), want, ErrLength)
	}
	if err := e.supports(dt); err != nil {
		return err
	}
	if err := distinctKV(p, q, cache, newK, newV, o, lse); err != nil {
		return err
	}
	a := kvOperands{q: q, k: cache.K, v: cache.V, newK: newK, newV: newV, o: o, lse: lse}
	if err := e.appendAndAttend(ctx, p, a); err != nil {
		return err
	}
	advance(cache.SeqLens, p.KV.New)
	return nil
}

// ForwardKVCacheDevice is ForwardKVCache with device operands: q, newK
// and newV (nil for no append), O and LSE (LSEShape, BHSD) are device
// tensors, and the append and the attention run on the device in one
// submission.
func (e *Engine) ForwardKVCacheDevice(ctx context.Context, q *DeviceTensor, cache *DeviceKVCache, newK, newV, o, lse *DeviceTensor, opt Options) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	if cache == nil {
		return fmt.Errorf("attention: cache: nil: %w", ErrOption)
	}
	named := []namedDT{{"q", q}, {"cache.K", cache.K}, {"cache.V", cache.V}, {"o", o}, {"lse", lse}}
	if newK != nil || newV != nil {
		named = append(named, namedDT{"newK", newK}, namedDT{"newV", newV})
	}
	for _, a := range named {
		if err := e.use(a.name, a.t); err != nil {
			return err
		}
	}
	dt := q.dt
	inputs := []namedDT{{"q", q}, {"cache.K", cache.K}, {"cache.V", cache.V}}
	if newK != nil {
		inputs = append(inputs, namedDT{"newK", newK}, namedDT{"newV", newV})
	}
	if err := checkInputs(dt, inputs); err != nil {
		return err
	}
	in := kvInput{
		q: q.shape, qs: q.st, k: cache.K.shape, ks: cache.K.st, v: cache.V.shape, vs: cache.V.st,
		seqLens: cache.SeqLens, table: cache.BlockTable, blockSize: cache.BlockSize,
	}
	if newK != nil {
		in.append, in.nk, in.nks, in.nv, in.nvs = true, newK.shape, newK.st, newV.shape, newV.st
	}
	p, err := kvProblem(in, opt)
	if err != nil {
		return err
	}
	if err := deviceLike("o", o, outShape(p), dt); err != nil {
		return err
	}
	p.O = o.st
	if err := e.checkLSE(lse, p); err != nil {
		return err
	}
	outs := []namedDT{{"o", o}, {"lse", lse}}
	if p.KV.New > 0 {
		outs = append(outs, namedDT{"cache.K", cache.K}, namedDT{"cache.V", cache.V})
	}
	if err := distinctOutputs(outs, named); err != nil {
		return err
	}
	if err := e.supports(dt); err != nil {
		return err
	}
	if db, ok := e.b.(deviceBackend); ok {
		if err := db.kvDevice(ctx, p, q, cache.K, cache.V, newK, newV, o, lse); err != nil {
			return err
		}
		advance(cache.SeqLens, p.KV.New)
		return nil
	}
	a := kvOperands{q: q.host, k: cache.K.host, v: cache.V.host, o: o.host, lse: lse.host.Data.([]float32)}
	if newK != nil {
		a.newK, a.newV = newK.host, newV.host
	}
	if err := e.appendAndAttend(ctx, p, a); err != nil {
		return err
	}
	advance(cache.SeqLens, p.KV.New)
	return nil
}

func advance(seqLens []int32, n int) {
	for i := range seqLens {
		seqLens[i] += int32(n)
	}
}

// kvInput are the shapes, strides and metadata of a KV-cache call, host
// or device.
type kvInput struct {
	q, k, v    Shape
	qs, ks, vs Strides
	seqLens    []int32
	table      []int32
	blockSize  int
	append     bool
	nk, nv     Shape
	nks, nvs   Strides
}

// hostKVProblem validates the host operands of a KV-cache call.
func hostKVProblem(q Tensor, c *KVCache, newK, newV Tensor, opt Options) (*spec.Problem, error) {
	if c == nil {
		return nil, fmt.Errorf("attention: cache: nil: %w", ErrOption)
	}
	dt := q.DType()
	in := kvInput{q: q.Shape, k: c.K.Shape, v: c.V.Shape, seqLens: c.SeqLens, table: c.BlockTable, blockSize: c.BlockSize}
	// An append writes cache rows: the cache is then an output, whose
	// rows may not overlap.
	in.append = newK.Data != nil || newV.Data != nil
	var err error
	if in.qs, err = checkOperand("q", q, 0, false); err != nil {
		return nil, err
	}
	if in.ks, err = checkOperand("cache.K", c.K, dt, in.append); err != nil {
		return nil, err
	}
	if in.vs, err = checkOperand("cache.V", c.V, dt, in.append); err != nil {
		return nil, err
	}
	if in.append {
		in.nk, in.nv = newK.Shape, newV.Shape
		if in.nks, err = checkOperand("newK", newK, dt, false); err != nil {
			return nil, err
		}
		if in.nvs, err = checkOperand("newV", newV, dt, false); err != nil {
			return nil, err
		}
	}
	return kvProblem(in, opt)
}

// kvProblem checks that the operands of a KV-cache call agree and builds
// its Problem (O's strides are left to the caller).
func kvProblem(in kvInput, opt Options) (*spec.Problem, error) {
	paged := in.table != nil || in.blockSize != 0
	b := in.q.B
	if len(in.seqLens) != b {
		return nil, fmt.Errorf("attention: cache.SeqLens: %d entries, want one per sequence (q's batch %d): %w", len(in.seqLens), b, ErrLength)
	}
	kv := &spec.KV{SeqLens: in.seqLens, Paged: paged, Pages: in.k.B, PageSize: in.k.S}
	switch {
	case in.k.D != in.q.D:
		return nil, fmt.Errorf("attention: cache.K: head dim %d ≠ q's %d: %w", in.k.D, in.q.D, ErrShape)
	case in.v.B != in.k.B || in.v.S != in.k.S:
		return nil, fmt.Errorf("attention: cache.V: shape %v does not match cache.K's %v: %w", in.v, in.k, ErrShape)
	case in.v.H != in.k.H:
		return nil, fmt.Errorf("attention: cache.V: %d heads ≠ cache.K's %d: %w", in.v.H, in.k.H, ErrShape)
	case in.q.H%in.k.H != 0:
		return nil, fmt.Errorf("attention: cache.K: %d kv heads do not divide q's %d heads: %w", in.k.H, in.q.H, ErrShape)
	}
	if paged {
		if in.blockSize < 1 || in.blockSize != in.k.S {
			return nil, fmt.Errorf("attention: cache.BlockSize: %d, but cache.K holds blocks of %d rows (shape %v = [NumBlocks, BlockSize, Hkv, D]): %w", in.blockSize, in.k.S, in.k, ErrShape)
		}
		if len(in.table) == 0 || len(in.table)%b != 0 {
			return nil, fmt.Errorf("attention: cache.BlockTable: %d entries, want B·MaxBlocks with B = %d: %w", len(in.table), b, ErrLength)
		}
		kv.MaxPages, kv.Table = len(in.table)/b, in.table
	} else {
		if in.k.B != b {
			return nil, fmt.Errorf("attention: cache.K: batch %d ≠ q's %d (a contiguous cache is [B, Nmax, Hkv, D]): %w", in.k.B, b, ErrShape)
		}
		kv.MaxPages, kv.Table = 1, make([]int32, b)
		for i := range kv.Table {
			kv.Table[i] = int32(i)
		}
	}
	capacity := kv.MaxPages * kv.PageSize
	rows := min(capacity, math.MaxInt32) // (the kernels index rows in int32)
	if in.append {
		switch {
		case in.nk.B != b || in.nv.B != b:
			return nil, fmt.Errorf("attention: newK, newV: batch %d and %d, want q's %d: %w", in.nk.B, in.nv.B, b, ErrShape)
		case in.nk.S != in.nv.S:
			return nil, fmt.Errorf("attention: newV: %d rows ≠ newK's %d: %w", in.nv.S, in.nk.S, ErrShape)
		case in.nk.H != in.k.H || in.nv.H != in.k.H:
			return nil, fmt.Errorf("attention: newK, newV: %d and %d heads, want the cache's %d: %w", in.nk.H, in.nv.H, in.k.H, ErrShape)
		case in.nk.D != in.k.D || in.nv.D != in.v.D:
			return nil, fmt.Errorf("attention: newK, newV: head dims %d and %d, want the cache's %d and %d: %w", in.nk.D, in.nv.D, in.k.D, in.v.D, ErrShape)
		}
		kv.New, kv.NewK, kv.NewV = in.nk.S, in.nks, in.nvs
	}
	for i, n := range in.seqLens {
		if n < 0 || int64(n)+int64(kv.New) > int64(rows) {
			return nil, fmt.Errorf("attention: cache.SeqLens[%d]: %d (+%d appended) outside the cache's capacity 0 … %d: %w", i, n, kv.New, rows, ErrLength)
		}
		for blk := range (int(n) + kv.New + kv.PageSize - 1) / kv.PageSize {
			if pg := kv.Table[i*kv.MaxPages+blk]; pg < 0 || int(pg) >= kv.Pages {
				return nil, fmt.Errorf("attention: cache.BlockTable[%d][%d]: block %d, the cache holds %d: %w", i, blk, pg, kv.Pages, ErrOption)
			}
		}
	}
	if kv.New > 0 {
		if err := checkAppendPages(kv); err != nil {
			return nil, err
		}
	}
	scale, mask, err := opt.resolve(in.q.D)
	if err != nil {
		return nil, err
	}
	if opt.SeqUsedK != nil || opt.varlen() || (opt.Dropout != nil && opt.Dropout.P != 0) || opt.Bias != nil {
		return nil, fmt.Errorf("attention: options: KV-cache calls take no SeqUsedK, CuSeqlensQ, CuSeqlensK, Dropout or Bias (the cache's SeqLens are its key counts; decoding is inference): %w", ErrOption)
	}
	// Window, Softcap and ALiBi: each sequence's keys are its cache rows
	// (spec.Problem.Keys), sides wider than Nq + capacity unbounded.
	ext, err := opt.ext(b, in.q.H, in.q.S, capacity)
	if err != nil {
		return nil, err
	}
	return &spec.Problem{
		B: b, Hq: in.q.H, Hkv: in.k.H, Nq: in.q.S, Nk: capacity, D: in.q.D, Dv: in.v.D,
		Scale: scale, Mask: mask, Q: in.qs, K: in.ks, V: in.vs, KV: kv, Ext: ext,
	}, nil
}

// checkAppendPages refuses an append that writes a block the tables use
// more than once — in another sequence's table or twice in the same one:
// the write would change rows another use reads (its own cached rows
// included), or two writes would race.
func checkAppendPages(kv *spec.KV) error {
	type use struct{ b, blk int }
	uses := map[int32][]use{}
	for b := range kv.SeqLens {
		for blk := range (kv.Len(b) + kv.PageSize - 1) / kv.PageSize {
			pg := kv.Table[b*kv.MaxPages+blk]
			uses[pg] = append(uses[pg], use{b, blk})
		}
	}
	for b := range kv.SeqLens {
		for blk := range (kv.Len(b) + kv.PageSize - 1) / kv.PageSize {
			pg := kv.Table[b*kv.MaxPages+blk]
			u := uses[pg]
			if len(u) < 2 || !writes(kv, b, blk) {
				continue
			}
			o := u[0]
			if o == (use{b, blk}) {
				o = u[1]
			}
			return fmt.Errorf("attention: cache.BlockTable: block %d is sequence %d's block %d and sequence %d's block %d, and the append writes it: %w",
				pg, b, blk, o.b, o.blk, ErrOption)
		}
	}
	return nil
}

// writes reports whether the append writes block blk of sequence b.
func writes(kv *spec.KV, b, blk int) bool {
	lo, hi := int(kv.SeqLens[b]), kv.Len(b) // rows written: lo … hi−1
	return hi > lo && blk*kv.PageSize < hi && (blk+1)*kv.PageSize > lo
}

// distinctKV fails when a host KV-cache call's outputs — o, lse and, with
// an append, cache.K and cache.V — share memory with any other operand.
func distinctKV(p *spec.Problem, q Tensor, cache *KVCache, newK, newV, o Tensor, lse []float32) error {
	all := []hostView{viewOf("o", o), sliceView("lse", lse), viewOf("q", q)}
	written := 2
	if p.KV.New > 0 {
		// The append writes the cache: it may share memory with nothing.
		all = append(all[:2], viewOf("cache.K", cache.K), viewOf("cache.V", cache.V), viewOf("q", q),
			viewOf("newK", newK), viewOf("newV", newV))
		written = 4
	} else {
		all = append(all, viewOf("cache.K", cache.K), viewOf("cache.V", cache.V))
	}
	return distinctHost(all[:written], all)
}

// kvOperands are the host operands of a KV-cache call (newK and newV
// zero Tensors without an append).
type kvOperands struct {
	q, k, v, newK, newV, o Tensor
	lse                    []float32
}

// appendAndAttend appends the new rows into the host cache (when p has
// any) and runs the attention on host operands.
func (e *Engine) appendAndAttend(ctx context.Context, p *spec.Problem, a kvOperands) error {
	if p.KV.New > 0 {
		appendHost(p, a.k, a.newK, p.K, p.KV.NewK)
		appendHost(p, a.v, a.newV, p.V, p.KV.NewV)
	}
	if db, ok := e.b.(deviceBackend); ok {
		return e.kvHostOnDevice(ctx, db, p, a)
	}
	return e.kvGathered(ctx, p, a.q, a.k, a.v, a.o, a.lse)
}

// appendHost copies the rows of src ([B, New, H, D], strides ss) into the
// cache tensor dst (strides ds) at each sequence's length.
func appendHost(p *spec.Problem, dst, src Tensor, ds, ss Strides) {
	kv, n := p.KV, src.Shape.D
	for b := range p.B {
		for t := range kv.New {
			pg, row := kv.Row(b, int(kv.SeqLens[b])+t)
			for h := range p.Hkv {
				copyRow(dst.Data, src.Data, ds.Offset(pg, row, h), ss.Offset(b, t, h), n)
			}
		}
	}
}

// kvGathered computes each sequence as a plain forward over its cache
// rows gathered into dense tensors.
func (e *Engine) kvGathered(ctx context.Context, p *spec.Problem, q, k, v, o Tensor, lse []float32) error {
	per := p.Hq * p.Nq
	for b := range p.B {
		sp := p.Sequence(b)
		qb, ob, lb := batchView(q, p.Q, b), batchView(o, p.O, b), lse[b*per:(b+1)*per]
		if sp.Nk == 0 {
			zeroRows(ob)
			for i := range lb {
				lb[i] = float32(math.Inf(-1))
			}
			continue
		}
		kb, vb := gatherCache(p, k, p.K, b, p.D), gatherCache(p, v, p.V, b, p.Dv)
		if err := e.b.Forward(ctx, sp, &forwardArgs{Q: qb, K: kb, V: vb, O: ob, LSE: lb}); err != nil {
			return err
		}
	}
	return nil
}

// batchView is batch b of t (strides st) as a tensor of one batch.
func batchView(t Tensor, st Strides, b int) Tensor {
	s := t.Shape
	s.B = 1
	off := b * st.Batch
	v := Tensor{Shape: s, Strides: st}
	switch d := t.Data.(type) {
	case []float32:
		v.Data = d[off:]
	case []float16.Float16:
		v.Data = d[off:]
	case []bfloat16.BFloat16:
		v.Data = d[off:]
	}
	return v
}

// zeroRows sets every element of t's view to zero.
func zeroRows(t Tensor) {
	z := zerosLike(t)
	scatter(t, z)
}

// gatherCache copies sequence b's Len(b) rows of the cache tensor c
// (strides st, head dim d) into a dense [1, Len(b), Hkv, d] tensor.
func gatherCache(p *spec.Problem, c Tensor, st Strides, b, d int) Tensor {
	n := p.KV.Len(b)
	g, _ := NewTensor(c.DType(), Shape{B: 1, S: n, H: p.Hkv, D: d}, BSHD)
	for j := range n {
		pg, row := p.KV.Row(b, j)
		for h := range p.Hkv {
			copyRow(g.Data, c.Data, (j*p.Hkv+h)*d, st.Offset(pg, row, h), d)
		}
	}
	return g
}

// kvDeviceSet are the device tensors of a KV-cache call made from host
// operands (newK and newV nil without an append).
type kvDeviceSet struct {
	q, k, v, newK, newV, o, lse *DeviceTensor
	made                        []*DeviceTensor
}

func (d *kvDeviceSet) close() {
	for _, t := range d.made {
		t.Close()
	}
}

// kvUpload copies the host operands of the KV-cache call p into dense
// device tensors (O and LSE allocated, not uploaded) and returns them
// with a copy of p whose strides are theirs. Close the set when done.
func (e *Engine) kvUpload(ctx context.Context, p *spec.Problem, a kvOperands) (*kvDeviceSet, *spec.Problem, error) {
	d := &kvDeviceSet{}
	put := func(t Tensor, dt DType, l Layout, upload bool) (*DeviceTensor, error) {
		dt0, err := e.NewDeviceTensor(dt, t.Shape, l)
		if err != nil {
			return nil, err
		}
		d.made = append(d.made, dt0)
		if upload {
			err = dt0.Upload(ctx, t)
		}
		return dt0, err
	}
	dt, dp, kv := a.q.DType(), *p, *p.KV
	dp.KV = &kv
	var err error
	for _, x := range []struct {
		dst    **DeviceTensor
		t      Tensor
		st     *Strides
		upload bool
	}{{&d.q, a.q, &dp.Q, true}, {&d.k, a.k, &dp.K, true}, {&d.v, a.v, &dp.V, true}, {&d.o, a.o, &dp.O, false}} {
		if *x.dst, err = put(x.t, dt, BSHD, x.upload); err != nil {
			d.close()
			return nil, nil, err
		}
		*x.st = (*x.dst).st
	}
	if kv.New > 0 {
		if d.newK, err = put(a.newK, dt, BSHD, true); err == nil {
			d.newV, err = put(a.newV, dt, BSHD, true)
		}
		if err != nil {
			d.close()
			return nil, nil, err
		}
		kv.NewK, kv.NewV = d.newK.st, d.newV.st
	}
	if d.lse, err = put(Tensor{Shape: LSEShape(p.B, p.Hq, p.Nq)}, Float32, BHSD, false); err != nil {
		d.close()
		return nil, nil, err
	}
	return d, &dp, nil
}

// kvHostOnDevice runs a host KV-cache call (the append done on the host)
// through device tensors: the operands are uploaded, the device kernels
// run on the advanced lengths with no new rows, O and LSE come back.
func (e *Engine) kvHostOnDevice(ctx context.Context, db deviceBackend, p *spec.Problem, a kvOperands) error {
	done := *p
	kv := *p.KV
	kv.SeqLens = make([]int32, p.B)
	for b := range kv.SeqLens {
		kv.SeqLens[b] = int32(p.KV.Len(b))
	}
	kv.New = 0
	done.KV = &kv
	d, dp, err := e.kvUpload(ctx, &done, a)
	if err != nil {
		return err
	}
	defer d.close()
	if err := db.kvDevice(ctx, dp, d.q, d.k, d.v, nil, nil, d.o, d.lse); err != nil {
		return err
	}
	if err := d.o.Download(ctx, a.o); err != nil {
		return err
	}
	return d.lse.Download(ctx, FromFloat32(a.lse, LSEShape(p.B, p.Hq, p.Nq), BHSD))
}

// kvBenchmarker is implemented by backends that time KV-cache calls
// themselves (Vulkan: GPU timestamps) on device tensors.
type kvBenchmarker interface {
	benchmarkKV(ctx context.Context, p *spec.Problem, q, k, v, newK, newV, o, lse *DeviceTensor, o2 BenchOptions) (*BenchResult, error)
}

// BenchmarkKVCache times ForwardKVCache calls on the operands given (the
// append, when newK and newV are given, rewrites the same cache rows every
// call, and cache.SeqLens is left unchanged). On Vulkan the operands are
// uploaded once and each call is timed by GPU timestamps around its
// kernels; on the CPU by the host clock. BenchResult.Flops counts the
// visible (query, cache row) pairs exactly (KVCacheBytes gives the cache
// bytes read).
func (e *Engine) BenchmarkKVCache(ctx context.Context, q Tensor, cache *KVCache, newK, newV Tensor, opt Options, o BenchOptions) (*BenchResult, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	p, err := hostKVProblem(q, cache, newK, newV, opt)
	if err != nil {
		return nil, err
	}
	if err := e.supports(q.DType()); err != nil {
		return nil, err
	}
	if o.Backward || o.Rotate > 1 {
		return nil, fmt.Errorf("attention: benchmark: a KV-cache call has no backward and runs on one input set (Backward %v, Rotate %d): %w", o.Backward, o.Rotate, ErrOption)
	}
	o = o.withDefaults()
	out, err := NewTensor(q.DType(), outShape(p), BSHD)
	if err != nil {
		return nil, err
	}
	p.O = out.strides()
	lse := make([]float32, p.B*p.Hq*p.Nq)
	if err := distinctKV(p, q, cache, newK, newV, out, lse); err != nil {
		return nil, err
	}
	a := kvOperands{q: q, k: cache.K, v: cache.V, newK: newK, newV: newV, o: out, lse: lse}
	if bm, ok := e.b.(kvBenchmarker); ok {
		d, dp, err := e.kvUpload(ctx, p, a)
		if err != nil {
			return nil, err
		}
		defer d.close()
		r, err := bm.benchmarkKV(ctx, dp, d.q, d.k, d.v, d.newK, d.newV, d.o, d.lse, o)
		if err != nil {
			return nil, err
		}
		r.Flops = p.KVFlops()
		return r, nil
	}
	r := &BenchResult{Clock: "wall", Flops: p.KVFlops()}
	for i := range o.Warmup + o.Iters {
		start := time.Now()
		if err := e.appendAndAttend(ctx, p, a); err != nil {
			return nil, err
		}
		if i >= o.Warmup {
			r.Times = append(r.Times, time.Since(start))
		}
	}
	return r, nil
}

// KVCacheBytes is the number of cache bytes a KV-cache call over cache
// with storage dt must read at least (K and V rows each sequence attends
// to, after an append of nNew rows): the memory-bound floor of decoding.
func KVCacheBytes(cache *KVCache, nNew int, dt DType) float64 {
	var rows float64
	for _, n := range cache.SeqLens {
		rows += float64(int(n) + nNew)
	}
	return rows * float64(cache.K.Shape.H) * float64(cache.K.Shape.D+cache.V.Shape.D) * float64(dt.Size())
}
