//go:build cgo

// Package devicetest opens Vulkan devices for tests and holds the small
// test shaders (SPIRV) of the device and pipeline tests.
//
// Open skips the test when no Vulkan device exists, unless the environment
// sets FLASHVK_REQUIRE_VULKAN=1 (then it fails). It enables the Khronos
// validation layer when installed (FLASHVK_VALIDATION=1 requires it,
// FLASHVK_VALIDATION=0 disables it) and registers a cleanup that closes the
// device and fails the test on any validation warning or error.
// FLASHVK_DEVICE selects the device as in device.Options.Select.
//
//	func TestX(t *testing.T) {
//		d := devicetest.Open(t)
//		…
//	}
package devicetest

import (
	"embed"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/flashvk/flashvk/internal/device"
)

// Require reports whether FLASHVK_REQUIRE_VULKAN=1 is set.
func Require() bool { return os.Getenv("FLASHVK_REQUIRE_VULKAN") == "1" }

// Library is the Vulkan loader tests open: FLASHVK_VULKAN_LIBRARY, or ""
// for the default.
func Library() string { return os.Getenv("FLASHVK_VULKAN_LIBRARY") }

// Options returns the device options tests use: device selection from
// FLASHVK_DEVICE, the loader from FLASHVK_VULKAN_LIBRARY and validation
// per FLASHVK_VALIDATION (default: on when the layer is installed). It
// fails t when FLASHVK_VALIDATION=1 and the layer is missing.
func Options(t testing.TB) device.Options {
	t.Helper()
	opt := device.Options{Select: os.Getenv("FLASHVK_DEVICE"), Library: Library()}
	switch v := os.Getenv("FLASHVK_VALIDATION"); v {
	case "1":
		if !device.ValidationAvailable(opt.Library) {
			t.Fatalf("FLASHVK_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not installed (apt install vulkan-validationlayers)")
		}
		opt.Validation = true
	case "0":
	default:
		opt.Validation = device.ValidationAvailable(opt.Library)
	}
	return opt
}

var (
	skipOnce   sync.Once
	skipReason string
)

// probe checks once per process whether any Vulkan device exists.
func probe() string {
	skipOnce.Do(func() {
		_, err := device.Devices(Library())
		switch {
		case err == nil:
		case errors.Is(err, device.ErrNoVulkan), errors.Is(err, device.ErrNoDevice):
			skipReason = err.Error()
		default:
			skipReason = "Vulkan device enumeration failed: " + err.Error()
		}
	})
	return skipReason
}

// Skip skips (or, with FLASHVK_REQUIRE_VULKAN=1, fails) t when no Vulkan
// device is available.
func Skip(t testing.TB) {
	t.Helper()
	if reason := probe(); reason != "" {
		if Require() {
			t.Fatalf("FLASHVK_REQUIRE_VULKAN=1 but no Vulkan device: %s", reason)
		}
		t.Skipf("no Vulkan device (set FLASHVK_REQUIRE_VULKAN=1 to fail instead): %s", reason)
	}
}

// Open opens a device for t (see the package documentation). The device
// is closed by t.Cleanup, which also fails t on validation messages.
func Open(t testing.TB) *device.Device {
	t.Helper()
	return OpenWith(t, Options(t))
}

// OpenWith is Open with explicit options. When opt.Log is nil, messages are
// logged with t.Log.
func OpenWith(t testing.TB, opt device.Options) *device.Device {
	t.Helper()
	Skip(t)
	if opt.Log == nil {
		var mu sync.Mutex
		done := false
		t.Cleanup(func() { mu.Lock(); done = true; mu.Unlock() })
		opt.Log = func(msg string) {
			mu.Lock()
			defer mu.Unlock()
			if !done {
				t.Log(msg)
			}
		}
	}
	d, err := device.Open(opt)
	if err != nil {
		if (errors.Is(err, device.ErrNoVulkan) || errors.Is(err, device.ErrNoDevice)) && !Require() {
			t.Skipf("no Vulkan device: %v", err)
		}
		t.Fatalf("device.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("device.Close: %v", err)
		}
		CheckValidation(t, d)
	})
	return d
}

// CheckValidation fails t if d has recorded validation warnings or errors.
func CheckValidation(t testing.TB, d *device.Device) {
	t.Helper()
	if msgs := d.ValidationErrors(); len(msgs) > 0 {
		t.Errorf("%d Vulkan validation message(s):\n%s", len(msgs), strings.Join(msgs, "\n"))
	}
}

//go:embed testdata/*.spv
var shaders embed.FS

// SPIRV returns the test shader name: testdata/name.spv, compiled from
// name.comp by the Makefile there. It fails t when there is none.
func SPIRV(t testing.TB, name string) []byte {
	t.Helper()
	b, err := shaders.ReadFile("testdata/" + name + ".spv")
	if err != nil {
		t.Fatalf("test shader %s: %v", name, err)
	}
	return b
}
