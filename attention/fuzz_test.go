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
