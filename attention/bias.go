package attention

import (
	"fmt"
	"math"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

// Bias is an additive bias on the attention scores — PyTorch SDPA's
// float attn_mask — or, as a bias of 0 and −Inf, a boolean mask (SDPA's
// boolean attn_mask; KeepMask builds one). Its logical shape is
// Shape{B: 1 or B, S: 1 or Nq, H: 1 or Hq, D: Nk}: a leading dimension
// of size 1 broadcasts the bias over the batch, the queries or the query
// heads (Nq and Nk the longest sequences' lengths for packed sequences,
// whose rows and keys it indexes within each sequence). The element of
// sequence b, head h, query row i and key j is added to that pair's score
// after the softcap and ALiBi (Options); an element of −Inf hides the key
// from the row exactly as the causal mask does, and a row whose keys are
// all hidden is empty (O = 0, LSE = −Inf). A NaN or +Inf element is not
// refused: it makes its score NaN or +Inf, with IEEE arithmetic's
// consequences for the row.
type Bias struct {
	// Tensor is the bias of host calls (Forward, ForwardInto, Backward,
	// BackwardInto, Benchmark), Float32 or the call's storage type, any
	// strides (keys contiguous): a contiguous [B, H, Nq, Nk] array is
	// FromFloat32(data, Shape{B: B, S: Nq, H: H, D: Nk}, BHSD).
	Tensor Tensor
	// Device is the bias of DeviceTensor calls (ForwardDevice,
	// BackwardDevice, TrainStep), shaped as Tensor.
	Device *DeviceTensor
	// Grad asks the backward for dBias, the gradient with respect to the
	// bias, in its dtype and shape (summed over the dimensions it
	// broadcasts): Backward returns it as Grads.DBias, BackwardInto
	// writes GradTensor and the DeviceTensor calls GradDevice (each
	// required then; both shaped like the bias). Forward calls ignore it.
	// The sum over what the bias broadcasts is deterministic, the same
	// bits every run: on Vulkan the dS of every (sequence, head, row,
	// key) goes to a float32 scratch first, a chunk of (sequence, head)
	// planes of Nq·Nk elements at a time, at most 1 GiB (or one plane
	// where one is larger; one plane must fit a storage binding, 4 GiB on
	// NVIDIA, and ErrShape says so before anything runs), summed into
	// dBias in a fixed order whatever the chunking; a bias with all of B,
	// Hq and Nq needs none.
	Grad       bool
	GradTensor Tensor
	GradDevice *DeviceTensor
}

// KeepMask returns the bias of a boolean mask (true: attend, false:
// hide the key): 0 where keep is true and −Inf where it is false, in
// dtype dt, shape s and layout l (keep holds s.Len() values in that
// layout's order: BHSD for a row-major [B, H, Nq, Nk] mask).
func KeepMask(keep []bool, s Shape, l Layout, dt DType) (Tensor, error) {
	t, err := NewTensor(dt, s, l)
	if err != nil {
		return Tensor{}, err
	}
	if len(keep) != s.Len() {
		return Tensor{}, fmt.Errorf("attention: keep: %d values for shape %v (%d): %w", len(keep), s, s.Len(), ErrLength)
	}
	inf := float32(math.Inf(-1))
	for i, k := range keep {
		if k {
			continue
		}
		switch d := t.Data.(type) {
		case []float32:
			d[i] = inf
		case []float16.Float16:
			d[i] = float16.Inf(-1)
		case []bfloat16.BFloat16:
			d[i] = bfloat16.FromFloat32(inf)
		}
	}
	return t, nil
}

// biasView is the shape, strides and dtype of a bias or dBias operand.
type biasView struct {
	shape Shape
	st    Strides
	dt    DType
}

// hostBias checks opt.Bias's host tensors for a host call and returns
// their views (dBias's only when grad: a backward that asks for it);
// nil without a bias.
func hostBias(opt Options, grad bool) (bias, dbias *biasView, err error) {
	x := opt.Bias
	if x == nil {
		return nil, nil, nil
	}
	if x.Tensor.Data == nil {
		return nil, nil, fmt.Errorf("attention: options: bias: no Tensor (host calls read Bias.Tensor; Bias.Device is for DeviceTensor calls): %w", ErrOption)
	}
	st, err := checkTensor("bias", x.Tensor, 0, false, 0)
	if err != nil {
		return nil, nil, err
	}
	bias = &biasView{x.Tensor.Shape, st, x.Tensor.DType()}
	if !grad || !x.Grad {
		return bias, nil, nil
	}
	if x.GradTensor.Data == nil {
		return nil, nil, fmt.Errorf("attention: options: bias: Grad without a GradTensor to write dBias to: %w", ErrOption)
	}
	if x.GradTensor.Shape != bias.shape {
		return nil, nil, fmt.Errorf("attention: dbias: shape %v, want the bias's %v: %w", x.GradTensor.Shape, bias.shape, ErrShape)
	}
	gst, err := checkTensor("dbias", x.GradTensor, bias.dt, true, 0)
	if err != nil {
		return nil, nil, err
	}
	return bias, &biasView{x.GradTensor.Shape, gst, bias.dt}, nil
}

// deviceBias is hostBias for a DeviceTensor call of engine e.
func (e *Engine) deviceBias(opt Options, grad bool) (bias, dbias *biasView, err error) {
	x := opt.Bias
	if x == nil {
		return nil, nil, nil
	}
	if x.Device == nil {
		return nil, nil, fmt.Errorf("attention: options: bias: no Device tensor (DeviceTensor calls read Bias.Device; Bias.Tensor is for host calls): %w", ErrOption)
	}
	if err := e.use("bias", x.Device); err != nil {
		return nil, nil, err
	}
	bias = &biasView{x.Device.shape, x.Device.st, x.Device.dt}
	if !grad || !x.Grad {
		return bias, nil, nil
	}
	if x.GradDevice == nil {
		return nil, nil, fmt.Errorf("attention: options: bias: Grad without a GradDevice to write dBias to: %w", ErrOption)
	}
	if err := e.use("dbias", x.GradDevice); err != nil {
		return nil, nil, err
	}
	if err := deviceLike("dbias", x.GradDevice, bias.shape, bias.dt); err != nil {
		return nil, nil, err
	}
	if x.GradDevice == x.Device {
		return nil, nil, fmt.Errorf("attention: dbias: the same device tensor is also passed as bias: %w", ErrOption)
	}
	return bias, &biasView{x.GradDevice.shape, x.GradDevice.st, x.GradDevice.dt}, nil
}

// planBias is the bias view of a planning call (Plan, Flops): the host
// tensor's shape and dtype when set, else the device tensor's (only
// their shapes are read), with dBias's when grad.
func planBias(opt Options, grad bool) (bias, dbias *biasView, err error) {
	x := opt.Bias
	switch {
	case x == nil:
		return nil, nil, nil
	case x.Tensor.Shape != (Shape{}):
		bias = &biasView{x.Tensor.Shape, x.Tensor.strides(), x.Tensor.DType()}
	case x.Device != nil:
		bias = &biasView{x.Device.shape, x.Device.st, x.Device.dt}
	default:
		return nil, nil, fmt.Errorf("attention: options: bias: neither Tensor nor Device is set: %w", ErrOption)
	}
	if err := checkShape("bias", bias.shape); err != nil {
		return nil, nil, err
	}
	if grad && x.Grad {
		dense := *bias
		dense.st = Contiguous(bias.shape, BHSD)
		dbias = &dense
	}
	return bias, dbias, nil
}

// attachBias checks the bias (and dBias) views against problem p of
// storage dt and sets p.Ext.Bias (nil bias: nothing).
func attachBias(p *spec.Problem, dt DType, bias, dbias *biasView) error {
	if bias == nil {
		return nil
	}
	s := bias.shape
	switch {
	case s.B != 1 && s.B != p.B:
		return fmt.Errorf("attention: bias: batch %d, want 1 or B = %d: %w", s.B, p.B, ErrShape)
	case s.S != 1 && s.S != p.Nq:
		return fmt.Errorf("attention: bias: %d query rows, want 1 or Nq = %d: %w", s.S, p.Nq, ErrShape)
	case s.H != 1 && s.H != p.Hq:
		return fmt.Errorf("attention: bias: %d heads, want 1 or Hq = %d: %w", s.H, p.Hq, ErrShape)
	case s.D != p.Nk:
		return fmt.Errorf("attention: bias: %d keys, want Nk = %d: %w", s.D, p.Nk, ErrShape)
	case bias.dt != Float32 && bias.dt != dt:
		return fmt.Errorf("attention: bias: %v, want float32 or the operands' %v: %w", bias.dt, dt, ErrDType)
	}
	// A dimension of size 1 broadcasts: stride 0.
	st := func(n, stride int) int {
		if n == 1 {
			return 0
		}
		return stride
	}
	x := &spec.Bias{DType: bias.dt, Batch: st(s.B, bias.st.Batch), Head: st(s.H, bias.st.Head), Row: st(s.S, bias.st.Seq)}
	if dbias != nil {
		x.Grad = true
		x.GradBatch, x.GradHead, x.GradRow = st(s.B, dbias.st.Batch), st(s.H, dbias.st.Head), st(s.S, dbias.st.Seq)
	}
	p.Ext.Bias = x
	return nil
}
