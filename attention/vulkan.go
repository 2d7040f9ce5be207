//go:build cgo

package attention

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/internal/vkattn"
	"github.com/x448/float16"
)

// vulkanBackend adapts vkattn (the Vulkan kernels) to the engine's
// interfaces. Host tensors are uploaded as they are (their strides go to
// the kernels), outputs downloaded into their views.
type vulkanBackend struct {
	vk         *vkattn.Backend
	info       BackendInfo
	validation bool
	stats      bool // Config.PipelineStatistics: plans carry each launch's compiler statistics

	tmu      sync.Mutex
	tuneFile string // "" when off
	tuneOff  bool
	tuneKey  DeviceKey
	tuneEnts []TuneEntry
	tuneWarn []string
}

// openVulkan opens the Vulkan backend cfg describes (the environment
// already applied); errors wrap ErrBackend (or ErrOption for a kernel the
// device cannot run) and the device's error.
func openVulkan(cfg Config) (backend, error) {
	addressing, err := vkattn.ParseAddressing(cfg.Addressing)
	if err != nil {
		return nil, fmt.Errorf("attention: config: %w: %w", err, ErrOption)
	}
	vo := vkattn.Options{Device: cfg.Device, Library: cfg.VulkanLibrary, Kernel: cfg.Kernel, Validation: cfg.Validation,
		Log: cfg.Log, SpinWait: cfg.SpinWait, CacheDir: cfg.PipelineCacheDir, Addressing: addressing,
		PipelineStatistics: cfg.PipelineStatistics}
	if cfg.PipelineCacheDir == "off" {
		vo.CacheDir, vo.NoDiskCache = "", true
	}
	vk, err := vkattn.Open(vo)
	if err != nil {
		s := ErrBackend
		if errors.Is(err, vkattn.ErrInvalid) {
			s = ErrOption
		}
		return nil, fmt.Errorf("attention: backend vulkan: %w: %w", err, s)
	}
	di := vk.Info()
	dev := deviceInfo(di)
	b := &vulkanBackend{vk: vk, validation: cfg.Validation, stats: cfg.PipelineStatistics}
	b.info = BackendInfo{
		Kind: Vulkan, Name: "vulkan", Device: di.Name, Driver: strings.TrimSpace(di.DriverName + " " + di.DriverInfo),
		Kernel: vk.Kernel(), DTypes: vk.DTypes(), Vulkan: &dev,
	}
	b.loadTuned(cfg)
	return b, nil
}

// loadTuned hands the backend the tune cache's entries for its device.
// Problems with the file become warnings, never errors.
func (b *vulkanBackend) loadTuned(cfg Config) {
	b.tuneKey = deviceKeyOf(b.vk.Info())
	file, err := tuneCacheFile(cfg)
	switch {
	case err != nil:
		b.tuneWarn = append(b.tuneWarn, err.Error()+"; tuned configurations not used")
		return
	case file == "":
		b.tuneOff = true
		return
	}
	b.tuneFile = file
	c, err := LoadTuneCache(file)
	if err != nil {
		b.tuneWarn = append(b.tuneWarn, err.Error()+"; ignored (default configurations are used; `flashvk tune` rewrites it)")
	}
	b.tuneEnts = c.ForDevice(b.tuneKey)
	var tuned []vkattn.Tuned
	for _, e := range b.tuneEnts {
		if k, ok := vkTuneKey(e.Key); ok {
			tuned = append(tuned, vkattn.Tuned{Key: k, N: e.N, Candidate: e.Candidate, Default: e.Default})
		}
	}
	b.vk.SetTuned(file, tuned)
	for _, w := range b.tuneWarn {
		if cfg.Log != nil {
			cfg.Log("flashvk: " + w)
		}
	}
}

func deviceKeyOf(info device.Info) DeviceKey {
	k := DeviceKey{Name: info.Name, VendorID: info.VendorID, DeviceID: info.DeviceID,
		Driver: strings.TrimSpace(info.DriverName + " " + info.DriverInfo), DriverVersion: info.DriverVersion}
	if info.PipelineCacheUUID != ([16]byte{}) {
		k.PipelineCacheUUID = hex.EncodeToString(info.PipelineCacheUUID[:])
	}
	return k
}

