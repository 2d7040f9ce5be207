//go:build cgo

package vkattn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/reference"
)

// openBackend opens a backend on a devicetest device (skipped without
// Vulkan; validation per FLASHVK_VALIDATION, messages fail the test).
func openBackend(t *testing.T, kernel string) *Backend {
	t.Helper()
	return openBackendOn(t, devicetest.Open(t), Options{Kernel: kernel})
}

// openBackendOn opens a Backend with opts on dev, closed (and its pool
// checked) when t ends.
func openBackendOn(t *testing.T, dev *device.Device, opts Options) *Backend {
	t.Helper()
	b, err := New(dev, opts)
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if live, _, _ := b.PoolStats(); live != 0 {
			t.Errorf("%d pooled buffers still handed out after Close", live)
		}
	})
	return b
}

// syntheticBackend is a Backend on a device description only, with the
// kernel selection kernel: Plan, Launches, tile choices and the tunable
// stages work; nothing runs (layout, when non-nil, stands in for every
// coopmat storage type's probe).
func syntheticBackend(t *testing.T, info device.Info, kernel string, layout *CMLayout, tuned ...Tuned) *Backend {
	t.Helper()
	b := &Backend{info: info, lim: LimitsOf(info), dtypes: []spec.DType{spec.Float32},
		modules: map[string][]byte{}, cfgs: map[cfgKey]cfgResult{}, tune: &tuneState{}}
	if info.StorageBuffer16Bit {
		b.dtypes = append(b.dtypes, spec.Float16, spec.BFloat16)
	}
	if b.info.MaxStorageBufferRange == 0 { // a description without memory limits: 4 GiB bindings
		b.info.MaxStorageBufferRange, b.info.MaxAllocation = 1<<32-1, 1<<32-1
	}
	if b.info.MaxWorkgroupCount == [3]uint32{} { // without grid limits: Vulkan's guaranteed minimum
		b.info.MaxWorkgroupCount = [3]uint32{65535, 65535, 65535}
	}
	if err := b.initAddressing(AddressAuto); err != nil {
		t.Fatal(err)
	}
	if err := b.initChains(kernel); err != nil {
		t.Fatalf("synthetic backend (kernel %q): %v", kernel, err)
	}
	for _, cm := range b.cm {
		if layout == nil {
			cm.err = errors.New("synthetic backend: no layout")
			continue
		}
		l := *layout
		l.Storage = cm.dt
		cm.layout = &l
	}
	b.SetTuned("test.json", tuned)
	return b
}

// familyOf is the family that runs the pass dir of p on b ("" when none
// does).
func familyOf(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType, dir Dir) string {
	pl, err := b.Plan(ctx, p, dt, dir)
	if err != nil {
		return ""
	}
	return pl.Family
}

// force makes b's plans use configuration c for stage on problems of p's
// key, as the tuner does.
func force(b *Backend, stage string, p *spec.Problem, dt spec.DType, c Candidate) {
	b.tune.setOverride(tuneKeyOf(tunableByName(stage), p, dt), c.String())
}

