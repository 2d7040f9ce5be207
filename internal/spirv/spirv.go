// Package spirv is a small SPIR-V reader for tests: just enough reflection
// to check flashvk's compiled kernels against the Go side of their
// interface (push-constant layout, specialization constant IDs and
// constants after specialization, descriptor bindings, buffer-reference
// blocks, capabilities, extensions, the addressing model, float types,
// shared-memory size). Production code does not import it.
package spirv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// SPIR-V opcodes, decorations, storage classes and capabilities used here.
const (
	spvMagic = 0x07230203

	opName             = 5
	opMemberName       = 6
	opExtension        = 10
	opExtInstImport    = 11
	opExtInst          = 12
	opMemoryModel      = 14
	opCapability       = 17
	opTypeInt          = 21
	opTypeFloat        = 22
	opTypeVector       = 23
	opTypeArray        = 28
	opTypeRuntimeArray = 29
	opTypeStruct       = 30
	opTypePointer      = 32
	opConstantTrue     = 41
	opConstantFalse    = 42
	opConstant         = 43
	opSpecConstantTrue = 48
	opSpecConstFalse   = 49
	opSpecConstant     = 50
	opSpecConstComp    = 51
	opSpecConstantOp   = 52
	opVariable         = 59
	opFConvert         = 115
	opDecorate         = 71
	opMemberDecorate   = 72

	decSpecID        = 1
	decBlock         = 2
	decBufferBlock   = 3
	decArrayStride   = 6
	decNonWritable   = 24
	decNonReadable   = 25
	decBinding       = 33
	decDescriptorSet = 34
	decOffset        = 35

	scUniform       = 2
	scWorkgroup     = 4
	scPushConstant  = 9
	scStorageBuffer = 12
	// scPhysicalStorageBuffer is the storage class of buffer device
	// address pointers (GL_EXT_buffer_reference).
	scPhysicalStorageBuffer = 5349

	// CapabilityFloat16, CapabilityInt16 and
	// CapabilityStorageBuffer16BitAccess are SPIR-V capabilities that need
	// device features: shaderFloat16, shaderInt16 and
	// storageBuffer16BitAccess.
	CapabilityFloat16                  = 9
	CapabilityInt16                    = 22
	CapabilityStorageBuffer16BitAccess = 4433
	// CapabilityBFloat16Type and CapabilityBFloat16CooperativeMatrix
	// (SPV_KHR_bfloat16) need VkPhysicalDeviceShaderBfloat16FeaturesKHR's
	// shaderBFloat16Type and shaderBFloat16CooperativeMatrix.
	CapabilityBFloat16Type              = 5116
	CapabilityBFloat16CooperativeMatrix = 5118
	CapabilityCooperativeMatrix         = 6022
	// CapabilityInt64 needs shaderInt64; CapabilityPhysicalStorageBufferAddresses
	// needs bufferDeviceAddress (SPV_KHR_physical_storage_buffer, core in
	// SPIR-V 1.5).
	CapabilityInt64                          = 11
	CapabilityPhysicalStorageBufferAddresses = 5347

	// AddressingPhysicalStorageBuffer64 is OpMemoryModel's addressing model
	// of modules that use buffer device addresses (Logical, 0, otherwise).
	AddressingPhysicalStorageBuffer64 = 5348

	// fpEncodingBFloat16 is OpTypeFloat's FP Encoding operand BFloat16KHR.
	fpEncodingBFloat16 = 0
)

