package attention

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/cpu"
	"github.com/flashvk/flashvk/internal/gate"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/x448/float16"
)

// cpuBackend adapts package cpu (float32 FlashAttention) to Backend. fp16
// and bf16 operands are widened to float32 (exactly), computed, and rounded
// back to nearest even.
type cpuBackend struct {
	cfg   cpu.Config
	calls gate.Gate
}

func newCPUBackend(workers int) *cpuBackend {
	return &cpuBackend{cfg: cpu.Config{Workers: workers}}
}

func (c *cpuBackend) Info() BackendInfo {
	return BackendInfo{Kind: CPU, Name: "cpu", Device: "Go CPU backend", Kernel: "cpu", DTypes: []DType{Float32, Float16, BFloat16}}
}

// plan describes the CPU backend's work: one "launch", its tile per worker
// goroutine (package cpu's defaults, clamped to the sequence lengths).
func (c *cpuBackend) plan(_ context.Context, p *spec.Problem, _ DType, backward bool) (*Plan, error) {
	pass := "fwd"
	switch {
	case backward:
		pass = "bwd"
	case p.KV != nil:
		pass = "kv" // each sequence as a forward over its gathered cache rows
	}
	br, bc := max(min(cpu.DefaultBr, p.Nq), 1), max(min(cpu.DefaultBc, p.Nk), 1)
	return &Plan{Pass: pass, Family: "cpu", Batches: p.B, Launches: []Launch{{Kernel: "cpu", TileRows: br, TileCols: bc,
		Config: fmt.Sprintf("br%d-bc%d per worker", br, bc), Source: SourceDefault}}}, nil
}

// Close stops the calls in progress (they return ErrClosed) and waits
// for them: their loops check their contexts between tiles.
func (c *cpuBackend) Close() error {
	c.calls.Close()
	return nil
}

func (c *cpuBackend) Forward(ctx context.Context, p *spec.Problem, a *forwardArgs) error {
	cctx, leave, err := c.enter(ctx)
	if err != nil {
		return err
	}
	defer leave()
	o := widen(a.O)
	var x cpu.Bias
	if p.Ext != nil && p.Ext.Bias != nil {
		x.Bias = widen(a.Bias)
	}
	if err := cpu.ForwardBias(cctx, c.cfg, p, widen(a.Q), widen(a.K), widen(a.V), o, a.LSE, x); err != nil {
		return callErr(ctx, cctx, err)
	}
	narrowInto(a.O, o)
	return nil
}

func (c *cpuBackend) Backward(ctx context.Context, p *spec.Problem, a *backwardArgs) error {
	cctx, leave, err := c.enter(ctx)
	if err != nil {
		return err
	}
	defer leave()
	dq, dk, dv := widen(a.DQ), widen(a.DK), widen(a.DV)
	// The bias (float32 or the operands' type) in float32; dBias computed
	// in float32 with its tensor's strides, then narrowed into its view.
	var x cpu.Bias
	if p.Ext != nil && p.Ext.Bias != nil {
		x.Bias = widen(a.Bias)
		if p.Ext.Bias.Grad {
			x.DBias = widen(a.DBias)
		}
	}
	err = cpu.BackwardBias(cctx, c.cfg, p, widen(a.Q), widen(a.K), widen(a.V), widen(a.O), a.LSE, widen(a.DO), dq, dk, dv, x)
	if err != nil {
		return callErr(ctx, cctx, err)
	}
	narrowInto(a.DQ, dq)
	narrowInto(a.DK, dk)
	narrowInto(a.DV, dv)
	if x.DBias != nil {
		narrowInto(a.DBias, x.DBias)
	}
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

// enter starts a call that Close stops: its context (ctx, also cancelled
// by Close; the loops check it between tiles) and the function that ends
// it; ErrClosed once Close has begun.
func (c *cpuBackend) enter(ctx context.Context) (context.Context, func(), error) {
	cctx, leave, ok := c.calls.Call(ctx, false)
	if !ok {
		return nil, nil, fmt.Errorf("attention: engine: %w", ErrClosed)
	}
	return cctx, leave, nil
}

// callErr is the error of a call run under cctx (from enter) for the
// caller's ctx: ErrClosed when Close stopped it, the context's error
// wrapped when ctx ended.
func callErr(ctx, cctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case gate.StoppedByClose(ctx, cctx):
		return fmt.Errorf("attention: cpu: engine closed during the call: %w", ErrClosed)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("attention: cpu: %w", err)
	}
	return err
}
