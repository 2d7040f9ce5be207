package vkattn

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/pipeline"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// Sentinel errors. Device errors (device.ErrNoVulkan, device.ErrTimeout, …)
// are wrapped as they come.
var (
	// ErrInvalid: a bad argument (nil or mismatched tensor, bad problem).
	ErrInvalid = errors.New("vkattn: invalid argument")
	// ErrTooLarge: the problem or a tensor exceeds a device limit or the
	// kernels' 32-bit element offsets.
	ErrTooLarge = errors.New("vkattn: exceeds a device limit")
	// ErrUnsupported: the device cannot run this (dtype, kernel).
	ErrUnsupported = errors.New("vkattn: unsupported by this device")
	// ErrClosed: the Backend or Tensor was closed.
	ErrClosed = errors.New("vkattn: closed")
)

// DType is a storage type.
type DType uint8

const (
	// F32 stores float32.
	F32 DType = iota + 1
	// F16 stores IEEE binary16 (as uint16 bits on the host).
	F16
	// BF16 stores bfloat16 (as bfloat16.BFloat16 on the host). Its kernels
	// load it exactly into float32 and round stores to nearest even; it
	// runs the cooperative-matrix kernels' own bf16 modules (bfloat16
	// operands, fp32 accumulators) where the device supports them, never
	// the fp16 ones.
	BF16
)

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// String is the shaders package's name of the type ("f32", "f16", "bf16").
func (d DType) String() string {
	switch d {
	case F32:
		return shaders.DTypeF32
	case F16:
		return shaders.DTypeF16
	case BF16:
		return shaders.DTypeBF16
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Options configure Open.
type Options struct {
	// Device selects the device (device.Options.Select): "" or "best", an
	// index, a vendor or a name substring.
	Device string
	// Kernel is the forward kernel: "" or "flash", "minimal", "naive", or
	// "flash_cm" (cooperative matrices, f16 and bf16; "" picks it where the
	// device supports it, see flashcm.go).
	Kernel string
	// Validation enables the Khronos validation layer (see
	// ValidationErrors).
	Validation bool
	// Log receives validation and debug messages.
	Log func(string)
	// CacheDir is where the driver's pipeline cache is persisted (""
	// : pipeline.Options' default).
	CacheDir string
	// NoDiskCache disables the persisted pipeline cache.
	NoDiskCache bool
	// TuneCache is the tune cache file whose tuned configurations this
	// device uses (see Tune): "" the default (DefaultTuneCachePath; none
	// when FLASHVK_TUNE=off), TuneOff ("off") none.
	TuneCache string
}

// Backend runs attention on one Vulkan device. It is safe for concurrent
// use.
type Backend struct {
	dev     *device.Device
	ownsDev bool
	cache   *pipeline.Cache
	info    device.Info
	lim     shaders.Limits
	kernel  string
	dtypes  []DType
	maxBuf  int64 // largest storage buffer, bytes
	reqSG   uint32
	spirv   map[string][]byte // "kernel.dtype" → module (stable slices: the cache hashes them once)
	cm      *flashCM          // flash_cm state (f16), nil when not used (flashcm.go)
	cmBF    *flashCM          // flash_cm state (bf16 modules), nil when not used
	tune    *tuneState        // tuned configurations (tune.go)

	cfgMu sync.Mutex
	cfgs  map[cfgKey]cfgResult

	pool *bufPool
	life gate

	closeOnce sync.Once
	closeErr  error
}

type cfgKey struct {
	kernel string
	d, dv  int
	dt     DType
}

type cfgResult struct {
	c   shaders.Config
	err error
}

// Open opens the device opts selects and a pipeline cache on it.
func Open(opts Options) (*Backend, error) {
	if _, err := forwardKernel(opts.Kernel); err != nil {
		return nil, err
	}
	dev, err := device.Open(device.Options{Select: opts.Device, Validation: opts.Validation, Log: opts.Log})
	if err != nil {
		return nil, fmt.Errorf("vkattn: %w", err)
	}
	b, err := newBackend(dev, true, opts)
	if err != nil {
		dev.Close()
		return nil, err
	}
	return b, nil
}

// New runs on an already opened device, which Close leaves open (the
// caller closes it after the Backend). opts.Device, Validation and Log are
// ignored.
func New(dev *device.Device, opts Options) (*Backend, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: nil device", ErrInvalid)
	}
	if _, err := forwardKernel(opts.Kernel); err != nil {
		return nil, err
	}
	return newBackend(dev, false, opts)
}

func forwardKernel(k string) (string, error) {
	switch k {
	case "", shaders.KernelFlash:
		return shaders.KernelFlash, nil
	case shaders.KernelMinimal, shaders.KernelNaive:
		return k, nil
	case shaders.KernelFlashCM: // f16 forwards; flash for the rest (flashcm.go)
		return shaders.KernelFlash, nil
	}
	return "", fmt.Errorf("%w: kernel %q (want flash, flash_cm, minimal or naive)", ErrInvalid, k)
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
	kernel, _ := forwardKernel(opts.Kernel)
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
		dev: dev, ownsDev: owns, info: info, lim: lim, kernel: kernel,
		dtypes: []DType{F32},
		spirv:  map[string][]byte{},
		cfgs:   map[cfgKey]cfgResult{},
	}
	if info.StorageBuffer16Bit {
		// bf16 needs 16-bit storage only: its math is fp32 (no shaderFloat16).
		b.dtypes = append(b.dtypes, F16, BF16)
	}
	maxBuf := min(info.MaxAllocation, info.MaxStorageBufferRange)
	if info.MaxBufferSize > 0 {
		maxBuf = min(maxBuf, info.MaxBufferSize)
	}
	b.maxBuf = int64(min(maxBuf, math.MaxInt64))
	if info.SubgroupSizeControl && info.MinSubgroupSize != info.MaxSubgroupSize {
		// Pin the subgroup size the SUBGROUP spec constant announces.
		b.reqSG = info.SubgroupSize
	}
	for _, k := range []string{kernel, shaders.KernelBwdPre, shaders.KernelBwdDKDV, shaders.KernelBwdDQ} {
		for _, dt := range b.dtypes {
			spv, err := shaders.SPIRV(k, dt.String())
			if err != nil {
				return nil, fmt.Errorf("vkattn: %w", err)
			}
			b.spirv[k+"."+dt.String()] = spv
		}
	}
	b.tune = openTune(info, opts)
	if err := b.initFlashCM(opts.Kernel); err != nil {
		return nil, err
	}
	cache, err := pipeline.New(dev, pipeline.Options{CacheDir: opts.CacheDir, NoDiskCache: opts.NoDiskCache})
	if err != nil {
		return nil, fmt.Errorf("vkattn: %w", err)
	}
	b.cache = cache
	b.pool = newBufPool(dev)
	if os.Getenv("FLASHVK_DEBUG_TILES") == "1" {
		fmt.Fprintf(os.Stderr, "flashvk: tiles on %s (%s kernel)\n", info.Name, kernel)
		FormatTiles(os.Stderr, b.Tiles())
	}
	return b, nil
}

