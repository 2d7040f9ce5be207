//go:build cgo

package vkattn

import (
	"context"
	"fmt"
	"math"

	"github.com/flashvk/flashvk/internal/device"

	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// CheckProblem validates what the kernels assume of a problem (the
// attention package has checked more, but vkattn may be used directly).
func CheckProblem(p *spec.Problem) error {
	if p == nil {
		return fmt.Errorf("%w: nil problem", ErrInvalid)
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"B", p.B}, {"Hq", p.Hq}, {"Hkv", p.Hkv}, {"Nq", p.Nq}, {"Nk", p.Nk}, {"D", p.D}, {"Dv", p.Dv}} {
		if d.v < 1 || d.v > math.MaxUint32 {
			return fmt.Errorf("%w: problem: %s = %d", ErrInvalid, d.name, d.v)
		}
	}
	if p.D > shaders.MaxHeadDim || p.Dv > shaders.MaxHeadDim {
		return fmt.Errorf("%w: problem: head dims D=%d Dv=%d (kernels take 1 … %d)", ErrInvalid, p.D, p.Dv, shaders.MaxHeadDim)
	}
	if p.Hq%p.Hkv != 0 {
		return fmt.Errorf("%w: problem: Hkv=%d does not divide Hq=%d", ErrInvalid, p.Hkv, p.Hq)
	}
	if p.Mask > spec.MaskCausalBottomRight {
		return fmt.Errorf("%w: problem: mask %d", ErrInvalid, p.Mask)
	}
	if s := float64(p.Scale); s == 0 || math.IsNaN(s) || math.IsInf(s, 0) {
		return fmt.Errorf("%w: problem: scale %v (must be resolved, finite and non-zero)", ErrInvalid, p.Scale)
	}
	return checkExt(p)
}

// checkExt validates what the extended kernels assume of p.Ext
// (spec.Problem.CheckExt, and for ext.glsl's int32 window arithmetic
// Nq + Nk < 2^30).
func checkExt(p *spec.Problem) error {
	if err := p.CheckExt(); err != nil {
		return fmt.Errorf("%w: problem: %w", ErrInvalid, err)
	}
	if p.Ext != nil && p.Nq+p.Nk >= 1<<30 {
		return fmt.Errorf("%w: problem: Nq + Nk = %d with extended options (kernels take < 2^30)", ErrTooLarge, p.Nq+p.Nk)
	}
	return nil
}

// binding is one tensor argument of a resident call.
type binding struct {
	op  Operand
	t   *Tensor
	out bool
}

// acquire checks the tensors against p and takes them for the call; the
// returned release gives them back. Outputs must be distinct from every
// other argument.
func (b *Backend) acquire(p *spec.Problem, args []binding) (spec.DType, func(), error) {
	if err := CheckProblem(p); err != nil {
		return 0, nil, err
	}
	var taken []*Tensor
	release := func() {
		for _, t := range taken {
			t.life.Release()
		}
	}
	dt := spec.DType(0)
	for i, a := range args {
		t, as := a.t, opSpec(p, a.op)
		if err := t.use(as.name); err != nil {
			release()
			return 0, nil, err
		}
		taken = append(taken, t)
		want := as.dt
		if want == 0 {
			if dt == 0 {
				dt = t.dt
			}
			want = dt
		}
		var err error
		switch {
		case t.b != b:
			err = fmt.Errorf("%w: %s: tensor of another backend", ErrInvalid, as.name)
		case t.dt != want:
			err = fmt.Errorf("%w: %s: %v tensor, want %v", ErrInvalid, as.name, t.dt, want)
		case t.shape != as.shape:
			err = fmt.Errorf("%w: %s: shape %v, the problem needs %v", ErrInvalid, as.name, t.shape, as.shape)
		case !sameAddressing(t.shape, t.st, as.st):
			err = fmt.Errorf("%w: %s: strides %+v, the problem's are %+v", ErrInvalid, as.name, t.st, as.st)
		}
		if err == nil && a.out {
			for j, o := range args {
				if j != i && o.t == t {
					err = fmt.Errorf("%w: %s: output is also passed as %v", ErrInvalid, as.name, o.op)
					break
				}
			}
		}
		if err == nil {
			var n int64
			if n, err = b.checkExtent(as.name, as.shape, as.st, t.dt); err == nil && n > t.elems {
				err = fmt.Errorf("%w: %s: view spans %d elements, tensor holds %d", ErrInvalid, as.name, n, t.elems)
			}
		}
		if err != nil {
			release()
			return 0, nil, err
		}
	}
	if err := b.supports(dt); err != nil {
		release()
		return 0, nil, err
	}
	return dt, release, nil
}

// Forward computes O and LSE from resident Q, K, V.
func (b *Backend) Forward(ctx context.Context, p *spec.Problem, q, k, v, o, lse *Tensor) error {
	return b.call(ctx, p, true, false, Operands{OpQ: q, OpK: k, OpV: v, OpO: o, OpLSE: lse})
}

