package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
	"github.com/spf13/cobra"
)

// problem is one attention problem as the commands see it.
type problem struct {
	B, Hq, Hkv, Nq, Nk, D, Dv int
	DType                     attention.DType
	Layout                    attention.Layout
	Causal                    bool
	Align                     attention.Alignment
	Scale                     float64 // 0: 1/√d
}

func (p problem) options() attention.Options {
	return attention.Options{Scale: float32(p.Scale), Causal: p.Causal, Align: p.Align}
}

func (p problem) params() reference.Params {
	return reference.Params{B: p.B, Hq: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk, D: p.D, Dv: p.Dv,
		Scale: p.Scale, Causal: p.Causal, BottomRight: p.Align == attention.BottomRight}
}

func (p problem) qShape() attention.Shape { return attention.Shape{B: p.B, S: p.Nq, H: p.Hq, D: p.D} }
func (p problem) kShape() attention.Shape { return attention.Shape{B: p.B, S: p.Nk, H: p.Hkv, D: p.D} }
func (p problem) vShape() attention.Shape { return attention.Shape{B: p.B, S: p.Nk, H: p.Hkv, D: p.Dv} }
func (p problem) oShape() attention.Shape { return attention.Shape{B: p.B, S: p.Nq, H: p.Hq, D: p.Dv} }

// flops is the FlashAttention FLOP count: forward 4·B·Hq·Nq·Nk·d (d the
// mean of d and dv), halved when causal; backward 2.5× the forward.
func (p problem) flops(backward bool) float64 {
	f := 2 * float64(p.B) * float64(p.Hq) * float64(p.Nq) * float64(p.Nk) * float64(p.D+p.Dv)
	if p.Causal {
		f /= 2
	}
	if backward {
		f *= 2.5
	}
	return f
}

func (p problem) effectiveScale() float64 {
	if p.Scale == 0 {
		return 1 / math.Sqrt(float64(p.D))
	}
	return p.Scale
}

func (p problem) maskString() string {
	if !p.Causal {
		return "non-causal"
	}
	return "causal " + p.Align.String()
}

func (p problem) String() string {
	return fmt.Sprintf("B=%d Hq=%d Hkv=%d Nq=%d Nk=%d d=%d dv=%d %s %s %s scale=%.4g",
		p.B, p.Hq, p.Hkv, p.Nq, p.Nk, p.D, p.Dv, p.DType, p.Layout, p.maskString(), p.effectiveScale())
}

// validate checks the sizes the way attention does, with flag names.
func (p problem) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"--batch", p.B}, {"--heads", p.Hq}, {"--kv-heads", p.Hkv}, {"--nq", p.Nq}, {"--nk", p.Nk}, {"--dim", p.D}, {"--dv", p.Dv}} {
		if f.v <= 0 {
			return usagef("%s %d: must be positive", f.name, f.v)
		}
	}
	if p.D > attention.MaxHeadDim || p.Dv > attention.MaxHeadDim {
		return usagef("head dim d=%d dv=%d: at most %d", p.D, p.Dv, attention.MaxHeadDim)
	}
	if p.Hq%p.Hkv != 0 {
		return usagef("--kv-heads %d does not divide --heads %d", p.Hkv, p.Hq)
	}
	if math.IsNaN(p.Scale) || math.IsInf(p.Scale, 0) {
		return usagef("--scale %v: must be finite", p.Scale)
	}
	// Refuse problems whose operands cannot fit in memory before
	// allocating anything (and before int overflow).
	var elems float64
	for _, s := range []attention.Shape{p.qShape(), p.kShape(), p.vShape(), p.oShape()} {
		elems += float64(s.B) * float64(s.S) * float64(s.H) * float64(s.D)
	}
	if bytes, limit := elems*float64(max(p.DType.Size(), 4)), hostLimit(); bytes > limit {
		return usagef("problem %s needs %.3g GB of operands, more than the %.3g GB flashvk allows on this machine", p, bytes/1e9, limit/1e9)
	}
	return nil
}

