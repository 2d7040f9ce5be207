//go:build cgo

package vkattn

import (
	"errors"
	"math/bits"
	"sync"

	"github.com/flashvk/flashvk/internal/device"
)

// bufPool keeps device buffers for reuse: the host path's operand buffers
// and the backward's D scratch are taken and returned on every call, and a
// fresh vkAllocateMemory per call would cost more than small kernels.
// Sizes are rounded up to classes (1/8 steps between powers of two, so at
// most 12.5% is wasted) and idle buffers are capped in total size.
type bufPool struct {
	dev       *device.Device
	maxIdle   int64
	mu        sync.Mutex
	idle      map[int64][]*device.Buffer
	idleBytes int64
	idleCount int
	live      int
	closed    bool
}

func newBufPool(dev *device.Device) *bufPool {
	maxIdle := int64(1 << 30)
	if local := dev.Info().DeviceLocalBytes(); local > 0 && int64(local/4) < maxIdle {
		maxIdle = int64(local / 4)
	}
	return &bufPool{dev: dev, maxIdle: maxIdle, idle: map[int64][]*device.Buffer{}}
}

// sizeClass rounds n (> 0) up to a multiple of 1/8 of its power of two
// (at least 256 bytes).
func sizeClass(n int64) int64 {
	if n <= 256 {
		return 256
	}
	step := int64(1) << (63 - bits.LeadingZeros64(uint64(n-1)) - 2) // pow2 ≥ n, / 8
	step = max(step, 4)
	return (n + step - 1) / step * step
}

// classFor is the size of the buffer get allocates for n bytes: n's size
// class, or where that exceeds limit n rounded to 4 bytes, or n.
func classFor(n, limit int64) int64 {
	c := sizeClass(n)
	if c > limit {
		c = (n + 3) &^ 3
		if c > limit {
			c = n
		}
	}
	return c
}

// get returns a buffer of at least n bytes and at most limit (n ≤ limit:
// the device's largest buffer, or one binding's range for a buffer that
// fits one).
func (p *bufPool) get(n, limit int64) (*device.Buffer, error) {
	c := classFor(n, limit)
	p.mu.Lock()
	if l := p.idle[c]; len(l) > 0 {
		buf := l[len(l)-1]
		p.idle[c] = l[:len(l)-1]
		p.idleBytes -= c
		p.idleCount--
		p.live++
		p.mu.Unlock()
		return buf, nil
	}
	p.mu.Unlock()
	buf, err := p.dev.NewBuffer(c)
	if err != nil && errors.Is(err, device.ErrOutOfMemory) {
		p.drain(false) // give the idle buffers back and try once more
		buf, err = p.dev.NewBuffer(c)
	}
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.live++
	p.mu.Unlock()
	return buf, nil
}

// put returns buf to the pool (or frees it when the pool is full or
// closed). nil is ignored.
func (p *bufPool) put(buf *device.Buffer) {
	if buf == nil {
		return
	}
	p.mu.Lock()
	p.live--
	c := buf.Size()
	if p.closed || p.idleBytes+c > p.maxIdle {
		p.mu.Unlock()
		buf.Close()
		return
	}
	p.idle[c] = append(p.idle[c], buf)
	p.idleBytes += c
	p.idleCount++
	p.mu.Unlock()
}

// free closes every idle buffer; later puts close their buffers.
func (p *bufPool) free() { p.drain(true) }

// drain closes the idle buffers (and, with closing, the pool).
func (p *bufPool) drain(closing bool) {
	p.mu.Lock()
	idle := p.idle
	p.idle = map[int64][]*device.Buffer{}
	p.idleBytes, p.idleCount = 0, 0
	p.closed = p.closed || closing
	p.mu.Unlock()
	for _, l := range idle {
		for _, b := range l {
			b.Close()
		}
	}
}

func (p *bufPool) stats() (live, idle int, idleBytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live, p.idleCount, p.idleBytes
}

// forget drops n handed-out buffers from the accounting without taking
// them back (they stay owned by the device until Close).
func (p *bufPool) forget(n int) {
	p.mu.Lock()
	p.live -= n
	p.mu.Unlock()
}
