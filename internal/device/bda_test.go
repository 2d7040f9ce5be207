//go:build cgo

package device_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
)

// hardBufferLimit is the size above which NewBuffer refuses every buffer:
// MaxBufferSize, or MaxAllocation where that is unknown.
func hardBufferLimit(inf device.Info) uint64 {
	if inf.MaxBufferSize > 0 {
		return inf.MaxBufferSize
	}
	return inf.MaxAllocation
}

// openBDA opens a device with buffer device addresses, skipping t on a
// device without them.
func openBDA(t *testing.T) *device.Device {
	t.Helper()
	d := devicetest.Open(t)
	inf := d.Info()
	t.Logf("%s: BufferDeviceAddress %v, Int64 %v, MaxStorageBufferRange %d, MaxAllocation %d, MaxBufferSize %d, MaxPushConstants %d",
		inf.Name, inf.BufferDeviceAddress, inf.Int64, inf.MaxStorageBufferRange, inf.MaxAllocation, inf.MaxBufferSize, inf.MaxPushConstants)
	if !inf.BufferDeviceAddress {
		t.Skipf("%s has no buffer device addresses", inf.Name)
	}
	return d
}

func TestBufferAddress(t *testing.T) {
	d := openBDA(t)
	sizes := []int64{4, 16, 1000, 1 << 20, 3<<20 + 12}
	bufs := make([]*device.Buffer, len(sizes))
	for i, size := range sizes {
		bufs[i] = newBuf(t, d, size)
		addr := bufs[i].Address()
		require.NotZero(t, addr, "buffer %d", i)
		assert.Zero(t, addr%16, "buffer %d at %#x is not 16-byte aligned", i, addr)
	}
	for i, a := range bufs {
		for j, b := range bufs[:i] {
			lo, hi := a, b
			if lo.Address() > hi.Address() {
				lo, hi = hi, lo
			}
			assert.LessOrEqual(t, lo.Address()+uint64(lo.Size()), hi.Address(),
				"buffers %d and %d overlap in the address space", j, i)
		}
	}
	require.NoError(t, bufs[0].Close())
	assert.Zero(t, bufs[0].Address(), "a closed buffer has no address")
}

func TestNoBufferDeviceAddress(t *testing.T) {
	opt := devicetest.Options(t)
	opt.NoBufferDeviceAddress = true
	d := devicetest.OpenWith(t, opt)
	inf := d.Info()
	assert.False(t, inf.BufferDeviceAddress)
	b := newBuf(t, d, 1024)
	assert.Zero(t, b.Address())

	if inf.MaxStorageBufferRange < hardBufferLimit(inf) {
		_, err := d.NewBuffer(int64(inf.MaxStorageBufferRange) + 4)
		require.ErrorIs(t, err, device.ErrTooLarge)
		assert.Contains(t, err.Error(), "storage-buffer range")
		assert.Contains(t, err.Error(), "buffer device addresses")
	}
	_, err := d.NewPipeline(device.PipelineDesc{Name: "bda", SPIRV: devicetest.SPIRV(t, "bda"), PushSize: 20, Bindings: 2, Addressed: true})
	require.ErrorIs(t, err, device.ErrUnsupported)
	assert.Contains(t, err.Error(), "device address")

	// Ordinary buffers and dispatches work as before.
	ctx := ctxT(t)
	p := axpb(t, d)
	require.NoError(t, device.Upload(ctx, b, 0, []float32{1, 2, 3}))
	r := d.Record()
	require.NoError(t, r.Dispatch(p, push(uint32(3), float32(2), float32(1)), [3]uint32{1, 1, 1}, b))
	_, err = d.Submit(ctx, r)
	require.NoError(t, err)
	got := make([]float32, 3)
	require.NoError(t, device.Download(ctx, b, 0, got))
	assert.Equal(t, []float32{3, 5, 7}, got)
}

