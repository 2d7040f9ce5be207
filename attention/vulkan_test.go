package attention_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/attention/attentiontest"
	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/reference"
	"github.com/x448/float16"
)

// requireVulkan reports whether FLASHVK_REQUIRE_VULKAN=1 turns a missing
// Vulkan device from a skip into a failure.
func requireVulkan() bool { return os.Getenv("FLASHVK_REQUIRE_VULKAN") == "1" }

// skipWithoutVulkan skips t (or, with FLASHVK_REQUIRE_VULKAN=1, fails it)
// when this machine or binary has no Vulkan device, saying why.
func skipWithoutVulkan(t *testing.T) {
	t.Helper()
	if _, err := attention.Devices(attention.Config{}); err != nil {
		if requireVulkan() {
			t.Fatalf("FLASHVK_REQUIRE_VULKAN=1 but no Vulkan device: %v", err)
		}
		t.Skipf("no Vulkan device (set FLASHVK_REQUIRE_VULKAN=1 to fail instead): %v", err)
	}
}

// openVulkan opens a Vulkan engine on the best device (FLASHVK_DEVICE
// names another) with kernel selection kernel: skipped without a device
// (failed with FLASHVK_REQUIRE_VULKAN=1), the validation layer on with
// FLASHVK_VALIDATION=1, and Close — which reports validation messages as
// an error — failing t.
func openVulkan(t *testing.T, kernel string) *attention.Engine {
	t.Helper()
	return openVulkanConfig(t, attention.Config{Kernel: kernel})
}

