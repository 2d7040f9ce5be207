package shaders

import (
	"slices"
	"testing"

	"github.com/flashvk/flashvk/internal/spirv"
)

// S stands for the module's storage type in bindingViews.
const S = "S"

// bindingViews are the element kinds each kernel's bindings hold, binding
// by binding (each kernel's header lists them): S the storage type; a
// binding read through two views (the bias and the dS target: float32
// and the storage type) lists both.
var bindingViews = map[string][][]string{
	KernelNaive:   {{S}, {S}, {S}, {S}, {"float32"}, {"float32"}},
	KernelMinimal: {{S}, {S}, {S}, {S}, {"float32"}},
	// Q K V O, LSE, Ext, bias, its summary.
	KernelFlash:   {{S}, {S}, {S}, {S}, {"float32"}, {"uint32"}, {"float32", S}, {"uint32"}},
	KernelFlashCM: {{S}, {S}, {S}, {S}, {"float32"}, {"uint32"}, {"float32", S}, {"uint32"}},
	// O dO, D, Ext.
	KernelBwdPre: {{S}, {S}, {"float32"}, {"uint32"}},
	// Q K V dO, LSE D, dK dV, Ext, bias, its summary.
	KernelBwdDKDV:   {{S}, {S}, {S}, {S}, {"float32"}, {"float32"}, {S}, {S}, {"uint32"}, {"float32", S}, {"uint32"}},
	KernelBwdCMDKDV: {{S}, {S}, {S}, {S}, {"float32"}, {"float32"}, {S}, {S}, {"uint32"}, {"float32", S}, {"uint32"}},
	// Q K V dO, LSE D, dQ, Ext, bias, its summary, dS target.
	KernelBwdDQ:        {{S}, {S}, {S}, {S}, {"float32"}, {"float32"}, {S}, {"uint32"}, {"float32", S}, {"uint32"}, {"float32", S}},
	KernelBwdCMDQ:      {{S}, {S}, {S}, {S}, {"float32"}, {"float32"}, {S}, {"uint32"}, {"float32", S}, {"uint32"}, {"float32", S}},
	KernelFlashCMProbe: {{"float32"}},
	// Ext, bias, summary; Ext, dS scratch, dBias, partial sums.
	KernelBiasSummary: {{"uint32"}, {"float32", S}, {"uint32"}},
	KernelBiasReduce:  {{"uint32"}, {"float32"}, {"float32", S}, {"float32"}},
}

// views is bindingViews' kinds of binding bnd of kernel k in a module of
// storage type dt (S resolved; bf16 storage is uint16 bits).
func views(k string, bnd int, dt string) []string {
	var out []string
	for _, v := range bindingViews[BaseKernel(k)][bnd] {
		if v == S {
			v = elemKind(dt)
		}
		out = append(out, v)
	}
	return out
}

// checkBindings checks module m (kernel k, storage dt) against
// bindingViews: set 0, bindings 0 … Bindings(k)−1 each declared (but
// skip's, which an addressed module reads by address instead), every
// declaration of an element kind its binding lists ("other" — a uvec4
// view — only on a storage-type binding), and every kind a binding lists
// declared.
func checkBindings(t *testing.T, name, k, dt string, m *spirv.Module, skip []int) {
	t.Helper()
	n, err := Bindings(k)
	if err != nil {
		t.Fatal(err)
	}
	if len(bindingViews[BaseKernel(k)]) != n {
		t.Fatalf("%s: bindingViews lists %d bindings, Go declares %d", name, len(bindingViews[BaseKernel(k)]), n)
	}
	got := map[int][]string{}
	for _, b := range m.Bindings {
		bnd := int(b.Binding)
		if b.Set != 0 || bnd >= n || slices.Contains(skip, bnd) {
			t.Errorf("%s: declares set %d binding %d (%d bindings, address slots %v)", name, b.Set, b.Binding, n, skip)
			continue
		}
		want := views(k, bnd, dt)
		if !slices.Contains(want, b.Elem) && !(b.Elem == "other" && slices.Contains(want, elemKind(dt))) {
			t.Errorf("%s: binding %d holds %s, want %v", name, bnd, b.Elem, want)
		}
		got[bnd] = append(got[bnd], b.Elem)
	}
	for bnd := range n {
		if slices.Contains(skip, bnd) {
			continue
		}
		for _, v := range views(k, bnd, dt) {
			if !slices.Contains(got[bnd], v) {
				t.Errorf("%s: binding %d has no %s view (declared: %v)", name, bnd, v, got[bnd])
			}
		}
	}
}

func TestBiasKernels(t *testing.T) {
	for _, k := range BiasKernels {
		if got := KernelDTypes(k); !slices.Equal(got, DTypes) {
			t.Errorf("%s: built for %v, want %v", k, got, DTypes)
		}
		for _, dt := range DTypes {
			m := reflectKernel(t, k, dt)
			if m.Version != 0x00010300 {
				t.Errorf("%s.%s: SPIR-V version %#x, want 1.3", k, dt, m.Version)
			}
			checkBindings(t, k+"."+dt, k, dt, m, nil)
		}
	}
}
