//go:build cgo

package device

import (
	"fmt"
	"strings"
)

// Info describes a physical device: identity, limits and the compute
// features flashvk cares about. For an open Device, feature flags describe
// what is enabled (flashvk enables every listed feature the device supports).
type Info struct {
	Index    int    // position in Devices()
	Name     string // e.g. "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)"
	Vendor   string // "nvidia", "amd", "intel", "mesa", "arm", "qualcomm", "apple", … or "0x…" when unknown
	VendorID uint32
	DeviceID uint32
	Type     string // "discrete", "integrated", "virtual", "cpu", "other"

	DriverID      uint32 // VkDriverId, 0 when unknown
	DriverName    string // e.g. "NVIDIA", "llvmpipe"
	DriverInfo    string // e.g. "580.65.06", "Mesa 22.3.6 (LLVM 15.0.6)"
	DriverVersion string // decoded with the vendor's convention, e.g. "580.65.6"
	APIVersion    string // device Vulkan version, e.g. "1.3.230"
	// PipelineCacheUUID identifies the driver's pipeline cache format.
	PipelineCacheUUID [16]byte

	// Subgroups.
	SubgroupSize                 uint32 // default subgroup size
	MinSubgroupSize              uint32
	MaxSubgroupSize              uint32
	SubgroupSizeControl          bool // PipelineDesc.RequiredSubgroupSize is honoured for compute
	ComputeFullSubgroups         bool // PipelineDesc.FullSubgroups is honoured
	MaxComputeWorkgroupSubgroups uint32
	SubgroupOps                  SubgroupOps // operations supported in compute shaders
	SubgroupExtendedTypes        bool        // subgroup ops on 8/16/64-bit types

	// Compute limits.
	MaxSharedMemory           uint32 // bytes of shared memory per workgroup
	MaxWorkgroupSize          [3]uint32
	MaxWorkgroupInvocations   uint32
	MaxWorkgroupCount         [3]uint32
	MaxPushConstants          uint32 // bytes
	MaxStorageBuffersPerStage uint32
	// ComputeUnits is the number of streaming multiprocessors
	// (VK_NV_shader_sm_builtins) or compute units
	// (VK_AMD_shader_core_properties); 0 where the driver does not say.
	ComputeUnits uint32

	// Memory.
	MaxAllocation         uint64 // maintenance3 maxMemoryAllocationSize (NewBuffer may try beyond it)
	MaxStorageBufferRange uint64 // most bytes one storage-buffer binding covers
	MaxBufferSize         uint64 // maintenance4 maxBufferSize, 0 when unknown
	MaxAllocationCount    uint32
	MinStorageAlignment   uint64 // minStorageBufferOffsetAlignment
	Heaps                 []Heap
	// UnifiedMemory reports that device-local memory is also host-visible
	// (CPU drivers, integrated GPUs, resizable BAR).
	UnifiedMemory bool
	// BufferDeviceAddress: bufferDeviceAddress (Vulkan 1.2, or
	// VK_KHR_buffer_device_address on 1.1). Device-local Buffers then
	// have a 64-bit Buffer.Address through which shaders read them
	// (GL_EXT_buffer_reference), and may be larger than
	// MaxStorageBufferRange. For an open Device: enabled (see
	// Options.NoBufferDeviceAddress).
	BufferDeviceAddress bool
	// DispatchBase: vkCmdDispatchBase (Vulkan 1.1) is available, so that
	// Recorder.DispatchBase can run part of a grid (every pipeline of an
	// open Device is then created to allow it). Set for an open Device
	// only.
	DispatchBase bool
	// PipelineStatistics: VK_KHR_pipeline_executable_properties with
	// pipelineExecutableInfo, through which the driver reports each
	// pipeline's compiler statistics (register count, spills, shared
	// memory…: Pipeline.Statistics). From Devices: supported; for an open
	// Device: enabled (Options.PipelineStatistics asks for it).
	PipelineStatistics bool

	// Shader arithmetic and storage types.
	Float16, Int8, Int16, Int64, Float64  bool
	StorageBuffer16Bit, StorageBuffer8Bit bool
	PushConstant16Bit                     bool
	VulkanMemoryModel                     bool
	VulkanMemoryModelDeviceScope          bool
	BFloat16                              bool // VK_KHR_shader_bfloat16 shaderBFloat16Type
	BFloat16DotProduct                    bool
	BFloat16CoopMat                       bool

	// Cooperative matrices (VK_KHR_cooperative_matrix); empty when unsupported.
	CoopMat []CoopMatShape
	// NVIDIA cooperative matrix 2 (VK_NV_cooperative_matrix2); zero when unsupported.
	CoopMat2 CoopMat2Features

	// Timestamps.
	TimestampPeriodNs  float32 // nanoseconds per timestamp tick
	TimestampValidBits uint32  // 0: the compute queue has no timestamps
	QueueFamily        uint32  // queue family used for compute
}

