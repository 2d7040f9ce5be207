package shaders

import (
	"encoding/binary"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/internal/spirv"
)

// kvGLSLName maps a KVParams field to its kv_params.glsl member name
// (QB → q_b, NKB → nk_b, PageSize → page_size, B and Hq unchanged).
func kvGLSLName(goName string) string {
	switch goName {
	case "B", "Hq", "Hkv", "Nq":
		return goName
	}
	if n := len(goName); n >= 2 && n <= 3 && strings.ToUpper(goName) == goName {
		return strings.ToLower(goName[:n-1]) + "_" + strings.ToLower(goName[n-1:])
	}
	var out []rune
	for i, r := range goName {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				out = append(out, '_')
			}
			r += 'a' - 'A'
		}
		out = append(out, r)
	}
	return string(out)
}

func TestKVPushConstantsMirrorKVParams(t *testing.T) {
	typ := reflect.TypeOf(KVParams{})
	if got := binary.Size(KVParams{}); got != KVParamsSize || KVParamsSize > 128 {
		t.Fatalf("binary.Size(KVParams) = %d, KVParamsSize %d (≤ 128)", got, KVParamsSize)
	}
	for _, k := range KVKernels {
		for _, dt := range KernelDTypes(k) {
			name := k + "." + dt
			pc := reflectKernel(t, k, dt).PushConstants
			if pc == nil || int(pc.Size) != KVParamsSize || len(pc.Members) != typ.NumField() {
				t.Errorf("%s: push-constant block %+v, want KVParams (%d bytes, %d members)", name, pc, KVParamsSize, typ.NumField())
				continue
			}
			for i, mem := range pc.Members {
				f := typ.Field(i)
				want := "uint32"
				if f.Type.Kind() == reflect.Float32 {
					want = "float32"
				}
				if int(mem.Offset) != int(f.Offset) || mem.Name != kvGLSLName(f.Name) || mem.Kind != want {
					t.Errorf("%s: member %d %q (%s at %d), KVParams.%s wants %q (%s at %d)",
						name, i, mem.Name, mem.Kind, mem.Offset, f.Name, kvGLSLName(f.Name), want, f.Offset)
				}
			}
		}
	}
	p := KVParams{B: 1, Hq: 2, Hkv: 3, Nq: 4, Group: 5, QB: 6, QS: 7, QH: 8, KB: 9, KS: 10, KH: 11, VB: 12, VS: 13, VH: 14,
		OB: 15, OS: 16, OH: 17, Scale: 0.25, Mask: 2, PageSize: 20, MaxPages: 21, NewRows: 22, NKB: 23, NKS: 24, NKH: 25,
		NVB: 26, NVS: 27, NVH: 28, SplitKeys: 29, Splits: 30}
	checkRoundTrip(t, p, p.Bytes(), KVParamsSize)
}

func TestKVBindings(t *testing.T) {
	// Bindings that hold float32 or uint32 whatever the storage type.
	fixed := map[string]map[int]string{
		KernelDecode:        {4: "float32", 5: "uint32", 6: "float32"},
		KernelDecodeCombine: {1: "float32", 2: "float32"},
		KernelKVAppend:      {4: "uint32"},
	}
	for _, k := range KVKernels {
		n, err := Bindings(k)
		if err != nil {
			t.Fatal(err)
		}
		if got := KernelDTypes(k); !slices.Equal(got, DTypes) {
			t.Errorf("%s: built for %v, want %v", k, got, DTypes)
		}
		ids, _ := SpecIDs(k)
		for _, dt := range DTypes {
			name := k + "." + dt
			m := reflectKernel(t, k, dt)
			if m.Version != 0x00010300 {
				t.Errorf("%s: SPIR-V version %#x, want 1.3", name, m.Version)
			}
			if got := m.SpecIDs(); !reflect.DeepEqual(got, ids) {
				t.Errorf("%s: spec IDs %v, Go declares %v", name, got, ids)
			}
			// decode declares cache K twice (scalar and uvec4 views; the
			// uvec4 one reflects as "other").
			seen := map[uint32]bool{}
			for _, b := range m.Bindings {
				want, ok := fixed[k][int(b.Binding)]
				if !ok {
					want = map[string]string{DTypeF32: "float32", DTypeF16: "float16", DTypeBF16: "uint16"}[dt]
				}
				if b.Set != 0 || int(b.Binding) >= n || (b.Elem != want && b.Elem != "other") {
					t.Errorf("%s: binding set %d binding %d of %s, want one of %d bindings holding %s", name, b.Set, b.Binding, b.Elem, n, want)
				}
				seen[b.Binding] = true
			}
			if len(seen) != n {
				t.Errorf("%s: %d distinct bindings, Go declares %d", name, len(seen), n)
			}
			if m.HasCapability(spirv.CapabilityFloat16) || m.HasCapability(spirv.CapabilityInt16) {
				t.Errorf("%s: declares Float16 or Int16", name)
			}
		}
	}
}

// TestKVMeta: the META buffer is the lengths, the page table and, only
// with options, the header decode reads at KV_META_EXT (window sides
// wider than Nq + Nk as −1, flags, softcap bits, slopes).
func TestKVMeta(t *testing.T) {
	kv := &spec.KV{SeqLens: []int32{5, 0}, New: 1, PageSize: 4, MaxPages: 3, Pages: 6, Table: []int32{4, 2, -1, 0, -1, -1}}
	p := &spec.Problem{B: 2, Hq: 2, Hkv: 1, Nq: 2, Nk: 12, D: 8, Dv: 8, Scale: 1, KV: kv}
	plain := []uint32{5, 0, 4, 2, math.MaxUint32, 0, math.MaxUint32, math.MaxUint32}
	if got := KVMetaWords(p); !slices.Equal(got, plain) || KVMetaLen(p) != len(plain) || KVMetaExt(p) != len(plain) {
		t.Errorf("plain: %v (len %d, header at %d), want %v", got, KVMetaLen(p), KVMetaExt(p), plain)
	}
	p.Ext = &spec.Ext{Left: 14, Right: 0, BottomRight: true, Softcap: 50, Slopes: []float32{0.5, 0.25, 1, 2}, SlopesPerBatch: true}
	want := append(slices.Clone(plain), math.MaxUint32, 0, ExtBottomRight|ExtSoftcap|ExtALiBi|ExtALiBiBatch, math.Float32bits(50),
		math.Float32bits(0.5), math.Float32bits(0.25), math.Float32bits(1), math.Float32bits(2))
	if got := KVMetaWords(p); !slices.Equal(got, want) || KVMetaLen(p) != len(want) || KVMetaExt(p) != len(plain) {
		t.Errorf("options: %v (len %d), want %v", got, KVMetaLen(p), want)
	}
	p.Ext = &spec.Ext{Left: 3, Right: -1}
	want = append(slices.Clone(plain), 3, math.MaxUint32, 0, 0)
	if got := KVMetaWords(p); !slices.Equal(got, want) || KVMetaLen(p) != len(want) {
		t.Errorf("window: %v, want %v", got, want)
	}
	b := KVMetaBytes(p)
	for i, w := range want {
		if binary.LittleEndian.Uint32(b[4*i:]) != w || len(b) != 4*len(want) {
			t.Fatalf("KVMetaBytes: word %d of %d bytes, want %#x", i, len(b), w)
		}
	}
}
