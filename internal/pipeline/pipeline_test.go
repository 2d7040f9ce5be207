//go:build cgo

package pipeline_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/flashvk/flashvk/internal/pipeline"
)

func TestGroups(t *testing.T) {
	for _, c := range []struct {
		n, per int
		want   uint32
	}{{0, 64, 0}, {1, 64, 1}, {64, 64, 1}, {65, 64, 2}, {1000, 1, 1000}, {1 << 40, 1 << 20, 1 << 20}} {
		assert.Equal(t, c.want, pipeline.Groups(c.n, c.per), "Groups(%d, %d)", c.n, c.per)
	}
	assert.Panics(t, func() { pipeline.Groups(10, 0) })
	assert.Panics(t, func() { pipeline.Groups(-1, 4) })
	assert.Panics(t, func() { pipeline.Groups(1<<40, 1) })
}

func TestCheckGroupsAndGrid(t *testing.T) {
	info := device.Info{Name: "fake", MaxWorkgroupCount: [3]uint32{65535, 65535, 65535}}
	require.NoError(t, pipeline.CheckGroups(info, [3]uint32{65535, 1, 1}))
	err := pipeline.CheckGroups(info, [3]uint32{65536, 1, 1})
	require.ErrorIs(t, err, device.ErrTooLarge)
	assert.Contains(t, err.Error(), "65536 workgroups in x exceed the device limit 65535")
	err = pipeline.CheckGroups(info, [3]uint32{1, 1, 70000})
	assert.Contains(t, err.Error(), "in z")

	g, err := pipeline.Grid(info, 1000, 64)
	require.NoError(t, err)
	assert.Equal(t, [3]uint32{16, 1, 1}, g)
	for _, n := range []int{65535 * 64, 65535*64 + 1, 100_000_000, 1 << 31} {
		g, err := pipeline.Grid(info, n, 64)
		require.NoError(t, err, n)
		need := uint64(pipeline.Groups(n, 64))
		have := uint64(g[0]) * uint64(g[1])
		assert.GreaterOrEqual(t, have, need, "n=%d grid %v covers all groups", n, g)
		assert.Less(t, have-need, uint64(g[1]), "n=%d grid %v wastes less than a column", n, g)
		assert.LessOrEqual(t, g[0], uint32(65535))
	}
	_, err = pipeline.Grid(info, 1<<62, 1)
	assert.ErrorIs(t, err, device.ErrTooLarge)
	_, err = pipeline.Grid(info, 10, 0)
	assert.ErrorIs(t, err, device.ErrInvalid)
}

func TestSpecHelpers(t *testing.T) {
	assert.Equal(t, device.Spec{ID: 3, Value: 7}, pipeline.SpecU32(3, 7))
	assert.Equal(t, device.Spec{ID: 1, Value: 0xFFFFFFFF}, pipeline.SpecI32(1, -1))
	assert.Equal(t, device.Spec{ID: 2, Value: 0x3F800000}, pipeline.SpecF32(2, 1))
	assert.Equal(t, device.Spec{ID: 4, Value: 1}, pipeline.SpecBool(4, true))
	assert.Equal(t, device.Spec{ID: 4, Value: 0}, pipeline.SpecBool(4, false))
}

func TestPush(t *testing.T) {
	type P struct {
		N     uint32
		Scale float32
		Off   int32
		_     uint32
		Big   uint64
	}
	b, err := pipeline.Push(P{N: 1, Scale: 2, Off: -1, Big: 1 << 40})
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 0, 0, 0, 0, 0, 0, 0x40, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, b)
	b2, err := pipeline.Push(&P{N: 1, Scale: 2, Off: -1, Big: 1 << 40})
	require.NoError(t, err)
	assert.Equal(t, b, b2)

	_, err = pipeline.Push(struct{ A, B, C uint16 }{})
	assert.ErrorIs(t, err, device.ErrInvalid, "6 bytes")
	_, err = pipeline.Push(struct {
		A uint32
		B uint64
	}{})
	assert.ErrorIs(t, err, device.ErrInvalid, "misaligned uint64")
	_, err = pipeline.Push(struct{ A bool }{})
	assert.ErrorIs(t, err, device.ErrInvalid, "bool")
	_, err = pipeline.Push(struct{ A [33]uint32 }{})
	assert.ErrorIs(t, err, device.ErrTooLarge, "over 128 bytes")
	_, err = pipeline.Push(nil)
	assert.ErrorIs(t, err, device.ErrInvalid)
	b, err = pipeline.Push([]float32{1, 2})
	require.NoError(t, err)
	assert.Len(t, b, 8)
	assert.Panics(t, func() { pipeline.MustPush(struct{ A uint16 }{}) })
}

