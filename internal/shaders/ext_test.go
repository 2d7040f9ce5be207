package shaders

import (
	"testing"

	"github.com/flashvk/flashvk/internal/spec"
)

// TestPlainBounds: the extended forward kernels take the plain kernel's
// bounds (ExtSpecPlainBounds) only where every row sees the keys its mask
// gives it — a causal window aligned as the mask, or none — and never with
// a left window, a right window of its own, key counts, packed sequences
// or a KV cache; the backward kernels never do.
func TestPlainBounds(t *testing.T) {
	base := func(m spec.Mask, e spec.Ext) *spec.Problem {
		return &spec.Problem{B: 2, Hq: 4, Hkv: 2, Nq: 100, Nk: 120, D: 64, Dv: 64, Scale: 0.125, Mask: m, Ext: &e}
	}
	slopes := []float32{0.5, 0.25, 0.125, 0.0625}
	for _, c := range []struct {
		name string
		p    *spec.Problem
		want bool
	}{
		{"plain problem", &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: 8, Nk: 8, D: 8, Dv: 8, Scale: 1}, false},
		{"softcap, no mask", base(spec.MaskNone, spec.Ext{Left: -1, Right: -1, Softcap: 30}), true},
		{"ALiBi bottom-right, no mask", base(spec.MaskNone, spec.Ext{Left: -1, Right: -1, BottomRight: true, Slopes: slopes}), true},
		{"causal top-left", base(spec.MaskCausalTopLeft, spec.Ext{Left: -1, Right: 0, Softcap: 30}), true},
		{"causal bottom-right", base(spec.MaskCausalBottomRight, spec.Ext{Left: -1, Right: 0, BottomRight: true, Slopes: slopes}), true},
		{"dropout, causal", base(spec.MaskCausalTopLeft, spec.Ext{Left: -1, Right: 0, Dropout: &spec.Dropout{Threshold: 26}}), true},
		{"causal mask, window aligned the other way", base(spec.MaskCausalTopLeft, spec.Ext{Left: -1, Right: 0, BottomRight: true}), false},
		{"causal mask, unbounded window", base(spec.MaskCausalTopLeft, spec.Ext{Left: -1, Right: -1, Softcap: 30}), false},
		{"left window", base(spec.MaskCausalTopLeft, spec.Ext{Left: 16, Right: 0}), false},
		{"right window, no mask", base(spec.MaskNone, spec.Ext{Left: -1, Right: 0}), false},
		{"right window past the diagonal", base(spec.MaskNone, spec.Ext{Left: -1, Right: 5}), false},
		{"key counts", base(spec.MaskNone, spec.Ext{Left: -1, Right: -1, SeqUsedK: []int32{120, 7}}), false},
		{"packed sequences", base(spec.MaskNone, spec.Ext{Left: -1, Right: -1, CuQ: []int32{0, 50, 100}, CuK: []int32{0, 60, 120}}), false},
	} {
		if got := PlainBounds(c.p); got != c.want {
			t.Errorf("%s: PlainBounds %v, want %v", c.name, got, c.want)
		}
		if c.p.Ext == nil {
			continue
		}
		for _, k := range ExtKernels {
			want := c.want && (k == KernelFlash || k == KernelFlashCM) // (the forwards only)
			if got := ExtSpecFor(k, c.p)&ExtSpecPlainBounds != 0; got != want {
				t.Errorf("%s: ExtSpecFor(%s) %#x: plain-bounds bit %v, want %v", c.name, k, ExtSpecFor(k, c.p), got, want)
			}
		}
	}
	kv := base(spec.MaskNone, spec.Ext{Left: -1, Right: -1, Softcap: 30})
	kv.KV = &spec.KV{}
	if PlainBounds(kv) {
		t.Errorf("KV-cache problem: PlainBounds true, want false (its keys are each sequence's cache rows)")
	}
}
