package vkattn

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/pipeline"
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
	return nil
}

// operandSpec is the name, shape, strides and (for LSE) dtype of one
// operand of a problem.
type operandSpec struct {
	name  string
	shape Shape
	st    spec.Strides
	dt    DType // 0: the problem's storage type
}

func qSpec(p *spec.Problem, name string) operandSpec {
	return operandSpec{name, Shape{p.B, p.Nq, p.Hq, p.D}, p.Q, 0}
}
func kSpec(p *spec.Problem, name string) operandSpec {
	return operandSpec{name, Shape{p.B, p.Nk, p.Hkv, p.D}, p.K, 0}
}
func vSpec(p *spec.Problem, name string) operandSpec {
	return operandSpec{name, Shape{p.B, p.Nk, p.Hkv, p.Dv}, p.V, 0}
}
func oSpec(p *spec.Problem, name string) operandSpec {
	return operandSpec{name, Shape{p.B, p.Nq, p.Hq, p.Dv}, p.O, 0}
}
func lseSpec(p *spec.Problem) operandSpec {
	return operandSpec{"lse", LSEShape(p), LSEStrides(p), F32}
}

// binding is one tensor argument of a resident call.
type binding struct {
	spec operandSpec
	t    *Tensor
	out  bool
}

// acquire checks the tensors against p and takes them for the call; the
// returned release gives them back. Outputs must be distinct from every
// other argument.
func (b *Backend) acquire(p *spec.Problem, args []binding) (DType, func(), error) {
	if err := CheckProblem(p); err != nil {
		return 0, nil, err
	}
	var taken []*Tensor
	release := func() {
		for _, t := range taken {
			t.life.release()
		}
	}
	dt := DType(0)
	for i, a := range args {
		t := a.t
		if err := t.use(a.spec.name); err != nil {
			release()
			return 0, nil, err
		}
		taken = append(taken, t)
		want := a.spec.dt
		if want == 0 {
			if dt == 0 {
				dt = t.dt
			}
			want = dt
		}
		var err error
		switch {
		case t.b != b:
			err = fmt.Errorf("%w: %s: tensor of another backend", ErrInvalid, a.spec.name)
		case t.dt != want:
			err = fmt.Errorf("%w: %s: %v tensor, want %v", ErrInvalid, a.spec.name, t.dt, want)
		case t.shape != a.spec.shape:
			err = fmt.Errorf("%w: %s: shape %v, the problem needs %v", ErrInvalid, a.spec.name, t.shape, a.spec.shape)
		case !sameAddressing(t.shape, t.st, a.spec.st):
			err = fmt.Errorf("%w: %s: strides %+v, the problem's are %+v", ErrInvalid, a.spec.name, t.st, a.spec.st)
		}
		if err == nil && a.out {
			for j, o := range args {
				if j != i && o.t == t {
					err = fmt.Errorf("%w: %s: output is also passed as %s", ErrInvalid, a.spec.name, o.spec.name)
					break
				}
			}
		}
		if err == nil {
			var n int64
			if n, err = b.checkExtent(a.spec.name, a.spec.shape, a.spec.st, t.dt); err == nil && n > t.elems {
				err = fmt.Errorf("%w: %s: view spans %d elements, tensor holds %d", ErrInvalid, a.spec.name, n, t.elems)
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
	if err := b.enter(); err != nil {
		return err
	}
	defer b.leave()
	dt, release, err := b.acquire(p, []binding{
		{qSpec(p, "q"), q, false}, {kSpec(p, "k"), k, false}, {vSpec(p, "v"), v, false},
		{oSpec(p, "o"), o, true}, {lseSpec(p), lse, true},
	})
	if err != nil {
		return err
	}
	defer release()
	return b.run(ctx, p, dt, func(r *device.Recorder, s *scratch) error {
		return b.recordForward(r, s, p, dt, q.buf, k.buf, v.buf, o.buf, lse.buf)
	})
}

// Backward computes dQ, dK and dV from resident Q, K, V, O, LSE and dO.
func (b *Backend) Backward(ctx context.Context, p *spec.Problem, q, k, v, o, lse, do, dq, dk, dv *Tensor) error {
	if err := b.enter(); err != nil {
		return err
	}
	defer b.leave()
	dt, release, err := b.acquire(p, []binding{
		{qSpec(p, "q"), q, false}, {kSpec(p, "k"), k, false}, {vSpec(p, "v"), v, false},
		{oSpec(p, "o"), o, false}, {lseSpec(p), lse, false}, {oSpec(p, "do"), do, false},
		{qSpec(p, "dq"), dq, true}, {kSpec(p, "dk"), dk, true}, {vSpec(p, "dv"), dv, true},
	})
	if err != nil {
		return err
	}
	defer release()
	return b.run(ctx, p, dt, func(r *device.Recorder, s *scratch) error {
		return b.recordBackward(r, s, p, dt, q.buf, k.buf, v.buf, o.buf, lse.buf, do.buf, dq.buf, dk.buf, dv.buf)
	})
}

// Step is the training step: the forward (O, LSE), a barrier and the
// backward (dQ, dK, dV) in one submission; O and LSE stay on the device.
func (b *Backend) Step(ctx context.Context, p *spec.Problem, q, k, v, do, o, lse, dq, dk, dv *Tensor) error {
	if err := b.enter(); err != nil {
		return err
	}
	defer b.leave()
	dt, release, err := b.acquire(p, []binding{
		{qSpec(p, "q"), q, false}, {kSpec(p, "k"), k, false}, {vSpec(p, "v"), v, false},
		{oSpec(p, "do"), do, false},
		{oSpec(p, "o"), o, true}, {lseSpec(p), lse, true},
		{qSpec(p, "dq"), dq, true}, {kSpec(p, "dk"), dk, true}, {vSpec(p, "dv"), dv, true},
	})
	if err != nil {
		return err
	}
	defer release()
	return b.run(ctx, p, dt, func(r *device.Recorder, s *scratch) error {
		return b.recordStep(r, s, p, dt, q.buf, k.buf, v.buf, do.buf, o.buf, lse.buf, dq.buf, dk.buf, dv.buf)
	})
}

func (b *Backend) recordStep(r *device.Recorder, s *scratch, p *spec.Problem, dt DType, q, k, v, do, o, lse, dq, dk, dv *device.Buffer) error {
	if err := b.recordForward(r, s, p, dt, q, k, v, o, lse); err != nil {
		return err
	}
	r.Barrier()
	return b.recordBackward(r, s, p, dt, q, k, v, o, lse, do, dq, dk, dv)
}

// scratch holds the pooled buffers one submission uses.
type scratch struct {
	b    *Backend
	bufs []*device.Buffer
}

func (s *scratch) get(n int64) (*device.Buffer, error) {
	buf, err := s.b.pool.get(n, s.b.maxBuf)
	if err != nil {
		return nil, fmt.Errorf("vkattn: scratch of %d bytes: %w", n, err)
	}
	s.bufs = append(s.bufs, buf)
	return buf, nil
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

// run records with rec and submits once.
func (b *Backend) run(ctx context.Context, p *spec.Problem, dt DType, rec func(*device.Recorder, *scratch) error) error {
	s := &scratch{b: b}
	r := b.dev.Record()
	if err := rec(r, s); err != nil {
		s.done(true)
		return err
	}
	_, err := b.dev.Submit(ctx, r)
	s.done(err == nil || !submitted(err))
	if err != nil {
		return fmt.Errorf("vkattn: %w", err)
	}
	return nil
}

// submitted reports whether a Submit error may leave GPU work running.
func submitted(err error) bool {
	return errors.Is(err, device.ErrTimeout) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// dispatch checks the grid and records one dispatch.
func (b *Backend) dispatch(r *device.Recorder, pl *device.Pipeline, push []byte, grid [3]uint32, bufs ...*device.Buffer) error {
	if err := pipeline.CheckGroups(b.info, grid); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrTooLarge, pl.Name(), err)
	}
	if err := r.Dispatch(pl, push, grid, bufs...); err != nil {
		return fmt.Errorf("vkattn: %w", err)
	}
	return nil
}

// NaiveScratchBytes is the naive kernel's score matrix: 4·B·Hq·Nq·Nk bytes.
func NaiveScratchBytes(p *spec.Problem) int64 {
	return 4 * int64(p.B) * int64(p.Hq) * int64(p.Nq) * int64(p.Nk)
}

// BackwardScratchBytes is the backward's extra device memory: the float32
// D = rowsum(dO∘O) of every query row, 4·B·Hq·Nq bytes.
func BackwardScratchBytes(p *spec.Problem) int64 { return 4 * int64(p.B) * int64(p.Hq) * int64(p.Nq) }

// checkNaive refuses problems whose naive score matrix does not fit.
func (b *Backend) checkNaive(p *spec.Problem) error {
	n := NaiveScratchBytes(p)
	if n/4 > MaxElements {
		return fmt.Errorf("%w: naive kernel: score matrix B·Hq·Nq·Nk = %d elements exceeds 32-bit offsets; use the flash kernel",
			ErrTooLarge, n/4)
	}
	if n > b.maxBuf {
		return fmt.Errorf("%w: naive kernel: score matrix B·Hq·Nq·Nk·4 = %d bytes exceeds the largest storage buffer of %s (%d bytes); use the flash kernel",
			ErrTooLarge, n, b.info.Name, b.maxBuf)
	}
	return nil
}

// recordForward records the forward kernel(s) of p.
func (b *Backend) recordForward(r *device.Recorder, s *scratch, p *spec.Problem, dt DType, q, k, v, o, lse *device.Buffer) error {
	pc := params(p)
	push := pc.Bytes()
	if ok, err := b.recordFlashCM(r, p, dt, push, q, k, v, o, lse); ok || err != nil {
		return err
	}
	switch b.kernel {
	case shaders.KernelNaive:
		if err := b.checkNaive(p); err != nil {
			return err
		}
		c, err := b.Config(shaders.KernelNaive, p.D, p.Dv, dt)
		if err != nil {
			return err
		}
		sc, err := s.get(NaiveScratchBytes(p))
		if err != nil {
			return err
		}
		grid := forwardGrid(shaders.KernelNaive, p, c)
		for pass := range naivePasses {
			pl, err := b.pipe(shaders.KernelNaive, dt, c, p.D, p.Dv, pass)
			if err != nil {
				return err
			}
			if pass > 0 {
				r.Barrier()
			}
			if err := b.dispatch(r, pl, push, grid, q, k, v, o, lse, sc); err != nil {
				return err
			}
		}
		return nil
	case shaders.KernelMinimal, shaders.KernelFlash:
		c, _, err := b.configFor(context.Background(), b.kernel, p, dt)
		if err != nil {
			return err
		}
		pl, err := b.pipe(b.kernel, dt, c, p.D, p.Dv, 0)
		if err != nil {
			return err
		}
		return b.dispatch(r, pl, push, forwardGrid(b.kernel, p, c), q, k, v, o, lse)
	}
	return fmt.Errorf("%w: kernel %q", ErrInvalid, b.kernel)
}

// recordBackward records bwd_pre, a barrier, then the dK/dV and dQ
// kernels (independent: both only read what bwd_pre and the forward
// wrote): bwd_cm_dkdv + bwd_cm_dq where the coopmat backward applies,
// bwd_dkdv + bwd_dq otherwise. Every pipeline is resolved before anything
// is recorded.
func (b *Backend) recordBackward(r *device.Recorder, s *scratch, p *spec.Problem, dt DType, q, k, v, o, lse, do, dq, dk, dv *device.Buffer) error {
	pc := params(p)
	push := pc.Bytes()
	cpre, err := b.Config(shaders.KernelBwdPre, p.D, p.Dv, dt)
	if err != nil {
		return err
	}
	ppre, err := b.pipe(shaders.KernelBwdPre, dt, cpre, p.D, p.Dv, 0)
	if err != nil {
		return err
	}
	plan, cm, err := b.bwdCMPlanFor(context.Background(), p, dt)
	if err != nil {
		return err
	}
	var pkv, pq *device.Pipeline
	var gkv, gq [3]uint32
	if cm {
		vec := cmVec(p, pc)
		if pkv, err = b.bwdCMPipe(plan.cm, plan.l, true, plan.kv, p, vec); err != nil {
			return err
		}
		if pq, err = b.bwdCMPipe(plan.cm, plan.l, false, plan.dq, p, vec); err != nil {
			return err
		}
		gkv, gq = bwdCMGrids(p, plan)
	} else {
		ckv, _, err := b.configFor(context.Background(), shaders.KernelBwdDKDV, p, dt)
		if err != nil {
			return err
		}
		cq, _, err := b.configFor(context.Background(), shaders.KernelBwdDQ, p, dt)
		if err != nil {
			return err
		}
		if pkv, err = b.pipe(shaders.KernelBwdDKDV, dt, ckv, p.D, p.Dv, 0); err != nil {
			return err
		}
		if pq, err = b.pipe(shaders.KernelBwdDQ, dt, cq, p.D, p.Dv, 0); err != nil {
			return err
		}
		g := bwdGrids(p, cpre, ckv, cq)
		gkv, gq = g[1], g[2]
	}
	dbuf, err := s.get(BackwardScratchBytes(p))
	if err != nil {
		return err
	}
	if err := b.dispatch(r, ppre, push, shaders.BwdPreGrid(p.B, p.Hq, p.Nq, cpre.BR), o, do, dbuf); err != nil {
		return err
	}
	r.Barrier()
	if err := b.dispatch(r, pkv, push, gkv, q, k, v, do, lse, dbuf, dk, dv); err != nil {
		return err
	}
	return b.dispatch(r, pq, push, gq, q, k, v, do, lse, dbuf, dq)
}
