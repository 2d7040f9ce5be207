//go:build cgo

package attention_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/internal/device"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envInt reads a test size from the environment (for longer soak runs).
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// heapAfterGC is the live heap after a full collection.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestResourcesVulkan opens and closes the Vulkan engine many times
// (FLASHVK_SOAK_OPENS, default 1000) and makes many calls on one engine
// (FLASHVK_SOAK_CALLS, default 10000): no Vulkan object may outlive its
// engine (the runtime counts every creation and destruction) and the Go
// heap may not grow with the number of calls.
func TestResourcesVulkan(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test: skipped with -short")
	}
	e0 := openVulkan(t, "") // skips (or fails when required) without a device
	require.NoError(t, e0.Close())
	opens, calls := envInt("FLASHVK_SOAK_OPENS", 1000), envInt("FLASHVK_SOAK_CALLS", 10000)
	before := device.GlobalStats().Live
	c := goodCall()
	ctx := context.Background()
	for i := range opens {
		e, err := attention.Open(attention.Config{Backend: attention.Vulkan})
		require.NoError(t, err, "open %d", i)
		if i%100 == 0 {
			require.NoError(t, e.ForwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.opt))
		}
		require.NoError(t, e.Close())
		require.NoError(t, e.Close(), "second Close")
	}
	assert.Equal(t, before, device.GlobalStats().Live, "Vulkan objects alive after %d open/close cycles", opens)

	e, err := attention.Open(attention.Config{Backend: attention.Vulkan})
	require.NoError(t, err)
	warm := 200
	for range warm {
		require.NoError(t, e.ForwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.opt))
	}
	heap0 := heapAfterGC()
	for i := range calls {
		if i%2 == 0 {
			require.NoError(t, e.ForwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.opt))
		} else {
			require.NoError(t, e.BackwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.do, c.dq, c.dk, c.dv, c.opt))
		}
	}
	heap1 := heapAfterGC()
	t.Logf("heap after %d calls: %d → %d bytes; live objects %+v", calls, heap0, heap1, device.GlobalStats().Live)
	// A leak of even 100 bytes a call would add 1 MB.
	assert.Less(t, int64(heap1)-int64(heap0), int64(1<<20), "Go heap grew by %d bytes over %d calls", int64(heap1)-int64(heap0), calls)
	require.NoError(t, e.Close())
	assert.Equal(t, before, device.GlobalStats().Live, "Vulkan objects alive after the call loop")
}
