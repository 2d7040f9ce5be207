//go:build cgo

package device_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
)

func push(vals ...any) []byte {
	var out []byte
	for _, v := range vals {
		switch v := v.(type) {
		case uint32:
			out = binary.LittleEndian.AppendUint32(out, v)
		case float32:
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		default:
			panic(fmt.Sprintf("push: %T", v))
		}
	}
	return out
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const nanBits = 0x7FC00000

func TestDevices(t *testing.T) {
	devicetest.Skip(t)
	infos, err := device.Devices("")
	require.NoError(t, err)
	require.NotEmpty(t, infos)
	for i, inf := range infos {
		t.Logf("%s", inf)
		t.Logf("  %+v", inf)
		assert.Equal(t, i, inf.Index)
		assert.NotEmpty(t, inf.Name)
		assert.Contains(t, []string{"discrete", "integrated", "virtual", "cpu", "other"}, inf.Type)
		assert.NotZero(t, inf.SubgroupSize)
		assert.Zero(t, inf.SubgroupSize&(inf.SubgroupSize-1), "subgroup size is a power of two")
		assert.LessOrEqual(t, inf.MinSubgroupSize, inf.SubgroupSize)
		assert.GreaterOrEqual(t, inf.MaxSubgroupSize, inf.SubgroupSize)
		assert.GreaterOrEqual(t, inf.MaxSharedMemory, uint32(16384), "Vulkan guarantees 16 KiB")
		assert.GreaterOrEqual(t, inf.MaxWorkgroupInvocations, uint32(128))
		assert.GreaterOrEqual(t, inf.MaxPushConstants, uint32(128))
		assert.GreaterOrEqual(t, inf.MaxWorkgroupCount[0], uint32(65535))
		assert.NotZero(t, inf.MaxAllocation)
		assert.NotZero(t, inf.MaxStorageBufferRange)
		assert.NotEmpty(t, inf.Heaps)
		assert.Regexp(t, `^\d+\.\d+\.\d+$`, inf.APIVersion)
		for _, s := range inf.CoopMat {
			t.Logf("  coopmat %s", s)
		}
		if inf.CoopMat2.Supported() {
			t.Logf("  coopmat2 %+v", inf.CoopMat2)
		}
	}
}

func TestOpenCloseTwice(t *testing.T) {
	devicetest.Skip(t)
	for i := 0; i < 2; i++ {
		d, err := device.Open(devicetest.Options(t))
		require.NoError(t, err)
		require.NoError(t, d.Close())
		require.NoError(t, d.Close(), "second Close is a no-op")
		assert.Zero(t, d.Stats().Live.Total(), "live objects after Close: %+v", d.Stats().Live)
		_, err = d.NewBuffer(16)
		assert.ErrorIs(t, err, device.ErrClosed)
		_, err = d.Submit(context.Background(), d.Record())
		assert.ErrorIs(t, err, device.ErrClosed)
	}
}

func TestOpenSelect(t *testing.T) {
	devicetest.Skip(t)
	infos, err := device.Devices("")
	require.NoError(t, err)
	first := infos[0]
	word := strings.Fields(first.Name)[0]
	vendor := first.Vendor
	if strings.Contains(strings.ToLower(first.Name), "llvmpipe") {
		vendor = "lavapipe"
	}
	for _, sel := range []string{"", "best", "0", word, strings.ToUpper(word), vendor, first.Type} {
		t.Run("select="+sel, func(t *testing.T) {
			opt := devicetest.Options(t)
			opt.Select = sel
			d := devicetest.OpenWith(t, opt)
			if sel == "0" || sel == vendor {
				assert.Equal(t, 0, d.Info().Index)
			}
			if sel == word || sel == strings.ToUpper(word) {
				assert.Contains(t, strings.ToLower(d.Info().Name), strings.ToLower(word))
			}
		})
	}
	for _, bad := range []string{"no-such-gpu-xyz", "99", "-1"} {
		opt := devicetest.Options(t)
		opt.Select = bad
		_, err := device.Open(opt)
		require.Error(t, err, bad)
		assert.ErrorIs(t, err, device.ErrNoDevice)
		assert.Contains(t, err.Error(), first.Name, "error lists the available devices")
	}
}

func TestUploadDownload(t *testing.T) {
	d := devicetest.Open(t)
	ctx := ctxT(t)
	const n = 100_003
	b, err := d.NewBuffer(4 * n)
	require.NoError(t, err)
	assert.EqualValues(t, 4*n, b.Size())

	src := make([]float32, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = rng.Float32()*2 - 1
	}
	require.NoError(t, device.Upload(ctx, b, 0, src))
	dst := make([]float32, n)
	for i := range dst {
		dst[i] = float32(math.NaN())
	}
	require.NoError(t, device.Download(ctx, b, 0, dst))
	require.Equal(t, src, dst)

	// Partial, unaligned ranges with other element types.
	u16 := []uint16{1, 2, 3, 4, 5}
	require.NoError(t, device.Upload(ctx, b, 6, u16))
	got16 := make([]uint16, 5)
	require.NoError(t, device.Download(ctx, b, 6, got16))
	assert.Equal(t, u16, got16)
	raw := make([]byte, 3)
	require.NoError(t, b.DownloadBytes(ctx, 6, raw))
	assert.Equal(t, []byte{1, 0, 2}, raw)

	// Out of range.
	assert.ErrorIs(t, device.Upload(ctx, b, 4*n-2, []uint32{1}), device.ErrInvalid)
	assert.ErrorIs(t, device.Download(ctx, b, -1, []uint32{1}), device.ErrInvalid)
	assert.NoError(t, device.Upload(ctx, b, 0, []float32(nil)), "empty upload is a no-op")

	st := d.Stats()
	assert.Positive(t, st.BytesUploaded)
	assert.Positive(t, st.BytesDownloaded)
}

func TestLargeChunkedTransfer(t *testing.T) {
	d := devicetest.Open(t)
	ctx := ctxT(t)
	const n = (64<<20)/4 + 12345 // more than one 64 MiB staging chunk
	if uint64(4*n) > d.Info().MaxStorageBufferRange {
		t.Skip("device storage buffer range too small")
	}
	b, err := d.NewBuffer(4 * n)
	require.NoError(t, err)
	src := make([]uint32, n)
	for i := range src {
		src[i] = uint32(i) * 2654435761
	}
	require.NoError(t, device.Upload(ctx, b, 0, src))
	dst := make([]uint32, n)
	require.NoError(t, device.Download(ctx, b, 0, dst))
	require.Equal(t, src, dst)
}

func TestFillCopy(t *testing.T) {
	d := devicetest.Open(t)
	ctx := ctxT(t)
	a, err := d.NewBuffer(1024)
	require.NoError(t, err)
	b, err := d.NewBuffer(1024)
	require.NoError(t, err)
	require.NoError(t, d.Fill(ctx, a, nanBits))
	got := make([]float32, 256)
	require.NoError(t, device.Download(ctx, a, 0, got))
	for _, v := range got {
		require.True(t, math.IsNaN(float64(v)))
	}

	src := make([]uint32, 256)
	for i := range src {
		src[i] = uint32(i)
	}
	require.NoError(t, device.Upload(ctx, a, 0, src))
	r := d.Record()
	r.Fill(b, 0xDEADBEEF)
	r.BarrierAll()
	r.Copy(b, a, 512, 0, 256) // first 64 words of a into words 128..191 of b
	r.BarrierAll()
	r.FillRange(b, 0, 16, 7)
	_, err = d.Submit(ctx, r)
	require.NoError(t, err)
	out := make([]uint32, 256)
	require.NoError(t, device.Download(ctx, b, 0, out))
	for i, v := range out {
		switch {
		case i < 4:
			require.EqualValues(t, 7, v, i)
		case i >= 128 && i < 192:
			require.EqualValues(t, i-128, v, i)
		default:
			require.EqualValues(t, uint32(0xDEADBEEF), v, i)
		}
	}

	// Recording errors surface at Submit.
	r = d.Record()
	r.Copy(a, a, 0, 8, 16) // overlap
	assert.ErrorIs(t, r.Err(), device.ErrInvalid)
	_, err = d.Submit(ctx, r)
	assert.ErrorIs(t, err, device.ErrInvalid)
	r = d.Record()
	r.FillRange(a, 2, 8, 0)
	assert.ErrorIs(t, r.Err(), device.ErrInvalid)
	r = d.Record()
	r.Copy(b, a, 1000, 0, 100)
	assert.ErrorIs(t, r.Err(), device.ErrInvalid)
}

// vadd builds the vector-add pipeline with workgroup size wg and SCALE.
func vadd(t testing.TB, d *device.Device, wg uint32, scale float32) *device.Pipeline {
	t.Helper()
	p, err := d.NewPipeline(device.PipelineDesc{
		Name:     "vadd",
		SPIRV:    devicetest.SPIRV(t, "vadd"),
		Spec:     []device.Spec{{ID: 0, Value: wg}, {ID: 1, Value: math.Float32bits(scale)}},
		PushSize: 8,
		Bindings: 3,
	})
	require.NoError(t, err)
	return p
}

func groups(n, per int) [3]uint32 { return [3]uint32{uint32((n + per - 1) / per), 1, 1} }

func TestVectorAdd(t *testing.T) {
	d := devicetest.Open(t)
	ctx := ctxT(t)
	const n = 10_000
	const wg = 128
	p := vadd(t, d, wg, 3)
	a, b, c := newBuf(t, d, 4*n), newBuf(t, d, 4*n), newBuf(t, d, 4*(n+64))
	av, bv := make([]float32, n), make([]float32, n)
	for i := range av {
		av[i], bv[i] = float32(i%1000), float32(i%77)
	}
	require.NoError(t, device.Upload(ctx, a, 0, av))
	require.NoError(t, device.Upload(ctx, b, 0, bv))
	require.NoError(t, d.Fill(ctx, c, nanBits))

	r := d.Record()
	require.NoError(t, r.Dispatch(p, push(uint32(n), float32(0.5)), groups(n, wg), a, b, c))
	res, err := d.Submit(ctx, r)
	require.NoError(t, err)
	assert.Positive(t, res.Wall())

	got := make([]float32, n+64)
	require.NoError(t, device.Download(ctx, c, 0, got))
	for i := 0; i < n; i++ {
		require.Equal(t, av[i]+3*bv[i]+0.5, got[i], "element %d", i)
	}
	for i := n; i < n+64; i++ {
		require.True(t, math.IsNaN(float64(got[i])), "element %d beyond n must stay poisoned", i)
	}

	// Argument checks.
	assert.ErrorIs(t, d.Record().Dispatch(p, push(uint32(n)), groups(n, wg), a, b, c), device.ErrInvalid)
	assert.ErrorIs(t, d.Record().Dispatch(p, push(uint32(n), float32(0)), groups(n, wg), a, b), device.ErrInvalid)
	assert.ErrorIs(t, d.Record().Dispatch(p, push(uint32(n), float32(0)), [3]uint32{math.MaxUint32, 1, 1}, a, b, c), device.ErrTooLarge)
	assert.ErrorIs(t, d.Record().Dispatch(nil, nil, groups(n, wg)), device.ErrInvalid)
}

// axpb builds the axpb test pipeline: x[i] = x[i]·mul + add for i < n,
// with push(n, mul, add) and x bound at 0.
func axpb(t testing.TB, d *device.Device) *device.Pipeline {
	t.Helper()
	p, err := d.NewPipeline(device.PipelineDesc{Name: "axpb", SPIRV: devicetest.SPIRV(t, "axpb"), PushSize: 12, Bindings: 1})
	require.NoError(t, err)
	return p
}

func newBuf(t testing.TB, d *device.Device, size int64) *device.Buffer {
	t.Helper()
	b, err := d.NewBuffer(size)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestDispatchChainWithBarriers(t *testing.T) {
	d := devicetest.Open(t)
	ctx := ctxT(t)
	const n = 5000
	p := axpb(t, d)
	x, y := newBuf(t, d, 4*n), newBuf(t, d, 4*n)
	x0 := make([]float32, n)
	for i := range x0 {
		x0[i] = float32(i % 100)
	}
	require.NoError(t, device.Upload(ctx, x, 0, x0))

	// x = 2x+1 ten times, then copy to y, then y = y*1-1 once, all in one submission.
	r := d.Record()
	r.Timestamp("start")
	for k := 0; k < 10; k++ {
		require.NoError(t, r.Dispatch(p, push(uint32(n), float32(2), float32(1)), groups(n, 64), x))
		r.Barrier()
		r.Timestamp(fmt.Sprintf("step%d", k))
	}
	r.BarrierComputeToTransfer()
	r.Copy(y, x, 0, 0, 4*n)
	r.BarrierTransferToCompute()
	require.NoError(t, r.Dispatch(p, push(uint32(n), float32(1), float32(-1)), groups(n, 64), y))
	r.Timestamp("end")
	res, err := d.Submit(ctx, r)
	require.NoError(t, err)

	gx, gy := make([]float32, n), make([]float32, n)
	require.NoError(t, device.Download(ctx, x, 0, gx))
	require.NoError(t, device.Download(ctx, y, 0, gy))
	for i := range x0 {
		want := float32(1024)*(x0[i]+1) - 1
		require.Equal(t, want, gx[i], "x[%d]", i)
		require.Equal(t, want-1, gy[i], "y[%d]", i)
	}

	if d.Info().TimestampValidBits == 0 {
		assert.Empty(t, res.Timestamps())
		return
	}
	ts := res.Timestamps()
	require.Len(t, ts, 12)
	assert.Equal(t, "start", ts[0].Label)
	assert.Zero(t, ts[0].Time)
	for i := 1; i < len(ts); i++ {
		assert.GreaterOrEqual(t, ts[i].Time, ts[i-1].Time, "timestamps ordered")
	}
	assert.GreaterOrEqual(t, res.Elapsed("start", "end"), time.Duration(0))
	assert.Equal(t, res.GPUTime(), res.Elapsed("start", "end"))
	assert.Zero(t, res.Elapsed("start", "missing"))
	t.Logf("GPU time %v for 11 dispatches + copy, wall %v", res.GPUTime(), res.Wall())
}

func TestSubgroup(t *testing.T) {
	d := devicetest.Open(t)
	ctx := ctxT(t)
	inf := d.Info()
	if !inf.SubgroupOps.Arithmetic {
		t.Skip("no subgroup arithmetic")
	}
	out := newBuf(t, d, 4*65)
	run := func(req uint32) uint32 {
		p, err := d.NewPipeline(device.PipelineDesc{Name: "subgroup", SPIRV: devicetest.SPIRV(t, "subgroup"), Bindings: 1, RequiredSubgroupSize: req})
		require.NoError(t, err)
		defer p.Close()
		r := d.Record()
		require.NoError(t, r.Dispatch(p, nil, [3]uint32{1, 1, 1}, out))
		_, err = d.Submit(ctx, r)
		require.NoError(t, err)
		got := make([]uint32, 65)
		require.NoError(t, device.Download(ctx, out, 0, got))
		for i := 1; i < 65; i++ {
			require.Equal(t, got[0], got[i], "subgroupAdd(1) equals the subgroup size (invocation %d)", i-1)
		}
		return got[0]
	}
	sz := run(0)
	assert.GreaterOrEqual(t, sz, inf.MinSubgroupSize)
	assert.LessOrEqual(t, sz, inf.MaxSubgroupSize)
	t.Logf("subgroup size %d (reported %d, range %d..%d, control %v)", sz, inf.SubgroupSize, inf.MinSubgroupSize, inf.MaxSubgroupSize, inf.SubgroupSizeControl)
	if inf.SubgroupSizeControl {
		for s := inf.MinSubgroupSize; s <= inf.MaxSubgroupSize && s <= 64; s *= 2 {
			assert.Equal(t, s, run(s), "required subgroup size %d", s)
		}
	}
	_, err := d.NewPipeline(device.PipelineDesc{SPIRV: devicetest.SPIRV(t, "subgroup"), Bindings: 1, RequiredSubgroupSize: 3})
	assert.ErrorIs(t, err, device.ErrUnsupported)
}

func TestFloat16(t *testing.T) {
	d := devicetest.Open(t)
	ctx := ctxT(t)
	if !d.Info().Float16 || !d.Info().StorageBuffer16Bit {
		t.Skip("no float16 arithmetic or 16-bit storage")
	}
	p, err := d.NewPipeline(device.PipelineDesc{Name: "half", SPIRV: devicetest.SPIRV(t, "half"), PushSize: 4, Bindings: 2})
	require.NoError(t, err)
	const n = 300
	x, y := newBuf(t, d, 2*n), newBuf(t, d, 4*n)
	src := make([]uint16, n)
	for i := range src {
		src[i] = 0x3C00 + uint16(i) // 1.0, 1.0009765625, …
	}
	require.NoError(t, device.Upload(ctx, x, 0, src))
	r := d.Record()
	require.NoError(t, r.Dispatch(p, push(uint32(n)), groups(n, 64), x, y))
	_, err = d.Submit(ctx, r)
	require.NoError(t, err)
	got := make([]float32, n)
	require.NoError(t, device.Download(ctx, y, 0, got))
	for i := range got {
		want := 2 * (1 + float32(i)/1024)
		require.Equal(t, want, got[i], i)
	}
}

func TestTimeout(t *testing.T) {
	d := devicetest.Open(t)
	p, err := d.NewPipeline(device.PipelineDesc{Name: "spin", SPIRV: devicetest.SPIRV(t, "spin"), PushSize: 4, Bindings: 1})
	require.NoError(t, err)
	const threads = 64 * 64
	out := newBuf(t, d, 4*threads)

	// Calibrate: find iters for which the kernel takes >= 200 ms, so that a
	// 1 ms deadline certainly expires while it runs (finite: safe on CPUs).
	iters := uint32(1 << 12)
	for {
		r := d.Record()
		require.NoError(t, r.Dispatch(p, push(iters), [3]uint32{64, 1, 1}, out))
		start := time.Now()
		_, err := d.Submit(ctxT(t), r)
		require.NoError(t, err)
		if time.Since(start) > 200*time.Millisecond || iters >= 1<<30 {
			break
		}
		iters *= 4
	}
	r := d.Record()
	require.NoError(t, r.Dispatch(p, push(iters), [3]uint32{64, 1, 1}, out))
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = d.Submit(ctx, r)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.ErrorIs(t, err, device.ErrTimeout)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, elapsed, 150*time.Millisecond, "Submit returns soon after the deadline")
	t.Logf("timed out after %v (iters %d)", elapsed, iters)

	// Cancelled before submission: nothing is submitted.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	_, err = d.Submit(cctx, r)
	assert.ErrorIs(t, err, device.ErrTimeout)
	assert.ErrorIs(t, err, context.Canceled)

	// The device stays usable; the abandoned submission is reclaimed.
	require.NoError(t, d.Fill(ctxT(t), out, 1))
	got := make([]uint32, 4)
	require.NoError(t, device.Download(ctxT(t), out, 0, got))
	assert.Equal(t, []uint32{1, 1, 1, 1}, got)
}

func TestErrors(t *testing.T) {
	d := devicetest.Open(t)
	ctx := ctxT(t)
	_, err := d.NewBuffer(0)
	assert.ErrorIs(t, err, device.ErrInvalid)
	_, err = d.NewBuffer(int64(hardBufferLimit(d.Info())) + 1)
	assert.ErrorIs(t, err, device.ErrTooLarge)
	_, err = d.NewBuffer(math.MaxInt64)
	assert.ErrorIs(t, err, device.ErrTooLarge)

	_, err = d.NewPipeline(device.PipelineDesc{SPIRV: []byte("not spir-v at all")})
	assert.ErrorIs(t, err, device.ErrInvalid)
	_, err = d.NewPipeline(device.PipelineDesc{SPIRV: devicetest.SPIRV(t, "axpb"), PushSize: 6, Bindings: 1})
	assert.ErrorIs(t, err, device.ErrInvalid)
	_, err = d.NewPipeline(device.PipelineDesc{SPIRV: devicetest.SPIRV(t, "axpb"), PushSize: d.Info().MaxPushConstants + 4, Bindings: 1})
	assert.ErrorIs(t, err, device.ErrInvalid)

	b := newBuf(t, d, 64)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	assert.ErrorIs(t, device.Upload(ctx, b, 0, []uint32{1}), device.ErrClosed)
	r := d.Record()
	r.Fill(b, 0)
	assert.ErrorIs(t, r.Err(), device.ErrClosed)

	p := axpb(t, d)
	b2 := newBuf(t, d, 64)
	r = d.Record()
	require.NoError(t, r.Dispatch(p, push(uint32(1), float32(1), float32(1)), [3]uint32{1, 1, 1}, b2))
	require.NoError(t, p.Close())
	_, err = d.Submit(ctx, r)
	assert.ErrorIs(t, err, device.ErrClosed, "pipeline closed between recording and submission")

	other := devicetest.Open(t)
	ob := newBuf(t, other, 64)
	assert.NoError(t, device.Upload(ctx, ob, 0, []uint32{1}))
	r = d.Record()
	r.Fill(ob, 0)
	assert.ErrorIs(t, r.Err(), device.ErrInvalid, "buffer of another device")
}

func TestPipelineCacheData(t *testing.T) {
	d := devicetest.Open(t)
	_, err := d.NewPipeline(device.PipelineDesc{SPIRV: devicetest.SPIRV(t, "vadd"), PushSize: 8, Bindings: 3})
	require.NoError(t, err)
	blob, err := d.PipelineCacheData()
	require.NoError(t, err)
	t.Logf("pipeline cache: %d bytes", len(blob))

	opt := devicetest.Options(t)
	opt.PipelineCache = blob
	d2 := devicetest.OpenWith(t, opt)
	_, err = d2.NewPipeline(device.PipelineDesc{SPIRV: devicetest.SPIRV(t, "vadd"), PushSize: 8, Bindings: 3})
	require.NoError(t, err)

	// Garbage and foreign blobs are ignored.
	for _, bad := range [][]byte{[]byte("garbage"), append([]byte{32, 0, 0, 0, 1, 0, 0, 0, 0xde, 0x10, 0, 0, 1, 2, 3, 4}, make([]byte, 100)...)} {
		opt.PipelineCache = bad
		d3 := devicetest.OpenWith(t, opt)
		axpb(t, d3)
	}
}

// TestLeaks opens and closes devices repeatedly and runs many small
// submissions; no Vulkan object may survive Close.
func TestLeaks(t *testing.T) {
	devicetest.Skip(t)
	opt := devicetest.Options(t)
	if testing.Short() {
		t.Skip("short")
	}
	before := device.GlobalStats().Live
	for i := 0; i < 50; i++ {
		d, err := device.Open(opt)
		require.NoError(t, err)
		if i%10 == 0 {
			b, err := d.NewBuffer(256)
			require.NoError(t, err)
			require.NoError(t, device.Upload(context.Background(), b, 0, []uint32{1, 2, 3}))
			axpb(t, d)
			// Buffer and pipeline deliberately left open: Close frees them.
		}
		require.NoError(t, d.Close())
		require.Zero(t, d.Stats().Live.Total(), "iteration %d: %+v", i, d.Stats().Live)
		devicetest.CheckValidation(t, d)
	}
	assert.Equal(t, before, device.GlobalStats().Live)

	d, err := device.Open(opt)
	require.NoError(t, err)
	p := axpb(t, d)
	x, err := d.NewBuffer(4 * 64)
	require.NoError(t, err)
	ctx := ctxT(t)
	require.NoError(t, device.Upload(ctx, x, 0, make([]float32, 64)))
	start := time.Now()
	const subs = 1000
	for i := 0; i < subs; i++ {
		r := d.Record()
		require.NoError(t, r.Dispatch(p, push(uint32(64), float32(1), float32(1)), [3]uint32{1, 1, 1}, x))
		r.Timestamp("t")
		_, err := d.Submit(ctx, r)
		require.NoError(t, err)
	}
	per := time.Since(start) / subs
	got := make([]float32, 64)
	require.NoError(t, device.Download(ctx, x, 0, got))
	assert.Equal(t, float32(subs), got[63])
	st := d.Stats()
	t.Logf("%d submissions: %v each; live %+v", subs, per, st.Live)
	assert.LessOrEqual(t, st.Live.CommandPools, int64(16), "frames are pooled")
	assert.Less(t, st.Created.CommandPools, int64(20), "frames are reused")
	require.NoError(t, p.Close())
	require.NoError(t, x.Close())
	require.NoError(t, d.Close())
	assert.Zero(t, d.Stats().Live.Total(), "%+v", d.Stats().Live)
	devicetest.CheckValidation(t, d)
	assert.Equal(t, before, device.GlobalStats().Live)
}

func TestConcurrent(t *testing.T) {
	d := devicetest.Open(t)
	const workers = 16
	const n = 2048
	p := vadd(t, d, 64, 2)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs <- func() error {
				a, err := d.NewBuffer(4 * n)
				if err != nil {
					return err
				}
				defer a.Close()
				c, err := d.NewBuffer(4 * n)
				if err != nil {
					return err
				}
				defer c.Close()
				av := make([]float32, n)
				out := make([]float32, n)
				for it := 0; it < 10; it++ {
					for i := range av {
						av[i] = float32(w*1000 + it*10 + i%7)
					}
					if err := device.Upload(ctx, a, 0, av); err != nil {
						return err
					}
					r := d.Record()
					r.Timestamp("a")
					if err := r.Dispatch(p, push(uint32(n), float32(w)), groups(n, 64), a, a, c); err != nil {
						return err
					}
					r.Timestamp("b")
					if _, err := d.Submit(ctx, r); err != nil {
						return err
					}
					if err := device.Download(ctx, c, 0, out); err != nil {
						return err
					}
					for i := range out {
						if want := 3*av[i] + float32(w); out[i] != want {
							return fmt.Errorf("worker %d iteration %d: c[%d]=%v want %v", w, it, i, out[i], want)
						}
					}
				}
				return nil
			}()
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestStatsDuringUse(t *testing.T) {
	d := devicetest.Open(t)
	st := d.Stats()
	assert.EqualValues(t, 1, st.Live.Instances)
	assert.EqualValues(t, 1, st.Live.Devices)
	assert.EqualValues(t, 1, st.Live.PipelineCaches)
	b := newBuf(t, d, 64)
	assert.EqualValues(t, 1, d.Stats().Live.Buffers)
	require.NoError(t, b.Close())
	assert.EqualValues(t, 0, d.Stats().Live.Buffers)
}

// TestBFloat16Features: Open enables VK_KHR_shader_bfloat16's features
// wherever the device supports them (the opened device's Info reports what
// was enabled; it must equal what enumeration reported), and a bf16
// cooperative-matrix shape is only usable with shaderBFloat16CooperativeMatrix.
// On the H200 all three flags are true; on lavapipe all false.
func TestBFloat16Features(t *testing.T) {
	devicetest.Skip(t)
	d, err := device.Open(devicetest.Options(t))
	require.NoError(t, err)
	defer d.Close()
	inf := d.Info()
	infos, err := device.Devices("")
	require.NoError(t, err)
	enum := infos[inf.Index]
	t.Logf("%s: shaderBFloat16Type %v, DotProduct %v, CooperativeMatrix %v", inf.Name, inf.BFloat16, inf.BFloat16DotProduct, inf.BFloat16CoopMat)
	assert.Equal(t, enum.BFloat16, inf.BFloat16, "shaderBFloat16Type supported but not enabled")
	assert.Equal(t, enum.BFloat16DotProduct, inf.BFloat16DotProduct)
	assert.Equal(t, enum.BFloat16CoopMat, inf.BFloat16CoopMat, "shaderBFloat16CooperativeMatrix supported but not enabled")
	if inf.BFloat16CoopMat {
		assert.NotEmpty(t, inf.CoopMat, "bf16 cooperative matrices without VK_KHR_cooperative_matrix")
	}
	for _, s := range inf.CoopMat {
		if s.A == "bf16" || s.B == "bf16" {
			t.Logf("  bf16 coopmat %s", s)
		}
	}
}

func TestUpdate(t *testing.T) {
	d := devicetest.Open(t)
	ctx := ctxT(t)
	b, err := d.NewBuffer(1 << 17)
	require.NoError(t, err)
	data := make([]byte, device.MaxUpdateBytes)
	for i := range data {
		data[i] = byte(i * 7)
	}
	r := d.Record()
	r.Fill(b, 0xDEADBEEF)
	r.BarrierAll()
	r.Update(b, 8, data)
	r.Update(b, 8+int64(len(data)), []byte{1, 2, 3, 4})
	assert.Equal(t, "update", r.Commands()[2].Kind)
	_, err = d.Submit(ctx, r)
	require.NoError(t, err)
	got := make([]byte, len(data)+16)
	require.NoError(t, b.DownloadBytes(ctx, 0, got))
	assert.Equal(t, []byte{0xEF, 0xBE, 0xAD, 0xDE}, got[:4])
	assert.Equal(t, data, got[8:8+len(data)])
	assert.Equal(t, []byte{1, 2, 3, 4, 0xEF, 0xBE, 0xAD, 0xDE}, got[8+len(data):16+len(data)])

	for _, bad := range []struct {
		off int64
		n   int
	}{{2, 4}, {0, 6}, {0, 0}, {0, device.MaxUpdateBytes + 4}, {1<<17 - 4, 8}} {
		r = d.Record()
		r.Update(b, bad.off, make([]byte, bad.n))
		assert.ErrorIs(t, r.Err(), device.ErrInvalid, "update of %d bytes at %d", bad.n, bad.off)
	}
}
