package attention

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/flashvk/flashvk/internal/spec"
)

// DeviceTensor is an operand that lives on the engine's device (a Vulkan
// storage buffer), so that repeated calls and training steps move no data
// between host and device. On the CPU backend it simply wraps host memory,
// so the same code runs everywhere. It is stored densely in its Layout.
//
// The LSE is a Float32 DeviceTensor of shape LSEShape(B, Hq, Nq) in BHSD
// layout (contiguous [B, Hq, Nq]). Gradients share their primals' layout
// (dO O's, dQ Q's, dK K's, dV V's).
//
// A DeviceTensor is safe for concurrent use; Close it when done (closing
// the engine frees the device memory of tensors still open).
type DeviceTensor struct {
	e      *Engine
	dt     DType
	shape  Shape
	layout Layout
	st     Strides
	dev    deviceBuffer // on a deviceBackend
	host   Tensor       // other backends
	closed atomic.Bool
}

// deviceBackend is a backend whose operands can live on its device.
type deviceBackend interface {
	newDeviceBuffer(dt DType, s Shape, st Strides) (deviceBuffer, error)
	// The passes' bias and dBias are x's (nil without them).
	forwardDevice(ctx context.Context, p *spec.Problem, q, k, v, o, lse *DeviceTensor, x biasTensors) error
	backwardDevice(ctx context.Context, p *spec.Problem, q, k, v, o, lse, do, dq, dk, dv *DeviceTensor, x biasTensors) error
	stepDevice(ctx context.Context, p *spec.Problem, q, k, v, do, o, lse, dq, dk, dv *DeviceTensor, x biasTensors) error
	// kvDevice runs a KV-cache call (p.KV set): the append of newK and
	// newV (nil when p.KV.New is 0) into the cache k, v, then attention.
	kvDevice(ctx context.Context, p *spec.Problem, q, k, v, newK, newV, o, lse *DeviceTensor) error
}

// deviceBuffer is a DeviceTensor's storage on a deviceBackend; transfers
// move the first n elements of a dense host tensor of its dtype.
type deviceBuffer interface {
	upload(ctx context.Context, src Tensor, n int) error
	download(ctx context.Context, dst Tensor, n int) error
	close() error
}

// LSEShape is the shape of the LSE as a DeviceTensor (store it in BHSD
// layout): [B, Nq, Hq, 1], i.e. contiguous [B, Hq, Nq].
func LSEShape(b, hq, nq int) Shape { return Shape{B: b, S: nq, H: hq, D: 1} }

// NewDeviceTensor allocates a tensor of dtype dt and shape s stored densely
// in layout l on the engine's device (contents undefined on Vulkan, zero on
// the CPU).
func (e *Engine) NewDeviceTensor(dt DType, s Shape, l Layout) (*DeviceTensor, error) {
	if e == nil || e.closed.Load() {
		return nil, fmt.Errorf("attention: engine: %w", ErrClosed)
	}
	if err := checkShape("tensor", s); err != nil {
		return nil, err
	}
	if err := checkLayout("tensor", l); err != nil {
		return nil, err
	}
	if dt != Float32 && dt != Float16 && dt != BFloat16 {
		return nil, fmt.Errorf("attention: tensor: %v: %w", dt, ErrDType)
	}
	if err := e.supports(dt); err != nil {
		return nil, err
	}
	d := &DeviceTensor{e: e, dt: dt, shape: s, layout: l, st: Contiguous(s, l)}
	if db, ok := e.b.(deviceBackend); ok {
		buf, err := db.newDeviceBuffer(dt, s, d.st)
		if err != nil {
			return nil, fmt.Errorf("attention: tensor %v: %w", s, err)
		}
		d.dev = buf
		return d, nil
	}
	t, err := NewTensor(dt, s, l)
	if err != nil {
		return nil, err
	}
	d.host = t
	return d, nil
}

// DType is the element type.
func (d *DeviceTensor) DType() DType { return d.dt }

// Shape is the logical shape.
func (d *DeviceTensor) Shape() Shape { return d.shape }

// Layout is the memory order.
func (d *DeviceTensor) Layout() Layout { return d.layout }

// Close frees the tensor's device memory (after calls using it returned).
// It is safe to call twice; later uses fail with ErrClosed.
func (d *DeviceTensor) Close() error {
	if d == nil || d.closed.Swap(true) {
		return nil
	}
	if d.dev != nil {
		return d.dev.close()
	}
	return nil
}

