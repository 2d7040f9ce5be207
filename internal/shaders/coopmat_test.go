package shaders

import (
	"reflect"
	"slices"
	"testing"

	"github.com/flashvk/flashvk/internal/spirv"
)

func TestCoopMatModules(t *testing.T) {
	for _, k := range CoopMatKernels {
		dts := []string{DTypeF32, DTypeF16, DTypeBF16}
		if k == KernelFlashCMProbe {
			dts = []string{DTypeF16, DTypeBF16}
		}
		if got := KernelDTypes(k); !reflect.DeepEqual(got, dts) {
			t.Errorf("%s: KernelDTypes %v, want %v", k, got, dts)
		}
		if _, err := SPIRV(k, DTypeF32); (err == nil) != (k != KernelFlashCMProbe) {
			t.Errorf("%s: SPIRV(f32) error %v; every coopmat kernel but the probe has an f32 build", k, err)
		}
		for _, dt := range dts {
			m := reflectKernel(t, k, dt)
			if m.Version != 0x00010600 {
				t.Errorf("%s.%s: SPIR-V version %#x, want 1.6 (Vulkan 1.3)", k, dt, m.Version)
			}
			if !m.HasCapability(spirv.CapabilityCooperativeMatrix) {
				t.Errorf("%s.%s: no CooperativeMatrixKHR capability", k, dt)
			}
			// bf16 and f32 (split into bf16 planes) multiply bfloat16.
			bf := dt != DTypeF16
			if m.HasCapability(spirv.CapabilityBFloat16Type) != bf || m.HasCapability(spirv.CapabilityBFloat16CooperativeMatrix) != bf {
				t.Errorf("%s.%s: BFloat16TypeKHR %v, BFloat16CooperativeMatrixKHR %v; want %v", k, dt,
					m.HasCapability(spirv.CapabilityBFloat16Type), m.HasCapability(spirv.CapabilityBFloat16CooperativeMatrix), bf)
			}
			// bf16 is never computed through fp16: the bf16 and f32 modules
			// declare no IEEE half type (glslang still declares the Float16
			// capability for bfloat16 types), the f16 modules no bfloat16 —
			// but for the softcap's tanh, which the bf16 builds of the
			// attention kernels (CMHalfTanh) take in fp16.
			halves, bfloats := 0, 0
			for _, ft := range m.FloatTypes() {
				switch ft {
				case "float16":
					halves++
				case "bfloat16":
					bfloats++
				}
			}
			// and in them only conversions and GLSL's Tanh make fp16 values.
			halfTanh := bf && CMHalfTanh(dt) && k != KernelFlashCMProbe
			wantHalves := 1
			if bf && !halfTanh {
				wantHalves = 0
			}
			if bf && (halves != wantHalves || bfloats != 1) || !bf && (bfloats != 0 || halves != 1) {
				t.Errorf("%s.%s: %d float16 and %d bfloat16 types", k, dt, halves, bfloats)
			}
			if bf {
				var want []string
				if halfTanh {
					want = []string{"OpExtInst GLSL.std.450 21", "OpFConvert"} // 21: Tanh
				}
				if got := m.HalfOps(); !slices.Equal(got, want) {
					t.Errorf("%s.%s: fp16 values made by %q, want %q", k, dt, got, want)
				}
			}
			checkBindings(t, k+"."+dt, k, dt, m, nil)
			ids, _ := SpecIDs(k)
			if got := m.SpecIDs(); !reflect.DeepEqual(got, ids) {
				t.Errorf("%s.%s: spec IDs %v, Go declares %v", k, dt, got, ids)
			}
		}
	}
	if _, err := SPIRV(KernelFlash, DTypeF32); err != nil {
		t.Errorf("scalar flash f32: %v", err)
	}
	if KernelDTypes("nope") != nil {
		t.Error("KernelDTypes of an unknown kernel is not nil")
	}
}

func TestFlashCMSharedBytesMatchSPIRV(t *testing.T) {
	for _, dt := range []string{DTypeF32, DTypeF16, DTypeBF16} {
		t.Run(dt, func(t *testing.T) { testFlashCMSharedBytes(t, dt) })
	}
}