// openVulkanConfig opens cfg on the Vulkan backend (validation per
// FLASHVK_VALIDATION), closing it when t ends.
func openVulkanConfig(t *testing.T, cfg attention.Config) *attention.Engine {
	t.Helper()
	skipWithoutVulkan(t)
	cfg.Backend, cfg.Validation = attention.Vulkan, os.Getenv("FLASHVK_VALIDATION") == "1"
	e, err := attention.Open(cfg)
	if err != nil {
		t.Fatalf("open vulkan (%+v): %v", cfg, err)
	}
	if e.Info().Kind != attention.Vulkan {
		t.Fatalf("open vulkan: got %+v", e.Info())
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

// TestConformanceVulkan runs the whole suite (forward, backward,
// determinism; float32 and, where the device has 16-bit storage, float16)
// on the default flash kernel.
func TestConformanceVulkan(t *testing.T) {
	e := openVulkan(t, "flash")
	t.Logf("%+v", e.Info())
	attentiontest.Run(t, e)
}

// TestConformanceVulkanAddressed runs the whole suite on the kernels'
// addressed builds (Config.Addressing "addresses": Q, K, V, O and the
// gradients through 64-bit buffer device addresses, LSE and D bound), the
// ones that run operands larger than one binding, after checking that the
// plans use them.
func TestConformanceVulkanAddressed(t *testing.T) {
	e := openVulkanConfig(t, attention.Config{Addressing: "addresses"})
	ctx := context.Background()
	s := attention.Shape{B: 2, S: 40, H: 2, D: 32}
	for _, dt := range e.Info().DTypes {
		for _, bwd := range []bool{false, true} {
			pl, err := e.Plan(ctx, s, s, s, attention.BSHD, dt, attention.Options{Causal: true}, bwd)
			if err != nil {
				t.Fatalf("plan %v backward %v: %v", dt, bwd, err)
			}
			for _, l := range pl.Launches {
				if len(l.Addresses) == 0 || !strings.HasSuffix(l.Kernel, ".addr") {
					t.Fatalf("plan %v backward %v: launch %s reads no operand by address", dt, bwd, l.Name)
				}
			}
			t.Logf("%v backward %v: %s, %s reads %v by address", dt, bwd, pl.Family, pl.Launches[0].Name, pl.Launches[0].Addresses)
		}
	}
	attentiontest.Run(t, e)
}

// The minimal and naive forwards run the forward suites only: the backward
// kernels (and hence RunBackward and RunDeterminism) are the same for
// every forward kernel and covered by TestConformanceVulkan.
// They run no window, softcap, ALiBi or key counts (Options beyond
// Scale, Causal and Align): such calls fail with ErrBackend.
func TestConformanceVulkanMinimal(t *testing.T) {
	e := openVulkan(t, "minimal")
	attentiontest.RunForward(t, e)
	t.Run("special", func(t *testing.T) { attentiontest.RunSpecialForward(t, e) })
	t.Run("features", func(t *testing.T) { refusesFeatures(t, e) })
}

func TestConformanceVulkanNaive(t *testing.T) {
	e := openVulkan(t, "naive")
	attentiontest.RunForward(t, e)
	t.Run("special", func(t *testing.T) { attentiontest.RunSpecialForward(t, e) })
	t.Run("features", func(t *testing.T) { refusesFeatures(t, e) })
}

// refusesFeatures checks that e's forward refuses each option beyond
// Scale, Causal and Align with ErrBackend, naming the family.
func refusesFeatures(t *testing.T, e *attention.Engine) {
	s := attention.Shape{B: 2, S: 16, H: 2, D: 8}
	q, _ := attention.NewTensor(attention.Float32, s, attention.BSHD)
	for _, o := range []attention.Options{
		{Window: &attention.Window{Left: 3, Right: 0}}, {Softcap: 5}, {ALiBi: []float32{1, 0.5}}, {SeqUsedK: []int32{3, 16}},
	} {
		_, err := e.Forward(context.Background(), q, q, q, o)
		if !errors.Is(err, attention.ErrBackend) || !strings.Contains(err.Error(), e.Info().Kernel) {
			t.Errorf("%+v: %v, want ErrBackend naming %s", o, err, e.Info().Kernel)
		}
	}
}

// TestConformanceVulkanCoopmat runs the forward and backward suites with
// Kernel "flash_cm": float16 forwards on cooperative matrices (MODE 1 where
// the probe allows it, small tiles below Nq 2048 and large ones in the long
// cases; MODE 0 elsewhere), float16
// backwards on bwd_cm_dkdv + bwd_cm_dq; bfloat16 the same with the bf16
// modules where the device has bf16 cooperative matrices and
// VK_KHR_shader_bfloat16 (the H200), else on the scalar kernels; float32 on
// the scalar kernels in the same engine; then bitwise determinism. Every
// dtype the engine offers runs, each with its own tolerance (bf16: twice
// the PyTorch-style bf16 baseline). Skipped on devices without
// cooperative-matrix support (CI's lavapipe).
func TestConformanceVulkanCoopmat(t *testing.T) {
	skipWithoutVulkan(t)
	e, err := attention.Open(attention.Config{Backend: attention.Vulkan, Validation: os.Getenv("FLASHVK_VALIDATION") == "1"})
	if err != nil {
		t.Fatalf("open vulkan: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if k := e.Info().Kernel; k != "flash_cm" {
		t.Skipf("%s prefers %q: no cooperative-matrix kernels here", e.Info().Device, k)
	}
	ctx := context.Background()
	for _, nq := range []int{100, 4096} {
		for _, d := range []int{64, 128, 256} {
			s := attention.Shape{B: 1, S: nq, H: 1, D: d}
			for _, bwd := range []bool{false, true} {
				var fams []string
				for _, dt := range []attention.DType{attention.Float16, attention.BFloat16, attention.Float32} {
					pl, err := e.Plan(ctx, s, s, s, attention.BSHD, dt, attention.Options{}, bwd)
					if err != nil {
						t.Fatalf("plan %v Nq %d d %d: %v", dt, nq, d, err)
					}
					fams = append(fams, fmt.Sprintf("%v runs %s", dt, pl.Family))
				}
				t.Logf("Nq %d d %d backward %v: %s", nq, d, bwd, strings.Join(fams, ", "))
			}
		}
	}
	long := []attentiontest.Case{
		{Name: "long", B: 1, Hq: 2, Hkv: 1, Nq: 2048, Nk: 2048, D: 128, Dv: 128},
		{Name: "long", B: 1, Hq: 2, Hkv: 2, Nq: 2100, Nk: 2060, D: 64, Dv: 64, Causal: true, Align: attention.BottomRight},
		{Name: "long", B: 1, Hq: 1, Hkv: 1, Nq: 2048, Nk: 1500, D: 96, Dv: 96, Causal: true, Align: attention.TopLeft},
		{Name: "long", B: 1, Hq: 1, Hkv: 1, Nq: 2048, Nk: 2048, D: 256, Dv: 256},
	}
	attentiontest.RunForward(t, e)
	t.Run("long", func(t *testing.T) { attentiontest.RunForwardCases(t, e, long) })
	// The backward of f16 (and, with bf16 coopmat, bf16) problems runs
	// bwd_cm_dkdv + bwd_cm_dq here.
	t.Run("backward", func(t *testing.T) { attentiontest.RunBackward(t, e) })
	t.Run("deterministic", func(t *testing.T) { attentiontest.RunDeterminism(t, e, 10) })
	t.Run("backward-long", func(t *testing.T) { attentiontest.RunBackwardCases(t, e, long[:3]) })
	t.Run("edges", func(t *testing.T) { attentiontest.RunEdges(t, e) })
	t.Run("special", func(t *testing.T) { attentiontest.RunSpecial(t, e) })
	t.Run("features", func(t *testing.T) { attentiontest.RunFeatures(t, e) })
	longExt := []attentiontest.Case{
		{Name: "long-window", B: 1, Hq: 2, Hkv: 1, Nq: 2048, Nk: 2048, D: 128, Dv: 128, Causal: true, Align: attention.BottomRight,
			Window: &attention.Window{Left: 300, Right: 0}, Softcap: 30, Scale: 0.5},
		{Name: "long-alibi", B: 2, Hq: 2, Hkv: 2, Nq: 1100, Nk: 2060, D: 64, Dv: 64, ALiBi: 2, SeqUsedK: []int32{2060, 999}},
		{Name: "long-bias", B: 1, Hq: 2, Hkv: 1, Nq: 1100, Nk: 1100, D: 128, Dv: 128, Causal: true, Align: attention.BottomRight,
			Bias: &attentiontest.BiasCase{B: 1, S: 1100, H: 1, Docs: 300, Holes: 0.01, Grad: true}},
		// A window open on both sides at d 64 from 2048 query rows: fp16's
		// forward takes the two row blocks there.
		{Name: "long-window-rows", B: 1, Hq: 2, Hkv: 1, Nq: 2048, Nk: 2048, D: 64, Dv: 64, Window: &attention.Window{Left: 100, Right: 30}},
		// A window alone at d 128 from 2048 query rows: the forward takes
		// plain's nsg8-bc64 there where 48 KiB of shared memory hold it.
		{Name: "long-window-large", B: 1, Hq: 2, Hkv: 1, Nq: 2048, Nk: 2048, D: 128, Dv: 128, Causal: true, Align: attention.TopLeft,
			Window: &attention.Window{Left: 333, Right: 0}},
	}
	t.Run("features-long", func(t *testing.T) {
		attentiontest.RunForwardCases(t, e, longExt)
		attentiontest.RunBackwardCases(t, e, longExt)
	})
}

func randTensor(rng *rand.Rand, dt attention.DType, s attention.Shape, l attention.Layout) attention.Tensor {
	t, _ := attention.NewTensor(dt, s, l)
	switch d := t.Data.(type) {
	case []float32:
		for i := range d {
			d[i] = float32(rng.NormFloat64())
		}
	case []float16.Float16:
		for i := range d {
			d[i] = float16.Fromfloat32(float32(rng.NormFloat64()))
		}
	case []bfloat16.BFloat16:
		for i := range d {
			d[i] = bfloat16.FromFloat32(float32(rng.NormFloat64()))
		}
	}
	return t
}

type deviceSet struct {
	q, k, v, do, o, lse, dq, dk, dv *attention.DeviceTensor
}

func newDeviceSet(t *testing.T, e *attention.Engine, dt attention.DType, qs, ks, vs attention.Shape, l attention.Layout) *deviceSet {
	t.Helper()
	os := attention.Shape{B: qs.B, S: qs.S, H: qs.H, D: vs.D}
	mk := func(dt attention.DType, s attention.Shape, l attention.Layout) *attention.DeviceTensor {
		d, err := e.NewDeviceTensor(dt, s, l)
		if err != nil {
			t.Fatalf("NewDeviceTensor %v: %v", s, err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	return &deviceSet{
		q: mk(dt, qs, l), k: mk(dt, ks, l), v: mk(dt, vs, l), do: mk(dt, os, l),
		o: mk(dt, os, l), lse: mk(attention.Float32, attention.LSEShape(qs.B, qs.H, qs.S), attention.BHSD),
		dq: mk(dt, qs, l), dk: mk(dt, ks, l), dv: mk(dt, vs, l),
	}
}

// download returns d's elements as float32 bits in logical BSHD order.
func download(t *testing.T, d *attention.DeviceTensor) []uint32 {
	t.Helper()
	h, _ := attention.NewTensor(d.DType(), d.Shape(), d.Layout())
	if err := d.Download(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	return bitsOf(h.Float32s())
}

func bitsOf(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}

// TestTrainStepVulkan: TrainStep (one submission) gives the bits of
// ForwardDevice followed by BackwardDevice, and of the host API.
func TestTrainStepVulkan(t *testing.T) {
	e := openVulkan(t, "")
	ctx := context.Background()
	opt := attention.Options{Causal: true, Align: attention.BottomRight}
	for _, dt := range e.Info().DTypes {
		t.Run(dt.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(dt)))
			qs := attention.Shape{B: 2, S: 45, H: 4, D: 32}
			ks := attention.Shape{B: 2, S: 61, H: 2, D: 32}
			vs := attention.Shape{B: 2, S: 61, H: 2, D: 16}
			os := attention.Shape{B: 2, S: 45, H: 4, D: 16}
			for _, l := range []attention.Layout{attention.BSHD, attention.BHSD} {
				q, k, v, do := randTensor(rng, dt, qs, l), randTensor(rng, dt, ks, l), randTensor(rng, dt, vs, l), randTensor(rng, dt, os, l)
				a, b := newDeviceSet(t, e, dt, qs, ks, vs, l), newDeviceSet(t, e, dt, qs, ks, vs, l)
				for _, s := range []*deviceSet{a, b} {
					for _, u := range []struct {
						d *attention.DeviceTensor
						h attention.Tensor
					}{{s.q, q}, {s.k, k}, {s.v, v}, {s.do, do}} {
						if err := u.d.Upload(ctx, u.h); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := e.TrainStep(ctx, a.q, a.k, a.v, a.do, a.o, a.lse, a.dq, a.dk, a.dv, opt); err != nil {
					t.Fatal(err)
				}
				if err := e.ForwardDevice(ctx, b.q, b.k, b.v, b.o, b.lse, opt); err != nil {
					t.Fatal(err)
				}
				if err := e.BackwardDevice(ctx, b.q, b.k, b.v, b.o, b.lse, b.do, b.dq, b.dk, b.dv, opt); err != nil {
					t.Fatal(err)
				}
				out, err := e.Forward(ctx, q, k, v, opt)
				if err != nil {
					t.Fatal(err)
				}
				g, err := e.Backward(ctx, q, k, v, out.O, out.LSE, do, opt)
				if err != nil {
					t.Fatal(err)
				}
				host := map[string][]uint32{"o": bitsOf(out.O.Float32s()), "dq": bitsOf(g.DQ.Float32s()),
					"dk": bitsOf(g.DK.Float32s()), "dv": bitsOf(g.DV.Float32s()),
					"lse": bitsOf(attention.FromFloat32(out.LSE, attention.LSEShape(2, 4, 45), attention.BHSD).Float32s())}
				for _, c := range []struct {
					name string
					x, y *attention.DeviceTensor
				}{{"o", a.o, b.o}, {"lse", a.lse, b.lse}, {"dq", a.dq, b.dq}, {"dk", a.dk, b.dk}, {"dv", a.dv, b.dv}} {
					x, y := download(t, c.x), download(t, c.y)
					if !slices.Equal(x, y) {
						t.Errorf("%v %s: TrainStep differs from ForwardDevice+BackwardDevice", l, c.name)
					}
					if !slices.Equal(x, host[c.name]) {
						t.Errorf("%v %s: TrainStep differs from the host API", l, c.name)
					}
				}
			}
		})
	}
}

// testRoundTrip uploads strided host views into device tensors and
// downloads them into padded views, checking values and that elements
// outside the destination view survive.
func testRoundTrip(t *testing.T, e *attention.Engine) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	s := attention.Shape{B: 2, S: 5, H: 3, D: 7}
	for _, dt := range e.Info().DTypes {
		for _, l := range []attention.Layout{attention.BSHD, attention.BHSD} {
			src := randTensor(rng, dt, s, attention.BHSD) // BHSD host data, any device layout
			d, err := e.NewDeviceTensor(dt, s, l)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Upload(ctx, src); err != nil {
				t.Fatal(err)
			}
			// A view with 2 elements of padding after every row.
			row := s.D + 2
			pad, _ := attention.NewTensor(dt, attention.Shape{B: 1, S: 1, H: 1, D: s.B * s.S * s.H * row}, attention.BSHD)
			dst := attention.Tensor{Shape: s, Strides: attention.Strides{Batch: s.S * s.H * row, Seq: s.H * row, Head: row}, Data: pad.Data}
			switch x := pad.Data.(type) {
			case []float32:
				for i := range x {
					x[i] = 42
				}
			case []float16.Float16:
				for i := range x {
					x[i] = float16.Fromfloat32(42)
				}
			case []bfloat16.BFloat16:
				for i := range x {
					x[i] = bfloat16.FromFloat32(42)
				}
			}
			if err := d.Download(ctx, dst); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(src.Float32s(), dst.Float32s()) {
				t.Errorf("%v %v: round trip changed values", dt, l)
			}
			all := pad.Float32s()
			for i := range all {
				if i%row >= s.D && all[i] != 42 {
					t.Fatalf("%v %v: element %d outside the view overwritten", dt, l, i)
				}
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if err := d.Upload(ctx, src); !errors.Is(err, attention.ErrClosed) {
				t.Errorf("upload after Close: %v", err)
			}
		}
		// A device bias's last dimension is its key count, past any head
		// dim: it uploads and downloads too (it did not, beyond 256).
		bs := attention.Shape{B: 1, S: 3, H: 2, D: 300}
		src := randTensor(rng, dt, bs, attention.BHSD)
		d, err := e.NewDeviceTensor(dt, bs, attention.BHSD)
		if err != nil {
			t.Fatal(err)
		}
		dst, _ := attention.NewTensor(dt, bs, attention.BHSD)
		if err := d.Upload(ctx, src); err != nil {
			t.Errorf("%v: upload of %v: %v", dt, bs, err)
		} else if err := d.Download(ctx, dst); err != nil {
			t.Errorf("%v: download of %v: %v", dt, bs, err)
		} else if !slices.Equal(src.Float32s(), dst.Float32s()) {
			t.Errorf("%v: %v round trip changed values", dt, bs)
		}
		d.Close()
	}
}

func TestDeviceTensorRoundTripVulkan(t *testing.T) { testRoundTrip(t, openVulkan(t, "")) }

func TestDeviceTensorRoundTripCPU(t *testing.T) {
	e, _ := attention.Open(attention.Config{Backend: attention.CPU})
	defer e.Close()
	testRoundTrip(t, e)
}

// testDeviceErrors checks argument validation of the device API.
func testDeviceErrors(t *testing.T, e, other *attention.Engine) {
	ctx := context.Background()
	qs := attention.Shape{B: 1, S: 8, H: 2, D: 16}
	s := newDeviceSet(t, e, attention.Float32, qs, qs, qs, attention.BSHD)
	x := newDeviceSet(t, other, attention.Float32, qs, qs, qs, attention.BSHD)
	opt := attention.Options{}
	check := func(what string, err, want error, arg string) {
		t.Helper()
		if !errors.Is(err, want) || !strings.Contains(err.Error(), arg+":") {
			t.Errorf("%s: %v (want %v naming %s)", what, err, want, arg)
		}
	}
	check("k of another engine", e.ForwardDevice(ctx, s.q, x.k, s.v, s.o, s.lse, opt), attention.ErrOption, "k")
	check("nil v", e.ForwardDevice(ctx, s.q, s.k, nil, s.o, s.lse, opt), attention.ErrOption, "v")
	check("o as q", e.ForwardDevice(ctx, s.q, s.k, s.v, s.q, s.lse, opt), attention.ErrOption, "o")
	check("o as lse", e.ForwardDevice(ctx, s.q, s.k, s.v, s.o, s.o, opt), attention.ErrShape, "lse")
	check("lse of another engine", e.ForwardDevice(ctx, s.q, s.k, s.v, s.o, x.lse, opt), attention.ErrOption, "lse")
	lseBSHD, _ := e.NewDeviceTensor(attention.Float32, attention.LSEShape(1, 2, 8), attention.BSHD)
	defer lseBSHD.Close()
	check("lse in bshd", e.ForwardDevice(ctx, s.q, s.k, s.v, s.o, lseBSHD, opt), attention.ErrStride, "lse")
	check("dv of another engine", e.TrainStep(ctx, s.q, s.k, s.v, s.do, s.o, s.lse, s.dq, s.dk, x.dv, opt), attention.ErrOption, "dv")
	check("dq twice", e.BackwardDevice(ctx, s.q, s.k, s.v, s.o, s.lse, s.do, s.dq, s.dq, s.dv, opt), attention.ErrOption, "dq")
	bh, _ := e.NewDeviceTensor(attention.Float32, qs, attention.BHSD)
	defer bh.Close()
	check("dq in another layout", e.BackwardDevice(ctx, s.q, s.k, s.v, s.o, s.lse, s.do, bh, s.dk, s.dv, opt), attention.ErrStride, "dq")
	small, _ := e.NewDeviceTensor(attention.Float32, attention.Shape{B: 1, S: 8, H: 2, D: 8}, attention.BSHD)
	defer small.Close()
	check("k head dim", e.ForwardDevice(ctx, s.q, small, s.v, s.o, s.lse, opt), attention.ErrShape, "k")
	check("nan scale", e.ForwardDevice(ctx, s.q, s.k, s.v, s.o, s.lse, attention.Options{Scale: float32(math.NaN())}), attention.ErrOption, "options")
	s.k.Close()
	check("closed k", e.ForwardDevice(ctx, s.q, s.k, s.v, s.o, s.lse, opt), attention.ErrClosed, "k")
	if _, err := e.NewDeviceTensor(attention.DType(9), qs, attention.BSHD); !errors.Is(err, attention.ErrDType) {
		t.Errorf("bad dtype: %v", err)
	}
	if _, err := e.NewDeviceTensor(attention.Float32, attention.Shape{B: 0, S: 1, H: 1, D: 1}, attention.BSHD); !errors.Is(err, attention.ErrShape) {
		t.Errorf("empty shape: %v", err)
	}
}

func TestDeviceErrorsCPU(t *testing.T) {
	e, _ := attention.Open(attention.Config{Backend: attention.CPU})
	defer e.Close()
	o, _ := attention.Open(attention.Config{Backend: attention.CPU})
	defer o.Close()
	testDeviceErrors(t, e, o)
}

func TestDeviceErrorsVulkan(t *testing.T) {
	e := openVulkan(t, "")
	o, _ := attention.Open(attention.Config{Backend: attention.CPU})
	defer o.Close()
	testDeviceErrors(t, e, o)
	testDeviceErrors(t, o, e)
}

// TestBenchmarkVulkan: GPU-timed forward and backward benchmarks return
// positive per-iteration times.
func TestBenchmarkVulkan(t *testing.T) {
	e := openVulkan(t, "")
	rng := rand.New(rand.NewPCG(5, 6))
	s := attention.Shape{B: 1, S: 128, H: 2, D: 64}
	q, k, v := randTensor(rng, attention.Float32, s, attention.BSHD), randTensor(rng, attention.Float32, s, attention.BSHD), randTensor(rng, attention.Float32, s, attention.BSHD)
	for _, o := range []attention.BenchOptions{{Warmup: 1, Iters: 4, Rotate: 2}, {Warmup: 1, Iters: 3, Backward: true}} {
		r, err := e.Benchmark(context.Background(), q, k, v, attention.Options{Causal: true}, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Times) != o.Iters || slices.Min(r.Times) <= 0 || r.Flops <= 0 {
			t.Errorf("%+v: %+v", o, r)
		}
		if r.Clock != "gpu-timestamps" {
			t.Logf("clock %q (device without compute timestamps?)", r.Clock)
		}
		t.Logf("%+v: median %v (%s), %.3g TFLOPS", o, r.Median(), r.Clock, r.TFLOPS())
	}
}

// TestFiniteDifferenceVulkan checks the Vulkan backward against central
// differences of the Vulkan forward on a tiny fp32 problem: with
// L = Σ O∘G, dL/dX ≈ (L(X+h) − L(X−h)) / 2h, evaluated in float64 from the
// fp32 outputs (h = 1e-2: truncation O(h²) ≈ 1e-4, fp32 round-off
// ≈ 1e-7/h). It also compares the backward tightly with the reference.
func TestFiniteDifferenceVulkan(t *testing.T) {
	e := openVulkan(t, "")
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	qs := attention.Shape{B: 1, S: 5, H: 2, D: 4}
	ks := attention.Shape{B: 1, S: 6, H: 1, D: 4}
	vs := attention.Shape{B: 1, S: 6, H: 1, D: 3}
	opt := attention.Options{Causal: true, Align: attention.BottomRight}
	q, k, v := randTensor(rng, attention.Float32, qs, attention.BSHD), randTensor(rng, attention.Float32, ks, attention.BSHD), randTensor(rng, attention.Float32, vs, attention.BSHD)
	out, err := e.Forward(ctx, q, k, v, opt)
	if err != nil {
		t.Fatal(err)
	}
	g := randTensor(rng, attention.Float32, out.O.Shape, attention.BSHD)
	grads, err := e.Backward(ctx, q, k, v, out.O, out.LSE, g, opt)
	if err != nil {
		t.Fatal(err)
	}
	loss := func() float64 {
		o, err := e.Forward(ctx, q, k, v, opt)
		if err != nil {
			t.Fatal(err)
		}
		var l float64
		for i, x := range o.O.Data.([]float32) {
			l += float64(x) * float64(g.Data.([]float32)[i])
		}
		return l
	}
	const h = 1e-2
	for _, c := range []struct {
		name string
		x    attention.Tensor
		grad attention.Tensor
	}{{"dq", q, grads.DQ}, {"dk", k, grads.DK}, {"dv", v, grads.DV}} {
		x := c.x.Data.([]float32)
		fd := make([]float64, len(x))
		for i := range x {
			x0 := x[i]
			x[i] = x0 + h
			lp := loss()
			x[i] = x0 - h
			lm := loss()
			x[i] = x0
			fd[i] = (lp - lm) / (2 * h)
		}
		st := reference.Compare(c.grad.Data.([]float32), fd)
		t.Logf("%s vs finite differences: rel_l2 %.3g max_abs %.3g", c.name, st.RelL2, st.MaxAbs)
		if !(st.RelL2 <= 1e-2) {
			t.Errorf("%s: rel_l2 %.3g against finite differences (tol 1e-2)", c.name, st.RelL2)
		}
	}
	rp := reference.Params{B: 1, Hq: 2, Hkv: 1, Nq: 5, Nk: 6, D: 4, Dv: 3, Causal: true, BottomRight: true}
	f64 := func(t attention.Tensor) []float64 {
		var out []float64
		for _, x := range t.Float32s() {
			out = append(out, float64(x))
		}
		return out
	}
	dq, dk, dv, err := reference.Backward(rp, f64(q), f64(k), f64(v), f64(g))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		got  attention.Tensor
		want []float64
	}{"dq": {grads.DQ, dq}, "dk": {grads.DK, dk}, "dv": {grads.DV, dv}} {
		if st := reference.Compare(c.got.Data.([]float32), c.want); !(st.RelL2 <= 1e-5) {
			t.Errorf("%s: rel_l2 %.3g against the reference (tol 1e-5)", name, st.RelL2)
		}
	}
}

// TestOpenSelection covers Open's backend choice: FLASHVK_BACKEND
// overrides Auto; a named device that does not exist is an error, never the
// CPU; a kernel name with the CPU backend is an error; Auto runs on the
// CPU only where no hardware device opens, saying why.
func TestOpenSelection(t *testing.T) {
	t.Setenv("FLASHVK_BACKEND", "cpu")
	e, err := attention.Open(attention.Config{})
	if err != nil || e.Info().Kind != attention.CPU || e.Fallback() != "" {
		t.Errorf("FLASHVK_BACKEND=cpu: %v %+v %q", err, e.Info(), e.Fallback())
	}
	e.Close()
	t.Setenv("FLASHVK_BACKEND", "tpu")
	if _, err := attention.Open(attention.Config{}); !errors.Is(err, attention.ErrOption) {
		t.Errorf("FLASHVK_BACKEND=tpu: %v", err)
	}
	os.Unsetenv("FLASHVK_BACKEND")
	const nowhere = "no-such-device-7f3a"
	for _, kind := range []attention.BackendKind{attention.Auto, attention.Vulkan} {
		if e, err := attention.Open(attention.Config{Backend: kind, Device: nowhere}); !errors.Is(err, attention.ErrBackend) {
			t.Errorf("%v on a missing device: %v %+v (want ErrBackend, no fallback)", kind, err, e)
		} else {
			t.Logf("%v on a missing device: %v", kind, err)
		}
	}
	if _, err := attention.Open(attention.Config{Backend: attention.Vulkan, Kernel: "turbo"}); !errors.Is(err, attention.ErrOption) {
		t.Errorf("bad kernel: %v", err)
	}
	if _, err := attention.Open(attention.Config{Backend: attention.CPU, Kernel: "flash"}); !errors.Is(err, attention.ErrOption) {
		t.Errorf("kernel with the CPU backend: %v", err)
	}
	if _, err := attention.Open(attention.Config{Backend: attention.CPU, Device: "0"}); !errors.Is(err, attention.ErrOption) {
		t.Errorf("device with the CPU backend: %v", err)
	}
	// Auto: the hardware device Devices marks, else the CPU with a reason
	// (a software device such as lavapipe only when named).
	e, err = attention.Open(attention.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	devs, _ := attention.Devices(attention.Config{})
	auto := slices.IndexFunc(devs, func(d attention.DeviceInfo) bool { return d.Auto })
	switch {
	case auto >= 0 && (e.Info().Kind != attention.Vulkan || e.Info().Device != devs[auto].Name):
		t.Errorf("auto: engine %+v, Devices marks %q", e.Info(), devs[auto].Name)
	case auto < 0 && (e.Info().Kind != attention.CPU || e.Fallback() == ""):
		t.Errorf("auto without a hardware device: engine %+v fallback %q", e.Info(), e.Fallback())
	}
	for _, d := range devs {
		if d.Auto && d.Software {
			t.Errorf("Devices marks the software device %q for Auto", d.Name)
		}
	}
	t.Logf("auto: %s %s (fallback: %s)", e.Info().Name, e.Info().Device, e.Fallback())
}
