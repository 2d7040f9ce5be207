//go:build cgo

package vkattn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// h200Info is a synthetic device.Info shaped like the H200's (the features
// flash_cm looks at).
func h200Info() device.Info {
	return device.Info{
		Name: "synthetic H200", APIVersion: "1.4.312",
		SubgroupSize: 32, MinSubgroupSize: 32, MaxSubgroupSize: 32, SubgroupSizeControl: true, ComputeFullSubgroups: true,
		SubgroupOps:     device.SubgroupOps{Shuffle: true, Vote: true},
		MaxSharedMemory: 48 << 10, MaxWorkgroupInvocations: 1024, MaxWorkgroupSize: [3]uint32{1024, 1024, 64},
		Float16: true, StorageBuffer16Bit: true, VulkanMemoryModel: true,
		CoopMat: []device.CoopMatShape{
			{M: 16, N: 8, K: 16, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "subgroup"},
			{M: 16, N: 16, K: 16, A: "f16", B: "f16", C: "f16", Result: "f16", Scope: "subgroup"},
			{M: 16, N: 16, K: 16, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "subgroup"},
			{M: 16, N: 16, K: 32, A: "i8", B: "i8", C: "i32", Result: "i32", Scope: "subgroup"},
		},
	}
}

func TestCMSupport(t *testing.T) {
	s, err := cmSupportFor(h200Info(), spec.Float16)
	if err != nil || s.M != 16 || s.N != 16 || s.K != 16 || s.C != "f32" {
		t.Fatalf("H200-like: shape %v, err %v; want 16x16x16 f16*f16+f32->f32", s, err)
	}
	// Shapes come from the device: without 16×16×16 another one is used.
	info := h200Info()
	info.CoopMat = []device.CoopMatShape{{M: 16, N: 8, K: 8, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "subgroup"},
		{M: 16, N: 16, K: 16, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "workgroup"}}
	if s, err := cmSupportFor(info, spec.Float16); err != nil || s.N != 8 || s.K != 8 {
		t.Errorf("16x8x8 only: shape %v, err %v", s, err)
	}
	for name, mod := range map[string]func(*device.Info){
		"no coopmat (lavapipe)": func(i *device.Info) { i.CoopMat = nil },
		"only f16 accumulators": func(i *device.Info) { i.CoopMat = i.CoopMat[1:2] },
		"only workgroup scope": func(i *device.Info) {
			i.CoopMat = []device.CoopMatShape{{M: 16, N: 16, K: 16, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "workgroup"}}
		},
		"N not a multiple of 8": func(i *device.Info) {
			i.CoopMat = []device.CoopMatShape{{M: 16, N: 4, K: 16, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "subgroup"}}
		},
		"no shaderFloat16":       func(i *device.Info) { i.Float16 = false },
		"no 16-bit storage":      func(i *device.Info) { i.StorageBuffer16Bit = false },
		"no memory model":        func(i *device.Info) { i.VulkanMemoryModel = false },
		"Vulkan 1.2":             func(i *device.Info) { i.APIVersion = "1.2.198" },
		"no shuffle":             func(i *device.Info) { i.SubgroupOps.Shuffle = false },
		"no vote":                func(i *device.Info) { i.SubgroupOps.Vote = false },
		"variable size, no ctrl": func(i *device.Info) { i.MinSubgroupSize, i.SubgroupSizeControl = 8, false },
	} {
		info := h200Info()
		mod(&info)
		if _, err := cmSupportFor(info, spec.Float16); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: err %v, want ErrUnsupported", name, err)
		}
	}
	for v, want := range map[string]bool{"1.3.0": true, "1.4.1": true, "2.0.0": true, "1.2.9": false, "": false, "x.y": false} {
		if apiAtLeast(v, 1, 3) != want {
			t.Errorf("apiAtLeast(%q, 1, 3) != %v", v, want)
		}
	}
}

// nvidiaProbe is flash_cm_probe's output for the NVIDIA (mma.m16n8k16)
// layout of 16×16 fp32 accumulators and fp16 A matrices on 32 lanes:
// lane l holds rows g = l/4 and g+8, columns 2t, 2t+1 (t = l%4) of both
// 8-column halves, in the same order for both types.
func nvidiaProbe(sg int) []float32 {
	out := emptyProbe(sg)
	for lane := range sg {
		g, tt := lane/4, lane%4
		var rc [][2]int
		for h := range 2 {
			for _, r := range []int{g, g + 8} {
				rc = append(rc, [2]int{r, 8*h + 2*tt}, [2]int{r, 8*h + 2*tt + 1})
			}
		}
		for i, x := range rc {
			out[8+lane*64+i] = float32(256*x[0] + x[1])
			out[8+(sg+lane)*64+i] = float32(32*x[0] + x[1])
		}
	}
	return out
}

// emptyProbe is flash_cm_probe's output buffer for sg lanes with its
// header (8 accumulator and 8 A components a lane) and NaN elsewhere.
func emptyProbe(sg int) []float32 {
	out := make([]float32, shaders.FlashCMProbeFloats(sg))
	for i := range out {
		out[i] = float32(math.NaN())
	}
	out[0], out[1], out[2] = 8, 8, float32(sg)
	return out
}

// columnProbe is flash_cm_probe's output for 8×8 matrices on sg lanes
// whose lane l holds column l, rows 0 … 7, of the accumulator and of A (the
// layout of Mesa's lavapipe with cooperative matrices).
func columnProbe(sg int) []float32 {
	out := emptyProbe(sg)
	for lane := range sg {
		for r := range 8 {
			out[8+lane*64+r] = float32(256*r + lane)
			out[8+(sg+lane)*64+r] = float32(32*r + lane)
		}
	}
	return out
}

// specValue is the value of spec constant id in sp (0 if absent).
func specValue(sp []device.Spec, id uint32) uint32 {
	for _, s := range sp {
		if s.ID == id {
			return s.Value
		}
	}
	return 0
}

var shape16 = device.CoopMatShape{M: 16, N: 16, K: 16, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "subgroup"}