// vkTuneKey converts a cache key (false for one this build cannot read).
func vkTuneKey(k TuneKey) (vkattn.TuneKey, bool) {
	var dir vkattn.Dir
	switch k.Dir {
	case "fwd":
		dir = vkattn.Fwd
	case "bwd":
		dir = vkattn.Bwd
	default:
		return vkattn.TuneKey{}, false
	}
	var dt DType
	for _, d := range []DType{Float32, Float16, BFloat16} {
		if d.Short() == k.DType {
			dt = d
		}
	}
	if dt == 0 {
		return vkattn.TuneKey{}, false
	}
	return vkattn.TuneKey{Stage: k.Family, Dir: dir, DType: dt, D: k.D, DV: k.DV, Causal: k.Causal, Options: k.Options}, true
}

// vulkanDevices lists the Vulkan devices; errors wrap ErrBackend.
func vulkanDevices(cfg Config) ([]DeviceInfo, error) {
	infos, err := device.Devices(cfg.VulkanLibrary)
	if err != nil {
		return nil, fmt.Errorf("attention: devices: %w: %w", err, ErrBackend)
	}
	auto, autoErr := device.Select(infos, "gpu")
	out := make([]DeviceInfo, len(infos))
	for i, in := range infos {
		out[i] = deviceInfo(in)
		out[i].Auto = autoErr == nil && in.Index == auto
	}
	return out, nil
}

// deviceInfo flattens a device.Info.
func deviceInfo(in device.Info) DeviceInfo {
	g := DeviceInfo{
		Index: in.Index, Name: in.Name, Vendor: in.Vendor, Type: in.Type, Software: in.Type == "cpu",
		DriverName: in.DriverName, DriverInfo: in.DriverInfo, APIVersion: in.APIVersion,
		SubgroupSize: in.SubgroupSize, MaxSharedMemory: in.MaxSharedMemory, MaxWorkgroupSize: in.MaxWorkgroupSize,
		MaxWorkgroupInvocations: in.MaxWorkgroupInvocations, MaxAllocation: in.MaxAllocation,
		DeviceLocalBytes: in.DeviceLocalBytes(), Float16: in.Float16, Int8: in.Int8, BFloat16: in.BFloat16,
		PipelineStatistics: in.PipelineStatistics, CoopMat: []string{}, CoopMat2: []string{},
	}
	for _, h := range in.Heaps {
		if !h.DeviceLocal {
			g.HostBytes += h.Size
		}
	}
	for _, s := range in.CoopMat {
		g.CoopMat = append(g.CoopMat, fmt.Sprintf("%dx%dx%d %s·%s+%s→%s (%s)", s.M, s.N, s.K, s.A, s.B, s.C, s.Result, s.Scope))
	}
	c2 := in.CoopMat2
	for _, f := range []struct {
		on   bool
		name string
	}{
		{c2.WorkgroupScope, "workgroup-scope"}, {c2.FlexibleDimensions, "flexible-dimensions"},
		{c2.Reductions, "reductions"}, {c2.Conversions, "conversions"}, {c2.PerElementOps, "per-element-ops"},
		{c2.TensorAddressing, "tensor-addressing"}, {c2.BlockLoads, "block-loads"},
	} {
		if f.on {
			g.CoopMat2 = append(g.CoopMat2, f.name)
		}
	}
	return g
}

// TuneFamilies lists the tunable stages of the Vulkan kernel families, in
// tuning order.
func TuneFamilies() []string { return vkattn.TunableNames() }

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

func (b *vulkanBackend) Forward(ctx context.Context, p *spec.Problem, a *forwardArgs) error {
	switch q := a.Q.Data.(type) {
	case []float32:
		return vkErr(vkattn.ForwardHost(ctx, b.vk, p, q, a.K.Data.([]float32), a.V.Data.([]float32), a.O.Data.([]float32), a.LSE, vkBias(a.Bias, Tensor{})))
	case []float16.Float16:
		return vkErr(vkattn.ForwardHost(ctx, b.vk, p, q, a.K.Data.([]float16.Float16), a.V.Data.([]float16.Float16), a.O.Data.([]float16.Float16), a.LSE, vkBias(a.Bias, Tensor{})))
	case []bfloat16.BFloat16:
		return vkErr(vkattn.ForwardHost(ctx, b.vk, p, q, a.K.Data.([]bfloat16.BFloat16), a.V.Data.([]bfloat16.BFloat16), a.O.Data.([]bfloat16.BFloat16), a.LSE, vkBias(a.Bias, Tensor{})))
	}
	return fmt.Errorf("attention: vulkan: q: data of type %T: %w", a.Q.Data, ErrDType)
}