// use checks that d is an open tensor of engine e; name is the argument.
func (e *Engine) use(name string, d *DeviceTensor) error {
	switch {
	case d == nil:
		return fmt.Errorf("attention: %s: nil device tensor: %w", name, ErrOption)
	case d.e != e:
		return fmt.Errorf("attention: %s: device tensor of another engine: %w", name, ErrOption)
	case d.closed.Load():
		return fmt.Errorf("attention: %s: device tensor: %w", name, ErrClosed)
	}
	return nil
}

// transferCheck checks a transfer between d and the host tensor t (named
// name; output when the transfer writes it) and returns t's strides.
func (d *DeviceTensor) transferCheck(ctx context.Context, op, name string, t Tensor, output bool) (Strides, error) {
	if d == nil {
		return Strides{}, fmt.Errorf("attention: %s: nil device tensor: %w", op, ErrOption)
	}
	if err := d.e.check(ctx); err != nil {
		return Strides{}, err
	}
	if err := d.e.use(op, d); err != nil {
		return Strides{}, err
	}
	return checkLike(name, t, d.shape, d.dt, output)
}

// Upload copies src (same shape and dtype, any strides) into d.
func (d *DeviceTensor) Upload(ctx context.Context, src Tensor) error {
	st, err := d.transferCheck(ctx, "upload", "src", src, false)
	if err != nil {
		return err
	}
	if d.dev == nil {
		scatter(d.host, src)
		return nil
	}
	if !sameAddressing(d.shape, st, d.st) {
		dense, _ := NewTensor(d.dt, d.shape, d.layout)
		scatter(dense, src)
		src = dense
	}
	return d.dev.upload(ctx, src, d.shape.Len()) // d is dense: its extent is its length
}

// Download copies d into dst (same shape and dtype, any non-overlapping
// strides); elements of dst's slice outside its view are left alone.
func (d *DeviceTensor) Download(ctx context.Context, dst Tensor) error {
	st, err := d.transferCheck(ctx, "download", "dst", dst, true)
	if err != nil {
		return err
	}
	if d.dev == nil {
		scatter(dst, d.host)
		return nil
	}
	target := dst
	direct := sameAddressing(d.shape, st, d.st)
	if !direct {
		target, _ = NewTensor(d.dt, d.shape, d.layout)
	}
	if err := d.dev.download(ctx, target, d.shape.Len()); err != nil {
		return err
	}
	if !direct {
		scatter(dst, target)
	}
	return nil
}

// sameAddressing reports whether strides a and b address the same elements
// of shape s (strides of dimensions of extent 1 do not matter).
func sameAddressing(s Shape, a, b Strides) bool {
	return (s.B <= 1 || a.Batch == b.Batch) && (s.S <= 1 || a.Seq == b.Seq) && (s.H <= 1 || a.Head == b.Head)
}

type namedDT struct {
	name string
	t    *DeviceTensor
}

// deviceProblem validates device operands as problem validates host ones:
// the same checks, errors and sentinels.
func (e *Engine) deviceProblem(q, k, v, o, lse *DeviceTensor, opt Options) (*spec.Problem, error) {
	for _, a := range []namedDT{{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"lse", lse}} {
		if err := e.use(a.name, a.t); err != nil {
			return nil, err
		}
	}
	dt := q.dt
	if err := checkInputs(dt, []namedDT{{"q", q}, {"k", k}, {"v", v}}); err != nil {
		return nil, err
	}
	qs, ks, vs := q.shape, k.shape, v.shape
	p, err := newProblem(qs, ks, vs, q.st, k.st, v.st, opt)
	if err != nil {
		return nil, err
	}
	bias, _, err := e.deviceBias(opt, false)
	if err != nil {
		return nil, err
	}
	if err := attachBias(p, dt, bias, nil); err != nil {
		return nil, err
	}
	if err := deviceLike("o", o, outShape(p), dt); err != nil {
		return nil, err
	}
	p.O = o.st
	if err := e.checkLSE(lse, p); err != nil {
		return nil, err
	}
	return p, nil
}