// Backward computes dQ, dK and dV from resident Q, K, V, O, LSE and dO.
func (b *Backend) Backward(ctx context.Context, p *spec.Problem, q, k, v, o, lse, do, dq, dk, dv *Tensor) error {
	return b.call(ctx, p, false, true, Operands{OpQ: q, OpK: k, OpV: v, OpO: o, OpLSE: lse, OpDO: do, OpDQ: dq, OpDK: dk, OpDV: dv})
}

// Step is the training step: the forward (O, LSE), a barrier and the
// backward (dQ, dK, dV) in one submission; O and LSE stay on the device.
func (b *Backend) Step(ctx context.Context, p *spec.Problem, q, k, v, do, o, lse, dq, dk, dv *Tensor) error {
	return b.call(ctx, p, true, true, Operands{OpQ: q, OpK: k, OpV: v, OpO: o, OpLSE: lse, OpDO: do, OpDQ: dq, OpDK: dk, OpDV: dv})
}

// Call runs the forward (fwd), the backward (bwd) or both (a training
// step) of p on resident operands ts: Forward, Backward and Step with
// the bias and dBias of p.Ext.Bias (OpBias, OpDBias) where p has them.
func (b *Backend) Call(ctx context.Context, p *spec.Problem, fwd, bwd bool, ts Operands) error {
	return b.call(ctx, p, fwd, bwd, ts)
}

// call checks the resident operands of a submission of the forward, the
// backward or both, takes them for the call, and runs it.
func (b *Backend) call(ctx context.Context, p *spec.Problem, fwd, bwd bool, ts Operands) error {
	cctx, leave, err := b.enterCall(ctx)
	if err != nil {
		return err
	}
	defer leave()
	dt, release, err := b.acquire(p, ts.bindings(p, fwd, bwd))
	if err != nil {
		return err
	}
	defer release()
	return callErr(ctx, cctx, b.run(cctx, p, dt, fwd, bwd, ts.bufs()))
}

// scratch holds the pooled buffers one submission uses.
type scratch struct {
	b    *Backend
	bufs []*device.Buffer
}

func (s *scratch) get(n int64) (*device.Buffer, error) {
	buf, err := s.b.pool.get(n, s.b.bufLimit(n))
	if err != nil {
		return nil, fmt.Errorf("vkattn: scratch of %d bytes: %w", n, err)
	}
	s.bufs = append(s.bufs, buf)
	return buf, nil
}

// bufLimit is the largest buffer the pool may give for n bytes: one
// binding's range when n fits one — its size class may not round it past
// what a bound kernel reaches (the kernel would be refused it) — else the
// device's largest buffer.
func (b *Backend) bufLimit(n int64) int64 {
	if n <= b.bindBytes {
		return b.bindBytes
	}
	return b.maxBuf
}

// done returns the buffers to the pool. After a failed submission the GPU
// may still use them (a timed-out wait): they are then left to the
// device, which frees them at Close, instead of being handed to another
// call.
func (s *scratch) done(ok bool) {
	if ok {
		for _, buf := range s.bufs {
			s.b.pool.put(buf)
		}
	} else {
		s.b.pool.forget(len(s.bufs))
	}
	s.bufs = nil
}

// passes returns the plans of a submission: the forward (fwd), the
// backward (bwd), or both in order (a training step).
func (b *Backend) passes(ctx context.Context, p *spec.Problem, dt spec.DType, fwd, bwd bool) ([]*Plan, error) {
	var pls []*Plan
	for _, x := range []struct {
		on  bool
		dir Dir
	}{{fwd, Fwd}, {bwd, Bwd}} {
		if !x.on {
			continue
		}
		pl, err := b.Plan(ctx, p, dt, x.dir)
		if err != nil {
			return nil, err
		}
		pls = append(pls, pl)
	}
	return pls, nil
}

// recordPasses records the plans one after the other into one
// submission, a barrier between two (the backward reads the forward's O
// and LSE).
func (b *Backend) recordPasses(r *device.Recorder, s *scratch, p *spec.Problem, pls []*Plan, bufs operandBufs) error {
	cls, err := b.prepareAll(s, p, pls, bufs)
	if err != nil {
		return err
	}
	_, _, err = recordWhole(r, cls)
	return err
}

// run plans the passes (fwd, bwd or both) of p, records them and submits
// them: once, or in chunks when the call can be cancelled and is long
// (chunk.go).
func (b *Backend) run(ctx context.Context, p *spec.Problem, dt spec.DType, fwd, bwd bool, bufs operandBufs) error {
	pls, err := b.passes(ctx, p, dt, fwd, bwd)
	if err != nil {
		return err
	}
	s := &scratch{b: b}
	tainted, err := b.submitPasses(ctx, s, p, pls, bufs)
	s.done(!tainted)
	return err
}
