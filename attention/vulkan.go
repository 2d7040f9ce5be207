package attention

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/vkattn"
	"github.com/x448/float16"
)

// vulkanBackend adapts vkattn (the Vulkan kernels) to Backend and
// Benchmarker. Host tensors are uploaded as they are (their strides go to
// the kernels), outputs downloaded into their views.
type vulkanBackend struct {
	vk         *vkattn.Backend
	info       BackendInfo
	validation bool
}

var _ Benchmarker = (*vulkanBackend)(nil)

func checkKernelName(k string) error {
	switch k {
	case "", "flash", "flash_cm", "minimal", "naive":
		return nil
	}
	return fmt.Errorf("attention: config: kernel %q (want flash, flash_cm, minimal or naive): %w", k, ErrOption)
}

// openVulkan opens the Vulkan backend cfg describes; errors wrap ErrBackend
// and the device's error.
func openVulkan(cfg Config) (*vulkanBackend, error) {
	if err := checkKernelName(cfg.Kernel); err != nil {
		return nil, err
	}
	vk, err := vkattn.Open(vkattn.Options{Device: cfg.Device, Kernel: cfg.Kernel, Validation: cfg.Validation, TuneCache: cfg.TuneCache})
	if err != nil {
		return nil, fmt.Errorf("attention: backend vulkan: %w: %w", err, ErrBackend)
	}
	di := vk.Info()
	b := &vulkanBackend{vk: vk, validation: cfg.Validation}
	b.info = BackendInfo{
		Kind: Vulkan, Name: "vulkan", Device: di.Name,
		Driver: strings.TrimSpace(di.DriverName + " " + di.DriverInfo),
		Kernel: vk.Kernel(),
	}
	for _, dt := range vk.DTypes() {
		switch dt {
		case vkattn.F32:
			b.info.DTypes = append(b.info.DTypes, Float32)
		case vkattn.F16:
			b.info.DTypes = append(b.info.DTypes, Float16)
		case vkattn.BF16:
			b.info.DTypes = append(b.info.DTypes, BFloat16)
		}
	}
	return b, nil
}

// vkDType is the vkattn storage type of dt (F32 for an unknown dt: callers
// validated it).
func vkDType(dt DType) vkattn.DType {
	switch dt {
	case Float16:
		return vkattn.F16
	case BFloat16:
		return vkattn.BF16
	}
	return vkattn.F32
}

func (b *vulkanBackend) Info() BackendInfo {
	i := b.info
	i.DTypes = append([]DType(nil), i.DTypes...)
	return i
}

// Close closes the device; with validation on it reports the validation
// layer's messages as an error.
func (b *vulkanBackend) Close() error {
	err := b.vk.Close()
	if b.validation {
		if msgs := b.vk.ValidationErrors(); len(msgs) > 0 {
			err = errors.Join(err, fmt.Errorf("attention: vulkan: %d validation message(s):\n%s", len(msgs), strings.Join(msgs, "\n")))
		}
	}
	return err
}

// Vulkan returns the engine's vkattn backend, or nil when the engine does
// not run on Vulkan (for tools that want its tile table or device).
func (e *Engine) Vulkan() *vkattn.Backend {
	if b, ok := e.b.(*vulkanBackend); ok {
		return b.vk
	}
	return nil
}

// vkErr maps a vkattn or device error onto the package's sentinels.
func vkErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("attention: vulkan: %w", err)
	}
	var s error
	switch {
	case errors.Is(err, vkattn.ErrClosed):
		s = ErrClosed
	case errors.Is(err, vkattn.ErrTooLarge):
		s = ErrShape
	case errors.Is(err, vkattn.ErrInvalid):
		s = ErrOption
	default:
		s = ErrBackend
	}
	return fmt.Errorf("attention: vulkan: %w: %w", err, s)
}