func TestParseCMProbe(t *testing.T) {
	l, err := ParseCMProbe(nvidiaProbe(32), shape16, 32)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Mode1 || l.RL != 2 || l.XorMask != 3 || l.AccLen != 8 || l.ALen != 8 {
		t.Fatalf("layout %+v (why %q), want MODE 1, RL 2, xormask 3", l, l.Why)
	}
	if want := []int{0, 0, 1, 1, 0, 0, 1, 1}; !reflect.DeepEqual(l.SlotRow, want) {
		t.Errorf("slotrow %v, want %v", l.SlotRow, want)
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7}; !reflect.DeepEqual(l.APerm, want) {
		t.Errorf("aperm %v, want %v", l.APerm, want)
	}
	sLo, sHi, pLo, pHi := l.Packed()
	if sLo != 0x11001100 || sHi != 0 || pLo != 0x76543210 || pHi != 0 {
		t.Errorf("packed %#x %#x %#x %#x", sLo, sHi, pLo, pHi)
	}
	// Columns c, c+1, c, c+1, c+8, c+9, c+8, c+9 in every lane (c = 2·(lane
	// mod 4)): the same offsets from the smallest.
	if lo, hi, ok := l.ColDeltas(); !ok || lo != 0x98981010 || hi != 0 {
		t.Errorf("column deltas %#x %#x %v, want 0x98981010 0 true", lo, hi, ok)
	}
	if l8, err := ParseCMProbe(columnProbe(8), device.CoopMatShape{M: 8, N: 8, K: 8}, 8); err != nil {
		t.Errorf("one column per lane: %v", err)
	} else if lo, hi, ok := l8.ColDeltas(); !ok || lo != 0 || hi != 0 {
		t.Errorf("one column per lane: deltas %#x %#x %v, want 0 0 true", lo, hi, ok)
	}
	// Offsets that differ by lane, or that four bits cannot hold: none.
	out := nvidiaProbe(32)
	acc := out[8+7*64:]
	acc[4], acc[5] = acc[5], acc[4]
	if l, err := ParseCMProbe(out, shape16, 32); err != nil {
		t.Errorf("swapped columns in lane 7: %v", err)
	} else if lo, hi, ok := l.ColDeltas(); ok {
		t.Errorf("swapped columns in lane 7: deltas %#x %#x accepted", lo, hi)
	}
	wide := &CMLayout{AccLen: 2, AccRC: [][][2]int{{{0, 0}, {0, 16}}, {{1, 0}, {1, 16}}}}
	if lo, hi, ok := wide.ColDeltas(); ok {
		t.Errorf("columns 16 apart: deltas %#x %#x accepted", lo, hi)
	}

	// A's components in another order than the accumulator's: MODE 1 with
	// a permutation.
	out = nvidiaProbe(32)
	for lane := range 32 {
		a := out[8+(32+lane)*64:]
		a[0], a[1], a[4], a[5] = a[4], a[5], a[0], a[1]
	}
	if l, err := ParseCMProbe(out, shape16, 32); err != nil || !l.Mode1 || !reflect.DeepEqual(l.APerm, []int{4, 5, 2, 3, 0, 1, 6, 7}) {
		t.Errorf("permuted A: %+v, %v", l, err)
	}

	// The local row of a component depends on the lane: no register softmax.
	out = nvidiaProbe(32)
	acc = out[8+5*64:]
	acc[0], acc[2] = acc[2], acc[0]
	acc[1], acc[3] = acc[3], acc[1]
	if l, err := ParseCMProbe(out, shape16, 32); err != nil || l.Mode1 || l.Why == "" {
		t.Errorf("lane-dependent rows: %+v, %v", l, err)
	}

	// A probe that does not cover the shape it was run for is refused.
	if l, err := ParseCMProbe(nvidiaProbe(32), device.CoopMatShape{M: 16, N: 16, K: 16 * 2}, 32); err == nil {
		t.Errorf("A covering half its elements accepted: %+v", l)
	}

	for name, mod := range map[string]func([]float32){
		"unwritten":   func(o []float32) { o[8+3*64+2] = float32(math.NaN()) },
		"subgroup":    func(o []float32) { o[2] = 64 },
		"length":      func(o []float32) { o[0] = 0 },
		"replicated":  func(o []float32) { copy(o[8+64:8+64+8], o[8:8+8]) },
		"short slice": nil,
	} {
		out := nvidiaProbe(32)
		if mod == nil {
			out = out[:100]
		} else {
			mod(out)
		}
		if _, err := ParseCMProbe(out, shape16, 32); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestChooseCMTile(t *testing.T) {
	l, err := ParseCMProbe(nvidiaProbe(32), shape16, 32)
	if err != nil {
		t.Fatal(err)
	}
	mode0 := *l
	mode0.Mode1, mode0.Why = false, "synthetic"
	const sh, wg = 48 << 10, 1024
	for _, c := range []struct {
		l         *CMLayout
		d, dv, nq int
		sh        int
		want      string
	}{
		{l, 128, 128, 4096, sh, "nsg8-bc64-mode1-pf1"},
		{l, 128, 128, 2048, sh, "nsg8-bc64-mode1-pf1"},
		{l, 64, 64, 16384, sh, "nsg4-bc32-mode1-pf1-rb2"}, // d ≤ 64: two row blocks per subgroup
		{l, 40, 64, 8192, sh, "nsg4-bc32-mode1-pf1-rb2"},
		{l, 96, 96, 4096, sh, "nsg8-bc64-mode1-pf1"},
		{l, 128, 128, 2047, sh, "nsg8-bc64-mode1-pf1"},   // 80 < d ≤ 128: the same tile at every length
		{l, 80, 80, 512, sh, "nsg4-bc64-mode1-pf1-rb2"},  // 64 < d ≤ 80: two row blocks, four subgroups below cmLargeNq
		{l, 80, 80, 4096, sh, "nsg8-bc64-mode1-pf1-rb2"}, // eight from it on
		{l, 72, 80, 2048, sh, "nsg8-bc64-mode1-pf1-rb2"},
		{l, 80, 80, 4096, 40 << 10, "nsg4-bc64-mode1-pf1-rb2"}, // (the 256 rows' 46108 bytes do not fit; 128 rows' 23068 do)
		{l, 96, 96, 512, sh, "nsg8-bc64-mode1-pf1"},
		{l, 64, 64, 512, sh, "nsg4-bc32-mode1-pf1-rb2"},
		{l, 64, 64, 512, 18 << 10, "nsg4-bc32-mode1-pf1"},   // (the row blocks' 18972 bytes do not fit)
		{l, 64, 64, 16384, 18 << 10, "nsg4-bc32-mode1-pf1"}, // (nor do nsg8-bc128's 37404)
		{l, 256, 256, 4096, sh, "nsg8-bc32-mode1-pf1-p2"},   // above d 192: subgroup pairs (fp16, no options)
		{l, 160, 192, 1024, sh, "nsg4-bc32-mode1-pf1"},      // up to d 192 the prefetch fits without pairs
		{l, 224, 224, 4096, sh, "nsg8-bc32-mode1-pf1-p2"},
		{l, 256, 240, 4096, sh, "nsg4-bc32-mode1-pf0-sw1"}, // O has no halves: no prefetch registers (a staggered walk instead)
		{l, 256, 256, 4096, 42 << 10, "nsg4-bc32-mode1-pf0-sw1"},
		{l, 128, 128, 4096, 32 << 10, "nsg4-bc32-mode0-pf1"},
		{&mode0, 128, 128, 4096, sh, "nsg4-bc32-mode0-pf1"},
		{l, 256, 256, 4096, 32 << 10, ""}, // nothing fits: scalar flash
		{l, 300, 64, 4096, sh, ""},
	} {
		got, err := chooseCMTile(c.l, c.d, c.dv, c.nq, spec.MaskNone, nil, c.sh, wg)
		if c.want == "" {
			if err == nil {
				t.Errorf("d %d dv %d nq %d shared %d: chose %v, want none", c.d, c.dv, c.nq, c.sh, got)
			}
			continue
		}
		if err != nil || got.String() != c.want {
			t.Errorf("d %d dv %d nq %d shared %d: %v (%v), want %s", c.d, c.dv, c.nq, c.sh, got, err, c.want)
		}
	}
	// The extended variant takes the small tiles at every length, except
	// at 64 < d ≤ 128 with ALiBi, a bias or a softcap and no dropout, and at
	// d ≤ 64 with a window, softcap, ALiBi or dropout and no bias, key
	// counts or packed sequences (the row blocks), from cmLargeNq (2048
	// query rows) on (this layout's softcap takes fp32's tanh: fp16
	// storage) — up to d 96 ALiBi and a softcap at every length —
	// at 64 < d ≤ 96 with dropout (longer key tiles, every length), and
	// above d 96 a window without dropout, a bias, key counts or packed
	// sequences from cmLargeNq on.
	win := &spec.Ext{Left: 100, Right: 0}
	alibi := &spec.Ext{Left: -1, Right: -1, Slopes: []float32{0.5}}
	bias := &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}}
	softcap := &spec.Ext{Left: -1, Right: -1, Softcap: 30}
	drop := &spec.Dropout{Threshold: 26}
	for _, c := range []struct {
		d, nq int
		ext   *spec.Ext
		want  string
	}{
		{128, 16384, win, "nsg8-bc64-mode1-pf1"}, {128, 2048, &spec.Ext{Left: 30, Right: 30}, "nsg8-bc64-mode1-pf1"},
		{128, 2047, win, "nsg8-bc32-mode1-pf1"}, {96, 16384, win, "nsg8-bc32-mode1-pf1"},
		{128, 16384, &spec.Ext{Left: 100, Right: 0, Dropout: drop}, "nsg8-bc32-mode1-pf1"},
		{128, 16384, &spec.Ext{Left: 100, Right: 0, SeqUsedK: []int32{9000}}, "nsg8-bc32-mode1-pf1"},
		{128, 16384, &spec.Ext{Left: 100, Right: 0, CuQ: []int32{0, 9000}, CuK: []int32{0, 9000}}, "nsg8-bc32-mode1-pf1"},
		{64, 16384, win, "nsg4-bc32-mode1-pf1-rb2"}, {256, 4096, win, "nsg4-bc32-mode1-pf0"}, {192, 4096, win, "nsg4-bc32-mode1-pf1"},
		{64, 2047, win, "nsg4-bc32-mode1-pf1"}, {64, 16384, &spec.Ext{Left: 100, Right: 0, Softcap: 30}, "nsg4-bc32-mode1-pf1-rb2"},
		{64, 16384, &spec.Ext{Left: 100, Right: 0, SeqUsedK: []int32{9000}}, "nsg4-bc32-mode1-pf1"},
		{64, 16384, &spec.Ext{Left: 100, Right: 0, CuQ: []int32{0, 9000}, CuK: []int32{0, 9000}}, "nsg4-bc32-mode1-pf1"},
		{128, 16384, alibi, "nsg8-bc64-mode1-pf1"}, {128, 16384, bias, "nsg8-bc64-mode1-pf1"}, {128, 2047, bias, "nsg8-bc32-mode1-pf1"},
		{64, 16384, alibi, "nsg4-bc32-mode1-pf1-rb2"}, {256, 4096, bias, "nsg4-bc32-mode1-pf0"},
		{64, 16384, bias, "nsg4-bc32-mode1-pf1"}, {64, 2047, alibi, "nsg4-bc32-mode1-pf1"},
		{64, 16384, &spec.Ext{Left: -1, Right: 0, Dropout: drop}, "nsg4-bc32-mode1-pf1-rb2"},
		{96, 2048, alibi, "nsg8-bc64-mode1-pf1"}, {96, 2048, bias, "nsg8-bc64-mode1-pf1"}, {96, 2047, alibi, "nsg8-bc64-mode1-pf1"},
		// Below cmLargeNq up to d 96 the large tile too, without a bias.
		{80, 512, softcap, "nsg8-bc64-mode1-pf1"}, {96, 1024, bias, "nsg8-bc32-mode1-pf1"}, {128, 1024, alibi, "nsg8-bc32-mode1-pf1"},
		{128, 16384, &spec.Ext{Left: 4095, Right: 0, Slopes: []float32{0.5}}, "nsg8-bc64-mode1-pf1"},
		{128, 16384, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}, CuQ: []int32{0, 9000}, CuK: []int32{0, 9000}}, "nsg8-bc64-mode1-pf1"},
		{128, 16384, &spec.Ext{Left: -1, Right: -1, Slopes: []float32{0.5}, Softcap: 30}, "nsg8-bc64-mode1-pf1"},
		{128, 16384, softcap, "nsg8-bc64-mode1-pf1"}, {64, 16384, softcap, "nsg4-bc32-mode1-pf1-rb2"}, {128, 2047, softcap, "nsg8-bc32-mode1-pf1"},
		{128, 16384, &spec.Ext{Left: -1, Right: -1, Softcap: 30, Dropout: drop}, "nsg8-bc32-mode1-pf1"},
		{128, 16384, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}, Dropout: drop}, "nsg8-bc32-mode1-pf1"},
		{128, 16384, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, "nsg8-bc32-mode1-pf1"},
		// Dropout at 64 < d ≤ 96 (with a softcap or ALiBi too), every length:
		// 128-key tiles to d 80, 64 above; not with a bias or a window.
		{80, 16384, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, "nsg8-bc128-mode1-pf1"},
		{72, 512, &spec.Ext{Left: -1, Right: 0, Dropout: drop}, "nsg8-bc128-mode1-pf1"},
		{96, 1024, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, "nsg8-bc64-mode1-pf1"},
		{80, 4096, &spec.Ext{Left: -1, Right: -1, Softcap: 30, Dropout: drop}, "nsg8-bc128-mode1-pf1"},
		{96, 4096, &spec.Ext{Left: -1, Right: -1, Slopes: []float32{0.5}, Dropout: drop}, "nsg8-bc64-mode1-pf1"},
		{80, 4096, &spec.Ext{Left: 100, Right: 0, Dropout: drop}, "nsg8-bc32-mode1-pf1"},
		{80, 4096, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}, Dropout: drop}, "nsg8-bc32-mode1-pf1"},
	} {
		if got, err := chooseCMTile(l, c.d, c.d, c.nq, spec.MaskNone, c.ext, sh, wg); err != nil || got.String() != c.want {
			t.Errorf("extended (window %d,%d softcap %g ALiBi %v bias %v dropout %v) d %d nq %d: %v (%v), want %s",
				c.ext.Left, c.ext.Right, c.ext.Softcap, c.ext.Slopes != nil, c.ext.Bias != nil, c.ext.Dropout != nil, c.d, c.nq, got, err, c.want)
		}
	}
	// Where dropout's 128-key tile does not fit (47640 bytes at d 80), the
	// 64-key one follows, and with 8-row matrices (nsg8-bc64 23320 bytes,
	// nsg8-bc32 11800) the 32-key one after it.
	if got, err := chooseCMTile(l, 80, 80, 4096, spec.MaskNone, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, 40<<10, wg); err != nil || got.String() != "nsg8-bc64-mode1-pf1" {
		t.Errorf("dropout d 80 in 40 KiB: %v (%v), want nsg8-bc64-mode1-pf1", got, err)
	}
	l8, err := ParseCMProbe(columnProbe(8), device.CoopMatShape{M: 8, N: 8, K: 8, A: "f16", B: "f16", C: "f32", Result: "f32", Scope: "subgroup"}, 8)
	if err != nil || !l8.Mode1 {
		t.Fatalf("the 8×8 column layout: %v (%v)", l8, err)
	}
	if got, err := chooseCMTile(l8, 80, 80, 4096, spec.MaskNone, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, 16<<10, wg); err != nil || got.String() != "nsg8-bc32-mode1-pf1" {
		t.Errorf("dropout d 80, 8×8 matrices, 16 KiB: %v (%v), want nsg8-bc32-mode1-pf1", got, err)
	}
	// A staggered walk does not take a bias (its walk skips the tiles the
	// bias hides, in order): the rule gives it none, the check refuses it.
	biasX := ExtrasOf(l, bias)
	if err := CheckCMTile(l, CMTile{NSG: 4, BC: 32, Mode: 1, Stagger: true}, 256, 256, biasX, sh, wg); err == nil || !strings.Contains(err.Error(), "bias") {
		t.Errorf("flash_cm's staggered walk with a bias: %v, want refused", err)
	}
	if err := bwdCMCheckTile(l, true, bwdCMTile{NSG: 4, Step: 16, Mode: 1, Stagger: true}, 128, 128, biasX, sh, wg); err == nil || !strings.Contains(err.Error(), "bias") {
		t.Errorf("bwd_cm_dkdv's staggered walk with a bias: %v, want refused", err)
	}
	if err := bwdCMCheckTile(l, false, bwdCMTile{NSG: 4, Step: 32, Mode: 1, Stagger: true}, 128, 128, biasX, sh, wg); err == nil || !strings.Contains(err.Error(), "bias") {
		t.Errorf("bwd_cm_dq's staggered walk with a bias: %v, want refused", err)
	}
	if got, err := chooseBwdCMTile(l, false, 256, 256, spec.MaskNone, bias, sh, wg); err != nil || got.Stagger {
		t.Errorf("backward dQ d 256 with a bias: %v (%v), want a tile walking in order", got, err)
	}
	for _, mask := range []spec.Mask{spec.MaskCausalTopLeft, spec.MaskCausalBottomRight} {
		if got, err := chooseBwdCMTile(l, true, 128, 128, mask, nil, sh, wg); err != nil || got.String() != "nsg4-step64-mode1-kv1" {
			t.Errorf("backward dK/dV d 128 under mask %v: %v (%v), want nsg4-step64-mode1-kv1", mask, got, err)
		}
	}

	// Where the row blocks do not fit, an option at d ≤ 64 takes its own
	// small tile (not plain's nsg8-bc128, larger still).
	if got, err := chooseCMTile(l, 64, 64, 16384, spec.MaskNone, alibi, 18<<10, wg); err != nil || got.String() != "nsg4-bc32-mode1-pf1" {
		t.Errorf("ALiBi d 64 nq 16384 in 18 KiB: %v (%v), want nsg4-bc32-mode1-pf1", got, err)
	}
	// With the softcap's tanh in fp16 (bf16 storage) a softcap alone, causal
	// or not, takes plain's large tile at d ≤ 64 too.
	half := *l
	half.Storage = spec.BFloat16
	causalCap := &spec.Ext{Left: -1, Right: 0, Softcap: 30}
	// Above d 192 bf16 keeps the tile without pairs (measured: mixed);
	// without the prefetch it walks its key tiles staggered where every
	// workgroup walks the same ones: not under a causal mask, a window or a
	// bias.
	for _, c := range []struct {
		mask spec.Mask
		ext  *spec.Ext
		want string
	}{{spec.MaskNone, nil, "nsg4-bc32-mode1-pf0-sw1"}, {spec.MaskCausalTopLeft, nil, "nsg4-bc32-mode1-pf0"},
		{spec.MaskNone, &spec.Ext{Left: -1, Right: -1, Softcap: 30}, "nsg4-bc32-mode1-pf0-sw1"},
		{spec.MaskNone, win, "nsg4-bc32-mode1-pf0"}, {spec.MaskNone, bias, "nsg4-bc32-mode1-pf0"}} {
		if got, err := chooseCMTile(&half, 256, 256, 4096, c.mask, c.ext, sh, wg); err != nil || got.String() != c.want {
			t.Errorf("bf16 d 256 (mask %v, options %+v): %v (%v), want %s", c.mask, c.ext, got, err, c.want)
		}
	}
	for _, c := range []struct {
		d, nq int
		ext   *spec.Ext
		want  string
	}{
		{64, 16384, softcap, "nsg8-bc128-mode1-pf1"}, {64, 16384, causalCap, "nsg8-bc128-mode1-pf1"}, {40, 4096, softcap, "nsg8-bc128-mode1-pf1"},
		{64, 2047, softcap, "nsg4-bc32-mode1-pf1"}, {128, 16384, causalCap, "nsg8-bc64-mode1-pf1"},
		{64, 16384, &spec.Ext{Left: 100, Right: 0, Softcap: 30}, "nsg4-bc32-mode1-pf1"},
		{64, 16384, &spec.Ext{Left: -1, Right: 2, Softcap: 30}, "nsg4-bc32-mode1-pf1"},
		{64, 16384, &spec.Ext{Left: -1, Right: -1, Softcap: 30, Slopes: []float32{0.5}}, "nsg4-bc32-mode1-pf1"},
		{64, 16384, &spec.Ext{Left: -1, Right: -1, Softcap: 30, Dropout: drop}, "nsg4-bc32-mode1-pf1-rb2"},
		{64, 16384, &spec.Ext{Left: -1, Right: -1, Softcap: 30, SeqUsedK: []int32{9000}}, "nsg4-bc32-mode1-pf1"},
		{64, 16384, &spec.Ext{Left: -1, Right: -1, Softcap: 30, CuQ: []int32{0, 9000}, CuK: []int32{0, 9000}}, "nsg4-bc32-mode1-pf1"},
		{64, 16384, &spec.Ext{Left: -1, Right: -1, Softcap: 30, Bias: &spec.Bias{}}, "nsg4-bc32-mode1-pf1"},
		{64, 16384, alibi, "nsg4-bc32-mode1-pf1"}, // (bf16's ALiBi ran slower on the row blocks)
		{64, 16384, &spec.Ext{Left: -1, Right: 0, Dropout: drop}, "nsg4-bc32-mode1-pf1-rb2"},
		{64, 2047, &spec.Ext{Left: -1, Right: 0, Dropout: drop}, "nsg4-bc32-mode1-pf1"},
	} {
		if got, err := chooseCMTile(&half, c.d, c.d, c.nq, spec.MaskNone, c.ext, sh, wg); err != nil || got.String() != c.want {
			t.Errorf("fp16 tanh, extended (window %d,%d softcap %g ALiBi %v bias %v dropout %v keys %v packed %v) d %d nq %d: %v (%v), want %s",
				c.ext.Left, c.ext.Right, c.ext.Softcap, c.ext.Slopes != nil, c.ext.Bias != nil, c.ext.Dropout != nil, c.ext.SeqUsedK != nil, c.ext.CuQ != nil, c.d, c.nq, got, err, c.want)
		}
	}
	// Above d 128 the backward's dK/dV kernel runs (fp16 and bf16, with
	// options but a bias) in one launch of subgroup pairs over the
	// features, steps of 32 rows up to d 192 and 16 above (with a bias the
	// split into two, whose PART 2 also stages V, halves its subgroups
	// until 48 KiB holds it: at d 256 one subgroup, at d 192 two).
	for _, c := range []struct {
		dkdv  bool
		d     int
		want  string
		parts string
	}{{true, 256, "nsg4-step16-mode1-kv1-fh2-sw1", "0:nsg4"}, {false, 256, "nsg8-step32-mode1-dq2-sw1", "0:nsg8"},
		{false, 144, "nsg4-step32-mode1-sw1", "0:nsg4"}, {false, 192, "nsg8-step32-mode1-dq2-sw1", "0:nsg8"},
		{true, 192, "nsg4-step32-mode1-kv1-fh2-sw1", "0:nsg4"}, {true, 128, "nsg4-step64-mode1-kv1-sw1", "0:nsg4"},
		{true, 96, "nsg4-step32-mode1-pf1", "0:nsg4"}, {false, 80, "nsg8-step64-mode1-pf1", "0:nsg8"}, {false, 128, "nsg4-step32-mode1-pf1", "0:nsg4"},
		{false, 64, "nsg4-step32-mode1-pf1-rb2", "0:nsg4"}} {
		got, err := chooseBwdCMTile(l, c.dkdv, c.d, c.d, spec.MaskNone, nil, sh, wg)
		if err != nil || got.String() != c.want {
			t.Errorf("backward dkdv %v d %d: %v (%v), want %s", c.dkdv, c.d, got, err, c.want)
			continue
		}
		pls, err := got.launches(l, c.dkdv, c.d, c.d, TileExtras{}, sh, wg)
		var parts []string
		for _, pl := range pls {
			parts = append(parts, fmt.Sprintf("%d:nsg%d", pl.part, pl.tile.NSG))
		}
		if err != nil || strings.Join(parts, " ") != c.parts {
			t.Errorf("backward dkdv %v d %d: launches %v (%v), want %s", c.dkdv, c.d, parts, err, c.parts)
		}
	}
	// The d 64 dQ tile: two row blocks per subgroup, but not with a bias,
	// ALiBi, a softcap or a window beyond the causal mask.
	for _, c := range []struct {
		ext  *spec.Ext
		want string
	}{{&spec.Ext{Left: -1, Right: -1, Dropout: drop}, "nsg4-step32-mode1-pf1-rb2"}, {&spec.Ext{Left: -1, Right: 0, Dropout: drop}, "nsg4-step32-mode1-pf1-rb2"},
		{&spec.Ext{Left: -1, Right: -1, CuQ: []int32{0, 9000}, CuK: []int32{0, 9000}}, "nsg4-step32-mode1-pf1-rb2"},
		{&spec.Ext{Left: 255, Right: 0}, "nsg4-step64-mode1-pf1"}, {&spec.Ext{Left: -1, Right: 3}, "nsg4-step64-mode1-pf1"},
		{&spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}}, "nsg4-step64-mode1-pf1"}, {&spec.Ext{Left: -1, Right: -1, Softcap: 30, Dropout: drop}, "nsg4-step64-mode1-pf1"},
		{&spec.Ext{Left: -1, Right: 0, Slopes: []float32{0.5}}, "nsg4-step64-mode1-pf1"}} {
		if got, err := chooseBwdCMTile(l, false, 64, 64, spec.MaskNone, c.ext, sh, wg); err != nil || got.String() != c.want {
			t.Errorf("backward dQ d 64 (window %d,%d softcap %g ALiBi %v bias %v dropout %v): %v (%v), want %s",
				c.ext.Left, c.ext.Right, c.ext.Softcap, c.ext.Slopes != nil, c.ext.Bias != nil, c.ext.Dropout != nil, got, err, c.want)
		}
	}
	// The d 128 dK/dV tile: K_j and V_j in registers, steps of 64 rows
	// (plain, dropout, ALiBi, a window; fp16 and bf16) or 32 (the softcap,
	// alone or with dropout); a bias keeps the 16-row steps with K_j, V_j
	// in shared memory, whatever else it comes with; 32 KiB of shared
	// memory takes the prefetching two-subgroup fallback. The tiles without
	// the prefetch walk their steps staggered (not with a window or a
	// bias, nor under a causal mask: below).
	bf, f16 := *l, *l
	bf.Storage, f16.Storage = spec.BFloat16, spec.Float16
	for _, c := range []struct {
		l    *CMLayout
		ext  *spec.Ext
		sh   int
		want string
	}{{&f16, nil, sh, "nsg4-step64-mode1-kv1-sw1"}, {&bf, nil, sh, "nsg4-step64-mode1-kv1-sw1"},
		{&f16, &spec.Ext{Left: -1, Right: -1, Softcap: 30}, sh, "nsg4-step32-mode1-kv1-sw1"},
		{&f16, &spec.Ext{Left: -1, Right: -1, Softcap: 30, Dropout: drop}, sh, "nsg4-step32-mode1-kv1-sw1"},
		{&f16, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, sh, "nsg4-step64-mode1-kv1-sw1"},
		{&bf, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, sh, "nsg4-step64-mode1-kv1-sw1"},
		{&bf, &spec.Ext{Left: -1, Right: -1, Softcap: 30}, sh, "nsg4-step32-mode1-kv1-sw1"},
		{&f16, &spec.Ext{Left: -1, Right: -1, Slopes: []float32{0.5}}, sh, "nsg4-step64-mode1-kv1-sw1"},
		{&f16, &spec.Ext{Left: 100, Right: 0}, sh, "nsg4-step64-mode1-kv1"},
		{&f16, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}}, sh, "nsg4-step16-mode1-pf1"},
		{&bf, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}, Softcap: 30}, sh, "nsg4-step16-mode1-pf1"},
		{&f16, nil, 32 << 10, "nsg2-step16-mode1-pf1"}, {&bf, nil, 32 << 10, "nsg2-step16-mode1-pf1"}} {
		if got, err := chooseBwdCMTile(c.l, true, 128, 128, spec.MaskNone, c.ext, c.sh, wg); err != nil || got.String() != c.want {
			t.Errorf("backward dkdv d 128 %v, options %+v, %d bytes: %v (%v), want %s", c.l.Storage, c.ext, c.sh, got, err, c.want)
		}
	}
	// At 64 < d ≤ 80 fp16's dropout (without a bias, window, key counts or
	// packed sequences) takes the dK/dV kernel's 64-row steps; plain calls,
	// other options, bf16 and d 96 the 32-row steps, and so does 32 KiB of
	// shared memory (the 64-row steps need 46092 bytes at d 80).
	for _, c := range []struct {
		l    *CMLayout
		d    int
		ext  *spec.Ext
		sh   int
		want string
	}{{&f16, 80, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, sh, "nsg4-step64-mode1-pf1"},
		{&f16, 72, &spec.Ext{Left: -1, Right: 0, Softcap: 5, Dropout: drop}, sh, "nsg4-step64-mode1-pf1"},
		{&f16, 80, nil, sh, "nsg4-step32-mode1-pf1"}, {&f16, 96, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, sh, "nsg4-step32-mode1-pf1"},
		{&f16, 80, &spec.Ext{Left: -1, Right: -1, Softcap: 5}, sh, "nsg4-step32-mode1-pf1"},
		{&f16, 80, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}, Dropout: drop}, sh, "nsg4-step32-mode1-pf1"},
		{&f16, 80, &spec.Ext{Left: 64, Right: 0, Dropout: drop}, sh, "nsg4-step32-mode1-pf1"},
		{&bf, 80, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, sh, "nsg4-step32-mode1-pf1"},
		{&f16, 80, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, 32 << 10, "nsg2-step32-mode1-pf1"}} {
		if got, err := chooseBwdCMTile(c.l, true, c.d, c.d, spec.MaskCausalTopLeft, c.ext, c.sh, wg); err != nil || got.String() != c.want {
			t.Errorf("backward dkdv d %d %v, options %+v, %d bytes: %v (%v), want %s", c.d, c.l.Storage, c.ext, c.sh, got, err, c.want)
		}
	}
	// Above d 128 a bias keeps the split into two launches; a D of one
	// column block (D 16, Dv 256) pairs over the features (D padded to two
	// chunks), in both storage types, and so do the other options.
	if got, err := chooseBwdCMTile(l, true, 256, 256, spec.MaskNone, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}}, sh, wg); err != nil || got.String() != "nsg2-step16-mode1-sp1" {
		t.Errorf("backward dkdv d 256 with a bias: %v (%v), want nsg2-step16-mode1-sp1", got, err)
	}
	for _, ll := range []*CMLayout{&f16, &bf} {
		if got, err := chooseBwdCMTile(ll, true, 16, 256, spec.MaskNone, nil, sh, wg); err != nil || !got.FHalves {
			t.Errorf("backward dkdv %v D 16 Dv 256: %v (%v), want pairs over the features", ll.Storage, got, err)
		}
		for _, c := range []struct {
			ext  *spec.Ext
			want string
		}{{&spec.Ext{Left: -1, Right: -1, Dropout: drop}, "nsg4-step16-mode1-kv1-fh2-sw1"},
			{&spec.Ext{Left: -1, Right: -1, Slopes: []float32{0.5}}, "nsg4-step16-mode1-kv1-fh2-sw1"},
			{&spec.Ext{Left: 1023, Right: 0, Softcap: 50}, "nsg4-step16-mode1-kv1-fh2"}} { // (a window: not staggered)
			if got, err := chooseBwdCMTile(ll, true, 256, 256, spec.MaskNone, c.ext, sh, wg); err != nil || got.String() != c.want {
				t.Errorf("backward dkdv %v d 256 with options %+v: %v (%v), want %s", ll.Storage, c.ext, got, err, c.want)
			}
		}
	}
	halves := bwdCMTile{NSG: 4, Step: 32, Mode: 1, KVReg: true, Split: true, Halves: true}
	if err := bwdCMCheckTile(l, true, halves, 8, 200, TileExtras{}, sh, wg); err == nil {
		t.Errorf("%s at D 8: accepted", halves)
	}
	if err := bwdCMCheckTile(l, true, halves, 40, 200, TileExtras{}, sh, wg); err != nil {
		t.Errorf("%s at D 40 (three column blocks): %v", halves, err)
	}
	// The dQ kernel's subgroup pairs split an even count of subgroups, of
	// the tile's key blocks and of dQ's column blocks, in MODE 1 only, and
	// their dS must fit V's staging (D 256 with Dv 16 takes the tile
	// without pairs).
	pairs := bwdCMTile{NSG: 4, Step: 32, Mode: 1, Pairs: true}
	if err := bwdCMCheckTile(l, false, pairs, 256, 256, TileExtras{}, sh, wg); err != nil {
		t.Errorf("%s at d 256: %v", pairs, err)
	}
	if got, err := chooseBwdCMTile(l, false, 256, 16, spec.MaskNone, nil, sh, wg); err != nil || got.Pairs {
		t.Errorf("backward dq D 256 Dv 16: %v (%v), want a tile without pairs", got, err)
	}
	for _, c := range []struct {
		dkdv bool
		tile bwdCMTile
		d    int
	}{{false, pairs, 80}, {false, pairs, 40}, {true, bwdCMTile{NSG: 4, Step: 32, Mode: 1, Pairs: true}, 256},
		{false, bwdCMTile{NSG: 4, Step: 32, Mode: 0, Pairs: true}, 256}, {false, bwdCMTile{NSG: 3, Step: 32, Mode: 1, Pairs: true}, 256},
		{false, bwdCMTile{NSG: 4, Step: 16, Mode: 1, Pairs: true}, 256}} {
		if err := bwdCMCheckTile(l, c.dkdv, c.tile, c.d, c.d, TileExtras{}, sh, wg); err == nil || !strings.Contains(err.Error(), "pairs") {
			t.Errorf("%s (dkdv %v) at d %d: %v, want a refusal of the pairs", c.tile, c.dkdv, c.d, err)
		}
	}
	// dS fits V's staging exactly at BR·(BC+8) = BC·(Dv+8): 32 rows of 40
	// against 32 keys of Dv 32; Dv 16 does not hold it. The float32 build
	// has no pairs.
	if err := bwdCMCheckTile(l, false, pairs, 256, 32, TileExtras{}, sh, wg); err != nil {
		t.Errorf("%s at D 256 Dv 32: %v", pairs, err)
	}
	if err := bwdCMCheckTile(l, false, pairs, 256, 16, TileExtras{}, sh, wg); err == nil || !strings.Contains(err.Error(), "pairs") {
		t.Errorf("%s at D 256 Dv 16: %v, want a refusal of the pairs", pairs, err)
	}
	f32 := *l
	f32.Storage = spec.Float32
	if err := bwdCMCheckTile(&f32, false, bwdCMTile{NSG: 4, Step: 32, Mode: 1, Pairs: true}, 64, 64, TileExtras{}, sh, wg); err == nil || !strings.Contains(err.Error(), "pairs") {
		t.Errorf("pairs in the float32 build: %v, want a refusal", err)
	}
	// A split tile whose PART 1 does not fit is refused, and so is one
	// whose PART 2 fits at no subgroup count.
	if _, err := (bwdCMTile{NSG: 4, Step: 64, Mode: 1, Split: true}).launches(l, true, 256, 256, TileExtras{}, sh, wg); err == nil {
		t.Error("d 256 nsg4-step64 split: PART 1 accepted in 48 KiB")
	}
	if _, err := (bwdCMTile{NSG: 1, Step: 16, Mode: 1, Split: true}).launches(l, true, 256, 256, TileExtras{}, 26<<10, wg); err == nil || !strings.Contains(err.Error(), "PART 2") {
		t.Errorf("d 256 nsg1-step16 split in 26 KiB: %v, want PART 2 refused", err)
	}
	// Dropout's keep bits count exactly: d256's MODE 0 tile (a few hundred
	// bytes short of 48 KiB) still fits with them, and not when they would
	// overflow.
	d256 := CMTile{NSG: 4, BC: 32, Mode: 0, Prefetch: true}
	need := shaders.FlashCMSharedBytes(shaders.FlashCMShape{M: 16, N: 16, K: 16, NSG: 4, BC: 32, Mode: 0, D: 256, DV: 256, Planes: 1}) + dropExtra(true, 64, 32)
	if need > sh {
		t.Errorf("dropout d256 %v needs %d bytes, more than %d", d256, need, sh)
	}
	if got, err := chooseCMTile(&mode0, 256, 256, 4096, spec.MaskNone, &spec.Ext{Left: -1, Right: -1, Dropout: drop}, sh, wg); err != nil || got != d256 {
		t.Errorf("dropout d256 (MODE 0 layout): %v (%v), want %v", got, err, d256)
	}
	if err := CheckCMTile(l, d256, 256, 256, TileExtras{Dropout: true}, need-1, wg); err == nil {
		t.Errorf("dropout d256 accepted in %d bytes, needs %d", need-1, need)
	}
	if err := CheckCMTile(l, d256, 256, 256, TileExtras{}, need-1, wg); err != nil {
		t.Errorf("d256 without dropout refused in %d bytes: %v", need-1, err)
	}
	// flash_cm's subgroup pairs split an even count of subgroups, of the
	// tile's key blocks and of O's column blocks, in MODE 1 and 16-bit
	// storage only, without a bias; their rows are half the subgroups'.
	fp := CMTile{NSG: 8, BC: 32, Mode: 1, Pairs: true}
	if err := CheckCMTile(l, fp, 256, 256, TileExtras{Dropout: true}, sh, wg); err != nil {
		t.Errorf("%s at d 256 with dropout: %v", fp, err)
	}
	if got := fp.Rows(l); got != 64 {
		t.Errorf("%s: %d rows, want 64", fp, got)
	}
	if err := CheckCMTile(l, fp, 256, 32, TileExtras{}, sh, wg); err != nil {
		t.Errorf("%s at Dv 32 (two column blocks): %v", fp, err)
	}
	for _, c := range []struct {
		tile   CMTile
		dv     int
		extras TileExtras
	}{
		{CMTile{NSG: 8, BC: 32, Mode: 0, Pairs: true}, 256, TileExtras{}},
		{CMTile{NSG: 3, BC: 32, Mode: 1, Pairs: true}, 256, TileExtras{}},
		{CMTile{NSG: 8, BC: 16, Mode: 1, Pairs: true}, 256, TileExtras{}},
		{CMTile{NSG: 8, BC: 48, Mode: 1, Pairs: true}, 256, TileExtras{}},
		{fp, 240, TileExtras{}}, // 15 column blocks
		{fp, 16, TileExtras{}},
		{fp, 256, TileExtras{BiasElem: 2}},
	} {
		if err := CheckCMTile(l, c.tile, 256, c.dv, c.extras, sh, wg); err == nil || !strings.Contains(err.Error(), "pairs") {
			t.Errorf("%s at Dv %d with %+v: %v, want a refusal of the pairs", c.tile, c.dv, c.extras, err)
		}
	}
	if err := CheckCMTile(&f32, CMTile{NSG: 8, BC: 32, Mode: 1, Pairs: true}, 64, 64, TileExtras{}, sh, wg); err == nil || !strings.Contains(err.Error(), "pairs") {
		t.Errorf("flash_cm pairs in the float32 build: %v, want a refusal", err)
	}
	// The pairs' shared memory counts exactly (their S beside the staging).
	fpNeed := shaders.FlashCMSharedBytes(shaders.FlashCMShape{M: 16, N: 16, K: 16, NSG: 8, BC: 32, Mode: 1, D: 256, DV: 256, Planes: 1, Pairs: true})
	if err := CheckCMTile(l, fp, 256, 256, TileExtras{}, fpNeed, wg); err != nil {
		t.Errorf("%s refused in the %d bytes it needs: %v", fp, fpNeed, err)
	}
	if err := CheckCMTile(l, fp, 256, 256, TileExtras{}, fpNeed-1, wg); err == nil {
		t.Errorf("%s accepted in %d bytes, needs %d", fp, fpNeed-1, fpNeed)
	}
	// flash_cm's row blocks run MODE 1 on the 16-bit builds, at most two a
	// subgroup, without pairs or a bias (dropout's keep bits and the other
	// options allowed); their rows are twice the subgroups'.
	rb := CMTile{NSG: 4, BC: 32, Mode: 1, Prefetch: true, RowBlocks: 2}
	if err := CheckCMTile(l, rb, 64, 64, TileExtras{Dropout: true}, sh, wg); err != nil {
		t.Errorf("%s with dropout: %v", rb, err)
	}
	if got := rb.Rows(l); got != 128 {
		t.Errorf("%s: %d rows, want 128", rb, got)
	}
	for _, c := range []struct {
		l      *CMLayout
		tile   CMTile
		extras TileExtras
	}{
		{l, CMTile{NSG: 4, BC: 32, Mode: 0, RowBlocks: 2}, TileExtras{}},
		{l, CMTile{NSG: 4, BC: 32, Mode: 1, RowBlocks: 3}, TileExtras{}},
		{l, CMTile{NSG: 4, BC: 32, Mode: 1, RowBlocks: -1}, TileExtras{}},
		{l, CMTile{NSG: 4, BC: 32, Mode: 1, Pairs: true, RowBlocks: 2}, TileExtras{}},
		{l, rb, TileExtras{BiasElem: 2}},
		{&f32, CMTile{NSG: 4, BC: 32, Mode: 1, RowBlocks: 2}, TileExtras{}},
	} {
		if err := CheckCMTile(c.l, c.tile, 64, 64, c.extras, sh, wg); err == nil || !strings.Contains(err.Error(), "row blocks") {
			t.Errorf("%s with %+v (planes %d): %v, want a refusal of the row blocks", c.tile, c.extras, c.l.planes(), err)
		}
	}
	rbNeed := shaders.FlashCMSharedBytes(shaders.FlashCMShape{M: 16, N: 16, K: 16, NSG: 4, BC: 32, Mode: 1, D: 64, DV: 64, Planes: 1, RowBlocks: 2})
	if err := CheckCMTile(l, rb, 64, 64, TileExtras{}, rbNeed, wg); err != nil {
		t.Errorf("%s refused in the %d bytes it needs: %v", rb, rbNeed, err)
	}
	if err := CheckCMTile(l, rb, 64, 64, TileExtras{}, rbNeed-1, wg); err == nil {
		t.Errorf("%s accepted in %d bytes, needs %d", rb, rbNeed-1, rbNeed)
	}
	// MODE is 0 or 1.
	if err := CheckCMTile(l, CMTile{NSG: 4, BC: 32, Mode: 2}, 64, 64, TileExtras{}, sh, wg); err == nil {
		t.Error("MODE 2 accepted")
	}
	if err := CheckCMTile(l, CMTile{NSG: 64, BC: 32}, 64, 64, TileExtras{}, 1<<30, wg); err == nil {
		t.Error("workgroup of 2048 accepted")
	}
}

