package vkattn

// flash_cm: the FlashAttention-2 forward on KHR cooperative matrices
// (shaders/flash_cm.comp), for f16 storage (fp16 operands) and for bf16
// storage (bfloat16 operands: its own modules, NAME.bf16.spv, never the
// fp16 ones). Selection (Options.Kernel), per storage type:
//
//   - "" (auto): flash_cm for f16 forwards on devices that support it (see
//     cmSupport) and for bf16 forwards on devices that support its bf16
//     build (cmSupportFor(info, BF16): a bf16·bf16+f32→f32 shape and
//     VK_KHR_shader_bfloat16's shaderBFloat16Type and
//     shaderBFloat16CooperativeMatrix enabled); the scalar flash kernel for
//     f32, for devices without cooperative matrices (lavapipe; bf16 too
//     where the device has f16 coopmat but not bf16) and for problems
//     flash_cm cannot take; if the layout probe fails, the scalar kernel
//     too.
//   - "flash_cm": the same, but Open fails with ErrUnsupported when the
//     device cannot run flash_cm for f16, and a failing probe (f16, or bf16
//     where bf16 coopmat is supported) is an error.
//   - "flash", "minimal", "naive": never flash_cm.
//
// The element layout of the coopmat types (which invocation holds which
// element) is read once per Backend and storage type by running that
// type's flash_cm_probe (lazily, on the first forward or backward) and
// turned into flash_cm's layout spec constants; see bench/NOTES.md
// ("Integrating flash_cm into vkattn") and flash_cm.comp's header.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/pipeline"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// flashCM is a Backend's flash_cm state for one storage type (nil when not
// selected or not supported): Backend.cm for F16, Backend.cmBF for BF16.
type flashCM struct {
	dt       DType // F16 or BF16: the storage type of the modules below
	explicit bool  // Options.Kernel == "flash_cm"
	shape    device.CoopMatShape
	reqSG    uint32
	full     bool
	spirv    []byte
	probeSPV []byte
	bwdKV    []byte // bwd_cm_dkdv.<dt> (bwdcm.go)
	bwdQ     []byte // bwd_cm_dq.<dt>

	once   sync.Once
	layout *CMLayout
	err    error
}

// cmSupport checks that info can run flash_cm for f16 storage and returns
// the coopmat shape it would use.
func cmSupport(info device.Info) (device.CoopMatShape, error) { return cmSupportFor(info, F16) }

