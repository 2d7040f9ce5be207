//go:build cgo

package device

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap one of these where
// one applies (test with errors.Is) and carry context in their message.
var (
	// ErrNoVulkan: the Vulkan loader (libvulkan.so.1) could not be loaded
	// or no instance could be created.
	ErrNoVulkan = errors.New("device: Vulkan is not available")
	// ErrNoDevice: no (matching) physical device.
	ErrNoDevice = errors.New("device: no Vulkan device")
	// ErrNoValidation: Options.Validation was set but VK_LAYER_KHRONOS_validation
	// is not installed.
	ErrNoValidation = errors.New("device: Vulkan validation layer not installed")
	// ErrTimeout: the context ended (deadline or cancellation) before the
	// GPU finished. The work may still complete later.
	ErrTimeout = errors.New("device: timeout waiting for the GPU")
	// ErrDeviceLost: VK_ERROR_DEVICE_LOST. The Device refuses all further
	// work; Close it and open a new one.
	ErrDeviceLost = errors.New("device: device lost")
	// ErrClosed: the Device, Buffer or Pipeline was already closed.
	ErrClosed = errors.New("device: use of closed object")
	// ErrOutOfMemory: host or device memory exhausted.
	ErrOutOfMemory = errors.New("device: out of memory")
	// ErrTooLarge: a size exceeds a device limit.
	ErrTooLarge = errors.New("device: size exceeds device limit")
	// ErrInvalid: invalid argument (bad range, wrong device, misaligned size…).
	ErrInvalid = errors.New("device: invalid argument")
	// ErrUnsupported: the device lacks a feature the call needs.
	ErrUnsupported = errors.New("device: unsupported by this device")
)

// VkResult is a Vulkan result code.
type VkResult int32

// VkError is a failed Vulkan call. It matches ErrOutOfMemory, ErrDeviceLost
// or ErrTimeout with errors.Is where the code says so.
type VkError struct {
	Op   string // the failing call or operation, e.g. "vkCreateDevice"
	Code VkResult
}

func (e *VkError) Error() string { return fmt.Sprintf("device: %s: %s", e.Op, e.Code) }

// Is maps Vulkan result codes onto the package's sentinel errors.
func (e *VkError) Is(target error) bool {
	switch e.Code {
	case -1, -2: // VK_ERROR_OUT_OF_HOST_MEMORY, VK_ERROR_OUT_OF_DEVICE_MEMORY
		return target == ErrOutOfMemory
	case -4: // VK_ERROR_DEVICE_LOST
		return target == ErrDeviceLost
	case 2: // VK_TIMEOUT
		return target == ErrTimeout
	case -9: // VK_ERROR_INCOMPATIBLE_DRIVER
		return target == ErrNoVulkan
	case -7, -8: // VK_ERROR_EXTENSION_NOT_PRESENT, VK_ERROR_FEATURE_NOT_PRESENT
		return target == ErrUnsupported
	}
	return false
}

var resultNames = map[VkResult]string{
	0:           "VK_SUCCESS",
	1:           "VK_NOT_READY",
	2:           "VK_TIMEOUT",
	3:           "VK_EVENT_SET",
	4:           "VK_EVENT_RESET",
	5:           "VK_INCOMPLETE",
	-1:          "VK_ERROR_OUT_OF_HOST_MEMORY",
	-2:          "VK_ERROR_OUT_OF_DEVICE_MEMORY",
	-3:          "VK_ERROR_INITIALIZATION_FAILED",
	-4:          "VK_ERROR_DEVICE_LOST",
	-5:          "VK_ERROR_MEMORY_MAP_FAILED",
	-6:          "VK_ERROR_LAYER_NOT_PRESENT",
	-7:          "VK_ERROR_EXTENSION_NOT_PRESENT",
	-8:          "VK_ERROR_FEATURE_NOT_PRESENT",
	-9:          "VK_ERROR_INCOMPATIBLE_DRIVER",
	-10:         "VK_ERROR_TOO_MANY_OBJECTS",
	-11:         "VK_ERROR_FORMAT_NOT_SUPPORTED",
	-12:         "VK_ERROR_FRAGMENTED_POOL",
	-13:         "VK_ERROR_UNKNOWN",
	-1000069000: "VK_ERROR_OUT_OF_POOL_MEMORY",
	-1000072003: "VK_ERROR_INVALID_EXTERNAL_HANDLE",
	-1000161000: "VK_ERROR_FRAGMENTATION",
	-1000257000: "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS",
	1000297000:  "VK_PIPELINE_COMPILE_REQUIRED",
	-1000012000: "VK_ERROR_INVALID_SHADER_NV",
}

func (r VkResult) String() string {
	if s, ok := resultNames[r]; ok {
		return s
	}
	return fmt.Sprintf("VkResult(%d)", int32(r))
}

func vkErr(op string, code VkResult) error {
	if code == 0 {
		return nil
	}
	return &VkError{Op: op, Code: code}
}
