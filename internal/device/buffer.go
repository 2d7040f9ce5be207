//go:build cgo

package device

/*
#include "vk.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// Buffer is a device-local storage buffer (usable as storage buffer and as
// transfer source and destination; on a device with
// Info.BufferDeviceAddress also through its device Address).
type Buffer struct {
	d      *Device
	b      C.fvk_buffer
	size   int64
	addr   uint64
	closed atomic.Bool
}

// NewBuffer allocates a device-local storage buffer of size bytes
// (contents undefined). It fails with ErrTooLarge when size exceeds
// MaxBufferSize (MaxAllocation where MaxBufferSize is unknown), or, on a
// device without Info.BufferDeviceAddress, MaxStorageBufferRange: there no
// shader could read beyond one binding's range. MaxAllocation is not
// enforced where MaxBufferSize is known (some drivers allocate beyond it):
// a larger size is tried. The driver's refusal, like any exhausted memory
// or a buffer larger than its memory heap, fails with ErrOutOfMemory.
func (d *Device) NewBuffer(size int64) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: buffer size %d", ErrInvalid, size)
	}
	if err := d.checkBufferSize(uint64(size)); err != nil {
		return nil, err
	}
	if err := d.use(); err != nil {
		return nil, err
	}
	defer d.done()
	b := &Buffer{d: d, size: size}
	if r := C.fvk_buffer_create(d.c, C.uint64_t(size), C.FVK_MEM_DEVICE, &b.b); r != 0 {
		return nil, d.bufferError(uint64(size), r, uint64(b.b.over_heap))
	}
	b.addr = uint64(b.b.address)
	d.lmu.Lock()
	d.buffers[b] = struct{}{}
	d.lmu.Unlock()
	return b, nil
}

// checkBufferSize refuses buffer sizes above the device's hard limits (see
// NewBuffer).
func (d *Device) checkBufferSize(size uint64) error {
	inf := &d.info
	if inf.MaxBufferSize > 0 && size > inf.MaxBufferSize {
		return fmt.Errorf("%w: buffer of %d bytes exceeds the device's maximum buffer size %d (maxBufferSize)",
			ErrTooLarge, size, inf.MaxBufferSize)
	}
	if inf.MaxBufferSize == 0 && size > inf.MaxAllocation {
		return fmt.Errorf("%w: buffer of %d bytes exceeds the device's maximum allocation %d (maxMemoryAllocationSize)",
			ErrTooLarge, size, inf.MaxAllocation)
	}
	if !inf.BufferDeviceAddress && size > inf.MaxStorageBufferRange {
		return fmt.Errorf("%w: buffer of %d bytes exceeds the device's storage-buffer range %d, and without buffer device addresses no shader could read beyond it",
			ErrTooLarge, size, inf.MaxStorageBufferRange)
	}
	return nil
}

// bufferError is the error of a buffer of size bytes that
// fvk_buffer_create refused with r; overHeap is the size of the memory
// heap the buffer exceeded (0: it was not refused for that).
func (d *Device) bufferError(size uint64, r C.VkResult, overHeap uint64) error {
	what := fmt.Sprintf("buffer of %d bytes", size)
	if size > d.info.MaxAllocation {
		what += fmt.Sprintf(" (beyond the device's maximum allocation %d)", d.info.MaxAllocation)
	}
	if overHeap > 0 {
		return fmt.Errorf("%w: %s: larger than its memory heap of %d bytes", ErrOutOfMemory, what, overHeap)
	}
	return fmt.Errorf("device: %s: %w", what, d.check("vkAllocateMemory", r))
}

// Address is the buffer's device address (VkDeviceAddress), valid in
// shaders of this device while the buffer is open: pass it in push
// constants to pipelines with PipelineDesc.Addressed. It is the start of
// the buffer's own memory allocation, which Vulkan aligns for every use of
// that memory. It is 0 on a device without Info.BufferDeviceAddress and
// once the buffer is closed.
func (b *Buffer) Address() uint64 {
	if b == nil || b.closed.Load() {
		return 0
	}
	return b.addr
}

// bindingRange is the number of bytes a descriptor of b covers: all of b,
// up to the device's MaxStorageBufferRange.
func (b *Buffer) bindingRange() uint64 {
	return min(uint64(b.size), b.d.info.MaxStorageBufferRange)
}

// Size is the buffer's size in bytes.
func (b *Buffer) Size() int64 { return b.size }

// Device returns the device that owns the buffer.
func (b *Buffer) Device() *Device { return b.d }

// Close frees the buffer. The caller must ensure no submission using it is
// still running. Safe to call more than once, also after Device.Close.
func (b *Buffer) Close() error {
	if b == nil || b.closed.Load() {
		return nil
	}
	b.d.closeObject(b.destroyLocked)
	return nil
}

// destroyLocked frees the buffer; d.lmu must be held and the device alive.
func (b *Buffer) destroyLocked() {
	if b.closed.Swap(true) {
		return
	}
	C.fvk_buffer_destroy(b.d.c, &b.b)
	delete(b.d.buffers, b)
}

func (b *Buffer) usable(d *Device) error {
	if b == nil {
		return fmt.Errorf("%w: nil buffer", ErrInvalid)
	}
	if b.d != d {
		return fmt.Errorf("%w: buffer belongs to another device", ErrInvalid)
	}
	if b.closed.Load() {
		return fmt.Errorf("buffer: %w", ErrClosed)
	}
	return nil
}

func (b *Buffer) checkRange(off, n int64) error {
	if off < 0 || n < 0 || off > b.size || n > b.size-off {
		return fmt.Errorf("%w: range [%d, %d) outside buffer of %d bytes", ErrInvalid, off, off+n, b.size)
	}
	return nil
}

// ---- Host transfers ---------------------------------------------------------------------

// Element is a type Upload and Download move; slices of it are copied
// byte for byte (host byte order, little endian on every supported host).
type Element interface {
	~float32 | ~float64 | ~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64
}

func asBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

// Upload copies src into b at byte offset offset through a pooled
// host-visible staging buffer and waits for the copy. Later submissions
// see the data. The copy goes in pieces of at most 64 MiB: when ctx ends,
// Upload stops before the next piece, or waits for the one in flight
// (transferDrain at most; see SubmitDrain), and returns an error wrapping
// the context's error — and ErrTimeout only if that piece may still be
// running.
func Upload[T Element](ctx context.Context, b *Buffer, offset int64, src []T) error {
	if b == nil {
		return fmt.Errorf("%w: nil buffer", ErrInvalid)
	}
	return b.d.upload(ctx, b, offset, asBytes(src))
}

// Download copies len(dst) elements from b at byte offset offset into dst,
// after all previously submitted work; ctx as for Upload.
func Download[T Element](ctx context.Context, b *Buffer, offset int64, dst []T) error {
	if b == nil {
		return fmt.Errorf("%w: nil buffer", ErrInvalid)
	}
	return b.d.download(ctx, b, offset, asBytes(dst))
}

// UploadBytes is Upload for a byte slice.
func (b *Buffer) UploadBytes(ctx context.Context, offset int64, src []byte) error {
	return b.d.upload(ctx, b, offset, src)
}

// DownloadBytes is Download for a byte slice.
func (b *Buffer) DownloadBytes(ctx context.Context, offset int64, dst []byte) error {
	return b.d.download(ctx, b, offset, dst)
}

// Fill sets every 32-bit word of b to word (e.g. 0x7FC00000 to poison
// float32 outputs with NaN) and waits for it.
func (d *Device) Fill(ctx context.Context, b *Buffer, word uint32) error {
	r := d.Record()
	r.Fill(b, word)
	_, err := d.Submit(ctx, r)
	return err
}

// transferDrain bounds the wait for a transfer's piece in flight when its
// context ends (a piece is at most stagingChunk bytes).
const transferDrain = time.Second

// stagingChunk bounds one staging buffer; larger transfers go in chunks.
const (
	stagingMin   = 1 << 20
	stagingChunk = 64 << 20
	stagingIdle  = 256 << 20 // idle staging memory kept pooled
)

type staging struct {
	b    C.fvk_buffer
	kind C.int
	size int64
}

func (s *staging) bytes(n int64) []byte {
	return unsafe.Slice((*byte)(s.b.mapped), n)
}

func (d *Device) getStaging(kind C.int, n int64) (*staging, error) {
	d.smu.Lock()
	best := -1
	for i, s := range d.staging {
		if s.kind == kind && s.size >= n && (best < 0 || s.size < d.staging[best].size) {
			best = i
		}
	}
	if best >= 0 {
		s := d.staging[best]
		d.staging = append(d.staging[:best], d.staging[best+1:]...)
		d.stBytes -= s.size
		d.smu.Unlock()
		return s, nil
	}
	d.smu.Unlock()
	size := int64(stagingMin)
	for size < n {
		size *= 2
	}
	s := &staging{kind: kind, size: size}
	if r := C.fvk_buffer_create(d.c, C.uint64_t(size), kind, &s.b); r != 0 {
		return nil, fmt.Errorf("device: staging buffer of %d bytes: %w", size, d.check("vkAllocateMemory", r))
	}
	return s, nil
}

// putStaging returns s to the pool (device life lock held for reading).
func (d *Device) putStaging(s *staging) {
	d.smu.Lock()
	defer d.smu.Unlock()
	if d.stBytes+s.size > stagingIdle {
		C.fvk_buffer_destroy(d.c, &s.b)
		return
	}
	d.staging = append(d.staging, s)
	d.stBytes += s.size
}

// staged checks b and the range of host at off in it, holds the device in
// use and calls move for each staging-sized chunk of host with its offset
// in b and a staging buffer of kind for it, which move hands to d.run or
// back to the pool.
func (d *Device) staged(ctx context.Context, b *Buffer, off int64, host []byte, kind C.int,
	move func(off int64, chunk []byte, s *staging) error) error {
	if err := b.usable(d); err != nil {
		return err
	}
	if err := b.checkRange(off, int64(len(host))); err != nil {
		return err
	}
	if err := d.use(); err != nil {
		return err
	}
	defer d.done()
	for len(host) > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("device: transfer stopped between pieces: %w", err) // none in flight
		}
		n := min(int64(len(host)), stagingChunk)
		s, err := d.getStaging(kind, n)
		if err != nil {
			return err
		}
		if err := move(off, host[:n], s); err != nil {
			return err
		}
		host = host[n:]
		off += n
	}
	return nil
}

func (d *Device) upload(ctx context.Context, b *Buffer, off int64, src []byte) error {
	return d.staged(ctx, b, off, src, C.FVK_MEM_UPLOAD, func(off int64, src []byte, s *staging) error {
		n := int64(len(src))
		copy(s.bytes(n), src)
		if r := C.fvk_buffer_flush(d.c, &s.b, C.uint64_t(n)); r != 0 {
			d.putStaging(s)
			return d.check("vkFlushMappedMemoryRanges", r)
		}
		ops := []C.fvk_op{
			{kind: C.FVK_OP_COPY, dst: b.b.buffer, src: s.b.buffer, dst_off: C.uint64_t(off), size: C.uint64_t(n)},
			{kind: C.FVK_OP_BARRIER, arg: C.FVK_BARRIER_FULL},
		}
		if _, err := d.run(ctx, ops, runOpts{staging: []*staging{s}, drain: transferDrain}); err != nil {
			return fmt.Errorf("device: upload: %w", err)
		}
		d.bytesUp.Add(n)
		return nil
	})
}

func (d *Device) download(ctx context.Context, b *Buffer, off int64, dst []byte) error {
	return d.staged(ctx, b, off, dst, C.FVK_MEM_DOWNLOAD, func(off int64, dst []byte, s *staging) error {
		n := int64(len(dst))
		ops := []C.fvk_op{
			{kind: C.FVK_OP_COPY, dst: s.b.buffer, src: b.b.buffer, src_off: C.uint64_t(off), size: C.uint64_t(n)},
			{kind: C.FVK_OP_BARRIER, arg: C.FVK_BARRIER_HOST_READ},
		}
		// keepStaging: on success the staging buffer stays ours to read.
		if _, err := d.run(ctx, ops, runOpts{staging: []*staging{s}, keepStaging: true, drain: transferDrain}); err != nil {
			return fmt.Errorf("device: download: %w", err)
		}
		if r := C.fvk_buffer_invalidate(d.c, &s.b, C.uint64_t(n)); r != 0 {
			d.putStaging(s)
			return d.check("vkInvalidateMappedMemoryRanges", r)
		}
		copy(dst, s.bytes(n))
		d.putStaging(s)
		d.bytesDown.Add(n)
		return nil
	})
}
