//go:build cgo

package vkattn

import (
	"context"
	"fmt"
	"math"

	"github.com/flashvk/flashvk/internal/device"

	"github.com/flashvk/flashvk/internal/spec"
)

// Host-slice entry points. Each operand is a slice addressed by the
// problem's strides from element 0 (the attention package's Tensor.Data):
// the kernels read the uploaded slice as it is, so strided views need no
// repacking. Outputs are written only inside their views.

// MaxBatchChunk returns how many whole batches of p the host path puts in
// one submission: all of them unless an operand (or a scratch buffer of
// the pass's plan: the naive score matrix, the backward's D) of that many
// batches would exceed what its kernels reach — one binding (32-bit
// element offsets, the device's storage-buffer range), or for Q, K, V, O
// and the gradients with device addresses (addressing.go) the device's
// largest buffer and 32-bit strides — or the grid's z dimension. It fails
// with ErrTooLarge when even one batch does not fit.
func (b *Backend) MaxBatchChunk(ctx context.Context, p *spec.Problem, dt spec.DType, backward bool) (int, error) {
	if err := CheckProblem(p); err != nil {
		return 0, err
	}
	dir := Fwd
	if backward {
		dir = Bwd
	}
	if p.Whole() {
		// Packed sequences share their operands' one batch, and a dBias
		// summed over the batch needs every sequence: they run whole, if
		// every operand and scratch buffer fits.
		pl, err := b.Plan(ctx, p, dt, dir)
		if err != nil {
			return 0, err
		}
		if _, err := maxBatchChunk(p, dt, backward, pl.Scratch, b.chunkLimits()); err != nil {
			return 0, err
		}
		return p.B, nil
	}
	pl, err := b.Plan(ctx, p.Batches(0, 1), dt, dir)
	if err != nil {
		return 0, err
	}
	lim := b.chunkLimits()
	if z := gridZ(pl); z > 1 {
		// A kernel whose grid's z holds more than the batch (the bias
		// kernels' B·Hq): a chunk of n batches takes up to n·z of it.
		lim.maxZ /= z
	}
	return maxBatchChunk(p, dt, backward, pl.Scratch, lim)
}

// gridZ is the largest z dimension among pl's launches.
func gridZ(pl *Plan) uint32 {
	z := uint32(1)
	for _, l := range pl.Launches {
		z = max(z, l.Grid[2])
	}
	return z
}

// chunkLimits are the limits one submission's buffers must keep.
type chunkLimits struct {
	bind      int64  // bytes one binding reaches
	buf       int64  // bytes of the largest buffer
	addressed bool   // storage operands may be read by device address
	maxZ      uint32 // workgroups in z (0: unknown)
}

func (b *Backend) chunkLimits() chunkLimits {
	return chunkLimits{bind: b.bindBytes, buf: b.maxBuf, addressed: b.addrWhy == "", maxZ: b.info.MaxWorkgroupCount[2]}
}

// maxBatchChunk is MaxBatchChunk for given limits: scratch are the bytes
// of each scratch buffer per batch. Bindings are preferred (the kernels
// that read operands through them are the fast ones): device addresses
// count only when one batch does not fit a binding.
func maxBatchChunk(p *spec.Problem, dt spec.DType, backward bool, scratch map[Operand]int64, lim chunkLimits) (int, error) {
	addressed := lim.addressed
	lim.addressed = false
	n, err := batchChunk(p, dt, backward, scratch, lim)
	if err == nil || !addressed {
		return n, err
	}
	lim.addressed = true
	return batchChunk(p, dt, backward, scratch, lim)
}