func TestCMSpec(t *testing.T) {
	l, err := ParseCMProbe(nvidiaProbe(32), shape16, 32)
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := shaders.SpecIDs(shaders.KernelFlashCM)
	get := func(sp []device.Spec, id uint32) uint32 {
		for _, s := range sp {
			if s.ID == id {
				return s.Value
			}
		}
		t.Fatalf("spec %d missing", id)
		return 0
	}
	sp := CMSpec(l, CMTile{NSG: 8, BC: 64, Mode: 1, Prefetch: true}, 128, 96, true)
	if len(sp) != len(ids) {
		t.Fatalf("%d spec constants, flash_cm declares %d", len(sp), len(ids))
	}
	for i, s := range sp {
		if s.ID != ids[i] {
			t.Errorf("spec %d has ID %d, want %d", i, s.ID, ids[i])
		}
	}
	for id, want := range map[uint32]uint32{0: 256, 1: 128, 2: 96, 3: 128, 4: 64, 5: 32, 10: 16, 11: 16, 12: 16, 13: 1, 14: 8,
		15: 2, 16: 0x11001100, 17: 0, 18: 3, 19: 0x76543210, 20: 0, 21: 1, 22: 1, 30: 1, 31: 0x98981010, 32: 0} {
		if got := get(sp, id); got != want {
			t.Errorf("MODE 1 spec %d = %#x, want %#x", id, got, want)
		}
	}
	if got := get(sp, shaders.SpecCMPairs); got != 0 {
		t.Errorf("spec PAIRS = %d without pairs", got)
	}
	if got := get(sp, shaders.SpecCMRowBlk); got != 1 {
		t.Errorf("spec ROWBLK = %d without row blocks, want 1", got)
	}
	sp = CMSpec(l, CMTile{NSG: 4, BC: 32, Mode: 1, Prefetch: true, RowBlocks: 2}, 64, 64, true)
	for id, want := range map[uint32]uint32{0: 128, 3: 128, 4: 32, 13: 1, 22: 1, shaders.SpecCMPairs: 0, shaders.SpecCMRowBlk: 2} {
		if got := get(sp, id); got != want {
			t.Errorf("row-block spec %d = %#x, want %#x", id, got, want)
		}
	}
	sp = CMSpec(l, CMTile{NSG: 8, BC: 32, Mode: 1, Pairs: true}, 256, 256, true)
	for id, want := range map[uint32]uint32{0: 256, 3: 64, 4: 32, 13: 1, 22: 0, shaders.SpecCMPairs: 1} {
		if got := get(sp, id); got != want {
			t.Errorf("pairs spec %d = %#x, want %#x", id, got, want)
		}
	}
	sp = CMSpec(l, CMTile{NSG: 4, BC: 32, Mode: 0, Prefetch: true}, 64, 64, false)
	for id, want := range map[uint32]uint32{0: 128, 3: 64, 13: 0, 15: 1, 16: 0, 18: 0, 19: 0, 21: 0, 22: 0, 30: 0, 31: 0} {
		if got := get(sp, id); got != want {
			t.Errorf("MODE 0 spec %d = %#x, want %#x", id, got, want)
		}
	}
}

