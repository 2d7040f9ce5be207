package attention

import "os"

// DeviceInfo describes a Vulkan device: what `flashvk devices` lists and
// what a Vulkan engine reports in BackendInfo.Device.
type DeviceInfo struct {
	// Index is the device's position in Devices (what Config.Device takes).
	Index int `json:"index"`
	// Name, Vendor ("nvidia", "amd", "intel", "mesa", … or "0x…") and Type
	// ("discrete", "integrated", "virtual", "cpu", "other").
	Name   string `json:"name"`
	Vendor string `json:"vendor"`
	Type   string `json:"type"`
	// Software: a CPU implementation (Type "cpu", such as Mesa's lavapipe),
	// which Auto uses only when it is named.
	Software   bool   `json:"software"`
	DriverName string `json:"driver_name"`
	DriverInfo string `json:"driver_info"`
	// APIVersion is the device's Vulkan version, e.g. "1.3.230".
	APIVersion string `json:"api_version"`
	// SubgroupSize, the shared memory per workgroup (bytes) and the
	// workgroup limits: what kernel tiles are chosen for.
	SubgroupSize            uint32    `json:"subgroup_size"`
	MaxSharedMemory         uint32    `json:"max_shared_memory"`
	MaxWorkgroupSize        [3]uint32 `json:"max_workgroup_size"`
	MaxWorkgroupInvocations uint32    `json:"max_workgroup_invocations"`
	MaxAllocation           uint64    `json:"max_allocation"`
	DeviceLocalBytes        uint64    `json:"device_local_bytes"`
	HostBytes               uint64    `json:"host_bytes"`
	// Float16, Int8 and BFloat16 are the device's shader arithmetic types
	// (shaderFloat16, shaderInt8, VK_KHR_shader_bfloat16); the storage
	// types flashvk runs there are BackendInfo.DTypes.
	Float16  bool `json:"float16"`
	Int8     bool `json:"int8"`
	BFloat16 bool `json:"bfloat16"`
	// PipelineStatistics: the driver reports the compiler statistics of
	// pipelines (VK_KHR_pipeline_executable_properties), which
	// Config.PipelineStatistics asks for (in a Vulkan engine's
	// BackendInfo: asked for and enabled).
	PipelineStatistics bool `json:"pipeline_statistics"`
	// CoopMat lists the cooperative-matrix shapes, e.g.
	// "16x16x16 f16·f16+f32→f32 (subgroup)"; CoopMat2 the NV
	// cooperative-matrix-2 features present.
	CoopMat  []string `json:"coopmat"`
	CoopMat2 []string `json:"coopmat2"`
	// Auto marks the device Config{} (Backend Auto, no Device) runs on:
	// the best hardware device. Where none is marked, Auto runs on the CPU.
	Auto bool `json:"auto"`
}

// Driver is the driver name and info as one string.
func (d *DeviceInfo) Driver() string {
	switch {
	case d.DriverName == "":
		return d.DriverInfo
	case d.DriverInfo == "":
		return d.DriverName
	}
	return d.DriverName + " " + d.DriverInfo
}

// Devices lists the machine's Vulkan devices (through the loader cfg
// names, FLASHVK_VULKAN_LIBRARY or the default), marking the one Auto
// picks. Without a Vulkan loader, with no device, or in a binary built
// without cgo it returns an error wrapping ErrBackend that says why.
func Devices(cfg Config) ([]DeviceInfo, error) {
	cfg, err := cfg.withEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	return vulkanDevices(cfg)
}