// Heap is a device memory heap.
type Heap struct {
	Size        uint64
	DeviceLocal bool
	HostVisible bool // some memory type on this heap is host-visible
}

// SubgroupOps lists the subgroup operation classes supported in compute
// shaders (VkSubgroupFeatureFlags).
type SubgroupOps struct {
	Basic, Vote, Arithmetic, Ballot, Shuffle, ShuffleRelative, Clustered, Quad bool
}

func (s SubgroupOps) String() string {
	var parts []string
	for _, p := range []struct {
		ok   bool
		name string
	}{{s.Basic, "basic"}, {s.Vote, "vote"}, {s.Arithmetic, "arithmetic"}, {s.Ballot, "ballot"},
		{s.Shuffle, "shuffle"}, {s.ShuffleRelative, "shuffle_relative"}, {s.Clustered, "clustered"}, {s.Quad, "quad"}} {
		if p.ok {
			parts = append(parts, p.name)
		}
	}
	return strings.Join(parts, ",")
}

// CoopMatShape is one supported cooperative-matrix configuration
// (VkCooperativeMatrixPropertiesKHR): an MxK A times KxN B plus MxN C.
// Types are "f16", "f32", "f64", "bf16", "i8", "i16", "i32", "i64", "u8",
// "u16", "u32", "u64", "e4m3", "e5m2", …
type CoopMatShape struct {
	M, N, K              uint32
	A, B, C, Result      string
	SaturatingAccumulate bool
	Scope                string // "subgroup", "workgroup", "device", "queuefamily"
}

func (s CoopMatShape) String() string {
	return fmt.Sprintf("%dx%dx%d %s*%s+%s->%s/%s", s.M, s.N, s.K, s.A, s.B, s.C, s.Result, s.Scope)
}

// CoopMat2Features are the VK_NV_cooperative_matrix2 features and limits.
type CoopMat2Features struct {
	WorkgroupScope, FlexibleDimensions, Reductions, Conversions bool
	PerElementOps, TensorAddressing, BlockLoads                 bool
	// MaxWorkgroupScopeInvocations: cooperativeMatrixWorkgroupScopeMaxWorkgroupSize.
	MaxWorkgroupScopeInvocations uint32
	// FlexibleDimensionsMaxDimension: largest M/N/K with flexible dimensions.
	FlexibleDimensionsMaxDimension uint32
	// WorkgroupScopeReservedSharedMemory: bytes of shared memory reserved
	// by the implementation for workgroup-scope matrices.
	WorkgroupScopeReservedSharedMemory uint32
	// Flexible lists the flexible-dimension configurations.
	Flexible []CoopMatFlexShape
}

// Supported reports whether any coopmat2 feature is available.
func (c CoopMat2Features) Supported() bool {
	return c.WorkgroupScope || c.FlexibleDimensions || c.Reductions || c.Conversions ||
		c.PerElementOps || c.TensorAddressing || c.BlockLoads
}

// CoopMatFlexShape is a VkCooperativeMatrixFlexibleDimensionsPropertiesNV.
type CoopMatFlexShape struct {
	MGranularity, NGranularity, KGranularity uint32
	A, B, C, Result                          string
	SaturatingAccumulate                     bool
	Scope                                    string
	WorkgroupInvocations                     uint32
}