func TestCMVec(t *testing.T) {
	p := &spec.Problem{B: 2, Hq: 4, Hkv: 2, Nq: 10, Nk: 12, D: 64, Dv: 64, Scale: 1}
	p.Q = spec.Strides{Batch: 10 * 4 * 64, Seq: 4 * 64, Head: 64}
	p.K = spec.Strides{Batch: 12 * 2 * 64, Seq: 2 * 64, Head: 64}
	p.V, p.O = p.K, p.Q
	if !cmVec(p, params(p)) {
		t.Error("contiguous d 64: no VEC")
	}
	p.Q.Seq = 4*64 + 4
	if cmVec(p, params(p)) {
		t.Error("Q seq stride 260: VEC")
	}
	p.Q.Seq, p.D, p.Dv = 4*64, 60, 60
	if cmVec(p, params(p)) {
		t.Error("d 60: VEC")
	}
}

// TestCMTileDropKeys: with dropout the coopmat tile checks refuse a key
// tile the keep-bit fill does not take (48 keys), which plain calls run.
func TestCMTileDropKeys(t *testing.T) {
	l := &CMLayout{M: 16, N: 16, K: 16, SG: 32, Mode1: true}
	c := CMTile{NSG: 4, BC: 48, Mode: 1}
	if err := CheckCMTile(l, c, 64, 64, TileExtras{}, 48<<10, 1024); err != nil {
		t.Fatalf("%s without dropout: %v", c, err)
	}
	if err := CheckCMTile(l, c, 64, 64, TileExtras{Dropout: true}, 48<<10, 1024); err == nil || !strings.Contains(err.Error(), "dropout needs key tiles of 8, 16 or a multiple of 32 keys, not 48") {
		t.Errorf("%s with dropout: %v", c, err)
	}
	if err := CheckCMTile(l, CMTile{NSG: 4, BC: 64, Mode: 1}, 64, 64, TileExtras{Dropout: true}, 48<<10, 1024); err != nil {
		t.Errorf("nsg4-bc64 with dropout: %v", err)
	}
}