// batchChunk is maxBatchChunk for one way of reaching the operands.
func batchChunk(p *spec.Problem, dt spec.DType, backward bool, scratch map[Operand]int64, lim chunkLimits) (int, error) {
	cb := p.B
	if lim.maxZ > 0 {
		cb = min(cb, int(lim.maxZ))
	}
	bound := func(size int64) int64 { return min(int64(MaxElements), lim.bind/size) }
	in, out := passOperands(p, !backward, backward)
	for _, o := range append(in, out...) {
		op := opSpec(p, o)
		size := int64(dt.Size())
		if op.dt != 0 {
			size = int64(op.dt.Size())
		}
		one := op.shape
		one.B = 1
		e1, ok := extent(one, op.st)
		if !ok {
			return 0, fmt.Errorf("%w: %s: shape %v with strides %+v is empty, negative or overflows", ErrInvalid, op.name, op.shape, op.st)
		}
		l, reach := bound(size), "one binding reaches"
		if lim.addressed && addressable(o) {
			l, reach = lim.buf/size, "the device's largest buffer holds"
			if err := checkStrides(op.name, one, op.st); err != nil {
				return 0, err
			}
			if int64(op.st.Batch) > math.MaxUint32 {
				cb = 1 // a batch stride the kernels cannot take: one batch at a time
			}
		}
		if e1 > l {
			return 0, fmt.Errorf("%w: %s: one batch of shape %v with strides %+v spans %d elements (%d bytes); %s %d elements",
				ErrTooLarge, op.name, op.shape, op.st, e1, e1*size, reach, l)
		}
		if op.st.Batch > 0 {
			cb = min(cb, int((l-e1)/int64(op.st.Batch))+1)
		}
	}
	for op, bytes := range scratch { // float32 buffers, always bound
		if bytes/4 > bound(4) {
			return 0, fmt.Errorf("%w: scratch %v of one batch needs %d bytes; one binding reaches %d bytes",
				ErrTooLarge, op, bytes, lim.bind)
		}
		cb = min(cb, int(bound(4)*4/bytes))
	}
	return max(cb, 1), nil
}

// chunk is the problem restricted to batches b0 … b0+n−1.
func chunk(p *spec.Problem, b0, n int) *spec.Problem { return p.Batches(b0, n) }

// at returns s from the element offset of batch b0 of strides st.
func at[T any](s []T, b0 int, batchStride int) []T {
	if b0 == 0 {
		return s
	}
	off := b0 * batchStride
	if off > len(s) {
		return nil
	}
	return s[off:]
}

// HostBias are a host call's bias and dBias slices (spec.Bias): []float32
// when the bias is float32, else []T of the call's storage type; nil where
// the problem has none (dBias: unless spec.Bias.Grad).
type HostBias struct{ Bias, DBias any }

// biasChunk is x from the element offset of batch b0 of p's bias and
// dBias (storage type T).
func biasChunk[T Elem](x HostBias, p *spec.Problem, b0 int) HostBias {
	if b0 == 0 || extBias(p) == nil {
		return x
	}
	return HostBias{anyAt[T](x.Bias, b0, p.Ext.Bias.Batch), anyAt[T](x.DBias, b0, p.Ext.Bias.GradBatch)}
}

// anyAt is at for a []float32 or []T slice held in an any.
func anyAt[T Elem](s any, b0, stride int) any {
	switch d := s.(type) {
	case []float32:
		return at(d, b0, stride)
	case []T:
		return at(d, b0, stride)
	}
	return s
}

// ForwardHost computes O and LSE of host operands q, k, v (spec.Float32: float32,
// spec.BFloat16: bfloat16.BFloat16, spec.Float16: other uint16 bits) into o (only o's view is written) and lse (contiguous
// [B, Hq, Nq]), with the bias of x where p has one.
func ForwardHost[T Elem](ctx context.Context, b *Backend, p *spec.Problem, q, k, v, o []T, lse []float32, x HostBias) error {
	dt := dtypeOf[T]()
	return hostChunks(ctx, b, p, dt, false, lse, func(ctx context.Context, c *spec.Problem, b0 int, lse []float32) error {
		return hostPass(ctx, b, c, dt, false, map[Operand][]T{
			OpQ: at(q, b0, p.Q.Batch), OpK: at(k, b0, p.K.Batch), OpV: at(v, b0, p.V.Batch), OpO: at(o, b0, p.O.Batch)}, lse, biasChunk[T](x, p, b0))
	})
}

// hostChunks enters the backend for one host call, checks what every host
// call needs (a dtype the device runs, an LSE of LSELen) and runs fn on each run of whole batches that fits the
// device's buffer and 32-bit addressing limits, with that chunk's problem,
// first batch and LSE.
func hostChunks(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType, backward bool, lse []float32, fn func(ctx context.Context, c *spec.Problem, b0 int, lse []float32) error) error {
	cctx, leave, err := b.enterCall(ctx)
	if err != nil {
		return err
	}
	defer leave()
	return callErr(ctx, cctx, b.hostChunks(cctx, p, dt, backward, lse, fn))
}

