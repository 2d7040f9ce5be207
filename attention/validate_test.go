package attention_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"
)

// call is one set of arguments to ForwardInto/BackwardInto.
type call struct {
	q, k, v, o, do, dq, dk, dv attention.Tensor
	lse                        []float32
	opt                        attention.Options
}

func f32(s attention.Shape) attention.Tensor {
	return attention.FromFloat32(make([]float32, s.Len()), s, attention.BSHD)
}

// goodCall is a valid GQA problem; each bad case breaks one thing.
func goodCall() call {
	qs := attention.Shape{B: 2, S: 5, H: 4, D: 8}
	ks := attention.Shape{B: 2, S: 7, H: 2, D: 8}
	vs := attention.Shape{B: 2, S: 7, H: 2, D: 6}
	os := attention.Shape{B: 2, S: 5, H: 4, D: 6}
	return call{
		q: f32(qs), k: f32(ks), v: f32(vs), o: f32(os), do: f32(os),
		dq: f32(qs), dk: f32(ks), dv: f32(vs), lse: make([]float32, 2*4*5),
	}
}

// BadCases is the table of invalid calls: what is broken, the sentinel and
// the argument name the error must carry.
func badCases() []struct {
	name   string
	mut    func(*call)
	want   error
	naming string
} {
	type c = call
	return []struct {
		name   string
		mut    func(*call)
		want   error
		naming string
	}{
		{"nil q data", func(c *c) { c.q.Data = nil }, attention.ErrLength, "q:"},
		{"q wrong type", func(c *c) { c.q.Data = []float64{1} }, attention.ErrDType, "q:"},
		{"k mixed dtype", func(c *c) { c.k.Data = make([]float16.Float16, c.k.Shape.Len()) }, attention.ErrDType, "k:"},
		{"q batch 0", func(c *c) { c.q.Shape.B = 0 }, attention.ErrShape, "q:"},
		{"q N 0", func(c *c) { c.q.Shape.S = 0 }, attention.ErrShape, "q:"},
		{"k N 0", func(c *c) { c.k.Shape.S = 0 }, attention.ErrShape, "k:"},
		{"d 0", func(c *c) { c.q.Shape.D = 0 }, attention.ErrShape, "q:"},
		{"d 300", func(c *c) {
			c.q = f32(attention.Shape{B: 2, S: 5, H: 4, D: 300})
			c.k = f32(attention.Shape{B: 2, S: 7, H: 2, D: 300})
		}, attention.ErrShape, "q:"},
		{"dv 257", func(c *c) { c.v = f32(attention.Shape{B: 2, S: 7, H: 2, D: 257}) }, attention.ErrShape, "v:"},
		{"negative heads", func(c *c) { c.k.Shape.H = -2 }, attention.ErrShape, "k:"},
		{"k batch mismatch", func(c *c) { c.k = f32(attention.Shape{B: 3, S: 7, H: 2, D: 8}) }, attention.ErrShape, "k:"},
		{"v batch mismatch", func(c *c) { c.v = f32(attention.Shape{B: 1, S: 7, H: 2, D: 6}) }, attention.ErrShape, "v:"},
		{"k head dim mismatch", func(c *c) { c.k = f32(attention.Shape{B: 2, S: 7, H: 2, D: 4}) }, attention.ErrShape, "k:"},
		{"v length mismatch", func(c *c) { c.v = f32(attention.Shape{B: 2, S: 6, H: 2, D: 6}) }, attention.ErrShape, "v:"},
		{"v heads mismatch", func(c *c) { c.v = f32(attention.Shape{B: 2, S: 7, H: 1, D: 6}) }, attention.ErrShape, "v:"},
		{"Hq % Hkv", func(c *c) {
			c.k = f32(attention.Shape{B: 2, S: 7, H: 3, D: 8})
			c.v = f32(attention.Shape{B: 2, S: 7, H: 3, D: 6})
		}, attention.ErrShape, "k:"},
		{"q slice short", func(c *c) { c.q.Data = c.q.Data.([]float32)[:10] }, attention.ErrLength, "q:"},
		{"v slice short", func(c *c) { c.v.Data = c.v.Data.([]float32)[:1] }, attention.ErrLength, "v:"},
		{"negative stride", func(c *c) { c.q.Strides.Seq = -1 }, attention.ErrStride, "q:"},
		{"stride past end", func(c *c) { c.k.Strides.Batch *= 2 }, attention.ErrLength, "k:"},
		{"huge stride overflows", func(c *c) { c.q.Strides.Batch = math.MaxInt64 / 2 }, attention.ErrShape, "q:"},
		{"o overlapping rows", func(c *c) { c.o.Strides.Head = 1 }, attention.ErrStride, "o:"},
		{"o wrong shape", func(c *c) { c.o = f32(attention.Shape{B: 2, S: 5, H: 4, D: 8}) }, attention.ErrShape, "o:"},
		{"o wrong dtype", func(c *c) { c.o.Data = make([]float16.Float16, c.o.Shape.Len()) }, attention.ErrDType, "o:"},
		{"lse short", func(c *c) { c.lse = c.lse[:3] }, attention.ErrLength, "lse:"},
		{"NaN scale", func(c *c) { c.opt.Scale = float32(math.NaN()) }, attention.ErrOption, "scale"},
		{"Inf scale", func(c *c) { c.opt.Scale = float32(math.Inf(1)) }, attention.ErrOption, "scale"},
		{"bad alignment", func(c *c) { c.opt.Causal, c.opt.Align = true, 9 }, attention.ErrOption, "align"},
		// Align places windows and ALiBi too: refused without Causal.
		{"bad alignment, no causal", func(c *c) { c.opt.Align = 9 }, attention.ErrOption, "align"},
		{"bad alignment, window", func(c *c) { c.opt.Align, c.opt.Window = 9, &attention.Window{Left: 1, Right: 1} }, attention.ErrOption, "align"},
		{"dropout P 1", func(c *c) { c.opt.Dropout = &attention.Dropout{P: 1} }, attention.ErrOption, "options: dropout P 1: want 0 ≤ P < 1"},
		{"dropout P NaN", func(c *c) { c.opt.Dropout = &attention.Dropout{P: float32(math.NaN())} }, attention.ErrOption, "options: dropout P NaN"},
		{"dropout P negative", func(c *c) { c.opt.Dropout = &attention.Dropout{P: -0.25} }, attention.ErrOption, "options: dropout P -0.25"},
		{"dropout P rounds to 0", func(c *c) { c.opt.Dropout = &attention.Dropout{P: 0.001} }, attention.ErrOption, "options: dropout P 0.001 rounds to 0 at the resolution of 1/256"},
		{"dropout P rounds to 1", func(c *c) { c.opt.Dropout = &attention.Dropout{P: 0.999} }, attention.ErrOption, "options: dropout P 0.999 rounds to 1 at the resolution of 1/256"},
		{"do wrong shape", func(c *c) { c.do = f32(attention.Shape{B: 2, S: 4, H: 4, D: 6}) }, attention.ErrShape, "do:"},
		{"dq wrong shape", func(c *c) { c.dq = f32(attention.Shape{B: 2, S: 5, H: 2, D: 8}) }, attention.ErrShape, "dq:"},
		{"dk overlapping", func(c *c) { c.dk.Strides.Seq = 0 }, attention.ErrStride, "dk:"},
		{"dv short", func(c *c) { c.dv.Data = c.dv.Data.([]float32)[:5] }, attention.ErrLength, "dv:"},
		// Outputs sharing memory with another operand.
		{"o is q", func(c *c) { c.o.Data = c.q.Data }, attention.ErrStride, "o: shares memory with q"},
		{"lse inside o", func(c *c) { c.lse = c.o.Data.([]float32)[200:240] }, attention.ErrStride, "o: shares memory with lse"},
		{"o overlaps v by one element", func(c *c) {
			buf := make([]float32, 240+168-1)
			c.o.Data, c.v.Data = buf, buf[239:]
		}, attention.ErrStride, "o: shares memory with v"},
		{"dk is do", func(c *c) { c.dk.Data = c.do.Data }, attention.ErrStride, "dk: shares memory with do"},
		{"dq dk dv one slice", func(c *c) {
			buf := make([]float32, 320)
			c.dq.Data, c.dk.Data, c.dv.Data = buf, buf, buf
		}, attention.ErrStride, "dq: shares memory with dk"},
		{"dv inside q", func(c *c) { c.dv.Data = c.q.Data.([]float32)[100:] }, attention.ErrStride, "dv: shares memory with q"},
	}
}