// Close releases pooled buffers and the pipelines, saves the pipeline cache
// and closes the device when Open opened it. It waits for calls in
// progress; it is safe to call twice.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.life.close()
		var errs []error
		b.pool.free()
		errs = append(errs, b.cache.Close())
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

// Kernel is the forward kernel ("flash", "minimal" or "naive"), or
// "flash_cm" when f16 (or bf16) forwards run on cooperative matrices (f32
// and problems flash_cm cannot take still run flash; see ForwardKernel).
func (b *Backend) Kernel() string {
	if b.cm != nil || b.cmBF != nil {
		return shaders.KernelFlashCM
	}
	return b.kernel
}

// DTypes lists the storage types the device runs.
func (b *Backend) DTypes() []DType { return slices.Clone(b.dtypes) }

// MaxBufferBytes is the largest storage buffer the device allows.
func (b *Backend) MaxBufferBytes() int64 { return b.maxBuf }

// ValidationErrors returns the validation layer's warnings and errors so far.
func (b *Backend) ValidationErrors() []string { return b.dev.ValidationErrors() }

// PoolStats reports the scratch/staging buffer pool: buffers handed out
// and idle, and idle bytes.
func (b *Backend) PoolStats() (live, idle int, idleBytes int64) { return b.pool.stats() }

