package attention

import (
	"fmt"
	"math"
	"slices"

	"github.com/flashvk/flashvk/internal/spec"
)

// MaxHeadDim is the largest head dimension (D and Dv) any backend accepts.
const MaxHeadDim = 256

// Alignment places each query's diagonal — the causal mask's edge, the
// sliding window's centre and ALiBi's zero distance — when Nq ≠ Nk.
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
//
// Query row i of sequence b has its diagonal at key i (TopLeft) or
// i + Nk_b − Nq (BottomRight), Nk_b its key count (SeqUsedK, else Nk). It
// sees the keys j < Nk_b with diag − Left ≤ j ≤ diag + Right (Window;
// Causal is Right = 0). Its score of key j is s = Scale·q·k, then
// Softcap·tanh(s/Softcap), then s − slope·|diag − j| (ALiBi); the softmax
// runs over the keys it sees. With Dropout, each probability is then
// dropped with probability P or scaled by 1/(1 − P) (LSE stays the
// undropped softmax's). A Bias adds its element to the score after ALiBi
// (before dropout), and one of −Inf hides its key as the mask does. A
// row that sees no key (or only −Inf scores) has O = 0, LSE = −Inf and
// zero gradients.
//
// KV-cache calls (ForwardKVCache, ForwardKVCacheDevice) take Scale,
// Causal, Align, Window, Softcap and ALiBi, with Nk_b sequence b's cache
// rows after the append (SeqLens[b] + appended rows); they refuse
// SeqUsedK, CuSeqlensQ, CuSeqlensK, Dropout and Bias with ErrOption.
type Options struct {
	// Scale multiplies QKᵀ before the softmax; 0 means 1/√D. NaN and ±Inf
	// are refused.
	Scale float32
	// Causal masks keys after each query's diagonal.
	Causal bool
	// Align places the diagonal when Nq ≠ Nk (it matters to Causal, Window
	// and ALiBi; FlashAttention-2's rule is BottomRight).
	Align Alignment
	// Window, when set, is a sliding window (local attention): each query
	// sees the keys from Left before its diagonal to Right after it; −1
	// leaves a side unbounded, and a side wider than Nq + Nk is the same.
	// With Causal, Right must be −1 or 0. Key tiles outside every row's
	// window are skipped, not computed.
	Window *Window
	// Softcap c > 0 caps each scaled score s to c·tanh(s/c) (Gemma 2's
	// attention softcap; the backward differentiates through tanh). 0 is
	// off; negative, NaN and ±Inf are refused. The tanh is computed in
	// fp32 arithmetic, except by the cooperative-matrix kernels with
	// BFloat16 storage, which take it in fp16 (within about 2⁻¹¹ of tanh,
	// 8 times finer than bf16 itself: FlashAttention's tanh.approx
	// precision).
	Softcap float32
	// ALiBi are the slopes of ALiBi's linear bias, one per query head
	// ([Hq], shared by the batch) or per sequence and head ([B·Hq],
	// row-major): the score of query i and key j gains
	// −slope·|diag(i) − j|. FlashAttention-2 measures from the
	// bottom-right diagonal (Align BottomRight); TopLeft measures from
	// key i, which differs when Nq ≠ Nk (under Causal only by a constant
	// per row, which the softmax cancels). nil: no ALiBi.
	ALiBi []float32
	// SeqUsedK is each sequence's key count ([B], 0 … Nk) in a padded
	// batch: keys at or past it are masked, and the diagonal is placed
	// with it as Nk. nil: every sequence has Nk keys.
	SeqUsedK []int32
	// CuSeqlensQ and CuSeqlensK pack a batch of variable-length sequences
	// without padding (FlashAttention's varlen): Q, O, dO and dQ are
	// [1, Tq, Hq, ·] and K, V, dK and dV [1, Tk, Hkv, ·] (any strides);
	// sequence b's queries are rows CuSeqlensQ[b] … CuSeqlensQ[b+1]−1 and
	// its keys rows CuSeqlensK[b] … CuSeqlensK[b+1]−1. Both hold B+1
	// offsets, start at 0, never decrease and end at Tq and Tk; a
	// sequence may be empty. Each sequence attends only within itself,
	// with the causal mask, window and ALiBi placed by its own lengths;
	// SeqUsedK and per-sequence ALiBi slopes count the B sequences. LSE
	// is [Hq, Tq] (Hq·Tq values). Rows of no sequence are neither read
	// nor written.
	CuSeqlensQ, CuSeqlensK []int32
	// Dropout, when set with P > 0, drops attention probabilities (see
	// Dropout). nil or P = 0: none.
	Dropout *Dropout
	// Bias, when set, adds a bias to the scores or masks them (see Bias;
	// its gradient on request). nil: none.
	Bias *Bias
}

