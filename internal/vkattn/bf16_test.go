//go:build cgo

package vkattn

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

func TestDTypeOf(t *testing.T) {
	if dtypeOf[float32]() != spec.Float32 || dtypeOf[uint16]() != spec.Float16 || dtypeOf[float16.Float16]() != spec.Float16 || dtypeOf[bfloat16.BFloat16]() != spec.BFloat16 {
		t.Error("dtypeOf")
	}
	if spec.BFloat16.Size() != 2 || spec.BFloat16.Short() != shaders.DTypeBF16 {
		t.Errorf("BF16: size %d, short name %q", spec.BFloat16.Size(), spec.BFloat16.Short())
	}
}

// TestBF16StoreRounding checks the kernels' bf16 stores bit for bit: with
// Q = 0 and two keys, every forward kernel computes O = (V0 + V1)/2 exactly
// in fp32 (V0 and V1 bf16 values of one binade), which is a bf16 tie half
// the time; the stored O must be bfloat16.FromFloat32 of it (nearest, ties
// to even), and a NaN in V must come out NaN.
func TestBF16StoreRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	v, want := tiePairs(rng, func(sign, exp, mant uint16) bfloat16.BFloat16 {
		return bfloat16.BFloat16(sign | (1+exp%250)<<7 | mant&0x7f) // exponents far outside fp16's range
	}, bfloat16.BFloat16.Float32)
	v[5] = bfloat16.NaN
	checkStoreRounding(t, spec.BFloat16, v, want, bfloat16.FromFloat32, bfloat16.BFloat16.IsNaN, rng)
}

// TestF16StoreRounding is TestBF16StoreRounding for fp16, whose stores
// convert with the driver's fp32 → fp16 conversion (Vulkan leaves its
// rounding to the implementation): they must round to nearest even too.
func TestF16StoreRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	v, want := tiePairs(rng, func(sign, exp, mant uint16) float16.Float16 {
		return float16.Float16(sign | (1+exp%30)<<10 | mant&0x3ff)
	}, float16.Float16.Float32)
	v[5] = float16.NaN()
	checkStoreRounding(t, spec.Float16, v, want, float16.Fromfloat32, float16.Float16.IsNaN, rng)
}

// tiePairs returns the values of two keys (v[d] and v[dv+d]: the same sign
// and exponent, random mantissas, made by elem) and want[d], their mean,
// exact in fp32.
func tiePairs[T Elem](rng *rand.Rand, elem func(sign, exp, mant uint16) T, widen func(T) float32) ([]T, []float32) {
	const dv = 64
	v := make([]T, 2*dv)
	want := make([]float32, dv)
	for d := range dv {
		sign, exp := uint16(rng.IntN(2))<<15, uint16(rng.IntN(1<<15))
		a, b := elem(sign, exp, uint16(rng.IntN(1<<10))), elem(sign, exp, uint16(rng.IntN(1<<10)))
		v[d], v[dv+d] = a, b
		want[d] = (widen(a) + widen(b)) / 2
	}
	return v, want
}

