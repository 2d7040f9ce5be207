//go:build cgo

package vkattn

// The KV-cache family: decoding steps over a contiguous or paged cache
// (spec.KV). One submission: the lengths and page table (a few bytes per
// sequence) travel in the command buffer, kv_append copies the new rows
// into the cache, decode computes attention split along the cache
// (flash-decoding) with the query heads of each KV head packed into one
// workgroup, and decode_combine merges the splits in a fixed order.

import (
	"context"
	"fmt"
	"runtime"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// decodeFamily runs KV-cache problems with options too (a window, a
// softcap, ALiBi: decode's EXT variants; spec.Problem.CheckExt refuses
// any other option of a KV-cache problem).
var decodeFamily = &family{
	name: shaders.KernelDecode, dir: KV, auto: true, ext: true,
	init: func(b *Backend, _ bool) (string, error) {
		if !b.info.SubgroupOps.Arithmetic {
			return "no subgroup arithmetic in compute shaders", nil
		}
		return "", nil
	},
	plan: planDecode,
}

// DecodeConfig is how decode runs one KV-cache problem.
type DecodeConfig struct {
	// WG invocations per workgroup (WG/Subgroup independent streams of
	// cache rows) and BR query rows per workgroup.
	WG, BR int
	// Splits per sequence of SplitKeys cache rows each.
	Splits, SplitKeys int
}

func (c DecodeConfig) String() string {
	return fmt.Sprintf("wg%d-br%d-split%dx%d", c.WG, c.BR, c.Splits, c.SplitKeys)
}

// maxDecodeRows bounds decode's query rows per workgroup (registers: each
// invocation holds BR·ceil(Dv/Subgroup) accumulators).
const maxDecodeRows = 16

// splitTarget is the number of workgroups decode aims for: four per
// compute unit where the driver reports them, a guess of 128 for other
// GPUs, and two per CPU thread on a CPU device.
func splitTarget(info device.Info) int {
	switch {
	case info.ComputeUnits > 0:
		return 4 * int(info.ComputeUnits)
	case info.Type == "cpu":
		return 2 * runtime.NumCPU()
	}
	return 128
}

// decodeConfig chooses decode's workgroup, rows and splits for p (the
// rule: fill splitTarget workgroups, each split at least two blocks of
// WG rows per stream, the whole call at least one).
func (b *Backend) decodeConfig(p *spec.Problem) (DecodeConfig, error) {
	sg := b.lim.Subgroup
	rows := p.Group() * p.Nq
	br := 1
	for br < rows && br < maxDecodeRows {
		br *= 2
	}
	wg := 4 * sg
	for wg > sg && wg > b.lim.MaxWorkgroupSize {
		wg /= 2
	}
	for br > 1 && shaders.DecodeSharedBytes(wg, sg, br, p.D, p.Dv) > b.lim.SharedBytes {
		br /= 2
	}
	if n := shaders.DecodeSharedBytes(wg, sg, br, p.D, p.Dv); n > b.lim.SharedBytes || wg > b.lim.MaxWorkgroupSize {
		return DecodeConfig{}, fmt.Errorf("%w: decode needs %d bytes of shared memory and %d invocations; the device has %d and %d",
			ErrUnsupported, n, wg, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
	}
	c := DecodeConfig{WG: wg, BR: br, Splits: 1, SplitKeys: wg}
	maxLen := kvSpan(p)
	if maxLen == 0 {
		return c, nil
	}
	base := p.B * p.Hkv * ceilDiv(rows, br)
	splits := max(1, min(ceilDiv(splitTarget(b.info), base), ceilDiv(maxLen, 2*wg)))
	c.SplitKeys = ceilDiv(ceilDiv(maxLen, splits), wg) * wg
	if isLavapipe(b.info) {
		for c.SplitKeys > wg && shaders.DecodeLoopIterations(wg, sg, br, p.D, p.Dv, c.SplitKeys) > shaders.LavapipeLoopLimit {
			c.SplitKeys = ceilDiv(c.SplitKeys/2, wg) * wg
		}
	}
	c.Splits = ceilDiv(maxLen, c.SplitKeys)
	if uint64(c.Splits) > uint64(b.info.MaxWorkgroupCount[0]) {
		return DecodeConfig{}, fmt.Errorf("%w: %d splits exceed the device's %d workgroups in x", ErrTooLarge, c.Splits, b.info.MaxWorkgroupCount[0])
	}
	return c, nil
}

// kvSpan is the most cache rows the splits of one sequence of p cover:
// its longest length, or with p.Ext (decode's splits then start at each
// sequence's first visible row) the widest range from a sequence's first
// visible row (its first query's) to its last (its last query's): a
// sliding window over a long cache splits only the rows it sees.
func kvSpan(p *spec.Problem) int {
	if p.Ext == nil {
		return p.KV.MaxLen()
	}
	m := 0
	for b := range p.B {
		lo, _ := p.KeyRange(b, 0)
		_, hi := p.KeyRange(b, p.Nq-1)
		m = max(m, hi-lo)
	}
	return m
}

// planDecode is the KV family's plan: kv_append when the call appends,
// decode, and decode_combine when it splits.
func planDecode(_ context.Context, b *Backend, p *spec.Problem, dt spec.DType) (*Plan, error) {
	if err := b.checkKVBindings(p, dt); err != nil {
		return nil, err
	}
	c, err := b.decodeConfig(p)
	if err != nil {
		return nil, err
	}
	kv := p.KV
	pl := &Plan{Scratch: map[Operand]int64{OpMeta: metaBytes(p), OpPart: 16}}
	sgSpec := func(wg, br int) []device.Spec {
		return []device.Spec{
			{ID: shaders.SpecWorkgroupSize, Value: uint32(wg)}, {ID: shaders.SpecD, Value: uint32(p.D)},
			{ID: shaders.SpecDV, Value: uint32(p.Dv)}, {ID: shaders.SpecBR, Value: uint32(br)},
			{ID: shaders.SpecBC, Value: 1}, {ID: shaders.SpecSubgroup, Value: uint32(b.lim.Subgroup)},
		}
	}
	add := func(kernel, config string, wg, br int, grid [3]uint32, shared int, full bool, barrier bool, binds ...Operand) error {
		l, err := b.newLaunch(kernel, dt, p, config, sgSpec(wg, br), b.reqSG, full, binds...)
		if err != nil {
			return err
		}
		l.key.PushSize = shaders.KVParamsSize
		l.Source, l.Workgroup, l.BR, l.Grid, l.SharedBytes, l.Barrier = SourceDefault, wg, br, grid, shared, barrier
		pl.Launches = append(pl.Launches, l)
		return nil
	}
	copyWG := min(64, b.lim.MaxWorkgroupSize)
	if kv.New > 0 {
		if err := add(shaders.KernelKVAppend, fmt.Sprintf("wg%d", copyWG), copyWG, 1,
			[3]uint32{uint32(kv.New), uint32(p.Hkv), uint32(p.B)}, 0, false, false,
			OpNewK, OpNewV, OpK, OpV, OpMeta); err != nil {
			return nil, err
		}
	}
	full := b.info.ComputeFullSubgroups
	grid := [3]uint32{uint32(c.Splits), uint32(p.Hkv * ceilDiv(p.Group()*p.Nq, c.BR)), uint32(p.B)}
	// The pipeline's name carries what specialises it (the splits are
	// per call: they are in Launch.Config).
	kvec, pipeName := uint32(0), fmt.Sprintf("wg%d-br%d", c.WG, c.BR)
	if kVector(p, dt) {
		kvec, pipeName = 1, pipeName+"-kvec"
	}
	ext := shaders.ExtSpec(p) // window, softcap, ALiBi: 0 for a plain call
	if ext != 0 {
		pipeName += fmt.Sprintf("-ext%d", ext)
	}
	if err := add(shaders.KernelDecode, pipeName, c.WG, c.BR, grid, shaders.DecodeSharedBytes(c.WG, b.lim.Subgroup, c.BR, p.D, p.Dv),
		full, kv.New > 0, OpQ, OpK, OpV, OpO, OpLSE, OpMeta, OpPart); err != nil {
		return nil, err
	}
	dl := &pl.Launches[len(pl.Launches)-1]
	dl.key.Spec = append(dl.key.Spec, device.Spec{ID: shaders.SpecKVec, Value: kvec}, device.Spec{ID: shaders.SpecExt, Value: ext})
	dl.Config = pipeName + fmt.Sprintf("-split%dx%d", c.Splits, c.SplitKeys)
	if c.Splits > 1 {
		pl.Scratch[OpPart] = int64(c.Splits) * int64(p.B*p.Hq*p.Nq) * int64(p.Dv+1) * 4
		if err := add(shaders.KernelDecodeCombine, fmt.Sprintf("wg%d", copyWG), copyWG, 1,
			[3]uint32{uint32(p.Nq), uint32(p.Hq), uint32(p.B)}, 0, false, true, OpO, OpLSE, OpPart); err != nil {
			return nil, err
		}
	}
	pl.decode = &c
	return pl, nil
}

// kVector reports whether decode may read cache K rows in 16-byte units:
// D and every K stride are multiples of 16 bytes (rows then start on
// 16-byte boundaries of the binding).
func kVector(p *spec.Problem, dt spec.DType) bool {
	unit := 16 / dt.Size()
	return p.D%unit == 0 && p.K.Batch%unit == 0 && p.K.Seq%unit == 0 && p.K.Head%unit == 0
}

// metaBytes is the size of the META buffer: the lengths, the page table
// and, with p.Ext, the options (shaders.KVMetaWords).
func metaBytes(p *spec.Problem) int64 { return 4 * int64(shaders.KVMetaLen(p)) }

// checkKVBindings refuses a KV-cache problem whose operands one binding
// does not reach: the KV kernels have no addressed builds.
func (b *Backend) checkKVBindings(p *spec.Problem, dt spec.DType) error {
	for _, op := range []Operand{OpQ, OpK, OpV, OpO, OpNewK, OpNewV} {
		if op >= OpNewK && p.KV.New == 0 {
			continue
		}
		s := opSpec(p, op)
		n, ok := extent(s.shape, s.st)
		if !ok {
			return fmt.Errorf("%w: %s: bad view %v %+v", ErrInvalid, s.name, s.shape, s.st)
		}
		if !b.bindable(n, n*int64(dt.Size())) {
			return fmt.Errorf("%w: %s spans %d bytes; the KV-cache kernels read it through one binding, which reaches %d bytes", ErrTooLarge, s.name, n*int64(dt.Size()), b.bindBytes)
		}
	}
	return nil
}

// kvParams encodes the KV kernels' push constants for p and decode's
// configuration c (strides of dimensions of extent 1 sent as 0).
func kvParams(p *spec.Problem, c *DecodeConfig) shaders.KVParams {
	st := func(n, s int) uint32 {
		if n <= 1 {
			return 0
		}
		return uint32(s)
	}
	kv := p.KV
	return shaders.KVParams{
		B: uint32(p.B), Hq: uint32(p.Hq), Hkv: uint32(p.Hkv), Nq: uint32(p.Nq), Group: uint32(p.Group()),
		QB: st(p.B, p.Q.Batch), QS: st(p.Nq, p.Q.Seq), QH: st(p.Hq, p.Q.Head),
		KB: st(kv.Pages, p.K.Batch), KS: st(kv.PageSize, p.K.Seq), KH: st(p.Hkv, p.K.Head),
		VB: st(kv.Pages, p.V.Batch), VS: st(kv.PageSize, p.V.Seq), VH: st(p.Hkv, p.V.Head),
		OB: st(p.B, p.O.Batch), OS: st(p.Nq, p.O.Seq), OH: st(p.Hq, p.O.Head),
		Scale: p.Scale, Mask: uint32(p.Mask), PageSize: uint32(kv.PageSize), MaxPages: uint32(kv.MaxPages),
		NewRows: uint32(kv.New),
		NKB:     st(p.B, kv.NewK.Batch), NKS: st(kv.New, kv.NewK.Seq), NKH: st(p.Hkv, kv.NewK.Head),
		NVB: st(p.B, kv.NewV.Batch), NVS: st(kv.New, kv.NewV.Seq), NVH: st(p.Hkv, kv.NewV.Head),
		SplitKeys: uint32(c.SplitKeys), Splits: uint32(c.Splits),
	}
}

// metaData is the META buffer of p: the lengths (before the append), the
// page table and, with p.Ext, the options (shaders.KVMetaWords).
func metaData(p *spec.Problem) []byte { return shaders.KVMetaBytes(p) }

// KVCache runs a KV-cache call (p.KV set; the attention package has
// validated the lengths and the page table) on resident tensors: q, the
// cache k and v, newK and newV (nil unless p.KV.New > 0), o and lse. It
// is one submission.
func (b *Backend) KVCache(ctx context.Context, p *spec.Problem, q, k, v, newK, newV, o, lse *Tensor) error {
	cctx, leave, err := b.enterCall(ctx)
	if err != nil {
		return err
	}
	defer leave()
	if p == nil || p.KV == nil {
		return fmt.Errorf("%w: not a KV-cache problem", ErrInvalid)
	}
	args := []binding{{OpQ, q, false}, {OpK, k, p.KV.New > 0}, {OpV, v, p.KV.New > 0}, {OpO, o, true}, {OpLSE, lse, true}}
	if p.KV.New > 0 {
		args = append(args, binding{OpNewK, newK, false}, binding{OpNewV, newV, false})
	}
	dt, release, err := b.acquire(p, args)
	if err != nil {
		return err
	}
	defer release()
	var ops Operands
	for _, a := range args {
		ops[a.op] = a.t
	}
	return callErr(ctx, cctx, b.runKV(cctx, p, dt, ops.bufs()))
}

// runKV plans, records and submits a KV-cache call.
func (b *Backend) runKV(ctx context.Context, p *spec.Problem, dt spec.DType, bufs operandBufs) error {
	pl, err := b.Plan(ctx, p, dt, KV)
	if err != nil {
		return err
	}
	s := &scratch{b: b}
	tainted := false
	defer func() { s.done(!tainted) }()
	r := b.dev.Record()
	if err := b.recordKV(r, s, p, pl, bufs); err != nil {
		return err
	}
	if _, err := b.dev.Submit(ctx, r); err != nil {
		tainted = submitted(err)
		return fmt.Errorf("vkattn: %w", err)
	}
	return nil
}

// recordKV records the KV plan pl of p: the lengths and page table into
// the meta scratch, then the launches (scratch buffers from s).
func (b *Backend) recordKV(r *device.Recorder, s *scratch, p *spec.Problem, pl *Plan, bufs operandBufs) error {
	kp := kvParams(p, pl.decode)
	push := kp.Bytes()
	rls, err := b.prepare(s, pl, func(*Launch, operandBufs) ([]byte, error) { return push, nil }, bufs)
	if err != nil {
		return err
	}
	meta, meta0 := metaData(p), boundTo(rls, OpMeta)
	for off := 0; off < len(meta); off += device.MaxUpdateBytes {
		r.Update(meta0, int64(off), meta[off:min(len(meta), off+device.MaxUpdateBytes)])
	}
	r.BarrierTransferToCompute()
	for i := range rls {
		if rls[i].l.Barrier {
			r.Barrier()
		}
		if err := rls[i].dispatch(r, [3]uint32{}, rls[i].l.Grid); err != nil {
			return err
		}
	}
	return r.Err()
}

// boundTo is the buffer the prepared launches bind to op (nil if none).
func boundTo(rls []readyLaunch, op Operand) *device.Buffer {
	for _, rl := range rls {
		for j, o := range rl.l.Bindings {
			if o == op {
				return rl.args[j]
			}
		}
	}
	return nil
}

// BenchKV times KV-cache calls of p on the resident tensors ops (as
// KVCache takes them; the append, when p has one, rewrites the same rows
// every call): one submission per iteration between two GPU timestamps,
// warm-up untimed, as Bench.
func (b *Backend) BenchKV(ctx context.Context, p *spec.Problem, ops Operands, o BenchOptions) (*BenchResult, error) {
	if err := b.enter(); err != nil {
		return nil, err
	}
	defer b.leave()
	o = o.withDefaults()
	if p == nil || p.KV == nil {
		return nil, fmt.Errorf("%w: not a KV-cache problem", ErrInvalid)
	}
	args := []binding{{OpQ, ops[OpQ], false}, {OpK, ops[OpK], p.KV.New > 0}, {OpV, ops[OpV], p.KV.New > 0}, {OpO, ops[OpO], true}, {OpLSE, ops[OpLSE], true}}
	if p.KV.New > 0 {
		args = append(args, binding{OpNewK, ops[OpNewK], false}, binding{OpNewV, ops[OpNewV], false})
	}
	dt, release, err := b.acquire(p, args)
	if err != nil {
		return nil, err
	}
	defer release()
	pl, err := b.Plan(ctx, p, dt, KV)
	if err != nil {
		return nil, err
	}
	s := &scratch{b: b}
	ok := true
	defer func() { s.done(ok) }()
	r := b.dev.Record()
	r.Timestamp("start")
	r.StampDispatches(o.PerKernel)
	if err := b.recordKV(r, s, p, pl, ops.bufs()); err != nil {
		return nil, err
	}
	r.Timestamp("end")
	return b.timeSubmissions(o, func() (*device.Result, error) {
		out, err := b.dev.Submit(ctx, r)
		if err != nil {
			ok = !submitted(err)
			return nil, fmt.Errorf("vkattn: bench: %w", err)
		}
		return out, nil
	})
}
