package shaders

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/internal/spirv"
)

// reflectKernel reads the embedded SPIR-V module of kernel k in dtype dt.
func reflectKernel(t *testing.T, k, dt string) *spirv.Module {
	t.Helper()
	spv, err := SPIRV(k, dt)
	if err != nil {
		t.Fatal(err)
	}
	m, err := spirv.Reflect(spv)
	if err != nil {
		t.Fatalf("%s.%s: %v", k, dt, err)
	}
	return m
}

func reflectAll(t *testing.T) map[string]*spirv.Module {
	t.Helper()
	out := map[string]*spirv.Module{}
	for _, k := range append(append([]string(nil), Kernels...), CoopMatKernels...) {
		for _, dt := range KernelDTypes(k) {
			out[k+"."+dt] = reflectKernel(t, k, dt)
		}
	}
	return out
}

// glslName maps a Go field name of Params to its params.glsl member name
// (QB → q_b; B, Hq, … unchanged).
func glslName(goName string) string {
	if len(goName) == 2 && strings.ContainsRune("QKVO", rune(goName[0])) && strings.ContainsRune("BSH", rune(goName[1])) {
		return strings.ToLower(goName[:1]) + "_" + strings.ToLower(goName[1:])
	}
	switch goName {
	case "Scale", "Mask", "Group":
		return strings.ToLower(goName)
	}
	return goName
}

func TestPushConstantsMirrorParams(t *testing.T) {
	typ := reflect.TypeOf(Params{})
	if got := binary.Size(Params{}); got != ParamsSize {
		t.Fatalf("binary.Size(Params) = %d, want ParamsSize %d", got, ParamsSize)
	}
	if ParamsSize > 128 {
		t.Fatalf("ParamsSize %d exceeds the 128-byte push-constant minimum", ParamsSize)
	}
	for name, m := range reflectAll(t) {
		pc := m.PushConstants
		if strings.HasPrefix(name, KernelFlashCMProbe+".") {
			// The probe takes no push constants (spec constants only).
			if pc != nil {
				t.Errorf("%s: push-constant block of %d bytes, want none", name, pc.Size)
			}
			continue
		}
		if pc == nil {
			t.Errorf("%s: no push-constant block", name)
			continue
		}
		if int(pc.Size) != binary.Size(Params{}) {
			t.Errorf("%s: push-constant block is %d bytes, Params is %d", name, pc.Size, binary.Size(Params{}))
		}
		if len(pc.Members) != typ.NumField() {
			t.Errorf("%s: push-constant block has %d members, Params %d fields", name, len(pc.Members), typ.NumField())
			continue
		}
		checkParamsMembers(t, name, pc.Members)
	}
}

// checkParamsMembers checks push-constant members 0 … NumField(Params)−1
// against Params' fields: offsets, names and types.
func checkParamsMembers(t *testing.T, name string, members []spirv.Member) {
	t.Helper()
	typ := reflect.TypeOf(Params{})
	for i, mem := range members[:min(len(members), typ.NumField())] {
		f := typ.Field(i)
		if int(mem.Offset) != int(f.Offset) {
			t.Errorf("%s: member %d %q at offset %d, Params.%s at %d", name, i, mem.Name, mem.Offset, f.Name, f.Offset)
		}
		if mem.Name != glslName(f.Name) {
			t.Errorf("%s: member %d is %q, Params field %d is %s (want %q)", name, i, mem.Name, i, f.Name, glslName(f.Name))
		}
		want := "uint32"
		if f.Type.Kind() == reflect.Float32 {
			want = "float32"
		}
		if mem.Kind != want || int(mem.Size) != int(f.Type.Size()) || mem.Len != 0 {
			t.Errorf("%s: member %q is %s (%d bytes, length %d), Params.%s is %s", name, mem.Name, mem.Kind, mem.Size, mem.Len, f.Name, f.Type)
		}
	}
}

func TestParamsBytes(t *testing.T) {
	p := Params{B: 1, Hq: 2, Hkv: 3, Nq: 4, Nk: 5, QB: 6, QS: 7, QH: 8, KB: 9, KS: 10, KH: 11,
		VB: 12, VS: 13, VH: 14, OB: 15, OS: 16, OH: 17, Scale: 0.5, Mask: 2, Group: 19}
	checkRoundTrip(t, p, p.Bytes(), ParamsSize)
}

// checkRoundTrip decodes b (little-endian) into a T and checks that it is
// p and that b has size bytes.
func checkRoundTrip[T comparable](t *testing.T, p T, b []byte, size int) {
	t.Helper()
	var q T
	if _, err := binary.Decode(b, binary.LittleEndian, &q); err != nil {
		t.Fatal(err)
	}
	if q != p || len(b) != size {
		t.Fatalf("Bytes round trip: got %+v (%d bytes), want %+v", q, len(b), p)
	}
}

func TestSpecIDs(t *testing.T) {
	for name, m := range reflectAll(t) {
		k := name[:strings.IndexByte(name, '.')]
		want, _ := SpecIDs(k)
		if got := m.SpecIDs(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: SPIR-V spec IDs %v, Go declares %v", name, got, want)
		}
	}
}

func TestBindingsAndCapabilities(t *testing.T) {
	for _, k := range Kernels {
		for _, dt := range DTypes {
			spv, _ := SPIRV(k, dt)
			m, err := spirv.Reflect(spv)
			if err != nil {
				t.Fatal(err)
			}
			name := k + "." + dt
			if m.Version != 0x00010300 {
				t.Errorf("%s: SPIR-V version %#x, want 1.3 (Vulkan 1.1)", name, m.Version)
			}
			checkBindings(t, name, k, dt, m, nil)
			if m.HasCapability(spirv.CapabilityFloat16) {
				t.Errorf("%s: declares the Float16 capability (needs shaderFloat16)", name)
			}
			if m.HasCapability(spirv.CapabilityInt16) {
				t.Errorf("%s: declares the Int16 capability (needs shaderInt16)", name)
			}
			if got := m.HasCapability(spirv.CapabilityStorageBuffer16BitAccess); got != (dt != DTypeF32) {
				t.Errorf("%s: StorageBuffer16BitAccess capability = %v", name, got)
			}
		}
	}
}

func TestSPIRVErrors(t *testing.T) {
	if _, err := SPIRV("nope", DTypeF32); err == nil {
		t.Error("unknown kernel: no error")
	}
	if _, err := SPIRV(KernelFlash, "f8"); err == nil {
		t.Error("unknown dtype: no error")
	}
}
