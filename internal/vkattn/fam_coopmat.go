//go:build cgo

package vkattn

// The cooperative-matrix kernel families (KHR cooperative matrices, f16 and
// bf16 storage, each with its own modules — bf16 never runs the fp16 ones;
// also f32 storage, on bf16 matrix units with every operand split into
// three bf16 planes): the forward flash_cm and the backward bwd_cm
// (bwd_pre, then bwd_cm_dkdv and bwd_cm_dq). They need a subgroup
// f16·f16+f32→f32 (bf16: bf16·bf16) coopmat shape and the features
// cmSupportFor lists; the element layout of the coopmat types is read once
// per Backend and storage type by running flash_cm_probe (cmState.probe)
// and decides whether the softmax and the elementwise steps stay in
// registers (MODE 1) or go through shared memory (MODE 0, any layout).
// Selected automatically for f16 and bf16 where the device supports them,
// and for f32 where bf16 runs: the forward up to d 128, the backward up to
// d 64 (MODE 1 only); "flash_cm" as Options.Kernel makes a device that
// cannot run the f16 build an error at Open.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

var (
	flashCMFamily = &family{
		name: shaders.KernelFlashCM, dir: Fwd, auto: true, ext: true, backward: []string{"bwd_cm", "bwd"},
		init:     initCoopmat,
		whyFor:   cmWhyFor,
		plan:     planFlashCM,
		tunables: []*Tunable{flashCMTunable},
	}
	bwdCMFamily = &family{
		name: "bwd_cm", dir: Bwd, auto: true, ext: true,
		init:   func(b *Backend, _ bool) (string, error) { return initCoopmat(b, false) },
		whyFor: cmWhyFor,
		plan:   planBwdCM,
		// The dK/dV tile's choices apply to plain problems only: at d 128
		// its default rule picks the options' tiles (kvRegStep128: a bias
		// keeps steps of 16, where a plain problem's 64 spills 288 bytes
		// of its values), which a tile timed on a plain problem must not
		// replace. The dQ tile's rule does not depend on the options.
		tunables: []*Tunable{plainOnly(bwdCMTunable(shaders.KernelBwdCMDKDV, true)), bwdCMTunable(shaders.KernelBwdCMDQ, false)},
	}
)

// cmState is a Backend's cooperative-matrix state for one storage type:
// the coopmat shape and, once probed, the element layout.
type cmState struct {
	dt    spec.DType
	shape device.CoopMatShape
	reqSG uint32
	full  bool

	mu     sync.Mutex
	layout *CMLayout
	err    error
}

// initCoopmat sets up b.cm: a state for each of f16 and bf16 the device
// can run the coopmat modules of (and for f32 where bf16 runs: the f32
// modules' planes are bf16), and says why none when there is none.
// explicit (Options.Kernel "flash_cm") makes a device without the f16
// build an error.
func initCoopmat(b *Backend, explicit bool) (string, error) {
	if b.cm == nil {
		b.cm, b.cmWhy = map[spec.DType]*cmState{}, map[spec.DType]string{}
		for _, dt := range []spec.DType{spec.Float16, spec.BFloat16} {
			if !slices.Contains(b.dtypes, dt) {
				continue
			}
			shape, err := cmSupportFor(b.info, dt)
			if err != nil {
				b.cmWhy[dt] = whyNot(err)
				continue
			}
			cm := &cmState{dt: dt, shape: shape, full: b.info.ComputeFullSubgroups}
			if b.info.SubgroupSizeControl {
				cm.reqSG = b.info.SubgroupSize
			}
			b.cm[dt] = cm
			if dt == spec.BFloat16 {
				b.cm[spec.Float32] = &cmState{dt: spec.Float32, shape: cm.shape, reqSG: cm.reqSG, full: cm.full}
			}
		}
	}
	if explicit && b.cm[spec.Float16] == nil {
		why := cmWhyFor(b, spec.Float16)
		var others []string
		for _, f := range registry {
			if f.dir == Fwd && f.name != shaders.KernelFlashCM {
				others = append(others, f.name)
			}
		}
		return "", fmt.Errorf("%w: kernel flash_cm cannot run on %s (%s); it runs %s",
			ErrUnsupported, b.info.Name, why, strings.Join(others, ", "))
	}
	if b.cm[spec.Float16] == nil && b.cm[spec.BFloat16] == nil {
		if why := b.cmWhy[spec.Float16]; why != "" {
			return why, nil
		}
		return cmWhyFor(b, spec.BFloat16), nil
	}
	return "", nil
}

// cmWhyFor says why the cooperative-matrix kernels cannot run storage dt
// on b ("" where they can): float16's and bfloat16's own reasons, and
// for float32 bfloat16's (its modules' planes are bf16); where no reason
// was recorded (a device without 16-bit storage offers neither type),
// that is the reason.
func cmWhyFor(b *Backend, dt spec.DType) string {
	if b.cm[dt] != nil {
		return ""
	}
	prefix := ""
	if dt == spec.Float32 {
		dt, prefix = spec.BFloat16, "their float32 build computes in bfloat16 planes: "
	}
	why := b.cmWhy[dt]
	if why == "" {
		why = "no storageBuffer16BitAccess"
	}
	return prefix + why
}

// whyNot strips an ErrUnsupported error to its reason.
func whyNot(err error) string {
	return strings.TrimPrefix(err.Error(), ErrUnsupported.Error()+": ")
}

// cmLayout returns the coopmat layout of storage dt, running its
// flash_cm_probe on the first call (under ctx; a cancelled probe is not
// remembered, a failed one is); f32's is bf16's, with its planes.
func (b *Backend) cmLayout(ctx context.Context, dt spec.DType) (*CMLayout, error) {
	cm := b.cm[dt]
	if cm == nil {
		return nil, fmt.Errorf("%w (%s)", errNotForDType("the cooperative-matrix kernels", dt), cmWhyFor(b, dt))
	}
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.layout != nil || cm.err != nil {
		return cm.layout, cm.err
	}
	if dt == spec.Float32 {
		// The planes are bf16 operands: bf16's layout, probed once for both.
		bl, err := b.cmLayout(ctx, spec.BFloat16)
		if err != nil {
			if !isCtxErr(err) {
				cm.err = err
			}
			return nil, err
		}
		l := *bl
		l.Storage = dt
		cm.layout = &l
		return cm.layout, nil
	}
	spv, err := b.module(shaders.KernelFlashCMProbe, dt)
	if err != nil {
		return nil, err
	}
	l, err := runProbe(ctx, b.dev, spv, cm.shape, int(b.info.SubgroupSize), cm.reqSG, cm.full)
	if err != nil {
		if isCtxErr(err) {
			return nil, err
		}
		cm.err = fmt.Errorf("%w: coopmat %v layout probe on %s: %w", ErrUnsupported, dt, b.info.Name, err)
		return nil, cm.err
	}
	l.Storage = dt
	cm.layout = l
	return l, nil
}

func planFlashCM(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) (*Plan, error) {
	l, err := b.cmLayout(ctx, dt)
	if err != nil {
		return nil, err
	}
	c, src, err := b.cmTileFor(ctx, l, p, dt)
	if err != nil {
		return nil, err
	}
	vec := cmVec(p, params(p))
	cm := b.cm[dt]
	ln, err := b.newLaunch(shaders.KernelFlashCM, dt, p, fmt.Sprintf("%s vec%d", c, b2u(vec)), CMSpec(l, c, p.D, p.Dv, vec), cm.reqSG, cm.full,
		OpQ, OpK, OpV, OpO, OpLSE)
	if err != nil {
		return nil, err
	}
	ln.Tunable, ln.Config, ln.Source = shaders.KernelFlashCM, c.String(), src
	ln.Grid = shaders.FlashFwdGrid(p.B, p.Hq, p.Nq, c.Rows(l))
	ln.Workgroup, ln.BR, ln.BC = c.NSG*l.SG, c.Rows(l), c.BC
	ln.SharedBytes = cmShared(l, c, p.D, p.Dv, ExtrasOf(l, p.Ext)) // (dropShared adds dropout's keep bits)
	ln.HeadGroup = headGroup(p, p.Hq, ln.BR)
	return &Plan{Launches: []Launch{ln}}, nil
}

// maxHeadGroup bounds headGroup: the workgroups that run at once on a
// GPU of about a hundred multiprocessors then span G heads' K and V and
// about a hundred ÷ G tiles' bias rows, whose sum of bytes per key is
// least near G = 8 to 16. maxGroupRows: tiles of more rows take no group
// (measured, bench/NOTES.md: a group made the forward's 64-row tiles 10%
// faster and its 128-row ones 1% slower, their bias loads hidden by their
// products).
const (
	maxHeadGroup = 8
	maxGroupRows = 64
)

// headGroup is the head group (Launch.HeadGroup) of a kernel whose grid
// runs tiles of rows query rows (or keys) of heads query heads (or KV
// heads) of p: with a bias broadcast over query heads, the largest
// divisor of heads up to maxHeadGroup, so that the heads reading one
// tile's bias rows run together and read them from the cache, not each
// from memory; 0 (a head's tiles first, the order that shares its K and
// V) otherwise.
func headGroup(p *spec.Problem, heads, rows int) int {
	if p.Ext == nil || p.Ext.Bias == nil || p.Ext.Bias.Head != 0 || heads < 2 || rows > maxGroupRows {
		return 0
	}
	for g := min(maxHeadGroup, heads); g > 1; g-- {
		if heads%g == 0 {
			return g
		}
	}
	return 0
}