// Dropout is attention dropout: each probability of query row i and key
// j of sequence b, query head h is dropped (0) with probability P and
// otherwise scaled by 1/(1 − P), so that the output's expectation is the
// undropped output. The decision is a function of (Seed, Offset, b, h,
// i, j) — a Philox4x32-10 counter-based generator, the one PyTorch and
// FlashAttention draw from (its word layout is flashvk's own; package
// reference's doc gives it) — so the backward drops exactly the forward's
// elements without a stored mask, on every backend, and a call repeated
// with the same Seed and Offset drops the same elements. Rows and keys
// are counted within each sequence (also when packed). Each element's
// draw is 8 bits, as FlashAttention's, so P is applied at a resolution of
// 2⁻⁸: the dropped fraction is round(P·256)/256, and the kept elements'
// scale uses that value, so the expectation is exact. A P that rounds to
// 0 (0 < P < 1/512) or to 1 (P ≥ 511/512) is refused with ErrOption
// rather than silently dropping nothing or every element.
type Dropout struct {
	// P is the probability of dropping an element: 0 ≤ P < 1 (0: none).
	P float32
	// Seed keys the generator; Offset selects one of its 2³² streams per
	// seed (for example the training step), so that calls with the same
	// seed draw independent masks.
	Seed   uint64
	Offset uint32
}

// Window bounds the keys a query sees around its diagonal (see
// Options.Window); −1 is unbounded.
type Window struct{ Left, Right int }

// ALiBiSlopes are the standard ALiBi slopes of hq query heads,
// slope_h = 2^(−8(h+1)/hq) for h = 0 … hq−1: the geometric sequence
// 2^(−8/hq), 2^(−16/hq), …, 2^(−8) (for a power of two hq, the ALiBi
// paper's slopes; for other hq the same formula, not the paper's
// interleaving of two power-of-two sets).
func ALiBiSlopes(hq int) []float32 {
	s := make([]float32, hq)
	for h := range s {
		s[h] = float32(math.Exp2(-8 * float64(h+1) / float64(hq)))
	}
	return s
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

// ext is the spec.Ext of o for a problem of B sequences, Hq query heads,
// Nq queries and Nk keys, or nil when o asks for no more than Scale,
// Causal and Align; errors wrap ErrOption and name the option.
func (o Options) ext(b, hq, nq, nk int) (*spec.Ext, error) {
	if o.plain() {
		return nil, nil
	}
	e := &spec.Ext{Left: -1, Right: -1, BottomRight: o.Align == BottomRight}
	// A side wider than Nq + Nk reaches every key: unbounded.
	side := func(x int) int {
		if x >= nq+nk {
			return -1
		}
		return x
	}
	if w := o.Window; w != nil {
		if w.Left < -1 || w.Right < -1 {
			return nil, fmt.Errorf("attention: options: window %+v: sides must be ≥ −1 (−1 unbounded): %w", *w, ErrOption)
		}
		if o.Causal && w.Right > 0 {
			return nil, fmt.Errorf("attention: options: window %+v with causal: Right must be −1 or 0: %w", *w, ErrOption)
		}
		e.Left, e.Right = side(w.Left), side(w.Right)
	}
	if o.Causal {
		e.Right = 0
	}
	if c := float64(o.Softcap); c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
		return nil, fmt.Errorf("attention: options: softcap %v: want a finite c > 0 (0: off): %w", o.Softcap, ErrOption)
	}
	e.Softcap = o.Softcap
	if o.ALiBi != nil {
		switch len(o.ALiBi) {
		case hq:
		case b * hq:
			e.SlopesPerBatch = b > 1
		default:
			return nil, fmt.Errorf("attention: options: alibi: %d slopes, want Hq = %d or B·Hq = %d: %w", len(o.ALiBi), hq, b*hq, ErrOption)
		}
		for i, x := range o.ALiBi {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("attention: options: alibi: slope %d is %v: %w", i, x, ErrOption)
			}
		}
		e.Slopes = slices.Clone(o.ALiBi)
	}
	if o.SeqUsedK != nil {
		if len(o.SeqUsedK) != b {
			return nil, fmt.Errorf("attention: options: seqused_k: %d key counts for B = %d sequences: %w", len(o.SeqUsedK), b, ErrOption)
		}
		for i, n := range o.SeqUsedK {
			if n < 0 || int(n) > nk {
				return nil, fmt.Errorf("attention: options: seqused_k[%d] = %d, want 0 … Nk = %d: %w", i, n, nk, ErrOption)
			}
		}
		e.SeqUsedK = slices.Clone(o.SeqUsedK)
	}
	if d := o.Dropout; d != nil {
		if p := float64(d.P); !(p >= 0 && p < 1) {
			return nil, fmt.Errorf("attention: options: dropout P %v: want 0 ≤ P < 1: %w", d.P, ErrOption)
		}
		if math.Round(float64(d.P)*spec.DropLevels) >= spec.DropLevels {
			return nil, fmt.Errorf("attention: options: dropout P %v rounds to 1 at the resolution of 1/%d (P ≥ %d/%d would drop every element): want P < %[3]d/%[4]d: %w",
				d.P, spec.DropLevels, 2*spec.DropLevels-1, 2*spec.DropLevels, ErrOption)
		}
		t := spec.DropThreshold(float64(d.P))
		if t == 0 && d.P != 0 {
			return nil, fmt.Errorf("attention: options: dropout P %v rounds to 0 at the resolution of 1/%d (P below 1/%d drops nothing): want 0 or P ≥ 1/%d: %w",
				d.P, spec.DropLevels, 2*spec.DropLevels, 2*spec.DropLevels, ErrOption)
		}
		if t > 0 {
			e.Dropout = &spec.Dropout{Threshold: t, Seed: d.Seed, Offset: d.Offset}
		}
	}
	if o.varlen() {
		e.CuQ, e.CuK = slices.Clone(o.CuSeqlensQ), slices.Clone(o.CuSeqlensK)
		for i, n := range e.SeqUsedK {
			if stored := e.CuK[i+1] - e.CuK[i]; n > stored {
				return nil, fmt.Errorf("attention: options: seqused_k[%d] = %d, but sequence %d has %d keys: %w", i, n, i, stored, ErrOption)
			}
		}
	}
	return e, nil
}

