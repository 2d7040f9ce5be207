// Package shaders holds flashvk's compute kernels: GLSL sources (*.comp and
// the includes they share: params.glsl for every kernel, attn_params.glsl
// (Params) for the attention kernels and kv_params.glsl (KVParams) for the
// KV-cache ones, bwd_common.glsl for the scalar backward, cm_common.glsl and cm_types.glsl for the
// cooperative-matrix kernels, bf16.glsl for rounding to bfloat16), their SPIR-V (embedded, rebuilt by
// `make shaders` with the pinned toolchain of scripts/), and the Go side of
// their interface: push constants (Params), specialization constants,
// descriptor bindings, dispatch grids, thread layouts and shared-memory
// sizes. It is a leaf package (no flashvk imports).
//
// Every kernel is compiled three times: NAME.f32.spv (float32 buffers),
// NAME.f16.spv (float16 Q/K/V/O/dO/dQ/dK/dV buffers) and NAME.bf16.spv
// (bfloat16 bits in uint16 Q/K/V/O/dO/dQ/dK/dV buffers: loads shift them
// into a float32 exactly, stores round to nearest even with NaN kept, see
// LOAD/STORE in params.glsl). LSE, D and scratch stay float32 and all math
// is fp32 for every storage type. The f16 and bf16 modules need the device
// feature storageBuffer16BitAccess (and declare neither the Float16 nor the
// Int16 capability: bfloat16 is never computed through float16). Every module
// is SPIR-V 1.3 (Vulkan 1.1) and uses one descriptor set (0) of storage
// buffers, bindings 0 … Bindings(kernel)−1, plus the 80-byte push-constant
// block Params.
//
// The bias kernels (bias.go: bias_summary, bias_reduce) share Params and
// bind the Ext buffer at 0: bias_summary summarises an additive bias a
// bit per 16×16 block for the attention kernels' tile skipping, and
// bias_reduce folds a broadcast bias's dBias.
//
// The KV-cache kernels (kv.go: decode, decode_combine, kv_append) are
// built like the others but share kv_params.glsl's push-constant block,
// KVParams (120 bytes), and have no addressed variants; decode needs
// subgroup arithmetic.
//
// Addressed variants (addressed.go): flash, bwd_pre, bwd_dkdv, bwd_dq and
// the cooperative-matrix flash_cm, bwd_cm_dkdv, bwd_cm_dq are also built
// as NAME.addr.DTYPE.spv (kernel name Addressed(NAME) = NAME + ".addr",
// the base kernel's storage types and SPIR-V version), which read and write
// the storage-type operands through 64-bit buffer device addresses
// (AddressSlots) passed in the 128-byte push-constant block
// AddressedParams; LSE and D stay bindings. naive, minimal and
// flash_cm_probe have none (HasAddressed).
//
// Device requirements and pipeline settings:
//   - f16 and bf16 modules: storageBuffer16BitAccess.
//   - addressed modules (NAME.addr.DTYPE.spv): bufferDeviceAddress and
//     shaderInt64 (capabilities PhysicalStorageBufferAddresses and Int64;
//     the SPIR-V 1.3 ones use SPV_KHR_physical_storage_buffer, core in the
//     SPIR-V 1.6 ones), plus everything their base kernel needs.
//   - flash and bwd_pre: subgroup shuffles (VK_SUBGROUP_FEATURE_SHUFFLE_BIT
//     in the compute stage), a workgroup size that is a multiple of the
//     subgroup size, and subgroups of exactly spec constant SUBGROUP
//     invocations: set PipelineDesc.FullSubgroups where the device has
//     computeFullSubgroups, and RequiredSubgroupSize = SUBGROUP where it has
//     subgroup size control (drivers that may vary the size, e.g. Intel).
//   - Tiles: DefaultConfig picks (WG, BR, BC) from the device's limits;
//     CheckConfig validates others; SpecEntries gives the constants.
//   - flash_cm, flash_cm_probe, bwd_cm_dkdv, bwd_cm_dq (CoopMatKernels,
//     see coopmat.go): f16 and bf16 (NAME.f16.spv, NAME.bf16.spv; all but
//     the probe also NAME.f32.spv, operands split into bf16 planes:
//     CMPlanes),
//     SPIR-V 1.6 (Vulkan 1.3), KHR cooperative matrices, shaderFloat16,
//     bf16 and f32 also VK_KHR_shader_bfloat16; not in Kernels
//     (KernelDTypes).
//   - lavapipe: an invocation may run at most LavapipeLoopLimit loop
//     iterations (see LoopIterations); past it results are silently wrong.
package shaders

import (
	"embed"
	"fmt"
	"slices"
)

//go:embed *.spv
var spirvFS embed.FS

// Kernel names.
const (
	// KernelNaive is the three-pass unfused forward (spec constant PASS).
	KernelNaive = "naive"
	// KernelMinimal is the readable FA1-style fused forward.
	KernelMinimal = "minimal"
	// KernelFlash is the FlashAttention-2 forward (the default).
	KernelFlash = "flash"
	// KernelBwdPre computes D = rowsum(dO∘O).
	KernelBwdPre = "bwd_pre"
	// KernelBwdDKDV computes dK and dV.
	KernelBwdDKDV = "bwd_dkdv"
	// KernelBwdDQ computes dQ.
	KernelBwdDQ = "bwd_dq"
)

