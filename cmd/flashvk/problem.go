package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
)

// problem is one attention problem as the commands see it.
type problem struct {
	B, Hq, Hkv, Nq, Nk, D, Dv int
	DType                     attention.DType
	Layout                    attention.Layout
	Causal                    bool
	Align                     attention.Alignment
	// Scale is --scale, a float32 value (0: 1/√d); see scale32.
	Scale float64
	// features are --seqlens, --window, --softcap, --alibi, --seqused-k
	// and --dropout (with its seed and offset). With --seqlens, B is the
	// number of sequences and Nq = Nk the longest: the padded grid the
	// library tiles. With --bias or --mask they describe the bias too.
	features
	// bias is the file of --bias or --mask (nil without): its values once
	// loaded (biasFile.load), before that its shape and dtype, which
	// planning reads.
	bias *biasFile
}

// packed reports whether p is a packed batch of sequences (--seqlens).
func (p problem) packed() bool { return p.SeqLens != nil }

// stored are the batch and the query and key rows of the operands: B, Nq
// and Nk, or for a packed batch 1, ΣNi and ΣNi.
func (p problem) stored() (b, nq, nk int) {
	if !p.packed() {
		return p.B, p.Nq, p.Nk
	}
	t := 0
	for _, n := range p.SeqLens {
		t += n
	}
	return 1, t, t
}

// pairs are the (query, key) pairs of one head's score matrices, no mask
// applied: B·Nq·Nk, or for a packed batch each sequence's own, ΣNi².
func (p problem) pairs() float64 {
	if !p.packed() {
		return float64(p.B) * float64(p.Nq) * float64(p.Nk)
	}
	var s float64
	for _, n := range p.SeqLens {
		s += float64(n) * float64(n)
	}
	return s
}

// scale32 is the softmax scale the library applies: --scale, or the
// library's default float32(1/√d). The kernels get it explicitly and the
// float64 reference gets the same value, so --check compares like with
// like.
func (p problem) scale32() float32 {
	if p.Scale == 0 {
		return float32(1 / math.Sqrt(float64(p.D)))
	}
	return float32(p.Scale)
}

func (p problem) options() attention.Options {
	o := attention.Options{Scale: p.scale32(), Causal: p.Causal, Align: p.Align}
	p.features.setOptions(&o, p.Hq)
	if p.bias != nil {
		o.Bias = p.bias.option(p.DType, p.BiasGrad)
	}
	return o
}

// params are the float64 reference's parameters of p, with the very
// scale, softcap and slopes the kernels get.
func (p problem) params() reference.Params {
	rp := reference.Params{B: p.B, Hq: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk, D: p.D, Dv: p.Dv,
		Scale: float64(p.scale32()), Causal: p.Causal, BottomRight: p.Align == attention.BottomRight}
	p.features.setParams(&rp)
	if p.bias != nil && p.bias.loaded {
		rp.Bias = p.bias.refBias(p.DType)
	}
	return rp
}

// shape is the shape of an operand of h heads of dim d along the queries
// (q) or the keys: [B, Nq or Nk, h, d], packed [1, ΣNi, h, d].
func (p problem) shape(q bool, h, d int) attention.Shape {
	b, nq, nk := p.stored()
	if q {
		return attention.Shape{B: b, S: nq, H: h, D: d}
	}
	return attention.Shape{B: b, S: nk, H: h, D: d}
}

func (p problem) qShape() attention.Shape { return p.shape(true, p.Hq, p.D) }
func (p problem) kShape() attention.Shape { return p.shape(false, p.Hkv, p.D) }
func (p problem) vShape() attention.Shape { return p.shape(false, p.Hkv, p.Dv) }
func (p problem) oShape() attention.Shape { return p.shape(true, p.Hq, p.Dv) }

// flops is the FLOP count of a pass as the benchmarks count it
// (attention.Flops): forward 4·B·Hq·Nq·Nk·d (d the mean of d and dv),
// halved when causal, or with packed sequences, a window, softcap, ALiBi,
// key counts or dropout 2·Hq·(d+dv) per visible (query, key) pair
// exactly (a packed batch: each sequence's own pairs); backward 2.5× the
// forward.
// NaN for a problem attention refuses (validate refuses it first).
//
// A bias (or mask) makes the count exact too, its values aside: the pairs
// it hides are counted (a result read back, which has no bias file,
// counts as the run did).
func (p problem) flops(backward bool) float64 {
	o := p.options()
	if o.Bias == nil && p.biased() {
		o.Bias = &attention.Bias{}
	}
	f, err := attention.Flops(p.qShape(), p.kShape(), p.vShape(), o)
	if err != nil {
		return math.NaN()
	}
	if backward {
		f *= 2.5
	}
	return f
}

// windowEffect refuses a --window that hides no (query, key) pair of p:
// the visible pairs, counted exactly, are the same without it.
func (p problem) windowEffect() error {
	if p.Window == nil {
		return nil
	}
	q := p
	q.features.Window = &[2]int{-1, -1} // (unbounded, but set: Flops then counts the pairs exactly, as with p's)
	if with, without := p.flops(false), q.flops(false); with == without && !math.IsNaN(with) {
		return windowNoEffect(p.Window)
	}
	return nil
}

// windowNoEffect is the usage error of a --window w that hides nothing.
func windowNoEffect(w *[2]int) error {
	return usagef("--window %d,%d has no effect: it hides no key any query of this problem sees (omit it, or narrow it)", w[0], w[1])
}