// Module is the reflection of one compiled kernel.
type Module struct {
	// Version is the SPIR-V version word (0x00010300 for SPIR-V 1.3).
	Version uint32
	// Capabilities are the OpCapability operands, in module order.
	Capabilities []uint32
	// Extensions are the OpExtension names, in module order.
	Extensions []string
	// AddressingModel is OpMemoryModel's addressing model (0 Logical,
	// AddressingPhysicalStorageBuffer64, …).
	AddressingModel uint32
	// PushConstants is the push-constant block, nil if none.
	PushConstants *Block
	// Spec maps each SpecId to its default value (booleans as 0/1).
	Spec map[uint32]uint32
	// Bindings are the storage buffers, sorted by (set, binding).
	Bindings []Binding
	// BufferReferences are the structs (Block-decorated) that
	// PhysicalStorageBuffer pointers point to (GL_EXT_buffer_reference
	// types), in the order of their pointer types.
	BufferReferences []Block

	names      map[uint32]string
	consts     map[uint32]uint32   // OpConstant values (a 64-bit one: its low word)
	specID     map[uint32]uint32   // spec constant result id → SpecId
	specDef    map[uint32]uint32   // spec constant result id → default
	specOps    map[uint32][]uint32 // OpSpecConstantOp: opcode, operands…
	specComp   map[uint32][]uint32 // OpSpecConstantComposite constituents
	types      map[uint32]spvType
	sharedVars []uint32 // pointee types of Workgroup variables
	halfOps    map[string]bool
}

// Block is a Block-decorated struct.
type Block struct {
	// Name is the struct's OpName ("" if none).
	Name    string
	Members []Member
	// Size is the offset past the last member.
	Size uint32
}

// Member is one member of a Block.
type Member struct {
	Name   string
	Offset uint32
	// Kind is "uint32", "int32", "uint64", "float32", "float16",
	// "bfloat16", ... or "other"; for an array (Len > 0) the kind of its
	// element.
	Kind string
	// Size is the member's size in bytes (an array's: Len·ArrayStride; 0
	// for "other").
	Size uint32
	// Len and ArrayStride are an array member's length and stride (0 for
	// anything else).
	Len, ArrayStride uint32
	// NonWritable and NonReadable are the member's decorations (readonly
	// and writeonly in GLSL).
	NonWritable, NonReadable bool
}

// Binding is one storage-buffer descriptor.
type Binding struct {
	Set, Binding uint32
	// Elem is the runtime array's element kind ("float32", "float16",
	// "uint16", ...; "other" for anything but a scalar).
	Elem string
}