// TestCMTileBiasStage: a bias adds flash_cm's stage (BiasStageBytes) to
// a MODE 1 tile's shared memory, by the bias's element size, and nothing
// to MODE 0's; a tile that fits only without it is refused with a bias,
// and ExtrasOf sizes the elements (a float32 bias, or the float32 build's
// planes: 4 bytes; a 16-bit bias: 2).
func TestCMTileBiasStage(t *testing.T) {
	l := nvidiaLayout(t)
	x16 := ExtrasOf(l, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{DType: spec.Float16}})
	x32 := ExtrasOf(l, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{DType: spec.Float32}})
	f32 := *l
	f32.Storage = spec.Float32
	if x16.BiasElem != 2 || x32.BiasElem != 4 || ExtrasOf(&f32, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{DType: spec.Float32}}).BiasElem != 4 ||
		ExtrasOf(l, &spec.Ext{Left: -1, Right: -1}).BiasElem != 0 || ExtrasOf(l, nil) != (TileExtras{}) {
		t.Fatalf("ExtrasOf: fp16 bias %+v, fp32 bias %+v", x16, x32)
	}
	c := CMTile{NSG: 8, BC: 64, Mode: 1, Prefetch: true}
	plain := shaders.FlashCMSharedBytes(shaders.FlashCMShape{M: 16, N: 16, K: 16, NSG: 8, BC: 64, Mode: 1, D: 128, DV: 128, Planes: 1})
	for _, x := range []TileExtras{x16, x32} {
		need := plain + shaders.BiasStageBytes(x.BiasElem, 8, 16, 16, 4) - shaders.BiasStagePlaceholder
		if need <= plain {
			t.Fatalf("bias of %d-byte elements: stage adds nothing (%d ≤ %d)", x.BiasElem, need, plain)
		}
		if err := CheckCMTile(l, c, 128, 128, x, need, 1024); err != nil {
			t.Errorf("%s with a %d-byte bias refused in %d bytes: %v", c, x.BiasElem, need, err)
		}
		if err := CheckCMTile(l, c, 128, 128, x, need-1, 1024); err == nil {
			t.Errorf("%s with a %d-byte bias accepted in %d bytes, needs %d", c, x.BiasElem, need-1, need)
		}
		if err := CheckCMTile(l, c, 128, 128, TileExtras{}, need-1, 1024); err != nil {
			t.Errorf("%s without a bias refused in %d bytes: %v", c, need-1, err)
		}
		m0 := CMTile{NSG: 4, BC: 32, Mode: 0, Prefetch: true}
		if err := CheckCMTile(l, m0, 64, 64, x, shaders.FlashCMSharedBytes(shaders.FlashCMShape{M: 16, N: 16, K: 16, NSG: 4, BC: 32, Mode: 0, D: 64, DV: 64, Planes: 1}), 1024); err != nil {
			t.Errorf("%s (MODE 0: no stage) with a bias: %v", m0, err)
		}
	}
}

