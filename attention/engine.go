package attention

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Config chooses and configures the backend of an Engine.
type Config struct {
	// Backend: Auto (default) uses a Vulkan device when one can be opened
	// and falls back to the CPU otherwise; CPU or Vulkan force one (Vulkan
	// fails with ErrBackend when no device exists).
	Backend BackendKind
	// Device selects the Vulkan device: "" or "best", an index ("0"), a
	// name substring, or a vendor ("nvidia", "amd", "intel", "lavapipe").
	Device string
	// Kernel selects the Vulkan forward kernel: "" (the fastest the device
	// supports: flash_cm for float16 on devices with cooperative matrices,
	// flash otherwise), "flash", "flash_cm" (float16 forwards on cooperative
	// matrices, flash for float32; opening fails without device support),
	// "minimal" or "naive".
	Kernel string
	// Validation enables the Khronos validation layer; its messages are
	// collected and reported by Close.
	Validation bool
	// Workers bounds the CPU backend's goroutines (0: GOMAXPROCS).
	Workers int
	// TuneCache is the tune cache file (written by `flashvk tune`) whose
	// per-device tuned tile configurations the Vulkan backend uses: "" the
	// default (os.UserCacheDir()/flashvk/tune-v1.json, or
	// $FLASHVK_TUNE_CACHE; none when FLASHVK_TUNE=off), "off" none. A
	// missing, corrupt or foreign file, or a configuration invalid on the
	// device, leaves the defaults in use (see vkattn.Backend.TuneInfo).
	TuneCache string
}

// Engine runs attention on one backend. It is safe for concurrent use;
// Close it when done.
type Engine struct {
	b      Backend
	closed atomic.Bool
	once   sync.Once
	err    error
	// fallback records why Auto did not choose Vulkan (empty otherwise).
	fallback string
}

// Open starts an engine on the backend cfg selects. With Backend Auto the
// environment variable FLASHVK_BACKEND ("cpu", "vulkan" or "auto")
// overrides the choice; Auto tries Vulkan and falls back to the CPU,
// recording why in Fallback.
func Open(cfg Config) (*Engine, error) {
	kind := cfg.Backend
	if kind == Auto {
		switch env := strings.ToLower(strings.TrimSpace(os.Getenv("FLASHVK_BACKEND"))); env {
		case "", "auto":
		case "cpu":
			kind = CPU
		case "vulkan", "vk":
			kind = Vulkan
		default:
			return nil, fmt.Errorf("attention: FLASHVK_BACKEND=%q (want cpu, vulkan or auto): %w", env, ErrOption)
		}
	}
	if err := checkKernelName(cfg.Kernel); err != nil {
		return nil, err
	}
	switch kind {
	case CPU:
		return NewEngine(newCPUBackend(cfg.Workers)), nil
	case Vulkan:
		b, err := openVulkan(cfg)
		if err != nil {
			return nil, err
		}
		return NewEngine(b), nil
	case Auto:
		b, err := openVulkan(cfg)
		if err == nil {
			return NewEngine(b), nil
		}
		e := NewEngine(newCPUBackend(cfg.Workers))
		e.fallback = err.Error()
		return e, nil
	}
	return nil, fmt.Errorf("attention: config: backend %v: %w", cfg.Backend, ErrOption)
}

// NewEngine wraps a Backend: the engine validates every call before the
// backend sees it.
func NewEngine(b Backend) *Engine { return &Engine{b: b} }

// Info describes the engine's backend.
func (e *Engine) Info() BackendInfo { return e.b.Info() }

// Fallback explains why an Auto engine runs on the CPU ("" when it does not
// or when the CPU was asked for).
func (e *Engine) Fallback() string { return e.fallback }

// Close releases the backend. It is safe to call more than once; calls
// after Close fail with ErrClosed.
func (e *Engine) Close() error {
	e.once.Do(func() {
		e.closed.Store(true)
		e.err = e.b.Close()
	})
	return e.err
}

func (e *Engine) check(ctx context.Context) error {
	if e == nil || e.closed.Load() {
		return fmt.Errorf("attention: engine: %w", ErrClosed)
	}
	if ctx == nil {
		return fmt.Errorf("attention: ctx: nil context: %w", ErrOption)
	}
	return ctx.Err()
}

func (e *Engine) supports(dt DType) error {
	if !slices.Contains(e.b.Info().DTypes, dt) {
		return fmt.Errorf("attention: q: %v not supported by backend %s: %w", dt, e.b.Info().Name, ErrDType)
	}
	return nil
}