// flopsRule says how flops counts.
func (p problem) flopsRule() string {
	if p.packed() {
		return "each sequence's own visible (query, key) pairs counted exactly"
	}
	if p.features.set() {
		return "visible (query, key) pairs counted exactly"
	}
	return "FlashAttention convention"
}

// effectiveScale is the scale applied (scale32), as a float64.
func (p problem) effectiveScale() float64 { return float64(p.scale32()) }

func (p problem) maskString() string {
	if !p.Causal {
		return "non-causal"
	}
	return "causal " + p.Align.String()
}

// optionsString is the mask and the features: "causal top-left",
// "non-causal window=64,64 alibi"; a window or ALiBi without a causal mask
// names the diagonal they measure from where Nq ≠ Nk or --seqused-k is
// given ("non-causal bottom-right window=64,64").
func (p problem) optionsString() string {
	s := p.maskString()
	if !p.Causal && p.diagonal() && (p.Nq != p.Nk || p.SeqUsedK != nil) {
		s += " " + p.Align.String()
	}
	if f := p.features.String(); f != "" {
		s += " " + f
	}
	return s
}

// featuresLabel is the features with the diagonal they and the mask
// measure from where it matters (Nq ≠ Nk, or --seqused-k), as compare and
// report tell results apart: "alibi seqused_k=100,200 bottom-right"; ""
// without features. The dropout's seed and offset are left out (see
// features.timed): results that differ only there are the same cell.
func (p problem) featuresLabel() string {
	f := p.features.timed().String()
	if f != "" && (p.Causal || p.diagonal()) && (p.Nq != p.Nk || p.SeqUsedK != nil) {
		f += " " + p.Align.String()
	}
	return f
}

// String is p's sizes, storage and options; a packed batch shows its
// rows in all (T = ΣNi) and, among the options, its lengths.
func (p problem) String() string {
	lens := fmt.Sprintf("Nq=%d Nk=%d", p.Nq, p.Nk)
	if p.packed() {
		_, t, _ := p.stored()
		lens = fmt.Sprintf("T=%d (packed)", t)
	}
	return fmt.Sprintf("B=%d Hq=%d Hkv=%d %s d=%d dv=%d %s %s %s scale=%.4g",
		p.B, p.Hq, p.Hkv, lens, p.D, p.Dv, p.DType, p.Layout, p.optionsString(), p.effectiveScale())
}

// validate checks the sizes the way attention does, with flag names.
func (p problem) validate() error {
	if err := positive(intFlag{"--batch", p.B}, intFlag{"--heads", p.Hq}, intFlag{"--kv-heads", p.Hkv}, intFlag{"--nq", p.Nq},
		intFlag{"--nk", p.Nk}, intFlag{"--dim", p.D}, intFlag{"--dv", p.Dv}); err != nil {
		return err
	}
	if err := checkHeads(p.Hq, p.Hkv, p.D, p.Dv, p.Scale); err != nil {
		return err
	}
	if err := p.features.check(p.B, p.Nk, p.Causal); err != nil {
		return err
	}
	shapes := []attention.Shape{p.qShape(), p.kShape(), p.vShape(), p.oShape()}
	if x := p.bias; x != nil {
		if err := x.check(p.B, p.Hq, p.Nq, p.Nk, p.packed()); err != nil {
			return err
		}
		shapes = append(shapes, x.libShape())
	}
	// Refuse problems whose operands cannot fit in memory before
	// allocating anything (and before int overflow).
	return checkHostBytes("problem", p, p.DType, shapes...)
}

// checkHeads checks the head counts and dims and the scale the way
// attention does, with flag names.
func checkHeads(hq, hkv, d, dv int, scale float64) error {
	for _, f := range []intFlag{{"--dim", d}, {"--dv", dv}} {
		if f.v > attention.MaxHeadDim {
			return usagef("%s %d: at most %d", f.name, f.v, attention.MaxHeadDim)
		}
	}
	if hq%hkv != 0 {
		return usagef("--kv-heads %d does not divide --heads %d", hkv, hq)
	}
	if s := float32(scale); math.IsNaN(scale) || scale < 0 || math.IsInf(float64(s), 0) || (scale != 0 && s == 0) {
		return usagef("--scale %v: must be a positive float32", scale)
	}
	return nil
}

// checkHostBytes refuses a problem (what p, e.g. "problem") whose
// operands of the given shapes cannot fit in host memory, before
// anything is allocated (and before int overflow).
func checkHostBytes(what string, p fmt.Stringer, dt attention.DType, shapes ...attention.Shape) error {
	var elems float64
	for _, s := range shapes {
		elems += float64(s.B) * float64(s.S) * float64(s.H) * float64(s.D)
	}
	if bytes, limit := elems*float64(max(dt.Size(), 4)), hostLimit(); bytes > limit {
		return usagef("%s %s needs %.3g GB of operands, more than the %.3g GB flashvk allows on this machine", what, p, bytes/1e9, limit/1e9)
	}
	return nil
}

// checkable refuses --check for problems whose float64 reference would
// not fit: it materialises the Nq×Nk scores and probabilities per head.
func (p problem) checkable() error {
	smaller := "a smaller --seq"
	if p.packed() {
		smaller = "shorter --seqlens (it runs one sequence at a time)"
	}
	if per := 2 * 8 * float64(p.Nq) * float64(p.Nk); per > maxRefMatrixBytes {
		return usagef("--check: the float64 reference materialises Nq×Nk = %d×%d matrices (%.3g GB per head); at most %.3g GB: use %s",
			p.Nq, p.Nk, per/1e9, maxRefMatrixBytes/1e9, smaller)
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