// TestCMWhyFor: the reason a plan gives for not running the coopmat
// families is the storage type's own — float16's, bfloat16's, and for
// float32 bfloat16's (its planes) — both where the device has no
// cooperative matrices at all and where it has float16's only.
func TestCMWhyFor(t *testing.T) {
	ctx := context.Background()
	p := &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: 64, Nk: 64, D: 64, Dv: 64, Scale: 1,
		Q: spec.BSHD(64, 1, 64), K: spec.BSHD(64, 1, 64), V: spec.BSHD(64, 1, 64), O: spec.BSHD(64, 1, 64)}
	none := h200Info()
	none.CoopMat = nil
	for _, c := range []struct {
		name string
		info device.Info
		want map[spec.DType]string // in flash_cm's declined reason; "" where it runs
	}{
		{"no coopmat", none, map[spec.DType]string{
			spec.Float16:  "flash_cm: float16 cooperative-matrix kernels",
			spec.BFloat16: "flash_cm: bfloat16 cooperative-matrix kernels",
			spec.Float32:  "flash_cm: their float32 build computes in bfloat16 planes: bfloat16 cooperative-matrix kernels",
		}},
		{"f16 coopmat only", h200Info(), map[spec.DType]string{
			spec.Float16:  "",
			spec.BFloat16: "cannot run bfloat16 storage here (bfloat16 cooperative-matrix kernels",
			spec.Float32:  "cannot run float32 storage here (their float32 build computes in bfloat16 planes: bfloat16 cooperative-matrix kernels",
		}},
	} {
		b := syntheticBackend(t, c.info, "", nvidiaLayout(t))
		for dt, want := range c.want {
			pl, err := b.Plan(ctx, p, dt, Fwd)
			if err != nil {
				t.Fatalf("%s %v: %v", c.name, dt, err)
			}
			if want == "" {
				if pl.Family != shaders.KernelFlashCM {
					t.Errorf("%s %v: runs %s, want flash_cm", c.name, dt, pl.Family)
				}
				continue
			}
			if len(pl.Declined) == 0 || !strings.HasPrefix(pl.Declined[0], "flash_cm: ") || !strings.Contains(pl.Declined[0], want) {
				t.Errorf("%s %v: declined %q, want flash_cm's reason with %q", c.name, dt, pl.Declined, want)
			}
		}
	}
}