func TestCacheGet(t *testing.T) {
	d := devicetest.Open(t)
	dir := t.TempDir()
	c, err := pipeline.New(d, pipeline.Options{CacheDir: dir})
	require.NoError(t, err)
	defer c.Close()
	spv := devicetest.SPIRV(t, "vadd")
	key := pipeline.Key{Name: "vadd", SPIRV: spv, Spec: []device.Spec{pipeline.SpecU32(0, 64), pipeline.SpecF32(1, 2)}, PushSize: 8, Bindings: 3}

	p1, err := c.Get(key)
	require.NoError(t, err)
	p2, err := c.Get(key)
	require.NoError(t, err)
	assert.Same(t, p1, p2)

	// Same code in another slice: same pipeline.
	key2 := key
	key2.SPIRV = append([]byte(nil), spv...)
	key2.Name = "other label"
	p3, err := c.Get(key2)
	require.NoError(t, err)
	assert.Same(t, p1, p3)

	// A different spec constant is a different pipeline.
	key3 := key
	key3.Spec = []device.Spec{pipeline.SpecU32(0, 64), pipeline.SpecF32(1, 3)}
	p4, err := c.Get(key3)
	require.NoError(t, err)
	assert.NotSame(t, p1, p4)

	st := c.Stats()
	assert.Equal(t, 2, st.Pipelines)
	assert.EqualValues(t, 2, st.Misses)
	assert.EqualValues(t, 2, st.Hits)

	// Use it: c = a + 2b + bias.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 1000
	bufs := make([]*device.Buffer, 3)
	for i := range bufs {
		bufs[i], err = d.NewBuffer(4 * n)
		require.NoError(t, err)
	}
	av := make([]float32, n)
	for i := range av {
		av[i] = float32(i)
	}
	require.NoError(t, device.Upload(ctx, bufs[0], 0, av))
	require.NoError(t, device.Upload(ctx, bufs[1], 0, av))
	push, err := c.Push(struct {
		N    uint32
		Bias float32
	}{n, 0.25})
	require.NoError(t, err)
	g, err := pipeline.Grid(d.Info(), n, 64)
	require.NoError(t, err)
	r := d.Record()
	require.NoError(t, r.Dispatch(p1, push, g, bufs...))
	_, err = d.Submit(ctx, r)
	require.NoError(t, err)
	out := make([]float32, n)
	require.NoError(t, device.Download(ctx, bufs[2], 0, out))
	for i := range out {
		require.Equal(t, 3*float32(i)+0.25, out[i])
	}

	// Errors are reported and not cached forever.
	_, err = c.Get(pipeline.Key{Name: "bad", SPIRV: []byte{1, 2, 3, 4}})
	assert.ErrorIs(t, err, device.ErrInvalid)
	_, err = c.Get(pipeline.Key{Name: "empty"})
	assert.ErrorIs(t, err, device.ErrInvalid)

	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	_, err = c.Get(key)
	assert.ErrorIs(t, err, device.ErrClosed)
	assert.EqualValues(t, 0, d.Stats().Live.Pipelines, "Close destroyed the pipelines")
}

func TestCacheConcurrentSingleflight(t *testing.T) {
	d := devicetest.Open(t)
	c, err := pipeline.New(d, pipeline.Options{NoDiskCache: true})
	require.NoError(t, err)
	defer c.Close()
	spv := devicetest.SPIRV(t, "vadd")
	const workers = 16
	var wg sync.WaitGroup
	got := make([]*device.Pipeline, workers*4)
	for w := 0; w < workers*4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			p, err := c.Get(pipeline.Key{SPIRV: spv, Spec: []device.Spec{pipeline.SpecU32(0, uint32(32<<(w%4)))}, PushSize: 8, Bindings: 3})
			assert.NoError(t, err)
			got[w] = p
		}(w)
	}
	wg.Wait()
	st := c.Stats()
	assert.EqualValues(t, 4, st.Misses, "each distinct key built once")
	assert.Equal(t, 4, st.Pipelines)
	assert.EqualValues(t, 4, d.Stats().Created.Pipelines)
	for w := range got {
		assert.Same(t, got[w%4], got[w])
	}
}

func TestCachePersistence(t *testing.T) {
	devicetest.Skip(t)
	dir := t.TempDir()
	spv := devicetest.SPIRV(t, "vadd")
	key := pipeline.Key{SPIRV: spv, Spec: []device.Spec{pipeline.SpecU32(0, 64)}, PushSize: 8, Bindings: 3}

	// use opens a cache over dir on d, gets key from it and closes it; it
	// returns the cache and the bytes it loaded when opened.
	use := func(d *device.Device) (*pipeline.Cache, int) {
		c, err := pipeline.New(d, pipeline.Options{CacheDir: dir})
		require.NoError(t, err)
		loaded := c.Stats().LoadedBytes
		_, err = c.Get(key)
		require.NoError(t, err)
		require.NoError(t, c.Close())
		return c, loaded
	}

	c1, loaded := use(devicetest.Open(t))
	assert.Zero(t, loaded)
	file := c1.File()
	require.FileExists(t, file)
	assert.Equal(t, dir, filepath.Dir(file))
	fi, err := os.Stat(file)
	require.NoError(t, err)
	t.Logf("saved %s (%d bytes)", filepath.Base(file), fi.Size())

	_, loaded = use(devicetest.Open(t))
	assert.Positive(t, loaded, "blob reloaded")

	// A corrupt file is ignored…
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	data[len(data)-1] ^= 0xFF
	require.NoError(t, os.WriteFile(file, data, 0o644))
	d3 := devicetest.Open(t)
	_, loaded = use(d3)
	assert.Zero(t, loaded, "corrupt blob ignored")
	// …and rewritten.
	_, loaded = use(d3)
	assert.Positive(t, loaded)

	// Closing after the device is closed does not fail.
	d5 := devicetest.Open(t)
	c5, err := pipeline.New(d5, pipeline.Options{CacheDir: dir})
	require.NoError(t, err)
	require.NoError(t, d5.Close())
	assert.NoError(t, c5.Close())
}

func TestSpecFloatBits(t *testing.T) {
	assert.Equal(t, math.Float32bits(-0.5), pipeline.SpecF32(0, -0.5).Value)
}
