package attention_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/flashvk/flashvk/attention"
)

// Device-resident tensors: upload the operands once, then run training
// steps (forward + backward, one GPU submission each on Vulkan) without
// host transfers, and download only what is needed. On the CPU backend,
// used here so the example runs anywhere, device tensors wrap host memory.
func ExampleEngine_TrainStep() {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	ctx := context.Background()

	qs := attention.Shape{B: 1, S: 16, H: 4, D: 32}
	kv := attention.Shape{B: 1, S: 16, H: 2, D: 32} // grouped-query attention
	newT := func(dt attention.DType, s attention.Shape, l attention.Layout) *attention.DeviceTensor {
		t, err := e.NewDeviceTensor(dt, s, l)
		if err != nil {
			panic(err)
		}
		return t
	}
	q, k, v, dO := newT(attention.Float32, qs, attention.BSHD), newT(attention.Float32, kv, attention.BSHD),
		newT(attention.Float32, kv, attention.BSHD), newT(attention.Float32, qs, attention.BSHD)
	o, dq, dk, dv := newT(attention.Float32, qs, attention.BSHD), newT(attention.Float32, qs, attention.BSHD),
		newT(attention.Float32, kv, attention.BSHD), newT(attention.Float32, kv, attention.BSHD)
	// The LSE is float32 [B, Hq, Nq]: shape LSEShape in BHSD layout.
	lse := newT(attention.Float32, attention.LSEShape(qs.B, qs.H, qs.S), attention.BHSD)
	for _, t := range []*attention.DeviceTensor{q, k, v, dO, o, lse, dq, dk, dv} {
		defer t.Close()
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for _, t := range []*attention.DeviceTensor{q, k, v, dO} {
		x := make([]float32, t.Shape().Len())
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		if err := t.Upload(ctx, attention.FromFloat32(x, t.Shape(), attention.BSHD)); err != nil {
			panic(err)
		}
	}

	opt := attention.Options{Causal: true}
	for range 3 {
		if err := e.TrainStep(ctx, q, k, v, dO, o, lse, dq, dk, dv, opt); err != nil {
			panic(err)
		}
	}

	grad, _ := attention.NewTensor(attention.Float32, kv, attention.BSHD)
	if err := dk.Download(ctx, grad); err != nil {
		panic(err)
	}
	finite := true
	for _, x := range grad.Data.([]float32) {
		finite = finite && !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0)
	}
	fmt.Println("dK", grad.Shape, "finite:", finite)
	// Output: dK [B=1 S=16 H=2 D=32] finite: true
}