func (b *vulkanBackend) Backward(ctx context.Context, p *spec.Problem, a *backwardArgs) error {
	switch q := a.Q.Data.(type) {
	case []float32:
		f := func(t Tensor) []float32 { return t.Data.([]float32) }
		return vkErr(vkattn.BackwardHost(ctx, b.vk, p, q, f(a.K), f(a.V), f(a.O), a.LSE, f(a.DO), f(a.DQ), f(a.DK), f(a.DV), vkBias(a.Bias, a.DBias)))
	case []float16.Float16:
		f := func(t Tensor) []float16.Float16 { return t.Data.([]float16.Float16) }
		return vkErr(vkattn.BackwardHost(ctx, b.vk, p, q, f(a.K), f(a.V), f(a.O), a.LSE, f(a.DO), f(a.DQ), f(a.DK), f(a.DV), vkBias(a.Bias, a.DBias)))
	case []bfloat16.BFloat16:
		f := func(t Tensor) []bfloat16.BFloat16 { return t.Data.([]bfloat16.BFloat16) }
		return vkErr(vkattn.BackwardHost(ctx, b.vk, p, q, f(a.K), f(a.V), f(a.O), a.LSE, f(a.DO), f(a.DQ), f(a.DK), f(a.DV), vkBias(a.Bias, a.DBias)))
	}
	return fmt.Errorf("attention: vulkan: q: data of type %T: %w", a.Q.Data, ErrDType)
}

// vkBias is vkattn's view of a host call's bias and dBias tensors
// (their data slices; nil where absent).
func vkBias(bias, dbias Tensor) vkattn.HostBias {
	return vkattn.HostBias{Bias: bias.Data, DBias: dbias.Data}
}

// plan is vkattn's Plan for the pass of one submission of a host call: of
// the whole problem, or of its first chunk of batches where the operands
// are too large for one submission.
func (b *vulkanBackend) plan(ctx context.Context, p *spec.Problem, dt DType, backward bool) (*Plan, error) {
	dir := vkattn.Fwd
	if backward {
		dir = vkattn.Bwd
	}
	c := p
	if p.KV != nil {
		dir = vkattn.KV // one submission whatever the size (the plan refuses what one binding does not reach)
	} else {
		// A problem the device cannot hold even one batch of at a time
		// fails here, before anyone allocates its operands.
		cb, err := b.vk.MaxBatchChunk(ctx, p, dt, backward)
		if err != nil {
			return nil, vkErr(err)
		}
		c = p.Batches(0, min(cb, p.B))
	}
	vp, err := b.vk.Plan(ctx, c, dt, dir)
	if err != nil {
		return nil, vkErr(err)
	}
	pl := &Plan{Pass: vp.Dir.String(), Family: vp.Family, Declined: vp.Declined, Batches: c.B}
	for _, n := range vp.Scratch {
		pl.ScratchBytes += n
	}
	if d := vp.Decode(); d != nil {
		pl.Splits, pl.SplitKeys = d.Splits, d.SplitKeys
	}
	for i, l := range vp.Launches {
		var addrs []string
		for _, op := range l.Addresses {
			addrs = append(addrs, op.String())
		}
		la := Launch{Kernel: l.Kernel, Name: l.Name(),
			Grid: [3]int{int(l.Grid[0]), int(l.Grid[1]), int(l.Grid[2])}, Workgroup: l.Workgroup,
			Base:     [3]int{int(l.Base[0]), int(l.Base[1]), int(l.Base[2])},
			TileRows: l.BR, TileCols: l.BC, SharedBytes: l.SharedBytes, Config: l.Config, Source: l.Source,
			HeadGroup: l.HeadGroup, Addresses: addrs}
		if b.stats {
			st, err := b.vk.Statistics(&vp.Launches[i])
			if err != nil {
				return nil, vkErr(err)
			}
			la.Statistics = statistics(st)
		}
		pl.Launches = append(pl.Launches, la)
	}
	return pl, nil
}

