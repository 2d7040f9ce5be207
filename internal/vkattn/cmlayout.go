//go:build cgo

package vkattn

// What the cooperative-matrix kernels need of a device, the coopmat shape
// they use, and the element layout of its matrix types: flash_cm_probe
// reports which invocation holds which element, and CMLayout derives from
// it whether the softmax and P can stay in registers (MODE 1) and the spec
// constants that say how (see flash_cm.comp's header).

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// cmSupportFor checks that info can run the coopmat kernels for storage dt
// (spec.Float16 or spec.BFloat16) and returns the coopmat shape they would use.
func cmSupportFor(info device.Info, dt spec.DType) (device.CoopMatShape, error) {
	var why []string
	if dt != spec.Float16 && dt != spec.BFloat16 {
		return device.CoopMatShape{}, fmt.Errorf("%w: the cooperative-matrix kernels have no %v build of their own", ErrUnsupported, dt)
	}
	if !apiAtLeast(info.APIVersion, 1, 3) {
		why = append(why, fmt.Sprintf("Vulkan %q < 1.3 (SPIR-V 1.6 modules)", info.APIVersion))
	}
	if !info.Float16 {
		// bf16 modules too: glslang declares Float16 for bfloat16 types.
		why = append(why, "no shaderFloat16")
	}
	if dt == spec.BFloat16 {
		if !info.BFloat16 {
			why = append(why, "no shaderBFloat16Type (VK_KHR_shader_bfloat16)")
		}
		if !info.BFloat16CoopMat {
			why = append(why, "no shaderBFloat16CooperativeMatrix (VK_KHR_shader_bfloat16)")
		}
	}
	if !info.StorageBuffer16Bit {
		why = append(why, "no storageBuffer16BitAccess")
	}
	if !info.VulkanMemoryModel {
		why = append(why, "no vulkanMemoryModel")
	}
	if !info.SubgroupOps.Shuffle {
		why = append(why, "no subgroup shuffle")
	}
	if !info.SubgroupOps.Vote {
		why = append(why, "no subgroup vote")
	}
	sg := info.SubgroupSize
	if sg < 1 || sg&(sg-1) != 0 {
		why = append(why, fmt.Sprintf("subgroup size %d", sg))
	}
	fixed := info.MinSubgroupSize == info.MaxSubgroupSize
	if !fixed && !info.SubgroupSizeControl {
		why = append(why, "variable subgroup size without subgroup size control")
	}
	if !fixed && !info.ComputeFullSubgroups {
		why = append(why, "variable subgroup size without computeFullSubgroups")
	}
	shape, err := CMShapeFor(info, dt)
	if err != nil {
		why = append(why, err.Error())
	}
	if len(why) > 0 {
		return device.CoopMatShape{}, fmt.Errorf("%w: %v cooperative-matrix kernels on %s: %s", ErrUnsupported, dt, info.Name, strings.Join(why, "; "))
	}
	return shape, nil
}

// apiAtLeast reports whether a "major.minor.patch" version is at least
// major.minor.
func apiAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// CMShape picks the subgroup-scope f16·f16+f32→f32 cooperative-matrix shape
// from the shapes the device reports (never assumed): 16×16×16 when
// reported, else the largest with N == K, else any with N and K multiples
// of 8. bench/gemm uses it too.
func CMShape(info device.Info) (device.CoopMatShape, error) { return CMShapeFor(info, spec.Float16) }

// CMShapeFor is CMShape for the coopmat kernels of storage dt: f16·f16 or
// bf16·bf16 (+f32→f32). The device must also report a matrix of the
// storage type and M×N (as the A, B or accumulator matrix of some subgroup
// shape): the kernels convert fp32 M×N accumulators to ones of the storage
// type to store results, and every matrix type must match a reported size.
func CMShapeFor(info device.Info, dt spec.DType) (device.CoopMatShape, error) {
	et := "f16"
	if dt == spec.BFloat16 {
		et = "bf16"
	}
	var best *device.CoopMatShape
	score := func(s device.CoopMatShape) int {
		v := int(s.M * s.N * s.K)
		if s.M == 16 && s.N == 16 && s.K == 16 {
			v += 1 << 30
		}
		if s.N == s.K {
			v += 1 << 20
		}
		return v
	}
	for i, s := range info.CoopMat {
		if s.Scope != "subgroup" || s.A != et || s.B != et || s.C != "f32" || s.Result != "f32" {
			continue
		}
		if s.M == 0 || s.N == 0 || s.K == 0 || s.N%8 != 0 || s.K%8 != 0 || s.M > 64 {
			continue
		}
		if !hasSubgroupMatrix(info, et, s.M, s.N) {
			continue
		}
		if best == nil || score(s) > score(*best) {
			best = &info.CoopMat[i]
		}
	}
	if best == nil {
		return device.CoopMatShape{}, fmt.Errorf("no subgroup %s·%s+f32→f32 cooperative-matrix shape with N, K multiples of 8 and a %s M×N matrix (reported: %v)", et, et, et, info.CoopMat)
	}
	return *best, nil
}

