package shaders

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Addressed variants. flash, bwd_pre, bwd_dkdv, bwd_dq (f32, f16, bf16;
// SPIR-V 1.3) and flash_cm, bwd_cm_dkdv, bwd_cm_dq (f32, f16, bf16;
// SPIR-V 1.6) have a second build, NAME.addr.DTYPE.spv (kernel name
// Addressed(NAME)), compiled with -DADDRESSED=1: the kernel's storage-type
// operands (Q, K, V, O, dO, dQ, dK, dV) are read and written through
// 64-bit buffer device addresses with 64-bit element offsets, so that one
// tensor may exceed maxStorageBufferRange and 2^32 elements. Its push
// constants are AddressedParams: Params, then at byte 80 one address per
// address slot (AddressSlots: slot s is the s-th storage-type operand in
// binding order), that of element 0 of the tensor as this dispatch sees it
// (the host adds any offset). The float32 operands (LSE, D) stay storage-buffer
// bindings at their numbers. The descriptor set layout is the base
// kernel's (Bindings counts all bindings), but the module declares no
// binding at the address slots' binding numbers: the pipeline does not use
// those descriptors (Vulkan requires valid descriptors only for the
// bindings a pipeline statically uses). Addresses must be aligned to the
// element size, and to 16 bytes where a cooperative-matrix kernel runs with
// VEC = 1 (16-byte accesses).
//
// Device requirements beyond the base kernel's: bufferDeviceAddress and
// shaderInt64; the modules declare the capabilities
// PhysicalStorageBufferAddresses and Int64 (SPIR-V 1.3 modules through
// SPV_KHR_physical_storage_buffer, core in SPIR-V 1.5) and use the
// PhysicalStorageBuffer64 addressing model.

// addrSuffix turns a kernel name into its addressed variant's.
const addrSuffix = ".addr"

// MaxAddressSlots is the length of AddressedParams.Addr (and of addr[] in
// attn_params.glsl): the most storage-type operands a kernel has (bwd_dkdv's
// Q, K, V, dO, dK, dV).
const MaxAddressSlots = 6

// AddressedParamsSize is the size in bytes of an addressed module's
// push-constant block: Params, then MaxAddressSlots 8-byte addresses (128,
// the Vulkan minimum of maxPushConstantsSize).
const AddressedParamsSize = ParamsSize + 8*MaxAddressSlots

// AddressedParams mirrors the push-constant block of the addressed
// modules (attn_params.glsl with ADDRESSED): Params, then Addr at byte 80.
// Addr[s] is the buffer device address of address slot s
// (AddressSlots(kernel)[s]); unused slots are ignored.
type AddressedParams struct {
	Params
	Addr [MaxAddressSlots]uint64
}

// Bytes encodes p as an addressed module's push constants (little-endian:
// Params.Bytes, then each address as 8 bytes).
func (p *AddressedParams) Bytes() []byte {
	b := make([]byte, AddressedParamsSize)
	copy(b, p.Params.Bytes())
	for i, a := range p.Addr {
		binary.LittleEndian.PutUint64(b[ParamsSize+8*i:], a)
	}
	return b
}

// addressSlots lists, for each kernel with an addressed build, the
// bindings of its storage-type operands in binding order: entry s is the
// binding that address slot s replaces (each kernel's header and its
// OPERAND declarations; addressed_test.go checks the sources).
var addressSlots = map[string][]int{
	KernelFlash:     {0, 1, 2, 3},       // Q K V O
	KernelBwdPre:    {0, 1},             // O dO
	KernelBwdDKDV:   {0, 1, 2, 3, 6, 7}, // Q K V dO dK dV
	KernelBwdDQ:     {0, 1, 2, 3, 6},    // Q K V dO dQ
	KernelFlashCM:   {0, 1, 2, 3},       // as flash
	KernelBwdCMDKDV: {0, 1, 2, 3, 6, 7}, // as bwd_dkdv
	KernelBwdCMDQ:   {0, 1, 2, 3, 6},    // as bwd_dq
}

// AddressedKernels lists the kernels (base names) that have an addressed
// variant.
var AddressedKernels = []string{KernelFlash, KernelBwdPre, KernelBwdDKDV, KernelBwdDQ,
	KernelFlashCM, KernelBwdCMDKDV, KernelBwdCMDQ}

// Addressed returns the name of kernel's addressed variant (kernel +
// ".addr"), which Bindings, SpecIDs, KernelDTypes, SPIRV and AddressSlots
// accept where HasAddressed(kernel).
func Addressed(kernel string) string { return kernel + addrSuffix }

// HasAddressed reports whether kernel (a base name) has an addressed
// variant.
func HasAddressed(kernel string) bool {
	_, ok := addressSlots[kernel]
	return ok
}

// AddressSlots returns, for an addressed kernel name or its base, the
// bindings its addressed variant reads and writes by address instead, in
// slot order (AddressedParams.Addr[s] replaces binding AddressSlots[s]).
func AddressSlots(kernel string) ([]int, error) {
	s, ok := addressSlots[BaseKernel(kernel)]
	if !ok {
		return nil, fmt.Errorf("shaders: kernel %q has no addressed variant", kernel)
	}
	return append([]int(nil), s...), nil
}

// BaseKernel maps an addressed kernel name to its base kernel; any other
// name is returned unchanged.
func BaseKernel(kernel string) string {
	if b, ok := strings.CutSuffix(kernel, addrSuffix); ok && HasAddressed(b) {
		return b
	}
	return kernel
}