// statistics converts the device's compiler statistics (never nil: a
// pipeline the driver reports nothing of has an empty list).
func statistics(st []device.Statistic) []Statistic {
	out := make([]Statistic, len(st))
	for i, s := range st {
		out[i] = Statistic{Name: s.Name, Description: s.Description, Value: s.Value, Executable: s.Executable}
	}
	return out
}

// Benchmark keeps o.Rotate copies of the inputs resident and times each
// call with GPU timestamps around its kernels (see vkattn.Bench).
func (b *vulkanBackend) Benchmark(ctx context.Context, p *spec.Problem, a *backwardArgs, o BenchOptions) (*BenchResult, error) {
	opt := vkattn.BenchOptions{Warmup: o.Warmup, Iters: o.Iters, Rotate: o.Rotate, Backward: o.Backward, PerKernel: o.PerKernel}
	var r *vkattn.BenchResult
	var err error
	switch q := a.Q.Data.(type) {
	case []float32:
		f := func(t Tensor) []float32 { d, _ := t.Data.([]float32); return d }
		r, err = vkattn.BenchmarkHost(ctx, b.vk, p, opt, q, f(a.K), f(a.V), f(a.O), f(a.DO), a.LSE, vkBias(a.Bias, a.DBias))
	case []float16.Float16:
		f := func(t Tensor) []float16.Float16 { d, _ := t.Data.([]float16.Float16); return d }
		r, err = vkattn.BenchmarkHost(ctx, b.vk, p, opt, q, f(a.K), f(a.V), f(a.O), f(a.DO), a.LSE, vkBias(a.Bias, a.DBias))
	case []bfloat16.BFloat16:
		f := func(t Tensor) []bfloat16.BFloat16 { d, _ := t.Data.([]bfloat16.BFloat16); return d }
		r, err = vkattn.BenchmarkHost(ctx, b.vk, p, opt, q, f(a.K), f(a.V), f(a.O), f(a.DO), a.LSE, vkBias(a.Bias, a.DBias))
	default:
		return nil, fmt.Errorf("attention: vulkan: q: data of type %T: %w", a.Q.Data, ErrDType)
	}
	if err != nil {
		return nil, vkErr(err)
	}
	return benchResult(r), nil
}

// benchResult converts vkattn's timing.
func benchResult(r *vkattn.BenchResult) *BenchResult {
	res := &BenchResult{Times: r.Times, Clock: r.Clock, Retimed: r.Retimed, Unsteady: r.Unsteady}
	for _, k := range r.Kernels {
		res.Kernels = append(res.Kernels, KernelTimes{Name: k.Name, Times: k.Times})
	}
	return res
}

// tuneSession opens a vkattn tune session on the engine's device.
func (b *vulkanBackend) tuneSession() (tuneSession, error) {
	s, err := b.vk.NewTuneSession()
	if err != nil {
		return nil, vkErr(err)
	}
	return &vulkanTuneSession{s: s, key: b.tuneKey}, nil
}

// vulkanTuneSession adapts vkattn.TuneSession to tuneSession.
type vulkanTuneSession struct {
	s   *vkattn.TuneSession
	key DeviceKey
}

func dirOf(backward bool) vkattn.Dir {
	if backward {
		return vkattn.Bwd
	}
	return vkattn.Fwd
}

func (v *vulkanTuneSession) stages(ctx context.Context, p *spec.Problem, dt DType, backward bool) ([]string, []string, error) {
	st, ks, err := v.s.Stages(ctx, p, dt, dirOf(backward))
	return st, ks, vkErr(err)
}

func (v *vulkanTuneSession) defaultOf(ctx context.Context, stage string, p *spec.Problem, dt DType) (string, error) {
	c, err := v.s.Default(ctx, stage, p, dt)
	return c, vkErr(err)
}

func (v *vulkanTuneSession) candidates(ctx context.Context, stage string, p *spec.Problem, dt DType) ([]string, error) {
	cs, err := v.s.Candidates(ctx, stage, p, dt)
	return cs, vkErr(err)
}