// Output is the result of a forward call.
type Output struct {
	// O is [B, Nq, Hq, Dv] in q's dtype, laid out like q (BHSD when q is
	// dense BHSD, else BSHD).
	O Tensor
	// LSE is the natural-log log-sum-exp of each row's scaled scores,
	// contiguous [B, Hq, Nq]; −Inf for a row that sees no key.
	LSE []float32
}

// Forward computes O = softmax(scale·QKᵀ + mask)·V and the LSE. Q is
// [B, Nq, Hq, D], K [B, Nk, Hkv, D], V [B, Nk, Hkv, Dv] (logical shapes;
// any strides), Hq a multiple of Hkv.
func (e *Engine) Forward(ctx context.Context, q, k, v Tensor, opt Options) (*Output, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	p, err := problem(q, k, v, Tensor{}, nil, opt, false)
	if err != nil {
		return nil, err
	}
	o, err := NewTensor(q.DType(), outShape(p), layoutOf(q))
	if err != nil {
		return nil, err
	}
	out := &Output{O: o, LSE: make([]float32, p.B*p.Hq*p.Nq)}
	if err := e.ForwardInto(ctx, q, k, v, out.O, out.LSE, opt); err != nil {
		return nil, err
	}
	return out, nil
}

// ForwardInto is Forward writing into caller-provided O (any non-overlapping
// strides) and LSE (length B·Hq·Nq).
func (e *Engine) ForwardInto(ctx context.Context, q, k, v, o Tensor, lse []float32, opt Options) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	p, err := problem(q, k, v, o, lse, opt, true)
	if err != nil {
		return err
	}
	if err := e.supports(q.DType()); err != nil {
		return err
	}
	return e.b.Forward(ctx, p, &ForwardArgs{Q: q, K: k, V: v, O: o, LSE: lse})
}

// Grads are the results of a backward call: dQ like Q, dK like K, dV like V
// (dK and dV summed over the query heads that share each key/value head).
type Grads struct{ DQ, DK, DV Tensor }

// Backward computes dQ, dK and dV from the forward's inputs, its outputs O
// and LSE, and the output gradient dO (same shape as O).
func (e *Engine) Backward(ctx context.Context, q, k, v, o Tensor, lse []float32, do Tensor, opt Options) (*Grads, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	if _, err := problem(q, k, v, o, lse, opt, true); err != nil {
		return nil, err
	}
	var g Grads
	var err error
	for _, a := range []struct {
		dst *Tensor
		src Tensor
	}{{&g.DQ, q}, {&g.DK, k}, {&g.DV, v}} {
		if *a.dst, err = NewTensor(q.DType(), a.src.Shape, layoutOf(a.src)); err != nil {
			return nil, err
		}
	}
	if err := e.BackwardInto(ctx, q, k, v, o, lse, do, g.DQ, g.DK, g.DV, opt); err != nil {
		return nil, err
	}
	return &g, nil
}

// BackwardInto is Backward writing into caller-provided gradients.
func (e *Engine) BackwardInto(ctx context.Context, q, k, v, o Tensor, lse []float32, do, dq, dk, dv Tensor, opt Options) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	p, err := problem(q, k, v, o, lse, opt, true)
	if err != nil {
		return err
	}
	dt := q.DType()
	if err := e.supports(dt); err != nil {
		return err
	}
	dos, err := checkLike("do", do, o.Shape, dt, false)
	if err != nil {
		return err
	}
	dqs, err := checkLike("dq", dq, q.Shape, dt, true)
	if err != nil {
		return err
	}
	dks, err := checkLike("dk", dk, k.Shape, dt, true)
	if err != nil {
		return err
	}
	dvs, err := checkLike("dv", dv, v.Shape, dt, true)
	if err != nil {
		return err
	}
	a := &BackwardArgs{Q: q, K: k, V: v, O: o, LSE: lse, DO: do, DQ: dq, DK: dk, DV: dv}
	if dos == p.O && dqs == p.Q && dks == p.K && dvs == p.V {
		return e.b.Backward(ctx, p, a)
	}
	// The backends take gradients laid out like their primals: repack
	// everything densely (BSHD), run, and scatter the gradients back.
	dense := &BackwardArgs{
		Q: densify(q), K: densify(k), V: densify(v), O: densify(o), LSE: lse, DO: densify(do),
	}
	dense.DQ, dense.DK, dense.DV = zerosLike(dq), zerosLike(dk), zerosLike(dv)
	dp := *p
	dp.Q, dp.K, dp.V, dp.O = dense.Q.Strides, dense.K.Strides, dense.V.Strides, dense.O.Strides
	if err := e.b.Backward(ctx, &dp, dense); err != nil {
		return err
	}
	scatter(dq, dense.DQ)
	scatter(dk, dense.DK)
	scatter(dv, dense.DV)
	return nil
}