// testFlashCMSharedBytes: the bf16 module has the f16 one's shared arrays
// (16-bit elements), so FlashCMSharedBytes serves both, the f32 one its
// planes' (CMPlanes), and the addressed variant has the base module's.
func testFlashCMSharedBytes(t *testing.T, dt string) {
	for _, k := range []string{KernelFlashCM, Addressed(KernelFlashCM)} {
		testFlashCMSharedBytesOf(t, k, dt)
	}
}

func testFlashCMSharedBytesOf(t *testing.T, k, dt string) {
	m := reflectKernel(t, k, dt)
	type tile struct {
		nsg, bc, mode, d, dv int
		pairs                bool
		rb                   int
	}
	for _, c := range []tile{
		{8, 64, 1, 128, 128, false, 0}, {8, 128, 1, 64, 64, false, 0}, {4, 32, 0, 128, 128, false, 0}, {4, 32, 0, 256, 256, false, 0},
		{4, 64, 1, 96, 40, false, 0}, {2, 16, 0, 1, 1, false, 0}, {8, 64, 0, 64, 80, false, 0}, {8, 16, 1, 128, 128, false, 0}, {8, 16, 1, 16, 128, false, 0},
		// Subgroup pairs (MODE 0 and the f32 build have none: the spec
		// constant is ignored there, and so are the mirror's pairs).
		{8, 32, 1, 256, 256, true, 0}, {4, 32, 1, 256, 256, true, 0}, {2, 64, 1, 96, 32, true, 0}, {8, 32, 0, 256, 256, true, 0},
		// Row blocks (the host asks for them in MODE 1 only, without pairs).
		{4, 64, 1, 64, 64, false, 2}, {8, 64, 1, 64, 64, false, 2}, {4, 32, 1, 128, 128, false, 2}, {2, 128, 1, 80, 48, false, 2},
	} {
		br := 16 * c.nsg * max(c.rb, 1)
		if c.pairs && c.mode == 1 && CMPlanes(dt) == 1 {
			br /= 2
		}
		spec := map[uint32]uint32{
			SpecWorkgroupSize: uint32(32 * c.nsg), SpecD: uint32(c.d), SpecDV: uint32(c.dv), SpecBR: uint32(br),
			SpecBC: uint32(c.bc), SpecSubgroup: 32, SpecCMM: 16, SpecCMN: 16, SpecCMK: 16, SpecCMMode: uint32(c.mode), SpecCMLen: 8,
		}
		if c.pairs {
			spec[SpecCMPairs] = 1
		}
		if c.rb > 0 {
			spec[SpecCMRowBlk] = uint32(c.rb)
		}
		base := FlashCMSharedBytes(FlashCMShape{M: 16, N: 16, K: 16, NSG: c.nsg, BC: c.bc, Mode: c.mode, D: c.d, DV: c.dv, Planes: CMPlanes(dt), Pairs: c.pairs, RowBlocks: c.rb})
		for _, bias := range biasSpecs(dt) {
			spec[SpecExt] = bias.ext
			got, err := m.SharedBytes(spec)
			if err != nil {
				t.Fatalf("%s %+v: %v", k, c, err)
			}
			want := base
			if bias.esz != 0 && c.mode == 1 {
				want += BiasStageBytes(int(bias.esz), c.nsg, 16, 16, c.bc/16) - BiasStagePlaceholder
			}
			// The Go mirror rounds MODE 1's half scalar up to 4 bytes.
			if got > want || want-got > 2 {
				t.Errorf("%s %+v ext %d: SPIR-V shared %d bytes, the mirror %d", k, c, bias.ext, got, want)
			}
		}
	}
}

// biasSpecs are SpecExt values for the shared-memory mirrors' checks of
// storage type dt: none, and a bias of each element size the storage
// type takes (esz: the bias stage's bytes per element; 0 without a bias).
func biasSpecs(dt string) []struct{ ext, esz uint32 } {
	cases := []struct{ ext, esz uint32 }{{0, 0}, {1 | ExtSpecBias | ExtSpecBiasF32, 4}}
	if dt != DTypeF32 {
		cases = append(cases, struct{ ext, esz uint32 }{1 | ExtSpecBias, 2})
	}
	return cases
}

