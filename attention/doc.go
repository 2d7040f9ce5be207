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
// FLASHVK_SPIN_WAIT, FLASHVK_ADDRESSING), and Devices and TuneCacheFile,
// which resolve a Config as Open does; no other part of the library reads
// it. The Vulkan backend
// needs cgo: a binary built with CGO_ENABLED=0 runs the CPU backend, and
// Backend Vulkan fails with an ErrBackend that says so.
//
// Engine.Plan says how a pass runs — the kernel family, each dispatch's
// kernel, grid, workgroup, tile and shared memory, and why the families
// tried first declined — exactly as the Vulkan backend records it; with
// Config.PipelineStatistics each launch also carries what the driver's
// compiler reports of its pipeline (Launch.Statistics: register count,
// spills, shared memory…, through VK_KHR_pipeline_executable_properties).
// Engine.Tune searches per-device tile configurations (verified against a
// float64 reference the caller passes in) for a TuneCache, which Open then
// uses (Config.TuneCache), for plain calls or, with TuneOptions.Features,
// for calls with a window, softcap, ALiBi or dropout (TuneKey.Options);
// LockTuneCache orders concurrent writers of the
// file (LoadTuneCache, TuneCache.Put and Save under it keep every writer's
// entries).
//
// For repeated calls and training loops, DeviceTensors keep operands on the
// device: upload once, run ForwardDevice, BackwardDevice or TrainStep
// (forward and backward in one GPU submission, O and LSE never leaving the
// device), download what is needed. On the CPU backend they wrap host
// memory, so the same code runs everywhere.
//
// For decoding, ForwardKVCache (host tensors) and ForwardKVCacheDevice
// (the cache on the device) take a few new queries per sequence, a key/
// value cache — contiguous [B, Nmax, Hkv, D] or paged (a block table
// into [NumBlocks, BlockSize, Hkv, D], as vLLM and FlashAttention) —
// with each sequence's length, optionally append new K and V rows at
// those lengths, and attend to each sequence's rows, causally
// bottom-right for speculative decoding; the lengths advance on
// success. On Vulkan one submission carries the append, a split-KV
// decode kernel that packs the query heads sharing a KV head into one
// workgroup, and a deterministic merge of the splits (PlanKVCache shows
// the splits); the cache must fit one storage-buffer binding (4 GiB on
// NVIDIA) — larger caches are refused with ErrShape. The CPU backend
// computes each sequence as a forward over its gathered rows. KV-cache
// calls take a sliding window, a softcap and ALiBi (below) with the same
// definitions, each sequence's keys being its cache rows after the append
// (Mistral's and Gemma 2's local layers, Gemma 2's softcap, BLOOM's and
// MPT's ALiBi); on Vulkan a window's splits cover only the rows it leaves
// visible. They refuse SeqUsedK, CuSeqlensQ, CuSeqlensK and Dropout (the
// cache's lengths are the key counts; decoding has no backward).
//
// Options beyond the scale and the causal mask — a sliding window
// (Window{Left, Right}, placed by Align like the causal diagonal), a
// softcap (c·tanh(s/c), differentiated through in the backward), ALiBi
// slopes per head or per sequence and head, per-sequence key counts for
// padded batches (SeqUsedK), and batches of variable-length sequences
// packed without padding (CuSeqlensQ, CuSeqlensK: Q [1, Tq, Hq, D], LSE
// [Hq, Tq], gradients in the packed layout), and dropout (Dropout{P, Seed,
// Offset}: a Philox4x32-10 counter-based mask, the same in the forward and
// the backward on every backend, never stored, reproduced bit for bit by
// package reference), and an additive bias or boolean mask (Bias: SDPA's
// attn_mask, float32 or the storage type, broadcast over the batch, the
// queries or the heads where its dimension is 1; KeepMask turns a boolean
// mask into one; its gradient dBias on request, summed over what it
// broadcasts, deterministic like the other gradients) — run forward and
// backward on every backend and storage type, alone or together (see
// Options and Bias for the exact definitions). Key tiles that the window,
// the diagonal or a key count leave empty are skipped, not computed
// (Plan.TilesVisited counts the rest), and so are the tiles a bias hides
// entirely (−Inf over the tile): on Vulkan from a summary of the bias
// (a bit per 16×16 block) that each call computes first, on the CPU per
// tile. On Vulkan they run in the flash, flash_cm, bwd and bwd_cm
// families, and the window, softcap and ALiBi also in KV-cache calls
// (decode); the minimal and naive forwards refuse them.
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
// float16), with one exception: the cooperative-matrix kernels take a
// bfloat16 call's softcap tanh in float16 (see Options.Softcap); a query row that sees no key (causal bottom-right alignment with
// Nq > Nk, a window or a key count of 0) gives O = 0, LSE = −Inf and zero
// gradients, never NaN. The
// backward is deterministic: the same inputs give the same bits on every
// run.
//
// Special values follow package reference — IEEE arithmetic over the keys
// each row sees — on every backend, kernel and storage type:
//   - NaN in Q, K, V or dO gives NaN exactly where the float64 reference
//     has it: in every output that reads it (a product with a probability
//     that rounds to 0 still reads it: 0·NaN is NaN) and nowhere else.
//     One exception: under a causal mask or window, a NaN (or ±Inf) in a
//     row the mask hides may also reach rows less than 256 positions across
//     the mask's edge from it (the kernels multiply a masked tile corner
//     by zero); likewise a NaN or ±Inf in a K or V row that a bias hides
//     (−Inf) may reach the other rows of its tile that it does not hide —
//     but none of a tile whose every row the bias hides it from (in blocks
//     of 16 rows and 16 keys): such tiles are never read.
//   - In the forward, ±Inf in K or V likewise gives ±Inf and NaN where the
//     reference has them (a +Inf score makes its row NaN, an infinite V
//     element its column of O ±Inf), but for one case: a row whose
//     probability of a key with an infinite V element is 0 in float32 — a
//     scaled score some 87 or more below the row's maximum (2⁻¹²⁶, or
//     2⁻¹⁴⁹ where subnormals are kept), or a row that is empty — may get
//     NaN in that column (0·Inf), where the reference has ±Inf or, for an
//     empty row, 0.
//   - A softcap maps a score of ±Inf to ±c, a finite score: such a row is
//     not empty.
//   - A row whose visible scores are all −Inf (or that sees no key) is
//     empty: O = 0, LSE = −Inf, dQ = 0, and it adds nothing to dK and dV,
//     even where its Q or dO holds ±Inf. The backward takes a row as empty
//     likewise when the LSE it is handed is +Inf (P = e^(s−∞) = 0) or lies
//     beyond ±2.3587e38 (its base-2 value is not a finite float32).
//   - Large scales are exact while every scaled score |scale·q·k| is below
//     2¹²⁸/log₂e ≈ 2.3587e38 (the kernels exponentiate in base 2, so
//     float32's range ends there, not at 3.4e38; a row with a score beyond
//     it gives NaN, except on the naive and minimal Vulkan kernels, which
//     exponentiate in base e and stay exact): the forward's softmax is the
//     exact one, one-hot when the scores are far apart (scale 1e30
//     included). The backward recomputes
//     P from LSE in float32, so its gradients carry float32's absolute
//     error on the scores, a few 2⁻²⁴·scale·Σ|q_x·k_x| (the products'
//     terms, not their sum): for huge scores that is a probability of
//     exactly 0 or 1 where the reference has it — unless, handed an LSE
//     other than its own forward's, a row's largest score is far smaller
//     than its terms or a hair from the next, where float32 cannot order
//     them — and gradients within scale·2·Dv·2⁻²⁴·Σ|dO∘V|·|K| of the
//     exact ones — finite, except that such noise can exceed float16's
//     range.
//
// On Vulkan these rest on the driver keeping IEEE infinities and NaN
// through the kernels' arithmetic, which Vulkan does not promise unless a
// shader declares SignedZeroInfNanPreserve (the kernels do not yet): the
// suite checks them on every device it runs on (NVIDIA H200 and H100,
// lavapipe).
//
// Outputs must not share memory with any other operand: ForwardInto and
// BackwardInto refuse an O, LSE, dQ, dK or dV that overlaps another
// operand by even one element (ErrStride, naming both), and DeviceTensor
// calls refuse the same tensor passed twice; views of one buffer that share
// no element (dQ, dK and dV interleaved in one [B, N, 3, H, D] buffer)
// are fine.
//
// # Cancellation
//
// Every call stops when its context ends, returning an error that wraps
// the context's error (context.Canceled or context.DeadlineExceeded);
// its outputs may then be partly written. Engine.Close stops the attention
// calls in progress the same way, and they return an error wrapping
// ErrClosed (a Benchmark or a DeviceTensor transfer in progress finishes
// first).
// How soon, by backend:
//
//   - CPU: the workers check the context between tiles of a few
//     thousand scores each, so a call returns within milliseconds of
//     its cancellation, and Close once its calls have.
//   - Vulkan: GPU work is not preempted, so a long call whose context
//     can be cancelled (ctx.Done() != nil) runs as a series of
//     submissions of about 250 ms each on a GPU (100 ms on a CPU device
//     such as lavapipe): runs of its kernels' workgroups (whole batches,
//     heads, or tiles of one head), sized by the rate each kernel has
//     shown on the device, with bitwise the results of one submission.
//     The call checks its context between them, and one that ends
//     during a submission waits for it to finish: the call returns
//     within about one submission of its cancellation with none of its
//     GPU work left running, so the next call does not wait for it, and
//     Close waits at most for the submissions in flight. A call expected
//     to take less than one submission, and any call whose context
//     cannot be cancelled (context.Background()), is one submission:
//     Close waits for it. Splitting costs a GPU about 1% of a call it
//     splits (each boundary drains the last wave of workgroups). Without
//     a deadline a wait gives up after 60 s (10 min on a CPU device such
//     as lavapipe) and leaves the work to finish. Benchmark and Tune submit one short iteration at a time
//     and stop waiting when their context ends, the submission in flight
//     finishing on its own. Transfers between host and device (a host
//     call's, and DeviceTensor Upload and Download) go in pieces of at
//     most 64 MiB and stop after the piece in flight.
package attention