func (b *vulkanBackend) Forward(ctx context.Context, p *Problem, a *ForwardArgs) error {
	switch q := a.Q.Data.(type) {
	case []float32:
		return vkErr(vkattn.ForwardHost(ctx, b.vk, p, q, a.K.Data.([]float32), a.V.Data.([]float32), a.O.Data.([]float32), a.LSE))
	case []float16.Float16:
		return vkErr(vkattn.ForwardHost(ctx, b.vk, p, q, a.K.Data.([]float16.Float16), a.V.Data.([]float16.Float16), a.O.Data.([]float16.Float16), a.LSE))
	case []bfloat16.BFloat16:
		return vkErr(vkattn.ForwardHost(ctx, b.vk, p, q, a.K.Data.([]bfloat16.BFloat16), a.V.Data.([]bfloat16.BFloat16), a.O.Data.([]bfloat16.BFloat16), a.LSE))
	}
	return fmt.Errorf("attention: vulkan: q: data of type %T: %w", a.Q.Data, ErrDType)
}

func (b *vulkanBackend) Backward(ctx context.Context, p *Problem, a *BackwardArgs) error {
	switch q := a.Q.Data.(type) {
	case []float32:
		f := func(t Tensor) []float32 { return t.Data.([]float32) }
		return vkErr(vkattn.BackwardHost(ctx, b.vk, p, q, f(a.K), f(a.V), f(a.O), a.LSE, f(a.DO), f(a.DQ), f(a.DK), f(a.DV)))
	case []float16.Float16:
		f := func(t Tensor) []float16.Float16 { return t.Data.([]float16.Float16) }
		return vkErr(vkattn.BackwardHost(ctx, b.vk, p, q, f(a.K), f(a.V), f(a.O), a.LSE, f(a.DO), f(a.DQ), f(a.DK), f(a.DV)))
	case []bfloat16.BFloat16:
		f := func(t Tensor) []bfloat16.BFloat16 { return t.Data.([]bfloat16.BFloat16) }
		return vkErr(vkattn.BackwardHost(ctx, b.vk, p, q, f(a.K), f(a.V), f(a.O), a.LSE, f(a.DO), f(a.DQ), f(a.DK), f(a.DV)))
	}
	return fmt.Errorf("attention: vulkan: q: data of type %T: %w", a.Q.Data, ErrDType)
}

// Benchmark keeps o.Rotate copies of the inputs resident and times each
// call with GPU timestamps around its kernels (see vkattn.Bench).
func (b *vulkanBackend) Benchmark(ctx context.Context, p *Problem, a *BackwardArgs, o BenchOptions) (*BenchResult, error) {
	opt := vkattn.BenchOptions{Warmup: o.Warmup, Iters: o.Iters, Rotate: o.Rotate, Backward: o.Backward, PerKernel: o.PerKernel}
	var r *vkattn.BenchResult
	var err error
	switch q := a.Q.Data.(type) {
	case []float32:
		f := func(t Tensor) []float32 { d, _ := t.Data.([]float32); return d }
		r, err = vkattn.BenchmarkHost(ctx, b.vk, p, opt, q, f(a.K), f(a.V), f(a.O), f(a.DO), a.LSE)
	case []float16.Float16:
		f := func(t Tensor) []float16.Float16 { d, _ := t.Data.([]float16.Float16); return d }
		r, err = vkattn.BenchmarkHost(ctx, b.vk, p, opt, q, f(a.K), f(a.V), f(a.O), f(a.DO), a.LSE)
	case []bfloat16.BFloat16:
		f := func(t Tensor) []bfloat16.BFloat16 { d, _ := t.Data.([]bfloat16.BFloat16); return d }
		r, err = vkattn.BenchmarkHost(ctx, b.vk, p, opt, q, f(a.K), f(a.V), f(a.O), f(a.DO), a.LSE)
	default:
		return nil, fmt.Errorf("attention: vulkan: q: data of type %T: %w", a.Q.Data, ErrDType)
	}
	if err != nil {
		return nil, vkErr(err)
	}
	return &BenchResult{Times: r.Times, Clock: r.Clock, Retimed: r.Retimed, Unsteady: r.Unsteady, Kernels: r.Kernels}, nil
}
