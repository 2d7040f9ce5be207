package attention_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/flashvk/flashvk/attention"
)

// FuzzValidate throws arbitrary shapes, strides, slice lengths and options
// at the CPU engine: every call must either succeed or return an error
// wrapping a sentinel, never panic. Small sizes keep each call cheap.
func FuzzValidate(f *testing.F) {
	f.Add(1, 4, 2, 1, 5, 8, 8, 0, 0, 0, 40, float32(0), true, uint8(1))
	f.Add(2, 3, 3, 3, 3, 16, 4, 1, 48, 16, 300, float32(0.5), false, uint8(0))
	f.Add(1, 0, 1, 1, 1, 1, 1, -1, 0, 0, 1, float32(math.NaN()), true, uint8(7))
	sentinels := []error{attention.ErrShape, attention.ErrStride, attention.ErrLength, attention.ErrDType, attention.ErrOption}
	e, err := attention.Open(attention.Config{Backend: attention.CPU, Workers: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	f.Fuzz(func(t *testing.T, b, hq, hkv, nq, nk, d, dv, sb, ss, sh, qlen int, scale float32, causal bool, align uint8) {
		clamp := func(x, lo, hi int) int { return min(max(x, lo), hi) }
		b, hq, hkv = clamp(b, -2, 3), clamp(hq, -2, 6), clamp(hkv, -2, 6)
		nq, nk, d, dv = clamp(nq, -2, 9), clamp(nk, -2, 9), clamp(d, -2, 300), clamp(dv, -2, 300)
		qlen = clamp(qlen, 0, 4096)
		q := attention.Tensor{Shape: attention.Shape{B: b, S: nq, H: hq, D: d},
			Strides: attention.Strides{Batch: sb, Seq: ss, Head: sh}, Data: make([]float32, qlen)}
		mk := func(s attention.Shape) attention.Tensor {
			n := max(s.B*s.S*s.H*s.D, 0)
			return attention.Tensor{Shape: s, Data: make([]float32, min(n, 1<<16))}
		}
		k := mk(attention.Shape{B: b, S: nk, H: hkv, D: d})
		v := mk(attention.Shape{B: b, S: nk, H: hkv, D: dv})
		opt := attention.Options{Scale: scale, Causal: causal, Align: attention.Alignment(align)}
		out, err := e.Forward(context.Background(), q, k, v, opt)
		if err != nil {
			for _, s := range sentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("error wraps no sentinel: %v", err)
		}
		for i, x := range out.LSE {
			if math.IsNaN(float64(x)) {
				t.Fatalf("lse[%d] is NaN", i)
			}
		}
	})
}

// fuzzEngine opens a one-worker CPU engine for f (closed at its end) and
// a [2, 7, 2, 4] float32 tensor of finite values (−2 … 2) for the
// fuzzers' Q, K and V.
func fuzzEngine(f *testing.F) (*attention.Engine, attention.Tensor) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU, Workers: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	q, _ := attention.NewTensor(attention.Float32, attention.Shape{B: 2, S: 7, H: 2, D: 4}, attention.BSHD)
	for i, d := 0, q.Data.([]float32); i < len(d); i++ {
		d[i] = float32(i%5) - 2
	}
	return e, q
}

// FuzzOptions throws arbitrary windows, softcaps, ALiBi slopes and key
// counts at the CPU engine on a valid problem: every call must either
// succeed — with no NaN in O or LSE (the inputs are finite) — or fail
// with ErrOption, never panic.
func FuzzOptions(f *testing.F) {
	f.Add(3, 0, true, uint8(1), float32(0), 2, float32(0.5), 2, int32(5), int32(0))
	f.Add(-1, 4, false, uint8(0), float32(30), 0, float32(0), 0, int32(0), int32(0))
	f.Add(-2, 1, true, uint8(1), float32(-1), 3, float32(math.NaN()), 1, int32(9), int32(-1))
	f.Add(1<<40, 1<<62, false, uint8(1), float32(math.Inf(1)), 4, float32(1), 2, int32(0), int32(7))
	e, q := fuzzEngine(f)
	f.Fuzz(func(t *testing.T, left, right int, causal bool, align uint8, softcap float32, nslopes int, slope float32, nused int, used0, used1 int32) {
		opt := attention.Options{Causal: causal, Align: attention.Alignment(align), Softcap: softcap,
			Window: &attention.Window{Left: left, Right: right}}
		if nslopes = min(max(nslopes, 0), 5); nslopes > 0 {
			opt.ALiBi = make([]float32, nslopes)
			for i := range opt.ALiBi {
				opt.ALiBi[i] = slope * float32(i+1)
			}
		}
		if nused = min(max(nused, 0), 3); nused > 0 {
			opt.SeqUsedK = []int32{used0, used1, used0}[:nused]
		}
		out, err := e.Forward(context.Background(), q, q, q, opt)
		if err != nil {
			if !errors.Is(err, attention.ErrOption) {
				t.Fatalf("%+v: error wraps no ErrOption: %v", opt, err)
			}
			return
		}
		for i, x := range out.LSE {
			if math.IsNaN(float64(x)) {
				t.Fatalf("%+v: lse[%d] is NaN", opt, i)
			}
		}
		for i, x := range out.O.Float32s() {
			if math.IsNaN(float64(x)) {
				t.Fatalf("%+v: o[%d] is NaN", opt, i)
			}
		}
	})
}

// FuzzBias tries arbitrary bias and dBias shapes, strides, dtypes and
// data lengths: a call either runs (every output finite, as the bias is)
// or fails with an error wrapping one of the argument sentinels; nothing
// panics.
func FuzzBias(f *testing.F) {
	f.Add(uint8(1), uint8(7), uint8(2), uint8(7), 0, 0, 0, uint8(0), true, 0, uint8(1), uint8(7))
	f.Add(uint8(2), uint8(1), uint8(1), uint8(7), 7, 0, 0, uint8(1), false, -3, uint8(2), uint8(1))
	f.Add(uint8(3), uint8(7), uint8(2), uint8(6), 0, -1, 9, uint8(2), true, 5, uint8(0), uint8(0))
	e, q := fuzzEngine(f)
	f.Fuzz(func(t *testing.T, bb, bs, bh, bd uint8, seq, head, batch int, dt uint8, grad bool, extra int, gb, gs uint8) {
		bshape := attention.Shape{B: int(bb), S: int(bs), H: int(bh), D: int(bd)}
		dtype := []attention.DType{attention.Float32, attention.Float16, attention.BFloat16}[dt%3]
		n := max(bshape.Len()+extra, 0)
		bias := attention.Tensor{Shape: bshape, Strides: attention.Strides{Batch: batch, Seq: seq, Head: head}, Data: make([]float32, n)}
		if dtype != attention.Float32 {
			x, _ := attention.NewTensor(dtype, attention.Shape{B: 1, S: 1, H: 1, D: max(n, 1)}, attention.BSHD)
			bias.Data = x.Data
		}
		gshape := bshape
		gshape.B, gshape.S = int(gb), int(gs)
		dbias, _ := attention.NewTensor(attention.Float32, gshape, attention.BHSD)
		opt := attention.Options{Causal: true, Bias: &attention.Bias{Tensor: bias, Grad: grad, GradTensor: dbias}}
		check := func(err error, outs ...[]float32) {
			if err != nil {
				for _, s := range []error{attention.ErrShape, attention.ErrStride, attention.ErrLength, attention.ErrDType, attention.ErrOption} {
					if errors.Is(err, s) {
						return
					}
				}
				t.Fatalf("bias %+v dbias %v: error wraps no sentinel: %v", bshape, gshape, err)
			}
			for _, o := range outs {
				for i, x := range o {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						t.Fatalf("bias %+v: output element %d is %v", bshape, i, x)
					}
				}
			}
		}
		out, err := e.Forward(context.Background(), q, q, q, opt)
		if err != nil {
			check(err)
			return
		}
		check(nil, out.O.Float32s())
		g, err := e.Backward(context.Background(), q, q, q, out.O, out.LSE, q, opt)
		if err != nil {
			check(err)
			return
		}
		check(nil, g.DQ.Float32s(), g.DK.Float32s(), g.DV.Float32s(), g.DBias.Float32s())
	})
}
