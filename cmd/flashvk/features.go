package main

// The options beyond --causal, --align and --scale that run, bench and
// explain take: --window, --softcap, --alibi and --seqused-k, the
// library's Options.Window, Softcap, ALiBi and SeqUsedK, --seqlens, a
// packed batch of sequences (Options.CuSeqlensQ and CuSeqlensK), and
// --dropout with --dropout-seed and --dropout-offset (Options.Dropout).

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
)

// features are a problem's packed lengths, window, softcap, ALiBi, key
// counts and dropout, as the commands and the JSON of run, explain and
// bench carry them (each omitted when unset).
type features struct {
	// SeqLens are the lengths of a packed batch of self-attention
	// sequences (--seqlens): sequence i has Nq = Nk = SeqLens[i], B is
	// their count and the problem's Nq and Nk the longest. Q, K and V hold
	// ΣNi rows, [1, ΣNi, H, d], split by the library's CuSeqlensQ and
	// CuSeqlensK. nil: a padded batch of B sequences of Nq and Nk.
	SeqLens []int `json:"seqlens,omitempty"`
	// Window is [Left, Right]: the keys a query sees before and after its
	// diagonal, −1 unbounded; nil: no window.
	Window *[2]int `json:"window,omitempty"`
	// Softcap c > 0, a float32 value, caps each scaled score s to
	// c·tanh(s/c); 0: off.
	Softcap float64 `json:"softcap,omitempty"`
	// ALiBi adds −slope_h·|diag − j| to the score of key j, with the
	// standard slopes of attention.ALiBiSlopes.
	ALiBi bool `json:"alibi,omitempty"`
	// SeqUsedK are the keys each sequence uses ([B], 0 … Nk, or with
	// SeqLens 0 … the sequence's length): keys past them are masked, and
	// the bottom-right diagonal is placed with them. nil: all.
	SeqUsedK []int `json:"seqused_k,omitempty"`
	// Dropout is the probability P of dropping each attention probability
	// (the kept ones scaled by 1/(1 − P)), 0 < P < 1, as given; the library
	// takes it as a float32 and applies it at a resolution of 2⁻⁸
	// (dropThreshold). 0: no dropout.
	Dropout float64 `json:"dropout,omitempty"`
	// DropoutSeed and DropoutOffset select the dropout mask (the library's
	// Dropout.Seed and Offset); 0 when not given, and always without
	// Dropout. They change which elements drop, not how many: compare and
	// report match results on Dropout alone (see timed).
	DropoutSeed   uint64 `json:"dropout_seed,omitempty"`
	DropoutOffset uint32 `json:"dropout_offset,omitempty"`
	// Bias and Mask describe --bias and --mask (one at most): the file's
	// name, its shape as [B|1,H|1,Nq|1,Nk] and its element type,
	// "bias.npy [1,8,512,512] float32", "mask.npy [1,1,512,512] bool"
	// (biasFile.descriptor); "" without. BiasGrad: the backward computes
	// dBias too (--bias-grad; backward passes only).
	Bias     string `json:"bias,omitempty"`
	Mask     string `json:"mask,omitempty"`
	BiasGrad bool   `json:"bias_grad,omitempty"`
}

// set reports whether f asks for anything.
func (f features) set() bool {
	return f.SeqLens != nil || f.Window != nil || f.Softcap != 0 || f.ALiBi || f.SeqUsedK != nil || f.Dropout != 0 || f.biased()
}

// biased reports whether f has a bias (--bias or --mask).
func (f features) biased() bool { return f.Bias != "" || f.Mask != "" }

// timed is f without what selects the dropout mask (its seed and
// offset), which changes which elements drop but not how many, nor the
// work: the features a timing depends on, which compare and report match
// and label results on (as they do not match on the inputs' seed).
func (f features) timed() features {
	f.DropoutSeed, f.DropoutOffset = 0, 0
	return f
}

// dropThreshold is the library's threshold of dropout probability p,
// round(P·256) at most 255 of the float32 P it takes (Options.Dropout):
// the probability applied is dropThreshold/256.
func dropThreshold(p float64) uint32 {
	return uint32(min(math.Round(float64(float32(p))*256), 255))
}

// keys is the keys sequence i stores: its length in a packed batch, else
// nk.
func (f features) keys(i, nk int) int {
	if f.SeqLens != nil {
		return f.SeqLens[i]
	}
	return nk
}

// diagonal reports whether f measures from the diagonal (the window and
// ALiBi do), which --align places.
func (f features) diagonal() bool { return f.Window != nil || f.ALiBi }

