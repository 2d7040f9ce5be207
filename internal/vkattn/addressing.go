//go:build cgo

package vkattn

// Addressing: how kernels reach their operands. Every kernel binds its
// operands as storage buffers, which limits one operand to what one
// binding reaches (maxStorageBufferRange: 4 GiB on NVIDIA, 128 MiB on
// lavapipe) and to 2^32 elements (32-bit offsets). The production kernels
// (flash, flash_cm and the backward's) also have an addressed build
// (shaders.Addressed) that reads and writes Q, K, V, O, dO, dQ, dK and dV
// through 64-bit buffer device addresses passed in push constants, with
// 64-bit offsets; LSE, D and scratch stay bindings. Plan gives a problem
// the addressed build when one of those operands is larger than a binding
// reaches (AddressAuto), for every problem (AddressAlways), or never
// (AddressBindings).

import (
	"fmt"
	"math"
	"strings"

	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// Addressing selects how kernels reach Q, K, V, O and the gradients.
type Addressing uint8

const (
	// AddressAuto binds every operand, and uses device addresses only for
	// a problem with an operand larger than one binding reaches.
	AddressAuto Addressing = iota
	// AddressBindings never uses device addresses: larger operands are
	// refused (or, on the host path, split by batch where that helps).
	AddressBindings
	// AddressAlways uses device addresses for every problem (tests and
	// measurements of the addressed kernels); Open fails on a device
	// without them.
	AddressAlways
)

var addressingNames = [...]string{AddressAuto: "auto", AddressBindings: "bindings", AddressAlways: "addresses"}

// String is "auto", "bindings" or "addresses" (ParseAddressing's words).
func (a Addressing) String() string {
	if int(a) < len(addressingNames) {
		return addressingNames[a]
	}
	return fmt.Sprintf("Addressing(%d)", a)
}

// ParseAddressing reads "auto" (or ""), "bindings" or "addresses".
func ParseAddressing(s string) (Addressing, error) {
	if s == "" {
		return AddressAuto, nil
	}
	for a, n := range addressingNames {
		if s == n {
			return Addressing(a), nil
		}
	}
	return 0, fmt.Errorf("%w: addressing %q (want auto, bindings or addresses)", ErrInvalid, s)
}

// initAddressing sets the Backend's buffer limits and whether its kernels
// may read operands by device address.
func (b *Backend) initAddressing(a Addressing) error {
	if int(a) >= len(addressingNames) {
		return fmt.Errorf("%w: addressing %d", ErrInvalid, a)
	}
	info := b.info
	// maxMemoryAllocationSize is a soft limit (drivers allocate beyond
	// it); maxBufferSize, where known, is not.
	largest := info.MaxAllocation
	if info.MaxBufferSize > 0 {
		largest = info.MaxBufferSize
	}
	b.bindBytes = int64(min(info.MaxAllocation, info.MaxStorageBufferRange, largest, math.MaxInt64))
	b.dsBytes = min(dsScratchMax, b.bindBytes)
	b.addressing = a
	switch {
	case a == AddressBindings:
		b.addrWhy = "device addresses are off (addressing: bindings)"
	case !info.BufferDeviceAddress:
		b.addrWhy = "the device has no buffer device addresses"
	case !info.Int64:
		b.addrWhy = "the device has no 64-bit integers in shaders (shaderInt64)"
	case info.MaxPushConstants < shaders.AddressedParamsSize:
		b.addrWhy = fmt.Sprintf("the device has %d bytes of push constants, the addressed kernels need %d",
			info.MaxPushConstants, shaders.AddressedParamsSize)
	}
	if a == AddressAlways && b.addrWhy != "" {
		return fmt.Errorf("%w: addressing %v on %s: %s", ErrUnsupported, a, info.Name, b.addrWhy)
	}
	b.maxBuf = b.bindBytes
	if b.addrWhy == "" {
		b.maxBuf = int64(min(largest, math.MaxInt64))
	}
	return nil
}

// Addressing is the Backend's addressing mode, and why its kernels cannot
// read operands by device address ("" when they can).
func (b *Backend) Addressing() (Addressing, string) { return b.addressing, b.addrWhy }

// bindable reports whether one binding reaches an operand of elems
// elements and bytes bytes (32-bit offsets, the storage-buffer range).
func (b *Backend) bindable(elems, bytes int64) bool {
	return elems <= MaxElements && bytes <= b.bindBytes
}

// storageOperands are the operands of pass dir in the storage type: the
// ones an addressed kernel reads by address (LSE and D stay bound).
func storageOperands(dir Dir) []Operand {
	in, out := tensorOperands(dir == Fwd, dir == Bwd)
	var ops []Operand
	for _, op := range append(in, out...) {
		if addressable(op) {
			ops = append(ops, op)
		}
	}
	return ops
}

// addressable reports whether an addressed kernel may read operand op by
// device address: the storage-type operands, not LSE (nor D and the
// scratch buffers) nor the bias and dBias, which stay bound.
func addressable(op Operand) bool { return op != OpLSE && op != OpBias && op != OpDBias }

// unbindable names the first storage operand of pass dir of p that one
// binding cannot hold ("" when every one fits).
func (b *Backend) unbindable(p *spec.Problem, dt spec.DType, dir Dir) string {
	for _, op := range storageOperands(dir) {
		os := opSpec(p, op)
		n, _ := extent(os.shape, os.st)
		if bytes := n * int64(dt.Size()); !b.bindable(n, bytes) {
			return fmt.Sprintf("%s spans %d elements (%d bytes), more than one binding reaches (%d elements, %d bytes)",
				os.name, n, bytes, int64(MaxElements), b.bindBytes)
		}
	}
	return ""
}

// checkBound refuses plans whose bound float32 buffers (LSE, D, scratch)
// one binding cannot hold: every kernel binds them.
func (b *Backend) checkBound(p *spec.Problem, pl *Plan) error {
	lse := 4 * int64(p.B) * int64(p.Hq) * int64(p.Nq)
	if !b.bindable(lse/4, lse) {
		return fmt.Errorf("%w: lse (and D) of B·Hq·Nq = %d rows need %d bytes; kernels bind them, and one binding reaches %d bytes",
			ErrTooLarge, lse/4, lse, b.bindBytes)
	}
	for op, n := range pl.Scratch {
		if !b.bindable(n/4, n) {
			return fmt.Errorf("%w: scratch %v needs %d bytes; kernels bind it, and one binding reaches %d bytes",
				ErrTooLarge, op, n, b.bindBytes)
		}
	}
	return nil
}

// address gives pl's launches their addressed builds when p needs them
// (an operand larger than a binding) or the Backend always uses them, and
// refuses p when it needs them and the device or a kernel has none.
func (b *Backend) address(p *spec.Problem, dt spec.DType, pl *Plan) error {
	if err := b.checkBound(p, pl); err != nil {
		return err
	}
	why := b.unbindable(p, dt, pl.Dir)
	switch {
	case b.addressing == AddressAlways:
	case why == "":
		return nil
	case b.addrWhy != "":
		return fmt.Errorf("%w: %s, and %s", ErrTooLarge, why, b.addrWhy)
	}
	for _, op := range storageOperands(pl.Dir) {
		os := opSpec(p, op)
		if err := checkStrides(os.name, os.shape, os.st); err != nil {
			return err
		}
	}
	for i := range pl.Launches {
		if isBiasKernel(&pl.Launches[i]) {
			continue // bound buffers only
		}
		if err := b.addressLaunch(&pl.Launches[i], dt); err != nil {
			return err
		}
	}
	return nil
}

// addressLaunch turns l into its kernel's addressed build: module, push
// constants, pipeline settings and the operands read by address.
func (b *Backend) addressLaunch(l *Launch, dt spec.DType) error {
	if !shaders.HasAddressed(l.Kernel) {
		return fmt.Errorf("%w: kernel %s has no build that reads operands by device address", ErrUnsupported, l.Kernel)
	}
	ak := shaders.Addressed(l.Kernel)
	slots, err := shaders.AddressSlots(ak)
	if err != nil {
		return fmt.Errorf("vkattn: %w", err)
	}
	spv, err := b.module(ak, dt)
	if err != nil {
		return err
	}
	l.Addresses = make([]Operand, len(slots))
	for i, s := range slots {
		if s >= len(l.Bindings) {
			return fmt.Errorf("vkattn: %s: address slot %d is binding %d of %d", ak, i, s, len(l.Bindings))
		}
		l.Addresses[i] = l.Bindings[s]
	}
	l.key.Name = ak + strings.TrimPrefix(l.key.Name, l.Kernel)
	l.Kernel = ak
	l.key.SPIRV, l.key.PushSize, l.key.Addressed = spv, shaders.AddressedParamsSize, true
	return nil
}

// checkStrides refuses a view whose strides do not fit the kernels' 32-bit
// push constants (a stride matters only where its dimension exceeds 1).
func checkStrides(name string, s spec.Shape, st spec.Strides) error {
	for _, d := range []struct {
		dim    string
		n, str int
	}{{"batch", s.B, st.Batch}, {"sequence", s.S, st.Seq}, {"head", s.H, st.Head}} {
		if d.n > 1 && d.str > math.MaxUint32 {
			return fmt.Errorf("%w: %s: %s stride %d elements; the kernels take strides below 2^32 (split the %s dimension)",
				ErrTooLarge, name, d.dim, d.str, d.dim)
		}
	}
	return nil
}
