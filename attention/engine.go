package attention

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config chooses and configures the backend of an Engine. Open fills the
// fields left at their zero value from the environment (see Open); an
// explicit value is never overridden.
type Config struct {
	// Backend: Auto (default) runs on a hardware Vulkan device (discrete,
	// integrated or virtual GPU) when there is one, else on the Go CPU
	// backend; a software Vulkan device (a CPU implementation such as
	// lavapipe) runs only when Device names it or Backend is Vulkan. CPU or
	// Vulkan force one (Vulkan fails with ErrBackend when no device opens).
	Backend BackendKind
	// Device selects the Vulkan device: "" (Auto: the best hardware
	// device; Vulkan: the best device), "best", "gpu", an index ("0"), a
	// name substring, or a vendor or driver ("nvidia", "amd", "intel",
	// "lavapipe"). A named device that does not exist is an error, never
	// another device or the CPU. Environment: FLASHVK_DEVICE.
	Device string
	// Kernel selects the Vulkan forward kernel: "" (the fastest the device
	// runs for each problem: flash_cm for float16 and bfloat16 on devices
	// with cooperative matrices, and for the float32 forward up to head
	// dim 128 where they include bfloat16 ones, flash otherwise), "flash",
	// "flash_cm",
	// "minimal" or "naive" (see Kernels). Naming one makes the engine
	// Vulkan, and a problem or device the kernel cannot run an error. The
	// CPU backend has no kernel choice: a Kernel with Backend CPU is an
	// error.
	Kernel string
	// Addressing is how the Vulkan kernels reach Q, K, V, O and the
	// gradients: "" or "auto" binds them, and reads an operand larger than
	// one binding reaches (the device's storage-buffer range: 4 GiB on
	// NVIDIA) through 64-bit buffer device addresses; "bindings" never uses
	// addresses (such operands are refused, or the host path splits the
	// batch); "addresses" always does (for tests and measurements; an
	// error on a device without them). LSE stays bound either way. Naming
	// "bindings" or "addresses" makes the engine Vulkan, as Kernel does.
	// Environment: FLASHVK_ADDRESSING.
	Addressing string
	// Validation enables the Khronos validation layer; its messages are
	// collected and reported by Close.
	Validation bool
	// PipelineStatistics asks the Vulkan driver for the compiler
	// statistics of every pipeline (VK_KHR_pipeline_executable_properties:
	// register count, spills, shared memory…, as the driver names them):
	// Plan then builds each launch's pipeline and fills its Statistics.
	// Off by default, since capturing them can slow pipeline creation.
	// A Vulkan device without the extension fails Open with ErrBackend
	// (DeviceInfo.PipelineStatistics says which have it); the CPU backend
	// has no pipelines, and its launches no statistics.
	PipelineStatistics bool
	// Workers bounds the CPU backend's goroutines (0: GOMAXPROCS).
	Workers int
	// TuneCache is the tune cache file (written by `flashvk tune`, see
	// TuneCache) whose tuned tile configurations for this device the Vulkan
	// backend uses: "" the default (DefaultTuneCachePath), TuneOff ("off")
	// none. A missing, corrupt or foreign file, or a configuration invalid
	// on the device, leaves the defaults in use, with a warning in
	// Engine.TuneInfo. Environment: FLASHVK_TUNE_CACHE=PATH, FLASHVK_TUNE=off.
	TuneCache string
	// VulkanLibrary is the Vulkan loader library to open ("":
	// libvulkan.so.1). Environment: FLASHVK_VULKAN_LIBRARY.
	VulkanLibrary string
	// PipelineCacheDir is where the driver's compiled pipelines are kept
	// between runs ("": os.UserCacheDir()/flashvk/pipelines; "off": not
	// kept). Environment: FLASHVK_PIPELINE_CACHE_DIR.
	PipelineCacheDir string
	// SpinWait is how long a wait for the GPU polls before blocking in
	// the driver (0: 200 µs on GPUs, none on CPU devices; negative: never).
	// Environment: FLASHVK_SPIN_WAIT (e.g. "50us").
	SpinWait time.Duration
	// Log receives validation messages and tune cache warnings (nil:
	// discarded; Engine.TuneInfo keeps the warnings).
	Log func(string)
}

