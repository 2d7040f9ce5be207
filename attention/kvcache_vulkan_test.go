package attention_test

import (
	"context"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/attention/attentiontest"
)

// TestKVCacheVulkan runs the KV-cache suite (contiguous and paged caches,
// appends, host and device forms, bitwise determinism, argument checks)
// on the Vulkan backend's default kernels: skipped without a device
// (failed with FLASHVK_REQUIRE_VULKAN=1), like TestConformanceVulkan.
// The argument checks run first (they never reach the kernels); then one
// small call must succeed, so that a device without KV-cache kernels fails
// once here rather than in every case.
func TestKVCacheVulkan(t *testing.T) {
	e := openVulkanConfig(t, attention.Config{})
	t.Logf("%+v", e.Info())
	t.Run("errors", func(t *testing.T) { attentiontest.RunKVCacheErrors(t, e) })
	if err := kvProbe(e); err != nil {
		t.Fatalf("KV-cache call on %s: %v", e.Info().Device, err)
	}
	t.Run("forward", func(t *testing.T) { attentiontest.RunKVCacheCases(t, e, attentiontest.KVCases()) })
}

// kvProbe is one small decoding step (a 3-row cache, one appended row).
func kvProbe(e *attention.Engine) error {
	kv := attention.Shape{B: 1, S: 4, H: 1, D: 16}
	row := attention.Shape{B: 1, S: 1, H: 1, D: 16}
	k, _ := attention.NewTensor(attention.Float32, kv, attention.BSHD)
	v, _ := attention.NewTensor(attention.Float32, kv, attention.BSHD)
	q, _ := attention.NewTensor(attention.Float32, row, attention.BSHD)
	_, err := e.ForwardKVCache(context.Background(), q, &attention.KVCache{K: k, V: v, SeqLens: []int32{3}}, q, q, attention.Options{Causal: true, Align: attention.BottomRight})
	return err
}
