//go:build cgo

package vkattn

// The bias (spec.Bias) in the plan: every scoring kernel binds the bias
// and its summary after the Ext buffer (the dQ kernels also their dS
// target), a pass with a bias starts with bias_summary, and a backward
// whose dBias sums over broadcast dimensions runs its dQ launch in chunks
// of (b, h) planes, each followed by bias_reduce's part for it.

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// biasBinds are the bindings a kernel of shaders.ExtKernels declares after
// the Ext buffer: the bias and its summary for every kernel that scores
// (all but bwd_pre), and the dS target for the dQ kernels — the Ext
// buffer in their place (bound, never read) where p has none.
func biasBinds(kernel string, p *spec.Problem) []Operand {
	bias, sum, ds := OpExt, OpExt, OpExt
	if x := extBias(p); x != nil {
		bias, sum = OpBias, OpBiasSum
		switch {
		case shaders.DBiasFolds(p):
			ds = OpDBiasAcc
		case x.Grad:
			ds = OpDBias
		}
	}
	switch kernel {
	case shaders.KernelBwdPre:
		return nil
	case shaders.KernelBwdDQ, shaders.KernelBwdCMDQ:
		return []Operand{bias, sum, ds}
	}
	return []Operand{bias, sum}
}

// extBias is p's bias (nil without one).
func extBias(p *spec.Problem) *spec.Bias {
	if p.Ext == nil {
		return nil
	}
	return p.Ext.Bias
}

// dsScratchMax is the most bytes a folding dBias's dS scratch takes when
// its planes can run in chunks (DispatchBase): larger ones are summed a
// chunk at a time (shaders.DSChunks).
const dsScratchMax = 1 << 30

// planBias adds the bias's launches to a pass's plan: bias_summary first
// (the kernels after it, behind a barrier, read its summary); with dBias
// the dQ launch zeroes its dS target first (keys and rows no tile reaches
// keep a dBias of 0). A backward whose dBias folds runs the dQ launch in
// chunks of (b, h) planes (shaders.DSChunks, each the part of the dQ grid
// whose dS its scratch holds), each followed (behind barriers) by
// bias_reduce's part that adds the chunk into dBias. It refuses a bias,
// dBias or scratch plane that one binding cannot hold.
func (b *Backend) planBias(ctx context.Context, p *spec.Problem, dt spec.DType, pl *Plan) error {
	x := extBias(p)
	if x == nil {
		return nil
	}
	for _, op := range []Operand{OpBias, OpDBias} {
		if op == OpDBias && (pl.Dir != Bwd || !x.Grad) {
			continue
		}
		os := opSpec(p, op)
		n, ok := extent(os.shape, os.st)
		if bytes := n * int64(os.dt.Size()); !ok || !b.bindable(n, bytes) {
			return fmt.Errorf("%w: %s %v spans %d elements (%d bytes); kernels read it through one binding, which reaches %d elements, %d bytes",
				ErrTooLarge, os.name, os.shape, n, bytes, int64(MaxElements), b.bindBytes)
		}
	}
	sum := shaders.BiasSummary(p)
	summary, err := b.biasLaunch(shaders.KernelBiasSummary, p, dt, sum.Grid(), OpExt, OpBias, OpBiasSum)
	if err != nil {
		return err
	}
	if pl.Scratch == nil {
		pl.Scratch = map[Operand]int64{}
	}
	pl.Scratch[OpBiasSum] = 4 * int64(sum.Len())
	if len(pl.Launches) > 0 {
		pl.Launches[0].Barrier = true
	}
	pl.Launches = append([]Launch{summary}, pl.Launches...)
	if pl.Dir != Bwd || !x.Grad {
		return nil
	}
	dq := slices.IndexFunc(pl.Launches, func(l Launch) bool {
		return l.Kernel == shaders.KernelBwdDQ || l.Kernel == shaders.KernelBwdCMDQ
	})
	if dq < 0 {
		return fmt.Errorf("vkattn: %s: a backward with dBias and no dQ launch", pl.Family)
	}
	l := &pl.Launches[dq]
	l.Zero = append(l.Zero, l.Bindings[len(l.Bindings)-1])
	if !shaders.DBiasFolds(p) {
		return nil
	}
	return b.planDBiasFold(ctx, p, dt, pl, dq)
}