// String is f as labels show it, "seqlens=300,100 window=128,0
// softcap=30 alibi seqused_k=100,200 dropout=0.1 dropout_seed=7
// dropout_offset=2 mask=mask.npy [1,1,300,300] bool bias_grad"
// ("seqused_k=100 each" where the counts are equal; more than 8 lengths
// summarised; the dropout's seed and offset where not 0); "" when unset.
func (f features) String() string {
	var s []string
	if f.SeqLens != nil {
		s = append(s, "seqlens="+compactLens(f.SeqLens, ","))
	}
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
	if f.Dropout != 0 {
		s = append(s, "dropout="+strconv.FormatFloat(f.Dropout, 'g', -1, 32))
	}
	if f.DropoutSeed != 0 {
		s = append(s, "dropout_seed="+strconv.FormatUint(f.DropoutSeed, 10))
	}
	if f.DropoutOffset != 0 {
		s = append(s, "dropout_offset="+strconv.FormatUint(uint64(f.DropoutOffset), 10))
	}
	if f.Bias != "" {
		s = append(s, "bias="+f.Bias)
	}
	if f.Mask != "" {
		s = append(s, "mask="+f.Mask)
	}
	if f.BiasGrad {
		s = append(s, "bias_grad")
	}
	return strings.Join(s, " ")
}

// nameSuffix is f as a Go benchmark name's suffix,
// "/seqlens300-100/window128_0/softcap30/alibi/seqk100-200/dropout0.1/mask_mask.npy_1x1x300x300_bool/dbias"
// (the dropout's seed and offset left out, as compare leaves them); ""
// when unset.
func (f features) nameSuffix() string {
	var s string
	if f.SeqLens != nil {
		s += "/seqlens" + lensName(f.SeqLens)
	}
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
	if f.Dropout != 0 {
		s += "/dropout" + strconv.FormatFloat(f.Dropout, 'g', -1, 32)
	}
	if f.Bias != "" {
		s += "/bias_" + biasName(f.Bias)
	}
	if f.Mask != "" {
		s += "/mask_" + biasName(f.Mask)
	}
	if f.BiasGrad {
		s += "/dbias"
	}
	return s
}

// setOptions sets f in o, for a problem of hq query heads.
func (f features) setOptions(o *attention.Options, hq int) {
	if f.SeqLens != nil {
		cu := cuSeqlens(f.SeqLens)
		o.CuSeqlensQ, o.CuSeqlensK = cu, cu
	}
	if w := f.Window; w != nil {
		o.Window = &attention.Window{Left: w[0], Right: w[1]}
	}
	o.Softcap = float32(f.Softcap)
	if f.ALiBi {
		o.ALiBi = attention.ALiBiSlopes(hq)
	}
	if f.SeqUsedK != nil {
		o.SeqUsedK = make([]int32, len(f.SeqUsedK))
		for i, n := range f.SeqUsedK {
			o.SeqUsedK[i] = int32(n)
		}
	}
	if f.Dropout != 0 {
		o.Dropout = &attention.Dropout{P: float32(f.Dropout), Seed: f.DropoutSeed, Offset: f.DropoutOffset}
	}
}

// cuSeqlens are the B+1 row offsets of a packed batch of sequences of
// lengths lens: 0, N1, N1+N2, …, ΣNi.
func cuSeqlens(lens []int) []int32 {
	cu := make([]int32, len(lens)+1)
	for i, n := range lens {
		cu[i+1] = cu[i] + int32(n)
	}
	return cu
}

// setParams sets f in the float64 reference's p, with the very float32
// slopes and softcap the kernels get and the dropout probability they
// apply, dropThreshold/256, so that the reference's threshold is the
// library's (a packed batch's lengths are not among them: package
// reference runs one sequence at a time, see packedReference).
func (f features) setParams(p *reference.Params) {
	if w := f.Window; w != nil {
		p.Window = &reference.Window{Left: w[0], Right: w[1]}
	}
	p.Softcap = f.Softcap
	if f.ALiBi {
		for _, s := range attention.ALiBiSlopes(p.Hq) {
			p.ALiBi = append(p.ALiBi, float64(s))
		}
	}
	p.SeqUsedK = slices.Clone(f.SeqUsedK)
	if f.Dropout != 0 {
		p.Dropout = &reference.Dropout{P: float64(dropThreshold(f.Dropout)) / 256, Seed: f.DropoutSeed, Offset: f.DropoutOffset}
	}
}

