package shaders

import (
	"bufio"
	"encoding/binary"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/flashvk/flashvk/internal/spirv"
)

func TestAddressedNames(t *testing.T) {
	all := append(append([]string(nil), Kernels...), CoopMatKernels...)
	for _, k := range all {
		a := Addressed(k)
		if a != k+".addr" {
			t.Errorf("Addressed(%q) = %q", k, a)
		}
		want := slices.Contains(AddressedKernels, k)
		if HasAddressed(k) != want {
			t.Errorf("HasAddressed(%q) = %v, want %v", k, !want, want)
		}
		if HasAddressed(a) {
			t.Errorf("HasAddressed(%q) = true for an addressed name", a)
		}
		if !want {
			if _, err := AddressSlots(k); err == nil {
				t.Errorf("AddressSlots(%q): no error", k)
			}
			if _, err := Bindings(a); err == nil {
				t.Errorf("Bindings(%q): no error", a)
			}
			if KernelDTypes(a) != nil {
				t.Errorf("KernelDTypes(%q) = %v, want nil", a, KernelDTypes(a))
			}
			if _, err := SPIRV(a, KernelDTypes(k)[0]); err == nil {
				t.Errorf("SPIRV(%q): no error", a)
			}
			continue
		}
		slots, err := AddressSlots(k)
		if err != nil {
			t.Fatal(err)
		}
		if s2, err := AddressSlots(a); err != nil || !reflect.DeepEqual(s2, slots) {
			t.Errorf("AddressSlots(%q) = %v, %v; base %v", a, s2, err, slots)
		}
		n, _ := Bindings(k)
		if na, err := Bindings(a); err != nil || na != n {
			t.Errorf("Bindings(%q) = %d, %v; base %d", a, na, err, n)
		}
		if len(slots) == 0 || len(slots) > MaxAddressSlots || !slices.IsSorted(slots) || slots[len(slots)-1] >= n {
			t.Errorf("%s: address slots %v (bindings %d, at most %d slots, ascending)", k, slots, n, MaxAddressSlots)
		}
		ids, _ := SpecIDs(k)
		if ia, err := SpecIDs(a); err != nil || !reflect.DeepEqual(ia, ids) {
			t.Errorf("SpecIDs(%q) = %v, %v; base %v", a, ia, err, ids)
		}
		if !reflect.DeepEqual(KernelDTypes(a), KernelDTypes(k)) {
			t.Errorf("KernelDTypes(%q) = %v, base %v", a, KernelDTypes(a), KernelDTypes(k))
		}
		if slices.Contains(Kernels, k) {
			c, lim := Config{WG: 64, BR: 16, BC: 16}, Limits{SharedBytes: 32768, Subgroup: 32, MaxWorkgroupSize: 1024}
			if LoopIterations(a, c, 64, 64, 100, 100, 2) != LoopIterations(k, c, 64, 64, 100, 100, 2) {
				t.Errorf("LoopIterations(%q) differs from its base's", a)
			}
			if e1, e2 := CheckConfig(a, c, 64, 64, false, lim), CheckConfig(k, c, 64, 64, false, lim); (e1 == nil) != (e2 == nil) {
				t.Errorf("CheckConfig(%q) = %v, base %v", a, e1, e2)
			}
		}
		for _, dt := range DTypes {
			_, err := SPIRV(a, dt)
			if built := slices.Contains(KernelDTypes(k), dt); (err == nil) != built {
				t.Errorf("SPIRV(%q, %s): %v (built: %v)", a, dt, err, built)
			}
		}
	}
	for _, bad := range []string{"nope.addr", "flash.addr.addr", ".addr", "flash.ADDR"} {
		if _, err := AddressSlots(bad); err == nil {
			t.Errorf("AddressSlots(%q): no error", bad)
		}
		if _, err := Bindings(bad); err == nil {
			t.Errorf("Bindings(%q): no error", bad)
		}
	}
}

