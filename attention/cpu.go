package attention

import (
	"context"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/cpu"
	"github.com/x448/float16"
)

// cpuBackend adapts package cpu (float32 FlashAttention) to Backend. fp16
// and bf16 operands are widened to float32 (exactly), computed, and rounded
// back to nearest even.
type cpuBackend struct{ cfg cpu.Config }

func newCPUBackend(workers int) *cpuBackend {
	return &cpuBackend{cfg: cpu.Config{Workers: workers}}
}

func (c *cpuBackend) Info() BackendInfo {
	return BackendInfo{Kind: CPU, Name: "cpu", Device: "Go CPU backend", Kernel: "flash", DTypes: []DType{Float32, Float16, BFloat16}}
}

func (c *cpuBackend) Close() error { return nil }

func (c *cpuBackend) Forward(ctx context.Context, p *Problem, a *ForwardArgs) error {
	o := widen(a.O)
	if err := cpu.ForwardWith(ctx, c.cfg, p, widen(a.Q), widen(a.K), widen(a.V), o, a.LSE); err != nil {
		return err
	}
	narrowInto(a.O, o)
	return nil
}

func (c *cpuBackend) Backward(ctx context.Context, p *Problem, a *BackwardArgs) error {
	dq, dk, dv := widen(a.DQ), widen(a.DK), widen(a.DV)
	err := cpu.BackwardWith(ctx, c.cfg, p, widen(a.Q), widen(a.K), widen(a.V), widen(a.O), a.LSE, widen(a.DO), dq, dk, dv)
	if err != nil {
		return err
	}
	narrowInto(a.DQ, dq)
	narrowInto(a.DK, dk)
	narrowInto(a.DV, dv)
	return nil
}

// widen returns t's data as float32 with t's strides: the slice itself for
// Float32, an exact converted copy for Float16 and BFloat16.
func widen(t Tensor) []float32 {
	switch d := t.Data.(type) {
	case []float32:
		return d
	case []float16.Float16:
		out := make([]float32, len(d))
		for i, x := range d {
			out[i] = x.Float32()
		}
		return out
	case []bfloat16.BFloat16:
		return bfloat16.Float32s(d)
	}
	return nil
}

// narrowInto stores the rows of t's view from the float32 copy w (same
// strides), rounding to nearest even for Float16 and BFloat16. Elements
// outside the view are left alone.
func narrowInto(t Tensor, w []float32) {
	st, n := t.strides(), t.Shape.D
	switch d := t.Data.(type) {
	case []float16.Float16:
		forEachRow(t.Shape, func(b, s, h int) {
			off := st.Offset(b, s, h)
			for i := off; i < off+n; i++ {
				d[i] = float16.Fromfloat32(w[i])
			}
		})
	case []bfloat16.BFloat16:
		forEachRow(t.Shape, func(b, s, h int) {
			off := st.Offset(b, s, h)
			for i := off; i < off+n; i++ {
				d[i] = bfloat16.FromFloat32(w[i])
			}
		})
	}
}