// planDBiasFold replaces the dQ launch pl.Launches[dq] of a backward whose
// dBias folds with its chunks (shaders.DSChunks), each followed by
// bias_reduce's part for it.
func (b *Backend) planDBiasFold(ctx context.Context, p *spec.Problem, dt spec.DType, pl *Plan, dq int) error {
	maxBytes := b.dsBytes
	if !b.info.DispatchBase {
		maxBytes = math.MaxInt64 // one chunk: the whole grid in one dispatch
	}
	ch := shaders.DSChunking(p, maxBytes)
	if elems := ch.Bytes(p) / 4; !b.bindable(elems, 4*elems) {
		return fmt.Errorf("%w: a dBias summed over broadcast dimensions needs a float32 scratch of %d (b, h) planes of Nq·Nk = %d elements (%d bytes); one binding reaches %d elements, %d bytes",
			ErrTooLarge, ch.Planes, elems, 4*elems, int64(MaxElements), b.bindBytes)
	}
	acc := OpExt // (bound, never read: one chunk holds each element's planes)
	if ch.Spans(p) {
		acc = OpDBiasPart
		os := opSpec(p, OpDBias)
		n, _ := extent(os.shape, os.st) // (planBias checked it)
		pl.Scratch[OpDBiasPart] = 4 * n
	}
	reduce, err := b.biasLaunch(shaders.KernelBiasReduce, p, dt, shaders.BiasReduceGrid(p), OpExt, OpDBiasAcc, OpDBias, acc)
	if err != nil {
		return err
	}
	reduce.Barrier = true
	whole := pl.Launches[dq]
	var ls []Launch
	for k := range ch.Chunks {
		l := whole
		l.Base, l.Grid = ch.DQBox(p, k, whole.Grid[0])
		l.HeadGroup = 0 // (a part of the grid keeps its order)
		l.Zero = slices.Clone(whole.Zero)
		l.Barrier = whole.Barrier || k > 0
		r := reduce
		r.Base, r.Grid = ch.ReduceBox(p, k)
		ls = append(ls, l, r)
	}
	pl.Launches = slices.Replace(pl.Launches, dq, dq+1, ls...)
	pl.Scratch[OpDBiasAcc] = ch.Bytes(p)
	pl.ds = ch
	return ctx.Err()
}

// biasLaunch is a launch of a bias kernel (its storage type the
// problem's: a float32 bias is read through its float32 view) with grid
// and bindings binds.
func (b *Backend) biasLaunch(kernel string, p *spec.Problem, dt spec.DType, grid [3]uint32, binds ...Operand) (Launch, error) {
	c := shaders.Config{WG: shaders.BiasWG}
	ents, err := shaders.SpecEntries(kernel, c, p.D, p.Dv, b.lim.Subgroup, 0, shaders.ExtSpecFor(kernel, p))
	if err != nil {
		return Launch{}, fmt.Errorf("vkattn: %w", err)
	}
	sp := make([]device.Spec, len(ents))
	for i, e := range ents {
		sp[i] = device.Spec{ID: e.ID, Value: e.Value}
	}
	l, err := b.newLaunch(kernel, dt, p, fmt.Sprintf("wg%d", c.WG), sp, 0, false, binds...)
	if err != nil {
		return Launch{}, err
	}
	l.Source, l.Workgroup, l.Grid = SourceDefault, c.WG, grid
	return l, nil
}

// isBiasKernel reports whether l runs a bias kernel (no addressed build:
// it reads only bound buffers).
func isBiasKernel(l *Launch) bool { return slices.Contains(shaders.BiasKernels, l.Kernel) }