func randn(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// convert rounds or widens every element of x to U.
func convert[U, T float32 | float64](x []T) []U {
	out := make([]U, len(x))
	for i, v := range x {
		out[i] = U(v)
	}
	return out
}

var (
	to32 = convert[float32, float64] // float64 reference values to float32
	to64 = convert[float64, float32]
)

// hostCase is the shape of one conformance case of the host tests.
type hostCase struct {
	b, hq, hkv, nq, nk, d, dv int
	mask                      spec.Mask
}

// awkwardCases are shapes every kernel test runs: odd lengths, GQA, Nq ≠
// Nk both ways under both causal alignments, D ≠ Dv, d 256.
var awkwardCases = []hostCase{
	{1, 2, 2, 77, 77, 64, 64, spec.MaskNone},
	{2, 4, 2, 150, 130, 64, 64, spec.MaskCausalBottomRight},
	{1, 2, 1, 130, 150, 128, 128, spec.MaskCausalTopLeft},
	{1, 1, 1, 200, 70, 40, 40, spec.MaskCausalBottomRight},
	{1, 1, 1, 64, 64, 80, 48, spec.MaskCausalTopLeft},
	{1, 1, 1, 45, 45, 256, 256, spec.MaskNone},
}

// name names case i for t.Run.
func (c hostCase) name(i int) string {
	return fmt.Sprintf("%d-%dx%dx%d-q%d-k%d-d%d-dv%d-m%d", i, c.b, c.hq, c.hkv, c.nq, c.nk, c.d, c.dv, c.mask)
}

// problem draws the case's inputs from seed.
func (c hostCase) problem(seed uint64) *hostProblem {
	return newHostProblem(seed, c.b, c.hq, c.hkv, c.nq, c.nk, c.d, c.dv, c.mask)
}

type hostProblem struct {
	p             *spec.Problem
	q, k, v, dO   []float32
	o, lse        []float32
	dq, dk, dv    []float32
	causal, brAln bool
}

func newHostProblem(seed uint64, b, hq, hkv, nq, nk, d, dv int, mask spec.Mask) *hostProblem {
	rng := rand.New(rand.NewPCG(seed, 7))
	p := &spec.Problem{B: b, Hq: hq, Hkv: hkv, Nq: nq, Nk: nk, D: d, Dv: dv, Mask: mask,
		Scale: float32(1 / math.Sqrt(float64(d))),
		Q:     spec.BSHD(nq, hq, d), K: spec.BSHD(nk, hkv, d), V: spec.BSHD(nk, hkv, dv), O: spec.BSHD(nq, hq, dv)}
	return &hostProblem{p: p,
		q: randn(rng, b*nq*hq*d), k: randn(rng, b*nk*hkv*d), v: randn(rng, b*nk*hkv*dv), dO: randn(rng, b*nq*hq*dv),
		o: make([]float32, b*nq*hq*dv), lse: make([]float32, b*hq*nq),
		dq: make([]float32, b*nq*hq*d), dk: make([]float32, b*nk*hkv*d), dv: make([]float32, b*nk*hkv*dv)}
}

func (h *hostProblem) ref() reference.Params {
	p := h.p
	return reference.Params{B: p.B, Hq: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk, D: p.D, Dv: p.Dv, Scale: float64(p.Scale),
		Causal: p.Mask != spec.MaskNone, BottomRight: p.Mask == spec.MaskCausalBottomRight}
}

func checkClose(t *testing.T, name string, got []float32, want []float64, tol float64) {
	t.Helper()
	s := reference.Compare(got, want)
	if s.NaN > 0 || !(s.RelL2 <= tol) {
		t.Errorf("%s: rel_l2 %.3g (tol %.3g) max_abs %.3g NaN %d", name, s.RelL2, tol, s.MaxAbs, s.NaN)
	}
}

// TestHostKernels runs every forward kernel and the backward through the
// host path on a small GQA causal problem against the float64 reference.
func TestHostKernels(t *testing.T) {
	ctx := context.Background()
	for _, kernel := range []string{"flash", "minimal", "naive"} {
		t.Run(kernel, func(t *testing.T) {
			b := openBackend(t, kernel)
			h := newHostProblem(1, 2, 4, 2, 37, 45, 32, 32, spec.MaskCausalBottomRight)
			if err := ForwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, HostBias{}); err != nil {
				t.Fatal(err)
			}
			o, lse, err := reference.Forward(h.ref(), to64(h.q), to64(h.k), to64(h.v))
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "o", h.o, o, 1e-5)
			checkClose(t, "lse", h.lse, lse, 1e-5)
			if kernel != "flash" {
				return // the backward kernels do not depend on the forward kernel
			}
			if err := BackwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, h.dO, h.dq, h.dk, h.dv, HostBias{}); err != nil {
				t.Fatal(err)
			}
			dq, dk, dv, err := reference.Backward(h.ref(), to64(h.q), to64(h.k), to64(h.v), to64(h.dO))
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "dq", h.dq, dq, 1e-5)
			checkClose(t, "dk", h.dk, dk, 1e-5)
			checkClose(t, "dv", h.dv, dv, 1e-5)
		})
	}
}

