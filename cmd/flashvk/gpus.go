package main

import (
	"io"
	"os"

	"golang.org/x/term"
)

// GPUInfo is what flashvk shows of a Vulkan physical device. It mirrors
// device.Info (package device), flattened to printable values so the
// commands do not depend on that package's types.
type GPUInfo struct {
	Index                   int       `json:"index"`
	Name                    string    `json:"name"`
	Vendor                  string    `json:"vendor"`
	Type                    string    `json:"type"`
	DriverName              string    `json:"driver_name"`
	DriverInfo              string    `json:"driver_info"`
	APIVersion              string    `json:"api_version"`
	SubgroupSize            uint32    `json:"subgroup_size"`
	MaxSharedMemory         uint32    `json:"max_shared_memory"`
	MaxWorkgroupSize        [3]uint32 `json:"max_workgroup_size"`
	MaxWorkgroupInvocations uint32    `json:"max_workgroup_invocations"`
	MaxAllocation           uint64    `json:"max_allocation"`
	DeviceLocalBytes        uint64    `json:"device_local_bytes"`
	HostBytes               uint64    `json:"host_bytes"`
	Float16                 bool      `json:"float16"`
	Int8                    bool      `json:"int8"`
	BFloat16                bool      `json:"bfloat16"`
	// CoopMat lists the cooperative-matrix shapes, e.g.
	// "16x16x16 float16·float16→float32 (subgroup)".
	CoopMat []string `json:"coopmat"`
	// CoopMat2 lists the NV cooperative-matrix-2 features present.
	CoopMat2 []string `json:"coopmat2"`
}

// driver is the driver name and info as one string.
func (g *GPUInfo) driver() string {
	switch {
	case g.DriverName == "":
		return g.DriverInfo
	case g.DriverInfo == "":
		return g.DriverName
	}
	return g.DriverName + " " + g.DriverInfo
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
