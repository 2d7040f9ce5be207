// Package attention is flashvk's public API: exact attention
// O = softmax(scale·QKᵀ + mask)·V, forward (O and the log-sum-exp LSE) and
// backward (dQ, dK, dV), computed the FlashAttention way — in tiles, with an
// online softmax, never materialising the Nq×Nk score matrix.
//
// Open an Engine on a backend (a Vulkan device, or the pure-Go CPU backend),
// then call Forward and Backward with host tensors:
//
//	e, err := attention.Open(attention.Config{}) // Vulkan if present, else CPU
//	out, err := e.Forward(ctx, q, k, v, attention.Options{Causal: true})
//	grads, err := e.Backward(ctx, q, k, v, out.O, out.LSE, dO, attention.Options{Causal: true})
//
// Shapes are logical [batch, sequence, heads, head dim]: Q [B, Nq, Hq, D],
// K [B, Nk, Hkv, D], V [B, Nk, Hkv, Dv], O [B, Nq, Hq, Dv]; Hq must be a
// multiple of Hkv (grouped-query attention; Hkv = 1 is multi-query). Memory
// order is free: Tensor.Strides address BSHD, BHSD or views such as Q inside
// a packed QKV buffer without copies. The feature dimension is contiguous.
//
// Every bad argument returns an error wrapping one of the sentinels
// (ErrShape, ErrStride, ErrLength, ErrDType, ErrOption, ErrBackend,
// ErrClosed) and naming the argument; nothing panics on user input.
//
// Numerics: arithmetic and accumulation are float32 whatever the storage
// type; a query row that sees no key (causal bottom-right alignment with
// Nq > Nk) gives O = 0, LSE = −Inf and zero gradients, never NaN. The
// backward is deterministic: the same inputs give the same bits on every
// run.
package attention
