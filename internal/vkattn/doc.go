//go:build cgo

// Package vkattn is flashvk's Vulkan attention backend: it runs the GLSL
// kernels of package shaders on a device.Device through a pipeline.Cache.
// It knows nothing of the public attention package, which adapts it; its
// contract is internal/spec.Problem. It reads no environment variable (the
// caller resolves every setting into Options) and builds with cgo only.
//
// # The kernel plan
//
// Backend.Plan is the one place that decides how a pass of a problem runs:
// which kernel family, which kernels, tiles, specialization constants,
// grids, bindings and scratch buffers. Recording (Forward, Backward, Step,
// the host path, Bench), Launches (what `flashvk explain` prints), the
// per-kernel benchmark labels and the tuner all read its result, and a test
// checks that the recorder dispatches exactly the planned launches. A plan
// whose grid exceeds the device's workgroup counts is refused there
// (ErrTooLarge), not when recorded; MaxBatchChunk keeps the host path's
// chunks within them (the bias kernels' z is B·Hq).
//
// A kernel family is one way to compute a pass (plan.go's registry, one
// file each):
//
//	flash_cm  forward on KHR cooperative matrices, f16 and bf16, and f32 up to
//	          d 128 in three bf16 planes per operand (fam_coopmat.go; above
//	          d 192 fp16's plain calls run in subgroup pairs that split O's
//	          columns: pair tiles; at d ≤ 64 the 16-bit builds' subgroups
//	          own two blocks of query rows each: row-block tiles)
//	flash     FlashAttention-2 forward, every storage type (fam_scalar.go)
//	minimal   FA1-style forward, educational
//	naive     three passes through a float32 score matrix, educational
//	bwd_cm    backward on cooperative matrices: bwd_pre, bwd_cm_dkdv, bwd_cm_dq,
//	          f16 and bf16, and f32 up to d 128 in three bf16 planes (f32
//	          above d 64 in subgroup pairs that split the head dim's
//	          features, and the 16-bit bwd_cm_dkdv above d 128 so in one
//	          launch where the register softmax runs and no bias is set:
//	          fh2 tiles; otherwise above d 128 bwd_cm_dkdv runs three
//	          times, dV then dK's two halves of columns, K and V in
//	          registers — twice, dV then dK, with a bias: split tiles —
//	          and 16-bit bwd_cm_dq in subgroup pairs that split dQ's
//	          columns: pair tiles; at d ≤ 64 the 16-bit bwd_cm_dq's
//	          subgroups own two blocks of query rows each, with no bias,
//	          ALiBi, softcap or window: row-block tiles)
//	bwd       backward: bwd_pre, bwd_dkdv, bwd_dq
//	decode    KV-cache calls (pass KV): kv_append, decode, decode_combine (kvcache.go)
//
// The coopmat kernels' tiles that do not prefetch the next K/V tile (Q/dO
// step) into registers walk their tiles (steps) staggered — each
// workgroup from a place of its own, so that a head's workgroups do not
// all load the same tile at once — where no causal mask, window or bias
// is set: sw1 tiles (STAGGER, cm_common.glsl; a bias refuses them).
//
// A family owns its device and dtype requirements (init, and its plan's
// refusals), its SPIR-V modules, bindings, specialization, default tile
// rule, grids, shared memory and scratch, and its tunable stages. Options.Kernel
// selects the chains the plan asks: "" asks the automatic families in
// registry order (flash_cm then flash forward; bwd_cm then bwd backward)
// and the first that takes the problem wins, the others' reasons kept in
// Plan.Declined; a named forward family is asked alone (a problem or
// device it cannot run is an error, never another family's results) and
// its backward families follow it (flash_cm: bwd_cm then bwd; the scalar
// ones: bwd). The KV pass (Problem.KV set) always asks decode. Adding a
// family is one file and one registry line.
//
// # KV-cache calls
//
// KVCache runs a decoding step on resident tensors in one submission: the
// lengths and page table go into a scratch buffer through the command
// buffer (Recorder.Update), kv_append copies the new rows into the cache,
// decode computes attention split along each sequence's cache
// (DecodeConfig: about four workgroups per compute unit, from the
// device's ComputeUnits where the driver reports them), and
// decode_combine merges the splits by their log-sum-exp in split order,
// so results are the same bits run to run. A window, softcap or ALiBi
// (Problem.Ext) travels in the same buffer after the table
// (shaders.KVMetaWords) and selects decode's variant (specialization
// constant 8, shaders.ExtSpec; the plain call's is 0 and carries none of
// their code); a window's splits start at each sequence's first visible
// row and cover only the rows its queries see. KV kernels read the cache
// through one binding: larger caches fail with ErrTooLarge. BenchKV
// times such calls.
//
// # The bias
//
// A problem with an additive bias (spec.Bias) binds it in every kernel
// that scores, after the Ext buffer (the Ext buffer itself in its place
// otherwise, bound and never read): ext_score adds it and a −Inf element
// hides its key. Each pass starts with bias_summary, which writes a bit
// per block of 16 rows × 16 keys (set unless the whole block is −Inf) to a
// scratch buffer from which the kernels find the next tile that some row
// sees (a summary word covers 512 keys), so that a tile the bias hides
// from every row is neither loaded, prefetched nor computed (the dK/dV
// kernels, which walk query tiles, read the bits of eight row blocks at
// once and keep them). Where the bias is broadcast over heads, the
// coopmat kernels on tiles of at most 64 rows run the workgroups of up to
// eight heads of one tile one after another (Launch.HeadGroup, Ext words
// 27 and 28), so that those heads read the tile's bias rows together,
// from the device's cache. flash_cm's
// register loop stages the bias values through shared memory, a
// subgroup's rows of the tile loaded in 16-byte units (bias_stage.glsl;
// its area counts in the tile checks: TileExtras); the backward kernels
// load each accumulator component's value. A backward with dBias has its dQ kernel store dS
// (before the softcap's derivative) into the dBias, zeroed first; where
// the bias broadcasts, dBias sums over what it folds: the dQ kernel then
// stores dS into a float32 scratch of (b, h) planes [P, Nq, Nk], also
// zeroed, and bias_reduce adds it into dBias per element in a fixed order
// (b, h, then the row: the bits change neither run to run nor with P).
// The scratch holds at most 1 GiB of planes (shaders.DSChunks: in the
// order b·Hq + h, or h·B + b where dBias keeps the heads and folds the
// batch, so that an element's planes are consecutive; P a multiple or a
// divisor of the inner dimension): the dQ launch then runs in chunks of P
// planes — parts of its grid, vkCmdDispatchBase — each followed by
// bias_reduce's part for that chunk (the dBias planes it folds into), which
// keeps an element's partial sum in a float32 buffer of dBias's size
// between chunks where its planes span several. The bias, its dBias and one
// plane must each fit one binding (ErrTooLarge names the one that does
// not); such a problem runs as a whole batch (spec.Problem.Whole) on the
// host path.
//
// # Device-resident and host operands
//
// A Tensor is a device buffer with a dtype, a shape [B, S, H, D] and element
// strides (feature stride 1). Forward, Backward and Step run on Tensors, so
// repeated calls and benchmarks move no data between host and device. The
// tensors' strides must address like the problem's (Problem.Q for Q and
// dQ, Problem.K for K and dK, Problem.V for V and dV, Problem.O for O and
// dO); LSE is a float32 Tensor of shape [B, Nq, Hq, 1] stored as contiguous
// [B, Hq, Nq] (see LSEShape and LSEStrides).
//
// ForwardHost and BackwardHost are the host-slice convenience the attention
// package uses: they upload each operand's slice as it is (strides go to
// the shader, so views such as Q inside a packed QKV buffer need no
// repacking), run, and download the outputs; elements of an output slice
// outside its view are preserved.
//
// # Operands larger than one binding
//
// Kernels read their operands through storage-buffer bindings with 32-bit
// element offsets: one binding reaches the device's maxStorageBufferRange
// (4 GiB on NVIDIA, 128 MiB on lavapipe) and 2^32 elements (BindingBytes,
// MaxElements). flash, flash_cm and the backward kernels also have an
// addressed build that reads and writes Q, K, V, O, dO, dQ, dK and dV
// through 64-bit buffer device addresses in push constants, with 64-bit
// offsets; LSE, D and scratch stay bound (addressing.go). Plan gives a
// pass the addressed builds when one of its storage operands is larger than
// a binding reaches (Options.Addressing AddressAuto; AddressAlways for
// every problem, AddressBindings never), on devices with bufferDeviceAddress
// and shaderInt64; Launch.Addresses lists the operands read that way, and
// the minimal and naive families, which have no addressed build, decline
// such problems. Tensors may then be as large as the device's largest
// buffer (MaxBufferBytes), with strides below 2^32 elements. The host path
// splits a problem into chunks of whole batches when its operands (or a
// plan's scratch) are too large for one submission, preferring bindings
// while one batch fits one (MaxBatchChunk); without device addresses the
// resident API refuses tensors beyond a binding with an error wrapping
// ErrTooLarge.
//
// float16 and bfloat16 storage are offered only when the device has
// storageBuffer16BitAccess (DTypes); arithmetic is float32 for every storage
// type (but bfloat16's softcap tanh in the coopmat kernels, float16:
// CMLayout.halfTanh). bfloat16 runs the scalar kernels' bf16 modules or,
// on devices with bf16 cooperative matrices and VK_KHR_shader_bfloat16,
// the coopmat kernels' own bf16 modules; never the float16 ones.
//
// The cooperative-matrix kernels read the element layout of the device's
// coopmat types once per Backend and storage type, by running
// flash_cm_probe (cmlayout.go); the wait is bounded by the caller's
// context, and a cancelled probe is run again by the next caller. The bf16
// coopmat kernels round P and dS to bf16 in integer arithmetic before the
// conversion, on every device, to nearest with ties away from zero
// (bf16.glsl): the forward's P in two operations (bf16_nearest_away), the
// backward's P in three (bf16_nearest_away_nonneg) and dS in five
// (bf16_nearest_away_kept), every NaN kept.
//
// # Cancellation: chunked submissions
//
// GPU work is not preempted, so a call whose context can be cancelled
// (Done() != nil) and whose work is expected to take longer than
// ChunkTarget (250 ms on a GPU, 100 ms on a CPU device) is submitted in
// chunks of about that long (chunk.go): runs of each launch's grid,
// recorded with vkCmdDispatchBase in launch order with the plan's
// barriers (each submission starts with a full barrier). On a GPU a run
// is whole batches, else heads of one batch, else query (or key) tiles of
// one head, as many as a chunk holds (the order of one dispatch); on a
// CPU device, which ends each dispatch with its threads' partial last
// round, a chunk holds one run of each launch it reaches, split evenly,
// of tiles across every head and batch (workgroups of like cost).
//
// A chunk's expected time is its arithmetic, counted exactly for the mask
// from the (query, key) pairs its workgroups compute, over the rate the
// kernel (and storage type) has shown on this device: every submission
// measures it, a long one setting it and a short one (under 2 ms, mostly
// fixed cost) only raising it, from a conservative prior per device type;
// a kernel's first chunk is a quarter of the target, and a chunk holds at
// least a few waves' worth of workgroups (4 per CPU thread on a CPU
// device, 8192 on a GPU) so that its last partial wave costs little.
//
// The call checks its context between chunks; when it ends during one,
// the call waits for that chunk (device.SubmitDrain) and returns the
// context's error: within about one chunk, its buffers free, none of its
// work left running. Backend.Close cancels the contexts of such calls and
// waits for their chunks; their error wraps ErrClosed. Workgroups are
// independent and the kernels use no atomics, so the results are bitwise
// those of one submission. A context that cannot be cancelled, work
// expected within one chunk, a device without vkCmdDispatchBase (Vulkan
// 1.0) and Bench get one submission.
//
// # Backward and the training step
//
// The backward records bwd_pre (D = rowsum(dO∘O) into a float32 [B, Hq, Nq]
// scratch buffer: BackwardScratchBytes of extra device memory), a barrier,
// then the dK/dV and dQ kernels (independent: no barrier between them), in
// one submission, with no floating-point atomics. Step records the forward,
// a barrier and the backward in one submission; O and LSE never leave the
// device. Scratch buffers are pooled and freed by Close.
//
// # Benchmarks
//
// Bench times resident input sets: one submission per iteration with a
// GPU timestamp before the first and after the last kernel, after a
// warm-up of at least Warmup submissions and MinWarmup (500 ms: GPUs leave
// low clock states in a step some 0.1–0.5 s after work resumes, see
// Steady); a series whose first and last quarters differ by more than 20%
// is timed again. PerKernel adds a barrier and a timestamp after every
// dispatch, labelled with its Launch.Name. Devices without compute-queue
// timestamps fall back to the host-measured submission time (Clock "wall").
//
// # Compiler statistics
//
// With Options.PipelineStatistics the device is opened with
// device.Options.PipelineStatistics (VK_KHR_pipeline_executable_properties;
// Open fails with ErrUnsupported on a device without it), and
// Backend.Statistics returns what the driver's compiler reports of a
// launch's pipeline — register count (occupancy), spills, shared memory,
// in the driver's own names — building the pipeline if it was not built
// yet (`flashvk explain --stats` prints them for every launch of a plan).
//
// # Autotuning
//
// The search itself is package attention's (Engine.Tune); this package
// gives it a TuneSession (tunesession.go), a private Backend on the same
// device whose plans it can steer: per key — storage type, head dims,
// causal or not, options, pass (TuneKey) — Stages lists the tunable
// stages the plan runs (Tunables: flash, flash_cm, bwd_dkdv, bwd_dq,
// bwd_cm_dkdv, bwd_cm_dq), Candidates every configuration of a stage legal within the
// device's limits, Force puts one in place; a Verifier checks it against
// the float64 results of a Reference on a small awkward problem (a
// candidate with wrong results is never chosen), a Timer times it with
// Bench on a representative problem. The search keeps the default unless
// a candidate is more than 2% faster when the two are timed again back to
// back, and tunes the stages of one pass in registry order, each with the
// winners of the earlier ones in place.
//
// Tuned configurations reach a Backend through SetTuned (package attention
// reads them from its tune cache file and filters them by device); a
// stage's plan asks Backend.tuned, which returns the entry of the problem's
// key whose N is nearest its Nq, when it parses and fits the device, and
// otherwise warns (TuneWarnings) and uses the default. A key names the
// problem's options beyond the causal mask (spec.Problem.Features: "" for
// none, "softcap", "window+dropout", …; the tuner times problems with
// the options it is given): a problem takes the entry of its own options
// first; without one, the choices of flash_cm and bwd_cm_dkdv, whose
// default rules pick other tiles for options (Tunable.PlainOnly), keep
// the default, and the other stages take the plain entry.
// Launch.Source says "tuned" or "default" for every dispatch.
//
// A Backend, its Tensors and its pipelines are safe for concurrent use.
package vkattn
