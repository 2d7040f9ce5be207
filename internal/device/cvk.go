//go:build cgo

package device

/*
#cgo CFLAGS: -I${SRCDIR}/include -O2 -std=gnu11 -Wall -Wno-unused-function
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "vk.h"
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"strings"
	"sync"
	"unsafe"
)

var (
	loadMu   sync.Mutex
	loadedAs string // the library the loaded loader was asked for ("" = default)
	loaded   bool
)

// loadVulkan opens the Vulkan loader library ("" = libvulkan.so.1, then
// libvulkan.so) once per process; asking for another library after one
// was opened is an error.
func loadVulkan(library string) error {
	loadMu.Lock()
	defer loadMu.Unlock()
	if loaded {
		if library != loadedAs {
			return fmt.Errorf("%w: the Vulkan loader %q is open already; this process cannot also open %q", ErrNoVulkan, loaderName(loadedAs), loaderName(library))
		}
		return nil
	}
	var buf [512]C.char
	lib := C.CString(library)
	defer C.free(unsafe.Pointer(lib))
	if C.fvk_load(lib, &buf[0], C.size_t(len(buf))) != 0 {
		return fmt.Errorf("%w: %s (install libvulkan1 and a driver, or name the loader library)", ErrNoVulkan, C.GoString(&buf[0]))
	}
	loaded, loadedAs = true, library
	return nil
}

func loaderName(library string) string {
	if library == "" {
		return "libvulkan.so.1"
	}
	return library
}

// ValidationAvailable reports whether VK_LAYER_KHRONOS_validation is
// installed, as the loader library ("": the default) sees it.
func ValidationAvailable(library string) bool {
	if loadVulkan(library) != nil {
		return false
	}
	name := C.CString("VK_LAYER_KHRONOS_validation")
	defer C.free(unsafe.Pointer(name))
	return C.fvk_layer_available(name) != 0
}

// LoaderVersion returns the instance version of the Vulkan loader library
// ("": the default), e.g. "1.3.239".
func LoaderVersion(library string) (string, error) {
	if err := loadVulkan(library); err != nil {
		return "", err
	}
	return apiVersionString(uint32(C.fvk_loader_version())), nil
}

// instance wraps an fvk_instance and the logger its messenger reports to.
type instance struct {
	c      *C.fvk_instance
	sink   *logSink
	handle cgo.Handle
}

func newInstance(library string, validation bool, sink *logSink) (*instance, error) {
	if err := loadVulkan(library); err != nil {
		return nil, err
	}
	if validation && !ValidationAvailable(library) {
		return nil, fmt.Errorf("%w (install vulkan-validationlayers)", ErrNoValidation)
	}
	if sink == nil {
		sink = &logSink{}
	}
	h := cgo.NewHandle(sink)
	var c *C.fvk_instance
	v := C.int(0)
	if validation {
		v = 1
	}
	if r := VkResult(C.fvk_instance_create(v, C.uintptr_t(h), &c)); r != 0 {
		h.Delete()
		err := vkErr("vkCreateInstance", r)
		if r == -9 || r == -3 { // incompatible driver / initialization failed: no usable ICD
			return nil, fmt.Errorf("%w: %v", ErrNoVulkan, err)
		}
		return nil, err
	}
	return &instance{c: c, sink: sink, handle: h}, nil
}

func (in *instance) destroy() (final C.fvk_counters) {
	C.fvk_instance_destroy(in.c, &final)
	in.c = nil
	in.handle.Delete()
	return final
}

func (in *instance) count() int { return int(in.c.nphys) }

func (in *instance) query(i int) (Info, *C.fvk_info) {
	ci := (*C.fvk_info)(C.calloc(1, C.size_t(unsafe.Sizeof(C.fvk_info{}))))
	C.fvk_query(in.c, C.uint32_t(i), ci)
	return infoFromC(i, ci), ci
}

func infoFromC(index int, c *C.fvk_info) Info {
	b := func(v C.VkBool32) bool { return v != 0 }
	inf := Info{
		Index:                        index,
		Name:                         C.GoString(&c.name[0]),
		VendorID:                     uint32(c.vendor_id),
		DeviceID:                     uint32(c.device_id),
		Type:                         deviceTypeName(uint32(c.device_type)),
		DriverID:                     uint32(c.driver_id),
		DriverName:                   C.GoString(&c.driver_name[0]),
		DriverInfo:                   C.GoString(&c.driver_info[0]),
		DriverVersion:                driverVersionString(uint32(c.vendor_id), uint32(c.driver_version)),
		APIVersion:                   apiVersionString(uint32(c.api_version)),
		SubgroupSize:                 uint32(c.subgroup_size),
		MinSubgroupSize:              uint32(c.min_subgroup),
		MaxSubgroupSize:              uint32(c.max_subgroup),
		SubgroupSizeControl:          b(c.subgroup_size_control),
		ComputeFullSubgroups:         b(c.compute_full_subgroups),
		MaxComputeWorkgroupSubgroups: uint32(c.max_wg_subgroups),
		SubgroupExtendedTypes:        b(c.subgroup_ext_types),
		MaxSharedMemory:              uint32(c.max_shared),
		MaxWorkgroupInvocations:      uint32(c.max_wg_invocations),
		MaxPushConstants:             uint32(c.max_push),
		MaxStorageBuffersPerStage:    uint32(c.max_storage_buffers),
		MaxAllocation:                uint64(c.max_alloc),
		MaxStorageBufferRange:        uint64(c.max_storage_range),
		MaxBufferSize:                uint64(c.max_buffer_size),
		ComputeUnits:                 uint32(c.compute_units),
		BufferDeviceAddress:          b(c.bda),
		PipelineStatistics:           b(c.exec_props),
		MaxAllocationCount:           uint32(c.max_alloc_count),
		MinStorageAlignment:          uint64(c.min_storage_align),
		Float16:                      b(c.shader_float16),
		Int8:                         b(c.shader_int8),
		Int16:                        b(c.shader_int16),
		Int64:                        b(c.shader_int64),
		Float64:                      b(c.shader_float64),
		StorageBuffer16Bit:           b(c.storage16),
		StorageBuffer8Bit:            b(c.storage8),
		PushConstant16Bit:            b(c.push16),
		VulkanMemoryModel:            b(c.vmm),
		VulkanMemoryModelDeviceScope: b(c.vmm_device_scope),
		BFloat16:                     b(c.bf16_type),
		BFloat16DotProduct:           b(c.bf16_dot),
		BFloat16CoopMat:              b(c.bf16_coopmat),
		TimestampPeriodNs:            float32(c.timestamp_period),
		TimestampValidBits:           uint32(c.timestamp_valid_bits),
		QueueFamily:                  uint32(c.queue_family),
	}
	inf.Vendor = vendorName(inf.VendorID)
	if c.subgroup_stages&C.VK_SHADER_STAGE_COMPUTE_BIT != 0 {
		inf.SubgroupOps = subgroupOps(uint32(c.subgroup_ops))
	}
	for k := 0; k < 16; k++ {
		inf.PipelineCacheUUID[k] = byte(c.pipeline_cache_uuid[k])
	}
	for k := 0; k < 3; k++ {
		inf.MaxWorkgroupSize[k] = uint32(c.max_wg_size[k])
		inf.MaxWorkgroupCount[k] = uint32(c.max_wg_count[k])
	}
	for h := 0; h < int(c.nheaps); h++ {
		heap := Heap{Size: uint64(c.heap_size[h]), DeviceLocal: c.heap_flags[h]&C.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT != 0}
		for t := 0; t < int(c.ntypes); t++ {
			if int(c.type_heap[t]) == h && c.type_flags[t]&C.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT != 0 {
				heap.HostVisible = true
			}
		}
		inf.Heaps = append(inf.Heaps, heap)
	}
	for t := 0; t < int(c.ntypes); t++ {
		const want = C.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | C.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
		if c.type_flags[t]&want == want {
			inf.UnifiedMemory = true
		}
	}
	for k := 0; k < int(c.ncoopmat); k++ {
		s := &c.coopmats[k]
		inf.CoopMat = append(inf.CoopMat, CoopMatShape{
			M: uint32(s.MSize), N: uint32(s.NSize), K: uint32(s.KSize),
			A: componentName(int32(s.AType)), B: componentName(int32(s.BType)),
			C: componentName(int32(s.CType)), Result: componentName(int32(s.ResultType)),
			SaturatingAccumulate: s.saturatingAccumulation != 0,
			Scope:                scopeName(int32(s.scope)),
		})
	}
	f2 := &c.coopmat2
	inf.CoopMat2 = CoopMat2Features{
		WorkgroupScope:                     b(f2.cooperativeMatrixWorkgroupScope),
		FlexibleDimensions:                 b(f2.cooperativeMatrixFlexibleDimensions),
		Reductions:                         b(f2.cooperativeMatrixReductions),
		Conversions:                        b(f2.cooperativeMatrixConversions),
		PerElementOps:                      b(f2.cooperativeMatrixPerElementOperations),
		TensorAddressing:                   b(f2.cooperativeMatrixTensorAddressing),
		BlockLoads:                         b(f2.cooperativeMatrixBlockLoads),
		MaxWorkgroupScopeInvocations:       uint32(c.coopmat2_props.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize),
		FlexibleDimensionsMaxDimension:     uint32(c.coopmat2_props.cooperativeMatrixFlexibleDimensionsMaxDimension),
		WorkgroupScopeReservedSharedMemory: uint32(c.coopmat2_props.cooperativeMatrixWorkgroupScopeReservedSharedMemory),
	}
	if !inf.CoopMat2.Supported() {
		inf.CoopMat2 = CoopMat2Features{}
	}
	for k := 0; k < int(c.nflex); k++ {
		s := &c.flex[k]
		inf.CoopMat2.Flexible = append(inf.CoopMat2.Flexible, CoopMatFlexShape{
			MGranularity: uint32(s.MGranularity), NGranularity: uint32(s.NGranularity), KGranularity: uint32(s.KGranularity),
			A: componentName(int32(s.AType)), B: componentName(int32(s.BType)),
			C: componentName(int32(s.CType)), Result: componentName(int32(s.ResultType)),
			SaturatingAccumulate: s.saturatingAccumulation != 0,
			Scope:                scopeName(int32(s.scope)),
			WorkgroupInvocations: uint32(s.workgroupInvocations),
		})
	}
	return inf
}

// ---- Validation messages ---------------------------------------------------------

// logSink receives debug-utils messages for one instance.
type logSink struct {
	mu       sync.Mutex
	log      func(string)
	problems []string // warnings and errors, capped
	dropped  int
}

const maxProblems = 1000

func (s *logSink) add(severity, types int32, msg string) {
	level := "info"
	switch {
	case severity >= C.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT:
		level = "error"
	case severity >= C.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT:
		level = "warning"
	}
	kind := "general"
	switch {
	case types&C.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT != 0:
		kind = "validation"
	case types&C.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT != 0:
		kind = "performance"
	}
	line := fmt.Sprintf("vulkan %s %s: %s", kind, level, strings.TrimSpace(msg))
	s.mu.Lock()
	if level != "info" {
		if len(s.problems) < maxProblems {
			s.problems = append(s.problems, line)
		} else {
			s.dropped++
		}
	}
	log := s.log
	s.mu.Unlock()
	if log != nil {
		log(line)
	}
}

func (s *logSink) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]string(nil), s.problems...)
	if s.dropped > 0 {
		out = append(out, fmt.Sprintf("(%d more messages dropped)", s.dropped))
	}
	return out
}

//export fvkGoLog
func fvkGoLog(handle C.uintptr_t, severity, types C.int32_t, msg *C.char) {
	defer func() { _ = recover() }() // never unwind into the driver
	h := cgo.Handle(handle)
	s, ok := h.Value().(*logSink)
	if !ok || s == nil {
		return
	}
	s.add(int32(severity), int32(types), C.GoString(msg))
}