func (b *Backend) hostChunks(ctx context.Context, p *spec.Problem, dt spec.DType, backward bool, lse []float32, fn func(ctx context.Context, c *spec.Problem, b0 int, lse []float32) error) error {
	if err := b.supports(dt); err != nil {
		return err
	}
	cb, err := b.MaxBatchChunk(ctx, p, dt, backward)
	if err != nil {
		return err
	}
	if want := p.LSELen(); len(lse) < want {
		return fmt.Errorf("%w: lse: %d elements, want %d", ErrInvalid, len(lse), want)
	}
	per := p.Hq * p.Nq // (a packed problem runs whole: cb = B)
	for b0 := 0; b0 < p.B; b0 += cb {
		if err := fn(ctx, chunk(p, b0, min(cb, p.B-b0)), b0, lse[b0*per:]); err != nil {
			return err
		}
	}
	return nil
}

// BackwardHost computes dQ, dK, dV (written only inside their views, which
// have the strides of Q, K, V) from host q, k, v, o, lse and do, with the
// bias of x where p has one, and its dBias (x.DBias) where p asks for it.
func BackwardHost[T Elem](ctx context.Context, b *Backend, p *spec.Problem, q, k, v, o []T, lse []float32, do, dq, dk, dv []T, x HostBias) error {
	dt := dtypeOf[T]()
	return hostChunks(ctx, b, p, dt, true, lse, func(ctx context.Context, c *spec.Problem, b0 int, lse []float32) error {
		return hostPass(ctx, b, c, dt, true, map[Operand][]T{
			OpQ: at(q, b0, p.Q.Batch), OpK: at(k, b0, p.K.Batch), OpV: at(v, b0, p.V.Batch), OpO: at(o, b0, p.O.Batch),
			OpDO: at(do, b0, p.O.Batch), OpDQ: at(dq, b0, p.Q.Batch), OpDK: at(dk, b0, p.K.Batch), OpDV: at(dv, b0, p.V.Batch)}, lse, biasChunk[T](x, p, b0))
	})
}

// hostCall tracks the pooled buffers of one host call.
type hostCall struct {
	s       *scratch
	tainted bool // a transfer or submission may still be running
}

func (h *hostCall) fail(err error) error {
	if submitted(err) {
		h.tainted = true
	}
	return fmt.Errorf("vkattn: %w", err)
}

func (h *hostCall) finish() { h.s.done(!h.tainted) }

// upload puts an input operand (its slice up to the view's extent) into a
// pooled buffer.
func upload[T Elem](ctx context.Context, h *hostCall, op operandSpec, data []T) (*device.Buffer, error) {
	n, ok := extent(op.shape, op.st)
	if !ok || int64(len(data)) < n {
		return nil, fmt.Errorf("%w: %s: slice of %d elements, the view needs %d", ErrInvalid, op.name, len(data), n)
	}
	buf, err := h.s.get(n * int64(dtypeOf[T]().Size()))
	if err != nil {
		return nil, err
	}
	if err := device.Upload(ctx, buf, 0, data[:n]); err != nil {
		return nil, h.fail(err)
	}
	return buf, nil
}

// output allocates a pooled buffer for an output operand.
func output(h *hostCall, op operandSpec, size int) (*device.Buffer, error) {
	n, ok := extent(op.shape, op.st)
	if !ok {
		return nil, fmt.Errorf("%w: %s: bad view", ErrInvalid, op.name)
	}
	return h.s.get(n * int64(size))
}

// download copies an output's view from buf into data: directly when the
// view is dense, else through a temporary whose view rows are scattered,
// so that elements of data outside the view keep their values.
func download[T Elem](ctx context.Context, h *hostCall, op operandSpec, buf *device.Buffer, data []T) error {
	n, ok := extent(op.shape, op.st)
	if !ok || int64(len(data)) < n {
		return fmt.Errorf("%w: %s: slice of %d elements, the view needs %d", ErrInvalid, op.name, len(data), n)
	}
	if dense(op.shape, n) {
		if err := device.Download(ctx, buf, 0, data[:n]); err != nil {
			return h.fail(err)
		}
		return nil
	}
	tmp := make([]T, n)
	if err := device.Download(ctx, buf, 0, tmp); err != nil {
		return h.fail(err)
	}
	s, st := op.shape, op.st
	for bi := range s.B {
		for si := range s.S {
			for hi := range s.H {
				off := st.Offset(bi, si, hi)
				copy(data[off:off+s.D], tmp[off:off+s.D])
			}
		}
	}
	return nil
}