func TestAddressedParamsBytes(t *testing.T) {
	if got := binary.Size(AddressedParams{}); got != AddressedParamsSize || AddressedParamsSize != 128 {
		t.Fatalf("binary.Size(AddressedParams) = %d, AddressedParamsSize %d, want 128", got, AddressedParamsSize)
	}
	p := AddressedParams{
		Params: Params{B: 1, Hq: 2, Hkv: 3, Nq: 4, Nk: 5, QB: 6, QS: 7, QH: 8, KB: 9, KS: 10, KH: 11,
			VB: 12, VS: 13, VH: 14, OB: 15, OS: 16, OH: 17, Scale: 0.5, Mask: 2, Group: 19},
		Addr: [MaxAddressSlots]uint64{1 << 40, 2, 3<<33 | 16, 0xffff_ffff_ffff_fff0, 5, 6},
	}
	b := p.Bytes()
	checkRoundTrip(t, p, b, AddressedParamsSize)
	if !reflect.DeepEqual(b[:ParamsSize], p.Params.Bytes()) {
		t.Error("the first ParamsSize bytes differ from Params.Bytes")
	}
	if binary.LittleEndian.Uint64(b[ParamsSize:]) != p.Addr[0] {
		t.Errorf("Addr[0] is not at byte %d", ParamsSize)
	}
}

// operandDecl is one OPERAND / OPERAND_V line of a kernel's source.
type operandDecl struct {
	slot, binding int
	name, op      string
	vec, readonly bool
}

var operandRE = regexp.MustCompile(`^OPERAND(_V)?\((\d+), (\d+), (\w+), (\w+), (readonly|writeonly)\)$`)
var includeRE = regexp.MustCompile(`^#include "([^"]+)"`)