// hasSubgroupMatrix reports whether some subgroup-scope shape of info has
// a matrix of component type t and rows×cols (A: M×K, B: K×N, C and
// Result: M×N).
func hasSubgroupMatrix(info device.Info, t string, rows, cols uint32) bool {
	for _, s := range info.CoopMat {
		if s.Scope != "subgroup" {
			continue
		}
		if s.A == t && s.M == rows && s.K == cols || s.B == t && s.K == rows && s.N == cols ||
			(s.C == t || s.Result == t) && s.M == rows && s.N == cols {
			return true
		}
	}
	return false
}

// RunCMProbe runs flash_cm_probe for coopmat shape (from CMShape) on d,
// with the subgroup settings a Backend on d would use, and parses its
// output (ParseCMProbe). bench/gemm uses it.
func RunCMProbe(ctx context.Context, d *device.Device, shape device.CoopMatShape) (*CMLayout, error) {
	return RunCMProbeFor(ctx, d, shape, spec.Float16)
}

// RunCMProbeFor is RunCMProbe with the probe of storage dt (spec.Float16: fp16 A
// matrices; spec.BFloat16: bfloat16 A matrices, shape from CMShapeFor(info, spec.BFloat16)).
func RunCMProbeFor(ctx context.Context, d *device.Device, shape device.CoopMatShape, dt spec.DType) (*CMLayout, error) {
	info := d.Info()
	spv, err := shaders.SPIRV(shaders.KernelFlashCMProbe, dt.Short())
	if err != nil {
		return nil, fmt.Errorf("vkattn: %w", err)
	}
	var reqSG uint32
	if info.SubgroupSizeControl {
		reqSG = info.SubgroupSize
	}
	return runProbe(ctx, d, spv, shape, int(info.SubgroupSize), reqSG, info.ComputeFullSubgroups)
}

// runProbe runs flash_cm_probe (one workgroup of one subgroup of sg
// invocations) and parses its output.
func runProbe(ctx context.Context, d *device.Device, probeSPV []byte, shape device.CoopMatShape, sg int, reqSG uint32, full bool) (*CMLayout, error) {
	n := shaders.FlashCMProbeFloats(sg)
	buf, err := d.NewBuffer(int64(4 * n))
	if err != nil {
		return nil, err
	}
	defer buf.Close()
	if err := d.Fill(ctx, buf, 0x7FC00000); err != nil { // NaN: unwritten
		return nil, err
	}
	p, err := d.NewPipeline(device.PipelineDesc{Name: shaders.KernelFlashCMProbe, SPIRV: probeSPV,
		Spec: []device.Spec{
			{ID: shaders.SpecWorkgroupSize, Value: uint32(sg)},
			{ID: shaders.SpecCMM, Value: shape.M}, {ID: shaders.SpecCMN, Value: shape.N}, {ID: shaders.SpecCMK, Value: shape.K},
		},
		Bindings: 1, RequiredSubgroupSize: reqSG, FullSubgroups: full})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	r := d.Record()
	if err := r.Dispatch(p, nil, [3]uint32{1, 1, 1}, buf); err != nil {
		return nil, err
	}
	if _, err := d.Submit(ctx, r); err != nil {
		return nil, err
	}
	out := make([]float32, n)
	if err := device.Download(ctx, buf, 0, out); err != nil {
		return nil, err
	}
	return ParseCMProbe(out, shape, sg)
}

// CMLayout is what flash_cm_probe tells about the element layout of the
// accumulator and A types, and the spec constants derived from it (also
// used by bench/gemm).
type CMLayout struct {
	M, N, K      uint32
	SG           int
	AccLen, ALen int
	AccRC, ARC   [][][2]int // [lane][component] → (row, col)
	Mode1        bool       // register softmax and register P (MODE 1)
	Why          string     // why MODE 1 is impossible
	RL           int
	SlotRow      []int
	XorMask      uint32
	APerm        []int
	// Storage is the storage type the layout serves (0: not yet given
	// one, as a probe's): the number of planes and the softcap's tanh
	// follow from it, and the tile rules differ by it where the H200's
	// measurements did.
	Storage spec.DType
}