// cmTileFor is flash_cm's tile for p: a tuned one when valid, else
// chooseCMTile's.
func (b *Backend) cmTileFor(ctx context.Context, l *CMLayout, p *spec.Problem, dt spec.DType) (CMTile, string, error) {
	if c, ok := b.tuned(ctx, shaders.KernelFlashCM, p, dt); ok {
		if t, ok := c.(CMTile); ok {
			return t, SourceTuned, nil
		}
	}
	c, err := chooseCMTile(l, p.D, p.Dv, p.Nq, p.Mask, p.Ext, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
	if err != nil {
		return CMTile{}, "", fmt.Errorf("%w: flash_cm D=%d Dv=%d on %s: %w", ErrUnsupported, p.D, p.Dv, b.info.Name, err)
	}
	return c, SourceDefault, nil
}

func planBwdCM(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) (*Plan, error) {
	l, err := b.cmLayout(ctx, dt)
	if err != nil {
		return nil, err
	}
	pre, err := b.bwdPreLaunch(ctx, p, dt)
	if err != nil {
		return nil, err
	}
	vec := cmVec(p, params(p))
	pl := &Plan{Launches: []Launch{pre}, Scratch: map[Operand]int64{OpD: BackwardScratchBytes(p)}}
	for _, k := range []struct {
		kernel string
		dkdv   bool
		binds  []Operand
	}{
		{shaders.KernelBwdCMDKDV, true, []Operand{OpQ, OpK, OpV, OpDO, OpLSE, OpD, OpDK, OpDV}},
		{shaders.KernelBwdCMDQ, false, []Operand{OpQ, OpK, OpV, OpDO, OpLSE, OpD, OpDQ}},
	} {
		lns, err := b.bwdCMLaunches(ctx, l, k.kernel, k.dkdv, p, dt, vec, k.binds)
		if err != nil {
			return nil, err
		}
		pl.Launches = append(pl.Launches, lns...)
	}
	pl.Launches[1].Barrier = true // after bwd_pre; the two coopmat kernels are independent
	return pl, nil
}

// bwdCMLaunches are the launches of one coopmat backward kernel: a tuned
// tile (which wins even where no default fits) or chooseBwdCMTile's; one
// launch, or for a split dK/dV tile two (PART 1: dV, PART 2: dK) or with
// Halves three (PART 1: dV, PART 3 and 4: dK's two halves of columns);
// they write different operands or disjoint columns of one, and may
// overlap.
func (b *Backend) bwdCMLaunches(ctx context.Context, l *CMLayout, kernel string, dkdv bool, p *spec.Problem, dt spec.DType, vec bool, binds []Operand) ([]Launch, error) {
	var c bwdCMTile
	src := SourceDefault
	if t, ok := b.tuned(ctx, kernel, p, dt); ok {
		c, src = t.(bwdCMTile), SourceTuned
	} else {
		var err error
		if c, err = chooseBwdCMTile(l, dkdv, p.D, p.Dv, p.Mask, p.Ext, b.lim.SharedBytes, b.lim.MaxWorkgroupSize); err != nil {
			return nil, fmt.Errorf("%w: %s %v D=%d Dv=%d on %s: %w", ErrUnsupported, kernel, dt, p.D, p.Dv, b.info.Name, err)
		}
	}
	x := ExtrasOf(l, p.Ext)
	pls, err := c.launches(l, dkdv, p.D, p.Dv, x, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %v tile %s D=%d Dv=%d on %s: %w", ErrUnsupported, kernel, dt, c, p.D, p.Dv, b.info.Name, err)
	}
	cm := b.cm[dt]
	m := int(l.M)
	var lns []Launch
	for _, pl := range pls {
		t := pl.tile
		config := fmt.Sprintf("%s vec%d", t, b2u(vec))
		if pl.part != 0 {
			config += fmt.Sprintf(" part%d", pl.part)
		}
		ln, err := b.newLaunch(kernel, dt, p, config, bwdCMSpec(l, dkdv, t, pl.part, p.D, p.Dv, vec), cm.reqSG, cm.full, binds...)
		if err != nil {
			return nil, err
		}
		br, bc := t.brbc(dkdv, m)
		ln.Tunable, ln.Config, ln.Source = kernel, c.String(), src
		ln.Workgroup, ln.BR, ln.BC = t.NSG*l.SG, br, bc
		ln.SharedBytes = shaders.BwdCMSharedBytes(t.shape(l, dkdv, pl.part, p.D, p.Dv))
		if dkdv {
			ln.Grid = shaders.BwdDKDVGrid(p.B, p.Hkv, p.Nk, bc)
			ln.HeadGroup = headGroup(p, p.Hkv, bc)
		} else {
			ln.Grid = shaders.BwdDQGrid(p.B, p.Hq, p.Nq, br)
			ln.HeadGroup = headGroup(p, p.Hq, br)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// coopmatTunable builds the tune hooks of a coopmat stage from its tile
// rules, each given the storage type's layout (probed on first use) and
// the device's limits: def the default tile, cands the candidates (legal
// or not: check filters them), dist their distance from the default (the
// search tries the nearest first), check the validity test.
func coopmatTunable[T interface {
	Candidate
	comparable
}](name string, dir Dir, parse func(string) (T, error),
	def func(l *CMLayout, p *spec.Problem, lim shaders.Limits) (T, error),
	cands func(l *CMLayout) []T,
	dist func(c, def T) float64,
	check func(l *CMLayout, c T, p *spec.Problem, lim shaders.Limits) error) *Tunable {
	return &Tunable{
		Name: name, Dir: dir,
		Default: func(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) (Candidate, error) {
			l, err := b.cmLayout(ctx, dt)
			if err != nil {
				return nil, err
			}
			return def(l, p, b.lim)
		},
		Candidates: func(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) ([]Candidate, error) {
			l, err := b.cmLayout(ctx, dt)
			if err != nil {
				return nil, err
			}
			var out []T
			for _, c := range cands(l) {
				if check(l, c, p, b.lim) == nil {
					out = append(out, c)
				}
			}
			if d, err := def(l, p, b.lim); err == nil {
				slices.SortStableFunc(out, func(x, y T) int { return cmp.Compare(dist(x, d), dist(y, d)) })
			}
			cs := make([]Candidate, len(out))
			for i, c := range out {
				cs[i] = c
			}
			return cs, nil
		},
		Parse: func(s string) (Candidate, error) { return parse(s) },
		Check: func(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType, c Candidate) error {
			t, ok := c.(T)
			if !ok {
				return fmt.Errorf("%w: %T is not a %s tile", ErrInvalid, c, name)
			}
			l, err := b.cmLayout(ctx, dt)
			if err != nil {
				return err
			}
			return check(l, t, p, b.lim)
		},
	}
}

// bothWalks is the tuner's candidates ts, each also with a staggered
// walk (stagger sets it).
func bothWalks[T any](ts []T, stagger func(*T)) []T {
	out := slices.Clone(ts)
	for _, c := range ts {
		stagger(&c)
		out = append(out, c)
	}
	return out
}

// log2Dist is the distance of two tile vectors in log2 space.
func log2Dist(a, b []int) float64 {
	d := 0.0
	for i := range a {
		d += math.Abs(math.Log2(float64(max(a[i], 1))) - math.Log2(float64(max(b[i], 1))))
	}
	return d
}

// flashCMTunable is flash_cm's tile as a tune stage. A tile tuned without
// options applies to plain problems only: the extended variant needs more
// registers and has its own default rule (cmTiles), which a tile timed on
// the plain variant must not replace (the large tile is slower there for
// most options); one tuned with options applies to problems with the same
// options (TuneKey.Options).
var flashCMTunable = plainOnly(coopmatTunable(shaders.KernelFlashCM, Fwd, parseCMTile,
	func(l *CMLayout, p *spec.Problem, lim shaders.Limits) (CMTile, error) {
		return chooseCMTile(l, p.D, p.Dv, p.Nq, p.Mask, p.Ext, lim.SharedBytes, lim.MaxWorkgroupSize)
	},
	func(l *CMLayout) []CMTile {
		var out []CMTile
		bcs := []int{32, 64, 128}
		if l.planes() > 1 { // f32: three planes of K/V, smaller tiles
			bcs = []int{16, 32, 64}
		}
		for _, nsg := range []int{2, 4, 8} {
			for _, bc := range bcs {
				for _, mode := range []int{0, 1} {
					for _, pf := range []bool{true, false} {
						out = append(out, CMTile{NSG: nsg, BC: bc, Mode: mode, Prefetch: pf})
						if mode == 1 && l.planes() == 1 {
							out = append(out, CMTile{NSG: nsg, BC: bc, Mode: mode, Prefetch: pf, Pairs: true},
								CMTile{NSG: nsg, BC: bc, Mode: mode, Prefetch: pf, RowBlocks: 2})
						}
					}
				}
			}
		}
		return bothWalks(out, func(c *CMTile) { c.Stagger = true })
	},
	func(c, def CMTile) float64 {
		vec := func(t CMTile) []int {
			return []int{t.NSG, t.BC, 1 << t.Mode, 1 + int(b2u(t.Prefetch)), 1 + int(b2u(t.Pairs)), t.rowBlocks(), 1 + int(b2u(t.Stagger))}
		}
		return log2Dist(vec(c), vec(def))
	},
	func(l *CMLayout, c CMTile, p *spec.Problem, lim shaders.Limits) error {
		return CheckCMTile(l, c, p.D, p.Dv, ExtrasOf(l, p.Ext), lim.SharedBytes, lim.MaxWorkgroupSize)
	}))

// plainOnly marks t's choices tuned without options as applying to plain
// problems only (Tunable.PlainOnly).
func plainOnly(t *Tunable) *Tunable {
	t.PlainOnly = true
	return t
}

// bwdCMTunable is the tile of one coopmat backward kernel as a tune stage.
// A tile tuned without options that a call with options takes (the dQ
// kernel's, not PlainOnly) walks in order with a bias (which does not
// take the staggered walk) and runs one row block per subgroup where the
// rule gives the call none (dqRowBlocks).
func bwdCMTunable(kernel string, dkdv bool) *Tunable {
	t := coopmatTunable(kernel, Bwd, parseBwdCMTile,
		func(l *CMLayout, p *spec.Problem, lim shaders.Limits) (bwdCMTile, error) {
			return chooseBwdCMTile(l, dkdv, p.D, p.Dv, p.Mask, p.Ext, lim.SharedBytes, lim.MaxWorkgroupSize)
		},
		func(l *CMLayout) []bwdCMTile {
			var out []bwdCMTile
			if l.planes() > 1 { // f32: MODE 1, one launch, pairs over the features
				for _, nsg := range []int{1, 2, 4, 8} {
					for _, step := range []int{16, 32, 64} {
						for _, pf := range []bool{false, true} {
							out = append(out, bwdCMTile{NSG: nsg, Step: step, Mode: 1, Prefetch: pf})
							if nsg > 1 {
								out = append(out, bwdCMTile{NSG: nsg, Step: step, Mode: 1, Prefetch: pf, FHalves: true})
							}
						}
					}
				}
				return bothWalks(out, func(c *bwdCMTile) { c.Stagger = true })
			}
			for _, nsg := range []int{1, 2, 4, 8} {
				for _, step := range []int{16, 32, 64, 128} {
					for _, mode := range []int{0, 1} {
						if !dkdv {
							for _, pf := range []bool{false, true} {
								out = append(out, bwdCMTile{NSG: nsg, Step: step, Mode: mode, Prefetch: pf})
								if mode == 1 && nsg > 1 {
									out = append(out, bwdCMTile{NSG: nsg, Step: step, Mode: mode, Prefetch: pf, Pairs: true})
								}
								if mode == 1 {
									out = append(out, bwdCMTile{NSG: nsg, Step: step, Mode: mode, Prefetch: pf, RowBlocks: 2})
								}
							}
							continue
						}
						for _, kv := range []bool{false, true} {
							for _, pf := range []bool{false, true} {
								out = append(out, bwdCMTile{NSG: nsg, Step: step, Mode: mode, KVReg: kv, Prefetch: pf})
								if kv && mode == 1 && nsg > 1 {
									out = append(out, bwdCMTile{NSG: nsg, Step: step, Mode: mode, KVReg: kv, Prefetch: pf, FHalves: true})
								}
								for _, halves := range []bool{false, true} {
									out = append(out, bwdCMTile{NSG: nsg, Step: step, Mode: mode, KVReg: kv, Prefetch: pf, Split: true, Halves: halves})
								}
							}
						}
					}
				}
			}
			return bothWalks(out, func(c *bwdCMTile) { c.Stagger = true })
		},
		func(c, def bwdCMTile) float64 {
			d := log2Dist([]int{c.NSG, c.Step, c.rowBlocks()}, []int{def.NSG, def.Step, def.rowBlocks()}) + 2*math.Abs(float64(c.Mode-def.Mode))
			return d + float64(b2u(c.KVReg != def.KVReg)+b2u(c.Prefetch != def.Prefetch)+b2u(c.Split != def.Split)+b2u(c.Halves != def.Halves)+b2u(c.Pairs != def.Pairs)+b2u(c.FHalves != def.FHalves)+b2u(c.Stagger != def.Stagger))
		},
		func(l *CMLayout, c bwdCMTile, p *spec.Problem, lim shaders.Limits) error {
			return bwdCMCheckTile(l, dkdv, c, p.D, p.Dv, ExtrasOf(l, p.Ext), lim.SharedBytes, lim.MaxWorkgroupSize)
		})
	t.FromPlain = func(c Candidate, p *spec.Problem) Candidate {
		bc, ok := c.(bwdCMTile)
		if !ok || p.Ext == nil {
			return c
		}
		if p.Ext.Bias != nil {
			bc.Stagger = false
		}
		if !dqRowBlocks(p.Ext) {
			bc.RowBlocks = 0
		}
		return bc
	}
	return t
}

// CMTile is one flash_cm configuration (exported for the bench harness,
// with CheckCMTile and CMSpec).
type CMTile struct {
	NSG, BC  int // subgroups per workgroup (BR = NSG·CM_M·RowBlocks, NSG·CM_M/2 with Pairs), keys per tile
	Mode     int // 0 shared-memory softmax, 1 register softmax
	Prefetch bool
	// Pairs (MODE 1, 16-bit storage): two subgroups share CM_M query rows,
	// each computing S for half of the key tile and P·V for half of O's
	// columns (the pair's S exchanged through shared memory); half the
	// MMAs and O registers per subgroup, the softmax's elementwise work
	// done by both.
	Pairs bool
	// RowBlocks (MODE 1, 16-bit storage, no pairs, no bias; 0 counts as
	// 1): each subgroup owns RowBlocks blocks of CM_M query rows and feeds
	// every K and V fragment it loads to one MMA per block — fewer
	// fragment loads, barriers and K/V staging per MMA, for the registers
	// of the extra blocks' Q, S and O.
	RowBlocks int
	// Stagger (not with a bias): each workgroup walks its key tiles from
	// a place of its own (STAGGER, cm_common.glsl).
	Stagger bool
}

// rowBlocks is c's row blocks per subgroup (at least 1).
func (c CMTile) rowBlocks() int { return max(c.RowBlocks, 1) }

func (c CMTile) String() string {
	pf := 0
	if c.Prefetch {
		pf = 1
	}
	s := fmt.Sprintf("nsg%d-bc%d-mode%d-pf%d", c.NSG, c.BC, c.Mode, pf)
	if c.Pairs {
		s += "-p2"
	}
	if c.RowBlocks > 1 {
		s += fmt.Sprintf("-rb%d", c.RowBlocks)
	}
	if c.Stagger {
		s += "-sw1"
	}
	return s
}

// Rows is the tile's query rows (BR) with layout l.
func (c CMTile) Rows(l *CMLayout) int {
	if c.Pairs {
		return c.NSG / 2 * int(l.M)
	}
	return c.NSG * int(l.M) * c.rowBlocks()
}

// cmMaxRowBlocks is the most row blocks a flash_cm or bwd_cm_dq subgroup
// takes (each block adds its Q fragments and its accumulators to the
// registers).
const cmMaxRowBlocks = 2

// checkRowBlocks says why tile c with row blocks cannot run with layout l
// and options x (nil with one block): checkRowBlockRules.
func (c CMTile) checkRowBlocks(l *CMLayout, x TileExtras) error {
	return checkRowBlockRules(c, c.RowBlocks, c.Mode, c.Pairs, l, x)
}

// checkRowBlockRules says why tile (its name) with rb row blocks per
// subgroup cannot run in MODE mode with layout l and options x (nil with
// one block, rb 0 or 1): the blocks run in MODE 1 on the 16-bit builds,
// without subgroup pairs (pairs) or a bias.
func checkRowBlockRules(tile fmt.Stringer, rb, mode int, pairs bool, l *CMLayout, x TileExtras) error {
	switch {
	case rb < 0:
		return fmt.Errorf("tile %s: %d row blocks per subgroup (0 or 1 … %d)", tile, rb, cmMaxRowBlocks)
	case rb <= 1:
		return nil
	case rb > cmMaxRowBlocks:
		return fmt.Errorf("tile %s: %d row blocks per subgroup (1 … %d)", tile, rb, cmMaxRowBlocks)
	case mode != 1:
		return fmt.Errorf("tile %s: row blocks run MODE 1 only", tile)
	case l.planes() > 1:
		return fmt.Errorf("tile %s: row blocks run 16-bit storage only", tile)
	case pairs:
		return fmt.Errorf("tile %s: row blocks and subgroup pairs do not combine", tile)
	case x.BiasElem != 0:
		return fmt.Errorf("tile %s: row blocks take no bias", tile)
	}
	return nil
}

// checkPairs says why tile c with Pairs cannot run at V's head dim dv
// with layout l and options x (nil without Pairs): the pair splits the
// subgroups, the key tile's S accumulators, O's column blocks and the rows'
// keep-bit draws in two; its S goes through shared memory in fp32.
func (c CMTile) checkPairs(l *CMLayout, dv int, x TileExtras) error {
	if !c.Pairs {
		return nil
	}
	M, N := int(l.M), int(l.N)
	switch {
	case c.Mode != 1:
		return fmt.Errorf("tile %s: subgroup pairs run MODE 1 only", c)
	case l.planes() > 1:
		return fmt.Errorf("tile %s: subgroup pairs run 16-bit storage only (the float32 build has none)", c)
	case c.NSG%2 != 0:
		return fmt.Errorf("tile %s: subgroup pairs need an even subgroup count", c)
	case M%2 != 0:
		return fmt.Errorf("tile %s: subgroup pairs need an even M (%d)", c, M)
	case c.BC%(2*N) != 0:
		return fmt.Errorf("tile %s: subgroup pairs need a tile of an even number of %d-key blocks", c, N)
	case (dv+N-1)/N%2 != 0:
		return fmt.Errorf("tile %s: Dv=%d is an odd number of %d-column blocks: O has no halves for the pairs", c, dv, N)
	case x.BiasElem != 0:
		return fmt.Errorf("tile %s: subgroup pairs take no bias", c)
	}
	return nil
}

// cmLargeNq is the query length from which d ≤ 64's second plain tile
// (nsg8-bc128) and the extended variant's large tiles are chosen (but at
// 64 < d ≤ 96 a softcap's, ALiBi's and dropout's at every length:
// extLargeTileAt, extDropTile): with
// steady timings the tuner (bench/results/h200-2026-11-22-tuned) found
// MODE 1 1.25–1.51× faster than MODE 0 at N = 1024 on an NVIDIA H200 with
// smaller tiles (more workgroups for the short sequences). Plain calls at
// 64 < d ≤ 80 go from four subgroups in two row blocks to eight at it;
// at 80 < d ≤ 128 they take their large tile at every length (cmTiles).
const cmLargeNq = 2048

// cmTiles lists the configurations to try for a problem, best first, when
// the probe allows register softmax (MODE 1): the H200 tuner's choices —
// plain calls at d ≤ 64 and every length take nsg4-bc32 in two row blocks
// per subgroup (nsg4-bc32-pf1-rb2: 2026-11-30 on an NVIDIA H200, against
// the tile that follows it in the list: from Nq = cmLargeNq on nsg8-bc128,
// fp16 +5–9%, bf16 +4–6%; below nsg4-bc32, fp16 +5–10% at N 512 and 1024,
// causal −3…+4%); at 64 < d ≤ 80 two row blocks of 64-key tiles, from
// Nq = cmLargeNq on eight subgroups (nsg8-bc64-pf1-rb2, 256 query rows),
// below on four (nsg4-bc64-pf1-rb2, where eight left short causal rows too
// much masked work) — 2026-12-01 on an NVIDIA H200 against nsg8-bc64, d 72
// and 80: bf16 +7–16% from N 4096, +10–18% at N 512 and 1024, fp16
// +5–13% — then four subgroups in two blocks where eight do not fit
// (nsg4-bc64-pf1-rb2: half their shared memory, and as much as the
// nsg8-bc64 these dims took before, so that tile is not listed); at
// 80 < d ≤ 128 nsg8-bc64 at every length (two row blocks ran it 25–45%
// slower at d 128, and d 96 1–7%; below cmLargeNq, against the nsg8-bc32
// it had there, 2026-11-30 at N 512 and 1024: d 128 fp16 and bf16 +3–6%,
// d 96 and d 80 (before its row blocks) +18–31%; all with prefetch); then
// MODE 0 nsg4-bc32-pf1 (any layout, the fallback). Above d 128
// (2026-11-30 on an NVIDIA H200, the tuner's picks): up to cmPrefetchMaxD nsg4-bc32 with
// prefetch (d 192, N 4096: plain 7.5 → 3.0 ms, dropout 7.5 → 3.5, a window
// with a softcap 4.9 → 2.5);
// above it fp16's plain variant runs in subgroup pairs, nsg8-bc32-pf1-p2
// (d 256: 1.00–1.24× the tile without pairs; bf16 mixed there, 0.90–1.08×,
// and the softcap's and dropout's extended variants ran 16% and 4% slower
// in pairs); the rest MODE 1 nsg4-bc32 without prefetch (157 TFLOP/s at d
// 256, N 4096, against MODE 0's 55; the prefetch registers spill there). The
// extended variant (ext non-nil: a window, softcap, ALiBi, key counts,
// packed sequences, dropout or a bias) takes the smaller tiles at every
// length, with four exceptions (extLargeTileAt, extLargeTile64,
// extRowBlocks, extDropTile): on
// 2026-11-25 its extra per-row state pushed the large tile past the 255
// registers an NVIDIA H200 invocation has (spilled to local memory, 96
// bytes; 144 with dropout), and the small tile ran it 1.3× faster there
// (window 152 → 200 TFLOP/s, ALiBi 147 → 195, dropout 102 → 128 at d 128,
// N 16384; bench/NOTES.md). Since the score loop lost its mask on the
// tiles that need none (2026-11-28), ALiBi's and a bias's score terms run
// faster on plain's d 128 tile, and so does the softcap's since its tanh
// lost its selects, and a long window's (extWindowTile); dropout and
// packed sequences alone still run slower there. At d ≤ 64 a softcap taken in fp16 (bf16 storage) gains
// from plain's former tile, nsg8-bc128, and fp16's window, softcap, ALiBi
// or dropout and bf16's dropout from plain's row blocks; at 64 < d ≤ 96
// dropout gains from longer key tiles than the smaller ones
// (extDropTile). The tune cache overrides these per device.
func cmTiles(l *CMLayout, d, dv, nq int, mask spec.Mask, ext *spec.Ext) []CMTile {
	return staggerWhereItGains(cmTileRule(l, d, dv, nq, ext), mask, ext, func(c *CMTile) (bool, *bool) { return c.Prefetch, &c.Stagger })
}

// cmTileRule is cmTiles before the staggered walk.
func cmTileRule(l *CMLayout, d, dv, nq int, ext *spec.Ext) []CMTile {
	if l.planes() > 1 {
		return cmSplitTiles(l, d, dv)
	}
	var ts []CMTile
	if l.Mode1 {
		long := nq >= cmLargeNq
		large := long && ext == nil
		switch dm := max(d, dv); {
		case dm <= 64 && long && extLargeTile64(l, ext):
			ts = append(ts, CMTile{NSG: 8, BC: 128, Mode: 1, Prefetch: true})
		case dm <= 64 && (ext == nil || long && extRowBlocks(l, ext)):
			ts = append(ts, CMTile{NSG: 4, BC: 32, Mode: 1, Prefetch: true, RowBlocks: 2})
			if large {
				ts = append(ts, CMTile{NSG: 8, BC: 128, Mode: 1, Prefetch: true})
			}
			ts = append(ts, CMTile{NSG: 4, BC: 32, Mode: 1, Prefetch: true})
		case dm <= 64:
			ts = append(ts, CMTile{NSG: 4, BC: 32, Mode: 1, Prefetch: true})
		case dm <= 96 && extDropTile(ext):
			if dm <= 80 {
				ts = append(ts, CMTile{NSG: 8, BC: 128, Mode: 1, Prefetch: true})
			}
			ts = append(ts, CMTile{NSG: 8, BC: 64, Mode: 1, Prefetch: true}, CMTile{NSG: 8, BC: 32, Mode: 1, Prefetch: true})
		case dm <= 80 && ext == nil:
			if long {
				ts = append(ts, CMTile{NSG: 8, BC: 64, Mode: 1, Prefetch: true, RowBlocks: 2})
			}
			ts = append(ts, CMTile{NSG: 4, BC: 64, Mode: 1, Prefetch: true, RowBlocks: 2})
		case dm <= 128 && (ext == nil || extLargeTileAt(ext, dm, long)):
			ts = append(ts, CMTile{NSG: 8, BC: 64, Mode: 1, Prefetch: true})
		case dm <= 128:
			ts = append(ts, CMTile{NSG: 8, BC: 32, Mode: 1, Prefetch: true})
		case dm <= cmPrefetchMaxD:
			ts = append(ts, CMTile{NSG: 4, BC: 32, Mode: 1, Prefetch: true})
		default:
			if l.Storage != spec.BFloat16 && ext == nil {
				ts = append(ts, CMTile{NSG: 8, BC: 32, Mode: 1, Prefetch: true, Pairs: true})
			}
			ts = append(ts, CMTile{NSG: 4, BC: 32, Mode: 1})
		}
	}
	return append(ts, CMTile{NSG: 4, BC: 32, Mode: 0, Prefetch: true})
}

// cmPrefetchMaxD is the largest head dim at which flash_cm's plain MODE 1
// tile takes the prefetch without pairs (timed at d 192 on an NVIDIA
// H200; at d 256 its registers spill).
const cmPrefetchMaxD = 192

// cmSplitMaxD is the largest head dim flash_cm's f32 build runs: at d 128
// it already holds 255 registers on an NVIDIA H200, at d 256 the K/V
// planes of 16 keys take 50 KB, and the dims between were never run.
const cmSplitMaxD = 128

// cmSplitTiles are cmTiles for f32 storage (each operand in three bf16
// planes: three times the Q fragments and the K/V tile): MODE 1 at d ≤ 64
// nsg8-bc32, then nsg4-bc32, and nsg8-bc16 and nsg4-bc16 at every d
// (eight subgroups split each K/V tile for twice the rows of four), then
// MODE 0 nsg4-bc16; none prefetches. CheckCMTile refuses every tile above
// cmSplitMaxD, where the scalar kernel runs.
func cmSplitTiles(l *CMLayout, d, dv int) []CMTile {
	var ts []CMTile
	if l.Mode1 {
		if max(d, dv) <= 64 {
			ts = append(ts, CMTile{NSG: 8, BC: 32, Mode: 1}, CMTile{NSG: 4, BC: 32, Mode: 1})
		}
		ts = append(ts, CMTile{NSG: 8, BC: 16, Mode: 1}, CMTile{NSG: 4, BC: 16, Mode: 1})
	}
	return append(ts, CMTile{NSG: 4, BC: 16, Mode: 0})
}

// CheckCMTile reports why tile c cannot run on a device with sharedMax
// bytes of shared memory and workgroups of at most maxWG invocations, for
// a call whose options add x (dropout's keep bits, a bias's stage).
func CheckCMTile(l *CMLayout, c CMTile, d, dv int, x TileExtras, sharedMax, maxWG int) error {
	M, N, K := int(l.M), int(l.N), int(l.K)
	if d < 1 || dv < 1 || d > shaders.MaxHeadDim || dv > shaders.MaxHeadDim {
		return fmt.Errorf("head dims D=%d Dv=%d (flash_cm takes 1 … %d)", d, dv, shaders.MaxHeadDim)
	}
	if l.planes() > 1 && max(d, dv) > cmSplitMaxD {
		return fmt.Errorf("head dims D=%d Dv=%d (flash_cm's float32 build takes 1 … %d)", d, dv, cmSplitMaxD)
	}
	if c.BC < 1 {
		return fmt.Errorf("key tile of %d keys (want at least 1)", c.BC)
	}
	if c.BC%N != 0 || c.BC%K != 0 {
		return fmt.Errorf("BC %d not a multiple of N %d and K %d", c.BC, N, K)
	}
	if c.Mode == 0 {
		lpr := 1
		if l.SG >= M {
			lpr = l.SG / M
		}
		if c.BC%lpr != 0 {
			return fmt.Errorf("BC %d not a multiple of %d lanes per row", c.BC, lpr)
		}
	}
	if err := checkDropKeys(x.Dropout, c.BC); err != nil {
		return err
	}
	if err := c.checkPairs(l, dv, x); err != nil {
		return err
	}
	if err := c.checkRowBlocks(l, x); err != nil {
		return err
	}
	if err := checkStagger(c.Stagger, c, x); err != nil {
		return err
	}
	shared := cmShared(l, c, d, dv, x) + dropExtra(x.Dropout, c.Rows(l), c.BC)
	return checkCMResources(l, c.Mode, c.NSG, shared, sharedMax, maxWG)
}

// checkStagger says why tile c cannot take a staggered walk (stagger) for
// a call whose options add x: a bias's walk skips the tiles it hides, in
// order.
func checkStagger(stagger bool, c fmt.Stringer, x TileExtras) error {
	if stagger && x.BiasElem > 0 {
		return fmt.Errorf("tile %s: a staggered walk (sw1) does not take a bias", c)
	}
	return nil
}

// staggerWhereItGains gives every tile of ts that does not prefetch a
// staggered walk where every workgroup of a head walks the same tiles (no
// mask, no window) and no bias hides some. On an NVIDIA H200
// (bench/NOTES.md, 2026-11-30), without a mask, the kernels whose loads
// wait between their barriers ran up to 16% faster with it at N 16384 —
// bwd_cm_dkdv's d 128 tile (its time 23.5 → 19.8 ms, the backward
// 1.10×), the float32 builds' (the backward and forward 1.14–1.16×) — and
// most of those that prefetch 3–10% slower (the 16-bit forward, d 64's
// backward, bf16's dQ at d 128); under a causal mask, whose workgroups
// walk different spans anyway, it was mixed (0.975–1.022×).
func staggerWhereItGains[T any](ts []T, mask spec.Mask, ext *spec.Ext, pf func(*T) (prefetch bool, stagger *bool)) []T {
	if mask != spec.MaskNone || ext != nil && (ext.Bias != nil || ext.Left >= 0 || ext.Right >= 0) {
		return ts
	}
	for i := range ts {
		prefetch, st := pf(&ts[i])
		*st = !prefetch
	}
	return ts
}

// TileExtras is what a call's options add to a coopmat tile's shared
// memory beyond its kernel's plain arrays: dropout's keep bits, and the
// area through which flash_cm's register (MODE 1) loop stages a bias
// (bias_stage.glsl), of BiasElem bytes per bias element (0: no bias).
type TileExtras struct {
	Dropout  bool
	BiasElem int
}

// ExtrasOf is TileExtras of a call with options ext (nil: plain) on
// layout l, whose float32 build stages a bias as float32.
func ExtrasOf(l *CMLayout, ext *spec.Ext) TileExtras {
	x := TileExtras{Dropout: extDrops(ext)}
	if ext != nil && ext.Bias != nil {
		x.BiasElem = 2
		if l.planes() > 1 || ext.Bias.DType == spec.Float32 {
			x.BiasElem = 4
		}
	}
	return x
}

// cmShared is flash_cm's shared memory (bytes) for tile c with layout l
// and head dims d, dv, its bias stage included where x has a bias (not
// dropout's keep bits: dropExtra).
func cmShared(l *CMLayout, c CMTile, d, dv int, x TileExtras) int {
	return shaders.FlashCMSharedBytes(shaders.FlashCMShape{M: int(l.M), N: int(l.N), K: int(l.K), NSG: c.NSG, BC: c.BC, Mode: c.Mode, D: d, DV: dv, Planes: l.planes(), Pairs: c.Pairs, RowBlocks: c.RowBlocks}) +
		x.biasExtra(c.Mode == 1, c.NSG, l, c.BC/int(l.N))
}

// biasExtra is the shared memory x's bias stage adds to a flash_cm tile
// of nsg subgroups with nt accumulators each per tile whose element loop
// runs in registers (regs); 0 otherwise.
func (x TileExtras) biasExtra(regs bool, nsg int, l *CMLayout, nt int) int {
	if x.BiasElem == 0 || !regs {
		return 0
	}
	return shaders.BiasStageBytes(x.BiasElem, nsg, int(l.M), int(l.N), nt) - shaders.BiasStagePlaceholder
}

// checkDropKeys refuses, for a dropout call (drop), a key tile of bc keys
// that the kernels' keep-bit fill does not take (shaders.CheckDropKeys).
func checkDropKeys(drop bool, bc int) error {
	if !drop {
		return nil
	}
	return shaders.CheckDropKeys(bc)
}

// checkCMResources is the part of a coopmat tile's check that every
// coopmat kernel shares: the accumulator MODE exists on the device (MODE 1
// needs the probed layout), and the workgroup of nsg subgroups and the
// shared memory it needs fit the device's limits.
func checkCMResources(l *CMLayout, mode, nsg, shared, sharedMax, maxWG int) error {
	if nsg < 1 {
		return fmt.Errorf("%d subgroups (want at least 1)", nsg)
	}
	switch mode {
	case 0:
	case 1:
		if !l.Mode1 {
			return fmt.Errorf("MODE 1 impossible: %s", l.Why)
		}
	default:
		return fmt.Errorf("unknown MODE %d (0 or 1)", mode)
	}
	if wg := nsg * l.SG; wg > maxWG {
		return fmt.Errorf("workgroup %d > %d", wg, maxWG)
	}
	if shared > sharedMax {
		return fmt.Errorf("needs %d bytes of shared memory, device has %d", shared, sharedMax)
	}
	return nil
}

// extDropTile reports whether the extended variant takes longer key tiles
// for dropout at 64 < d ≤ 96, at every length: nsg8-bc128 up to d 80 and
// nsg8-bc64 above, where 128 keys do not fit 48 KiB of shared memory —
// with dropout, with or without a softcap or ALiBi, and no bias, window (a
// causal mask allowed), key counts or packed sequences (those untimed).
// Measured on an NVIDIA H200 (causal and not; bench/NOTES.md) against the
// nsg8-bc32 these calls took before, which follows them where they do not
// fit: dropout d 80 1.25–1.35× faster (fp16 at N 512–16384, bf16 at 4096
// and 16384), d 96 1.17–1.22×; with a softcap 1.20–1.25× and 1.12–1.16×,
// with ALiBi 1.23–1.30× and 1.21–1.23× (fp16, N 4096 and 16384; bf16
// untimed). At d 128 nsg8-bc64 ran dropout 14–16% slower than nsg8-bc32.
func extDropTile(ext *spec.Ext) bool {
	return ext != nil && ext.Dropout != nil && extTermsOnly(ext)
}

// extTermsOnly reports whether options ext (non-nil) leave each row's keys
// as the causal mask or none leaves them and add no bias: no window, key
// counts, packed sequences or bias: at most a softcap, ALiBi and dropout
// (the options the tile rules' measurements timed).
func extTermsOnly(ext *spec.Ext) bool {
	return extNoBiasKeysOrPacked(ext) && ext.Left < 0 && ext.Right <= 0
}

// extNoBiasKeysOrPacked reports whether options ext (non-nil) hold no
// bias, key counts or packed sequences, the options most of the tile
// rules' measurements leave out.
func extNoBiasKeysOrPacked(ext *spec.Ext) bool {
	return ext.Bias == nil && ext.SeqUsedK == nil && ext.CuQ == nil
}

// extLargeTile reports whether the extended variant takes plain's large
// tile at 64 < d ≤ 128: with ALiBi, a bias or a softcap, and no dropout.
// Measured on an NVIDIA H200 (fp16, d 128, N 16384, causal, forward;
// bench/NOTES.md), nsg8-bc64 against nsg8-bc32: a dense bias 12.45 →
// 11.28 ms, a document mask 3.45 → 3.23, ALiBi 5.11 → 5.01, softcap
// 5.80 → 5.49 (since its tanh takes the sign by a bit operation; with
// the selects before, 5.93 → 6.10); dropout 5.41 → 6.09, the window 2.02
// → 2.04 (faster there since: extWindowTile) and packed sequences 0.620
// → 0.633 went the other way.
// Combinations of these with a window, key counts or packed sequences
// take it too, untimed: the score terms' gains are the larger ones. At d
// 80 (fp16, N 4096, causal, a softcap) the tuner found none of 68 tiles
// more than 2.3% faster than nsg8-bc64.
func extLargeTile(ext *spec.Ext) bool {
	return ext != nil && (ext.Bias != nil || ext.Slopes != nil || ext.Softcap != 0) && ext.Dropout == nil
}

// extLargeTileAt reports whether a call with options ext at head dim dm
// (64 < dm ≤ 128) takes nsg8-bc64 (plain calls' tile at 80 < d ≤ 128),
// given whether its query rows reach cmLargeNq (long): extLargeTile's
// calls from cmLargeNq on, and below it up to d 96 those without a bias;
// and from cmLargeNq on above d 96 a window without dropout, a bias, key
// counts or packed sequences (extWindowTile).
// Measured on an NVIDIA H200 (fp16, a softcap or ALiBi alone, N 512 and
// 1024, causal and not; bench/NOTES.md) against the nsg8-bc32 they took
// there before: a softcap d 80 1.20–1.27× faster, d 96 1.18–1.22×, ALiBi
// 1.22–1.30× and 1.19–1.24×; at d 128 a softcap 1.005–1.035× and ALiBi
// 0.96–0.98×, so d 128 keeps nsg8-bc32 below cmLargeNq. A bias, bf16 and
// combinations with a window, key counts or packed sequences were not
// timed there.
func extLargeTileAt(ext *spec.Ext, dm int, long bool) bool {
	return extLargeTile(ext) && (long || dm <= 96 && ext.Bias == nil) || long && dm > 96 && extWindowTile(ext)
}

// extWindowTile reports whether options ext (non-nil) are a window —
// beside a softcap or ALiBi or alone — with no dropout, bias, key counts
// or packed sequences: from cmLargeNq on above d 96 they take nsg8-bc64
// (extLargeTileAt). Measured on an NVIDIA H200 (d 128, N 16384, causal,
// window 4095,0, forward; bench/NOTES.md, 2026-12-01) against
// nsg8-bc32-pf1: fp16 2.020–2.052 → 1.992–1.997 ms over three alternating
// rounds, 1.16–1.17× → 1.14× of its visible-pair share of the full
// forward (the tuner the night before: 2.020–2.031 → 1.994–2.011); the
// window with a softcap took nsg8-bc64 already (extLargeTile). On
// 2026-11-28, before the score loop's unmasked tiles and the large tile at
// every length, the window had run 2.02 → 2.04 ms there. Not timed: d 97–127,
// windows open on the right.
func extWindowTile(ext *spec.Ext) bool {
	return ext.Dropout == nil && extNoBiasKeysOrPacked(ext) && (ext.Left >= 0 || ext.Right >= 0)
}

// extRowBlocks reports whether the extended variant takes plain's row-block
// tile at d ≤ 64 (nsg4-bc32-pf1-rb2) with layout l: with fp16 storage for
// any options but a bias (which the row blocks do not take), key counts or
// packed sequences — a window, softcap, ALiBi or dropout, alone or
// together, or a window wide enough to reach every key; with bf16 for
// dropout without those or a window. Measured on an NVIDIA H200 (d 64, N
// 16384, causal, forward; bench/NOTES.md) against the extended variant's
// nsg4-bc32-pf1: fp16 softcap 170.8 → 177.0 TFLOP/s, ALiBi 200.1 → 212.7,
// dropout 161.6 → 172.8, window 4095,0 (2026-12-01, every tile verified
// and timed by the tuner) 2.213 → 1.977 ms and with a softcap 50 2.79 →
// 2.72–2.74; bf16 dropout 147.1 → 152.1, but ALiBi 180.3 → 173.3 (and its
// softcap, on nsg8-bc128 by extLargeTile64, 191.6 → 175.9). Not timed:
// windows open on the right (Right > 0), fp16's other combinations, and
// bf16's window, key counts and packed sequences.
func extRowBlocks(l *CMLayout, ext *spec.Ext) bool {
	if ext == nil || !extNoBiasKeysOrPacked(ext) {
		return false
	}
	if l.Storage == spec.BFloat16 {
		return ext.Dropout != nil && extTermsOnly(ext)
	}
	return true
}

// extLargeTile64 reports whether the extended variant takes plain's large
// tile at d ≤ 64 (nsg8-bc128): with a softcap taken in fp16
// (CMLayout.halfTanh) and no other score term, dropout, window (a causal
// mask allowed), key counts or packed sequences. Measured on an NVIDIA
// H200 (d 64, N 16384, causal, forward; bench/NOTES.md), nsg8-bc128
// against nsg4-bc32 in a build that took fp16 storage's tanh in fp16 (the
// code bf16 storage now runs): a softcap 5.75 → 5.12–5.20 ms, and with
// fp32's tanh 6.25 → 6.84; ALiBi 5.42–5.48 → 5.44–5.45 (no gain). bf16's
// softcap was timed on the large tile only (6.43 ms, 0.92× of plain's
// forward, against 7.48 on the small tile with fp32's tanh).
func extLargeTile64(l *CMLayout, ext *spec.Ext) bool {
	return ext != nil && l.halfTanh() && ext.Softcap != 0 && ext.Slopes == nil && ext.Dropout == nil && extTermsOnly(ext)
}

// chooseCMTile returns the first tile of cmTiles that fits (ext: the
// problem's options, nil for the plain variant; with dropout the tile
// also holds the keep bits, with a bias in MODE 1 its stage: ExtrasOf).
func chooseCMTile(l *CMLayout, d, dv, nq int, mask spec.Mask, ext *spec.Ext, sharedMax, maxWG int) (CMTile, error) {
	x := ExtrasOf(l, ext)
	c, err := firstFit(cmTiles(l, d, dv, nq, mask, ext), func(c CMTile) error { return CheckCMTile(l, c, d, dv, x, sharedMax, maxWG) })
	if err != nil {
		return CMTile{}, fmt.Errorf("no flash_cm tile fits: %w", err)
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

// CMSpec is flash_cm's specialization for layout l, tile c and head dims.
func CMSpec(l *CMLayout, c CMTile, d, dv int, vec bool) []device.Spec {
	b2u := func(b bool) uint32 {
		if b {
			return 1
		}
		return 0
	}
	var rl, sLo, sHi, xm, pLo, pHi, cLo, cHi uint32 = 1, 0, 0, 0, 0, 0, 0, 0
	cols := false
	if c.Mode == 1 {
		sLo, sHi, pLo, pHi = l.Packed()
		rl, xm = uint32(max(l.RL, 1)), l.XorMask
		cLo, cHi, cols = l.ColDeltas()
	}
	return []device.Spec{
		{ID: shaders.SpecWorkgroupSize, Value: uint32(c.NSG * l.SG)}, {ID: shaders.SpecD, Value: uint32(d)},
		{ID: shaders.SpecDV, Value: uint32(dv)}, {ID: shaders.SpecBR, Value: uint32(c.Rows(l))},
		{ID: shaders.SpecBC, Value: uint32(c.BC)}, {ID: shaders.SpecSubgroup, Value: uint32(l.SG)},
		{ID: shaders.SpecExt, Value: 0}, // (newLaunch sets the problem's)
		{ID: shaders.SpecCMM, Value: l.M}, {ID: shaders.SpecCMN, Value: l.N}, {ID: shaders.SpecCMK, Value: l.K},
		{ID: shaders.SpecCMMode, Value: uint32(c.Mode)}, {ID: shaders.SpecCMLen, Value: uint32(l.AccLen)},
		{ID: shaders.SpecCMRL, Value: rl}, {ID: shaders.SpecCMSlotLo, Value: sLo}, {ID: shaders.SpecCMSlotHi, Value: sHi},
		{ID: shaders.SpecCMXorMask, Value: xm}, {ID: shaders.SpecCMPermLo, Value: pLo}, {ID: shaders.SpecCMPermHi, Value: pHi},
		{ID: shaders.SpecCMVec, Value: b2u(vec)}, {ID: shaders.SpecCMPrefet, Value: b2u(vec && c.Prefetch)},
		{ID: shaders.SpecCMPairs, Value: b2u(c.Pairs)}, {ID: shaders.SpecCMRowBlk, Value: uint32(c.rowBlocks())},
		{ID: shaders.SpecCMStagger, Value: b2u(c.Stagger)},
		{ID: shaders.SpecCMCols, Value: b2u(cols)}, {ID: shaders.SpecCMColDLo, Value: cLo}, {ID: shaders.SpecCMColDHi, Value: cHi},
	}
}

// bwdCMTile is one configuration of one coopmat backward kernel.
//
//	bwd_cm_dkdv: NSG subgroups own NSG·M keys (NSG·M/2 with FHalves);
//	             Step query rows per step.
//	bwd_cm_dq:   NSG subgroups own NSG·M·RowBlocks query rows (NSG·M/2
//	             with Pairs or FHalves); Step keys per tile.
type bwdCMTile struct {
	NSG, Step int
	Mode      int  // 0 elementwise through shared memory, 1 in registers
	KVReg     bool // bwd_cm_dkdv only: K_j, V_j fragments held in registers
	Prefetch  bool // next step's Q, dO (bwd_cm_dkdv) or next tile's K, V (bwd_cm_dq) loaded into registers during the current one
	Split     bool // bwd_cm_dkdv only: two launches, dV (PART 1) then dK (PART 2), one accumulator each (launches)
	// Halves (with Split): dK in two launches of half its columns each
	// (PART 3 and 4), whose accumulators leave room for K_j and V_j in
	// registers (KVReg) beside them.
	Halves bool
	// Pairs (bwd_cm_dq, MODE 1, 16-bit storage): two subgroups share M
	// query rows, each computing S and dP for half of the key tile and
	// dQ for half of its columns, and exchange dS through shared memory:
	// Q_i, dO_i and half of dQ fit a subgroup's registers where the
	// whole dQ beside them does not (d 256).
	Pairs bool
	// FHalves (MODE 1, one launch; bwd_cm_dkdv, with KVReg in the 16-bit
	// builds, and the float32 build's bwd_cm_dq): two subgroups share M
	// rows (bwd_cm_dq) or M keys (bwd_cm_dkdv), each holding half of the
	// head dim's features of the operands it holds in registers (three
	// bf16 planes each at fp32: at d 128 the whole of both would fill the
	// register file; at 16 bits beside whole dK and dV above d 128) and
	// computing half of its gradient's columns; the pair adds its partial
	// S and dP (Sᵀ and dPᵀ) through shared memory.
	FHalves bool
	// Stagger (not with a bias): each workgroup walks its query steps
	// (bwd_cm_dkdv) or key tiles (bwd_cm_dq) from a place of its own
	// (STAGGER, cm_common.glsl).
	Stagger bool
	// RowBlocks (bwd_cm_dq, MODE 1, 16-bit storage, no pairs, no bias; 0
	// counts as 1): each subgroup owns RowBlocks blocks of M query rows
	// and feeds every K and V fragment it loads from shared memory to one
	// MMA per block (BR = NSG·M·RowBlocks), as flash_cm's row blocks.
	RowBlocks int
}

// rowBlocks is c's row blocks per subgroup (at least 1).
func (c bwdCMTile) rowBlocks() int { return max(c.RowBlocks, 1) }

func (c bwdCMTile) String() string {
	s := fmt.Sprintf("nsg%d-step%d-mode%d", c.NSG, c.Step, c.Mode)
	if c.KVReg {
		s += "-kv1"
	}
	if c.Prefetch {
		s += "-pf1"
	}
	if c.Split {
		s += "-sp1"
	}
	if c.Halves {
		s += "-dk2"
	}
	if c.Pairs {
		s += "-dq2"
	}
	if c.FHalves {
		s += "-fh2"
	}
	if c.RowBlocks > 1 {
		s += fmt.Sprintf("-rb%d", c.RowBlocks)
	}
	if c.Stagger {
		s += "-sw1"
	}
	return s
}

// partLaunch is one launch of a backward tile: its PART (bwd_cm_dkdv;
// 0 for one launch) and the tile it runs with.
type partLaunch struct {
	part int
	tile bwdCMTile
}

// launches are tile c's launches with layout l and head dims d, dv on a
// device with sharedMax bytes of shared memory and workgroups of at most
// maxWG invocations (x: what the call's options add): c itself, or for a
// split tile PART 1 with c and PART 2 — which also stages V — with c's
// subgroup count halved until its shared memory fits (with Halves PART 3
// and 4, dK's two halves of columns, each so). The error says why c cannot
// run.
func (c bwdCMTile) launches(l *CMLayout, dkdv bool, d, dv int, x TileExtras, sharedMax, maxWG int) ([]partLaunch, error) {
	check := func(t bwdCMTile, part int) error {
		br, bc := t.brbc(dkdv, int(l.M))
		if err := checkDropKeys(x.Dropout, bc); err != nil {
			return err
		}
		shared := shaders.BwdCMSharedBytes(t.shape(l, dkdv, part, d, dv)) + dropExtra(x.Dropout, br, bc)
		return checkCMResources(l, t.Mode, t.NSG, shared, sharedMax, maxWG)
	}
	if !c.Split {
		if err := check(c, 0); err != nil {
			return nil, err
		}
		return []partLaunch{{0, c}}, nil
	}
	if err := check(c, 1); err != nil {
		return nil, err
	}
	dk := []int{2}
	if c.Halves {
		dk = []int{3, 4}
	}
	t := c
	for {
		err := check(t, dk[0])
		if err == nil {
			pls := []partLaunch{{1, c}}
			for _, part := range dk {
				pls = append(pls, partLaunch{part, t})
			}
			return pls, nil
		}
		if t.NSG == 1 {
			return nil, fmt.Errorf("PART %d: %w", dk[0], err)
		}
		t.NSG /= 2
	}
}

// shape is what the shared memory of the tile's kernel (dkdv: bwd_cm_dkdv,
// PART part) depends on.
func (c bwdCMTile) shape(l *CMLayout, dkdv bool, part, d, dv int) shaders.BwdCMShape {
	br, bc := c.brbc(dkdv, int(l.M))
	return shaders.BwdCMShape{DKDV: dkdv, M: int(l.M), N: int(l.N), K: int(l.K), NSG: c.NSG, BR: br, BC: bc,
		Mode: c.Mode, D: d, DV: dv, Part: part, KVReg: dkdv && c.KVReg, Planes: l.planes(), FHalves: c.FHalves}
}

// brbc are the kernel's spec constants BR and BC for tile c.
func (c bwdCMTile) brbc(dkdv bool, m int) (br, bc int) {
	if dkdv && c.FHalves {
		return c.Step, c.NSG / 2 * m // (a pair owns M keys)
	}
	if dkdv {
		return c.Step, c.NSG * m
	}
	if c.Pairs || c.FHalves {
		return c.NSG / 2 * m, c.Step
	}
	return c.NSG * m * c.rowBlocks(), c.Step
}

// bwdCMSplitWholeMaxD is the largest head dim the backward's f32 build
// runs with whole operands per subgroup: both kernels hold three planes
// of two operands as A fragments (the dQ kernel Q_i's and dO_i's, the
// dK/dV kernel K_j's and V_j's: 96 registers at d 64, twice that at d
// 128, where they alone would fill the register file). Up to
// bwdCMSplitMaxD the subgroups pair over the features (FHalves), each
// holding half of them; above it the scalar kernels run the fp32
// backward.
const (
	bwdCMSplitWholeMaxD = 64
	bwdCMSplitMaxD      = 128
)

// checkBwdCMSplitDims refuses head dims the backward's f32 build does not
// run (nil for the 16-bit layouts).
func checkBwdCMSplitDims(l *CMLayout, d, dv int) error {
	if l.planes() > 1 && max(d, dv) > bwdCMSplitMaxD {
		return fmt.Errorf("head dims D=%d Dv=%d (the coopmat backward's float32 build takes 1 … %d)", d, dv, bwdCMSplitMaxD)
	}
	return nil
}

// bwdCMSplitTiles are bwdCMTiles for f32 storage (three bf16 planes per
// operand) at head dims d, dv: MODE 1 only (the elementwise step splits P
// and dS in registers), one launch. Up to d 64 first the H200 tuner's
// picks at d 64, N 4096 (bench/NOTES.md: the dK/dV kernel four subgroups
// on steps of 32 query rows, the whole backward 43.6 ms against 47.4 at
// steps of 16 with prefetch; the dQ kernel eight subgroups on tiles of
// 32 keys, 74.7 against 76.7 ms at four on 16), then smaller tiles;
// above, pairs over the features (FHalves) on steps (tiles) of 16, whose
// Q_i and dO_i (K_j and V_j) planes take 26 KB of shared memory at d 128:
// eight subgroups first (the H200 at d 128: the dK/dV kernel's 64 keys
// per workgroup 5–8% faster than four's 32; the tuner found the dQ
// kernel's defaults within 3% of its best).
func bwdCMSplitTiles(l *CMLayout, dkdv bool, d, dv int) []bwdCMTile {
	if !l.Mode1 {
		return nil
	}
	if max(d, dv) > bwdCMSplitWholeMaxD { // (both kernels)
		return []bwdCMTile{{NSG: 8, Step: 16, Mode: 1, FHalves: true}, {NSG: 4, Step: 16, Mode: 1, FHalves: true}, {NSG: 2, Step: 16, Mode: 1, FHalves: true}}
	}
	first := bwdCMTile{NSG: 8, Step: 32, Mode: 1}
	if dkdv {
		first = bwdCMTile{NSG: 4, Step: 32, Mode: 1}
	}
	return []bwdCMTile{first, {NSG: 4, Step: 16, Mode: 1, Prefetch: true}, {NSG: 2, Step: 16, Mode: 1}, {NSG: 1, Step: 16, Mode: 1}}
}

// bwdCMTiles lists the configurations to try for a problem with options
// ext (nil: plain), best first (the first that fits is used): MODE 1
// where the probe allows it, larger tiles for smaller head dims, then
// MODE 0 fallbacks that fit 32 KiB of shared memory (f32:
// bwdCMSplitTiles). Candidates, not measurements: see bench/NOTES.md for
// what the H200 gave.
func bwdCMTiles(l *CMLayout, dkdv bool, d, dv int, mask spec.Mask, ext *spec.Ext) []bwdCMTile {
	return staggerWhereItGains(bwdCMTileRule(l, dkdv, d, dv, ext), mask, ext, func(c *bwdCMTile) (bool, *bool) { return c.Prefetch, &c.Stagger })
}

// bwdCMTileRule is bwdCMTiles before the staggered walk.
func bwdCMTileRule(l *CMLayout, dkdv bool, d, dv int, ext *spec.Ext) []bwdCMTile {
	if l.planes() > 1 {
		return bwdCMSplitTiles(l, dkdv, d, dv)
	}
	dm := max(d, dv)
	var ts []bwdCMTile
	modes := []int{0}
	if l.Mode1 {
		modes = []int{1, 0}
	}
	for _, mode := range modes {
		switch {
		case dkdv && dm <= 64:
			ts = append(ts, bwdCMTile{NSG: 4, Step: 64, Mode: mode}, bwdCMTile{NSG: 4, Step: 32, Mode: mode})
		case dkdv && dm <= 96:
			// d 80 and 96 (H200 tuner, N 4096): longer steps than d 128's,
			// 1.15× the whole backward at both. With dropout up to d 80
			// steps of 64 rows first (H200, fp16, N 4096 and 16384,
			// causal and not: the dK/dV kernel 1.17–1.22× faster, the
			// backward 1.10–1.13×; at d 96 they do not fit 48 KiB): in
			// MODE 1, fp16, for the calls extDropTile names (dropout
			// alone timed; with a softcap or ALiBi beside it untimed, as
			// the rest are: a bias, a window, key counts, packed
			// sequences, bf16 and MODE 0 keep the 32-row steps).
			if dm <= 80 && mode == 1 && l.Storage != spec.BFloat16 && extDropTile(ext) {
				ts = append(ts, bwdCMTile{NSG: 4, Step: 64, Mode: mode})
			}
			ts = append(ts, bwdCMTile{NSG: 4, Step: 32, Mode: mode}, bwdCMTile{NSG: 2, Step: 32, Mode: mode})
		case dkdv && dm <= 128:
			// K_j and V_j in registers and Q_i, dO_i staged over them, in
			// steps of kvRegStep128's rows; else steps of 16 with K_j,
			// V_j in shared memory.
			if step := kvRegStep128(l, ext); step > 0 {
				ts = append(ts, bwdCMTile{NSG: 4, Step: step, Mode: mode, KVReg: true})
			}
			ts = append(ts, bwdCMTile{NSG: 4, Step: 16, Mode: mode}, bwdCMTile{NSG: 2, Step: 32, Mode: mode})
		case dm <= 64:
			if mode == 1 && dqRowBlocks(ext) {
				ts = append(ts, bwdCMTile{NSG: 4, Step: 32, Mode: mode, RowBlocks: 2})
			}
			ts = append(ts, bwdCMTile{NSG: 4, Step: 64, Mode: mode}, bwdCMTile{NSG: 4, Step: 32, Mode: mode})
		case dm <= 96:
			// d 80 (H200 tuner): eight subgroups, 1.19× the whole backward.
			ts = append(ts, bwdCMTile{NSG: 8, Step: 64, Mode: mode}, bwdCMTile{NSG: 4, Step: 32, Mode: mode})
		case dm <= 128:
			ts = append(ts, bwdCMTile{NSG: 4, Step: 32, Mode: mode})
		case dkdv:
			// Above d 128 one subgroup's dK and dV accumulators alone pass
			// the 255 registers an NVIDIA invocation has: two launches,
			// one accumulator each (H200, d 256, N 4096: the dK/dV
			// kernel's time 83 → 42 ms), PART 2 at half the subgroups
			// where it needs them (d 256: PART 1 at two subgroups 18.0 →
			// 9.0 ms; the tuner's best of 24; bench/NOTES.md). First, but
			// not with a bias (whose values take registers per step), K_j
			// and V_j in registers and dK in two launches of half its
			// columns, four subgroups, steps of 32 rows: d 256, N 4096,
			// the dK/dV launches 31.1 → 13.1 ms (not causal), the
			// backward 1.79× (causal 1.64×).
			//
			// Before those, in MODE 1 without a bias: one launch in
			// subgroup pairs over the features (each holding half of K_j
			// and V_j and computing half of dK's and dV's columns), steps of
			// 32 rows up to d 192 and 16 above (H200, N 4096: fp16's dK/dV
			// kernel 13.1 → 9.6 ms at d 256, 23.8 → 13.9 at d 192; the
			// whole backward against the three launches, causal and not:
			// bf16 1.06× at d 256 and 1.23× at d 192, Gemma 2's window
			// with a softcap 1.13–1.14× (fp16) and 1.12× (bf16), ALiBi
			// 1.05–1.06×, dropout 1.04–1.05× (fp16) and 1.02–1.04× (bf16)).
			if ext == nil || ext.Bias == nil {
				if mode == 1 {
					if dm <= 192 {
						ts = append(ts, bwdCMTile{NSG: 4, Step: 32, Mode: mode, KVReg: true, FHalves: true})
					}
					ts = append(ts, bwdCMTile{NSG: 4, Step: 16, Mode: mode, KVReg: true, FHalves: true})
				}
				ts = append(ts, bwdCMTile{NSG: 4, Step: 32, Mode: mode, KVReg: true, Split: true, Halves: true})
			}
			ts = append(ts, bwdCMTile{NSG: 2, Step: 16, Mode: mode, Split: true}, bwdCMTile{NSG: 1, Step: 16, Mode: mode, Split: true})
		default:
			// dQ above d 128: subgroup pairs, eight subgroups on tiles of
			// 32 keys (H200, d 256, N 4096: the dQ kernel 9.5 → 6.0 ms,
			// the backward 1.19×; the tuner's best of 28 tiles;
			// bench/NOTES.md), where dQ's column blocks pair up; else
			// four subgroups each holding Q_i, dO_i and all of dQ (464
			// bytes spilled at d 256, but each K/V tile shared: 9.9 ms,
			// against 20.5 for one subgroup reading Q_i and dO_i from
			// shared memory).
			if mode == 1 {
				ts = append(ts, bwdCMTile{NSG: 8, Step: 32, Mode: mode, Pairs: true})
			}
			ts = append(ts, bwdCMTile{NSG: 4, Step: 32, Mode: mode})
		}
		ts = append(ts, bwdCMTile{NSG: 2, Step: 16, Mode: mode}, bwdCMTile{NSG: 1, Step: 16, Mode: mode})
	}
	// bwd_cm_dkdv prefetches the next step (H200, bench/NOTES.md: −15% at
	// d64, −24% at d128 of the kernel's time with K_j and V_j in shared
	// memory; not above d 128, where the prefetch registers would spill)
	// and at d ≤ 64 also keeps K and V in registers (the tuner's pick
	// there); bwd_cm_dq prefetches the next K/V tile up to d 128 (H200, N
	// 16384: the dQ kernel's time −24% at d 64, −13% at d 128, −34% at d
	// 80, −30% at d 96; not above d 128, where Q_i and dO_i already
	// spill). A tile the rules above give K and V in registers keeps its
	// own flags (d 128's).
	for i := range ts {
		if ts[i].KVReg {
			continue
		}
		ts[i].Prefetch = dm <= 128
		if dkdv {
			ts[i].KVReg = dm <= 64
		}
	}
	return ts
}

// dqRowBlocks reports whether the dQ kernel at d ≤ 64 takes two row
// blocks per subgroup on tiles of 32 keys (nsg4-step32-rb2, MODE 1: each
// K and V fragment it loads feeds two MMAs) for a call with options ext
// (nil: plain): not with a bias (which row blocks refuse), ALiBi or a
// softcap, whose per-element terms take the registers the second block
// needs, nor a window beyond the causal mask, whose diagonal band the
// 128 rows of a workgroup cover with more masked keys than 64 do.
// Measured on an NVIDIA H200 (d 64; bench/NOTES.md) against
// nsg4-step64: the dQ kernel 7–13% faster, the backward 1.03–1.05×
// (fp16 and bf16, N 4096 and 16384, causal and not), packed sequences of
// 17–4000 tokens 1.02–1.06×, dropout 0.99–1.02×; ALiBi 0.97–1.00×, a
// softcap 0.97–0.99×, a window of 255 keys 0.96–0.97×.
func dqRowBlocks(ext *spec.Ext) bool {
	return ext == nil || ext.Bias == nil && len(ext.Slopes) == 0 && ext.Softcap == 0 && ext.Left < 0 && ext.Right <= 0
}

// kvRegStep128 is the query step of the 96 < d ≤ 128 dK/dV tile that
// holds K_j and V_j in registers, for layout l's storage and options ext
// (nil: plain); 0: no such tile, steps of 16 rows with K_j and V_j in
// shared memory. From the H200's measurements of the whole backward at N
// 4096 and 16384 (bench/NOTES.md):
//   - plain fp16: steps of 64, 1.08–1.16× against 16 (with the prefetch
//     the registers ran out and it was slower);
//   - the softcap: steps of 32. At 64 the driver spills (its tanh), at 32
//     not: 1.06–1.09× against 16, where 64 lost 5% at N 16384;
//   - dropout and ALiBi: steps of 64, 1.06–1.11× and 1.04–1.10× against
//     16;
//   - bf16 as fp16. With P and dS rounded in integer arithmetic, 64
//     against 32 at N 16384: plain 1.04–1.05×, ALiBi 1.03–1.04×,
//     dropout 1.00–1.02×, a window 0.99× (32 had been 1.03–1.07× faster
//     with the fp32 split that rounding replaced);
//   - a bias: steps of 16, with no spill (its values spill 288 bytes at
//     64 and 32 at 32; 64 lost 1–6%, 32 10–13%).
func kvRegStep128(l *CMLayout, ext *spec.Ext) int {
	switch {
	case ext != nil && ext.Bias != nil:
		return 0
	case ext != nil && ext.Softcap != 0:
		return 32
	default:
		return 64
	}
}

// bwdCMCheckTile reports why tile c of the dK/dV (dkdv) or dQ kernel cannot
// run with layout l and head dims d, dv on a device with sharedMax bytes of
// shared memory and workgroups of at most maxWG invocations (x: what the
// call's options add — dropout's keep bits; the backward stages no bias).
func bwdCMCheckTile(l *CMLayout, dkdv bool, c bwdCMTile, d, dv int, x TileExtras, sharedMax, maxWG int) error {
	N, K := int(l.N), int(l.K)
	if d < 1 || dv < 1 || d > shaders.MaxHeadDim || dv > shaders.MaxHeadDim {
		return fmt.Errorf("head dims D=%d Dv=%d (the coopmat backward takes 1 … %d)", d, dv, shaders.MaxHeadDim)
	}
	if (c.KVReg || c.Split) && !dkdv {
		return fmt.Errorf("KVReg and Split apply to bwd_cm_dkdv only")
	}
	if c.Pairs && dkdv {
		return fmt.Errorf("tile %s: subgroup pairs (dq2) apply to bwd_cm_dq only", c)
	}
	if c.Halves && !c.Split {
		return fmt.Errorf("tile %s: dK's halves (dk2) are launches of a split tile (sp1)", c)
	}
	if c.Halves && l.paddedDim(d)/N < 2 {
		return fmt.Errorf("tile %s: D=%d is one column block of %d: dK has no halves", c, d, N)
	}
	if err := checkBwdCMSplitDims(l, d, dv); err != nil {
		return err
	}
	if l.planes() > 1 && (c.Mode != 1 || c.KVReg || c.Split || c.Halves || c.Pairs) {
		return fmt.Errorf("tile %s: the float32 build runs MODE 1 in one launch, without key pairs (its dK/dV kernel always holds K and V in registers)", c)
	}
	if err := c.checkFHalves(l, dkdv, d, dv, x); err != nil {
		return err
	}
	if c.NSG < 1 || c.Step < 1 {
		return fmt.Errorf("%d subgroups, steps of %d rows (both must be positive)", c.NSG, c.Step)
	}
	if c.Step%N != 0 || c.Step%K != 0 {
		return fmt.Errorf("step %d not a multiple of N %d and K %d", c.Step, N, K)
	}
	if err := c.checkPairs(l, d, dv); err != nil {
		return err
	}
	if c.RowBlocks > 1 && (dkdv || c.FHalves) {
		return fmt.Errorf("tile %s: row blocks (rbN) apply to the 16-bit bwd_cm_dq only", c)
	}
	if err := checkRowBlockRules(c, c.RowBlocks, c.Mode, c.Pairs, l, x); err != nil {
		return err
	}
	if err := checkStagger(c.Stagger, c, x); err != nil {
		return err
	}
	_, err := c.launches(l, dkdv, d, dv, x, sharedMax, maxWG)
	return err
}

// checkFHalves says why tile c of the dK/dV (dkdv) or dQ kernel cannot
// run at head dims d, dv with layout l for its pairs over the features,
// or without them (nil if it can): FHalves runs MODE 1 in one launch and
// pairs an even subgroup count (the kernels pad D and Dv to whole pairs
// of chunks); the 16-bit builds have it in the dK/dV kernel only, with K
// and V in registers (their dQ kernel pairs over the keys: dq2), and not
// with a bias (x: its values take registers per step, unmeasured there);
// without it the f32 build holds whole operands up to
// bwdCMSplitWholeMaxD.
func (c bwdCMTile) checkFHalves(l *CMLayout, dkdv bool, d, dv int, x TileExtras) error {
	switch {
	case !c.FHalves && l.planes() > 1 && max(d, dv) > bwdCMSplitWholeMaxD:
		return fmt.Errorf("tile %s: above D, Dv = %d the float32 build's subgroups pair over the features (fh2)", c, bwdCMSplitWholeMaxD)
	case !c.FHalves:
		return nil
	case l.planes() == 1 && !dkdv:
		return fmt.Errorf("tile %s: the 16-bit dQ kernel's subgroups pair over the keys (dq2); over the features (fh2) the float32 build's", c)
	case l.planes() == 1 && !c.KVReg:
		return fmt.Errorf("tile %s: the 16-bit builds' pairs over the features (fh2) hold K and V in registers (kv1)", c)
	case l.planes() == 1 && x.BiasElem > 0:
		return fmt.Errorf("tile %s: the 16-bit builds' pairs over the features (fh2) take no bias", c)
	case c.Split:
		return fmt.Errorf("tile %s: subgroup pairs over the features (fh2) run in one launch", c)
	case c.Mode != 1:
		return fmt.Errorf("tile %s: subgroup pairs over the features (fh2) run MODE 1 only", c)
	case c.NSG%2 != 0:
		return fmt.Errorf("tile %s: subgroup pairs over the features (fh2) need an even subgroup count", c)
	}
	return nil
}

// checkPairs says why a dQ tile c with Pairs cannot run at head dims d,
// dv with layout l (nil without Pairs): the pair splits the subgroups, the
// key tile's accumulators and dQ's column blocks in two, and exchanges dS
// (its rows BC+8 elements apart) through V_j's staging.
func (c bwdCMTile) checkPairs(l *CMLayout, d, dv int) error {
	if !c.Pairs {
		return nil
	}
	N := int(l.N)
	br, bc := c.brbc(false, int(l.M))
	switch {
	case c.Mode != 1:
		return fmt.Errorf("tile %s: subgroup pairs (dq2) run MODE 1 only", c)
	case c.NSG%2 != 0:
		return fmt.Errorf("tile %s: subgroup pairs (dq2) need an even subgroup count", c)
	case c.Step%(2*N) != 0:
		return fmt.Errorf("tile %s: subgroup pairs (dq2) need a tile of an even number of %d-key blocks", c, N)
	case l.paddedDim(d)/N%2 != 0:
		return fmt.Errorf("tile %s: D=%d is an odd number of %d-column blocks: dQ has no halves for the pairs", c, d, N)
	case br*(bc+8) > bc*(l.paddedDim(dv)+8):
		return fmt.Errorf("tile %s: the pairs' dS (%d rows) does not fit V's staging at Dv=%d", c, br, dv)
	}
	return nil
}

// chooseBwdCMTile returns the first tile of bwdCMTiles that fits a
// problem with options ext (nil: plain).
func chooseBwdCMTile(l *CMLayout, dkdv bool, d, dv int, mask spec.Mask, ext *spec.Ext, sharedMax, maxWG int) (bwdCMTile, error) {
	if err := checkBwdCMSplitDims(l, d, dv); err != nil {
		return bwdCMTile{}, err // (once, not per tile)
	}
	x := ExtrasOf(l, ext)
	cands := bwdCMTiles(l, dkdv, d, dv, mask, ext)
	if len(cands) == 0 {
		return bwdCMTile{}, fmt.Errorf("no tile: the float32 build runs in MODE 1, which this device's coopmat layout does not allow (%s)", l.Why)
	}
	c, err := firstFit(cands, func(c bwdCMTile) error { return bwdCMCheckTile(l, dkdv, c, d, dv, x, sharedMax, maxWG) })
	if err != nil {
		return bwdCMTile{}, fmt.Errorf("no tile fits: %w", err)
	}
	return c, nil
}

// bwdCMSpec is the specialization of bwd_cm_dkdv (dkdv; PART part) or
// bwd_cm_dq.
func bwdCMSpec(l *CMLayout, dkdv bool, c bwdCMTile, part, d, dv int, vec bool) []device.Spec {
	var pLo, pHi uint32
	if c.Mode == 1 {
		_, _, pLo, pHi = l.Packed()
	}
	vecV := b2u(vec)
	br, bc := c.brbc(dkdv, int(l.M))
	sp := []device.Spec{
		{ID: shaders.SpecWorkgroupSize, Value: uint32(c.NSG * l.SG)}, {ID: shaders.SpecD, Value: uint32(d)},
		{ID: shaders.SpecDV, Value: uint32(dv)}, {ID: shaders.SpecBR, Value: uint32(br)},
		{ID: shaders.SpecBC, Value: uint32(bc)}, {ID: shaders.SpecSubgroup, Value: uint32(l.SG)},
		{ID: shaders.SpecExt, Value: 0}, // (newLaunch sets the problem's)
		{ID: shaders.SpecCMM, Value: l.M}, {ID: shaders.SpecCMN, Value: l.N}, {ID: shaders.SpecCMK, Value: l.K},
		{ID: shaders.SpecCMMode, Value: uint32(c.Mode)}, {ID: shaders.SpecCMLen, Value: uint32(l.AccLen)},
		{ID: shaders.SpecCMPermLo, Value: pLo}, {ID: shaders.SpecCMPermHi, Value: pHi},
		{ID: shaders.SpecCMVec, Value: vecV},
	}
	sp = append(sp, device.Spec{ID: shaders.SpecCMPrefet, Value: b2u(c.Prefetch)})
	sp = append(sp, device.Spec{ID: shaders.SpecCMStagger, Value: b2u(c.Stagger)})
	if dkdv {
		sp = append(sp, device.Spec{ID: shaders.SpecCMKVReg, Value: b2u(c.KVReg)}, device.Spec{ID: shaders.SpecCMPart, Value: uint32(part)})
	} else {
		sp = append(sp, device.Spec{ID: shaders.SpecCMPairs, Value: b2u(c.Pairs)}, device.Spec{ID: shaders.SpecCMRowBlk, Value: uint32(c.rowBlocks())})
	}
	sp = append(sp, device.Spec{ID: shaders.SpecCMFHalves, Value: b2u(c.FHalves)})
	if c.Mode == 1 {
		// The columns (both kernels: cm_common.glsl's CM_COLS) and, for
		// bwd_cm_dq's dropout (DROP_COLS), the local rows.
		cLo, cHi, cols := l.ColDeltas()
		sp = append(sp, device.Spec{ID: shaders.SpecCMCols, Value: b2u(cols)}, device.Spec{ID: shaders.SpecCMColDLo, Value: cLo},
			device.Spec{ID: shaders.SpecCMColDHi, Value: cHi})
		if !dkdv {
			sLo, sHi, _, _ := l.Packed()
			sp = append(sp, device.Spec{ID: shaders.SpecCMRL, Value: uint32(max(l.RL, 1))}, device.Spec{ID: shaders.SpecCMSlotLo, Value: sLo},
				device.Spec{ID: shaders.SpecCMSlotHi, Value: sHi})
		}
	}
	return sp
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func parseBwdCMTile(s string) (bwdCMTile, error) {
	var c bwdCMTile
	bad := fmt.Errorf("%w: coopmat backward tile %q (want nsgN-stepN-modeN[-kv1][-pf1][-sp1[-dk2]], nsgN-stepN-modeN[-pf1]-dq2, nsgN-stepN-modeN[-kv1][-pf1]-fh2 or nsgN-stepN-modeN[-pf1]-rbN, each with an optional -sw1)", ErrInvalid, s)
	base, sw := strings.CutSuffix(s, "-sw1")
	if i := strings.LastIndex(base, "-rb"); i >= 0 {
		if _, err := fmt.Sscanf(base[i:], "-rb%d", &c.RowBlocks); err != nil {
			return bwdCMTile{}, bad
		}
		base = base[:i]
	}
	base, fh := strings.CutSuffix(base, "-fh2")
	base, dq := strings.CutSuffix(base, "-dq2")
	base, dk := strings.CutSuffix(base, "-dk2")
	base, sp := strings.CutSuffix(base, "-sp1")
	base, pf := strings.CutSuffix(base, "-pf1")
	base, kv := strings.CutSuffix(base, "-kv1")
	c.KVReg, c.Prefetch, c.Split, c.Halves, c.Pairs, c.FHalves, c.Stagger = kv, pf, sp, dk, dq, fh, sw
	rb := c.RowBlocks > 1
	if _, err := fmt.Sscanf(base, "nsg%d-step%d-mode%d", &c.NSG, &c.Step, &c.Mode); err != nil || c.String() != s || dk && !sp || dq && (kv || sp) || fh && (sp || dq) || rb && (kv || sp || dq || fh) {
		return bwdCMTile{}, bad
	}
	return c, nil
}

func parseCMTile(s string) (CMTile, error) {
	var c CMTile
	var pf int
	bad := fmt.Errorf("%w: flash_cm tile %q (want nsgN-bcN-modeN-pf0|1[-p2][-rbN][-sw1])", ErrInvalid, s)
	base, stagger := strings.CutSuffix(s, "-sw1")
	c.Stagger = stagger
	if i := strings.LastIndex(base, "-rb"); i >= 0 {
		if _, err := fmt.Sscanf(base[i:], "-rb%d", &c.RowBlocks); err != nil {
			return CMTile{}, bad
		}
		base = base[:i]
	}
	base, pairs := strings.CutSuffix(base, "-p2")
	if _, err := fmt.Sscanf(base, "nsg%d-bc%d-mode%d-pf%d", &c.NSG, &c.BC, &c.Mode, &pf); err != nil || pf < 0 || pf > 1 {
		return CMTile{}, bad
	}
	c.Prefetch, c.Pairs = pf == 1, pairs
	if c.String() != s {
		return CMTile{}, bad
	}
	return c, nil
}
