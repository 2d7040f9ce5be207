//go:build cgo

package device_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
)

func TestSelect(t *testing.T) {
	gib := uint64(1 << 30)
	infos := []device.Info{
		{Index: 0, Name: "llvmpipe (LLVM 15.0.6, 256 bits)", Vendor: "mesa", Type: "cpu", DriverID: 13},
		{Index: 1, Name: "Intel(R) UHD Graphics 770", Vendor: "intel", Type: "integrated", Heaps: []device.Heap{{Size: 8 * gib, DeviceLocal: true}}},
		{Index: 2, Name: "NVIDIA H200", Vendor: "nvidia", Type: "discrete", Heaps: []device.Heap{{Size: 140 * gib, DeviceLocal: true}}},
		{Index: 3, Name: "AMD Radeon RX 7900 XTX", Vendor: "amd", Type: "discrete", Heaps: []device.Heap{{Size: 24 * gib, DeviceLocal: true}}},
		{Index: 4, Name: "Broken", Vendor: "nvidia", Type: "discrete", QueueFamily: ^uint32(0), Heaps: []device.Heap{{Size: 999 * gib, DeviceLocal: true}}},
	}
	for sel, want := range map[string]int{
		"": 2, "best": 2, "BEST": 2, "0": 0, "3": 3, " 1 ": 1,
		"nvidia": 2, "amd": 3, "intel": 1, "lavapipe": 0, "llvmpipe": 0, "cpu": 0,
		"discrete": 2, "integrated": 1, "gpu": 2, "radeon": 3, "H200": 2, "uhd graphics": 1,
	} {
		got, err := device.Select(infos, sel)
		require.NoError(t, err, sel)
		assert.Equal(t, want, got, "Select(%q)", sel)
	}
	for _, sel := range []string{"4", "99", "-1", "apple", "virtual", "no such device"} {
		_, err := device.Select(infos, sel)
		require.ErrorIs(t, err, device.ErrNoDevice, sel)
		assert.Contains(t, err.Error(), "NVIDIA H200", "the error lists the devices")
	}
	_, err := device.Select(nil, "")
	assert.ErrorIs(t, err, device.ErrNoDevice)
}

// TestNoVulkan runs this test binary with a loader path that does not
// exist: everything must fail cleanly with ErrNoVulkan, and devicetest must
// skip (or fail when FLASHVK_REQUIRE_VULKAN=1).
func TestNoVulkan(t *testing.T) {
	if os.Getenv("FLASHVK_TEST_NO_VULKAN_CHILD") == "1" {
		lib := devicetest.Library()
		_, err := device.Devices(lib)
		require.ErrorIs(t, err, device.ErrNoVulkan)
		_, err = device.Open(device.Options{Library: lib})
		require.ErrorIs(t, err, device.ErrNoVulkan)
		assert.False(t, device.ValidationAvailable(lib))
		_, err = device.LoaderVersion(lib)
		require.ErrorIs(t, err, device.ErrNoVulkan)
		devicetest.Skip(t) // skips, or fails under FLASHVK_REQUIRE_VULKAN=1
		t.Fatal("not reached")
	}
	for _, require_ := range []string{"0", "1"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNoVulkan$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "FLASHVK_TEST_NO_VULKAN_CHILD=1",
			"FLASHVK_VULKAN_LIBRARY=/nonexistent/libvulkan.so.1", "FLASHVK_REQUIRE_VULKAN="+require_)
		out, err := cmd.CombinedOutput()
		if require_ == "0" {
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "--- SKIP: TestNoVulkan")
			assert.Contains(t, string(out), "/nonexistent/libvulkan.so.1")
		} else {
			require.Error(t, err, "%s", out)
			assert.Contains(t, string(out), "FLASHVK_REQUIRE_VULKAN=1 but no Vulkan device")
		}
	}
}

// TestValidationReportsErrors checks that validation-layer errors reach
// ValidationErrors and Options.Log: a pipeline that requires full subgroups
// with a workgroup size that is not a multiple of the subgroup size.
func TestValidationReportsErrors(t *testing.T) {
	devicetest.Skip(t)
	if !device.ValidationAvailable(devicetest.Library()) {
		t.Skip("validation layer not installed")
	}
	var logged []string
	d, err := device.Open(device.Options{Validation: true, Select: os.Getenv("FLASHVK_DEVICE"),
		Log: func(m string) { logged = append(logged, m) }})
	require.NoError(t, err)
	defer d.Close()
	inf := d.Info()
	if !inf.ComputeFullSubgroups || inf.MaxSubgroupSize < 2 {
		t.Skip("no full-subgroup control")
	}
	p, err := d.NewPipeline(device.PipelineDesc{SPIRV: devicetest.SPIRV(t, "vadd"), PushSize: 8, Bindings: 3, FullSubgroups: true,
		Spec: []device.Spec{{ID: 0, Value: inf.MaxSubgroupSize + 1}}})
	if err == nil {
		_ = p.Close()
	}
	msgs := d.ValidationErrors()
	require.NotEmpty(t, msgs, "the validation layer reported nothing")
	assert.Contains(t, msgs[0], "vulkan validation error")
	assert.NotEmpty(t, logged)
	t.Logf("caught: %.200s", msgs[0])
}