func resident(t *testing.T, b *Backend, s spec.Shape, st spec.Strides, data []float32) *Tensor {
	t.Helper()
	x, err := b.NewTensor(spec.Float32, s, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	if data != nil {
		if err := Upload(context.Background(), x, data); err != nil {
			t.Fatal(err)
		}
	} else if err := x.Fill(context.Background(), 0x7FC00000); err != nil {
		t.Fatal(err)
	}
	return x
}

func fetch(t *testing.T, x *Tensor) []float32 {
	t.Helper()
	out := make([]float32, x.Len())
	if err := Download(context.Background(), x, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// TestStepMatchesForwardBackward: the one-submission training step gives
// the bits of a resident forward followed by a resident backward, and of
// the host path.
func TestStepMatchesForwardBackward(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t, "")
	h := newHostProblem(2, 2, 4, 1, 40, 33, 16, 24, spec.MaskCausalTopLeft)
	p := h.p
	qs, ks, vs, os := spec.Shape{B: p.B, S: p.Nq, H: p.Hq, D: p.D}, spec.Shape{B: p.B, S: p.Nk, H: p.Hkv, D: p.D}, spec.Shape{B: p.B, S: p.Nk, H: p.Hkv, D: p.Dv}, spec.Shape{B: p.B, S: p.Nq, H: p.Hq, D: p.Dv}
	q, k, v := resident(t, b, qs, p.Q, h.q), resident(t, b, ks, p.K, h.k), resident(t, b, vs, p.V, h.v)
	do := resident(t, b, os, p.O, h.dO)
	type outs struct{ o, lse, dq, dk, dv *Tensor }
	mk := func() outs {
		return outs{resident(t, b, os, p.O, nil), resident(t, b, LSEShape(p), LSEStrides(p), nil),
			resident(t, b, qs, p.Q, nil), resident(t, b, ks, p.K, nil), resident(t, b, vs, p.V, nil)}
	}
	a, s := mk(), mk()
	if err := b.Step(ctx, p, q, k, v, do, a.o, a.lse, a.dq, a.dk, a.dv); err != nil {
		t.Fatal(err)
	}
	if err := b.Forward(ctx, p, q, k, v, s.o, s.lse); err != nil {
		t.Fatal(err)
	}
	if err := b.Backward(ctx, p, q, k, v, s.o, s.lse, do, s.dq, s.dk, s.dv); err != nil {
		t.Fatal(err)
	}
	if err := ForwardHost(ctx, b, p, h.q, h.k, h.v, h.o, h.lse, HostBias{}); err != nil {
		t.Fatal(err)
	}
	if err := BackwardHost(ctx, b, p, h.q, h.k, h.v, h.o, h.lse, h.dO, h.dq, h.dk, h.dv, HostBias{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		x, y *Tensor
		host []float32
	}{{"o", a.o, s.o, h.o}, {"lse", a.lse, s.lse, h.lse}, {"dq", a.dq, s.dq, h.dq}, {"dk", a.dk, s.dk, h.dk}, {"dv", a.dv, s.dv, h.dv}} {
		x, y := fetch(t, c.x), fetch(t, c.y)
		if !bitsEqual(x, y) {
			t.Errorf("%s: step differs from forward+backward", c.name)
		}
		if !bitsEqual(x, c.host) {
			t.Errorf("%s: step differs from the host path", c.name)
		}
	}
	// Misuse: an output passed twice, a tensor of the wrong shape.
	if err := b.Step(ctx, p, q, k, v, do, a.o, a.lse, a.dq, a.dq, a.dv); !errors.Is(err, ErrInvalid) {
		t.Errorf("dq as dk: %v", err)
	}
	if err := b.Forward(ctx, p, q, q, v, a.o, a.lse); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "k:") {
		t.Errorf("q as k: %v", err)
	}
}

// TestBatchChunks forces the host path to split by batch (a tiny buffer
// limit) and checks the bits against the unsplit run.
func TestBatchChunks(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t, "")
	h := newHostProblem(3, 5, 2, 2, 24, 20, 8, 8, spec.MaskNone)
	p := h.p
	if err := ForwardHost(ctx, b, p, h.q, h.k, h.v, h.o, h.lse, HostBias{}); err != nil {
		t.Fatal(err)
	}
	if err := BackwardHost(ctx, b, p, h.q, h.k, h.v, h.o, h.lse, h.dO, h.dq, h.dk, h.dv, HostBias{}); err != nil {
		t.Fatal(err)
	}
	full := [][]float32{slices.Clone(h.o), slices.Clone(h.lse), slices.Clone(h.dq), slices.Clone(h.dk), slices.Clone(h.dv)}
	saved, savedBind := b.maxBuf, b.bindBytes
	b.maxBuf, b.bindBytes = 2*24*2*8*4, 2*24*2*8*4 // two batches of Q
	defer func() { b.maxBuf, b.bindBytes = saved, savedBind }()
	if n, err := b.MaxBatchChunk(context.Background(), p, spec.Float32, true); err != nil || n != 2 {
		t.Fatalf("chunk %d, %v; want 2", n, err)
	}
	for _, x := range [][]float32{h.o, h.lse, h.dq, h.dk, h.dv} {
		for i := range x {
			x[i] = float32(math.NaN())
		}
	}
	if err := ForwardHost(ctx, b, p, h.q, h.k, h.v, h.o, h.lse, HostBias{}); err != nil {
		t.Fatal(err)
	}
	if err := BackwardHost(ctx, b, p, h.q, h.k, h.v, h.o, h.lse, h.dO, h.dq, h.dk, h.dv, HostBias{}); err != nil {
		t.Fatal(err)
	}
	for i, x := range [][]float32{h.o, h.lse, h.dq, h.dk, h.dv} {
		if !bitsEqual(x, full[i]) {
			t.Errorf("output %d: chunked run differs", i)
		}
	}
}

// TestLimits: views beyond the largest buffer (or, without device
// addresses, beyond one binding), tensors beyond the largest buffer and
// naive score matrices beyond one binding are refused with clear errors.
func TestLimits(t *testing.T) {
	b := openBackend(t, "naive")
	// 2^33 float16 elements (16 GiB): beyond a binding; created where the
	// kernels read operands by address and the device's largest buffer
	// holds it, else refused saying which limit.
	big, err := b.NewTensor(spec.Float16, spec.Shape{B: 1, S: 1 << 20, H: 64, D: 128}, spec.Strides{})
	_, why := b.Addressing()
	switch {
	case why == "" && b.MaxBufferBytes() >= 1<<34:
		if err != nil {
			t.Errorf("2^33 elements with device addresses and buffers of %d bytes: %v", b.MaxBufferBytes(), err)
		}
		big.Close()
	case why == "":
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "largest buffer") {
			t.Errorf("2^33 elements, largest buffer %d bytes: %v", b.MaxBufferBytes(), err)
		}
	default:
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "one binding reaches") {
			t.Errorf("2^33 elements without device addresses: %v", err)
		}
	}
	n := int(b.MaxBufferBytes()/4) + 1
	_, err = b.NewTensor(spec.Float32, spec.Shape{B: 1, S: n, H: 1, D: 1}, spec.Strides{})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("beyond the largest buffer: %v", err)
	}
	// Naive: the smallest square score matrix beyond one binding (the
	// kernel binds it).
	nq := int(math.Sqrt(float64(b.BindingBytes())/4)) + 1
	h := newHostProblem(4, 1, 1, 1, nq, nq, 1, 1, spec.MaskNone)
	err = ForwardHost(context.Background(), b, h.p, h.q, h.k, h.v, h.o, h.lse, HostBias{})
	want := fmt.Sprintf("%d bytes", NaiveScratchBytes(h.p))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "naive") || !strings.Contains(err.Error(), want) {
		t.Errorf("naive scratch: %v (want ErrTooLarge naming %s)", err, want)
	}
	t.Logf("naive refusal: %v", err)
}

