//go:build cgo

// Package vkattn is flashvk's Vulkan attention backend: it runs the GLSL
// kernels of package shaders (forward: flash, minimal or naive; backward:
// bwd_pre, bwd_dkdv, bwd_dq) on a device.Device through a pipeline.Cache.
// It knows nothing of the public attention package, which adapts it; its
// contract is internal/spec.Problem.
//
// # Device-resident and host operands
//
// A Tensor is a device buffer with a dtype, a shape [B, S, H, D] and element
// strides (feature stride 1). Forward, Backward and Step run on Tensors, so
// repeated calls and benchmarks move no data between host and device:
//
//	b, _ := vkattn.Open(vkattn.Options{})
//	defer b.Close()
//	q, _ := b.NewTensor(vkattn.F32, vkattn.Shape{B: 1, S: 1024, H: 8, D: 64}, spec.Strides{})
//	_ = vkattn.Upload(ctx, q, hostQ)
//	…
//	_ = b.Step(ctx, p, q, k, v, dO, o, lse, dq, dk, dv) // forward + backward, one submission
//
// The tensors' strides must address like the problem's (Problem.Q for Q and
// dQ, Problem.K for K and dK, Problem.V for V and dV, Problem.O for O and
// dO); LSE is a float32 Tensor of shape [B, Nq, Hq, 1] stored as contiguous
// [B, Hq, Nq] (see LSEShape and LSEStrides).
//
// ForwardHost and BackwardHost are the host-slice convenience the attention
// package uses: they upload each operand's slice as it is (strides go to
// the shader, so views such as Q inside a packed QKV buffer need no
// repacking), run, and download the outputs. Elements of an output slice
// outside its view are preserved: a dense output is downloaded directly, a
// strided view through a temporary whose view rows are scattered back.
// Element offsets are 32-bit in the kernels and each operand must fit one
// storage buffer, so the host path splits a problem into chunks of whole
// batches when an operand is too large for one (see MaxBatchChunk); the
// resident API refuses such tensors with an error wrapping ErrTooLarge.
//
// # Kernels and tiles
//
// Options.Kernel picks the forward kernel: "" or "flash" (FlashAttention-2,
// the default), "minimal" (FA1-style, educational) or "naive" (three passes
// through a float32 score matrix of B·Hq·Nq·Nk elements, refused with
// ErrTooLarge when that matrix exceeds the device's largest storage buffer).
// The backward kernels are shared by all three. Tile sizes come from
// shaders.DefaultConfig for the device's limits (subgroup size, shared
// memory, workgroup size — read from the device, never assumed) and are
// cached per (kernel, D, Dv, dtype); Tiles and TileTable list them, and
// FLASHVK_DEBUG_TILES=1 prints the table to stderr at Open. A tuned
// configuration from the tune cache replaces them where one matches (see
// Autotuning); Launches shows which is used.
//
// float16 and bfloat16 storage are offered only when the device has
// storageBuffer16BitAccess (DTypes); arithmetic is float32 for every storage
// type. bfloat16 runs the scalar kernels' bf16 modules (exact loads into
// float32, round-to-nearest-even stores) or, on devices with bf16
// cooperative matrices and VK_KHR_shader_bfloat16 (shaderBFloat16Type,
// shaderBFloat16CooperativeMatrix), flash_cm and the coopmat backward's bf16
// modules (bfloat16 operands, fp32 accumulators and softmax, P and dS
// rounded to nearest even); never through float16 (whose range is far
// smaller).
//
// # Backward and the training step
//
// Backward records bwd_pre (D = rowsum(dO∘O), a float32 [B, Hq, Nq] scratch
// buffer: BackwardScratchBytes, i.e. 4·B·Hq·Nq bytes of extra device memory),
// a barrier, then bwd_dkdv and bwd_dq (independent: no barrier between
// them), in one submission. Step records the forward, a barrier and the
// backward in one submission; O and LSE never leave the device. Scratch
// buffers are pooled and freed by Close.
//
// # Benchmarks
//
// BenchmarkHost keeps Rotate independent input sets resident (Bench takes
// resident sets directly), warms up for at least Warmup submissions and
// MinWarmup (200 ms: short kernels are then timed at steady clocks), then
// runs Iters timed submissions, one per iteration, each with a GPU
// timestamp before the first and after the last kernel of the pass; the
// per-iteration times are the differences (no host transfer, no submission
// latency). Devices without compute-queue timestamps fall back to the
// host-measured submission time (Clock "wall").
//
// # Autotuning
//
// Backend.Tune (the CLI: flashvk tune) searches, per key — storage type,
// head dims, causal or not, direction fwd|bwd (TuneKey) — the launch
// configurations of each tunable kernel family the Backend runs there:
// every candidate legal within the device's shared-memory and workgroup
// limits is verified against the float64 reference on a small awkward
// problem (VerifyProblem; a candidate with wrong results is rejected and
// never chosen), then timed with Bench on a representative problem
// (TuneProblem: N = 2048, B·N = 16384, H·d = 2048 by default). The fastest
// verified candidate wins (the default unless another is more than 2%
// faster). Families of one direction are tuned in registration order,
// each with the winners of the earlier ones in place (bwd_dq is timed with
// the tuned bwd_dkdv). A new winner is re-timed back to back with the
// default before it is kept; TuneOptions.Budget bounds the search's time.
//
// Results go to a versioned JSON cache (TuneCache, TuneEntry;
// os.UserCacheDir()/flashvk/tune-v1.json or $FLASHVK_TUNE_CACHE; written
// atomically), keyed by DeviceKey (name, vendor and device IDs, driver and
// its version, pipeline cache UUID) and TuneKey, one entry per tuned N.
// Open loads the entries of its device (Options.TuneCache names another
// file; "off" or FLASHVK_TUNE=off disables them) and uses, for a problem
// of a matching key, the entry whose N is nearest its Nq; otherwise the
// defaults (shaders.DefaultConfig, chooseCMTile). A file that is corrupt
// or of another schema version is ignored, and a cached configuration
// that does not parse or does not fit the device is ignored for the
// default: both with a warning in TuneInfo (and Options.Log), never an
// error. Launch.Source says "tuned" or "default" for every dispatch.
//
// A family is a TuneFamily registered from an init function with
// registerTuneFamily (tune.go registers flash, flash_cm, bwd_dkdv and
// bwd_dq). It provides Active (does the Backend dispatch it for this
// problem; dispatches(kernel, dir) answers from Launches), Default,
// Candidates (legal configurations, each a Candidate whose String is
// stable: the cache stores it), Parse (String back to a Candidate) and
// Check (is a Candidate valid for a problem on this device). The kernel
// code applies a tuned choice by asking Backend.tuned(ctx, name, p, dt),
// which returns the cached (or, while tuning, the forced) Candidate only
// when Parse and Check accept it. Adding the cooperative-matrix backward,
// for example, takes: a String/parse pair for its tile type; in its tile
// choice
//
//	if c, ok := b.tuned(ctx, "bwd_cm", p, dt); ok {
//		tile = c.(bwdCMTile)
//	} else {
//		tile = <the default choice>
//	}
//
// (and Source: SourceTuned/SourceDefault in its Launches); and
//
//	func init() {
//		registerTuneFamily(&TuneFamily{Name: "bwd_cm", Dir: DirBwd,
//			Active:     dispatches(shaders.KernelBwdCMDKDV, DirBwd),
//			Default:    …, // the tile the Backend picks without tuning
//			Candidates: …, // the tiles its check function accepts
//			Parse:      func(s string) (Candidate, error) { return parseBwdCMTile(s) },
//			Check:      …, // the tile check for p on b
//		})
//	}
//
// The tuner, the cache, the CLI and explain need no change.
//
// A Backend, its Tensors and its pipelines are safe for concurrent use.
package vkattn