// SpecIDs returns the module's specialization constant IDs, ascending.
func (m *Module) SpecIDs() []uint32 {
	ids := make([]uint32, 0, len(m.Spec))
	for id := range m.Spec {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// HasCapability reports whether the module declares capability c.
func (m *Module) HasCapability(c uint32) bool {
	for _, x := range m.Capabilities {
		if x == c {
			return true
		}
	}
	return false
}

type spvType struct {
	op    uint32
	ops   []uint32 // operands after the result id
	width uint32
}

// kind names a scalar type ("uint32", "int16", "float16", "bfloat16", …)
// with its size in bytes; anything else is "other", 0.
func (t spvType) kind() (string, uint32) {
	switch t.op {
	case opTypeInt:
		if len(t.ops) >= 2 && t.ops[1] == 1 {
			return fmt.Sprintf("int%d", t.width), t.width / 8
		}
		return fmt.Sprintf("uint%d", t.width), t.width / 8
	case opTypeFloat:
		if len(t.ops) >= 2 && t.ops[1] == fpEncodingBFloat16 {
			return "bfloat16", t.width / 8
		}
		return fmt.Sprintf("float%d", t.width), t.width / 8
	}
	return "other", 0
}

// FloatTypes lists the kinds of the module's OpTypeFloat declarations
// ("float16", "bfloat16", "float32", …), sorted.
func (m *Module) FloatTypes() []string {
	var ks []string
	for _, t := range m.types {
		if t.op == opTypeFloat {
			k, _ := t.kind()
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

// HalfOps lists the instructions that make an fp16 value (a float16
// scalar or vector result; bfloat16 is not fp16), sorted and each once:
// "OpFConvert", "OpConstant", "OpExtInst GLSL.std.450 21" (an extended
// instruction: its set and number), "op N" for other opcodes. Modules
// that compute nothing in fp16 list none.
func (m *Module) HalfOps() []string {
	ops := make([]string, 0, len(m.halfOps))
	for k := range m.halfOps {
		ops = append(ops, k)
	}
	sort.Strings(ops)
	return ops
}

// isTypeDecl reports whether opcode op declares a type (OpTypeVoid …
// OpTypeForwardPointer, and the cooperative-matrix type), whose first
// operand is the type's own id, not a result type.
func isTypeDecl(op uint32) bool { return op >= 19 && op <= 39 || op == opTypeCooperativeMatrixKHR }

// opTypeCooperativeMatrixKHR is OpTypeCooperativeMatrixKHR.
const opTypeCooperativeMatrixKHR = 4456

// isHalf reports whether id is an IEEE fp16 scalar or vector type.
func isHalf(types map[uint32]spvType, id uint32) bool {
	t, ok := types[id]
	if ok && t.op == opTypeVector && len(t.ops) >= 1 {
		t, ok = types[t.ops[0]]
	}
	k, _ := t.kind()
	return ok && k == "float16"
}

// halfOpName names instruction op (operands ins) for HalfOps.
func halfOpName(op uint32, ins []uint32, extSets map[uint32]string) string {
	switch op {
	case opFConvert:
		return "OpFConvert"
	case opConstant:
		return "OpConstant"
	case opExtInst:
		if len(ins) >= 4 {
			return fmt.Sprintf("OpExtInst %s %d", extSets[ins[2]], ins[3])
		}
	}
	return fmt.Sprintf("op %d", op)
}

// Reflect parses a SPIR-V module.
func Reflect(spv []byte) (*Module, error) {
	if len(spv)%4 != 0 || len(spv) < 20 {
		return nil, errors.New("spirv: not a whole number of words, or shorter than the header")
	}
	words := make([]uint32, len(spv)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(spv[4*i:])
	}
	if words[0] != spvMagic {
		return nil, fmt.Errorf("spirv: bad magic %#x (big-endian modules are not supported)", words[0])
	}
	m := &Module{Version: words[1], Spec: map[uint32]uint32{},
		consts: map[uint32]uint32{}, specID: map[uint32]uint32{},
		specOps: map[uint32][]uint32{}, specComp: map[uint32][]uint32{}}

	names := map[uint32]string{}
	memberNames := map[[2]uint32]string{}
	decor := map[uint32]map[uint32]uint32{} // id → decoration → first literal (or 1)
	memberOffset := map[[2]uint32]uint32{}
	memberDecor := map[[2]uint32]map[uint32]bool{} // (struct, member) → decorations
	var refPointees []uint32                       // pointees of PhysicalStorageBuffer pointer types
	extSets := map[uint32]string{}                 // OpExtInstImport result id → set name
	m.halfOps = map[string]bool{}
	types := map[uint32]spvType{}
	specVal := map[uint32]uint32{}
	type variable struct{ ptrType, storage uint32 }
	vars := map[uint32]variable{}
	var varOrder []uint32

	for i := 5; i < len(words); {
		n := int(words[i] >> 16)
		op := words[i] & 0xffff
		if n == 0 || i+n > len(words) {
			return nil, fmt.Errorf("spirv: bad instruction length %d at word %d", n, i)
		}
		ins := words[i+1 : i+n]
		i += n
		if len(ins) >= 2 && !isTypeDecl(op) && isHalf(types, ins[0]) {
			m.halfOps[halfOpName(op, ins, extSets)] = true
		}
		switch op {
		case opName:
			if len(ins) >= 1 {
				names[ins[0]] = spvString(ins[1:])
			}
		case opMemberName:
			if len(ins) >= 2 {
				memberNames[[2]uint32{ins[0], ins[1]}] = spvString(ins[2:])
			}
		case opCapability:
			m.Capabilities = append(m.Capabilities, ins[0])
		case opExtension:
			m.Extensions = append(m.Extensions, spvString(ins))
		case opExtInstImport:
			if len(ins) >= 1 {
				extSets[ins[0]] = spvString(ins[1:])
			}
		case opMemoryModel:
			if len(ins) >= 1 {
				m.AddressingModel = ins[0]
			}
		case opTypeInt, opTypeFloat:
			types[ins[0]] = spvType{op: op, ops: ins[1:], width: ins[1]}
		case opTypeVector, opTypeArray, opTypeRuntimeArray, opTypeStruct, opTypePointer:
			types[ins[0]] = spvType{op: op, ops: ins[1:]}
			if op == opTypePointer && len(ins) >= 3 && ins[1] == scPhysicalStorageBuffer && !slices.Contains(refPointees, ins[2]) {
				refPointees = append(refPointees, ins[2])
			}
		case opConstant:
			if len(ins) >= 3 {
				m.consts[ins[1]] = ins[2]
			}
		case opConstantTrue, opConstantFalse:
			if len(ins) >= 2 {
				m.consts[ins[1]] = b2u(op == opConstantTrue)
			}
		case opSpecConstantOp:
			m.specOps[ins[1]] = append([]uint32(nil), ins[2:]...)
		case opSpecConstComp:
			m.specComp[ins[1]] = append([]uint32(nil), ins[2:]...)
		case opSpecConstant:
			specVal[ins[1]] = ins[2]
		case opSpecConstantTrue:
			specVal[ins[1]] = 1
		case opSpecConstFalse:
			specVal[ins[1]] = 0
		case opVariable:
			vars[ins[1]] = variable{ptrType: ins[0], storage: ins[2]}
			varOrder = append(varOrder, ins[1])
		case opDecorate:
			if len(ins) < 2 {
				break
			}
			if decor[ins[0]] == nil {
				decor[ins[0]] = map[uint32]uint32{}
			}
			v := uint32(1)
			if len(ins) >= 3 {
				v = ins[2]
			}
			decor[ins[0]][ins[1]] = v
		case opMemberDecorate:
			if len(ins) < 3 {
				break
			}
			key := [2]uint32{ins[0], ins[1]}
			if len(ins) >= 4 && ins[2] == decOffset {
				memberOffset[key] = ins[3]
			}
			if memberDecor[key] == nil {
				memberDecor[key] = map[uint32]bool{}
			}
			memberDecor[key][ins[2]] = true
		}
	}

	for id, d := range decor {
		if sid, ok := d[decSpecID]; ok {
			v, ok := specVal[id]
			if !ok {
				return nil, fmt.Errorf("spirv: SpecId %d decorates id %d, which is not a spec constant", sid, id)
			}
			// SPIR-V 1.6 modules built with LocalSizeId may declare two
			// constants with one SpecId (the size and gl_WorkGroupSize);
			// they must agree on the default.
			if old, dup := m.Spec[sid]; dup && old != v {
				return nil, fmt.Errorf("spirv: SpecId %d used twice with defaults %d and %d", sid, old, v)
			}
			m.Spec[sid] = v
			m.specID[id] = sid
		}
	}
	m.specDef = specVal
	m.names = names
	m.types = types

	kind := func(id uint32) (string, uint32) { return types[id].kind() }
	// block reads the members of Block struct id.
	block := func(id uint32, what string) (*Block, error) {
		st := types[id]
		if st.op != opTypeStruct || decor[id][decBlock] == 0 {
			return nil, fmt.Errorf("spirv: %s is not a Block struct", what)
		}
		b := &Block{Name: names[id]}
		for k, mt := range st.ops {
			key := [2]uint32{id, uint32(k)}
			off, ok := memberOffset[key]
			if !ok {
				return nil, fmt.Errorf("spirv: %s member %d has no Offset", what, k)
			}
			mem := Member{Name: memberNames[key], Offset: off,
				NonWritable: memberDecor[key][decNonWritable], NonReadable: memberDecor[key][decNonReadable]}
			if t := types[mt]; t.op == opTypeArray {
				n, err := m.eval(t.ops[1], nil, 0)
				if err != nil {
					return nil, fmt.Errorf("spirv: %s member %d: array length: %w", what, k, err)
				}
				mem.Kind, _ = kind(t.ops[0])
				mem.Len, mem.ArrayStride = n, decor[mt][decArrayStride]
				mem.Size = n * mem.ArrayStride
			} else {
				mem.Kind, mem.Size = kind(mt)
			}
			b.Members = append(b.Members, mem)
			if end := off + mem.Size; end > b.Size {
				b.Size = end
			}
		}
		return b, nil
	}

	for _, id := range varOrder {
		v := vars[id]
		ptr, ok := types[v.ptrType]
		if !ok || ptr.op != opTypePointer || len(ptr.ops) < 2 {
			return nil, fmt.Errorf("spirv: variable %d has no pointer type", id)
		}
		pointee := ptr.ops[1]
		st := types[pointee]
		switch {
		case v.storage == scWorkgroup:
			m.sharedVars = append(m.sharedVars, pointee)
		case v.storage == scPushConstant:
			if m.PushConstants != nil {
				return nil, errors.New("spirv: more than one push-constant block")
			}
			b, err := block(pointee, "push-constant block")
			if err != nil {
				return nil, err
			}
			m.PushConstants = b
		case v.storage == scStorageBuffer || (v.storage == scUniform && decor[pointee][decBufferBlock] != 0):
			bnd, ok := decor[id][decBinding]
			if !ok {
				return nil, fmt.Errorf("spirv: buffer variable %q has no Binding", names[id])
			}
			b := Binding{Set: decor[id][decDescriptorSet], Binding: bnd, Elem: "other"}
			if st.op == opTypeStruct && len(st.ops) >= 1 {
				if arr := types[st.ops[len(st.ops)-1]]; arr.op == opTypeRuntimeArray {
					b.Elem, _ = kind(arr.ops[0])
				}
			}
			m.Bindings = append(m.Bindings, b)
		}
	}
	for _, id := range refPointees {
		if types[id].op != opTypeStruct {
			continue // a pointer to a member (the access chain into a reference)
		}
		b, err := block(id, fmt.Sprintf("buffer reference %q", names[id]))
		if err != nil {
			return nil, err
		}
		m.BufferReferences = append(m.BufferReferences, *b)
	}
	sort.Slice(m.Bindings, func(i, j int) bool {
		a, b := m.Bindings[i], m.Bindings[j]
		if a.Set != b.Set {
			return a.Set < b.Set
		}
		return a.Binding < b.Binding
	})
	return m, nil
}

// spvString decodes a nul-terminated literal string.
func spvString(w []uint32) string {
	b := make([]byte, 0, 4*len(w))
	for _, x := range w {
		for k := 0; k < 4; k++ {
			c := byte(x >> (8 * k))
			if c == 0 {
				return string(b)
			}
			b = append(b, c)
		}
	}
	return string(b)
}

// SpecConstantOp opcodes the evaluator understands.
const (
	opCompositeExtract  = 81
	opIAdd              = 128
	opISub              = 130
	opIMul              = 132
	opUDiv              = 134
	opUMod              = 137
	opLogicalOr         = 166
	opLogicalAnd        = 167
	opLogicalNot        = 168
	opSelect            = 169
	opIEqual            = 170
	opINotEqual         = 171
	opUGreaterThan      = 172
	opUGreaterThanEqual = 174
	opULessThan         = 176
	opULessThanEqual    = 178
	opShiftRightLogical = 194
	opShiftLeftLogical  = 196
	opBitwiseAnd        = 199
)

// eval computes the value of a (spec) constant id after specialization with
// spec (SpecId → value; missing IDs keep their defaults).
func (m *Module) eval(id uint32, spec map[uint32]uint32, depth int) (uint32, error) {
	if depth > 64 {
		return 0, errors.New("spirv: constant expression too deep")
	}
	if v, ok := m.consts[id]; ok {
		return v, nil
	}
	if v, ok := m.specDef[id]; ok {
		if sid, ok := m.specID[id]; ok {
			if sv, ok := spec[sid]; ok {
				return sv, nil
			}
		}
		return v, nil
	}
	ops, ok := m.specOps[id]
	if !ok || len(ops) < 2 {
		return 0, fmt.Errorf("spirv: id %d is not an integer constant", id)
	}
	if ops[0] == opCompositeExtract {
		comp, ok := m.specComp[ops[1]]
		if !ok || len(ops) != 3 || int(ops[2]) >= len(comp) {
			return 0, fmt.Errorf("spirv: unsupported CompositeExtract in id %d", id)
		}
		return m.eval(comp[ops[2]], spec, depth+1)
	}
	a := make([]uint32, len(ops)-1)
	for i, o := range ops[1:] {
		v, err := m.eval(o, spec, depth+1)
		if err != nil {
			return 0, err
		}
		a[i] = v
	}
	need := map[uint32]int{opLogicalNot: 1, opSelect: 3}
	n := 2
	if k, ok := need[ops[0]]; ok {
		n = k
	}
	if len(a) != n {
		return 0, fmt.Errorf("spirv: SpecConstantOp %d with %d operands", ops[0], len(a))
	}
	switch ops[0] {
	case opIAdd:
		return a[0] + a[1], nil
	case opISub:
		return a[0] - a[1], nil
	case opIMul:
		return a[0] * a[1], nil
	case opUDiv, opUMod:
		if a[1] == 0 {
			return 0, fmt.Errorf("spirv: division by zero evaluating id %d", id)
		}
		if ops[0] == opUDiv {
			return a[0] / a[1], nil
		}
		return a[0] % a[1], nil
	case opLogicalOr:
		return b2u(a[0] != 0 || a[1] != 0), nil
	case opLogicalAnd:
		return b2u(a[0] != 0 && a[1] != 0), nil
	case opLogicalNot:
		return b2u(a[0] == 0), nil
	case opSelect:
		if a[0] != 0 {
			return a[1], nil
		}
		return a[2], nil
	case opIEqual:
		return b2u(a[0] == a[1]), nil
	case opINotEqual:
		return b2u(a[0] != a[1]), nil
	case opUGreaterThan:
		return b2u(a[0] > a[1]), nil
	case opUGreaterThanEqual:
		return b2u(a[0] >= a[1]), nil
	case opULessThan:
		return b2u(a[0] < a[1]), nil
	case opULessThanEqual:
		return b2u(a[0] <= a[1]), nil
	case opShiftRightLogical:
		return a[0] >> a[1], nil
	case opShiftLeftLogical:
		return a[0] << a[1], nil
	case opBitwiseAnd:
		return a[0] & a[1], nil
	}
	return 0, fmt.Errorf("spirv: unsupported SpecConstantOp opcode %d", ops[0])
}

// Constant evaluates the (spec) constant named name (by OpName, e.g. "TC"
// in flash) after specialization with spec (SpecId → value).
func (m *Module) Constant(name string, spec map[uint32]uint32) (uint32, error) {
	for id, n := range m.names {
		if n != name {
			continue
		}
		if _, ok := m.types[id]; ok {
			continue
		}
		return m.eval(id, spec, 0)
	}
	return 0, fmt.Errorf("spirv: no constant named %q", name)
}

func (m *Module) typeSize(id uint32, spec map[uint32]uint32, depth int) (int, error) {
	if depth > 16 {
		return 0, errors.New("spirv: type too deep")
	}
	t, ok := m.types[id]
	if !ok {
		return 0, fmt.Errorf("spirv: unknown type %d", id)
	}
	switch t.op {
	case opTypeInt, opTypeFloat:
		return int(t.width / 8), nil
	case opTypeVector, opTypeArray:
		e, err := m.typeSize(t.ops[0], spec, depth+1)
		if err != nil {
			return 0, err
		}
		n := t.ops[1] // vector: literal count; array: constant id
		if t.op == opTypeArray {
			if n, err = m.eval(t.ops[1], spec, 0); err != nil {
				return 0, err
			}
		}
		return e * int(n), nil
	case opTypeStruct:
		sum := 0
		for _, mt := range t.ops {
			e, err := m.typeSize(mt, spec, depth+1)
			if err != nil {
				return 0, err
			}
			sum += e
		}
		return sum, nil
	}
	return 0, fmt.Errorf("spirv: cannot size type op %d", t.op)
}

// SharedBytes returns the total size of the module's Workgroup (shared)
// variables after specialization with spec (SpecId → value), packed
// without padding.
func (m *Module) SharedBytes(spec map[uint32]uint32) (int, error) {
	total := 0
	for _, t := range m.sharedVars {
		n, err := m.typeSize(t, spec, 0)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// b2u is a bool as a SPIR-V constant's value (true 1, false 0).
func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