// sourceOperands returns the operand declarations of source file name
// (in this folder) and of the files it includes, in source order.
func sourceOperands(t *testing.T, name string) []operandDecl {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []operandDecl
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := includeRE.FindStringSubmatch(line); m != nil {
			out = append(out, sourceOperands(t, m[1])...)
			continue
		}
		m := operandRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slot, _ := strconv.Atoi(m[2])
		bnd, _ := strconv.Atoi(m[3])
		out = append(out, operandDecl{slot: slot, binding: bnd, name: m[4], op: m[5], vec: m[1] != "", readonly: m[6] == "readonly"})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAddressSlotsMatchSources checks AddressSlots against the OPERAND
// declarations of every kernel: slots 0, 1, … in binding order; kernels
// without an addressed variant declare no operand that way.
func TestAddressSlotsMatchSources(t *testing.T) {
	for _, k := range append(append([]string(nil), Kernels...), CoopMatKernels...) {
		ops := sourceOperands(t, k+".comp")
		if !HasAddressed(k) {
			if len(ops) != 0 {
				t.Errorf("%s: %d OPERAND declarations, but no addressed variant", k, len(ops))
			}
			continue
		}
		slots, _ := AddressSlots(k)
		var got []int
		for i, o := range ops {
			if o.slot != i {
				t.Errorf("%s: operand %s has slot %d, want %d (binding order)", k, o.op, o.slot, i)
			}
			if o.vec != slices.Contains(CoopMatKernels, k) {
				t.Errorf("%s: operand %s: OPERAND_V = %v", k, o.op, o.vec)
			}
			got = append(got, o.binding)
		}
		if !reflect.DeepEqual(got, slots) {
			t.Errorf("%s: sources declare operands at bindings %v, AddressSlots %v", k, got, slots)
		}
	}
}

// elemKind is the SPIR-V kind of storage type dt's elements.
func elemKind(dt string) string {
	return map[string]string{DTypeF32: "float32", DTypeF16: "float16", DTypeBF16: "uint16"}[dt]
}

func TestAddressedModules(t *testing.T) {
	for name, m := range reflectAll(t) {
		if m.HasCapability(spirv.CapabilityPhysicalStorageBufferAddresses) || m.HasCapability(spirv.CapabilityInt64) ||
			m.AddressingModel != 0 || len(m.BufferReferences) != 0 {
			t.Errorf("%s: base module uses addresses or 64-bit integers", name)
		}
	}
	for _, k := range AddressedKernels {
		a := Addressed(k)
		slots, _ := AddressSlots(k)
		ops := sourceOperands(t, k+".comp")
		ids, _ := SpecIDs(a)
		for _, dt := range KernelDTypes(a) {
			name := a + "." + dt
			base := reflectKernel(t, k, dt)
			m := reflectKernel(t, a, dt)
			if m.Version != base.Version {
				t.Errorf("%s: SPIR-V version %#x, base %#x", name, m.Version, base.Version)
			}
			if got := m.SpecIDs(); !reflect.DeepEqual(got, ids) {
				t.Errorf("%s: spec IDs %v, Go declares %v", name, got, ids)
			}

			// Push constants: Params, then uint64_t addr[MaxAddressSlots] at 80.
			pc := m.PushConstants
			nf := reflect.TypeOf(Params{}).NumField()
			if pc == nil || len(pc.Members) != nf+1 {
				t.Errorf("%s: push constants %+v, want Params' %d members and addr", name, pc, nf)
				continue
			}
			checkParamsMembers(t, name, pc.Members)
			want := spirv.Member{Name: "addr", Offset: ParamsSize, Kind: "uint64", Size: 8 * MaxAddressSlots, Len: MaxAddressSlots, ArrayStride: 8}
			if got := pc.Members[nf]; got != want {
				t.Errorf("%s: push-constant member %d is %+v, want %+v", name, nf, got, want)
			}
			if pc.Size != AddressedParamsSize {
				t.Errorf("%s: push-constant block is %d bytes, want %d", name, pc.Size, AddressedParamsSize)
			}

			// Capabilities and addressing.
			if !m.HasCapability(spirv.CapabilityPhysicalStorageBufferAddresses) || !m.HasCapability(spirv.CapabilityInt64) {
				t.Errorf("%s: capabilities %v lack PhysicalStorageBufferAddresses or Int64", name, m.Capabilities)
			}
			if m.AddressingModel != spirv.AddressingPhysicalStorageBuffer64 {
				t.Errorf("%s: addressing model %d, want PhysicalStorageBuffer64", name, m.AddressingModel)
			}
			if m.Version < 0x00010500 && !slices.Contains(m.Extensions, "SPV_KHR_physical_storage_buffer") {
				t.Errorf("%s: SPIR-V %#x without SPV_KHR_physical_storage_buffer (extensions %q)", name, m.Version, m.Extensions)
			}
			if m.HasCapability(spirv.CapabilityInt16) {
				t.Errorf("%s: declares the Int16 capability", name)
			}
			for _, c := range []uint32{spirv.CapabilityFloat16, spirv.CapabilityStorageBuffer16BitAccess, spirv.CapabilityCooperativeMatrix,
				spirv.CapabilityBFloat16Type, spirv.CapabilityBFloat16CooperativeMatrix} {
				if m.HasCapability(c) != base.HasCapability(c) {
					t.Errorf("%s: capability %d = %v, base %v", name, c, m.HasCapability(c), base.HasCapability(c))
				}
			}

			// Bindings: the base module's minus the address slots (their
			// views: bindingViews), each slot a storage-type binding of the
			// base module.
			checkBindings(t, name, a, dt, m, slots)
			for _, slot := range slots {
				if v := views(k, slot, dt); !slices.Equal(v, []string{elemKind(dt)}) {
					t.Errorf("%s: address slot binding %d holds %v in the base module, want %s", name, slot, v, elemKind(dt))
				}
			}

			// Buffer references: op_ref (one STYPE element) for every
			// operand, op_vref (one uvec4) for OPERAND_V, readonly or
			// writeonly as declared.
			refs := map[string]spirv.Block{}
			for _, r := range m.BufferReferences {
				refs[r.Name] = r
			}
			nrefs := 0
			for _, o := range ops {
				for _, r := range []struct {
					suffix, kind string
					want         bool
				}{{"_ref", elemKind(dt), true}, {"_vref", "other", o.vec}} {
					if !r.want {
						continue
					}
					nrefs++
					b, ok := refs[o.op+r.suffix]
					if !ok || len(b.Members) != 1 {
						t.Errorf("%s: no buffer reference %s%s of one member (%+v)", name, o.op, r.suffix, b)
						continue
					}
					mem := b.Members[0]
					if mem.Kind != r.kind || mem.Offset != 0 || mem.NonWritable != o.readonly || mem.NonReadable != !o.readonly {
						t.Errorf("%s: buffer reference %s%s member %+v, want %s, readonly %v", name, o.op, r.suffix, mem, r.kind, o.readonly)
					}
				}
			}
			if len(refs) != nrefs {
				t.Errorf("%s: %d buffer reference types, want %d", name, len(refs), nrefs)
			}
		}
	}
}