// HasCoopMat reports whether a cooperative-matrix shape with these
// component types (and subgroup scope) is supported; m, n or k of 0 match
// any size.
func (i Info) HasCoopMat(m, n, k uint32, a, b, c, result string) bool {
	for _, s := range i.CoopMat {
		if (m == 0 || s.M == m) && (n == 0 || s.N == n) && (k == 0 || s.K == k) &&
			s.A == a && s.B == b && s.C == c && s.Result == result && s.Scope == "subgroup" {
			return true
		}
	}
	return false
}

// DeviceLocalBytes is the total size of device-local heaps.
func (i Info) DeviceLocalBytes() uint64 {
	var n uint64
	for _, h := range i.Heaps {
		if h.DeviceLocal {
			n += h.Size
		}
	}
	return n
}

// String is a one-line summary.
func (i Info) String() string {
	return fmt.Sprintf("#%d %s (%s %s, %s, driver %s %s, Vulkan %s, subgroup %d [%d..%d], shared %d KiB, coopmat %d shapes, coopmat2 %v, bf16 %v)",
		i.Index, i.Name, i.Vendor, i.Type, fmt.Sprintf("%04x:%04x", i.VendorID, i.DeviceID), i.DriverName, i.DriverInfo,
		i.APIVersion, i.SubgroupSize, i.MinSubgroupSize, i.MaxSubgroupSize, i.MaxSharedMemory/1024,
		len(i.CoopMat), i.CoopMat2.Supported(), i.BFloat16)
}

func vendorName(id uint32) string {
	switch id {
	case 0x10DE:
		return "nvidia"
	case 0x1002, 0x1022:
		return "amd"
	case 0x8086:
		return "intel"
	case 0x13B5:
		return "arm"
	case 0x5143:
		return "qualcomm"
	case 0x1010:
		return "imgtec"
	case 0x106B:
		return "apple"
	case 0x10005:
		return "mesa"
	case 0x144D:
		return "samsung"
	}
	return fmt.Sprintf("0x%x", id)
}

func deviceTypeName(t uint32) string {
	switch t {
	case 1:
		return "integrated"
	case 2:
		return "discrete"
	case 3:
		return "virtual"
	case 4:
		return "cpu"
	}
	return "other"
}

func apiVersionString(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", (v>>22)&0x7f, (v>>12)&0x3ff, v&0xfff)
}

func driverVersionString(vendor, v uint32) string {
	if vendor == 0x10DE { // NVIDIA: 10.8.8.6 bits
		return fmt.Sprintf("%d.%d.%d", (v>>22)&0x3ff, (v>>14)&0xff, (v>>6)&0xff)
	}
	return apiVersionString(v)
}

func componentName(t int32) string {
	switch t {
	case 0:
		return "f16"
	case 1:
		return "f32"
	case 2:
		return "f64"
	case 3:
		return "i8"
	case 4:
		return "i16"
	case 5:
		return "i32"
	case 6:
		return "i64"
	case 7:
		return "u8"
	case 8:
		return "u16"
	case 9:
		return "u32"
	case 10:
		return "u64"
	case 1000141000:
		return "bf16"
	case 1000491000:
		return "i8packed"
	case 1000491001:
		return "u8packed"
	case 1000491002:
		return "e4m3"
	case 1000491003:
		return "e5m2"
	}
	return fmt.Sprintf("type%d", t)
}

func scopeName(s int32) string {
	switch s {
	case 1:
		return "device"
	case 2:
		return "workgroup"
	case 3:
		return "subgroup"
	case 5:
		return "queuefamily"
	}
	return fmt.Sprintf("scope%d", s)
}

func subgroupOps(f uint32) SubgroupOps {
	return SubgroupOps{
		Basic:           f&0x1 != 0,
		Vote:            f&0x2 != 0,
		Arithmetic:      f&0x4 != 0,
		Ballot:          f&0x8 != 0,
		Shuffle:         f&0x10 != 0,
		ShuffleRelative: f&0x20 != 0,
		Clustered:       f&0x40 != 0,
		Quad:            f&0x80 != 0,
	}
}
