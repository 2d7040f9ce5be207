//go:build cgo

package vkattn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/gate"
	"github.com/flashvk/flashvk/internal/pipeline"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// The errors of this package wrap package device's sentinels: ErrInvalid
// (a bad argument: nil or mismatched tensor, bad problem), ErrTooLarge (a
// device limit or the kernels' 32-bit element offsets), ErrUnsupported
// (the device cannot run this dtype or kernel) and ErrClosed; device errors
// (device.ErrNoVulkan, device.ErrTimeout, …) are wrapped as they come.
var (
	ErrInvalid     = device.ErrInvalid
	ErrTooLarge    = device.ErrTooLarge
	ErrUnsupported = device.ErrUnsupported
	ErrClosed      = device.ErrClosed
)

// Options configure Open. Nothing is read from the environment: the
// caller (package attention's Config) resolves it.
type Options struct {
	// Device selects the device (device.Options.Select): "" or "best", an
	// index, a vendor or a name substring.
	Device string
	// Library is the Vulkan loader to open ("": libvulkan.so.1).
	Library string
	// Kernel selects the forward kernel family by name (ForwardKernels:
	// "flash", "flash_cm", "minimal", "naive"; its backward follows), or
	// "" for the fastest the device runs per problem (see Plan).
	Kernel string
	// Validation enables the Khronos validation layer (see
	// ValidationErrors).
	Validation bool
	// Log receives validation messages and tune cache warnings.
	Log func(string)
	// CacheDir is where the driver's pipeline cache is persisted ("": the
	// pipeline package's default); NoDiskCache disables it.
	CacheDir    string
	NoDiskCache bool
	// SpinWait is device.Options.SpinWait.
	SpinWait time.Duration
	// Addressing is how kernels reach Q, K, V, O and the gradients:
	// through bindings, or through 64-bit buffer device addresses where
	// one binding cannot hold an operand (addressing.go).
	Addressing Addressing
	// PipelineStatistics opens the device with
	// device.Options.PipelineStatistics, so that Statistics reports the
	// compiler statistics of each launch's pipeline; Open fails with
	// ErrUnsupported on a device without
	// VK_KHR_pipeline_executable_properties. (New takes the device as
	// it was opened.)
	PipelineStatistics bool
}

// Backend runs attention on one Vulkan device. It is safe for concurrent
// use.
type Backend struct {
	dev     *device.Device
	ownsDev bool
	cache   *pipeline.Cache
	info    device.Info
	lim     shaders.Limits
	dtypes  []spec.DType
	maxBuf  int64 // largest buffer the Backend creates, bytes
	// bindBytes is the largest buffer one binding reaches; addrWhy says
	// why kernels cannot read operands by device address ("" when they
	// can; addressing.go).
	bindBytes  int64
	dsBytes    int64 // the most a folding dBias's dS scratch takes (planDBiasFold)
	addressing Addressing
	addrWhy    string
	reqSG      uint32
	tune       *tuneState // tuned configurations (tune.go)

	// The kernel plan (plan.go): the family chains of each direction, the
	// family selected by name (nil: automatic), the families that cannot
	// run here at all, and the coopmat state per storage type.
	chain    [3][]*family
	explicit *family
	unavail  map[*family]string // why a family cannot run on the device
	cm       map[spec.DType]*cmState
	cmWhy    map[spec.DType]string // why a storage type has no coopmat state (cmWhyFor)

	modMu   sync.Mutex
	modules map[string][]byte // "kernel.dtype" → SPIR-V (stable slices: the cache hashes them once)
	cfgMu   sync.Mutex
	cfgs    map[cfgKey]cfgResult

	pool *bufPool
	life gate.Gate

	// chunkTarget is the expected time of one submission of a cancellable
	// call, chunkMinGroups the fewest workgroups of a chunk, rates the
	// kernels' measured rates (chunk.go). chunkCPU chunks for a CPU
	// device, which ends each dispatch with its threads' partial last
	// round: one dispatch of each launch a chunk reaches, split evenly,
	// tiles across every head and batch (cpuOrder); a GPU overlaps the
	// dispatches of one submission, and a chunk takes as many as its
	// budget holds, in the order of one dispatch (gpuOrder).
	chunkTarget    time.Duration
	chunkMinGroups float64
	chunkCPU       bool
	rates          rateTable

	closeOnce sync.Once
	closeErr  error
}

