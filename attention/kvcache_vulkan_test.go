package attention_test

import (
	"context"
	"errors"
	"strings"
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

// TestKVCacheBenchmarkVulkan: BenchmarkKVCache uploads once and times
// every call with GPU timestamps, appends included, leaving SeqLens alone;
// it refuses a backward.
func TestKVCacheBenchmarkVulkan(t *testing.T) {
	e := openVulkanConfig(t, attention.Config{})
	kv := attention.Shape{B: 2, S: 64, H: 2, D: 32}
	k, _ := attention.NewTensor(attention.Float16, kv, attention.BSHD)
	v, _ := attention.NewTensor(attention.Float16, kv, attention.BSHD)
	q, _ := attention.NewTensor(attention.Float16, attention.Shape{B: 2, S: 2, H: 4, D: 32}, attention.BSHD)
	nk, _ := attention.NewTensor(attention.Float16, attention.Shape{B: 2, S: 2, H: 2, D: 32}, attention.BSHD)
	cache := &attention.KVCache{K: k, V: v, SeqLens: []int32{10, 40}}
	opt := attention.Options{Causal: true, Align: attention.BottomRight}
	r, err := e.BenchmarkKVCache(context.Background(), q, cache, nk, nk, opt, attention.BenchOptions{Warmup: 1, Iters: 3, PerKernel: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Times) != 3 || r.Median() <= 0 || len(r.Kernels) < 2 || r.Flops <= 0 {
		t.Errorf("times %v, %d kernels, flops %g", r.Times, len(r.Kernels), r.Flops)
	}
	if cache.SeqLens[0] != 10 || cache.SeqLens[1] != 40 {
		t.Errorf("SeqLens %v changed", cache.SeqLens)
	}
	if _, err := e.BenchmarkKVCache(context.Background(), q, cache, nk, nk, opt, attention.BenchOptions{Backward: true}); !errors.Is(err, attention.ErrOption) {
		t.Errorf("backward: %v, want ErrOption", err)
	}
}

// TestKVCacheWindowPlanVulkan: a sliding window over a long cache splits
// only the rows it sees (decode's splits start at each sequence's first
// visible row), in decode's window variant; the plain call's variant
// carries no options.
func TestKVCacheWindowPlanVulkan(t *testing.T) {
	e := openVulkanConfig(t, attention.Config{})
	ctx := context.Background()
	q := attention.Shape{B: 1, S: 1, H: 8, D: 64}
	kv := attention.Shape{B: 1, S: 1 << 16, H: 1, D: 64}
	cache := &attention.KVCache{K: attention.Tensor{Shape: kv}, V: attention.Tensor{Shape: kv}, SeqLens: []int32{1<<16 - 1}}
	opt := attention.Options{Causal: true, Align: attention.BottomRight}
	plain, err := e.PlanKVCache(ctx, q, cache, 1, attention.BSHD, attention.Float32, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.Window = &attention.Window{Left: 511, Right: 0}
	win, err := e.PlanKVCache(ctx, q, cache, 1, attention.BSHD, attention.Float32, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plain: %d splits of %d rows; window 511: %d of %d", plain.Splits, plain.SplitKeys, win.Splits, win.SplitKeys)
	if cover := win.Splits * win.SplitKeys; cover < 512 || cover >= plain.Splits*plain.SplitKeys || cover >= 1<<16 {
		t.Errorf("window of 512 rows: %d splits of %d rows, plain %d of %d", win.Splits, win.SplitKeys, plain.Splits, plain.SplitKeys)
	}
	config := func(p *attention.Plan) string {
		for _, l := range p.Launches {
			if l.Kernel == "decode" {
				return l.Config
			}
		}
		return ""
	}
	if c := config(plain); c == "" || strings.Contains(c, "ext") {
		t.Errorf("plain decode: config %q, want decode without ext", c)
	}
	if c := config(win); !strings.Contains(c, "ext1") {
		t.Errorf("window decode: config %q, want ext1", c)
	}
}
