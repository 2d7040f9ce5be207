//go:build cgo

package device

/*
#include <stdlib.h>
#include "vk.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Spec is one 4-byte specialization constant: Value holds the bits of a
// uint, int, float or bool (0/1) constant_id ID.
type Spec struct {
	ID    uint32
	Value uint32
}

// PipelineDesc describes a compute pipeline.
type PipelineDesc struct {
	// Name labels the pipeline in errors (optional).
	Name string
	// SPIRV is the shader module (little-endian words, starting with the
	// magic number 0x07230203).
	SPIRV []byte
	// Entry is the entry point; "" means "main".
	Entry string
	// Spec are the specialization constants.
	Spec []Spec
	// PushSize is the push-constant block size in bytes (multiple of 4,
	// at most Info.MaxPushConstants); Dispatch must pass exactly this many.
	PushSize uint32
	// Bindings is the number of storage buffers, bound at bindings
	// 0..Bindings-1 of descriptor set 0.
	Bindings int
	// RequiredSubgroupSize forces the subgroup size (0: driver's choice).
	// It must be a power of two in [MinSubgroupSize, MaxSubgroupSize] and
	// needs Info.SubgroupSizeControl, except that the device's only
	// subgroup size is always accepted.
	RequiredSubgroupSize uint32
	// FullSubgroups requires full subgroups (local_size_x must then be a
	// multiple of the subgroup size); needs Info.ComputeFullSubgroups.
	FullSubgroups bool
	// Addressed: the shader reads some of its operands by device address
	// (Buffer.Address in push constants; GL_EXT_buffer_reference), so
	// buffers passed to Dispatch may be larger than MaxStorageBufferRange;
	// the descriptor of each binding covers at most MaxStorageBufferRange
	// bytes. Needs Info.BufferDeviceAddress and Info.Int64.
	Addressed bool
}

// Pipeline is a compute pipeline with its layout.
type Pipeline struct {
	d         *Device
	p         C.VkPipeline
	layout    C.VkPipelineLayout
	setLayout C.VkDescriptorSetLayout
	pushSize  uint32
	bindings  int
	addressed bool
	name      string
	closed    atomic.Bool
}

// PushSize is the pipeline's push-constant size in bytes.
func (p *Pipeline) PushSize() uint32 { return p.pushSize }

// Bindings is the number of storage-buffer bindings.
func (p *Pipeline) Bindings() int { return p.bindings }

// Addressed is PipelineDesc.Addressed.
func (p *Pipeline) Addressed() bool { return p.addressed }

// Name is PipelineDesc.Name.
func (p *Pipeline) Name() string { return p.name }

const spirvMagic = 0x07230203

// NewPipeline compiles a compute pipeline through the device's
// VkPipelineCache. Pipelines with equal Bindings share a descriptor-set
// layout, so descriptor sets are reused across them within a submission.
func (d *Device) NewPipeline(desc PipelineDesc) (*Pipeline, error) {
	name := desc.Name
	if name == "" {
		name = "pipeline"
	}
	if len(desc.SPIRV) < 20 || len(desc.SPIRV)%4 != 0 || binary.LittleEndian.Uint32(desc.SPIRV) != spirvMagic {
		return nil, fmt.Errorf("%w: %s: not a little-endian SPIR-V module (%d bytes)", ErrInvalid, name, len(desc.SPIRV))
	}
	if desc.PushSize%4 != 0 || desc.PushSize > d.info.MaxPushConstants {
		return nil, fmt.Errorf("%w: %s: push-constant size %d must be a multiple of 4 and at most %d",
			ErrInvalid, name, desc.PushSize, d.info.MaxPushConstants)
	}
	maxB := int(C.FVK_MAX_BINDINGS)
	if lim := int(d.info.MaxStorageBuffersPerStage); lim < maxB {
		maxB = lim
	}
	if desc.Bindings < 0 || desc.Bindings > maxB {
		return nil, fmt.Errorf("%w: %s: %d bindings (maximum %d)", ErrInvalid, name, desc.Bindings, maxB)
	}
	sg := desc.RequiredSubgroupSize
	if sg != 0 {
		inf := d.info
		if sg&(sg-1) != 0 || sg < inf.MinSubgroupSize || sg > inf.MaxSubgroupSize {
			return nil, fmt.Errorf("%w: %s: required subgroup size %d (device supports %d..%d)",
				ErrUnsupported, name, sg, inf.MinSubgroupSize, inf.MaxSubgroupSize)
		}
		if !inf.SubgroupSizeControl {
			if inf.MinSubgroupSize != inf.MaxSubgroupSize {
				return nil, fmt.Errorf("%w: %s: required subgroup size without subgroup size control", ErrUnsupported, name)
			}
			sg = 0 // the only possible size: nothing to request
		}
	}
	full := desc.FullSubgroups
	if full && !d.info.ComputeFullSubgroups {
		return nil, fmt.Errorf("%w: %s: full subgroups not supported", ErrUnsupported, name)
	}
	if err := d.checkAddressed(name, desc.Addressed); err != nil {
		return nil, err
	}
	entry := desc.Entry
	if entry == "" {
		entry = "main"
	}
	if err := d.use(); err != nil {
		return nil, err
	}
	defer d.done()
	setLayout, layout, err := d.layouts(uint32(desc.Bindings), desc.PushSize)
	if err != nil {
		return nil, fmt.Errorf("device: %s: %w", name, err)
	}
	ids := make([]C.uint32_t, len(desc.Spec)+1)
	vals := make([]C.uint32_t, len(desc.Spec)+1)
	for i, s := range desc.Spec {
		ids[i], vals[i] = C.uint32_t(s.ID), C.uint32_t(s.Value)
	}
	code := C.CBytes(desc.SPIRV) // C memory: guaranteed 4-byte alignment
	defer C.free(code)
	centry := C.CString(entry)
	defer C.free(unsafe.Pointer(centry))
	var fullFlag C.uint32_t
	if full {
		fullFlag = 1
	}
	p := &Pipeline{d: d, layout: layout, setLayout: setLayout, pushSize: desc.PushSize, bindings: desc.Bindings,
		addressed: desc.Addressed, name: name}
	r := C.fvk_pipeline_create(d.c, (*C.uint32_t)(code), C.size_t(len(desc.SPIRV)), centry,
		&ids[0], &vals[0], C.uint32_t(len(desc.Spec)), layout, C.uint32_t(sg), fullFlag, &p.p)
	if r != 0 {
		return nil, fmt.Errorf("device: compile %s: %w", name, d.check("vkCreateComputePipelines", r))
	}
	d.lmu.Lock()
	d.pipelines[p] = struct{}{}
	d.lmu.Unlock()
	return p, nil
}

// checkAddressed refuses PipelineDesc.Addressed on a device that cannot
// run such a pipeline.
func (d *Device) checkAddressed(name string, addressed bool) error {
	switch {
	case !addressed:
		return nil
	case !d.info.BufferDeviceAddress:
		return fmt.Errorf("%w: %s: the pipeline reads operands by device address, and this device has no buffer device addresses (bufferDeviceAddress unsupported or left off)",
			ErrUnsupported, name)
	case !d.info.Int64:
		return fmt.Errorf("%w: %s: the pipeline reads operands by 64-bit device address, and this device lacks shaderInt64",
			ErrUnsupported, name)
	}
	return nil
}

// layouts returns the shared set layout for n bindings and the pipeline
// layout for (n, push).
func (d *Device) layouts(n, push uint32) (C.VkDescriptorSetLayout, C.VkPipelineLayout, error) {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	sl, ok := d.setLayouts[n]
	if !ok {
		if r := C.fvk_set_layout_create(d.c, C.uint32_t(n), &sl); r != 0 {
			return 0, 0, d.check("vkCreateDescriptorSetLayout", r)
		}
		d.setLayouts[n] = sl
	}
	key := [2]uint32{n, push}
	pl, ok := d.pipeLayouts[key]
	if !ok {
		if r := C.fvk_pipeline_layout_create(d.c, sl, C.uint32_t(push), &pl); r != 0 {
			return 0, 0, d.check("vkCreatePipelineLayout", r)
		}
		d.pipeLayouts[key] = pl
	}
	return sl, pl, nil
}

// Close destroys the pipeline. The caller must ensure no submission using
// it is still running. Safe to call more than once, also after Device.Close.
func (p *Pipeline) Close() error {
	if p == nil || p.closed.Load() {
		return nil
	}
	p.d.closeObject(p.destroyLocked)
	return nil
}

// destroyLocked destroys the pipeline; d.lmu must be held and the device alive.
func (p *Pipeline) destroyLocked() {
	if p.closed.Swap(true) {
		return
	}
	C.fvk_pipeline_destroy(p.d.c, p.p)
	delete(p.d.pipelines, p)
}