// TuneOff as Config.TuneCache disables tuned configurations.
const TuneOff = "off"

// Engine runs attention on one backend. It is safe for concurrent use;
// Close it when done. Every method that takes a context stops when it
// ends (see Cancellation in the package documentation for how soon on
// each backend) and returns an error wrapping the context's error.
type Engine struct {
	b      backend
	closed atomic.Bool
	once   sync.Once
	err    error
	// fallback records why Auto did not choose Vulkan (empty otherwise).
	fallback string
}

// Open starts an engine on the backend cfg selects. Fields of cfg left at
// their zero value are first taken from the environment: FLASHVK_BACKEND
// ("cpu", "vulkan" or "auto", for Backend), FLASHVK_DEVICE,
// FLASHVK_TUNE_CACHE / FLASHVK_TUNE=off, FLASHVK_VULKAN_LIBRARY,
// FLASHVK_PIPELINE_CACHE_DIR, FLASHVK_SPIN_WAIT and FLASHVK_ADDRESSING.
// With Backend Auto, a named Device or Kernel (or Addressing "bindings"
// or "addresses") means Vulkan; otherwise Open tries the best
// hardware Vulkan device and runs on the CPU when there is none or it
// cannot be opened, saying why in Fallback.
func Open(cfg Config) (*Engine, error) {
	cfg, err := cfg.withEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if err := checkKernelName(cfg.Kernel); err != nil {
		return nil, err
	}
	if err := checkAddressing(cfg.Addressing); err != nil {
		return nil, err
	}
	vulkanOnly := cfg.Kernel != "" || (cfg.Addressing != "" && cfg.Addressing != "auto")
	switch cfg.Backend {
	case CPU:
		if cfg.Kernel != "" {
			return nil, fmt.Errorf("attention: config: kernel %q is a Vulkan kernel; the CPU backend has no kernel choice: %w", cfg.Kernel, ErrOption)
		}
		if vulkanOnly {
			return nil, fmt.Errorf("attention: config: addressing %q applies to the Vulkan kernels, not the CPU backend: %w", cfg.Addressing, ErrOption)
		}
		if cfg.Device != "" {
			return nil, fmt.Errorf("attention: config: device %q selects a Vulkan device; it does not apply to the CPU backend: %w", cfg.Device, ErrOption)
		}
		return newEngine(newCPUBackend(cfg.Workers)), nil
	case Vulkan:
		return openVulkanEngine(cfg)
	case Auto:
		if cfg.Device != "" || vulkanOnly {
			return openVulkanEngine(cfg)
		}
		b, why := openHardware(cfg)
		if b != nil {
			return newEngine(b), nil
		}
		e := newEngine(newCPUBackend(cfg.Workers))
		e.fallback = why
		return e, nil
	}
	return nil, fmt.Errorf("attention: config: backend %v: %w", cfg.Backend, ErrOption)
}

// Kernels lists the Vulkan forward kernel families Config.Kernel accepts.
func Kernels() []string { return []string{"flash", "flash_cm", "minimal", "naive"} }

// addressingModes are Config.Addressing's words.
var addressingModes = []string{"auto", "bindings", "addresses"}

func checkAddressing(a string) error {
	if a == "" || slices.Contains(addressingModes, a) {
		return nil
	}
	return fmt.Errorf("attention: config: addressing %q (want %s): %w", a, strings.Join(addressingModes, ", "), ErrOption)
}

func checkKernelName(k string) error {
	if k == "" || slices.Contains(Kernels(), k) {
		return nil
	}
	return fmt.Errorf("attention: config: kernel %q (want one of %s): %w", k, strings.Join(Kernels(), ", "), ErrOption)
}