func (v *vulkanTuneSession) check(ctx context.Context, stage string, p *spec.Problem, dt DType, c string) error {
	return v.s.Check(ctx, stage, p, dt, c)
}

func (v *vulkanTuneSession) force(stage string, p *spec.Problem, dt DType, c string) {
	v.s.Force(stage, p, dt, c)
}
func (v *vulkanTuneSession) unforce()             { v.s.Unforce() }
func (v *vulkanTuneSession) deviceKey() DeviceKey { return v.key }
func (v *vulkanTuneSession) close() error         { return vkErr(v.s.Close()) }

func (v *vulkanTuneSession) verifier(ctx context.Context, p *spec.Problem, dt DType, backward bool, seed uint64, ref ReferenceFunc) (tuneVerifier, error) {
	vr, err := v.s.Verifier(ctx, p, dt, backward, seed, func(p *spec.Problem, q, k, vv, do []float64, backward bool) ([][]float64, error) {
		return ref(referenceProblem(p), q, k, vv, do, backward)
	})
	if err != nil {
		return nil, vkErr(err)
	}
	return vulkanVerifier{vr}, nil
}

func (v *vulkanTuneSession) timer(ctx context.Context, p *spec.Problem, dt DType, backward bool, seed uint64) (tuneTimer, error) {
	t, err := v.s.Timer(ctx, p, dt, backward, seed)
	if err != nil {
		return nil, vkErr(err)
	}
	return vulkanTimer{t}, nil
}

type vulkanVerifier struct{ v *vkattn.Verifier }

func (v vulkanVerifier) run(ctx context.Context) (float64, error) {
	e, err := v.v.Run(ctx)
	return e, vkErr(err)
}
func (v vulkanVerifier) close() { v.v.Close() }

type vulkanTimer struct{ t *vkattn.Timer }

// median times the pass: a warm-up of warmup runs lasting at least
// minWarm (none when warmup < 0), then iters timed runs.
func (v vulkanTimer) median(ctx context.Context, warmup, iters int, minWarm time.Duration) (time.Duration, error) {
	o := vkattn.BenchOptions{Warmup: warmup, MinWarmup: minWarm, Iters: iters}
	if warmup < 0 {
		o.MinWarmup = -1
	}
	m, err := v.t.Median(ctx, o)
	return m, vkErr(err)
}
func (v vulkanTimer) close() { v.t.Close() }

func (b *vulkanBackend) tuneInfo() TuneInfo {
	b.tmu.Lock()
	defer b.tmu.Unlock()
	return TuneInfo{File: b.tuneFile, Off: b.tuneOff, Device: b.tuneKey,
		Entries:  append([]TuneEntry(nil), b.tuneEnts...),
		Warnings: append(append([]string(nil), b.tuneWarn...), b.vk.TuneWarnings()...)}
}

// Device-resident operands (devicetensor.go).

type vulkanBuffer struct{ t *vkattn.Tensor }

func (b *vulkanBackend) newDeviceBuffer(dt DType, s Shape, st Strides) (deviceBuffer, error) {
	t, err := b.vk.NewTensor(dt, s, st)
	if err != nil {
		return nil, vkErr(err)
	}
	return vulkanBuffer{t}, nil
}

func (v vulkanBuffer) upload(ctx context.Context, src Tensor, n int) error {
	return v.transfer(ctx, src.Data, n, true)
}

func (v vulkanBuffer) download(ctx context.Context, dst Tensor, n int) error {
	return v.transfer(ctx, dst.Data, n, false)
}

// transfer uploads the first n elements of data to the tensor (up) or
// downloads them from it.
func (v vulkanBuffer) transfer(ctx context.Context, data any, n int, up bool) error {
	switch x := data.(type) {
	case []float32:
		return vkErr(moveSlice(ctx, v.t, x[:n], up))
	case []float16.Float16:
		return vkErr(moveSlice(ctx, v.t, x[:n], up))
	case []bfloat16.BFloat16:
		return vkErr(moveSlice(ctx, v.t, x[:n], up))
	}
	dir := "download"
	if up {
		dir = "upload"
	}
	return fmt.Errorf("attention: %s: data of type %T: %w", dir, data, ErrDType)
}

