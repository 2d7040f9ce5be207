//go:build cgo

package vkattn

// The scalar kernel families: the forwards flash (FlashAttention-2, the
// default), minimal (FA1-style) and naive (three passes through a float32
// score matrix), and the backward bwd (bwd_pre, bwd_dkdv, bwd_dq). They run
// every storage type on every device with subgroup shuffles; their tiles
// come from defaultConfig (or the tune cache for flash, bwd_dkdv, bwd_dq).

import (
	"context"
	"fmt"
	"slices"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

var (
	flashFamily = &family{
		name: shaders.KernelFlash, dir: Fwd, auto: true, ext: true, backward: []string{"bwd"},
		plan: func(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) (*Plan, error) {
			l, err := b.scalarLaunch(ctx, shaders.KernelFlash, p, dt, 0, OpQ, OpK, OpV, OpO, OpLSE)
			if err != nil {
				return nil, err
			}
			return &Plan{Launches: []Launch{l}}, nil
		},
		tunables: []*Tunable{scalarTunable(shaders.KernelFlash, Fwd)},
	}
	minimalFamily = &family{
		name: shaders.KernelMinimal, dir: Fwd, backward: []string{"bwd"},
		plan: func(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) (*Plan, error) {
			l, err := b.scalarLaunch(ctx, shaders.KernelMinimal, p, dt, 0, OpQ, OpK, OpV, OpO, OpLSE)
			if err != nil {
				return nil, err
			}
			return &Plan{Launches: []Launch{l}}, nil
		},
	}
	naiveFamily = &family{
		name: shaders.KernelNaive, dir: Fwd, backward: []string{"bwd"},
		plan: planNaive,
	}
	bwdFamily = &family{
		name: "bwd", dir: Bwd, auto: true, ext: true,
		plan: func(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) (*Plan, error) {
			pre, err := b.bwdPreLaunch(ctx, p, dt)
			if err != nil {
				return nil, err
			}
			kv, err := b.scalarLaunch(ctx, shaders.KernelBwdDKDV, p, dt, 0, OpQ, OpK, OpV, OpDO, OpLSE, OpD, OpDK, OpDV)
			if err != nil {
				return nil, err
			}
			q, err := b.scalarLaunch(ctx, shaders.KernelBwdDQ, p, dt, 0, OpQ, OpK, OpV, OpDO, OpLSE, OpD, OpDQ)
			if err != nil {
				return nil, err
			}
			kv.Barrier = true // after bwd_pre; bwd_dkdv and bwd_dq are independent
			return &Plan{Launches: []Launch{pre, kv, q}, Scratch: map[Operand]int64{OpD: BackwardScratchBytes(p)}}, nil
		},
		tunables: []*Tunable{scalarTunable(shaders.KernelBwdDKDV, Bwd), scalarTunable(shaders.KernelBwdDQ, Bwd)},
	}
)

// naivePasses is the number of dispatches of the naive kernel.
const naivePasses = 3

func planNaive(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) (*Plan, error) {
	if err := b.checkNaive(p); err != nil {
		return nil, err
	}
	pl := &Plan{Scratch: map[Operand]int64{OpScores: NaiveScratchBytes(p)}}
	for pass := range naivePasses {
		l, err := b.scalarLaunch(ctx, shaders.KernelNaive, p, dt, pass, OpQ, OpK, OpV, OpO, OpLSE, OpScores)
		if err != nil {
			return nil, err
		}
		l.BR, l.BC, l.Barrier = 0, 0, pass > 0
		l.Config = fmt.Sprintf("%s pass %d/%d", l.Config, pass+1, naivePasses)
		pl.Launches = append(pl.Launches, l)
	}
	return pl, nil
}

// scalarLaunch is the launch of a scalar kernel: its tile (tuned where the
// kernel is a tunable family and the cache has one, else Config), grid,
// shared memory and specialization (pass: naive's pass, else 0).
func (b *Backend) scalarLaunch(ctx context.Context, kernel string, p *spec.Problem, dt spec.DType, pass int, binds ...Operand) (Launch, error) {
	c, src, err := b.scalarConfig(ctx, kernel, p, dt)
	if err != nil {
		return Launch{}, err
	}
	ents, err := shaders.SpecEntries(kernel, c, p.D, p.Dv, b.lim.Subgroup, pass, shaders.ExtSpecFor(kernel, p))
	if err != nil {
		return Launch{}, fmt.Errorf("vkattn: %w", err)
	}
	sp := make([]device.Spec, len(ents))
	for i, e := range ents {
		sp[i] = device.Spec{ID: e.ID, Value: e.Value}
	}
	full := b.info.ComputeFullSubgroups && c.WG%b.lim.Subgroup == 0
	l, err := b.newLaunch(kernel, dt, p, ScalarTile(c).String(), sp, b.reqSG, full, binds...)
	if err != nil {
		return Launch{}, err
	}
	l.Source, l.Workgroup, l.BR, l.BC = src, c.WG, c.BR, c.BC
	if tunableByName(kernel) != nil {
		l.Tunable = kernel
	}
	l.Grid = scalarGrid(kernel, p, c)
	l.SharedBytes = SharedBytes(kernel, c, p.D, p.Dv, dt.Size() == 2)
	return l, nil
}

// bwdPreLaunch is bwd_pre (D = rowsum(dO∘O)), the first launch of both
// backward families.
func (b *Backend) bwdPreLaunch(ctx context.Context, p *spec.Problem, dt spec.DType) (Launch, error) {
	l, err := b.scalarLaunch(ctx, shaders.KernelBwdPre, p, dt, 0, OpO, OpDO, OpD)
	l.BC = 0 // rows only: no key tile
	return l, err
}

// scalarGrid is the grid of a scalar kernel for p with configuration c.
func scalarGrid(kernel string, p *spec.Problem, c shaders.Config) [3]uint32 {
	switch kernel {
	case shaders.KernelNaive:
		return shaders.NaiveGrid(p.B, p.Hq, p.Nq)
	case shaders.KernelMinimal:
		return shaders.MinimalGrid(p.B, p.Hq, p.Nq, c.BR)
	case shaders.KernelBwdPre:
		return shaders.BwdPreGrid(p.B, p.Hq, p.Nq, c.BR)
	case shaders.KernelBwdDKDV:
		return shaders.BwdDKDVGrid(p.B, p.Hkv, p.Nk, c.BC)
	case shaders.KernelBwdDQ:
		return shaders.BwdDQGrid(p.B, p.Hq, p.Nq, c.BR)
	}
	return shaders.FlashFwdGrid(p.B, p.Hq, p.Nq, c.BR)
}

// SharedBytes is the shared memory of a scalar kernel with configuration c.
func SharedBytes(kernel string, c shaders.Config, d, dv int, f16 bool) int {
	switch kernel {
	case shaders.KernelNaive:
		return shaders.NaiveSharedBytes(c.WG, d)
	case shaders.KernelMinimal:
		return shaders.MinimalSharedBytes(c.BR, c.BC, d, dv, f16)
	case shaders.KernelFlash:
		return shaders.FlashFwdSharedBytes(c.BR, c.BC, d, dv, f16)
	case shaders.KernelBwdDKDV:
		return shaders.BwdDKDVSharedBytes(c.BR, c.BC, d, dv, f16)
	case shaders.KernelBwdDQ:
		return shaders.BwdDQSharedBytes(c.BR, c.BC, d, dv, f16)
	}
	return 0
}

// scalarConfig is the configuration of a scalar kernel for p: a tuned one
// (tune family = kernel name) when the cache has a valid one, else Config.
func (b *Backend) scalarConfig(ctx context.Context, kernel string, p *spec.Problem, dt spec.DType) (shaders.Config, string, error) {
	if c, ok := b.tuned(ctx, kernel, p, dt); ok {
		if sc, ok := c.(ScalarTile); ok {
			return shaders.Config(sc), SourceTuned, nil
		}
	}
	c, err := b.config(kernel, p.D, p.Dv, dt, b.limFor(p))
	return c, SourceDefault, err
}

type cfgKey struct {
	kernel string
	d, dv  int
	dt     spec.DType
	drop   bool // with dropout's keep bits (shaders.Limits.Dropout)
}

type cfgResult struct {
	c   shaders.Config
	err error
}

// Config returns the default tile configuration of a scalar kernel for
// head dims d, dv and storage type dt on this device (cached).
func (b *Backend) Config(kernel string, d, dv int, dt spec.DType) (shaders.Config, error) {
	return b.config(kernel, d, dv, dt, b.lim)
}

// config is Config within limits lim (b.limFor a problem).
func (b *Backend) config(kernel string, d, dv int, dt spec.DType, lim shaders.Limits) (shaders.Config, error) {
	k := cfgKey{kernel, d, dv, dt, lim.Dropout}
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	if r, ok := b.cfgs[k]; ok {
		return r.c, r.err
	}
	c, err := defaultConfig(kernel, d, dv, dt.Size() == 2, lim)
	if err != nil {
		err = fmt.Errorf("%w: %s D=%d Dv=%d on %s: %w", ErrUnsupported, kernel, d, dv, b.info.Name, err)
	}
	b.cfgs[k] = cfgResult{c, err}
	return c, err
}

// checkNaive refuses problems whose naive score matrix does not fit.
func (b *Backend) checkNaive(p *spec.Problem) error {
	n := NaiveScratchBytes(p)
	if n/4 > MaxElements {
		return fmt.Errorf("%w: naive kernel: score matrix B·Hq·Nq·Nk = %d elements exceeds 32-bit offsets; use the flash kernel",
			ErrTooLarge, n/4)
	}
	if n > b.bindBytes {
		return fmt.Errorf("%w: naive kernel: score matrix B·Hq·Nq·Nk·4 = %d bytes exceeds what one binding of %s reaches (%d bytes); use the flash kernel",
			ErrTooLarge, n, b.info.Name, b.bindBytes)
	}
	return nil
}

// NaiveScratchBytes is the naive kernel's score matrix: 4·B·Hq·Nq·Nk bytes.
func NaiveScratchBytes(p *spec.Problem) int64 {
	return 4 * int64(p.B) * int64(p.Hq) * int64(p.Nq) * int64(p.Nk)
}

// BackwardScratchBytes is the backward's extra device memory: the float32
// D = rowsum(dO∘O) of every query row, 4·B·Hq·Nq bytes.
func BackwardScratchBytes(p *spec.Problem) int64 { return 4 * int64(p.LSELen()) }

// ScalarTile is a scalar kernel's tile configuration as a tune Candidate:
// "wg64-br64-bc16".
type ScalarTile shaders.Config

func (c ScalarTile) String() string { return fmt.Sprintf("wg%d-br%d-bc%d", c.WG, c.BR, c.BC) }

// ParseScalarTile reads a ScalarTile's String.
func ParseScalarTile(s string) (ScalarTile, error) {
	var c ScalarTile
	if _, err := fmt.Sscanf(s, "wg%d-br%d-bc%d", &c.WG, &c.BR, &c.BC); err != nil || c.String() != s {
		return ScalarTile{}, fmt.Errorf("%w: scalar tile %q (want wgN-brN-bcN)", ErrInvalid, s)
	}
	return c, nil
}

// Scalar candidate grid: powers of two, filtered by CheckConfig and a
// register bound (tiles far above the default's register budget spill).
var (
	tuneWGs = []int{32, 64, 128, 256}
	tuneBRs = []int{8, 16, 32, 64, 128}
	tuneBCs = []int{8, 16, 32, 64}
)

// tuneMaxRegs bounds the per-thread fp32 state of scalar candidates.
const tuneMaxRegs = 160

// scalarRegs is a proxy of a scalar kernel's per-thread fp32 state (0 when
// not estimated).
func scalarRegs(kernel string, c shaders.Config, d, dv, sg int) int {
	switch kernel {
	case shaders.KernelFlash:
		l, err := shaders.FlashFwdLayout(c, dv, sg)
		if err != nil {
			return 0
		}
		return l.Registers()
	case shaders.KernelBwdDKDV:
		l, err := shaders.BwdTileLayout(c.WG, c.BC)
		if err != nil {
			return 0
		}
		return l.M*(ceilDiv(d, l.TX)+ceilDiv(dv, l.TX)) + l.M*ceilDiv(c.BR, l.TX)
	case shaders.KernelBwdDQ:
		l, err := shaders.BwdTileLayout(c.WG, c.BR)
		if err != nil {
			return 0
		}
		return l.M*ceilDiv(d, l.TX) + l.M*ceilDiv(c.BC, l.TX)
	}
	return 0
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// scalarTunable is the tune family of a scalar kernel's tile.
func scalarTunable(kernel string, dir Dir) *Tunable {
	return &Tunable{
		Name: kernel, Dir: dir,
		Default: func(_ context.Context, b *Backend, p *spec.Problem, dt spec.DType) (Candidate, error) {
			c, err := b.Config(kernel, p.D, p.Dv, dt)
			return ScalarTile(c), err
		},
		Candidates: func(_ context.Context, b *Backend, p *spec.Problem, dt spec.DType) ([]Candidate, error) {
			var cs []Candidate
			wgs := slices.Clone(tuneWGs)
			if sg := b.lim.Subgroup; sg > 0 && !slices.Contains(wgs, sg) {
				wgs = append([]int{sg}, wgs...)
			}
			for _, wg := range wgs {
				for _, br := range tuneBRs {
					for _, bc := range tuneBCs {
						c := shaders.Config{WG: wg, BR: br, BC: bc}
						if shaders.CheckConfig(kernel, c, p.D, p.Dv, dt.Size() == 2, b.limFor(p)) == nil &&
							scalarRegs(kernel, c, p.D, p.Dv, b.lim.Subgroup) <= tuneMaxRegs {
							cs = append(cs, ScalarTile(c))
						}
					}
				}
			}
			if def, err := b.Config(kernel, p.D, p.Dv, dt); err == nil {
				nearestFirst(cs, func(c Candidate) []int {
					t := c.(ScalarTile)
					return []int{t.WG, t.BR, t.BC}
				}, []int{def.WG, def.BR, def.BC})
			}
			return cs, nil
		},
		Parse: func(s string) (Candidate, error) { return ParseScalarTile(s) },
		Check: func(_ context.Context, b *Backend, p *spec.Problem, dt spec.DType, c Candidate) error {
			sc, ok := c.(ScalarTile)
			if !ok {
				return fmt.Errorf("%w: %T is not a scalar tile", ErrInvalid, c)
			}
			if err := shaders.CheckConfig(kernel, shaders.Config(sc), p.D, p.Dv, dt.Size() == 2, b.limFor(p)); err != nil {
				return err
			}
			// lavapipe silently ends loops past LavapipeLoopLimit: a tuned
			// tile must not cross it where the default does not.
			if isLavapipe(b.info) {
				n := shaders.LoopIterations(kernel, shaders.Config(sc), p.D, p.Dv, p.Nq, p.Nk, p.Group())
				def, err := b.Config(kernel, p.D, p.Dv, dt)
				if n > shaders.LavapipeLoopLimit && (err != nil || shaders.LoopIterations(kernel, def, p.D, p.Dv, p.Nq, p.Nk, p.Group()) <= shaders.LavapipeLoopLimit) {
					return fmt.Errorf("%d loop iterations per invocation exceed lavapipe's limit of %d for Nq=%d Nk=%d", n, shaders.LavapipeLoopLimit, p.Nq, p.Nk)
				}
			}
			return nil
		},
	}
}

// Register budgets (fp32 values per thread) of defaultConfig.
const (
	flashRegBudget = 96
	bwdRegBudget   = 96
)

// measuredTiles are configurations measured fastest on an NVIDIA H200 (subgroup 32,
// 48 KiB of shared memory per workgroup; f32, B·H = 64, N = 2048, no mask),
// by kernel and the largest head dim max(D, DV) they apply to. defaultConfig
// takes the first entry whose bound covers the head dims and that passes
// CheckConfig on the device, else falls back to its generic search.
var measuredTiles = map[string][]struct {
	maxDim int
	c      shaders.Config
}{
	shaders.KernelFlash: {
		{32, shaders.Config{WG: 64, BR: 32, BC: 32}},   // 16.9 TFLOP/s
		{64, shaders.Config{WG: 64, BR: 64, BC: 16}},   // 18.2
		{96, shaders.Config{WG: 128, BR: 64, BC: 32}},  // 15.6
		{128, shaders.Config{WG: 128, BR: 64, BC: 16}}, // 14.0
		{256, shaders.Config{WG: 64, BR: 16, BC: 16}},  // 2.1 (the only D=256 tile in 48 KiB)
	},
	shaders.KernelBwdDKDV: {
		{32, shaders.Config{WG: 64, BR: 16, BC: 8}},
		{64, shaders.Config{WG: 64, BR: 8, BC: 64}},
		{96, shaders.Config{WG: 128, BR: 8, BC: 16}},
		{128, shaders.Config{WG: 256, BR: 16, BC: 16}},
		{256, shaders.Config{WG: 128, BR: 8, BC: 8}},
	},
	shaders.KernelBwdDQ: {
		{32, shaders.Config{WG: 64, BR: 16, BC: 8}},
		{64, shaders.Config{WG: 64, BR: 64, BC: 8}},
		{96, shaders.Config{WG: 128, BR: 16, BC: 8}},
		{128, shaders.Config{WG: 128, BR: 16, BC: 8}},
		{256, shaders.Config{WG: 128, BR: 8, BC: 8}},
	},
}

// defaultConfig picks a tile configuration for kernel: a tuned one (see
// measuredTiles) when it suits the device, else the largest tile (BR·BC) that
// passes CheckConfig and keeps per-thread state within a register budget,
// preferring, among equals, larger workgroups (up to 128) and then less
// shared memory.
func defaultConfig(kernel string, d, dv int, f16 bool, lim shaders.Limits) (shaders.Config, error) {
	sg := lim.Subgroup
	if sg < 1 {
		return shaders.Config{}, fmt.Errorf("subgroup size %d", sg)
	}
	for _, t := range measuredTiles[kernel] {
		if max(d, dv) <= t.maxDim {
			if shaders.CheckConfig(kernel, t.c, d, dv, f16, lim) == nil {
				return t.c, nil
			}
			break
		}
	}
	top := 128
	if lim.MaxWorkgroupSize > 0 {
		top = min(top, lim.MaxWorkgroupSize)
	}
	top = max(top, sg)
	var wgs []int // top, top/2, …, 1 (CheckConfig drops the invalid ones)
	for wg := top; wg >= 1; wg /= 2 {
		wgs = append(wgs, wg)
	}
	pow2 := []int{256, 128, 64, 32, 16, 8, 4, 2, 1}
	switch kernel {
	case shaders.KernelNaive:
		c := shaders.Config{WG: wgs[0], BR: 1, BC: 1}
		return c, shaders.CheckConfig(kernel, c, d, dv, f16, lim)
	case shaders.KernelBwdPre:
		wg := max(128, sg)
		tpr := min(sg, 32)
		c := shaders.Config{WG: wg, BR: wg / tpr, BC: 1}
		return c, shaders.CheckConfig(kernel, c, d, dv, f16, lim)
	case shaders.KernelMinimal:
		// One thread per query row: the largest BR·BC that fits, WG ≥ BR.
		for _, area := range []int{2048, 1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1} {
			for _, br := range []int{64, 32, 16, 8, 4, 2, 1} {
				bc := area / br
				if bc < 1 || bc > 32 || br*bc != area {
					continue
				}
				c := shaders.Config{WG: max(br, min(64, wgs[0])), BR: br, BC: bc}
				if shaders.CheckConfig(kernel, c, d, dv, f16, lim) == nil {
					return c, nil
				}
			}
		}
		return shaders.Config{}, fmt.Errorf("no minimal tile fits D=%d DV=%d in %d bytes", d, dv, lim.SharedBytes)
	}
	best, bestScore := shaders.Config{}, [3]int{}
	found := false
	for _, wg := range wgs {
		for _, br := range pow2 {
			for _, bc := range pow2 {
				if br > 128 || bc > 64 {
					continue
				}
				c := shaders.Config{WG: wg, BR: br, BC: bc}
				if shaders.CheckConfig(kernel, c, d, dv, f16, lim) != nil {
					continue
				}
				budget := bwdRegBudget
				switch kernel {
				case shaders.KernelFlash:
					budget = flashRegBudget
				case shaders.KernelBwdDKDV:
					if br > 64 {
						continue
					}
				case shaders.KernelBwdDQ:
					if bc > 64 {
						continue
					}
				default:
					return shaders.Config{}, fmt.Errorf("unknown kernel %q", kernel)
				}
				if scalarRegs(kernel, c, d, dv, sg) > budget {
					continue
				}
				shared := SharedBytes(kernel, c, d, dv, f16)
				score := [3]int{br * bc, wg, -shared}
				if !found || score[0] > bestScore[0] ||
					(score[0] == bestScore[0] && (score[1] > bestScore[1] ||
						(score[1] == bestScore[1] && score[2] > bestScore[2]))) {
					best, bestScore, found = c, score, true
				}
			}
		}
	}
	if !found {
		return shaders.Config{}, fmt.Errorf("no %s tile fits D=%d DV=%d in %d bytes of shared memory (subgroup %d)", kernel, d, dv, lim.SharedBytes, sg)
	}
	return best, nil
}