// checkInputs checks device inputs against q's dtype dt and the head-dim
// bound.
func checkInputs(dt DType, args []namedDT) error {
	for _, a := range args {
		if a.t.dt != dt {
			return fmt.Errorf("attention: %s: %v, but q is %v (all operands share one dtype): %w", a.name, a.t.dt, dt, ErrDType)
		}
		if a.t.shape.D > MaxHeadDim {
			return fmt.Errorf("attention: %s: head dim %d > %d: %w", a.name, a.t.shape.D, MaxHeadDim, ErrShape)
		}
	}
	return nil
}

func deviceLike(name string, t *DeviceTensor, want Shape, dt DType) error {
	if t.dt != dt {
		return fmt.Errorf("attention: %s: %v, but q is %v (all operands share one dtype): %w", name, t.dt, dt, ErrDType)
	}
	if t.shape != want {
		return fmt.Errorf("attention: %s: shape %v, want %v: %w", name, t.shape, want, ErrShape)
	}
	return nil
}

func (e *Engine) checkLSE(lse *DeviceTensor, p *spec.Problem) error {
	want := lseShape(p)
	if err := deviceLike("lse", lse, want, Float32); err != nil {
		return err
	}
	if !sameAddressing(want, lse.st, Contiguous(want, BHSD)) {
		return fmt.Errorf("attention: lse: layout %v, want bhsd (contiguous [B, Hq, Nq]): %w", lse.layout, ErrStride)
	}
	return nil
}

// gradLike checks a gradient (or dO) against its primal: same shape,
// dtype and layout.
func (e *Engine) gradLike(name string, g *DeviceTensor, primal string, pt *DeviceTensor) error {
	if err := e.use(name, g); err != nil {
		return err
	}
	if err := deviceLike(name, g, pt.shape, pt.dt); err != nil {
		return err
	}
	if !sameAddressing(g.shape, g.st, pt.st) {
		return fmt.Errorf("attention: %s: layout %v differs from %s's %v (device gradients share their primals' layout): %w",
			name, g.layout, primal, pt.layout, ErrStride)
	}
	return nil
}

// distinctOutputs refuses an output passed twice or also as an input.
func distinctOutputs(outs, all []namedDT) error {
	for _, o := range outs {
		for _, a := range all {
			if a.name != o.name && a.t == o.t {
				return fmt.Errorf("attention: %s: the same device tensor is also passed as %s: %w", o.name, a.name, ErrOption)
			}
		}
	}
	return nil
}

// ForwardDevice is ForwardInto on device tensors: O and LSE are written on
// the device.
func (e *Engine) ForwardDevice(ctx context.Context, q, k, v, o, lse *DeviceTensor, opt Options) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	p, err := e.deviceProblem(q, k, v, o, lse, opt)
	if err != nil {
		return err
	}
	x := biasOf(opt, false)
	all := append([]namedDT{{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"lse", lse}}, x.named()...)
	if err := distinctOutputs(all[3:5], all); err != nil {
		return err
	}
	if err := e.supports(q.dt); err != nil {
		return err
	}
	if db, ok := e.b.(deviceBackend); ok {
		return db.forwardDevice(ctx, p, q, k, v, o, lse, x)
	}
	return e.b.Forward(ctx, p, &forwardArgs{Q: q.host, K: k.host, V: v.host, O: o.host, LSE: lse.host.Data.([]float32), Bias: x.bias.hostOf()})
}

// biasTensors are the bias and dBias device tensors of a call (nil
// where absent).
type biasTensors struct{ bias, dbias *DeviceTensor }

// biasOf is opt's bias (and, for a backward (grad) that asks for it,
// dBias) device tensors.
func biasOf(opt Options, grad bool) biasTensors {
	x := opt.Bias
	if x == nil {
		return biasTensors{}
	}
	t := biasTensors{bias: x.Device}
	if grad && x.Grad {
		t.dbias = x.GradDevice
	}
	return t
}

// named lists the tensors set, dBias (an output) first.
func (x biasTensors) named() []namedDT {
	var n []namedDT
	if x.dbias != nil {
		n = append(n, namedDT{"dbias", x.dbias})
	}
	if x.bias != nil {
		n = append(n, namedDT{"bias", x.bias})
	}
	return n
}

// hostOf is d's host tensor (a CPU engine's), the zero Tensor for nil.
func (d *DeviceTensor) hostOf() Tensor {
	if d == nil {
		return Tensor{}
	}
	return d.host
}