// Kernels lists every kernel.
var Kernels = []string{KernelNaive, KernelMinimal, KernelFlash, KernelBwdPre, KernelBwdDKDV, KernelBwdDQ}

// Storage types.
const (
	DTypeF32  = "f32"
	DTypeF16  = "f16"
	DTypeBF16 = "bf16" // bfloat16 bits in uint16 buffers
)

// DTypes lists the storage types every kernel is compiled for.
var DTypes = []string{DTypeF32, DTypeF16, DTypeBF16}

// Specialization constant IDs.
const (
	SpecWorkgroupSize uint32 = 0 // local_size_x
	SpecD             uint32 = 1 // head dim of Q and K (1 … 256)
	SpecDV            uint32 = 2 // head dim of V and O (1 … 256)
	SpecBR            uint32 = 3 // query rows per workgroup tile
	SpecBC            uint32 = 4 // key rows per tile
	SpecSubgroup      uint32 = 5 // the device's subgroup size (never assume 32)
	SpecPass          uint32 = 6 // naive only: 0 scores, 1 softmax, 2 P·V
)

// MaxHeadDim is the largest D and DV the kernels are built and tested for.
const MaxHeadDim = 256

// kernelBindings is each kernel's number of storage-buffer bindings (set 0,
// bindings 0 … n−1, listed in its header).
var kernelBindings = map[string]int{
	KernelNaive:   6,
	KernelMinimal: 5,
	KernelFlash:   8,
	KernelBwdPre:  4,
	KernelBwdDKDV: 11,
	KernelBwdDQ:   11,
	// Cooperative-matrix kernels (f16 and bf16; coopmat.go).
	KernelFlashCM:      8,
	KernelFlashCMProbe: 1,
	KernelBwdCMDKDV:    11,
	KernelBwdCMDQ:      11,
}

// kernelSpecIDs are the specialization constants each module declares
// (params_test.go checks them against the SPIR-V): every module declares
// the shared IDs 0 … 5 of params.glsl (set them all; a kernel ignores those
// its header says it does not use), naive adds 6 PASS, the ExtKernels
// 8 EXT (ext.glsl) and decode 7 KVEC and 8 EXT (kv.go).
var (
	sharedSpecIDs = []uint32{SpecWorkgroupSize, SpecD, SpecDV, SpecBR, SpecBC, SpecSubgroup}
	kernelSpecIDs = map[string][]uint32{
		KernelNaive:        append(append([]uint32(nil), sharedSpecIDs...), SpecPass),
		KernelMinimal:      sharedSpecIDs,
		KernelFlash:        append(append([]uint32(nil), sharedSpecIDs...), SpecExt),
		KernelBwdPre:       append(append([]uint32(nil), sharedSpecIDs...), SpecExt),
		KernelBwdDKDV:      append(append([]uint32(nil), sharedSpecIDs...), SpecExt),
		KernelBwdDQ:        append(append([]uint32(nil), sharedSpecIDs...), SpecExt),
		KernelFlashCM:      flashCMSpecIDs,
		KernelFlashCMProbe: probeSpecIDs,
		KernelBwdCMDKDV:    bwdCMKVSpecIDs,
		KernelBwdCMDQ:      bwdCMDQSpecIDs,
	}
)

// Bindings returns the number of storage-buffer bindings (0 … n−1, set 0)
// of kernel; an addressed variant has its base kernel's (its descriptor set
// layout keeps them all; the module does not use the address slots').
func Bindings(kernel string) (int, error) {
	n, ok := kernelBindings[BaseKernel(kernel)]
	if !ok {
		return 0, fmt.Errorf("shaders: unknown kernel %q", kernel)
	}
	return n, nil
}

// SpecIDs returns the specialization constant IDs kernel declares (an
// addressed variant: its base kernel's).
func SpecIDs(kernel string) ([]uint32, error) {
	ids, ok := kernelSpecIDs[BaseKernel(kernel)]
	if !ok {
		return nil, fmt.Errorf("shaders: unknown kernel %q", kernel)
	}
	return append([]uint32(nil), ids...), nil
}

// SPIRV returns the SPIR-V of kernel (a base or addressed name) for
// storage type dtype ("f32", "f16" or "bf16"). The slice is a fresh copy.
func SPIRV(kernel, dtype string) ([]byte, error) {
	if _, ok := kernelBindings[BaseKernel(kernel)]; !ok {
		return nil, fmt.Errorf("shaders: unknown kernel %q", kernel)
	}
	if !slices.Contains(DTypes, dtype) {
		return nil, fmt.Errorf("shaders: unknown storage type %q (want one of %v)", dtype, DTypes)
	}
	if !slices.Contains(KernelDTypes(kernel), dtype) {
		return nil, fmt.Errorf("shaders: kernel %q is not built for storage type %q (only %v)", kernel, dtype, KernelDTypes(kernel))
	}
	b, err := spirvFS.ReadFile(kernel + "." + dtype + ".spv")
	if err != nil {
		return nil, fmt.Errorf("shaders: %s.%s.spv not embedded (run `make shaders`): %w", kernel, dtype, err)
	}
	return b, nil
}
