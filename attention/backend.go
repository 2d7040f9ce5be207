package attention

import (
	"context"

	"github.com/flashvk/flashvk/internal/spec"
)

// backend runs validated problems. The attention package validates every
// argument before a backend sees it, so implementations may assume:
// shapes agree (see spec.Problem), strides address only inside the slices, all
// tensors share one dtype, outputs do not overlap themselves, and the
// gradients have the strides of their primals (dO of O, dQ of Q, dK of K,
// dV of V). A backend must be safe for concurrent use.
type backend interface {
	// Info describes the backend and the device it runs on.
	Info() BackendInfo
	// Forward writes O and LSE.
	Forward(ctx context.Context, p *spec.Problem, a *forwardArgs) error
	// Backward writes dQ, dK and dV.
	Backward(ctx context.Context, p *spec.Problem, a *backwardArgs) error
	// plan says how the pass (forward, or backward) of p with storage dt
	// runs (p.O is set).
	plan(ctx context.Context, p *spec.Problem, dt DType, backward bool) (*Plan, error)
	// Close releases the backend's resources; it is safe to call twice.
	Close() error
}

// forwardArgs are the operands of a forward call (Bias: the zero Tensor
// without spec.Ext.Bias).
type forwardArgs struct {
	Q, K, V, O Tensor
	LSE        []float32
	Bias       Tensor
}

// backwardArgs are the operands of a backward call (DBias: the zero
// Tensor unless spec.Ext.Bias.Grad).
type backwardArgs struct {
	Q, K, V, O  Tensor
	LSE         []float32
	DO          Tensor
	DQ, DK, DV  Tensor
	Bias, DBias Tensor
}

// BackendKind selects a backend family.
type BackendKind uint8

const (
	// Auto picks a Vulkan device when one exists, else the CPU.
	Auto BackendKind = iota
	// CPU is the pure-Go float32 FlashAttention backend.
	CPU
	// Vulkan runs the GLSL kernels on a Vulkan device.
	Vulkan
)

// String names the kind.
func (k BackendKind) String() string {
	switch k {
	case Auto:
		return "auto"
	case CPU:
		return "cpu"
	case Vulkan:
		return "vulkan"
	}
	return "unknown"
}

// BackendInfo describes a running backend.
type BackendInfo struct {
	Kind   BackendKind
	Name   string // e.g. "cpu" or "vulkan"
	Device string // device name, e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.6, 256 bits)"
	Driver string // driver name and version where known
	// Kernel is the forward kernel family the backend prefers ("flash_cm"
	// on devices with cooperative matrices, else "flash"; "cpu" on the CPU
	// backend); Engine.Plan says which runs a given problem.
	Kernel string
	// DTypes lists the storage types the backend runs.
	DTypes []DType
	// Vulkan describes the Vulkan device (nil on the CPU backend).
	Vulkan *DeviceInfo
}
