//go:build cgo

package device_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
)

// TestDispatchBase runs a grid in parts with DispatchBase and gets the
// results of one Dispatch.
func TestDispatchBase(t *testing.T) {
	d := devicetest.Open(t)
	if !d.Info().DispatchBase {
		t.Skipf("%s: no vkCmdDispatchBase", d.Info().Name)
	}
	ctx := ctxT(t)
	const wg, groups = 32, 10
	const n = wg * groups
	p := vadd(t, d, wg, 2)
	a, b := newBuf(t, d, 4*n), newBuf(t, d, 4*n)
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	require.NoError(t, device.Upload(ctx, a, 0, x))
	require.NoError(t, device.Upload(ctx, b, 0, x))
	whole, parts := newBuf(t, d, 4*n), newBuf(t, d, 4*n)
	r := d.Record()
	require.NoError(t, r.Dispatch(p, push(uint32(n), float32(1)), [3]uint32{groups, 1, 1}, a, b, whole))
	_, err := d.Submit(ctx, r)
	require.NoError(t, err)
	// Two submissions of parts of the grid: groups 0…3, then 4…9.
	for _, c := range [][2]uint32{{0, 4}, {4, 6}} {
		r := d.Record()
		require.NoError(t, r.DispatchBase(p, push(uint32(n), float32(1)), [3]uint32{c[0], 0, 0}, [3]uint32{c[1], 1, 1}, a, b, parts))
		cmd := r.Commands()[0]
		assert.Equal(t, [3]uint32{c[0], 0, 0}, cmd.Base)
		assert.Equal(t, [3]uint32{c[1], 1, 1}, cmd.Groups)
		_, err := d.Submit(ctx, r)
		require.NoError(t, err)
	}
	w, g := make([]float32, n), make([]float32, n)
	require.NoError(t, device.Download(ctx, whole, 0, w))
	require.NoError(t, device.Download(ctx, parts, 0, g))
	assert.Equal(t, w, g)
	assert.Equal(t, float32(3*7+1), g[7])

	max := d.Info().MaxWorkgroupCount[1]
	err = d.Record().DispatchBase(p, push(uint32(n), float32(1)), [3]uint32{0, max, 0}, [3]uint32{1, 1, 1}, a, b, parts)
	assert.ErrorIs(t, err, device.ErrTooLarge)
}

// TestSubmitDrain: when the context ends during a submission,
// SubmitDrain waits for the work (the error then wraps the context's
// error but not ErrTimeout), or abandons it like Submit once drain has
// passed.
func TestSubmitDrain(t *testing.T) {
	d := devicetest.Open(t)
	p, err := d.NewPipeline(device.PipelineDesc{Name: "spin", SPIRV: devicetest.SPIRV(t, "spin"), PushSize: 4, Bindings: 1})
	require.NoError(t, err)
	out := newBuf(t, d, 4*64*64)
	// Calibrate a submission of at least 200 ms.
	iters := uint32(1 << 12)
	var took time.Duration
	for {
		r := d.Record()
		require.NoError(t, r.Dispatch(p, push(iters), [3]uint32{64, 1, 1}, out))
		start := time.Now()
		_, err := d.Submit(ctxT(t), r)
		require.NoError(t, err)
		if took = time.Since(start); took > 200*time.Millisecond || iters >= 1<<30 {
			break
		}
		iters *= 4
	}
	r := d.Record()
	require.NoError(t, r.Dispatch(p, push(iters), [3]uint32{64, 1, 1}, out))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = d.SubmitDrain(ctx, r, 30*time.Second)
	elapsed := time.Since(start)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, device.ErrTimeout, "the drained work completed")
	t.Logf("drained after %v (the submission alone: %v): %v", elapsed, took, err)
	assert.Greater(t, elapsed, took/4, "SubmitDrain returned before the work could have finished")

	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	_, err = d.SubmitDrain(ctx2, r, time.Millisecond)
	assert.ErrorIs(t, err, device.ErrTimeout, "drain too short: abandoned like Submit")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, d.Fill(ctxT(t), out, 1)) // the device stays usable

	// Cancelled before submission: nothing runs, no ErrTimeout.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	_, err = d.SubmitDrain(cctx, r, time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, device.ErrTimeout)
}
