package attention_test

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/flashvk/flashvk/attention"
)

// A causal forward and backward on the CPU backend.
func Example() {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		panic(err)
	}
	defer e.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	randn := func(s attention.Shape) attention.Tensor {
		x := make([]float32, s.Len())
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return attention.FromFloat32(x, s, attention.BSHD)
	}
	q := randn(attention.Shape{B: 1, S: 4, H: 2, D: 8})
	k := randn(attention.Shape{B: 1, S: 6, H: 1, D: 8}) // one kv head shared by both query heads
	v := randn(attention.Shape{B: 1, S: 6, H: 1, D: 8})
	opt := attention.Options{Causal: true, Align: attention.BottomRight}

	ctx := context.Background()
	out, err := e.Forward(ctx, q, k, v, opt)
	if err != nil {
		panic(err)
	}
	dO := randn(out.O.Shape)
	g, err := e.Backward(ctx, q, k, v, out.O, out.LSE, dO, opt)
	if err != nil {
		panic(err)
	}
	fmt.Println("O", out.O.Shape, "LSE", len(out.LSE))
	fmt.Println("dK", g.DK.Shape)
	// Output:
	// O [B=1 S=4 H=2 D=8] LSE 8
	// dK [B=1 S=6 H=1 D=8]
}

// Bad input is an error naming the argument, never a panic.
func Example_badInput() {
	e, _ := attention.Open(attention.Config{Backend: attention.CPU})
	defer e.Close()
	q := attention.FromFloat32(make([]float32, 2*3*8), attention.Shape{B: 1, S: 2, H: 3, D: 8}, attention.BSHD)
	k := attention.FromFloat32(make([]float32, 2*2*8), attention.Shape{B: 1, S: 2, H: 2, D: 8}, attention.BSHD)
	_, err := e.Forward(context.Background(), q, k, k, attention.Options{})
	fmt.Println(err)
	// Output: attention: k: 2 kv heads do not divide q's 3 heads: bad shape
}