// paddedDim is head dim d as the coopmat backward kernels hold it: zero
// features up to a multiple of max(K, N, 8) (cm_common.glsl's DP, DVP;
// tiles with FHalves pad to twice that, and are not asked this).
func (l *CMLayout) paddedDim(d int) int {
	pad := max(int(l.K), int(l.N), 8)
	return (d + pad - 1) / pad * pad
}

// planes is the number of bf16 planes the coopmat kernels hold each
// operand in (shaders.CMPlanes): 1 for f16 and bf16 storage (and a layout
// without one); for f32 the layout is bf16's and the tiles hold every
// plane.
func (l *CMLayout) planes() int {
	if l.Storage == 0 {
		return 1
	}
	return shaders.CMPlanes(l.Storage.Short())
}

// halfTanh reports whether the kernels take the softcap's tanh in fp16
// (shaders.CMHalfTanh: bf16 storage).
func (l *CMLayout) halfTanh() bool {
	return l.Storage != 0 && shaders.CMHalfTanh(l.Storage.Short())
}

// Packed packs SlotRow and APerm four bits per entry into the
// CM_SLOT_LO/HI and CM_PERM_LO/HI spec constants.
func (l *CMLayout) Packed() (slotLo, slotHi, permLo, permHi uint32) {
	slotLo, slotHi = packNibbles(l.SlotRow)
	permLo, permHi = packNibbles(l.APerm)
	return
}

// packNibbles packs v (entries below 16, at most 16 of them) four bits
// per entry: entries 0–7 into lo, 8–15 into hi, entry 0 lowest.
func packNibbles(v []int) (lo, hi uint32) {
	for i, x := range v {
		if i < 8 {
			lo |= uint32(x) << (4 * i)
		} else {
			hi |= uint32(x) << (4 * (i - 8))
		}
	}
	return lo, hi
}

// ColDeltas packs, four bits per accumulator component (lo: components
// 0–7, hi: 8–15), the component's column minus the smallest column its
// invocation holds — the coopmat kernels' CM_COLD_LO/HI — and reports whether they
// are the same for every lane and each below 16 (CM_COLS): then a kernel
// that shifts a lane's keep word right by its smallest column finds each
// component's bit at a position known when the pipeline is built.
func (l *CMLayout) ColDeltas() (lo, hi uint32, ok bool) {
	if l.AccLen > 16 || len(l.AccRC) == 0 {
		return 0, 0, false
	}
	var ref []int
	for lane, comps := range l.AccRC {
		c0 := comps[0][1]
		for _, rc := range comps {
			c0 = min(c0, rc[1])
		}
		deltas := make([]int, len(comps))
		for i, rc := range comps {
			deltas[i] = rc[1] - c0
			if deltas[i] > 15 {
				return 0, 0, false
			}
		}
		if lane == 0 {
			ref = deltas
		} else if !slices.Equal(deltas, ref) {
			return 0, 0, false
		}
	}
	lo, hi = packNibbles(ref)
	return lo, hi, true
}

func (l *CMLayout) String() string {
	s := fmt.Sprintf("coopmat %dx%dx%d subgroup %d: acc %d comps/lane, A %d comps/lane; ", l.M, l.N, l.K, l.SG, l.AccLen, l.ALen)
	if l.Mode1 {
		return s + fmt.Sprintf("register softmax and P OK (MODE 1): RL=%d slotrow=%v xormask=%#x aperm=%v", l.RL, l.SlotRow, l.XorMask, l.APerm)
	}
	return s + "register softmax impossible: " + l.Why
}

