package attention

import (
	"fmt"
	"math"

	"github.com/flashvk/flashvk/internal/spec"
)

// MaxHeadDim is the largest head dimension (D and Dv) any backend accepts.
const MaxHeadDim = 256

// Alignment places the causal diagonal when Nq ≠ Nk.
type Alignment uint8

const (
	// TopLeft: query i sees keys j ≤ i (PyTorch SDPA's is_causal).
	TopLeft Alignment = iota
	// BottomRight: query i sees keys j ≤ i + Nk − Nq (FlashAttention-2's
	// rule: the last query sees every key). With Nq > Nk the first Nq − Nk
	// queries see no key: their output is 0 and their LSE −Inf.
	BottomRight
)

// String names the alignment.
func (a Alignment) String() string {
	switch a {
	case TopLeft:
		return "top-left"
	case BottomRight:
		return "bottom-right"
	}
	return fmt.Sprintf("Alignment(%d)", uint8(a))
}

// ParseAlignment accepts "top-left"/"tl" and "bottom-right"/"br".
func ParseAlignment(s string) (Alignment, error) {
	switch s {
	case "top-left", "topleft", "tl":
		return TopLeft, nil
	case "bottom-right", "bottomright", "br":
		return BottomRight, nil
	}
	return 0, fmt.Errorf("attention: alignment %q: %w", s, ErrOption)
}

// Options are the per-call settings. The zero value is plain,
// non-causal attention with scale 1/√d.
type Options struct {
	// Scale multiplies QKᵀ before the softmax; 0 means 1/√D. NaN and ±Inf
	// are refused.
	Scale float32
	// Causal masks keys after each query, placed by Align.
	Causal bool
	// Align places the causal diagonal when Nq ≠ Nk (ignored unless Causal).
	Align Alignment
}

// resolve is the scale (for head dim d) and mask of o, or why o is
// invalid.
func (o Options) resolve(d int) (float32, spec.Mask, error) {
	scale, err := o.scale(d)
	if err != nil {
		return 0, 0, err
	}
	mask, err := o.mask()
	return scale, mask, err
}

func (o Options) mask() (spec.Mask, error) {
	if !o.Causal {
		return spec.MaskNone, nil
	}
	switch o.Align {
	case TopLeft:
		return spec.MaskCausalTopLeft, nil
	case BottomRight:
		return spec.MaskCausalBottomRight, nil
	}
	return 0, fmt.Errorf("attention: options: align %v: %w", o.Align, ErrOption)
}

func (o Options) scale(d int) (float32, error) {
	s := float64(o.Scale)
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return 0, fmt.Errorf("attention: options: scale %v is not finite: %w", o.Scale, ErrOption)
	}
	if s == 0 {
		return float32(1 / math.Sqrt(float64(d))), nil
	}
	return o.Scale, nil
}
