//go:build !cgo

package attention

import "fmt"

// errNoCgo is why a binary built without cgo has no Vulkan backend.
var errNoCgo = fmt.Errorf("attention: backend vulkan: this binary was built without cgo (CGO_ENABLED=0), and the Vulkan runtime needs it: %w", ErrBackend)

func openVulkan(Config) (backend, error) { return nil, errNoCgo }

func vulkanDevices(Config) ([]DeviceInfo, error) { return nil, errNoCgo }

// TuneFamilies lists the tunable stages of the Vulkan kernel families:
// none in a binary built without cgo.
func TuneFamilies() []string { return nil }