// checkable refuses --check for problems whose float64 reference would
// not fit: it materialises the Nq×Nk scores and probabilities per head.
func (p problem) checkable() error {
	if per := 2 * 8 * float64(p.Nq) * float64(p.Nk); per > maxRefMatrixBytes {
		return usagef("--check: the float64 reference materialises Nq×Nk = %d×%d matrices (%.3g GB per head); at most %.3g GB: use a smaller --seq",
			p.Nq, p.Nk, per/1e9, maxRefMatrixBytes/1e9)
	}
	return nil
}

const maxRefMatrixBytes = 2e9

// hostLimit bounds the host memory of a problem's operands: 64 GB, or
// three quarters of the machine's memory when that is known.
func hostLimit() float64 {
	limit := 64e9
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil && kb > 0 {
					limit = min(limit, 0.75*kb*1024)
				}
			}
		}
	}
	return limit
}

// shapeFlags are the problem flags shared by run and explain.
type shapeFlags struct {
	batch, heads, kvHeads, seq, nq, nk, dim, dv int
	dtype, layout, align                        string
	causal                                      bool
	scale                                       float64
}

func (s *shapeFlags) register(c *cobra.Command, defaultDType string) {
	f := c.Flags()
	f.IntVarP(&s.batch, "batch", "b", 1, "batch size B")
	f.IntVar(&s.heads, "heads", 8, "query heads Hq")
	f.IntVar(&s.kvHeads, "kv-heads", 0, "key/value heads Hkv; must divide --heads (default: --heads)")
	f.IntVar(&s.seq, "seq", 512, "sequence length N: sets Nq = Nk = N")
	f.IntVar(&s.nq, "nq", 0, "query length Nq (overrides --seq)")
	f.IntVar(&s.nk, "nk", 0, "key/value length Nk (overrides --seq)")
	f.IntVar(&s.dim, "dim", 64, "head dimension d of Q and K")
	f.IntVar(&s.dv, "dv", 0, "head dimension of V and O (default: --dim)")
	f.StringVar(&s.dtype, "dtype", defaultDType, "storage type: float32, float16 or bfloat16 (bf16) (arithmetic is float32)")
	f.StringVar(&s.layout, "layout", "bshd", "memory layout of the operands: bshd (FlashAttention) or bhsd (PyTorch)")
	f.BoolVar(&s.causal, "causal", false, "causal mask")
	f.StringVar(&s.align, "align", "top-left", "causal diagonal when Nq ≠ Nk: top-left (PyTorch is_causal) or bottom-right (FlashAttention-2)")
	f.Float64Var(&s.scale, "scale", 0, "softmax scale (default 1/√d)")
}

// resolve turns the flags into a problem.
func (s *shapeFlags) resolve() (problem, error) {
	p := problem{B: s.batch, Hq: s.heads, Hkv: s.kvHeads, Nq: s.seq, Nk: s.seq, D: s.dim, Dv: s.dv,
		Causal: s.causal, Scale: s.scale}
	if s.nq != 0 {
		p.Nq = s.nq
	}
	if s.nk != 0 {
		p.Nk = s.nk
	}
	if s.kvHeads == 0 {
		p.Hkv = p.Hq
	}
	if s.dv == 0 {
		p.Dv = p.D
	}
	var err error
	if p.DType, err = parseDType(s.dtype); err != nil {
		return p, err
	}
	if p.Layout, err = attention.ParseLayout(strings.ToLower(s.layout)); err != nil {
		return p, usagef("--layout %q: want bshd or bhsd", s.layout)
	}
	if p.Align, err = attention.ParseAlignment(strings.ToLower(s.align)); err != nil {
		return p, usagef("--align %q: want top-left or bottom-right", s.align)
	}
	return p, p.validate()
}

func parseDType(s string) (attention.DType, error) {
	dt, err := attention.ParseDType(strings.ToLower(s))
	if err != nil {
		return 0, usagef("--dtype %q: want float32, float16 or bfloat16 (bf16)", s)
	}
	return dt, nil
}

// shortDType is the dtype as benchmark names spell it.
func shortDType(s string) string {
	switch s {
	case "float16":
		return "fp16"
	case "float32":
		return "fp32"
	case "bfloat16":
		return "bf16"
	}
	return s
}