// cmSupportFor checks that info can run the coopmat kernels for storage dt
// (F16 or BF16) and returns the coopmat shape they would use.
func cmSupportFor(info device.Info, dt DType) (device.CoopMatShape, error) {
	var why []string
	if dt != F16 && dt != BF16 {
		return device.CoopMatShape{}, fmt.Errorf("%w: flash_cm has no %v build", ErrUnsupported, dt)
	}
	if !apiAtLeast(info.APIVersion, 1, 3) {
		why = append(why, fmt.Sprintf("Vulkan %q < 1.3 (SPIR-V 1.6 modules)", info.APIVersion))
	}
	if !info.Float16 {
		// bf16 modules too: glslang declares Float16 for bfloat16 types.
		why = append(why, "no shaderFloat16")
	}
	if dt == BF16 {
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
		return device.CoopMatShape{}, fmt.Errorf("%w: flash_cm (%v) on %s: %s", ErrUnsupported, dt, info.Name, strings.Join(why, "; "))
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
func CMShape(info device.Info) (device.CoopMatShape, error) { return CMShapeFor(info, F16) }

// CMShapeFor is CMShape for the coopmat kernels of storage dt: f16·f16 or
// bf16·bf16 (+f32→f32). For BF16 the device must also report a bf16 matrix
// of M×N (as the A or B matrix of some subgroup shape): the kernels convert
// fp32 M×N accumulators to bf16 ones to store results, and a matrix type
// must match a reported size.
func CMShapeFor(info device.Info, dt DType) (device.CoopMatShape, error) {
	et := "f16"
	if dt == BF16 {
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
		if dt == BF16 && !hasSubgroupMatrix(info, "bf16", s.M, s.N) {
			continue
		}
		if best == nil || score(s) > score(*best) {
			best = &info.CoopMat[i]
		}
	}
	if best == nil {
		extra := ""
		if dt == BF16 {
			extra = " and a bf16 M×N matrix"
		}
		return device.CoopMatShape{}, fmt.Errorf("no subgroup %s·%s+f32→f32 cooperative-matrix shape with N, K multiples of 8%s (reported: %v)", et, et, extra, info.CoopMat)
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

// initFlashCM sets b.cm (f16) and b.cmBF (bf16) for the kernel selection
// requested (Options.Kernel). With "flash_cm" a device that cannot run the
// f16 build is an error; the bf16 build is used where supported, else bf16
// runs the scalar kernels (as f32 does).
func (b *Backend) initFlashCM(requested string) error {
	if requested != "" && requested != shaders.KernelFlashCM {
		return nil
	}
	explicit := requested == shaders.KernelFlashCM
	cm, err := b.newFlashCM(F16, explicit)
	if err != nil && (explicit || !errors.Is(err, ErrUnsupported)) {
		return err
	}
	b.cm = cm
	if slices.Contains(b.dtypes, BF16) {
		if bf, err := b.newFlashCM(BF16, explicit); err == nil {
			b.cmBF = bf
		} else if !errors.Is(err, ErrUnsupported) {
			return err
		}
	}
	return nil
}

// newFlashCM returns the coopmat state for storage dt, or ErrUnsupported
// when the device cannot run dt's coopmat modules.
func (b *Backend) newFlashCM(dt DType, explicit bool) (*flashCM, error) {
	shape, err := cmSupportFor(b.info, dt)
	if err != nil {
		return nil, err
	}
	cm := &flashCM{dt: dt, explicit: explicit, shape: shape, full: b.info.ComputeFullSubgroups}
	for _, x := range []struct {
		kernel string
		dst    *[]byte
	}{{shaders.KernelFlashCM, &cm.spirv}, {shaders.KernelFlashCMProbe, &cm.probeSPV},
		{shaders.KernelBwdCMDKDV, &cm.bwdKV}, {shaders.KernelBwdCMDQ, &cm.bwdQ}} {
		spv, err := shaders.SPIRV(x.kernel, dt.String())
		if err != nil {
			return nil, fmt.Errorf("vkattn: %w", err)
		}
		*x.dst = spv
	}
	if b.info.SubgroupSizeControl {
		cm.reqSG = b.info.SubgroupSize
	}
	return cm, nil
}

// cmFor is the coopmat state of storage dt: b.cm for F16, b.cmBF for BF16,
// nil for F32 or where the coopmat kernels are not used for dt. bf16 never
// runs the fp16 modules.
func (b *Backend) cmFor(dt DType) *flashCM {
	switch dt {
	case F16:
		return b.cm
	case BF16:
		return b.cmBF
	}
	return nil
}

// flashCMLayout runs the f16 probe once per Backend (thread-safe) and
// returns the layout (cmLayout for any storage type).
func (b *Backend) flashCMLayout(ctx context.Context) (*CMLayout, error) {
	return b.cmLayout(ctx, b.cm)
}

// cmLayout runs cm's probe (its storage type's flash_cm_probe) once per
// Backend and storage type (thread-safe) and returns the layout.
func (b *Backend) cmLayout(ctx context.Context, cm *flashCM) (*CMLayout, error) {
	cm.once.Do(func() {
		cm.layout, cm.err = runProbe(ctx, b.dev, cm.probeSPV, cm.shape, int(b.info.SubgroupSize), cm.reqSG, cm.full)
		if cm.err != nil {
			cm.err = fmt.Errorf("%w: flash_cm %v layout probe on %s: %w", ErrUnsupported, cm.dt, b.info.Name, cm.err)
		}
	})
	return cm.layout, cm.err
}

// RunCMProbe runs flash_cm_probe for coopmat shape (from CMShape) on d,
// with the subgroup settings a Backend on d would use, and parses its
// output (ParseCMProbe). bench/gemm uses it.
func RunCMProbe(ctx context.Context, d *device.Device, shape device.CoopMatShape) (*CMLayout, error) {
	return RunCMProbeFor(ctx, d, shape, F16)
}

// RunCMProbeFor is RunCMProbe with the probe of storage dt (F16: fp16 A
// matrices; BF16: bfloat16 A matrices, shape from CMShapeFor(info, BF16)).
func RunCMProbeFor(ctx context.Context, d *device.Device, shape device.CoopMatShape, dt DType) (*CMLayout, error) {
	info := d.Info()
	spv, err := shaders.SPIRV(shaders.KernelFlashCMProbe, dt.String())
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
}

// cmLayout is the package's old name for CMLayout, still used by launch.go.
type cmLayout = CMLayout

// Packed packs SlotRow and APerm four bits per entry into the
// CM_SLOT_LO/HI and CM_PERM_LO/HI spec constants.
func (l *CMLayout) Packed() (slotLo, slotHi, permLo, permHi uint32) {
	for i, v := range l.SlotRow {
		if i < 8 {
			slotLo |= uint32(v) << (4 * i)
		} else {
			slotHi |= uint32(v) << (4 * (i - 8))
		}
	}
	for j, v := range l.APerm {
		if j < 8 {
			permLo |= uint32(v) << (4 * j)
		} else {
			permHi |= uint32(v) << (4 * (j - 8))
		}
	}
	return
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

// cmTile is one flash_cm configuration.
type cmTile struct {
	NSG, BC  int // subgroups per workgroup (BR = NSG·CM_M), keys per tile
	Mode     int // 0 shared-memory softmax, 1 register softmax
	Prefetch bool
}

func (c cmTile) String() string {
	pf := 0
	if c.Prefetch {
		pf = 1
	}
	return fmt.Sprintf("nsg%d-bc%d-mode%d-pf%d", c.NSG, c.BC, c.Mode, pf)
}

// cmLargeNq is the query length from which the large MODE 1 tiles are
// chosen. Session 1 saw MODE 1 at ~40 TFLOP/s for N < 2048 and kept MODE 0
// there; that was the H200's clock step (bench/NOTES.md, session 2): with
// steady timings the tuner (bench/results/h200-2026-11-22-tuned) found MODE 1
// 1.25–1.51× faster than MODE 0 at N = 1024 with smaller tiles (more
// workgroups for the short sequences).
const cmLargeNq = 2048

// cmTiles lists the configurations to try for a problem, best first, when
// the probe allows register softmax (MODE 1): the H200 tuner's choices —
// Nq ≥ cmLargeNq: nsg8-bc128 at d ≤ 64, nsg8-bc64 at d ≤ 128; below:
// nsg4-bc32 at d ≤ 64, nsg8-bc32 at d ≤ 128 (all with prefetch); then MODE 0
// nsg4-bc32-pf1 (any layout, the fallback). MODE 1 at d > 128 was not
// measured: MODE 0 there. The tune cache overrides these per device.
func cmTiles(l *CMLayout, d, dv, nq int) []cmTile {
	var ts []cmTile
	if l.Mode1 {
		large := nq >= cmLargeNq
		switch dm := max(d, dv); {
		case dm <= 64 && large:
			ts = append(ts, cmTile{NSG: 8, BC: 128, Mode: 1, Prefetch: true})
		case dm <= 64:
			ts = append(ts, cmTile{NSG: 4, BC: 32, Mode: 1, Prefetch: true})
		case dm <= 128 && large:
			ts = append(ts, cmTile{NSG: 8, BC: 64, Mode: 1, Prefetch: true})
		case dm <= 128:
			ts = append(ts, cmTile{NSG: 8, BC: 32, Mode: 1, Prefetch: true})
		}
	}
	return append(ts, cmTile{NSG: 4, BC: 32, Mode: 0, Prefetch: true})
}

// cmCheckTile reports why tile c cannot run on a device with sharedMax
// bytes of shared memory and workgroups of at most maxWG invocations.
func cmCheckTile(l *CMLayout, c cmTile, d, dv, sharedMax, maxWG int) error {
	M, N, K := int(l.M), int(l.N), int(l.K)
	if d < 1 || dv < 1 || d > shaders.MaxHeadDim || dv > shaders.MaxHeadDim {
		return fmt.Errorf("head dims D=%d Dv=%d (flash_cm takes 1 … %d)", d, dv, shaders.MaxHeadDim)
	}
	if c.BC%N != 0 || c.BC%K != 0 {
		return fmt.Errorf("BC %d not a multiple of N %d and K %d", c.BC, N, K)
	}
	switch c.Mode {
	case 0:
		lpr := 1
		if l.SG >= M {
			lpr = l.SG / M
		}
		if c.BC%lpr != 0 {
			return fmt.Errorf("BC %d not a multiple of %d lanes per row", c.BC, lpr)
		}
	case 1:
		if !l.Mode1 {
			return fmt.Errorf("MODE 1 impossible: %s", l.Why)
		}
	default:
		return fmt.Errorf("unknown MODE %d (0 or 1)", c.Mode)
	}
	if wg := c.NSG * l.SG; wg > maxWG {
		return fmt.Errorf("workgroup %d > %d", wg, maxWG)
	}
	if sh := shaders.FlashCMSharedBytes(M, N, K, c.NSG, c.BC, c.Mode, d, dv); sh > sharedMax {
		return fmt.Errorf("needs %d bytes of shared memory, device has %d", sh, sharedMax)
	}
	return nil
}

// chooseCMTile returns the first tile of cmTiles that fits.
func chooseCMTile(l *CMLayout, d, dv, nq, sharedMax, maxWG int) (cmTile, error) {
	c, err := firstFit(cmTiles(l, d, dv, nq), func(c cmTile) error { return cmCheckTile(l, c, d, dv, sharedMax, maxWG) })
	if err != nil {
		return cmTile{}, fmt.Errorf("no flash_cm tile fits: %w", err)
	}
	return c, nil
}

// firstFit returns the first candidate check accepts, or an error listing
// why each was refused.
func firstFit[T fmt.Stringer](cands []T, check func(T) error) (T, error) {
	var errs []string
	for _, c := range cands {
		err := check(c)
		if err == nil {
			return c, nil
		}
		errs = append(errs, c.String()+": "+err.Error())
	}
	var zero T
	return zero, errors.New(strings.Join(errs, "; "))
}

// cmVec reports whether flash_cm may use 16-byte loads (VEC): D, DV and
// every Q/K/V/O stride multiples of 8 (the buffers are bound at offset 0).
func cmVec(p *spec.Problem, pc shaders.Params) bool {
	for _, v := range []uint32{uint32(p.D), uint32(p.Dv), pc.QB, pc.QS, pc.QH, pc.KB, pc.KS, pc.KH, pc.VB, pc.VS, pc.VH, pc.OB, pc.OS, pc.OH} {
		if v%8 != 0 {
			return false
		}
	}
	return true
}

// cmSpec is flash_cm's specialization for layout l, tile c and head dims.
func cmSpec(l *CMLayout, c cmTile, d, dv int, vec bool) []device.Spec {
	b2u := func(b bool) uint32 {
		if b {
			return 1
		}
		return 0
	}
	var rl, sLo, sHi, xm, pLo, pHi uint32 = 1, 0, 0, 0, 0, 0
	if c.Mode == 1 {
		sLo, sHi, pLo, pHi = l.Packed()
		rl, xm = uint32(max(l.RL, 1)), l.XorMask
	}
	return []device.Spec{
		{ID: shaders.SpecWorkgroupSize, Value: uint32(c.NSG * l.SG)}, {ID: shaders.SpecD, Value: uint32(d)},
		{ID: shaders.SpecDV, Value: uint32(dv)}, {ID: shaders.SpecBR, Value: uint32(c.NSG) * l.M},
		{ID: shaders.SpecBC, Value: uint32(c.BC)}, {ID: shaders.SpecSubgroup, Value: uint32(l.SG)},
		{ID: shaders.SpecCMM, Value: l.M}, {ID: shaders.SpecCMN, Value: l.N}, {ID: shaders.SpecCMK, Value: l.K},
		{ID: shaders.SpecCMMode, Value: uint32(c.Mode)}, {ID: shaders.SpecCMLen, Value: uint32(l.AccLen)},
		{ID: shaders.SpecCMRL, Value: rl}, {ID: shaders.SpecCMSlotLo, Value: sLo}, {ID: shaders.SpecCMSlotHi, Value: sHi},
		{ID: shaders.SpecCMXorMask, Value: xm}, {ID: shaders.SpecCMPermLo, Value: pLo}, {ID: shaders.SpecCMPermHi, Value: pHi},
		{ID: shaders.SpecCMVec, Value: b2u(vec)}, {ID: shaders.SpecCMPrefet, Value: b2u(vec && c.Prefetch)},
	}
}

// ForwardKernel is the kernel the forward of p with storage dt runs:
// "flash_cm" (f16, or bf16 where its coopmat build is supported) or the
// Backend's scalar kernel (Kernel's fallback). It runs the layout probe if
// it has not run yet.
func (b *Backend) ForwardKernel(ctx context.Context, p *spec.Problem, dt DType) string {
	if b.cmFor(dt) == nil {
		return b.kernel
	}
	if _, _, err := b.flashCMPlan(ctx, p, dt); err != nil {
		return b.kernel
	}
	return shaders.KernelFlashCM
}

// cmTileDT is flash_cm's tile for p with cm's storage type: for f16 (b.cm)
// a tuned one when valid (cmTileFor), else chooseCMTile's; bf16 always
// takes chooseCMTile's (tuning covers f16 and f32 only, and an f16 tile
// may assume an f16 layout).
func (b *Backend) cmTileDT(ctx context.Context, cm *flashCM, l *CMLayout, p *spec.Problem) (cmTile, string, error) {
	if cm == b.cm {
		return b.cmTileFor(ctx, l, p)
	}
	c, err := chooseCMTile(l, p.D, p.Dv, p.Nq, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
	return c, SourceDefault, err
}

// flashCMPlan returns the layout and tile of flash_cm for p with storage
// dt, or an error when flash_cm cannot take p.
func (b *Backend) flashCMPlan(ctx context.Context, p *spec.Problem, dt DType) (*CMLayout, cmTile, error) {
	cm := b.cmFor(dt)
	if cm == nil {
		return nil, cmTile{}, fmt.Errorf("%w: flash_cm has no %v build in use on %s", ErrUnsupported, dt, b.info.Name)
	}
	l, err := b.cmLayout(ctx, cm)
	if err != nil {
		return nil, cmTile{}, err
	}
	c, _, err := b.cmTileDT(ctx, cm, l, p)
	if err != nil {
		return nil, cmTile{}, fmt.Errorf("%w: flash_cm D=%d Dv=%d on %s: %w", ErrUnsupported, p.D, p.Dv, b.info.Name, err)
	}
	return l, c, nil
}

// recordFlashCM records the flash_cm forward of p when it applies (f16
// storage, or bf16 where its coopmat build is supported; flash_cm selected
// and supported, a tile fits); ok = false means the caller records the
// scalar kernel instead. With Kernel "flash_cm" a failing probe is
// returned as an error; a problem no tile fits (and every f32 problem)
// falls back to the scalar kernel in both modes.
func (b *Backend) recordFlashCM(r *device.Recorder, p *spec.Problem, dt DType, push []byte, q, k, v, o, lse *device.Buffer) (ok bool, err error) {
	cm := b.cmFor(dt)
	if cm == nil {
		return false, nil
	}
	l, err := b.cmLayout(context.Background(), cm)
	if err != nil {
		if cm.explicit {
			return false, err
		}
		return false, nil
	}
	c, _, err := b.cmTileDT(context.Background(), cm, l, p)
	if err != nil {
		return false, nil
	}
	vec := cmVec(p, params(p))
	pl, err := b.cache.Get(pipeline.Key{
		Name:          fmt.Sprintf("%s.%v(%s D=%d DV=%d VEC=%v)", shaders.KernelFlashCM, cm.dt, c, p.D, p.Dv, vec),
		SPIRV:         cm.spirv,
		Spec:          cmSpec(l, c, p.D, p.Dv, vec),
		PushSize:      shaders.ParamsSize,
		Bindings:      5,
		SubgroupSize:  cm.reqSG,
		FullSubgroups: cm.full,
	})
	if err != nil {
		return false, fmt.Errorf("vkattn: pipeline %s.%v %s: %w", shaders.KernelFlashCM, cm.dt, c, err)
	}
	return true, b.dispatch(r, pl, push, cmGrid(p, l, c), q, k, v, o, lse)
}