func moveSlice[T vkattn.Elem](ctx context.Context, t *vkattn.Tensor, x []T, up bool) error {
	if up {
		return vkattn.Upload(ctx, t, x)
	}
	return vkattn.Download(ctx, t, x)
}

func (v vulkanBuffer) close() error { return vkErr(v.t.Close()) }

func vt(d *DeviceTensor) *vkattn.Tensor { return d.dev.(vulkanBuffer).t }

// vtOr is vt(d), nil for nil.
func vtOr(d *DeviceTensor) *vkattn.Tensor {
	if d == nil {
		return nil
	}
	return vt(d)
}

// deviceCall runs the forward, the backward or both of resident operands.
func (b *vulkanBackend) deviceCall(ctx context.Context, p *spec.Problem, fwd, bwd bool, x biasTensors, ts map[vkattn.Operand]*DeviceTensor) error {
	var ops vkattn.Operands
	for op, t := range ts {
		ops[op] = vt(t)
	}
	ops[vkattn.OpBias], ops[vkattn.OpDBias] = vtOr(x.bias), vtOr(x.dbias)
	return vkErr(b.vk.Call(ctx, p, fwd, bwd, ops))
}

func (b *vulkanBackend) forwardDevice(ctx context.Context, p *spec.Problem, q, k, v, o, lse *DeviceTensor, x biasTensors) error {
	return b.deviceCall(ctx, p, true, false, x, map[vkattn.Operand]*DeviceTensor{
		vkattn.OpQ: q, vkattn.OpK: k, vkattn.OpV: v, vkattn.OpO: o, vkattn.OpLSE: lse})
}

func (b *vulkanBackend) backwardDevice(ctx context.Context, p *spec.Problem, q, k, v, o, lse, do, dq, dk, dv *DeviceTensor, x biasTensors) error {
	return b.deviceCall(ctx, p, false, true, x, map[vkattn.Operand]*DeviceTensor{
		vkattn.OpQ: q, vkattn.OpK: k, vkattn.OpV: v, vkattn.OpO: o, vkattn.OpLSE: lse,
		vkattn.OpDO: do, vkattn.OpDQ: dq, vkattn.OpDK: dk, vkattn.OpDV: dv})
}

func (b *vulkanBackend) stepDevice(ctx context.Context, p *spec.Problem, q, k, v, do, o, lse, dq, dk, dv *DeviceTensor, x biasTensors) error {
	return b.deviceCall(ctx, p, true, true, x, map[vkattn.Operand]*DeviceTensor{
		vkattn.OpQ: q, vkattn.OpK: k, vkattn.OpV: v, vkattn.OpO: o, vkattn.OpLSE: lse,
		vkattn.OpDO: do, vkattn.OpDQ: dq, vkattn.OpDK: dk, vkattn.OpDV: dv})
}

func (b *vulkanBackend) kvDevice(ctx context.Context, p *spec.Problem, q, k, v, newK, newV, o, lse *DeviceTensor) error {
	var nk, nv *vkattn.Tensor
	if newK != nil {
		nk, nv = vt(newK), vt(newV)
	}
	return vkErr(b.vk.KVCache(ctx, p, vt(q), vt(k), vt(v), nk, nv, vt(o), vt(lse)))
}

// benchmarkKV times KV-cache calls on device tensors with GPU timestamps
// (see vkattn.BenchKV).
func (b *vulkanBackend) benchmarkKV(ctx context.Context, p *spec.Problem, q, k, v, newK, newV, o, lse *DeviceTensor, bo BenchOptions) (*BenchResult, error) {
	ops := vkattn.Operands{vkattn.OpQ: vt(q), vkattn.OpK: vt(k), vkattn.OpV: vt(v), vkattn.OpO: vt(o), vkattn.OpLSE: vt(lse)}
	if newK != nil {
		ops[vkattn.OpNewK], ops[vkattn.OpNewV] = vt(newK), vt(newV)
	}
	r, err := b.vk.BenchKV(ctx, p, ops, vkattn.BenchOptions{Warmup: bo.Warmup, Iters: bo.Iters, PerKernel: bo.PerKernel})
	if err != nil {
		return nil, vkErr(err)
	}
	return benchResult(r), nil
}