// TestConcurrent runs host calls from many goroutines (run with -race)
// and checks each against a serial run.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t, "")
	const n = 6
	probs := make([]*hostProblem, n)
	want := make([][]float32, n)
	for i := range probs {
		probs[i] = newHostProblem(uint64(10+i), 1, 2, 1, 16+i, 20, 16, 16, spec.Mask(i%3))
		h := probs[i]
		if err := ForwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, HostBias{}); err != nil {
			t.Fatal(err)
		}
		want[i] = slices.Clone(h.o)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n*3)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := probs[i]
			o := make([]float32, len(h.o))
			lse := make([]float32, len(h.lse))
			for range 3 {
				if err := ForwardHost(ctx, b, h.p, h.q, h.k, h.v, o, lse, HostBias{}); err != nil {
					errs <- err
					return
				}
				if !bitsEqual(o, want[i]) {
					errs <- fmt.Errorf("problem %d: concurrent result differs", i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestBench(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t, "")
	h := newHostProblem(5, 1, 2, 2, 64, 64, 32, 32, spec.MaskCausalTopLeft)
	if err := ForwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, HostBias{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []BenchOptions{{Iters: 3, Rotate: 2}, {Iters: 3, Backward: true}, {Iters: 2, Step: true, Warmup: -1},
		{Iters: 2, Backward: true, PerKernel: true}} {
		r, err := BenchmarkHost(ctx, b, h.p, o, h.q, h.k, h.v, h.o, h.dO, h.lse, HostBias{})
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		if len(r.Times) != o.Iters {
			t.Errorf("%+v: %d times", o, len(r.Times))
		}
		for _, d := range r.Times {
			if d <= 0 {
				t.Errorf("%+v: time %v", o, d)
			}
		}
		if b.Info().TimestampValidBits > 0 && r.Clock != "gpu-timestamps" {
			t.Errorf("clock %q", r.Clock)
		}
		if o.PerKernel && b.Info().TimestampValidBits > 0 {
			ls, err := b.Launches(ctx, h.p, spec.Float32, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Kernels) != len(ls) {
				t.Fatalf("%d per-kernel series for %d launches", len(r.Kernels), len(ls))
			}
			for i, k := range r.Kernels {
				if !strings.HasPrefix(k.Name, ls[i].Kernel+".") || len(k.Times) != o.Iters {
					t.Errorf("kernel %d: %q with %d times, want %s.* with %d", i, k.Name, len(k.Times), ls[i].Kernel, o.Iters)
				}
			}
		}
		t.Logf("%+v: %s %v", o, r.Clock, r.Times)
	}
}

func TestClose(t *testing.T) {
	b := openBackend(t, "")
	x, err := b.NewTensor(spec.Float32, spec.Shape{B: 1, S: 4, H: 1, D: 4}, spec.Strides{})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Upload(context.Background(), x, make([]float32, 16)); !errors.Is(err, ErrClosed) {
		t.Errorf("upload to closed tensor: %v", err)
	}
	if err := Upload(context.Background(), x, make([]uint16, 16)); !errors.Is(err, ErrClosed) {
		t.Errorf("upload to closed tensor: %v", err)
	}
	y, _ := b.NewTensor(spec.Float32, spec.Shape{B: 1, S: 4, H: 1, D: 4}, spec.Strides{})
	if err := Upload(context.Background(), y, make([]uint16, 16)); !errors.Is(err, ErrInvalid) {
		t.Errorf("f16 data into f32 tensor: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.NewTensor(spec.Float32, spec.Shape{B: 1, S: 1, H: 1, D: 1}, spec.Strides{}); !errors.Is(err, ErrClosed) {
		t.Errorf("NewTensor after Close: %v", err)
	}
	h := newHostProblem(6, 1, 1, 1, 4, 4, 4, 4, spec.MaskNone)
	if err := ForwardHost(context.Background(), b, h.p, h.q, h.k, h.v, h.o, h.lse, HostBias{}); !errors.Is(err, ErrClosed) {
		t.Errorf("ForwardHost after Close: %v", err)
	}
	if err := y.Close(); err != nil {
		t.Errorf("tensor Close after backend Close: %v", err)
	}
}

func TestOpenOptions(t *testing.T) {
	if _, err := Open(Options{Kernel: "fancy"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad kernel: %v", err)
	}
	b := openBackend(t, "minimal")
	if b.Kernel() != shaders.KernelMinimal {
		t.Errorf("kernel %q", b.Kernel())
	}
	lim := b.Limits()
	info := b.Info()
	if lim.Subgroup != int(info.SubgroupSize) || lim.SharedBytes != int(info.MaxSharedMemory) {
		t.Errorf("limits %+v do not come from the device %+v", lim, info)
	}
	if slices.Contains(b.DTypes(), spec.Float16) != info.StorageBuffer16Bit {
		t.Errorf("dtypes %v with storageBuffer16BitAccess %v", b.DTypes(), info.StorageBuffer16Bit)
	}
}
