package main

// The options beyond --causal, --align and --scale that run, bench and
// explain take: --window, --softcap, --alibi and --seqused-k, the
// library's Options.Window, Softcap, ALiBi and SeqUsedK.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
)

// features are a problem's window, softcap, ALiBi and key counts, as the
// commands and the JSON of run, explain and bench carry them (each
// omitted when unset).
type features struct {
	// Window is [Left, Right]: the keys a query sees before and after its
	// diagonal, −1 unbounded; nil: no window.
	Window *[2]int `json:"window,omitempty"`
	// Softcap c > 0, a float32 value, caps each scaled score s to
	// c·tanh(s/c); 0: off.
	Softcap float64 `json:"softcap,omitempty"`
	// ALiBi adds −slope_h·|diag − j| to the score of key j, with the
	// standard slopes of alibiSlopes.
	ALiBi bool `json:"alibi,omitempty"`
	// SeqUsedK are the keys each sequence uses ([B], 0 … Nk): keys past
	// them are masked, and the bottom-right diagonal is placed with them.
	// nil: Nk each.
	SeqUsedK []int `json:"seqused_k,omitempty"`
}

// set reports whether f asks for anything.
func (f features) set() bool {
	return f.Window != nil || f.Softcap != 0 || f.ALiBi || f.SeqUsedK != nil
}

// diagonal reports whether f measures from the diagonal (the window and
// ALiBi do), which --align places.
func (f features) diagonal() bool { return f.Window != nil || f.ALiBi }

// String is f as labels show it, "window=128,0 softcap=30 alibi
// seqused_k=100,200" ("seqused_k=100 each" where the counts are equal);
// "" when unset.
func (f features) String() string {
	var s []string
	if w := f.Window; w != nil {
		s = append(s, fmt.Sprintf("window=%d,%d", w[0], w[1]))
	}
	if f.Softcap != 0 {
		s = append(s, "softcap="+strconv.FormatFloat(f.Softcap, 'g', -1, 32))
	}
	if f.ALiBi {
		s = append(s, "alibi")
	}
	if ks := f.SeqUsedK; len(ks) > 1 && !slices.ContainsFunc(ks, func(n int) bool { return n != ks[0] }) {
		s = append(s, fmt.Sprintf("seqused_k=%d each", ks[0]))
	} else if ks != nil {
		s = append(s, "seqused_k="+compactLens(ks, ","))
	}
	return strings.Join(s, " ")
}

// nameSuffix is f as a Go benchmark name's suffix,
// "/window128_0/softcap30/alibi/seqk100-200"; "" when unset.
func (f features) nameSuffix() string {
	var s string
	if w := f.Window; w != nil {
		s += fmt.Sprintf("/window%d_%d", w[0], w[1])
	}
	if f.Softcap != 0 {
		s += "/softcap" + strconv.FormatFloat(f.Softcap, 'g', -1, 32)
	}
	if f.ALiBi {
		s += "/alibi"
	}
	if f.SeqUsedK != nil {
		s += "/seqk" + lensName(f.SeqUsedK)
	}
	return s
}

// alibiSlopes are the standard ALiBi slopes of hq query heads,
// slope_h = 2^(−8(h+1)/hq) for h = 0 … hq−1: the geometric sequence
// 2^(−8/hq), 2^(−16/hq), …, 2^(−8) (for a power of two hq, the ALiBi
// paper's slopes; for other hq the same formula, not the paper's
// interleaving of two power-of-two sets).
func alibiSlopes(hq int) []float32 {
	s := make([]float32, hq)
	for h := range s {
		s[h] = float32(math.Exp2(-8 * float64(h+1) / float64(hq)))
	}
	return s
}

// setOptions sets f in o, for a problem of hq query heads.
func (f features) setOptions(o *attention.Options, hq int) {
	if w := f.Window; w != nil {
		o.Window = &attention.Window{Left: w[0], Right: w[1]}
	}
	o.Softcap = float32(f.Softcap)
	if f.ALiBi {
		o.ALiBi = alibiSlopes(hq)
	}
	if f.SeqUsedK != nil {
		o.SeqUsedK = make([]int32, len(f.SeqUsedK))
		for i, n := range f.SeqUsedK {
			o.SeqUsedK[i] = int32(n)
		}
	}
}

// setParams sets f in the float64 reference's p, with the very float32
// slopes and softcap the kernels get.
func (f features) setParams(p *reference.Params) {
	if w := f.Window; w != nil {
		p.Window = &reference.Window{Left: w[0], Right: w[1]}
	}
	p.Softcap = f.Softcap
	if f.ALiBi {
		for _, s := range alibiSlopes(p.Hq) {
			p.ALiBi = append(p.ALiBi, float64(s))
		}
	}
	p.SeqUsedK = slices.Clone(f.SeqUsedK)
}

// check refuses f where it does not fit a problem of b sequences of nk
// keys (causal or not), the way attention does, with flag names.
func (f features) check(b, nk int, causal bool) error {
	if w := f.Window; w != nil && causal && w[1] > 0 {
		return usagef("--window %d,%d with --causal: R must be −1 or 0 (a causal mask shows no key after the diagonal)", w[0], w[1])
	}
	if ks := f.SeqUsedK; ks != nil {
		if len(ks) != b {
			return usagef("--seqused-k: %d key counts for B = %d sequences: give one per sequence, or one for every sequence", len(ks), b)
		}
		for _, n := range ks {
			if n < 0 || n > nk {
				return usagef("--seqused-k %d: want 0 … Nk = %d", n, nk)
			}
		}
	}
	return nil
}

// effect refuses the features that change nothing in a problem of nk
// keys (causal or not): a window unbounded on both sides, or on the left
// beside a causal mask, and key counts that are all nk.
func (f features) effect(nk int, causal bool) error {
	if w := f.Window; w != nil {
		switch {
		case w[0] == -1 && w[1] == -1:
			return usagef("--window -1,-1 has no effect: both sides are unbounded (omit --window)")
		case w[0] == -1 && causal:
			return usagef("--window -1,%d has no effect with --causal: the left side is unbounded and the causal mask already bounds the right", w[1])
		}
	}
	if ks := f.SeqUsedK; ks != nil && !slices.ContainsFunc(ks, func(n int) bool { return n != nk }) {
		return usagef("--seqused-k has no effect: every sequence uses all Nk = %d keys", nk)
	}
	return nil
}

// keyCounts are --seqused-k for b sequences: one value repeated for
// each, else the values as given (nil without the flag).
func (s *shapeFlags) keyCounts(b int) []int {
	if len(s.seqUsedK) == 1 {
		return slices.Repeat(s.seqUsedK, max(b, 1))
	}
	return slices.Clone(s.seqUsedK)
}

// features are the problem's features from the flags, for b sequences.
func (s *shapeFlags) features(b int) features {
	return features{Window: s.window, Softcap: s.softcap, ALiBi: s.alibi, SeqUsedK: s.keyCounts(b)}
}

// featureFlags are the flags of the features, in order.
var featureFlags = []string{"window", "softcap", "alibi", "seqused-k"}