// TestPackedGradients: dQ, dK and dV as interleaved views of one
// [B, N, 3, H, D] buffer share no element and are accepted, with the
// results of separate buffers; shifted by one element they overlap and are
// refused.
func TestPackedGradients(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	require.NoError(t, err)
	defer e.Close()
	ctx := context.Background()
	s := attention.Shape{B: 2, S: 6, H: 3, D: 4}
	in := func(seed float32) attention.Tensor {
		t := f32(s)
		for i := range t.Data.([]float32) {
			t.Data.([]float32)[i] = float32(math.Sin(float64(seed) * float64(i+1)))
		}
		return t
	}
	q, k, v, do := in(1), in(2), in(3), in(4)
	out, err := e.Forward(ctx, q, k, v, attention.Options{Causal: true})
	require.NoError(t, err)
	want, err := e.Backward(ctx, q, k, v, out.O, out.LSE, do, attention.Options{Causal: true})
	require.NoError(t, err)

	buf := make([]float32, s.B*s.S*3*s.H*s.D+1)
	st := attention.Strides{Batch: s.S * 3 * s.H * s.D, Seq: 3 * s.H * s.D, Head: s.D}
	view := func(off int) attention.Tensor { return attention.Tensor{Shape: s, Strides: st, Data: buf[off:]} }
	dq, dk, dv := view(0), view(s.H*s.D), view(2*s.H*s.D)
	require.NoError(t, e.BackwardInto(ctx, q, k, v, out.O, out.LSE, do, dq, dk, dv, attention.Options{Causal: true}))
	for i, g := range []struct{ got, want attention.Tensor }{{dq, want.DQ}, {dk, want.DK}, {dv, want.DV}} {
		assert.Equal(t, g.want.Float32s(), g.got.Float32s(), "gradient %d", i)
	}
	err = e.BackwardInto(ctx, q, k, v, out.O, out.LSE, do, dq, view(s.H*s.D-1), dv, attention.Options{Causal: true})
	assert.ErrorIs(t, err, attention.ErrStride)
	assert.ErrorContains(t, err, "dq: shares memory with dk")
}

