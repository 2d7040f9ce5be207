package spirv

import (
	"encoding/binary"
	"reflect"
	"testing"
)

// asm assembles a module from instructions (opcode, operands…) after a
// SPIR-V 1.6 header.
func asm(ins ...[]uint32) []byte {
	words := []uint32{spvMagic, 0x00010600, 0, 100, 0}
	for _, in := range ins {
		words = append(words, uint32(len(in))<<16|in[0])
		words = append(words, in[1:]...)
	}
	b := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

func op(code uint32, operands ...uint32) []uint32 { return append([]uint32{code}, operands...) }

// str encodes a nul-terminated literal string.
func str(s string) []uint32 {
	b := append([]byte(s), make([]byte, 4-len(s)%4)...)
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

func named(code, id uint32, s string, pre ...uint32) []uint32 {
	return append(op(code, append([]uint32{id}, pre...)...), str(s)...)
}

// testModule: spec constant N (SpecId 7, default 8), N4 = N·4, a shared
// float[N4], a push-constant block {uint n; float scale} and a storage
// buffer of bfloat16 at set 0 binding 2.
func testModule() []byte {
	const ( // result ids
		tUint, tFloat, tBF16, tHalf, c4     = 1, 2, 3, 4, 5
		specN, specN4, tArr, tPtrW, vShared = 10, 11, 12, 13, 14
		tPC, tPtrPC, vPC                    = 20, 21, 22
		tRTA, tBuf, tPtrSB, vBuf            = 30, 31, 32, 33
	)
	return asm(
		op(opCapability, 1),
		op(opCapability, CapabilityFloat16),
		op(opCapability, CapabilityBFloat16Type),
		named(opName, specN4, "N4"),
		named(opMemberName, tPC, "n", 0),
		named(opMemberName, tPC, "scale", 1),
		op(opDecorate, specN, decSpecID, 7),
		op(opDecorate, tPC, decBlock),
		op(opMemberDecorate, tPC, 0, decOffset, 0),
		op(opMemberDecorate, tPC, 1, decOffset, 4),
		op(opDecorate, tBuf, decBlock),
		op(opMemberDecorate, tBuf, 0, decOffset, 0),
		op(opDecorate, vBuf, decDescriptorSet, 0),
		op(opDecorate, vBuf, decBinding, 2),
		op(opTypeInt, tUint, 32, 0),
		op(opTypeFloat, tFloat, 32),
		op(opTypeFloat, tBF16, 16, fpEncodingBFloat16),
		op(opTypeFloat, tHalf, 16),
		op(opConstant, tUint, c4, 4),
		op(opSpecConstant, tUint, specN, 8),
		op(opSpecConstantOp, tUint, specN4, opIMul, specN, c4),
		op(opTypeArray, tArr, tFloat, specN4),
		op(opTypePointer, tPtrW, scWorkgroup, tArr),
		op(opVariable, tPtrW, vShared, scWorkgroup),
		op(opTypeStruct, tPC, tUint, tFloat),
		op(opTypePointer, tPtrPC, scPushConstant, tPC),
		op(opVariable, tPtrPC, vPC, scPushConstant),
		op(opTypeRuntimeArray, tRTA, tBF16),
		op(opTypeStruct, tBuf, tRTA),
		op(opTypePointer, tPtrSB, scStorageBuffer, tBuf),
		op(opVariable, tPtrSB, vBuf, scStorageBuffer),
	)
}

func TestReflect(t *testing.T) {
	m, err := Reflect(testModule())
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 0x00010600 || !m.HasCapability(CapabilityFloat16) || m.HasCapability(CapabilityInt16) {
		t.Errorf("version %#x, capabilities %v", m.Version, m.Capabilities)
	}
	if got := m.SpecIDs(); !reflect.DeepEqual(got, []uint32{7}) || m.Spec[7] != 8 {
		t.Errorf("spec IDs %v, defaults %v; want [7], 8", got, m.Spec)
	}
	for _, c := range []struct {
		spec       map[uint32]uint32
		n4, shared int
	}{{nil, 32, 128}, {map[uint32]uint32{7: 3}, 12, 48}} {
		if got, err := m.Constant("N4", c.spec); err != nil || int(got) != c.n4 {
			t.Errorf("N4 with %v = %d (%v), want %d", c.spec, got, err, c.n4)
		}
		if got, err := m.SharedBytes(c.spec); err != nil || got != c.shared {
			t.Errorf("shared bytes with %v = %d (%v), want %d", c.spec, got, err, c.shared)
		}
	}
	if _, err := m.Constant("nope", nil); err == nil {
		t.Error("unknown constant: no error")
	}
	want := &Block{Size: 8, Members: []Member{{Name: "n", Offset: 0, Kind: "uint32", Size: 4}, {Name: "scale", Offset: 4, Kind: "float32", Size: 4}}}
	if !reflect.DeepEqual(m.PushConstants, want) {
		t.Errorf("push constants %+v, want %+v", m.PushConstants, want)
	}
	if want := []Binding{{Set: 0, Binding: 2, Elem: "bfloat16"}}; !reflect.DeepEqual(m.Bindings, want) {
		t.Errorf("bindings %+v, want %+v", m.Bindings, want)
	}
	if got, want := m.FloatTypes(), []string{"bfloat16", "float16", "float32"}; !reflect.DeepEqual(got, want) {
		t.Errorf("float types %v, want %v", got, want)
	}
}

func TestReflectErrors(t *testing.T) {
	bad := testModule()
	binary.LittleEndian.PutUint32(bad, 0x03022307) // big-endian magic
	zero := testModule()
	binary.LittleEndian.PutUint32(zero[20:], opCapability) // word count 0
	for name, b := range map[string][]byte{
		"garbage":          {1, 2, 3},
		"magic":            bad,
		"zero-length":      zero,
		"truncated":        testModule()[:len(testModule())-4],
		"SpecId on a type": asm(op(opDecorate, 1, decSpecID, 3), op(opTypeInt, 1, 32, 0)),
	} {
		if _, err := Reflect(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestReflectAddresses: a module with buffer device addresses, as the
// ADDRESSED kernels: a push-constant block {uint n; uint64_t addr[3]}
// and a buffer_reference block q_ref {readonly float16_t x}.
func TestReflectAddresses(t *testing.T) {
	const ( // result ids
		tUint, tU64, tHalf, c3, tArr = 1, 2, 3, 4, 5
		tPC, tPtrPC, vPC             = 10, 11, 12
		tRef, tPtrRef                = 20, 21
	)
	spv := asm(
		op(opCapability, 1),
		op(opCapability, CapabilityInt64),
		op(opCapability, CapabilityPhysicalStorageBufferAddresses),
		append(op(opExtension), str("SPV_KHR_physical_storage_buffer")...),
		op(opMemoryModel, AddressingPhysicalStorageBuffer64, 1),
		named(opMemberName, tPC, "n", 0),
		named(opMemberName, tPC, "addr", 1),
		named(opName, tRef, "q_ref"),
		named(opMemberName, tRef, "x", 0),
		op(opDecorate, tArr, decArrayStride, 8),
		op(opDecorate, tPC, decBlock),
		op(opMemberDecorate, tPC, 0, decOffset, 0),
		op(opMemberDecorate, tPC, 1, decOffset, 8),
		op(opDecorate, tRef, decBlock),
		op(opMemberDecorate, tRef, 0, decNonWritable),
		op(opMemberDecorate, tRef, 0, decOffset, 0),
		op(opTypeInt, tUint, 32, 0),
		op(opTypeInt, tU64, 64, 0),
		op(opTypeFloat, tHalf, 16),
		op(opConstant, tUint, c3, 3),
		op(opTypeArray, tArr, tU64, c3),
		op(opTypeStruct, tPC, tUint, tArr),
		op(opTypePointer, tPtrPC, scPushConstant, tPC),
		op(opVariable, tPtrPC, vPC, scPushConstant),
		op(opTypeStruct, tRef, tHalf),
		op(opTypePointer, tPtrRef, scPhysicalStorageBuffer, tRef),
		op(opTypePointer, tPtrRef+1, scPhysicalStorageBuffer, tHalf), // a member pointer: not a reference type
	)
	m, err := Reflect(spv)
	if err != nil {
		t.Fatal(err)
	}
	if !m.HasCapability(CapabilityInt64) || !m.HasCapability(CapabilityPhysicalStorageBufferAddresses) {
		t.Errorf("capabilities %v", m.Capabilities)
	}
	if !reflect.DeepEqual(m.Extensions, []string{"SPV_KHR_physical_storage_buffer"}) || m.AddressingModel != AddressingPhysicalStorageBuffer64 {
		t.Errorf("extensions %q, addressing model %d", m.Extensions, m.AddressingModel)
	}
	want := &Block{Size: 32, Members: []Member{
		{Name: "n", Offset: 0, Kind: "uint32", Size: 4},
		{Name: "addr", Offset: 8, Kind: "uint64", Size: 24, Len: 3, ArrayStride: 8},
	}}
	if !reflect.DeepEqual(m.PushConstants, want) {
		t.Errorf("push constants %+v, want %+v", m.PushConstants, want)
	}
	wantRefs := []Block{{Name: "q_ref", Size: 2, Members: []Member{{Name: "x", Kind: "float16", Size: 2, NonWritable: true}}}}
	if !reflect.DeepEqual(m.BufferReferences, wantRefs) {
		t.Errorf("buffer references %+v, want %+v", m.BufferReferences, wantRefs)
	}
	if len(m.Bindings) != 0 {
		t.Errorf("bindings %+v, want none", m.Bindings)
	}
}

func TestHalfOps(t *testing.T) {
	const ( // ids
		set, tHalf, tFloat, tHalf2, tBF16 = 1, 2, 3, 4, 5
	)
	m, err := Reflect(asm(
		named(opExtInstImport, set, "GLSL.std.450"),
		op(opTypeFloat, tHalf, 16),
		op(opTypeFloat, tFloat, 32),
		op(opTypeVector, tHalf2, tHalf, 2),
		op(opTypeFloat, tBF16, 16, fpEncodingBFloat16),
		op(opFConvert, tHalf, 10, 99),
		op(opExtInst, tHalf2, 11, set, 21, 10),
		op(129, tFloat, 12, 98, 97), // OpFAdd, fp32
		op(opFConvert, tBF16, 13, 12),
		op(133, tHalf, 14, 10, 10), // OpFMul, fp16
	))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"OpExtInst GLSL.std.450 21", "OpFConvert", "op 133"}
	if got := m.HalfOps(); !reflect.DeepEqual(got, want) {
		t.Errorf("HalfOps %q, want %q", got, want)
	}
	m, err = Reflect(testModule())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.HalfOps(); len(got) != 0 {
		t.Errorf("a module that declares fp16 but computes nothing in it: HalfOps %q, want none", got)
	}
}