// hostPass runs the forward or the backward of p on host slices by
// operand (lse apart: float32; the bias and dBias apart: x): it checks
// that every output slice holds its view before moving any data, uploads
// the inputs into pooled buffers, records and submits the pass, and
// downloads the outputs into their views.
func hostPass[T Elem](ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType, backward bool, data map[Operand][]T, lse []float32, x HostBias) error {
	h := &hostCall{s: &scratch{b: b}}
	defer h.finish()
	in, out := passOperands(p, !backward, backward)
	for _, op := range out {
		os := opSpec(p, op)
		n, _ := extent(os.shape, os.st)
		switch op {
		case OpLSE: // hostChunks checked it
		case OpDBias:
			if l := anyLen[T](x.DBias); l < n {
				return fmt.Errorf("%w: %s: slice of %d elements, the view needs %d", ErrInvalid, os.name, l, n)
			}
		default:
			if int64(len(data[op])) < n {
				return fmt.Errorf("%w: %s: slice of %d elements, the view needs %d", ErrInvalid, os.name, len(data[op]), n)
			}
		}
	}
	nl := p.LSELen()
	var bufs operandBufs
	var err error
	for _, op := range in {
		switch op {
		case OpLSE:
			bufs[op], err = upload(ctx, h, opSpec(p, op), lse[:nl])
		case OpBias:
			bufs[op], err = uploadAny[T](ctx, h, opSpec(p, op), x.Bias)
		default:
			bufs[op], err = upload(ctx, h, opSpec(p, op), data[op])
		}
		if err != nil {
			return err
		}
	}
	for _, op := range out {
		os := opSpec(p, op)
		size := dt.Size()
		switch {
		case op == OpLSE:
			size = 4
		case os.dt != 0:
			size = os.dt.Size()
		}
		if bufs[op], err = output(h, os, size); err != nil {
			return err
		}
	}
	pls, err := b.passes(ctx, p, dt, !backward, backward)
	if err != nil {
		return err
	}
	tainted, err := b.submitPasses(ctx, h.s, p, pls, bufs)
	if err != nil {
		h.tainted = h.tainted || tainted
		return err
	}
	for _, op := range out {
		switch op {
		case OpLSE:
			err = download(ctx, h, opSpec(p, op), bufs[op], lse[:nl])
		case OpDBias:
			err = downloadAny[T](ctx, h, opSpec(p, op), bufs[op], x.DBias)
		default:
			err = download(ctx, h, opSpec(p, op), bufs[op], data[op])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// anyLen is the length of a []float32 or []T slice held in an any (−1
// for anything else).
func anyLen[T Elem](s any) int64 {
	switch d := s.(type) {
	case []float32:
		return int64(len(d))
	case []T:
		return int64(len(d))
	}
	return -1
}

// uploadAny is upload of a bias slice: []float32 or []T.
func uploadAny[T Elem](ctx context.Context, h *hostCall, op operandSpec, data any) (*device.Buffer, error) {
	switch d := data.(type) {
	case []float32:
		if op.dt == spec.Float32 {
			return upload(ctx, h, op, d)
		}
	case []T:
		if op.dt == dtypeOf[T]() {
			return upload(ctx, h, op, d)
		}
	}
	return nil, fmt.Errorf("%w: %s: %T for a %v operand", ErrInvalid, op.name, data, op.dt)
}

// downloadAny is download into a dBias slice: []float32 or []T.
func downloadAny[T Elem](ctx context.Context, h *hostCall, op operandSpec, buf *device.Buffer, data any) error {
	switch d := data.(type) {
	case []float32:
		if op.dt == spec.Float32 {
			return download(ctx, h, op, buf, d)
		}
	case []T:
		if op.dt == dtypeOf[T]() {
			return download(ctx, h, op, buf, d)
		}
	}
	return fmt.Errorf("%w: %s: %T for a %v operand", ErrInvalid, op.name, data, op.dt)
}