// Open opens the device opts selects and a pipeline cache on it.
func Open(opts Options) (*Backend, error) {
	if err := checkKernel(opts.Kernel); err != nil {
		return nil, err
	}
	dev, err := device.Open(device.Options{Select: opts.Device, Library: opts.Library, Validation: opts.Validation,
		Log: opts.Log, SpinWait: opts.SpinWait, PipelineStatistics: opts.PipelineStatistics})
	if err != nil {
		return nil, fmt.Errorf("vkattn: %w", err)
	}
	if opts.PipelineStatistics && !dev.Info().PipelineStatistics {
		dev.Close()
		return nil, fmt.Errorf("%w: pipeline statistics: %s reports no compiler statistics (no VK_KHR_pipeline_executable_properties)", ErrUnsupported, dev.Info().Name)
	}
	b, err := newBackend(dev, true, opts)
	if err != nil {
		dev.Close()
		return nil, err
	}
	return b, nil
}

// New runs on an already opened device, which Close leaves open (the
// caller closes it after the Backend). opts.Device, Library, Validation,
// SpinWait and PipelineStatistics are ignored (the device's own options
// apply).
func New(dev *device.Device, opts Options) (*Backend, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: nil device", ErrInvalid)
	}
	return newBackend(dev, false, opts)
}

// LimitsOf returns the tile-relevant limits of a device.
func LimitsOf(info device.Info) shaders.Limits {
	wg := int(info.MaxWorkgroupInvocations)
	if x := int(info.MaxWorkgroupSize[0]); x > 0 && (wg == 0 || x < wg) {
		wg = x
	}
	return shaders.Limits{SharedBytes: int(info.MaxSharedMemory), Subgroup: int(info.SubgroupSize), MaxWorkgroupSize: wg}
}

func newBackend(dev *device.Device, owns bool, opts Options) (*Backend, error) {
	info := dev.Info()
	lim := LimitsOf(info)
	sg := lim.Subgroup
	if sg < 1 || sg&(sg-1) != 0 {
		return nil, fmt.Errorf("%w: %s: subgroup size %d is not a power of two", ErrUnsupported, info.Name, sg)
	}
	if !info.SubgroupOps.Shuffle {
		return nil, fmt.Errorf("%w: %s: no subgroup shuffle in compute shaders (flash and bwd_pre need it)", ErrUnsupported, info.Name)
	}
	if info.MaxPushConstants < shaders.ParamsSize {
		return nil, fmt.Errorf("%w: %s: %d bytes of push constants, kernels need %d", ErrUnsupported, info.Name, info.MaxPushConstants, shaders.ParamsSize)
	}
	b := &Backend{
		dev: dev, ownsDev: owns, info: info, lim: lim,
		dtypes:  []spec.DType{spec.Float32},
		modules: map[string][]byte{},
		cfgs:    map[cfgKey]cfgResult{},
		tune:    newTuneState(opts),

		chunkTarget:    ChunkTarget(info),
		chunkMinGroups: minChunkGroups(info),
		chunkCPU:       info.Type == "cpu",
		rates:          rateTable{prior: priorRate(info)},
	}
	if info.StorageBuffer16Bit {
		// bf16 needs 16-bit storage only: its math is fp32 (no shaderFloat16).
		b.dtypes = append(b.dtypes, spec.Float16, spec.BFloat16)
	}
	if err := b.initAddressing(opts.Addressing); err != nil {
		return nil, err
	}
	if info.SubgroupSizeControl && info.MinSubgroupSize != info.MaxSubgroupSize {
		// Pin the subgroup size the SUBGROUP spec constant announces.
		b.reqSG = info.SubgroupSize
	}
	if err := b.initChains(opts.Kernel); err != nil {
		return nil, err
	}
	cache, err := pipeline.New(dev, pipeline.Options{CacheDir: opts.CacheDir, NoDiskCache: opts.NoDiskCache})
	if err != nil {
		return nil, fmt.Errorf("vkattn: %w", err)
	}
	b.cache = cache
	b.pool = newBufPool(dev)
	return b, nil
}

// Close releases pooled buffers and the pipelines, saves the pipeline cache
// and closes the device when Open opened it. It stops the calls in
// progress and waits for them, then for any GPU work a call left running
// (a submission whose drain timed out) before it destroys what that work
// uses; if that work does not finish within the device's default timeout
// on a device Open did not open, the pooled buffers and pipelines are left
// alive (an error says so). It is safe to call twice.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.life.Close()
		var errs []error
		// Bounded by the device's default timeout (no deadline here).
		if err := b.dev.WaitAbandoned(context.Background()); err == nil {
			b.pool.free()
			errs = append(errs, b.cache.Close())
		} else if !b.ownsDev {
			b.closeErr = fmt.Errorf("vkattn: close: GPU work of an abandoned call is still running; its buffers and pipelines are left alive: %w", err)
			return
		} // else Device.Close below waits for all GPU work before it destroys anything
		if b.ownsDev {
			errs = append(errs, b.dev.Close())
		}
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// Device returns the device (for its Info and Stats).
func (b *Backend) Device() *device.Device { return b.dev }

