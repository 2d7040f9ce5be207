package attention_test

import (
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/attention/attentiontest"
)

// TestKVCacheCPU runs the KV-cache suite (decoding over contiguous and
// paged caches, host and device forms, argument checks) on the CPU backend.
func TestKVCacheCPU(t *testing.T) {
	e, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	attentiontest.RunKVCache(t, e)
}