// TestFlashCMSelection checks the kernel selection on the test device:
// without cooperative matrices (lavapipe) "" keeps the scalar flash kernel
// and "flash_cm" is refused; with them both report flash_cm, and f32
// runs flash_cm where the device has bf16 ones (its planes), else flash.
func TestFlashCMSelection(t *testing.T) {
	dev := devicetest.Open(t)
	_, supErr := cmSupportFor(dev.Info(), spec.Float16)
	b := openBackend(t, "")
	ctx := context.Background()
	p := &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: 64, Nk: 64, D: 64, Dv: 64, Scale: 1,
		Q: spec.BSHD(64, 1, 64), K: spec.BSHD(64, 1, 64), V: spec.BSHD(64, 1, 64), O: spec.BSHD(64, 1, 64)}
	if supErr != nil {
		t.Logf("no flash_cm here: %v", supErr)
		if b.Kernel() != shaders.KernelFlash || familyOf(ctx, b, p, spec.Float16, Fwd) != shaders.KernelFlash {
			t.Errorf("auto without coopmat: Kernel %q", b.Kernel())
		}
		pl, err := b.Plan(ctx, p, spec.Float16, Fwd)
		if err != nil || len(pl.Declined) != 1 || !strings.HasPrefix(pl.Declined[0], "flash_cm: ") {
			t.Errorf("auto without coopmat: plan %+v, %v: want flash_cm declined with a reason", pl, err)
		}
		_, err = New(dev, Options{Kernel: shaders.KernelFlashCM})
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "flash_cm") {
			t.Errorf("explicit flash_cm without coopmat: %v", err)
		}
		return
	}
	if b.Kernel() != shaders.KernelFlashCM {
		t.Errorf("auto with coopmat: Kernel %q", b.Kernel())
	}
	// f32 runs flash_cm's bf16-plane build where the device has bf16
	// cooperative matrices, the scalar flash kernel elsewhere.
	wantF32 := shaders.KernelFlash
	if _, err := b.cmLayout(ctx, spec.Float32); err == nil {
		wantF32 = shaders.KernelFlashCM
	}
	if k := familyOf(ctx, b, p, spec.Float32, Fwd); k != wantF32 {
		t.Errorf("f32 forward runs %q, want %q", k, wantF32)
	}
	if k := familyOf(ctx, b, p, spec.Float16, Fwd); k != shaders.KernelFlashCM {
		t.Errorf("f16 forward runs %q (probe: %v)", k, b.cm[spec.Float16].err)
	}
	if l := b.cm[spec.Float16].layout; l != nil {
		t.Logf("flash_cm layout: %v", l)
	}
	if b2 := openBackend(t, shaders.KernelFlash); b2.Kernel() != shaders.KernelFlash {
		t.Errorf("explicit flash: Kernel %q", b2.Kernel())
	}
}