// ParseCMProbe decodes flash_cm_probe's output: out[0] accumulator
// components per lane, out[1] A components per lane, out[2] subgroup size;
// from out[8] 64 words per lane for the accumulator (256·row + col) then 64
// per lane for A (32·row + col); NaN where not written.
func ParseCMProbe(out []float32, shape device.CoopMatShape, sg int) (*CMLayout, error) {
	if len(out) < shaders.FlashCMProbeFloats(sg) {
		return nil, fmt.Errorf("probe: %d words, want %d", len(out), shaders.FlashCMProbeFloats(sg))
	}
	l := &CMLayout{M: shape.M, N: shape.N, K: shape.K, SG: int(out[2]), AccLen: int(out[0]), ALen: int(out[1])}
	if l.SG != sg {
		return nil, fmt.Errorf("probe ran with subgroup %v, device reports %d", out[2], sg)
	}
	if l.AccLen <= 0 || l.AccLen > 64 || l.ALen <= 0 || l.ALen > 64 {
		return nil, fmt.Errorf("probe: odd lengths acc %v A %v", out[0], out[1])
	}
	l.AccRC = make([][][2]int, sg)
	l.ARC = make([][][2]int, sg)
	seenAcc := map[[2]int]int{}
	seenA := map[[2]int]int{}
	for lane := range sg {
		for i := range l.AccLen {
			v := out[8+lane*64+i]
			if math.IsNaN(float64(v)) {
				return nil, fmt.Errorf("probe: acc lane %d comp %d not written", lane, i)
			}
			rc := [2]int{int(v) / 256, int(v) % 256}
			l.AccRC[lane] = append(l.AccRC[lane], rc)
			seenAcc[rc]++
		}
		for j := range l.ALen {
			v := out[8+(sg+lane)*64+j]
			if math.IsNaN(float64(v)) {
				return nil, fmt.Errorf("probe: A lane %d comp %d not written", lane, j)
			}
			rc := [2]int{int(v) / 32, int(v) % 32}
			l.ARC[lane] = append(l.ARC[lane], rc)
			seenA[rc]++
		}
	}
	if len(seenAcc) != int(l.M*l.N) || len(seenA) != int(l.M*l.K) {
		return nil, fmt.Errorf("probe: accumulator covers %d of %d elements, A %d of %d (replicated layouts are not supported)", len(seenAcc), l.M*l.N, len(seenA), l.M*l.K)
	}
	l.analyze()
	return l, nil
}

// analyze decides whether the register softmax (MODE 1) applies and derives
// its spec constants; see flash_cm.comp's header for the conditions.
func (l *CMLayout) analyze() {
	fail := func(f string, a ...any) { l.Mode1 = false; l.Why = fmt.Sprintf(f, a...) }
	if l.AccLen > 16 {
		fail("%d accumulator components per lane (> 16)", l.AccLen)
		return
	}
	// Local rows in order of first appearance; slotrow must not depend on the lane.
	lrows := make([][]int, l.SG)
	for lane := range l.SG {
		var rows []int
		slot := make([]int, l.AccLen)
		for i, rc := range l.AccRC[lane] {
			k := -1
			for x, r := range rows {
				if r == rc[0] {
					k = x
				}
			}
			if k < 0 {
				k = len(rows)
				rows = append(rows, rc[0])
			}
			slot[i] = k
		}
		lrows[lane] = rows
		if lane == 0 {
			l.SlotRow = slot
			l.RL = len(rows)
		} else {
			for i := range slot {
				if slot[i] != l.SlotRow[i] || len(rows) != l.RL {
					fail("local row of a component depends on the lane (lane %d comp %d)", lane, i)
					return
				}
			}
		}
	}
	if l.RL > 15 {
		fail("%d rows per lane", l.RL)
		return
	}
	// Row groups: the lanes holding lane 0's local row 0 give the xor mask.
	holders := func(row int) []int {
		var ls []int
		for lane := range l.SG {
			for _, r := range lrows[lane] {
				if r == row {
					ls = append(ls, lane)
					break
				}
			}
		}
		return ls
	}
	var mask uint32
	for _, x := range holders(lrows[0][0]) {
		mask |= uint32(x)
	}
	if mask >= 256 {
		fail("row group spans lane bits %#x", mask)
		return
	}
	nsub := 1
	for b := mask; b != 0; b &= b - 1 {
		nsub *= 2
	}
	for lane := range l.SG {
		for k, row := range lrows[lane] {
			hs := holders(row)
			if len(hs) != nsub {
				fail("row %d held by %d lanes, mask %#x implies %d", row, len(hs), mask, nsub)
				return
			}
			for _, x := range hs {
				if uint32(x^lane)&^mask != 0 || lrows[x][k] != row {
					fail("row %d: lane %d is not lane %d ^ subset of %#x at the same local row", row, x, lane, mask)
					return
				}
			}
		}
	}
	l.XorMask = mask
	// A component j ↔ accumulator component perm[j] in the same lane.
	if l.N != l.K {
		fail("N (%d) != K (%d)", l.N, l.K)
		return
	}
	if l.AccLen != l.ALen {
		fail("component counts acc %d, A %d", l.AccLen, l.ALen)
		return
	}
	perm := make([]int, l.ALen)
	for lane := range l.SG {
		for j, rc := range l.ARC[lane] {
			i := -1
			for x, rc2 := range l.AccRC[lane] {
				if rc2 == rc {
					i = x
				}
			}
			if i < 0 {
				fail("A element %v of lane %d is not in the lane's accumulator components", rc, lane)
				return
			}
			if lane == 0 {
				perm[j] = i
			} else if perm[j] != i {
				fail("A→accumulator component map depends on the lane")
				return
			}
		}
	}
	l.APerm = perm
	l.Mode1 = true
}
