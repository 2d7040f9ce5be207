package vkattn

// The backward on KHR cooperative matrices (shaders/bwd_cm_dkdv.comp and
// bwd_cm_dq.comp), f16 and bf16 storage (each with its own modules):
// bwd_pre (scalar, bandwidth-bound), then bwd_cm_dkdv and bwd_cm_dq. It is
// selected exactly where flash_cm is for the storage type (b.cmFor(dt)
// non-nil: Kernel "" or "flash_cm" on a device with a suitable coopmat
// shape, for bf16 also VK_KHR_shader_bfloat16) and uses that type's layout
// probe for MODE 1 (elementwise step in registers); MODE 0 (through shared
// memory) runs on any layout. f32 problems, devices without cooperative
// matrices and problems no tile fits run the scalar bwd_dkdv/bwd_dq.

import (
	"context"
	"fmt"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/pipeline"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// bwdCMTile is one configuration of one coopmat backward kernel.
//
//	bwd_cm_dkdv: NSG subgroups own NSG·M keys; Step query rows per step.
//	bwd_cm_dq:   NSG subgroups own NSG·M query rows; Step keys per tile.
type bwdCMTile struct {
	NSG, Step int
	Mode      int  // 0 elementwise through shared memory, 1 in registers
	KVReg     bool // bwd_cm_dkdv only: K_j, V_j fragments held in registers
	Prefetch  bool // bwd_cm_dkdv only: next step's Q, dO loaded into registers during the current one
}

func (c bwdCMTile) String() string {
	s := fmt.Sprintf("nsg%d-step%d-mode%d", c.NSG, c.Step, c.Mode)
	if c.KVReg {
		s += "-kv1"
	}
	if c.Prefetch {
		s += "-pf1"
	}
	return s
}

// brbc are the kernel's spec constants BR and BC for tile c.
func (c bwdCMTile) brbc(dkdv bool, m int) (br, bc int) {
	if dkdv {
		return c.Step, c.NSG * m
	}
	return c.NSG * m, c.Step
}

// bwdCMMode restricts bwdCMTiles to one MODE when ≥ 0; then bwdCMKV and
// bwdCMPF set KVReg and Prefetch of its bwd_cm_dkdv tiles (tests only: they
// check every variant on devices whose layout allows it).
var (
	bwdCMMode = -1
	bwdCMKV   = false
	bwdCMPF   = false
)

// bwdCMTiles lists the configurations to try, best first (the first that
// fits is used): MODE 1 where the probe allows it, larger tiles for smaller
// head dims, then MODE 0 fallbacks that fit 32 KiB of shared memory.
// Candidates, not measurements: see bench/NOTES.md for what the H200 gave.
func bwdCMTiles(l *CMLayout, dkdv bool, d, dv int) []bwdCMTile {
	dm := max(d, dv)
	var ts []bwdCMTile
	modes := []int{0}
	if l.Mode1 {
		modes = []int{1, 0}
	}
	if bwdCMMode >= 0 {
		modes = []int{bwdCMMode}
	}
	for _, mode := range modes {
		switch {
		case dkdv && dm <= 64:
			ts = append(ts, bwdCMTile{NSG: 4, Step: 64, Mode: mode}, bwdCMTile{NSG: 4, Step: 32, Mode: mode})
		case dkdv && dm <= 128:
			ts = append(ts, bwdCMTile{NSG: 4, Step: 16, Mode: mode}, bwdCMTile{NSG: 2, Step: 32, Mode: mode})
		case dm <= 64:
			ts = append(ts, bwdCMTile{NSG: 4, Step: 64, Mode: mode}, bwdCMTile{NSG: 4, Step: 32, Mode: mode})
		case dm <= 128:
			ts = append(ts, bwdCMTile{NSG: 4, Step: 32, Mode: mode})
		}
		ts = append(ts, bwdCMTile{NSG: 2, Step: 16, Mode: mode}, bwdCMTile{NSG: 1, Step: 16, Mode: mode})
	}
	// bwd_cm_dkdv prefetches the next step (H200, bench/NOTES.md: −15% at
	// d64, −24% at d128 of the kernel's time) and at d ≤ 64 also keeps K
	// and V in registers (the tuner's pick there).
	for i := range ts {
		if dkdv {
			ts[i].Prefetch, ts[i].KVReg = true, dm <= 64
			if bwdCMMode >= 0 { // a test picks the variant
				ts[i].KVReg, ts[i].Prefetch = bwdCMKV, bwdCMPF
			}
		}
	}
	return ts
}

// bwdCMCheckTile reports why tile c of the dK/dV (dkdv) or dQ kernel cannot
// run with layout l and head dims d, dv on a device with sharedMax bytes of
// shared memory and workgroups of at most maxWG invocations.
func bwdCMCheckTile(l *CMLayout, dkdv bool, c bwdCMTile, d, dv, sharedMax, maxWG int) error {
	M, N, K := int(l.M), int(l.N), int(l.K)
	if d < 1 || dv < 1 || d > shaders.MaxHeadDim || dv > shaders.MaxHeadDim {
		return fmt.Errorf("head dims D=%d Dv=%d (the coopmat backward takes 1 … %d)", d, dv, shaders.MaxHeadDim)
	}
	if (c.KVReg || c.Prefetch) && !dkdv {
		return fmt.Errorf("KVReg and Prefetch apply to bwd_cm_dkdv only")
	}
	if c.NSG < 1 || c.Step < 1 || c.Step%N != 0 || c.Step%K != 0 {
		return fmt.Errorf("step %d not a multiple of N %d and K %d", c.Step, N, K)
	}
	switch c.Mode {
	case 0:
	case 1:
		if !l.Mode1 {
			return fmt.Errorf("MODE 1 impossible: %s", l.Why)
		}
	default:
		return fmt.Errorf("MODE %d does not exist", c.Mode)
	}
	if wg := c.NSG * l.SG; wg > maxWG {
		return fmt.Errorf("workgroup %d > %d", wg, maxWG)
	}
	br, bc := c.brbc(dkdv, M)
	if sh := shaders.BwdCMSharedBytes(dkdv, M, N, K, c.NSG, br, bc, c.Mode, d, dv); sh > sharedMax {
		return fmt.Errorf("needs %d bytes of shared memory, device has %d", sh, sharedMax)
	}
	return nil
}

// chooseBwdCMTile returns the first tile of bwdCMTiles that fits.
func chooseBwdCMTile(l *CMLayout, dkdv bool, d, dv, sharedMax, maxWG int) (bwdCMTile, error) {
	c, err := firstFit(bwdCMTiles(l, dkdv, d, dv), func(c bwdCMTile) error { return bwdCMCheckTile(l, dkdv, c, d, dv, sharedMax, maxWG) })
	if err != nil {
		return bwdCMTile{}, fmt.Errorf("no tile fits: %w", err)
	}
	return c, nil
}

// bwdCMPlan is the coopmat backward of one problem: the layout and the
// tiles of the two kernels.
type bwdCMPlan struct {
	cm           *flashCM // the storage type's modules
	l            *CMLayout
	kv, dq       bwdCMTile
	kvSrc, dqSrc string // SourceTuned or SourceDefault
}

// bwdCMPlanFor returns the coopmat backward plan for p with storage dt, or
// ok = false when the scalar backward runs instead. err is non-nil only
// when Kernel is "flash_cm" and its layout probe failed.
func (b *Backend) bwdCMPlanFor(ctx context.Context, p *spec.Problem, dt DType) (plan bwdCMPlan, ok bool, err error) {
	cm := b.cmFor(dt)
	if cm == nil {
		return bwdCMPlan{}, false, nil
	}
	l, err := b.cmLayout(ctx, cm)
	if err != nil {
		if cm.explicit {
			return bwdCMPlan{}, false, err
		}
		return bwdCMPlan{}, false, nil
	}
	plan = bwdCMPlan{cm: cm, l: l, kvSrc: SourceDefault, dqSrc: SourceDefault}
	// A tuned tile (vkattn/bwdcm_tune.go) wins, even where no default fits
	// (f16 only: tuning covers f16 and f32).
	tuned := func(kernel string) (Candidate, bool) {
		if dt != F16 {
			return nil, false
		}
		return b.tuned(ctx, kernel, p, dt)
	}
	if t, ok := tuned(shaders.KernelBwdCMDKDV); ok {
		plan.kv, plan.kvSrc = t.(bwdCMTile), SourceTuned
	} else if plan.kv, err = chooseBwdCMTile(l, true, p.D, p.Dv, b.lim.SharedBytes, b.lim.MaxWorkgroupSize); err != nil {
		return bwdCMPlan{}, false, nil
	}
	if t, ok := tuned(shaders.KernelBwdCMDQ); ok {
		plan.dq, plan.dqSrc = t.(bwdCMTile), SourceTuned
	} else if plan.dq, err = chooseBwdCMTile(l, false, p.D, p.Dv, b.lim.SharedBytes, b.lim.MaxWorkgroupSize); err != nil {
		return bwdCMPlan{}, false, nil
	}
	return plan, true, nil
}

// bwdCMSpec is the specialization of bwd_cm_dkdv (dkdv) or bwd_cm_dq.
func bwdCMSpec(l *CMLayout, dkdv bool, c bwdCMTile, d, dv int, vec bool) []device.Spec {
	var pLo, pHi uint32
	if c.Mode == 1 {
		_, _, pLo, pHi = l.Packed()
	}
	vecV := b2u(vec)
	br, bc := c.brbc(dkdv, int(l.M))
	return []device.Spec{
		{ID: shaders.SpecWorkgroupSize, Value: uint32(c.NSG * l.SG)}, {ID: shaders.SpecD, Value: uint32(d)},
		{ID: shaders.SpecDV, Value: uint32(dv)}, {ID: shaders.SpecBR, Value: uint32(br)},
		{ID: shaders.SpecBC, Value: uint32(bc)}, {ID: shaders.SpecSubgroup, Value: uint32(l.SG)},
		{ID: shaders.SpecCMM, Value: l.M}, {ID: shaders.SpecCMN, Value: l.N}, {ID: shaders.SpecCMK, Value: l.K},
		{ID: shaders.SpecCMMode, Value: uint32(c.Mode)}, {ID: shaders.SpecCMLen, Value: uint32(l.AccLen)},
		{ID: shaders.SpecCMPermLo, Value: pLo}, {ID: shaders.SpecCMPermHi, Value: pHi},
		{ID: shaders.SpecCMVec, Value: vecV}, {ID: shaders.SpecCMKVReg, Value: b2u(c.KVReg)},
		{ID: shaders.SpecCMPrefet, Value: b2u(c.Prefetch)},
	}
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// bwdCMGrids are the grids of bwd_cm_dkdv and bwd_cm_dq for plan pl.
func bwdCMGrids(p *spec.Problem, pl bwdCMPlan) (kv, dq [3]uint32) {
	m := int(pl.l.M)
	return shaders.BwdDKDVGrid(p.B, p.Hkv, p.Nk, pl.kv.NSG*m), shaders.BwdDQGrid(p.B, p.Hq, p.Nq, pl.dq.NSG*m)
}

// bwdCMPipe returns the pipeline of one coopmat backward kernel of cm's
// storage type.
func (b *Backend) bwdCMPipe(cm *flashCM, l *CMLayout, dkdv bool, c bwdCMTile, p *spec.Problem, vec bool) (*device.Pipeline, error) {
	kernel, spv, nb := shaders.KernelBwdCMDQ, cm.bwdQ, 7
	if dkdv {
		kernel, spv, nb = shaders.KernelBwdCMDKDV, cm.bwdKV, 8
	}
	pl, err := b.cache.Get(pipeline.Key{
		Name:          fmt.Sprintf("%s.%v(%s D=%d DV=%d VEC=%v)", kernel, cm.dt, c, p.D, p.Dv, vec),
		SPIRV:         spv,
		Spec:          bwdCMSpec(l, dkdv, c, p.D, p.Dv, vec),
		PushSize:      shaders.ParamsSize,
		Bindings:      nb,
		SubgroupSize:  cm.reqSG,
		FullSubgroups: cm.full,
	})
	if err != nil {
		return nil, fmt.Errorf("vkattn: pipeline %s.%v %s: %w", kernel, cm.dt, c, err)
	}
	return pl, nil
}

// bwdCMLaunches describes the two coopmat dispatches of plan pl.
func bwdCMLaunches(p *spec.Problem, pl bwdCMPlan) []Launch {
	l := pl.l
	m, n, k := int(l.M), int(l.N), int(l.K)
	gkv, gq := bwdCMGrids(p, pl)
	var ls []Launch
	for _, x := range []struct {
		kernel string
		dkdv   bool
		c      bwdCMTile
		grid   [3]uint32
		src    string
	}{{shaders.KernelBwdCMDKDV, true, pl.kv, gkv, pl.kvSrc}, {shaders.KernelBwdCMDQ, false, pl.dq, gq, pl.dqSrc}} {
		br, bc := x.c.brbc(x.dkdv, m)
		ls = append(ls, Launch{Kernel: x.kernel, Grid: x.grid, Workgroup: x.c.NSG * l.SG, BR: br, BC: bc,
			Mode: x.c.String(), Source: x.src,
			SharedBytes: shaders.BwdCMSharedBytes(x.dkdv, m, n, k, x.c.NSG, br, bc, x.c.Mode, p.D, p.Dv)})
	}
	return ls
}

// BackwardKernel names the kernels the backward of p with storage dt runs
// after bwd_pre: "bwd_cm" (bwd_cm_dkdv + bwd_cm_dq) or "bwd" (bwd_dkdv +
// bwd_dq). Like ForwardKernel it may run the layout probe.
func (b *Backend) BackwardKernel(ctx context.Context, p *spec.Problem, dt DType) string {
	if _, ok, _ := b.bwdCMPlanFor(ctx, p, dt); ok {
		return "bwd_cm"
	}
	return "bwd"
}