// TestStaggerSpec: a tile's staggered walk reaches its kernel as spec
// constant 29 STAGGER (flash_cm, bwd_cm_dkdv, bwd_cm_dq), and a tile
// walking in order sets it 0.
func TestStaggerSpec(t *testing.T) {
	l := &CMLayout{M: 16, N: 16, K: 16, SG: 32, AccLen: 8, Mode1: true}
	for _, sw := range []bool{false, true} {
		specs := map[string][]device.Spec{
			"flash_cm":    CMSpec(l, CMTile{NSG: 8, BC: 16, Mode: 1, Stagger: sw}, 128, 128, true),
			"bwd_cm_dkdv": bwdCMSpec(l, true, bwdCMTile{NSG: 4, Step: 64, Mode: 1, KVReg: true, Stagger: sw}, 0, 128, 128, true),
			"bwd_cm_dq":   bwdCMSpec(l, false, bwdCMTile{NSG: 4, Step: 32, Mode: 1, Stagger: sw}, 0, 128, 128, true),
		}
		for name, spec := range specs {
			n := 0
			for _, s := range spec {
				if s.ID == shaders.SpecCMStagger {
					n++
				}
			}
			if n != 1 || specValue(spec, shaders.SpecCMStagger) != b2u(sw) {
				t.Errorf("%s, stagger %v: STAGGER set %d times, value %d", name, sw, n, specValue(spec, shaders.SpecCMStagger))
			}
		}
	}
}

// TestBwdCMSpecLayout: the backward's MODE 1 tiles pass the probed
// columns (CM_COLS, CM_COLD_LO/HI) to both kernels and the local rows (RL,
// SLOTROW) to bwd_cm_dq, which reads them for dropout's keep words; MODE
// 0 passes neither, and every constant is one the kernel declares, once.
func TestBwdCMSpecLayout(t *testing.T) {
	l, err := ParseCMProbe(nvidiaProbe(32), shape16, 32)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dkdv bool
		mode int
		want map[uint32]uint32 // (absent: not set)
	}{
		{false, 1, map[uint32]uint32{shaders.SpecCMCols: 1, shaders.SpecCMColDLo: 0x98981010, shaders.SpecCMColDHi: 0,
			shaders.SpecCMRL: 2, shaders.SpecCMSlotLo: 0x11001100, shaders.SpecCMSlotHi: 0}},
		{true, 1, map[uint32]uint32{shaders.SpecCMCols: 1, shaders.SpecCMColDLo: 0x98981010, shaders.SpecCMColDHi: 0}},
		{false, 0, nil},
		{true, 0, nil},
	} {
		kernel := shaders.KernelBwdCMDQ
		if c.dkdv {
			kernel = shaders.KernelBwdCMDKDV
		}
		sp := bwdCMSpec(l, c.dkdv, bwdCMTile{NSG: 4, Step: 32, Mode: c.mode}, 0, 64, 64, true)
		ids, _ := shaders.SpecIDs(kernel)
		seen := map[uint32]bool{}
		for _, s := range sp {
			if !slices.Contains(ids, s.ID) || seen[s.ID] {
				t.Errorf("%s MODE %d: spec %d set twice or not declared (%v)", kernel, c.mode, s.ID, ids)
			}
			seen[s.ID] = true
		}
		for _, id := range []uint32{shaders.SpecCMCols, shaders.SpecCMColDLo, shaders.SpecCMColDHi, shaders.SpecCMRL, shaders.SpecCMSlotLo, shaders.SpecCMSlotHi} {
			want, ok := c.want[id]
			if seen[id] != ok || specValue(sp, id) != want {
				t.Errorf("%s MODE %d: spec %d set %v value %#x, want set %v value %#x", kernel, c.mode, id, seen[id], specValue(sp, id), ok, want)
			}
		}
	}
}