func TestBwdCMSharedBytesMatchSPIRV(t *testing.T) {
	for _, dt := range []string{DTypeF32, DTypeF16, DTypeBF16} {
		t.Run(dt, func(t *testing.T) { testBwdCMSharedBytes(t, dt) })
	}
}

// testBwdCMSharedBytes: as testFlashCMSharedBytes, for the backward (the
// f32 modules' planes and fp32 results included).
func testBwdCMSharedBytes(t *testing.T, dt string) {
	for _, k := range []string{KernelBwdCMDKDV, KernelBwdCMDQ, Addressed(KernelBwdCMDKDV), Addressed(KernelBwdCMDQ)} {
		m := reflectKernel(t, k, dt)
		dkdv := BaseKernel(k) == KernelBwdCMDKDV
		type bwdCase struct{ m, sg, nsg, step, mode, d, dv, part int }
		cases := []bwdCase{
			{16, 32, 4, 32, 1, 128, 128, 0}, {16, 32, 4, 64, 1, 64, 64, 0}, {16, 32, 2, 32, 0, 128, 128, 0},
			{16, 32, 1, 16, 0, 256, 256, 0}, {8, 8, 2, 16, 0, 96, 40, 0}, {16, 32, 2, 16, 0, 1, 1, 0}, {16, 32, 8, 32, 1, 64, 80, 0},
			// part: bwd_cm_dkdv's PART 1 and 2 (bwd_cm_dq has none).
			{16, 32, 1, 16, 1, 256, 256, 1}, {16, 32, 2, 16, 1, 256, 256, 2}, {16, 32, 2, 16, 0, 96, 200, 1}, {8, 8, 2, 32, 1, 40, 96, 2},
			// the f32 build's tiles (the result's staging decides some).
			{16, 32, 2, 16, 1, 64, 64, 0}, {16, 32, 1, 32, 1, 64, 64, 0}, {16, 32, 4, 16, 1, 32, 32, 0}, {16, 32, 4, 16, 1, 8, 8, 0},
			{16, 32, 1, 16, 1, 16, 64, 1}, {16, 32, 4, 32, 1, 64, 16, 0},
		}
		// With KVREG the 16-bit builds stage Q_i and dO_i over K_j and V_j
		// (the f32 build keeps them apart), and the parts that write dK
		// only stage V_j over K_j.
		kvCases := []bwdCase{
			{16, 32, 4, 32, 1, 128, 128, 0}, {16, 32, 4, 64, 1, 128, 128, 2}, {16, 32, 8, 64, 1, 128, 128, 1},
			{16, 32, 4, 128, 1, 64, 64, 0}, {8, 8, 2, 16, 0, 96, 40, 0}, {16, 32, 2, 16, 1, 16, 200, 2},
			// dK's column halves (V_j staged where K_j was).
			{16, 32, 4, 16, 1, 256, 256, 3}, {16, 32, 4, 32, 1, 256, 256, 4}, {16, 32, 2, 16, 1, 200, 168, 4}, {8, 8, 2, 16, 0, 96, 40, 3},
		}
		// bwd_cm_dq's subgroup pairs (BR = NSG·M/2; the f32 build has none).
		pairCases := []bwdCase{{16, 32, 4, 32, 1, 256, 256, 0}, {16, 32, 8, 32, 1, 256, 256, 0}, {8, 8, 2, 16, 1, 80, 80, 0}, {16, 32, 2, 64, 1, 128, 96, 0}}
		// Pairs over the features (FHALVES: BC = NSG·M/2 in bwd_cm_dkdv,
		// every build, BR = NSG·M/2 in bwd_cm_dq, the f32 build's).
		fhCases := []bwdCase{{16, 32, 4, 16, 1, 128, 128, 0}, {16, 32, 8, 16, 1, 128, 128, 0}, {16, 32, 2, 16, 1, 96, 64, 0}, {8, 8, 2, 16, 1, 64, 64, 0}, {16, 32, 8, 16, 1, 80, 72, 0}, {16, 32, 4, 16, 1, 40, 100, 0},
			{16, 32, 8, 16, 1, 256, 256, 0}, {16, 32, 4, 32, 1, 256, 192, 0}}
		// bwd_cm_dq's two row blocks per subgroup (BR = NSG·M·2; the
		// 16-bit builds').
		rbCases := []bwdCase{{16, 32, 4, 32, 1, 64, 64, 0}, {8, 8, 2, 32, 1, 40, 64, 0}, {16, 32, 4, 32, 1, 128, 96, 0}}
		const plainCase, kvCase, pairCase, rbCase, fhCase = 0, 1, 2, 3, 4
		var all []bwdCase
		var kinds []int
		add := func(kind int, cs []bwdCase) {
			all = append(all, cs...)
			for range cs {
				kinds = append(kinds, kind)
			}
		}
		add(plainCase, cases)
		add(kvCase, kvCases)
		if !dkdv {
			add(pairCase, pairCases)
			if CMPlanes(dt) == 1 {
				add(rbCase, rbCases)
			}
		}
		if CMPlanes(dt) > 1 || dkdv {
			add(fhCase, fhCases)
		}
		for i, c := range all {
			kv, pairs, rb, fh := kinds[i] == kvCase, kinds[i] == pairCase, kinds[i] == rbCase, kinds[i] == fhCase
			br, bc := c.step, c.nsg*c.m // dkdv: BR query rows per step, BC keys
			if !dkdv {
				br, bc = c.nsg*c.m, c.step
			}
			if pairs {
				br = c.nsg / 2 * c.m
			}
			if rb {
				br *= 2
			}
			if fh && dkdv {
				bc = c.nsg / 2 * c.m
			} else if fh {
				br = c.nsg / 2 * c.m
			}
			spec := map[uint32]uint32{
				SpecWorkgroupSize: uint32(c.sg * c.nsg), SpecD: uint32(c.d), SpecDV: uint32(c.dv), SpecBR: uint32(br),
				SpecBC: uint32(bc), SpecSubgroup: uint32(c.sg), SpecCMM: uint32(c.m), SpecCMN: uint32(c.m), SpecCMK: uint32(c.m),
				SpecCMMode: uint32(c.mode), SpecCMLen: 8,
			}
			shape := BwdCMShape{DKDV: dkdv, M: c.m, N: c.m, K: c.m, NSG: c.nsg, BR: br, BC: bc, Mode: c.mode, D: c.d, DV: c.dv,
				Planes: CMPlanes(dt)}
			if dkdv {
				spec[SpecCMPart], shape.Part = uint32(c.part), c.part
				if kv {
					spec[SpecCMKVReg], shape.KVReg = 1, true
				}
			}
			if pairs {
				spec[SpecCMPairs] = 1
			}
			if rb {
				spec[SpecCMRowBlk] = 2
			}
			if fh {
				spec[SpecCMFHalves], shape.FHalves = 1, true
				if CMPlanes(dt) == 1 { // (the 16-bit builds' pairs hold K_j and V_j in registers)
					spec[SpecCMKVReg], shape.KVReg = 1, true
				}
			}
			for _, bias := range biasSpecs(dt) {
				spec[SpecExt] = bias.ext
				got, err := m.SharedBytes(spec)
				if err != nil {
					t.Fatalf("%s %+v: %v", k, c, err)
				}
				want := BwdCMSharedBytes(shape) // (no bias stage: the backward loads its values per component)
				// The Go mirror rounds MODE 1's one-element scratch arrays up.
				if got > want || want-got > 8 {
					t.Errorf("%s %+v kvreg %v pairs %v row blocks %v fhalves %v ext %d: SPIR-V shared %d bytes, the mirror %d", k, c, kv, pairs, rb, fh, bias.ext, got, want)
				}
			}
		}
	}
}
