//go:build cgo

package device

/*
#include "vk.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// Recorder collects commands for one submission. Create it with
// Device.Record, add commands, then pass it to Device.Submit; nothing
// touches the GPU before Submit. A Recorder is not safe for concurrent use,
// but any number of Recorders may be filled and submitted concurrently.
// After Submit it may be submitted again or Reset.
//
// Commands execute in order, but Vulkan lets consecutive commands overlap:
// insert Barrier (or the Barrier* variants) between a command that writes a
// buffer and one that reads or writes it. Each submission starts with a full
// memory barrier, so work always sees the results of earlier submissions.
//
// Methods other than Dispatch report errors through Err and Submit.
type Recorder struct {
	d       *Device
	ops     []C.fvk_op
	push    []byte
	bufs    []C.fvk_binding
	labels  []string
	pipes   []*Pipeline
	buffers []*Buffer
	err     error
	// stampEach: every Dispatch ends with a barrier and a timestamp.
	stampEach bool
}

// StampDispatches makes every later Dispatch end with a compute barrier and
// a timestamp labelled with the pipeline's name, so that the Result breaks
// the submission's GPU time down by kernel. The barriers serialise kernels
// that could overlap: use it to profile, not for headline times.
func (r *Recorder) StampDispatches(on bool) { r.stampEach = on }

// Record starts a new command recording.
func (d *Device) Record() *Recorder { return &Recorder{d: d} }

// Reset empties the recorder for reuse.
func (r *Recorder) Reset() {
	r.ops, r.push, r.bufs, r.labels = r.ops[:0], r.push[:0], r.bufs[:0], r.labels[:0]
	r.pipes, r.buffers, r.err = r.pipes[:0], r.buffers[:0], nil
}

// Err returns the first recording error.
func (r *Recorder) Err() error { return r.err }

// Len is the number of recorded commands.
func (r *Recorder) Len() int { return len(r.ops) }

// Command describes one recorded command.
type Command struct {
	// Kind is "dispatch", "barrier", "copy", "fill", "update" or
	// "timestamp".
	Kind string
	// Pipeline, Base, Groups and Buffers describe a dispatch: the
	// pipeline's name, its first workgroup (zero but for DispatchBase),
	// the workgroups and the number of buffers bound.
	Pipeline string
	Base     [3]uint32
	Groups   [3]uint32
	Buffers  int
}

// Commands lists what has been recorded, in order (for tools and tests
// that check a recording against a plan).
func (r *Recorder) Commands() []Command {
	out := make([]Command, 0, len(r.ops))
	next := 0 // index into r.pipes, one per dispatch
	for _, op := range r.ops {
		var c Command
		switch op.kind {
		case C.FVK_OP_DISPATCH:
			c = Command{Kind: "dispatch", Pipeline: r.pipes[next].name, Buffers: int(op.nbufs),
				Base:   [3]uint32{uint32(op.base[0]), uint32(op.base[1]), uint32(op.base[2])},
				Groups: [3]uint32{uint32(op.groups[0]), uint32(op.groups[1]), uint32(op.groups[2])}}
			next++
		case C.FVK_OP_BARRIER:
			c.Kind = "barrier"
		case C.FVK_OP_COPY:
			c.Kind = "copy"
		case C.FVK_OP_FILL:
			c.Kind = "fill"
		case C.FVK_OP_UPDATE:
			c.Kind = "update"
		case C.FVK_OP_TIMESTAMP:
			c.Kind = "timestamp"
		}
		out = append(out, c)
	}
	return out
}

func (r *Recorder) fail(err error) error {
	if r.err == nil {
		r.err = err
	}
	return err
}

// Dispatch records a dispatch of p with groups workgroups, push-constant
// bytes push (exactly p's PushSize) and bufs bound to bindings 0..n-1 of
// set 0 (exactly p's Bindings). Each binding's descriptor covers the first
// min(size, MaxStorageBufferRange) bytes of its buffer; a buffer larger
// than MaxStorageBufferRange fails with ErrTooLarge unless p is Addressed.
func (r *Recorder) Dispatch(p *Pipeline, push []byte, groups [3]uint32, bufs ...*Buffer) error {
	return r.DispatchBase(p, push, [3]uint32{}, groups, bufs...)
}

// DispatchBase is Dispatch of the workgroups base … base+groups−1 of a
// larger grid (vkCmdDispatchBase): the shader's gl_WorkGroupID counts from
// base, so that consecutive DispatchBase calls (or submissions) can run a
// grid's workgroups in parts. A non-zero base needs Info.DispatchBase, and
// base+groups must stay within MaxWorkgroupCount.
func (r *Recorder) DispatchBase(p *Pipeline, push []byte, base, groups [3]uint32, bufs ...*Buffer) error {
	d := r.d
	if p == nil {
		return r.fail(fmt.Errorf("%w: dispatch: nil pipeline", ErrInvalid))
	}
	if p.d != d {
		return r.fail(fmt.Errorf("%w: dispatch: pipeline belongs to another device", ErrInvalid))
	}
	if p.closed.Load() {
		return r.fail(fmt.Errorf("dispatch %s: pipeline: %w", p.name, ErrClosed))
	}
	if len(bufs) != p.bindings {
		return r.fail(fmt.Errorf("%w: dispatch %s: %d buffers for %d bindings", ErrInvalid, p.name, len(bufs), p.bindings))
	}
	if uint32(len(push)) != p.pushSize {
		return r.fail(fmt.Errorf("%w: dispatch %s: %d push-constant bytes, pipeline declares %d", ErrInvalid, p.name, len(push), p.pushSize))
	}
	if base != ([3]uint32{}) && !d.info.DispatchBase {
		return r.fail(fmt.Errorf("%w: dispatch %s: base workgroup %v without vkCmdDispatchBase", ErrUnsupported, p.name, base))
	}
	for i, g := range groups {
		if uint64(base[i])+uint64(g) > uint64(d.info.MaxWorkgroupCount[i]) {
			return r.fail(fmt.Errorf("%w: dispatch %s: %d workgroups from %d in dimension %d, device maximum %d",
				ErrTooLarge, p.name, g, base[i], i, d.info.MaxWorkgroupCount[i]))
		}
	}
	for i, b := range bufs {
		if err := b.usable(d); err != nil {
			return r.fail(fmt.Errorf("dispatch %s: binding %d: %w", p.name, i, err))
		}
		if !p.addressed && uint64(b.size) > d.info.MaxStorageBufferRange {
			return r.fail(fmt.Errorf("%w: dispatch %s: binding %d: buffer of %d bytes exceeds the device's storage-buffer range %d",
				ErrTooLarge, p.name, i, b.size, d.info.MaxStorageBufferRange))
		}
	}
	op := C.fvk_op{
		kind:       C.FVK_OP_DISPATCH,
		nbufs:      C.uint32_t(len(bufs)),
		push_size:  C.uint32_t(len(push)),
		push_off:   C.uint64_t(len(r.push)),
		buf_off:    C.uint64_t(len(r.bufs)),
		pipeline:   p.p,
		layout:     p.layout,
		set_layout: p.setLayout,
	}
	op.groups[0], op.groups[1], op.groups[2] = C.uint32_t(groups[0]), C.uint32_t(groups[1]), C.uint32_t(groups[2])
	op.base[0], op.base[1], op.base[2] = C.uint32_t(base[0]), C.uint32_t(base[1]), C.uint32_t(base[2])
	r.push = append(r.push, push...)
	for _, b := range bufs {
		r.bufs = append(r.bufs, C.fvk_binding{buffer: b.b.buffer, _range: C.uint64_t(b.bindingRange())})
		r.buffers = append(r.buffers, b)
	}
	r.pipes = append(r.pipes, p)
	r.ops = append(r.ops, op)
	if r.stampEach {
		r.Barrier()
		r.Timestamp(p.name)
	}
	return nil
}

func (r *Recorder) barrier(kind C.uint32_t) {
	r.ops = append(r.ops, C.fvk_op{kind: C.FVK_OP_BARRIER, arg: kind})
}

// Barrier makes compute-shader writes visible to later compute-shader
// reads and writes.
func (r *Recorder) Barrier() { r.barrier(C.FVK_BARRIER_COMPUTE) }

// BarrierTransferToCompute makes Copy/Fill writes visible to later dispatches.
func (r *Recorder) BarrierTransferToCompute() { r.barrier(C.FVK_BARRIER_TRANSFER_COMPUTE) }

// BarrierComputeToTransfer makes dispatch writes visible to later Copy/Fill.
func (r *Recorder) BarrierComputeToTransfer() { r.barrier(C.FVK_BARRIER_COMPUTE_TRANSFER) }

// BarrierAll orders all earlier memory writes before all later accesses.
func (r *Recorder) BarrierAll() { r.barrier(C.FVK_BARRIER_FULL) }

// Copy records a copy of size bytes from src at srcOff to dst at dstOff.
// Regions of the same buffer must not overlap.
func (r *Recorder) Copy(dst, src *Buffer, dstOff, srcOff, size int64) {
	if err := dst.usable(r.d); err != nil {
		r.fail(fmt.Errorf("copy: destination: %w", err))
		return
	}
	if err := src.usable(r.d); err != nil {
		r.fail(fmt.Errorf("copy: source: %w", err))
		return
	}
	if size <= 0 {
		r.fail(fmt.Errorf("%w: copy of %d bytes", ErrInvalid, size))
		return
	}
	if err := dst.checkRange(dstOff, size); err != nil {
		r.fail(fmt.Errorf("copy: destination: %w", err))
		return
	}
	if err := src.checkRange(srcOff, size); err != nil {
		r.fail(fmt.Errorf("copy: source: %w", err))
		return
	}
	if dst == src && dstOff < srcOff+size && srcOff < dstOff+size {
		r.fail(fmt.Errorf("%w: copy between overlapping regions of one buffer", ErrInvalid))
		return
	}
	r.buffers = append(r.buffers, dst, src)
	r.ops = append(r.ops, C.fvk_op{kind: C.FVK_OP_COPY, dst: dst.b.buffer, src: src.b.buffer,
		dst_off: C.uint64_t(dstOff), src_off: C.uint64_t(srcOff), size: C.uint64_t(size)})
}

// Fill records setting every 32-bit word of b to word.
func (r *Recorder) Fill(b *Buffer, word uint32) {
	if b != nil {
		r.FillRange(b, 0, b.size&^3, word)
		return
	}
	r.FillRange(b, 0, 0, word)
}

// FillRange records setting size bytes of b at off to the repeated word;
// off and size must be multiples of 4.
func (r *Recorder) FillRange(b *Buffer, off, size int64, word uint32) {
	if err := b.usable(r.d); err != nil {
		r.fail(fmt.Errorf("fill: %w", err))
		return
	}
	if off%4 != 0 || size%4 != 0 || size <= 0 {
		r.fail(fmt.Errorf("%w: fill offset %d and size %d must be positive multiples of 4", ErrInvalid, off, size))
		return
	}
	if err := b.checkRange(off, size); err != nil {
		r.fail(fmt.Errorf("fill: %w", err))
		return
	}
	r.buffers = append(r.buffers, b)
	r.ops = append(r.ops, C.fvk_op{kind: C.FVK_OP_FILL, dst: b.b.buffer, arg: C.uint32_t(word),
		dst_off: C.uint64_t(off), size: C.uint64_t(size)})
}

// MaxUpdateBytes is the most bytes one Update records (vkCmdUpdateBuffer's
// limit).
const MaxUpdateBytes = 65536

// Update records writing data (a multiple of 4 bytes, at most
// MaxUpdateBytes) into b at off (a multiple of 4): the bytes travel in the
// command buffer, so small per-call tables need no staging transfer. Like
// Copy and Fill it is a transfer: BarrierTransferToCompute orders it
// before the dispatches that read it.
func (r *Recorder) Update(b *Buffer, off int64, data []byte) {
	if err := b.usable(r.d); err != nil {
		r.fail(fmt.Errorf("update: %w", err))
		return
	}
	n := int64(len(data))
	if off%4 != 0 || n%4 != 0 || n <= 0 || n > MaxUpdateBytes {
		r.fail(fmt.Errorf("%w: update of %d bytes at %d: want a positive multiple of 4 up to %d at a multiple of 4", ErrInvalid, n, off, MaxUpdateBytes))
		return
	}
	if err := b.checkRange(off, n); err != nil {
		r.fail(fmt.Errorf("update: %w", err))
		return
	}
	po := len(r.push)
	r.push = append(r.push, data...)
	r.buffers = append(r.buffers, b)
	r.ops = append(r.ops, C.fvk_op{kind: C.FVK_OP_UPDATE, dst: b.b.buffer, dst_off: C.uint64_t(off),
		size: C.uint64_t(n), push_off: C.uint64_t(po)})
}

// maxTimestamps bounds Timestamp calls per submission.
const maxTimestamps = 1 << 14

// Timestamp records a GPU timestamp written once all earlier commands have
// completed. Read them from the Result of Submit. It is a no-op on devices
// whose compute queue has no timestamps (Info.TimestampValidBits == 0).
func (r *Recorder) Timestamp(label string) {
	if r.d.info.TimestampValidBits == 0 {
		return
	}
	if len(r.labels) >= maxTimestamps {
		r.fail(fmt.Errorf("%w: more than %d timestamps in one submission", ErrTooLarge, maxTimestamps))
		return
	}
	r.ops = append(r.ops, C.fvk_op{kind: C.FVK_OP_TIMESTAMP, arg: C.uint32_t(len(r.labels))})
	r.labels = append(r.labels, label)
}

// ---- Submission -------------------------------------------------------------------------

// Submit records everything in r into one command buffer, submits it in a
// single vkQueueSubmit and waits for completion. The wait honours ctx: when
// ctx is cancelled or its deadline passes first, Submit returns an error
// wrapping ErrTimeout and the context's error (the GPU work may still be
// running; its resources are reclaimed once it finishes). Without a ctx
// deadline, Options.DefaultTimeout (60 s; 10 min on CPU devices) applies. VK_ERROR_DEVICE_LOST
// yields ErrDeviceLost and the device refuses further work.
func (d *Device) Submit(ctx context.Context, r *Recorder) (*Result, error) {
	return d.submit(ctx, r, 0)
}

// SubmitDrain is Submit for a submission the caller wants finished before
// it moves on, even when ctx ends first: Submit would then return at once,
// the GPU work still running; SubmitDrain waits up to drain more for it.
// When the work completes in that time (or ctx had ended before anything
// was submitted) the error wraps the context's error but not ErrTimeout —
// the GPU is done with the submission and its buffers may be reused;
// otherwise it is Submit's error (ErrTimeout and the context's error, the
// work still running).
func (d *Device) SubmitDrain(ctx context.Context, r *Recorder, drain time.Duration) (*Result, error) {
	return d.submit(ctx, r, drain)
}

func (d *Device) submit(ctx context.Context, r *Recorder, drain time.Duration) (*Result, error) {
	if r == nil || r.d != d {
		return nil, fmt.Errorf("%w: recorder from another device", ErrInvalid)
	}
	if r.err != nil {
		return nil, fmt.Errorf("device: submit: %w", r.err)
	}
	if err := d.use(); err != nil {
		return nil, err
	}
	defer d.done()
	for _, p := range r.pipes {
		if p.closed.Load() {
			return nil, fmt.Errorf("device: submit: pipeline %s: %w", p.name, ErrClosed)
		}
	}
	for _, b := range r.buffers {
		if b.closed.Load() {
			return nil, fmt.Errorf("device: submit: buffer: %w", ErrClosed)
		}
	}
	return d.run(ctx, r.ops, runOpts{push: r.push, bufs: r.bufs, labels: r.labels, drain: drain})
}

type runOpts struct {
	push        []byte
	bufs        []C.fvk_binding
	labels      []string
	staging     []*staging // released when the submission completes
	keepStaging bool       // on success, leave staging to the caller
	// drain: when ctx ends first, how long to wait more for the
	// submission before abandoning it (SubmitDrain).
	drain time.Duration
}

// inflight is a submission whose wait was abandoned.
type inflight struct {
	f       *C.fvk_frame
	staging []*staging
}

func (p *inflight) release(d *Device, reuse bool) {
	if reuse {
		d.putFrame(p.f)
		for _, s := range p.staging {
			d.putStaging(s)
		}
		return
	}
	C.fvk_frame_destroy(d.c, p.f)
	for _, s := range p.staging {
		C.fvk_buffer_destroy(d.c, &s.b)
	}
}

const maxIdleFrames = 16

// WaitAbandoned waits until the GPU has finished every submission whose
// wait was given up (its context ended, or a drain timed out) and recycles
// them: once it returns nil, none of that work is left on the GPU, so the
// Pipelines and Buffers it used may be closed. It returns ctx's error when
// ctx ends first (the rest stay parked); on a closed or lost device it
// returns nil: nothing there runs or will finish.
func (d *Device) WaitAbandoned(ctx context.Context) error {
	if d.use() != nil {
		return nil
	}
	defer d.life.RUnlock()
	d.fmu.Lock()
	ps := d.pending
	d.pending = nil
	d.fmu.Unlock()
	for i, p := range ps {
		if err := d.wait(ctx, p.f); err != nil {
			d.fmu.Lock()
			d.pending = append(d.pending, ps[i:]...)
			d.fmu.Unlock()
			return err
		}
		p.release(d, true)
	}
	return nil
}

// getFrame returns a reset frame (device life lock held for reading).
func (d *Device) getFrame() (*C.fvk_frame, error) {
	d.fmu.Lock()
	// Reclaim abandoned submissions that have finished since.
	kept := d.pending[:0]
	var done []*inflight
	for _, p := range d.pending {
		if C.fvk_fence_status(d.c, p.f) == C.VK_SUCCESS {
			done = append(done, p)
		} else {
			kept = append(kept, p)
		}
	}
	d.pending = kept
	var f *C.fvk_frame
	if n := len(d.frames); n > 0 {
		f = d.frames[n-1]
		d.frames = d.frames[:n-1]
	}
	d.fmu.Unlock()
	for _, p := range done {
		p.release(d, true)
	}
	if f != nil {
		return f, nil
	}
	if r := C.fvk_frame_create(d.c, &f); r != 0 {
		return nil, d.check("create command buffer", r)
	}
	return f, nil
}

// putFrame resets a finished frame and pools it.
func (d *Device) putFrame(f *C.fvk_frame) {
	if C.fvk_frame_reset(d.c, f) != 0 {
		C.fvk_frame_destroy(d.c, f)
		return
	}
	d.fmu.Lock()
	if len(d.frames) < maxIdleFrames {
		d.frames = append(d.frames, f)
		f = nil
	}
	d.fmu.Unlock()
	if f != nil {
		C.fvk_frame_destroy(d.c, f)
	}
}

// run records ops into a frame, submits and waits (life lock held for reading).
func (d *Device) run(ctx context.Context, ops []C.fvk_op, o runOpts) (res *Result, err error) {
	releaseStaging := func() {
		for _, s := range o.staging {
			d.putStaging(s)
		}
	}
	if err := ctx.Err(); err != nil {
		releaseStaging()
		if o.drain > 0 { // SubmitDrain's callers: ErrTimeout only for work left running
			return nil, fmt.Errorf("device: not submitted: %w", err)
		}
		return nil, fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	if len(ops) == 0 {
		releaseStaging()
		return &Result{}, nil
	}
	f, err := d.getFrame()
	if err != nil {
		releaseStaging()
		return nil, err
	}
	var pushPtr *C.uint8_t
	if len(o.push) > 0 {
		pushPtr = (*C.uint8_t)(unsafe.Pointer(&o.push[0]))
	}
	var bufPtr *C.fvk_binding
	if len(o.bufs) > 0 {
		bufPtr = &o.bufs[0]
	}
	var bad C.int32_t
	r := C.fvk_record(d.c, f, &ops[0], C.uint32_t(len(ops)), pushPtr, bufPtr, C.uint32_t(len(o.labels)), &bad)
	if r != 0 {
		d.putFrame(f)
		releaseStaging()
		if bad >= 0 {
			return nil, fmt.Errorf("device: recording command %d: %w", int(bad), d.check("record", r))
		}
		return nil, d.check("record", r)
	}
	d.qmu.Lock()
	start := time.Now()
	r = C.fvk_submit(d.c, f)
	d.qmu.Unlock()
	if r != 0 {
		d.putFrame(f)
		releaseStaging()
		return nil, d.check("vkQueueSubmit", r)
	}
	d.submissions.Add(1)
	err = d.wait(ctx, f)
	if ctxErr := ended(ctx); err != nil && ctxErr != nil && o.drain > 0 {
		// Wait for the work to finish rather than leaving it running.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.drain)
		derr := d.wait(dctx, f)
		cancel()
		if derr == nil {
			d.putFrame(f)
			releaseStaging()
			return nil, fmt.Errorf("device: the context ended while the GPU ran (the submission completed): %w", ctxErr)
		}
	}
	if err != nil {
		// The GPU may still use the frame and staging memory: park them until
		// the fence signals (or Close).
		d.fmu.Lock()
		d.pending = append(d.pending, &inflight{f: f, staging: o.staging})
		d.fmu.Unlock()
		return nil, err
	}
	res = &Result{wall: time.Since(start)}
	if n := len(o.labels); n > 0 {
		ticks := make([]uint64, n)
		if r := C.fvk_query_results(d.c, f, C.uint32_t(n), (*C.uint64_t)(unsafe.Pointer(&ticks[0]))); r != 0 {
			err = d.check("vkGetQueryPoolResults", r)
		} else {
			res.fill(o.labels, ticks, d.info.TimestampValidBits, d.info.TimestampPeriodNs)
		}
	}
	d.putFrame(f)
	if !o.keepStaging {
		releaseStaging()
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// ended returns ctx's error, or DeadlineExceeded once its deadline has
// passed (a wait may see the deadline before the context's timer fires).
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// pollInterval bounds each blocking vkWaitForFences so that context
// cancellation is noticed promptly.
const pollInterval = 10 * time.Millisecond

func (d *Device) wait(ctx context.Context, f *C.fvk_frame) error {
	deadline, has := ctx.Deadline()
	if !has {
		deadline = time.Now().Add(d.timeout)
	}
	if d.spin > 0 {
		spinEnd := time.Now().Add(d.spin)
		for {
			r := C.fvk_fence_status(d.c, f)
			if r == C.VK_SUCCESS {
				return nil
			}
			if r != C.VK_NOT_READY {
				return d.check("vkGetFenceStatus", r)
			}
			if time.Now().After(spinEnd) {
				break
			}
		}
	}
	for {
		step := time.Until(deadline)
		if step > pollInterval {
			step = pollInterval
		}
		if step < 0 {
			step = 0
		}
		r := C.fvk_wait(d.c, f, C.uint64_t(step.Nanoseconds()))
		switch r {
		case C.VK_SUCCESS:
			return nil
		case C.VK_TIMEOUT:
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%w: %w", ErrTimeout, err)
			}
			if !time.Now().Before(deadline) {
				if has {
					return fmt.Errorf("%w: %w", ErrTimeout, context.DeadlineExceeded)
				}
				return fmt.Errorf("%w: GPU work not done after %v (no context deadline; see Options.DefaultTimeout)", ErrTimeout, d.timeout)
			}
		default:
			err := d.check("vkWaitForFences", r)
			if errors.Is(err, ErrDeviceLost) {
				return fmt.Errorf("device: %s: %w", d.info.Name, err)
			}
			return err
		}
	}
}

// ---- Results ----------------------------------------------------------------------------

// Timestamp is a GPU timestamp, relative to the first of its submission.
type Timestamp struct {
	Label string
	Time  time.Duration
}

// Result describes a completed submission.
type Result struct {
	stamps []Timestamp
	wall   time.Duration
}

func (res *Result) fill(labels []string, ticks []uint64, validBits uint32, periodNs float32) {
	mask := ^uint64(0)
	if validBits < 64 {
		mask = 1<<validBits - 1
	}
	first := ticks[0] & mask
	res.stamps = make([]Timestamp, len(labels))
	for i, l := range labels {
		t := (ticks[i] & mask) - first // modular: survives one wrap-around
		if validBits < 64 {
			t &= mask
		}
		res.stamps[i] = Timestamp{Label: l, Time: time.Duration(float64(t) * float64(periodNs))}
	}
}

// Timestamps returns the recorded timestamps in recording order (nil when
// none were recorded or the device has none).
func (res *Result) Timestamps() []Timestamp { return res.stamps }

// Lookup returns the time of the first timestamp with this label.
func (res *Result) Lookup(label string) (time.Duration, bool) {
	for _, s := range res.stamps {
		if s.Label == label {
			return s.Time, true
		}
	}
	return 0, false
}

// Elapsed is the GPU time between timestamps from and to; 0 when either
// label is missing.
func (res *Result) Elapsed(from, to string) time.Duration {
	a, ok1 := res.Lookup(from)
	b, ok2 := res.Lookup(to)
	if !ok1 || !ok2 {
		return 0
	}
	return b - a
}

// GPUTime is the time between the first and last timestamps.
func (res *Result) GPUTime() time.Duration {
	if len(res.stamps) < 2 {
		return 0
	}
	return res.stamps[len(res.stamps)-1].Time - res.stamps[0].Time
}

// Wall is the host-measured time from vkQueueSubmit to observing completion.
func (res *Result) Wall() time.Duration { return res.wall }
