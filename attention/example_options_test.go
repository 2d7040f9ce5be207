package attention_test

import (
	"context"
	"fmt"
	"math"

	"github.com/flashvk/flashvk/attention"
)

// A sliding window with a softcap (Gemma 2's local layers): each query
// sees itself and the 2 keys before it, scores capped at ±50.
func ExampleOptions_window() {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	s := attention.Shape{B: 1, S: 6, H: 1, D: 4}
	x := make([]float32, s.Len())
	for i := range x {
		x[i] = float32(i%7) / 7
	}
	q := attention.FromFloat32(x, s, attention.BSHD)
	opt := attention.Options{Causal: true, Window: &attention.Window{Left: 2, Right: 0}, Softcap: 50}
	out, err := e.Forward(context.Background(), q, q, q, opt)
	if err != nil {
		panic(err)
	}
	// Row 0 sees key 0 alone: O is V's row 0.
	fmt.Printf("O row 0 %.3f\n", out.O.Float32s()[:4])
	fmt.Println("finite LSE", !math.IsInf(float64(out.LSE[5]), 0))
	// Output:
	// O row 0 [0.000 0.143 0.286 0.429]
	// finite LSE true
}

// Padded sequences: SeqUsedK gives each sequence's key count; keys past
// it are masked, and a sequence with none gives O = 0 and LSE = −Inf.
func ExampleOptions_seqUsedK() {
	e, _ := attention.Open(attention.Config{Backend: attention.CPU})
	defer e.Close()
	s := attention.Shape{B: 2, S: 3, H: 1, D: 2}
	x := make([]float32, s.Len())
	for i := range x {
		x[i] = 1
	}
	q := attention.FromFloat32(x, s, attention.BSHD)
	out, err := e.Forward(context.Background(), q, q, q, attention.Options{SeqUsedK: []int32{2, 0}})
	if err != nil {
		panic(err)
	}
	fmt.Println("LSE", out.LSE)
	// Output: LSE [2.1073608 2.1073608 2.1073608 -Inf -Inf -Inf]
}

// A boolean mask (PyTorch SDPA's attn_mask): two documents packed in one
// sequence of 4, each attending only within itself, the mask shared by
// every head ([1, 1, 4, 4], true: attend). Its bias gradient is asked for
// too, as for a trained bias: dBias is 0 wherever the mask hides a key.
func ExampleKeepMask() {
	e, _ := attention.Open(attention.Config{Backend: attention.CPU})
	defer e.Close()
	s := attention.Shape{B: 1, S: 4, H: 2, D: 2}
	x := make([]float32, s.Len())
	for i := range x {
		x[i] = float32(i%3) - 1
	}
	q := attention.FromFloat32(x, s, attention.BSHD)
	keep := []bool{
		true, true, false, false,
		true, true, false, false,
		false, false, true, true,
		false, false, true, true,
	}
	mask, err := attention.KeepMask(keep, attention.Shape{B: 1, S: 4, H: 1, D: 4}, attention.BHSD, attention.Float32)
	if err != nil {
		panic(err)
	}
	opt := attention.Options{Bias: &attention.Bias{Tensor: mask, Grad: true}}
	out, err := e.Forward(context.Background(), q, q, q, opt)
	if err != nil {
		panic(err)
	}
	g, err := e.Backward(context.Background(), q, q, q, out.O, out.LSE, q, opt)
	if err != nil {
		panic(err)
	}
	db := g.DBias.Float32s()
	fmt.Println("dBias shape", g.DBias.Shape)
	fmt.Println("dBias hidden keys of row 0:", db[2], db[3])
	// Output:
	// dBias shape [B=1 S=4 H=1 D=4]
	// dBias hidden keys of row 0: 0 0
}