func (b *Backend) supports(dt DType) error {
	if !slices.Contains(b.dtypes, dt) {
		return fmt.Errorf("%w: %v storage on %s (storageBuffer16BitAccess missing)", ErrUnsupported, dt, b.info.Name)
	}
	return nil
}

// Config returns the tile configuration of kernel for head dims d, dv and
// storage type dt on this device (cached).
func (b *Backend) Config(kernel string, d, dv int, dt DType) (shaders.Config, error) {
	k := cfgKey{kernel, d, dv, dt}
	b.cfgMu.Lock()
	defer b.cfgMu.Unlock()
	if r, ok := b.cfgs[k]; ok {
		return r.c, r.err
	}
	c, err := shaders.DefaultConfig(kernel, d, dv, dt.Size() == 2, b.lim)
	if err != nil {
		err = fmt.Errorf("%w: %s D=%d Dv=%d on %s: %w", ErrUnsupported, kernel, d, dv, b.info.Name, err)
	}
	b.cfgs[k] = cfgResult{c, err}
	return c, err
}

// pipe returns the pipeline of kernel for (c, d, dv, pass).
func (b *Backend) pipe(kernel string, dt DType, c shaders.Config, d, dv, pass int) (*device.Pipeline, error) {
	spv, ok := b.spirv[kernel+"."+dt.String()]
	if !ok {
		return nil, fmt.Errorf("%w: kernel %s.%s not loaded", ErrUnsupported, kernel, dt)
	}
	ents, err := shaders.SpecEntries(kernel, c, d, dv, b.lim.Subgroup, pass)
	if err != nil {
		return nil, fmt.Errorf("vkattn: %w", err)
	}
	sp := make([]device.Spec, len(ents))
	for i, e := range ents {
		sp[i] = device.Spec{ID: e.ID, Value: e.Value}
	}
	nb, err := shaders.Bindings(kernel)
	if err != nil {
		return nil, fmt.Errorf("vkattn: %w", err)
	}
	p, err := b.cache.Get(pipeline.Key{
		Name:          fmt.Sprintf("%s.%s(WG=%d BR=%d BC=%d D=%d DV=%d PASS=%d)", kernel, dt, c.WG, c.BR, c.BC, d, dv, pass),
		SPIRV:         spv,
		Spec:          sp,
		PushSize:      shaders.ParamsSize,
		Bindings:      nb,
		SubgroupSize:  b.reqSG,
		FullSubgroups: b.info.ComputeFullSubgroups && c.WG%b.lim.Subgroup == 0,
	})
	if err != nil {
		return nil, fmt.Errorf("vkattn: pipeline %s.%s: %w", kernel, dt, err)
	}
	return p, nil
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
	return shaders.Params{
		B: uint32(p.B), Hq: uint32(p.Hq), Hkv: uint32(p.Hkv), Nq: uint32(p.Nq), Nk: uint32(p.Nk),
		QB: st(p.B, p.Q.Batch), QS: st(p.Nq, p.Q.Seq), QH: st(p.Hq, p.Q.Head),
		KB: st(p.B, p.K.Batch), KS: st(p.Nk, p.K.Seq), KH: st(p.Hkv, p.K.Head),
		VB: st(p.B, p.V.Batch), VS: st(p.Nk, p.V.Seq), VH: st(p.Hkv, p.V.Head),
		OB: st(p.B, p.O.Batch), OS: st(p.Nq, p.O.Seq), OH: st(p.Hq, p.O.Head),
		Scale: p.Scale, Mask: uint32(p.Mask), Group: uint32(p.Group()),
	}
}

// gate counts calls in progress and lets close wait for them.
type gate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	users  int
	closed bool
}

func (g *gate) acquire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.users++
	return true
}

func (g *gate) release() {
	g.mu.Lock()
	g.users--
	if g.users == 0 && g.cond != nil {
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}

// close marks the gate closed and waits until no call holds it. It reports
// whether this call closed it.
func (g *gate) close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	for g.users > 0 {
		g.cond.Wait()
	}
	return true
}

func (b *Backend) enter() error {
	if b == nil || !b.life.acquire() {
		return fmt.Errorf("vkattn: backend: %w", ErrClosed)
	}
	return nil
}

func (b *Backend) leave() { b.life.release() }