// openHardware opens Auto's Vulkan device, the best hardware one, or says
// why there is none.
func openHardware(cfg Config) (backend, string) {
	devs, err := vulkanDevices(cfg)
	if err != nil {
		return nil, err.Error()
	}
	var software []string
	for _, d := range devs {
		if d.Software {
			software = append(software, fmt.Sprintf("%q", d.Name))
		}
	}
	if len(software) == len(devs) {
		return nil, fmt.Sprintf("no hardware Vulkan device; a software one runs only when named (Config.Device, --device lavapipe): %s",
			strings.Join(software, ", "))
	}
	hw := cfg
	hw.Device = "gpu"
	b, err := openVulkan(hw)
	if err != nil {
		return nil, err.Error()
	}
	return b, ""
}

func openVulkanEngine(cfg Config) (*Engine, error) {
	b, err := openVulkan(cfg)
	if err != nil {
		return nil, err
	}
	return newEngine(b), nil
}

// withEnv fills the zero fields of c from the environment (lookup is
// os.LookupEnv outside tests).
func (c Config) withEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	if c.Backend == Auto {
		switch v := strings.ToLower(get("FLASHVK_BACKEND")); v {
		case "", "auto":
		case "cpu":
			c.Backend = CPU
		case "vulkan", "vk":
			c.Backend = Vulkan
		default:
			return c, fmt.Errorf("attention: FLASHVK_BACKEND=%q (want cpu, vulkan or auto): %w", v, ErrOption)
		}
	}
	if c.Device == "" && c.Backend != CPU {
		c.Device = get("FLASHVK_DEVICE")
	}
	if c.TuneCache == "" {
		switch strings.ToLower(get("FLASHVK_TUNE")) {
		case "off", "0", "false", "no":
			c.TuneCache = TuneOff
		default:
			c.TuneCache = get("FLASHVK_TUNE_CACHE")
		}
	}
	if c.VulkanLibrary == "" {
		c.VulkanLibrary = get("FLASHVK_VULKAN_LIBRARY")
	}
	if c.Addressing == "" && c.Backend != CPU { // (as the device: a CPU engine has no addressing to choose)
		c.Addressing = strings.ToLower(get("FLASHVK_ADDRESSING"))
	}
	if c.PipelineCacheDir == "" {
		c.PipelineCacheDir = get("FLASHVK_PIPELINE_CACHE_DIR")
	}
	if v := get("FLASHVK_SPIN_WAIT"); c.SpinWait == 0 && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("attention: FLASHVK_SPIN_WAIT=%q: %v: %w", v, err, ErrOption)
		}
		c.SpinWait = d
		if d == 0 {
			c.SpinWait = -1
		}
	}
	return c, nil
}

func newEngine(b backend) *Engine { return &Engine{b: b} }

// Info describes the engine's backend.
func (e *Engine) Info() BackendInfo { return e.b.Info() }

// Fallback explains why an Auto engine runs on the CPU ("" when it does not
// or when the CPU was asked for).
func (e *Engine) Fallback() string { return e.fallback }

// Close releases the backend. It is safe to call more than once; calls
// after Close fail with ErrClosed. Attention calls in progress are stopped
// and fail with ErrClosed: Close waits for them on the CPU backend until
// their next tile, on Vulkan until their submissions in flight finish (all
// the work of a call whose context cannot be cancelled; see Cancellation
// in the package documentation). A Benchmark or a DeviceTensor transfer
// in progress is not stopped: Close waits for it to finish.
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
	// LSE is the natural-log log-sum-exp of each row's scores,
	// contiguous [B, Hq, Nq] ([Hq, Tq] for packed sequences); −Inf for a
	// row that sees no key.
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
	out := &Output{O: o, LSE: make([]float32, p.LSELen())}
	if err := e.ForwardInto(ctx, q, k, v, out.O, out.LSE, opt); err != nil {
		return nil, err
	}
	return out, nil
}

