package attention_test

import (
	"errors"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/attention/attentiontest"
	"github.com/flashvk/flashvk/device"
	"github.com/flashvk/flashvk/device/devicetest"
)

// openVulkan opens a Vulkan engine for t with devicetest's rules: skip
// without a device (fail with FLASHVK_REQUIRE_VULKAN=1), validation per
// FLASHVK_VALIDATION, and Close failing t on validation messages.
func openVulkan(t *testing.T, kernel string) *attention.Engine {
	t.Helper()
	devicetest.Skip(t)
	opt := devicetest.Options(t)
	e, err := attention.Open(attention.Config{Backend: attention.Vulkan, Device: opt.Select, Kernel: kernel, Validation: opt.Validation})
	if err != nil {
		if (errors.Is(err, device.ErrNoVulkan) || errors.Is(err, device.ErrNoDevice)) && !devicetest.Require() {
			t.Skipf("no Vulkan device: %v", err)
		}
		t.Fatalf("open vulkan (%s): %v", kernel, err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

func TestConformanceVulkan(t *testing.T) {
	e := openVulkan(t, "flash")
	t.Logf("%+v", e.Info())
	attentiontest.Run(t, e)
}
