package attention_test

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/flashvk/flashvk/attention"
)

// Decoding with a KV cache: every step appends one token's key and value
// to each sequence of the batch and attends its query over the sequence's
// whole cache; SeqLens advance by the rows appended.
func ExampleEngine_ForwardKVCache() {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	ctx := context.Background()

	rng := rand.New(rand.NewPCG(1, 2))
	randn := func(s attention.Shape) attention.Tensor {
		x := make([]float32, s.Len())
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return attention.FromFloat32(x, s, attention.BSHD)
	}

	// A contiguous cache of 2 sequences of up to 16 tokens, 2 kv heads of
	// dimension 8, queried by 4 heads (grouped-query attention). Sequence 1
	// already holds a 5-token prompt.
	const b, nmax, hq, hkv, d = 2, 16, 4, 2, 8
	cache := &attention.KVCache{
		K:       randn(attention.Shape{B: b, S: nmax, H: hkv, D: d}),
		V:       randn(attention.Shape{B: b, S: nmax, H: hkv, D: d}),
		SeqLens: []int32{0, 5},
	}
	opt := attention.Options{Causal: true, Align: attention.BottomRight}
	for step := range 3 {
		q := randn(attention.Shape{B: b, S: 1, H: hq, D: d})
		newK := randn(attention.Shape{B: b, S: 1, H: hkv, D: d})
		newV := randn(attention.Shape{B: b, S: 1, H: hkv, D: d})
		out, err := e.ForwardKVCache(ctx, q, cache, newK, newV, opt)
		if err != nil {
			panic(err)
		}
		fmt.Println("step", step, "O", out.O.Shape, "LSE", len(out.LSE), "SeqLens", cache.SeqLens)
	}
	// Output:
	// step 0 O [B=2 S=1 H=4 D=8] LSE 8 SeqLens [1 6]
	// step 1 O [B=2 S=1 H=4 D=8] LSE 8 SeqLens [2 7]
	// step 2 O [B=2 S=1 H=4 D=8] LSE 8 SeqLens [3 8]
}

// A paged cache: a pool of blocks of 4 rows, and a block table naming,
// for each sequence, the blocks that hold its rows in order (entries past
// a sequence's length are not read). An append past a block's end goes
// into the next block of the table.
func ExampleKVCache_paged() {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		panic(err)
	}
	defer e.Close()

	const blocks, blockSize, h, d = 6, 4, 1, 8
	pool := attention.Shape{B: blocks, S: blockSize, H: h, D: d}
	k, _ := attention.NewTensor(attention.Float32, pool, attention.BSHD)
	v, _ := attention.NewTensor(attention.Float32, pool, attention.BSHD)
	cache := &attention.KVCache{
		K: k, V: v,
		SeqLens: []int32{4, 1},
		// Two sequences of up to 3 blocks (12 rows): sequence 0 in blocks
		// 5 and 2, sequence 1 in block 0.
		BlockTable: []int32{
			5, 2, -1,
			0, -1, -1,
		},
		BlockSize: blockSize,
	}
	q, _ := attention.NewTensor(attention.Float32, attention.Shape{B: 2, S: 1, H: h, D: d}, attention.BSHD)
	newKV, _ := attention.NewTensor(attention.Float32, attention.Shape{B: 2, S: 1, H: h, D: d}, attention.BSHD)
	out, err := e.ForwardKVCache(context.Background(), q, cache, newKV, newKV, attention.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println("O", out.O.Shape, "SeqLens", cache.SeqLens)
	// Output: O [B=2 S=1 H=1 D=8] SeqLens [5 2]
}
