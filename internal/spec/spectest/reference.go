package spectest

import (
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/reference"
)

// Reference is p's problem for package reference: its mask, or its
// options (window, softcap, ALiBi, key counts, dropout). Packed sequences
// and a bias are the caller's to add (they need the inputs' layout).
func Reference(p *spec.Problem) reference.Params {
	r := reference.Params{B: p.B, Hq: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk, D: p.D, Dv: p.Dv, Scale: float64(p.Scale),
		Causal: p.Causal(), BottomRight: p.Mask == spec.MaskCausalBottomRight}
	e := p.Ext
	if e == nil {
		return r
	}
	r.Causal, r.BottomRight = false, e.BottomRight
	r.Window = &reference.Window{Left: e.Left, Right: e.Right}
	r.Softcap = float64(e.Softcap)
	for _, s := range e.Slopes {
		r.ALiBi = append(r.ALiBi, float64(s))
	}
	for _, n := range e.SeqUsedK {
		r.SeqUsedK = append(r.SeqUsedK, int(n))
	}
	r.Dropout = Dropout(p)
	return r
}

// Dropout is p's dropout for package reference (nil without one): the
// threshold's probability, seed and offset (Batch0 is the caller's: the
// reference counts sequences from its own first).
func Dropout(p *spec.Problem) *reference.Dropout {
	if p.Ext == nil || p.Ext.Dropout == nil {
		return nil
	}
	d := p.Ext.Dropout
	return &reference.Dropout{P: float64(d.Threshold) / spec.DropLevels, Seed: d.Seed, Offset: d.Offset}
}
