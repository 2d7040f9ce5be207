package vkattn

import (
	"context"
	"fmt"

	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// Launch is one compute dispatch a call records: the kernel, its grid
// (workgroups in x, y, z), the invocations per workgroup (x; y = z = 1),
// the tile and the shared memory per workgroup.
type Launch struct {
	Kernel      string
	Grid        [3]uint32
	Workgroup   int
	BR, BC      int // query and key rows per tile (naive: BR = BC = 0)
	SharedBytes int
	// Mode describes a variant: flash_cm's tile ("nsg8-bc128-mode1-pf1"),
	// the naive kernel's pass ("pass 1/3"); "" otherwise.
	Mode string
	// Source says where the configuration comes from: SourceTuned (the
	// tune cache) or SourceDefault.
	Source string
}

// Launches lists the dispatches the forward (backward = false) or the
// backward (backward = true) of p with storage dt records, in order, as
// Forward and Backward record them: the grids come from the same functions
// (forwardGrid, cmGrid, bwdGrids) and the tiles from Config and the
// flash_cm tile choice. The grids are those of the whole problem; the host
// path (ForwardHost, BackwardHost) dispatches problems too large for one
// submission in chunks of MaxBatchChunk batches, each with z = the chunk's
// batches. Like ForwardKernel it may run the flash_cm layout probe.
func (b *Backend) Launches(ctx context.Context, p *spec.Problem, dt DType, backward bool) ([]Launch, error) {
	if err := CheckProblem(p); err != nil {
		return nil, err
	}
	if err := b.supports(dt); err != nil {
		return nil, err
	}
	f16 := dt.Size() == 2 // 16-bit storage (f16 or bf16)
	if backward {
		cpre, spre, err := b.configFor(ctx, shaders.KernelBwdPre, p, dt)
		if err != nil {
			return nil, err
		}
		scalar := func(k string, grid [3]uint32, c shaders.Config, src string) Launch {
			return Launch{Kernel: k, Grid: grid, Workgroup: c.WG, BR: c.BR, BC: c.BC,
				SharedBytes: SharedBytes(k, c, p.D, p.Dv, f16), Source: src}
		}
		plan, cm, err := b.bwdCMPlanFor(ctx, p, dt)
		if err != nil {
			return nil, err
		}
		if cm {
			pre := scalar(shaders.KernelBwdPre, shaders.BwdPreGrid(p.B, p.Hq, p.Nq, cpre.BR), cpre, spre)
			return append([]Launch{pre}, bwdCMLaunches(p, plan)...), nil
		}
		ckv, skv, err := b.configFor(ctx, shaders.KernelBwdDKDV, p, dt)
		if err != nil {
			return nil, err
		}
		cq, sq, err := b.configFor(ctx, shaders.KernelBwdDQ, p, dt)
		if err != nil {
			return nil, err
		}
		g := bwdGrids(p, cpre, ckv, cq)
		return []Launch{scalar(shaders.KernelBwdPre, g[0], cpre, spre), scalar(shaders.KernelBwdDKDV, g[1], ckv, skv),
			scalar(shaders.KernelBwdDQ, g[2], cq, sq)}, nil
	}
	if cm := b.cmFor(dt); cm != nil { // as recordFlashCM decides
		l, err := b.cmLayout(ctx, cm)
		if err != nil && cm.explicit {
			return nil, err
		}
		if err == nil {
			if c, src, err := b.cmTileDT(ctx, cm, l, p); err == nil {
				return []Launch{{Kernel: shaders.KernelFlashCM, Grid: cmGrid(p, l, c), Workgroup: c.NSG * l.SG,
					BR: c.NSG * int(l.M), BC: c.BC, Mode: c.String(), Source: src,
					SharedBytes: shaders.FlashCMSharedBytes(int(l.M), int(l.N), int(l.K), c.NSG, c.BC, c.Mode, p.D, p.Dv)}}, nil
			}
		}
	}
	c, src, err := b.configFor(ctx, b.kernel, p, dt)
	if err != nil {
		return nil, err
	}
	l := Launch{Kernel: b.kernel, Grid: forwardGrid(b.kernel, p, c), Workgroup: c.WG, BR: c.BR, BC: c.BC,
		SharedBytes: SharedBytes(b.kernel, c, p.D, p.Dv, f16), Source: src}
	if b.kernel != shaders.KernelNaive {
		return []Launch{l}, nil
	}
	if err := b.checkNaive(p); err != nil {
		return nil, err
	}
	l.BR, l.BC = 0, 0
	ls := make([]Launch, naivePasses)
	for pass := range ls {
		ls[pass] = l
		ls[pass].Mode = fmt.Sprintf("pass %d/%d", pass+1, naivePasses)
	}
	return ls, nil
}

// naivePasses is the number of dispatches of the naive kernel.
const naivePasses = 3

// forwardGrid is the grid of the scalar forward kernel (naive, minimal or
// flash) for p with configuration c.
func forwardGrid(kernel string, p *spec.Problem, c shaders.Config) [3]uint32 {
	switch kernel {
	case shaders.KernelNaive:
		return shaders.NaiveGrid(p.B, p.Hq, p.Nq)
	case shaders.KernelMinimal:
		return shaders.MinimalGrid(p.B, p.Hq, p.Nq, c.BR)
	}
	return shaders.FlashFwdGrid(p.B, p.Hq, p.Nq, c.BR)
}

// cmGrid is flash_cm's grid: one workgroup per NSG·M query rows, head and
// batch (the same layout as FlashFwdGrid).
func cmGrid(p *spec.Problem, l *cmLayout, c cmTile) [3]uint32 {
	return shaders.FlashFwdGrid(p.B, p.Hq, p.Nq, c.NSG*int(l.M))
}

// bwdGrids are the grids of bwd_pre, bwd_dkdv and bwd_dq.
func bwdGrids(p *spec.Problem, cpre, ckv, cq shaders.Config) [3][3]uint32 {
	return [3][3]uint32{
		shaders.BwdPreGrid(p.B, p.Hq, p.Nq, cpre.BR),
		shaders.BwdDKDVGrid(p.B, p.Hkv, p.Nk, ckv.BC),
		shaders.BwdDQGrid(p.B, p.Hq, p.Nq, cq.BR),
	}
}
