package main

import (
	"context"
	"fmt"
	"math"

	"github.com/flashvk/flashvk/device"
)

// cmShape picks the subgroup-scope f16·f16+f32→f32 cooperative-matrix shape
// the kernels use: 16×16×16 when reported, else the largest with N == K,
// else any with N and K multiples of 8.
func cmShape(info device.Info) (device.CoopMatShape, error) {
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
		if s.Scope != "subgroup" || s.A != "f16" || s.B != "f16" || s.C != "f32" || s.Result != "f32" {
			continue
		}
		if s.N%8 != 0 || s.K%8 != 0 || s.M > 64 {
			continue
		}
		if best == nil || score(s) > score(*best) {
			best = &info.CoopMat[i]
		}
	}
	if best == nil {
		return device.CoopMatShape{}, fmt.Errorf("no subgroup f16·f16+f32→f32 cooperative-matrix shape with N, K multiples of 8 (reported: %v)", info.CoopMat)
	}
	return *best, nil
}

// cmLayout is what flash_cm_probe tells about the element layout of the
// accumulator and A types, and the spec constants derived from it.
type cmLayout struct {
	M, N, K      uint32
	SG           int
	AccLen, ALen int
	AccRC, ARC   [][][2]int // [lane][component] → (row, col)
	Mode1        bool       // register softmax and register P (MODE 1)
	Mode2        bool       // register softmax, P through shared memory (MODE 2)
	Why          string     // why MODE 1 (or 2) is impossible
	RL           int
	SlotRow      []int
	XorMask      uint32
	APerm        []int
}

func (l *cmLayout) packed() (slotLo, slotHi, permLo, permHi uint32) {
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

func (l *cmLayout) String() string {
	s := fmt.Sprintf("coopmat %dx%dx%d subgroup %d: acc %d comps/lane, A %d comps/lane; ", l.M, l.N, l.K, l.SG, l.AccLen, l.ALen)
	if l.Mode1 {
		return s + fmt.Sprintf("register softmax and P OK (MODES 1, 2): RL=%d slotrow=%v xormask=%#x aperm=%v", l.RL, l.SlotRow, l.XorMask, l.APerm)
	}
	if l.Mode2 {
		return s + fmt.Sprintf("register softmax OK (MODE 2): RL=%d slotrow=%v xormask=%#x; register P impossible: %s", l.RL, l.SlotRow, l.XorMask, l.Why)
	}
	return s + "register softmax impossible: " + l.Why
}

func runProbe(ctx context.Context, d *device.Device, shape device.CoopMatShape) (*cmLayout, error) {
	info := d.Info()
	sg := int(info.SubgroupSize)
	n := 8 + 128*sg
	buf, err := d.NewBuffer(int64(4 * n))
	if err != nil {
		return nil, err
	}
	defer buf.Close()
	if err := d.Fill(ctx, buf, 0x7FC00000); err != nil {
		return nil, err
	}
	p, err := d.NewPipeline(device.PipelineDesc{Name: "flash_cm_probe", SPIRV: spirv("flash_cm_probe"),
		Spec:     []device.Spec{spec(0, uint32(sg)), spec(10, shape.M), spec(11, shape.N), spec(12, shape.K)},
		Bindings: 1, RequiredSubgroupSize: subgroupReq(info), FullSubgroups: info.ComputeFullSubgroups})
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
	l := &cmLayout{M: shape.M, N: shape.N, K: shape.K, SG: int(out[2]), AccLen: int(out[0]), ALen: int(out[1])}
	if l.SG != sg {
		return nil, fmt.Errorf("probe ran with subgroup %d, device reports %d", l.SG, sg)
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
func (l *cmLayout) analyze() {
	fail := func(f string, a ...any) { l.Mode1, l.Mode2 = false, false; l.Why = fmt.Sprintf(f, a...) }
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
	l.Mode2 = true
	// MODE 1: A component j ↔ accumulator component perm[j] in the same lane.
	fail1 := func(f string, a ...any) { l.Mode1 = false; l.Why = fmt.Sprintf(f, a...) }
	if l.N != l.K {
		fail1("N (%d) != K (%d)", l.N, l.K)
		return
	}
	if l.AccLen != l.ALen {
		fail1("component counts acc %d, A %d", l.AccLen, l.ALen)
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
				fail1("A element %v of lane %d is not in the lane's accumulator components", rc, lane)
				return
			}
			if lane == 0 {
				perm[j] = i
			} else if perm[j] != i {
				fail1("A→accumulator component map depends on the lane")
				return
			}
		}
	}
	l.APerm = perm
	l.Mode1 = true
}

// subgroupReq is the RequiredSubgroupSize for kernels that assume the
// device's default subgroup size.
func subgroupReq(info device.Info) uint32 {
	if info.SubgroupSizeControl || info.MinSubgroupSize == info.MaxSubgroupSize {
		return info.SubgroupSize
	}
	return 0
}