// plain reports whether o asks for no more than Scale, Causal and Align.
func (o Options) plain() bool {
	return o.Window == nil && o.Softcap == 0 && o.ALiBi == nil && o.SeqUsedK == nil && !o.varlen() &&
		(o.Dropout == nil || o.Dropout.P == 0) && o.Bias == nil
}

// varlen reports whether o packs variable-length sequences.
func (o Options) varlen() bool { return o.CuSeqlensQ != nil || o.CuSeqlensK != nil }

// packed is the batch of a varlen call: the number of sequences and the
// longest query and key lengths, after checking the offsets against Tq
// and Tk (errors wrap ErrOption and name the option).
func (o Options) packed(tq, tk int) (b, nq, nk int, err error) {
	if o.CuSeqlensQ == nil || o.CuSeqlensK == nil {
		return 0, 0, 0, fmt.Errorf("attention: options: cu_seqlens: set both CuSeqlensQ and CuSeqlensK or neither: %w", ErrOption)
	}
	if len(o.CuSeqlensQ) != len(o.CuSeqlensK) || len(o.CuSeqlensQ) < 2 {
		return 0, 0, 0, fmt.Errorf("attention: options: cu_seqlens: %d query and %d key offsets, want B+1 ≥ 2 of each: %w",
			len(o.CuSeqlensQ), len(o.CuSeqlensK), ErrOption)
	}
	for _, c := range []struct {
		name  string
		cu    []int32
		total int
		max   *int
	}{{"CuSeqlensQ", o.CuSeqlensQ, tq, &nq}, {"CuSeqlensK", o.CuSeqlensK, tk, &nk}} {
		if c.cu[0] != 0 {
			return 0, 0, 0, fmt.Errorf("attention: options: %s[0] = %d, want 0: %w", c.name, c.cu[0], ErrOption)
		}
		for i := 1; i < len(c.cu); i++ {
			if c.cu[i] < c.cu[i-1] {
				return 0, 0, 0, fmt.Errorf("attention: options: %s decreases at %d (%d after %d): %w", c.name, i, c.cu[i], c.cu[i-1], ErrOption)
			}
			*c.max = max(*c.max, int(c.cu[i]-c.cu[i-1]))
		}
		if last := int(c.cu[len(c.cu)-1]); last != c.total {
			return 0, 0, 0, fmt.Errorf("attention: options: %s ends at %d, but the packed tensor has %d rows: %w", c.name, last, c.total, ErrOption)
		}
	}
	if nq == 0 || nk == 0 {
		return 0, 0, 0, fmt.Errorf("attention: options: cu_seqlens: every sequence is empty: %w", ErrOption)
	}
	return len(o.CuSeqlensQ) - 1, nq, nk, nil
}

func (o Options) mask() (spec.Mask, error) {
	// Align places windows and ALiBi's distances too: checked with or
	// without Causal.
	if o.Align != TopLeft && o.Align != BottomRight {
		return 0, fmt.Errorf("attention: options: align %v: %w", o.Align, ErrOption)
	}
	switch {
	case !o.Causal:
		return spec.MaskNone, nil
	case o.Align == BottomRight:
		return spec.MaskCausalBottomRight, nil
	}
	return spec.MaskCausalTopLeft, nil
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