func TestBadInput(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	require.NoError(t, err)
	defer e.Close()
	ctx := context.Background()
	for _, tc := range badCases() {
		t.Run(tc.name, func(t *testing.T) {
			c := goodCall()
			tc.mut(&c)
			var err error
			assert.NotPanics(t, func() {
				if strings.HasPrefix(tc.naming, "d") {
					err = e.BackwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.do, c.dq, c.dk, c.dv, c.opt)
				} else {
					err = e.ForwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.opt)
				}
			})
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.naming)
			if strings.Contains(tc.naming, "shares memory") {
				return // O and LSE are inputs of the backward: they may share memory
			}
			// Backward validates the same primal arguments.
			err = e.BackwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.do, c.dq, c.dk, c.dv, c.opt)
			assert.ErrorIs(t, err, tc.want)
		})
	}
	// The engine still works after all of that.
	c := goodCall()
	require.NoError(t, e.ForwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.opt))
	require.NoError(t, e.BackwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.do, c.dq, c.dk, c.dv, c.opt))
}

// TestShapesWithoutData: the calls that take shapes alone (Flops, Plan,
// PlanKVCache, NewTensor, KeepMask, NewDeviceTensor) and operands whose
// strides broadcast a huge logical shape refuse what the data-carrying
// calls refuse — a dimension below 1, an element count past any memory
// (that would overflow int or wrap to 0), a head dim past MaxHeadDim —
// with ErrShape, never a panic.
func TestShapesWithoutData(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	require.NoError(t, err)
	defer e.Close()
	ctx := context.Background()
	one := attention.Shape{B: 1, S: 1, H: 1, D: 1}
	huge := attention.Shape{B: 1 << 31, S: 1 << 31, H: 3, D: 1}
	wraps := attention.Shape{B: 1 << 32, S: 1 << 32, H: 1, D: 1} // B·S·H·D wraps to 0 in int64
	wide := attention.Shape{B: 1, S: 1, H: 1, D: 1000}
	for name, f := range map[string]func() error{
		"Flops, no kv head": func() error {
			_, err := attention.Flops(one, attention.Shape{B: 1, S: 1, H: 0, D: 1}, one, attention.Options{})
			return err
		},
		"Flops, negative": func() error {
			n := attention.Shape{B: -1, S: -5, H: 1, D: 1}
			_, err := attention.Flops(n, n, n, attention.Options{})
			return err
		},
		"Flops, huge": func() error { _, err := attention.Flops(huge, huge, huge, attention.Options{}); return err },
		"Plan, head dim": func() error {
			_, err := e.Plan(ctx, wide, wide, one, attention.BSHD, attention.Float32, attention.Options{}, false)
			return err
		},
		"PlanKVCache, head dim": func() error {
			c := &attention.KVCache{K: attention.Tensor{Shape: wide}, V: attention.Tensor{Shape: one}, SeqLens: []int32{1}}
			_, err := e.PlanKVCache(ctx, wide, c, 0, attention.BSHD, attention.Float32, attention.Options{})
			return err
		},
		"NewTensor, huge":  func() error { _, err := attention.NewTensor(attention.Float32, huge, attention.BSHD); return err },
		"NewTensor, wraps": func() error { _, err := attention.NewTensor(attention.Float32, wraps, attention.BSHD); return err },
		"KeepMask, huge":   func() error { _, err := attention.KeepMask(nil, huge, attention.BSHD, attention.Float32); return err },
		"NewDeviceTensor, huge": func() error {
			_, err := e.NewDeviceTensor(attention.Float32, huge, attention.BSHD)
			return err
		},
		"Forward, broadcast huge": func() error {
			x := attention.Tensor{Shape: huge, Strides: attention.Strides{Head: 1}, Data: make([]float32, 3)}
			_, err := e.Forward(ctx, x, x, x, attention.Options{})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			assert.NotPanics(t, func() { err = f() })
			assert.ErrorIs(t, err, attention.ErrShape)
		})
	}
}

