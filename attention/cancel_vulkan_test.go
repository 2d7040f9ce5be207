//go:build cgo

package attention_test

import (
	"os"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/internal/device"
)

// TestCancelCloseDuringCallVulkan closes a Vulkan engine during a long
// call (validation layer per FLASHVK_VALIDATION: Close reports its
// messages): Close returns promptly, the call fails with ErrClosed, and no
// Vulkan object outlives the engine.
func TestCancelCloseDuringCallVulkan(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates seconds of work")
	}
	skipWithoutVulkan(t)
	before := device.GlobalStats().Live
	e, err := attention.Open(attention.Config{Backend: attention.Vulkan, Validation: os.Getenv("FLASHVK_VALIDATION") == "1"})
	if err != nil {
		t.Fatal(err)
	}
	testCloseDuringCall(t, e)
	if after := device.GlobalStats().Live; after != before {
		t.Errorf("Vulkan objects alive after Close: %+v, before Open: %+v", after, before)
	}
}