// backwardProblem validates the operands of BackwardDevice and TrainStep.
func (e *Engine) backwardProblem(q, k, v, o, lse, do, dq, dk, dv *DeviceTensor, opt Options) (*spec.Problem, error) {
	p, err := e.deviceProblem(q, k, v, o, lse, opt)
	if err != nil {
		return nil, err
	}
	bias, dbias, err := e.deviceBias(opt, true)
	if err != nil {
		return nil, err
	}
	if err := attachBias(p, q.dt, bias, dbias); err != nil {
		return nil, err
	}
	for _, g := range []struct {
		name, primal string
		g, p         *DeviceTensor
	}{{"do", "o", do, o}, {"dq", "q", dq, q}, {"dk", "k", dk, k}, {"dv", "v", dv, v}} {
		if err := e.gradLike(g.name, g.g, g.primal, g.p); err != nil {
			return nil, err
		}
	}
	if err := e.supports(q.dt); err != nil {
		return nil, err
	}
	return p, nil
}

// backwardCall checks a backward call on device tensors (BackwardDevice,
// or TrainStep when step: then O and LSE are written too) and returns its
// problem: the engine is open and ctx live, the shapes agree, and no
// output aliases another operand.
func (e *Engine) backwardCall(ctx context.Context, q, k, v, o, lse, do, dq, dk, dv *DeviceTensor, opt Options, step bool) (*spec.Problem, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	p, err := e.backwardProblem(q, k, v, o, lse, do, dq, dk, dv, opt)
	if err != nil {
		return nil, err
	}
	all := []namedDT{{"q", q}, {"k", k}, {"v", v}, {"do", do}, {"o", o}, {"lse", lse}, {"dq", dq}, {"dk", dk}, {"dv", dv}}
	outs := all[6:]
	if step {
		outs = all[4:]
	}
	x := biasOf(opt, true).named()
	if x != nil && x[0].name == "dbias" {
		outs = append(outs, x[0])
	}
	if err := distinctOutputs(outs, append(all, x...)); err != nil {
		return nil, err
	}
	return p, nil
}

// BackwardDevice is BackwardInto on device tensors. dO must have O's
// layout and dQ, dK, dV those of Q, K, V.
func (e *Engine) BackwardDevice(ctx context.Context, q, k, v, o, lse, do, dq, dk, dv *DeviceTensor, opt Options) error {
	p, err := e.backwardCall(ctx, q, k, v, o, lse, do, dq, dk, dv, opt, false)
	if err != nil {
		return err
	}
	x := biasOf(opt, true)
	if db, ok := e.b.(deviceBackend); ok {
		return db.backwardDevice(ctx, p, q, k, v, o, lse, do, dq, dk, dv, x)
	}
	return e.b.Backward(ctx, p, &backwardArgs{Q: q.host, K: k.host, V: v.host, O: o.host, LSE: lse.host.Data.([]float32),
		DO: do.host, DQ: dq.host, DK: dk.host, DV: dv.host, Bias: x.bias.hostOf(), DBias: x.dbias.hostOf()})
}

// TrainStep runs the forward (writing O and LSE) and the backward of dO
// (writing dQ, dK, dV) as one training step: on Vulkan in a single
// submission, O and LSE never leaving the device. The results are those
// of ForwardDevice followed by BackwardDevice.
func (e *Engine) TrainStep(ctx context.Context, q, k, v, do, o, lse, dq, dk, dv *DeviceTensor, opt Options) error {
	p, err := e.backwardCall(ctx, q, k, v, o, lse, do, dq, dk, dv, opt, true)
	if err != nil {
		return err
	}
	x := biasOf(opt, true)
	if db, ok := e.b.(deviceBackend); ok {
		return db.stepDevice(ctx, p, q, k, v, do, o, lse, dq, dk, dv, x)
	}
	lsed := lse.host.Data.([]float32)
	if err := e.b.Forward(ctx, p, &forwardArgs{Q: q.host, K: k.host, V: v.host, O: o.host, LSE: lsed, Bias: x.bias.hostOf()}); err != nil {
		return err
	}
	return e.b.Backward(ctx, p, &backwardArgs{Q: q.host, K: k.host, V: v.host, O: o.host, LSE: lsed,
		DO: do.host, DQ: dq.host, DK: dk.host, DV: dv.host, Bias: x.bias.hostOf(), DBias: x.dbias.hostOf()})
}