// ForwardInto is Forward writing into caller-provided O (any non-overlapping
// strides) and LSE (length B·Hq·Nq). Neither may share memory with the
// other or with Q, K or V (ErrStride, naming both).
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
	all := []hostView{viewOf("o", o), sliceView("lse", lse), viewOf("q", q), viewOf("k", k), viewOf("v", v)}
	a := &forwardArgs{Q: q, K: k, V: v, O: o, LSE: lse}
	if opt.Bias != nil {
		a.Bias = opt.Bias.Tensor
		all = append(all, viewOf("bias", a.Bias))
	}
	if err := distinctHost(all[:2], all); err != nil {
		return err
	}
	return e.b.Forward(ctx, p, a)
}

// Grads are the results of a backward call: dQ like Q, dK like K, dV like V
// (dK and dV summed over the query heads that share each key/value head),
// and with Options.Bias.Grad dBias (the bias's dtype and shape, dense
// BHSD: [B, H, S, Nk] row-major; else the zero Tensor).
type Grads struct{ DQ, DK, DV, DBias Tensor }

// Backward computes dQ, dK and dV from the forward's inputs, its outputs O
// and LSE, and the output gradient dO (same shape as O), and dBias when
// Options.Bias asks for it.
func (e *Engine) Backward(ctx context.Context, q, k, v, o Tensor, lse []float32, do Tensor, opt Options) (*Grads, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	if _, err := problem(q, k, v, o, lse, opt, true); err != nil {
		return nil, err
	}
	var g Grads
	if x := opt.Bias; x != nil && x.Grad {
		db, err := NewTensor(x.Tensor.DType(), x.Tensor.Shape, BHSD)
		if err != nil {
			return nil, err
		}
		withGrad := *x
		withGrad.GradTensor, g.DBias = db, db
		opt.Bias = &withGrad
	}
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

// BackwardInto is Backward writing into caller-provided gradients. dQ, dK
// and dV may not share memory with each other or with any input
// (ErrStride, naming both); interleaved views of one buffer that share no
// element are fine.
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
	// dO, dQ, dK and dV: each shaped like its primal; the backends take
	// them laid out like their primals too.
	laidOut := true
	for _, g := range []struct {
		name   string
		t      Tensor
		primal Tensor
		st     Strides
		out    bool
	}{{"do", do, o, p.O, false}, {"dq", dq, q, p.Q, true}, {"dk", dk, k, p.K, true}, {"dv", dv, v, p.V, true}} {
		st, err := checkLike(g.name, g.t, g.primal.Shape, dt, g.out)
		if err != nil {
			return err
		}
		laidOut = laidOut && st == g.st
	}
	bias, dbias, err := hostBias(opt, true)
	if err != nil {
		return err
	}
	if err := attachBias(p, dt, bias, dbias); err != nil {
		return err
	}
	all := []hostView{viewOf("dq", dq), viewOf("dk", dk), viewOf("dv", dv),
		viewOf("q", q), viewOf("k", k), viewOf("v", v), viewOf("o", o), sliceView("lse", lse), viewOf("do", do)}
	outs := 3
	a := &backwardArgs{Q: q, K: k, V: v, O: o, LSE: lse, DO: do, DQ: dq, DK: dk, DV: dv}
	if bias != nil {
		a.Bias = opt.Bias.Tensor
		all = append(all, viewOf("bias", a.Bias))
	}
	if dbias != nil {
		a.DBias = opt.Bias.GradTensor
		all = append([]hostView{viewOf("dbias", a.DBias)}, all...)
		outs++
	}
	if err := distinctHost(all[:outs], all); err != nil {
		return err
	}
	if laidOut {
		return e.b.Backward(ctx, p, a)
	}
	// The backends take gradients laid out like their primals: repack
	// everything densely (BSHD), run, and scatter the gradients back.
	dense := &backwardArgs{
		Q: densify(q), K: densify(k), V: densify(v), O: densify(o), LSE: lse, DO: densify(do), Bias: a.Bias, DBias: a.DBias,
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
