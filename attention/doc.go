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
// Config.Backend Auto (the default) runs on the best hardware Vulkan device
// (a discrete, integrated or virtual GPU) and otherwise on the CPU backend
// (Engine.Fallback says why); a software Vulkan device — a CPU
// implementation such as Mesa's lavapipe, far slower than the CPU backend —
// runs only when Config.Device names it or Backend is Vulkan. A named
// device that does not exist, a kernel the device cannot run, or a kernel
// with the CPU backend is an error, never a quiet fallback. Devices lists
// the Vulkan devices and marks Auto's. Open reads the environment for the
// fields left zero (FLASHVK_BACKEND, FLASHVK_DEVICE, FLASHVK_TUNE_CACHE,
// FLASHVK_TUNE=off, FLASHVK_VULKAN_LIBRARY, FLASHVK_PIPELINE_CACHE_DIR,
// FLASHVK_SPIN_WAIT, FLASHVK_ADDRESSING); no other part of flashvk reads it. The Vulkan backend
// needs cgo: a binary built with CGO_ENABLED=0 runs the CPU backend, and
// Backend Vulkan fails with an ErrBackend that says so.
//
// Engine.Plan says how a pass runs — the kernel family, each dispatch's
// kernel, grid, workgroup, tile and shared memory, and why the families
// tried first declined — exactly as the Vulkan backend records it.
// Engine.Tune searches per-device tile configurations (verified against a
// float64 reference the caller passes in) for a TuneCache, which Open then
// uses (Config.TuneCache).
//
// For repeated calls and training loops, DeviceTensors keep operands on the
// device: upload once, run ForwardDevice, BackwardDevice or TrainStep
// (forward and backward in one GPU submission, O and LSE never leaving the
// device), download what is needed. On the CPU backend they wrap host
// memory, so the same code runs everywhere.
//
// Tensors may be as large as the device's largest buffer: an operand larger
// than one storage-buffer binding reaches (4 GiB on NVIDIA) is read by the
// kernels' addressed builds through 64-bit buffer device addresses
// (Config.Addressing; Launch.Addresses names such operands), and host calls
// too large for one submission run a chunk of batches at a time
// (Plan.Batches).
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
// Storage types: Float32 ([]float32), Float16 ([]float16.Float16) and
// BFloat16 ([]bfloat16.BFloat16, package github.com/flashvk/flashvk/bfloat16).
// All operands of a call share one type; LSE is always float32.
//
// Numerics: arithmetic and accumulation are float32 whatever the storage
// type: 16-bit inputs are widened exactly, outputs rounded to nearest even
// (bfloat16 keeps float32's exponent range and is never computed through
// float16); a query row that sees no key (causal bottom-right alignment with
// Nq > Nk) gives O = 0, LSE = −Inf and zero gradients, never NaN. The
// backward is deterministic: the same inputs give the same bits on every
// run.
package attention
