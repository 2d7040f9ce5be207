package main

import (
	"fmt"

	"github.com/flashvk/flashvk/internal/device"
)

// listGPUs lists the machine's Vulkan devices through package device.
// Errors wrap device.ErrNoVulkan (no loader) or device.ErrNoDevice.
func listGPUs() ([]GPUInfo, error) {
	infos, err := device.Devices()
	out := make([]GPUInfo, 0, len(infos))
	for _, in := range infos {
		g := GPUInfo{
			Index:                   in.Index,
			Name:                    in.Name,
			Vendor:                  in.Vendor,
			Type:                    in.Type,
			DriverName:              in.DriverName,
			DriverInfo:              in.DriverInfo,
			APIVersion:              in.APIVersion,
			SubgroupSize:            in.SubgroupSize,
			MaxSharedMemory:         in.MaxSharedMemory,
			MaxWorkgroupSize:        in.MaxWorkgroupSize,
			MaxWorkgroupInvocations: in.MaxWorkgroupInvocations,
			MaxAllocation:           in.MaxAllocation,
			DeviceLocalBytes:        in.DeviceLocalBytes(),
			Float16:                 in.Float16,
			Int8:                    in.Int8,
			BFloat16:                in.BFloat16,
			CoopMat:                 []string{},
			CoopMat2:                []string{},
		}
		for _, h := range in.Heaps {
			if !h.DeviceLocal {
				g.HostBytes += h.Size
			}
		}
		for _, s := range in.CoopMat {
			g.CoopMat = append(g.CoopMat, fmt.Sprintf("%dx%dx%d %s·%s+%s→%s (%s)", s.M, s.N, s.K, s.A, s.B, s.C, s.Result, s.Scope))
		}
		c2 := in.CoopMat2
		for _, f := range []struct {
			on   bool
			name string
		}{
			{c2.WorkgroupScope, "workgroup-scope"}, {c2.FlexibleDimensions, "flexible-dimensions"},
			{c2.Reductions, "reductions"}, {c2.Conversions, "conversions"}, {c2.PerElementOps, "per-element-ops"},
			{c2.TensorAddressing, "tensor-addressing"}, {c2.BlockLoads, "block-loads"},
		} {
			if f.on {
				g.CoopMat2 = append(g.CoopMat2, f.name)
			}
		}
		out = append(out, g)
	}
	return out, err
}