// checkStoreRounding runs every forward kernel (flash, minimal, naive and,
// where the device runs it for dt, flash_cm) with Q = 0 on the two keys of
// v and checks each stored element of O against round(want) bit for bit
// (the NaN of column 5 must stay NaN) and the LSE against ln 2.
func checkStoreRounding[T Elem](t *testing.T, dt spec.DType, v []T, want []float32, round func(float32) T, isNaN func(T) bool, rng *rand.Rand) {
	ctx := context.Background()
	dv := len(want)
	for _, kernel := range []string{"flash", "minimal", "naive", shaders.KernelFlashCM} {
		t.Run(kernel, func(t *testing.T) {
			const nq, d = 3, 8
			p := &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: nq, Nk: 2, D: d, Dv: dv, Scale: 0.5,
				Q: spec.BSHD(nq, 1, d), K: spec.BSHD(2, 1, d), V: spec.BSHD(2, 1, dv), O: spec.BSHD(nq, 1, dv)}
			var b *Backend
			if kernel != shaders.KernelFlashCM {
				b = openBackend(t, kernel)
			} else if b = openBackend(t, ""); familyOf(ctx, b, p, dt, Fwd) != shaders.KernelFlashCM {
				t.Skipf("the %v forward does not run flash_cm here", dt)
			}
			if !slices.Contains(b.DTypes(), dt) {
				t.Skip("no 16-bit storage")
			}
			q := make([]T, nq*d)
			k := make([]T, 2*d)
			for i := range k {
				k[i] = round(float32(rng.NormFloat64()))
			}
			o := make([]T, nq*dv)
			lse := make([]float32, nq)
			if err := ForwardHost(ctx, b, p, q, k, v, o, lse, HostBias{}); err != nil {
				t.Fatal(err)
			}
			for i := range nq {
				for c := range dv {
					got := o[i*dv+c]
					if c == 5 {
						if !isNaN(got) {
							t.Errorf("o[%d][5] = %#04x, want NaN", i, uint16(got))
						}
						continue
					}
					if w := round(want[c]); got != w {
						t.Errorf("o[%d][%d] = %#04x, want %#04x (round to nearest even of %g)", i, c, uint16(got), uint16(w), want[c])
					}
				}
				if math.Abs(float64(lse[i])-math.Ln2) > 1e-6 {
					t.Errorf("lse[%d] = %v, want ln 2", i, lse[i])
				}
			}
		})
	}
}

// bf16 tensors take bfloat16.BFloat16 data only: raw uint16 is spec.Float16's.
func TestBF16Tensor(t *testing.T) {
	ctx := context.Background()
	b := openBackend(t, "")
	if slices.Contains(b.DTypes(), spec.BFloat16) != b.Info().StorageBuffer16Bit {
		t.Fatalf("dtypes %v with storageBuffer16BitAccess %v", b.DTypes(), b.Info().StorageBuffer16Bit)
	}
	if !slices.Contains(b.DTypes(), spec.BFloat16) {
		t.Skip("no 16-bit storage")
	}
	x, err := b.NewTensor(spec.BFloat16, spec.Shape{B: 1, S: 3, H: 1, D: 5}, spec.Strides{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	src := bfloat16.Slice([]float32{1, -2, 3e38, 1e-38, 0.1, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	if err := Upload(ctx, x, src); err != nil {
		t.Fatal(err)
	}
	got := make([]bfloat16.BFloat16, len(src))
	if err := Download(ctx, x, got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, src) {
		t.Errorf("round trip %v, want %v", got, src)
	}
	if err := Upload(ctx, x, make([]uint16, 3)); !errors.Is(err, ErrInvalid) {
		t.Errorf("uint16 into a bf16 tensor: %v", err)
	}
	if err := Download(ctx, x, make([]float16.Float16, 3)); !errors.Is(err, ErrInvalid) {
		t.Errorf("bf16 tensor into float16: %v", err)
	}
	// bf16 runs flash_cm only with its own bf16 modules, where the device
	// has bf16 cooperative matrices (TestBF16CMSelection, TestBF16CM).
	p := &spec.Problem{B: 1, Hq: 1, Hkv: 1, Nq: 64, Nk: 64, D: 64, Dv: 64, Scale: 0.125,
		Q: spec.BSHD(64, 1, 64), K: spec.BSHD(64, 1, 64), V: spec.BSHD(64, 1, 64), O: spec.BSHD(64, 1, 64)}
	noCM := b.cm[spec.BFloat16] == nil
	if k := familyOf(ctx, b, p, spec.BFloat16, Fwd); k == shaders.KernelFlashCM && noCM {
		t.Errorf("bf16 forward family %q without bf16 coopmat", k)
	}
	ls, err := b.Launches(ctx, p, spec.BFloat16, false)
	if err != nil || len(ls) != 1 || ls[0].Kernel == shaders.KernelFlashCM && noCM || ls[0].DType != spec.BFloat16 {
		t.Errorf("bf16 launches %+v, %v", ls, err)
	}
}