// TestKVCacheAliasing: an append whose newK is a view of the cache's own
// K is refused (ErrStride) by BenchmarkKVCache as by ForwardKVCache.
func TestKVCacheAliasing(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	require.NoError(t, err)
	defer e.Close()
	ctx := context.Background()
	s := attention.Shape{B: 2, S: 8, H: 1, D: 4}
	buf := make([]float32, s.Len())
	row := attention.Shape{B: 2, S: 1, H: 1, D: 4}
	q := attention.FromFloat32(make([]float32, row.Len()), row, attention.BSHD)
	nk := attention.FromFloat32(buf[:row.Len()], row, attention.BSHD) // cache.K's first rows
	nv := attention.FromFloat32(make([]float32, row.Len()), row, attention.BSHD)
	cache := func() *attention.KVCache {
		return &attention.KVCache{K: attention.FromFloat32(buf, s, attention.BSHD),
			V: attention.FromFloat32(make([]float32, s.Len()), s, attention.BSHD), SeqLens: []int32{2, 3}}
	}
	_, err = e.ForwardKVCache(ctx, q, cache(), nk, nv, attention.Options{})
	assert.ErrorIs(t, err, attention.ErrStride)
	c := cache()
	_, err = e.BenchmarkKVCache(ctx, q, c, nk, nv, attention.Options{}, attention.BenchOptions{Warmup: 1, Iters: 1})
	assert.ErrorIs(t, err, attention.ErrStride)
	assert.Equal(t, []int32{2, 3}, c.SeqLens, "a refused call changed SeqLens")
}

func TestClosedEngine(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	require.NoError(t, err)
	require.NoError(t, e.Close())
	require.NoError(t, e.Close())
	c := goodCall()
	err = e.ForwardInto(context.Background(), c.q, c.k, c.v, c.o, c.lse, c.opt)
	assert.True(t, errors.Is(err, attention.ErrClosed), "%v", err)
}

func TestCancelledContext(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	require.NoError(t, err)
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := goodCall()
	err = e.ForwardInto(ctx, c.q, c.k, c.v, c.o, c.lse, c.opt)
	assert.ErrorIs(t, err, context.Canceled)
}

// TestUnknownLayout: a Layout that is neither BSHD nor BHSD is refused
// everywhere one is taken (the host calls took it as BSHD), and named as
// what it is.
func TestUnknownLayout(t *testing.T) {
	ctx := context.Background()
	e, _ := attention.Open(attention.Config{Backend: attention.CPU})
	defer e.Close()
	s := attention.Shape{B: 1, S: 4, H: 1, D: 8}
	bad := attention.Layout(7)
	_, errT := attention.NewTensor(attention.Float32, s, bad)
	_, errM := attention.KeepMask(make([]bool, s.Len()), s, bad, attention.Float32)
	_, errP := e.Plan(ctx, s, s, s, bad, attention.Float32, attention.Options{}, false)
	_, errD := e.NewDeviceTensor(attention.Float32, s, bad)
	for name, err := range map[string]error{"NewTensor": errT, "KeepMask": errM, "Plan": errP, "NewDeviceTensor": errD} {
		if !errors.Is(err, attention.ErrOption) || !strings.Contains(err.Error(), "Layout(7)") {
			t.Errorf("%s with Layout(7): %v, want ErrOption naming Layout(7)", name, err)
		}
	}
}

// The standard ALiBi slopes: 2^(−8(h+1)/Hq).
func TestALiBiSlopes(t *testing.T) {
	if got := attention.ALiBiSlopes(8); !slices.Equal(got, []float32{1. / 2, 1. / 4, 1. / 8, 1. / 16, 1. / 32, 1. / 64, 1. / 128, 1. / 256}) {
		t.Errorf("attention.ALiBiSlopes(8) = %v", got)
	}
	for _, hq := range []int{1, 3, 12} {
		s := attention.ALiBiSlopes(hq)
		for h, x := range s {
			if want := float32(math.Pow(2, -8*float64(h+1)/float64(hq))); x != want {
				t.Errorf("attention.ALiBiSlopes(%d)[%d] = %v, want %v", hq, h, x, want)
			}
		}
		if s[hq-1] != 1./256 {
			t.Errorf("attention.ALiBiSlopes(%d) ends at %v, want 2^−8", hq, s[hq-1])
		}
	}
}