// Info describes the device.
func (b *Backend) Info() device.Info { return b.info }

// Limits are the device limits tiles are chosen for.
func (b *Backend) Limits() shaders.Limits { return b.lim }

// DTypes lists the storage types the device runs.
func (b *Backend) DTypes() []spec.DType { return slices.Clone(b.dtypes) }

// MaxBufferBytes is the largest buffer the Backend creates for one
// operand: one binding's reach, or with device addresses the device's
// largest buffer.
func (b *Backend) MaxBufferBytes() int64 { return b.maxBuf }

// BindingBytes is the largest operand one binding reaches (the limit of
// LSE, D and scratch, and of every operand without device addresses).
func (b *Backend) BindingBytes() int64 { return b.bindBytes }

// ValidationErrors returns the validation layer's warnings and errors so far.
func (b *Backend) ValidationErrors() []string { return b.dev.ValidationErrors() }

// PoolStats reports the scratch/staging buffer pool: buffers handed out
// and idle, and idle bytes.
func (b *Backend) PoolStats() (live, idle int, idleBytes int64) { return b.pool.stats() }

func (b *Backend) supports(dt spec.DType) error {
	if !slices.Contains(b.dtypes, dt) {
		return fmt.Errorf("%w: %v storage on %s (storageBuffer16BitAccess missing)", ErrUnsupported, dt, b.info.Name)
	}
	return nil
}

// params encodes p's push constants. Strides of dimensions of extent 1 are
// never multiplied by a non-zero index: they are sent as 0 so that any
// value fits.
func params(p *spec.Problem) shaders.Params {
	st := func(n, s int) uint32 {
		if n <= 1 {
			return 0
		}
		return uint32(s)
	}
	// The extents the strides step over: packed sequences are one batch
	// of Tq query and Tk key rows.
	nb, nq, nk := p.B, p.Nq, p.Nk
	if p.Varlen() {
		nb, nq, nk = 1, p.TotalQ(), p.TotalK()
	}
	return shaders.Params{
		B: uint32(p.B), Hq: uint32(p.Hq), Hkv: uint32(p.Hkv), Nq: uint32(p.Nq), Nk: uint32(p.Nk),
		QB: st(nb, p.Q.Batch), QS: st(nq, p.Q.Seq), QH: st(p.Hq, p.Q.Head),
		KB: st(nb, p.K.Batch), KS: st(nk, p.K.Seq), KH: st(p.Hkv, p.K.Head),
		VB: st(nb, p.V.Batch), VS: st(nk, p.V.Seq), VH: st(p.Hkv, p.V.Head),
		OB: st(nb, p.O.Batch), OS: st(nq, p.O.Seq), OH: st(p.Hq, p.O.Head),
		Scale: p.Scale, Mask: uint32(p.Mask), Group: uint32(p.Group()),
	}
}

func (b *Backend) enter() error {
	if b == nil || !b.life.Acquire() {
		return fmt.Errorf("vkattn: backend: %w", ErrClosed)
	}
	return nil
}

func (b *Backend) leave() { b.life.Release() }

// enterCall is enter for a call that Close may stop: when ctx can be
// cancelled, the call runs under a context that Close also cancels, so
// that Close waits only for the chunk in flight (chunk.go). A context that
// cannot be cancelled is kept as it is: such a call runs whole, and Close
// waits for it. leave ends the call.
func (b *Backend) enterCall(ctx context.Context) (cctx context.Context, leave func(), err error) {
	if b == nil {
		return nil, nil, fmt.Errorf("vkattn: backend: %w", ErrClosed)
	}
	cctx, leave, ok := b.life.Call(ctx, true)
	if !ok {
		return nil, nil, fmt.Errorf("vkattn: backend: %w", ErrClosed)
	}
	return cctx, leave, nil
}

// callErr turns the error of a call that Close stopped into ErrClosed.
func callErr(caller, cctx context.Context, err error) error {
	if err != nil && gate.StoppedByClose(caller, cctx) {
		// ErrClosed only: the call's own error (its context's cancellation
		// by Close, or a timed-out wait) is kept as text, so that the
		// caller, whose context is live, is not told it was cancelled.
		return fmt.Errorf("vkattn: backend closed during the call (%v): %w", err, ErrClosed)
	}
	return err
}