// TestBufferBeyondMaxAllocation: between MaxAllocation and MaxBufferSize a
// buffer is tried; it either exists or fails with ErrOutOfMemory.
func TestBufferBeyondMaxAllocation(t *testing.T) {
	d := openBDA(t)
	inf := d.Info()
	size := inf.MaxAllocation + 1<<20
	if inf.MaxBufferSize == 0 || size > inf.MaxBufferSize {
		t.Skipf("no room between MaxAllocation %d and MaxBufferSize %d", inf.MaxAllocation, inf.MaxBufferSize)
	}
	b, err := d.NewBuffer(int64(size))
	if err != nil {
		require.ErrorIs(t, err, device.ErrOutOfMemory)
		assert.Contains(t, err.Error(), "maximum allocation")
		t.Logf("refused: %v", err)
		return
	}
	t.Logf("buffer of %d bytes at %#x", size, b.Address())
	assert.NotZero(t, b.Address())
	require.NoError(t, b.Close())
}

// bdaPush is the push-constant block of testdata/bda.comp.
func bdaPush(src, first uint64, n uint32) []byte {
	out := binary.LittleEndian.AppendUint64(nil, src)
	out = binary.LittleEndian.AppendUint64(out, first)
	return binary.LittleEndian.AppendUint32(out, n)
}

// word is the pattern of the large buffer: distinct for every index.
func word(k uint64) uint32 { return uint32(k)*2654435761 + 12345 }

// TestReadByAddressBeyondBindingRange creates a buffer larger than
// MaxStorageBufferRange and reads, through its device address, words
// below and far beyond the range (up to the buffer's end), checked on the
// host. A pipeline that is not Addressed may not bind that buffer.
func TestReadByAddressBeyondBindingRange(t *testing.T) {
	d := openBDA(t)
	inf := d.Info()
	if !inf.Int64 {
		t.Skipf("%s lacks shaderInt64", inf.Name)
	}
	const extra = 32 << 20 // bytes beyond the range
	rng := inf.MaxStorageBufferRange
	size := rng + extra // lavapipe: 128 MiB + 32 MiB
	if size > hardBufferLimit(inf) {
		t.Skipf("a buffer of %d bytes exceeds the device's maximum buffer size", size)
	}
	big, err := d.NewBuffer(int64(size))
	if errors.Is(err, device.ErrOutOfMemory) {
		t.Skipf("buffer of %d bytes: %v", size, err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = big.Close() })

	// The words read: [hi, end) by address and [0, n) through the binding.
	const wg = 64
	n := uint64(extra/4 + 1<<18) // words read by address
	hi := size/4 - n             // the first of them, inside the binding range; the last ends the buffer
	require.Less(t, hi*4, rng)
	ctx := ctxT(t)
	window := func(first, count uint64) {
		src := make([]uint32, count)
		for i := range src {
			src[i] = word(first + uint64(i))
		}
		require.NoError(t, device.Upload(ctx, big, int64(4*first), src))
	}
	window(0, n)
	window(hi, n)
	out := newBuf(t, d, int64(4*n))
	require.NoError(t, d.Fill(ctx, out, 0))

	p, err := d.NewPipeline(device.PipelineDesc{Name: "bda", SPIRV: devicetest.SPIRV(t, "bda"), PushSize: 20, Bindings: 2, Addressed: true})
	require.NoError(t, err)
	assert.True(t, p.Addressed())
	g := [3]uint32{uint32(min((n+wg-1)/wg, 1024)), 1, 1} // the shader loops over the rest
	r := d.Record()
	require.NoError(t, r.Dispatch(p, bdaPush(big.Address(), hi, uint32(n)), g, big, out))
	assert.Equal(t, 2, r.Commands()[0].Buffers)
	_, err = d.Submit(ctx, r)
	require.NoError(t, err)

	got := make([]uint32, n)
	require.NoError(t, device.Download(ctx, out, 0, got))
	for i := uint64(0); i < n; i++ {
		if want := word(hi+i) + word(i); got[i] != want {
			t.Fatalf("out[%d] (word %d at byte %d by address) = %#x, want %#x", i, hi+i, 4*(hi+i), got[i], want)
		}
	}

	// The same buffer bound to a pipeline that is not Addressed.
	plain := axpb(t, d)
	assert.False(t, plain.Addressed())
	err = d.Record().Dispatch(plain, push(uint32(1), float32(1), float32(0)), [3]uint32{1, 1, 1}, big)
	require.ErrorIs(t, err, device.ErrTooLarge)
	assert.Contains(t, err.Error(), "dispatch axpb: binding 0")
	assert.Contains(t, err.Error(), "storage-buffer range")
}