// check refuses f where it does not fit a problem of b sequences of nk
// keys (causal or not), the way attention does, with flag names.
func (f features) check(b, nk int, causal bool) error {
	if w := f.Window; w != nil && causal && w[1] > 0 {
		return usagef("--window %d,%d with --causal: R must be −1 or 0 (a causal mask shows no key after the diagonal)", w[0], w[1])
	}
	if ks := f.SeqUsedK; ks != nil {
		switch {
		case len(ks) != b && f.SeqLens != nil:
			return usagef("--seqused-k: %d key counts for the %d sequences of --seqlens: give one per sequence, or one for every sequence", len(ks), b)
		case len(ks) != b:
			return usagef("--seqused-k: %d key counts for B = %d sequences: give one per sequence, or one for every sequence", len(ks), b)
		}
		for i, n := range ks {
			switch {
			case f.SeqLens != nil && (n < 0 || n > f.SeqLens[i]):
				return usagef("--seqused-k %d: want 0 … %d for sequence %d (its length in --seqlens)", n, f.SeqLens[i], i)
			case n < 0 || n > nk:
				return usagef("--seqused-k %d: want 0 … Nk = %d", n, nk)
			}
		}
	}
	return nil
}

// effect refuses the features that change nothing in a problem of nk
// keys (causal or not): a window unbounded on both sides, or on the left
// beside a causal mask, and key counts that are all nk (in a packed
// batch: each its sequence's length).
func (f features) effect(nk int, causal bool) error {
	if w := f.Window; w != nil {
		switch {
		case w[0] == -1 && w[1] == -1:
			return usagef("--window -1,-1 has no effect: both sides are unbounded (omit --window)")
		case w[0] == -1 && causal:
			return usagef("--window -1,%d has no effect with --causal: the left side is unbounded and the causal mask already bounds the right", w[1])
		}
	}
	ks := f.SeqUsedK
	if ks == nil {
		return nil
	}
	for i, n := range ks {
		if n != f.keys(i, nk) {
			return nil
		}
	}
	if f.SeqLens != nil {
		return usagef("--seqused-k has no effect: every sequence uses all its keys (its length in --seqlens)")
	}
	return usagef("--seqused-k has no effect: every sequence uses all Nk = %d keys", nk)
}

// checkPacked checks --seqlens and refuses the flags it replaces: the
// lengths (--seq, --nq, --nk) and the batch (--batch, and on bench's grid
// --tokens). Decode mode refuses --seqlens itself (checkDecodeFlags).
func (s *shapeFlags) checkPacked() error {
	if len(s.seqLens) == 0 || s.decodeMode() {
		return nil
	}
	for _, name := range []string{"seq", "nq", "nk"} {
		if s.given(name) {
			return usagef("--%s does not apply with --seqlens: each sequence's length is both its Nq and its Nk", name)
		}
	}
	for _, name := range []string{"batch", "tokens"} {
		if s.given(name) {
			return usagef("--%s does not apply with --seqlens: B is the number of lengths (one per sequence)", name)
		}
	}
	total := 0
	for _, n := range s.seqLens {
		switch {
		case n < 0:
			return usagef("--seqlens %d: a length must be ≥ 0", n)
		case n > math.MaxInt32:
			return usagef("--seqlens %d: a length must be at most %d", n, math.MaxInt32)
		}
		if total += n; total > math.MaxInt32 {
			return usagef("--seqlens: %d rows in all, more than the %d a packed batch holds", total, math.MaxInt32)
		}
	}
	if total == 0 {
		return usagef("--seqlens %s: every sequence is empty (give at least one length > 0)", joinInts(s.seqLens))
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
	f := features{SeqLens: slices.Clone(s.seqLens), Window: s.window, Softcap: s.softcap, ALiBi: s.alibi, SeqUsedK: s.keyCounts(b)}
	if s.dropout != 0 {
		f.Dropout, f.DropoutSeed, f.DropoutOffset = s.dropout, s.dropoutSeed, s.dropoutOffset
	}
	if x := s.bias; x != nil {
		if x.isMask() {
			f.Mask = x.descriptor()
		} else {
			f.Bias = x.descriptor()
		}
		f.BiasGrad = s.biasGrad
	}
	return f
}

// featureFlags are the flags of the options beyond the mask, in order
// (--seqlens and the bias's apart: decode mode refuses them for reasons
// of their own).
var featureFlags = []string{"window", "softcap", "alibi", "seqused-k", "dropout", "dropout-seed", "dropout-offset"}
