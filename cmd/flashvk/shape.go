package main

import (
	"slices"
	"strings"

	"github.com/flashvk/flashvk/attention"
	"github.com/spf13/cobra"
)

// shapeMode says which problem flags a command takes.
type shapeMode int

const (
	// oneProblem: run and explain, one value per flag.
	oneProblem shapeMode = iota
	// benchGrid: bench, lists of sizes and dtypes and a set of masks.
	benchGrid
	// tuneGrid: tune's timed problems, which have Nq = Nk and Hkv = Hq
	// (the tuner's problem): no --nq, --nk, --kv-heads.
	tuneGrid
)

// shapeFlags are the problem flags of run, explain, bench and tune, each
// registered once, so that a flag means the same on every command.
type shapeFlags struct {
	mode                      shapeMode
	batch, heads, kvHeads, dv int
	seq, nq, nk, dim          []int
	tokens, hidden            int
	dtypes                    []attention.DType
	causal                    causalValue
	align, layout             string
	scale                     float64
	// The features (run, bench, explain; see features.go): --seqlens,
	// --window, --softcap, --alibi, --seqused-k, --dropout,
	// --dropout-seed, --dropout-offset.
	seqLens       []int
	window        *[2]int
	softcap       float64
	alibi         bool
	seqUsedK      []int
	dropout       float64
	dropoutSeed   uint64
	dropoutOffset uint32
	// The bias (see bias.go): --bias, --mask, --bias-grad, and the
	// file's header once read (loadBias).
	biasPath, maskPath string
	biasGrad           bool
	bias               *biasFile
	// Decode mode (run, bench, explain; see decode.go): --decode,
	// --cache-seqlens, --paged, --append.
	decode         bool
	cacheLens      []int
	paged, appendN int
	// changed reports whether the command line gives a flag.
	changed func(name string) bool
}

// register adds the flags of mode to c; dtype is the one problem's
// default storage type.
func (s *shapeFlags) register(c *cobra.Command, mode shapeMode, dtype attention.DType) {
	s.mode = mode
	grid := mode != oneProblem
	f := c.Flags()
	s.changed = f.Changed
	if grid {
		batch := "batch size B (default: --tokens / max(Nq, Nk))"
		if mode == tuneGrid {
			batch = "batch size B (default: --tokens / N)"
		}
		f.IntVarP(&s.batch, "batch", "b", 0, batch)
		f.IntVar(&s.heads, "heads", 0, "query heads Hq (default: --hidden / d)")
	} else {
		f.IntVarP(&s.batch, "batch", "b", 1, "batch size B")
		f.IntVar(&s.heads, "heads", 8, "query heads Hq")
	}
	if mode != tuneGrid {
		f.IntVar(&s.kvHeads, "kv-heads", 0, "key/value heads Hkv; must divide --heads (default: --heads)")
	}
	switch mode {
	case oneProblem:
		s.seq, s.dim, s.dtypes = []int{512}, []int{64}, []attention.DType{dtype}
		f.Var(intsValue(&s.seq, false), "seq", "sequence length N: sets Nq = Nk = N")
		f.Var(intsValue(&s.nq, false), "nq", "query length Nq (overrides --seq; in decode mode the queries per sequence, default 1)")
		f.Var(intsValue(&s.nk, false), "nk", "key/value length Nk (overrides --seq; in decode mode the cache capacity per sequence)")
		f.Var(intsValue(&s.dim, false), "dim", "head dimension d of Q and K")
		f.IntVar(&s.dv, "dv", 0, "head dimension of V and O (default: --dim)")
		f.Var(dtypesValue(&s.dtypes, false), "dtype", "storage type: float32, float16 or bfloat16 (f32, f16, bf16); arithmetic is float32")
	case benchGrid:
		f.Var(intsValue(&s.seq, true), "seq", "sequence lengths N: Nq = Nk = N (default 512,1024,…,16384; on the CPU backend 128,256,512)")
		f.Var(intsValue(&s.nq, true), "nq", "query lengths Nq (default: --seq; in decode mode the queries per sequence, default 1); with --nq or --nk the grid is every Nq × Nk")
		f.Var(intsValue(&s.nk, true), "nk", "key/value lengths Nk (default: --seq; in decode mode the cache capacities per sequence); with --nq or --nk the grid is every Nq × Nk")
	case tuneGrid:
		s.seq = []int{2048}
		f.Var(intsValue(&s.seq, true), "seq", "sequence lengths N = Nq = Nk of the timed problem (one cache entry per N; a problem uses the nearest)")
	}
	if grid {
		s.dim = []int{64, 128}
		f.Var(intsValue(&s.dim, true), "dim", "head dims d (= dv)")
		tokens := "tokens per batch B·N: B = tokens / max(Nq, Nk) unless --batch is given (default 16384; on the CPU backend without --seq: 1024)"
		if mode == tuneGrid {
			tokens = "tokens per batch B·N: B = tokens / N unless --batch is given (default 16384)"
		}
		f.IntVar(&s.tokens, "tokens", 0, tokens)
		f.IntVar(&s.hidden, "hidden", paperHidden, "hidden size H·d: H = hidden / d unless --heads is given")
		help := "storage types: float32, float16, bfloat16 (f32, f16, bf16) (default: float16 where the backend runs it, else float32)"
		if mode == tuneGrid {
			help = "storage types: float32, float16 (f32, f16) (default: both where the device runs them; bfloat16 is not tuned: it uses float16's tiles)"
		}
		f.Var(dtypesValue(&s.dtypes, true), "dtype", help)
		s.causal = causalValue{vals: []bool{false, true}, multi: true}
		f.Var(&s.causal, "causal", "causal masks: true, false or both (a bare --causal is true)")
	} else {
		s.causal = causalValue{vals: []bool{false}}
		f.Var(&s.causal, "causal", "causal mask: true or false (a bare --causal is true)")
	}
	f.Lookup("causal").NoOptDefVal = "true"
	if mode != tuneGrid {
		f.StringVar(&s.align, "align", "top-left", "causal diagonal when Nq ≠ Nk: top-left (PyTorch is_causal) or bottom-right (FlashAttention-2; the default in decode mode)")
		f.BoolVar(&s.decode, "decode", false, "decode mode: one KV-cache call (ForwardKVCache) of --nq queries per sequence over a cache of --nk rows (implied by --cache-seqlens, --paged and --append)")
		f.Var(intsValue(&s.cacheLens, true), "cache-seqlens", "decode mode: rows cached per sequence before the call, one per sequence (sets B; default: --nk − --append for each sequence)")
		f.IntVar(&s.paged, "paged", 0, "decode mode: a paged cache of blocks of this many rows, the block table a random permutation (default: contiguous)")
		f.IntVar(&s.appendN, "append", 0, "decode mode: new K/V rows appended to every sequence before it is attended to")
		s.registerFeatures(c)
	} else {
		s.registerScoreFeatures(c)
	}
	if mode == oneProblem {
		f.StringVar(&s.layout, "layout", "bshd", "memory layout of the operands: bshd (FlashAttention) or bhsd (PyTorch)")
		f.Var(scaleValue(&s.scale), "scale", "softmax scale, a positive float32 (default 1/√d)")
	}
}

// registerFeatures adds --seqlens, --window, --softcap, --alibi,
// --seqused-k, --dropout, --dropout-seed, --dropout-offset, --bias,
// --mask and --bias-grad.
func (s *shapeFlags) registerFeatures(c *cobra.Command) {
	f := c.Flags()
	packed := "a packed batch of self-attention sequences of these lengths (each its Nq = Nk; B their count), Q, K, V [1, ΣNi, H, d]: replaces --seq, --nq, --nk and --batch"
	if s.mode == benchGrid {
		packed = "a packed batch of self-attention sequences of these lengths (each its Nq = Nk; B their count), Q, K, V [1, ΣNi, H, d]: the grid's one length point, at every dtype × d × mask (replaces --seq, --nq, --nk, --batch and --tokens)"
	}
	f.Var(intsValue(&s.seqLens, true), "seqlens", packed)
	s.registerScoreFeatures(c)
	keys := "keys each sequence uses (0 … Nk, or with --seqlens 0 … its length; the rest are masked): one per sequence (it sets B), or one for every sequence"
	if s.mode == benchGrid {
		keys = "keys each sequence uses (0 … Nk of every point; the rest are masked): one per sequence (B = their count at every point), or one for every sequence of every point"
	}
	f.Var(intsValue(&s.seqUsedK, true), "seqused-k", keys)
	f.Var(uintValue[uint64]{&s.dropoutSeed}, "dropout-seed", "seed of the dropout mask (needs --dropout; not --seed, which seeds the inputs)")
	f.Var(uintValue[uint32]{&s.dropoutOffset}, "dropout-offset", "offset of the dropout mask: one of the seed's 2³² streams, e.g. the training step (needs --dropout)")
	f.StringVar(&s.biasPath, "bias", "", "an additive bias on the scores from this .npy file, float32 or float16, [B|1, H|1, Nq|1, Nk] (or [H|1, Nq|1, Nk], [Nq|1, Nk]): −Inf hides a key (PyTorch SDPA's float attn_mask)")
	f.StringVar(&s.maskPath, "mask", "", "a boolean mask from this .npy file, bool or uint8 0/1 (true: attend), shaped as --bias's (PyTorch SDPA's boolean attn_mask)")
	grad := "ask the backward for dBias, the gradient of --bias or --mask (run: needs --backward, --check checks it, --out writes dbias.npy; explain plans the backward with it)"
	if s.mode == benchGrid {
		grad = "ask the backward points for dBias, the gradient of --bias or --mask (needs --backward)"
	}
	f.BoolVar(&s.biasGrad, "bias-grad", false, grad)
}

// registerScoreFeatures adds --window, --softcap, --alibi and --dropout,
// the options tune takes too.
func (s *shapeFlags) registerScoreFeatures(c *cobra.Command) {
	f := c.Flags()
	f.Var(windowValue{&s.window}, "window", "sliding window: each query sees the L keys before its diagonal and the R after it (−1: unbounded; with --causal R is −1 or 0)")
	f.Var(softcapValue(&s.softcap), "softcap", "cap each scaled score s to c·tanh(s/c), c a positive float32")
	f.BoolVar(&s.alibi, "alibi", false, "ALiBi: add −slope_h·|diagonal − j| to the score of key j, slope_h = 2^(−8(h+1)/Hq) for query head h")
	f.Var(dropoutValue{&s.dropout}, "dropout", "attention dropout: drop each attention probability with probability P (0 < P < 1, applied at a resolution of 2⁻⁸) and scale the kept ones by 1/(1 − P)")
}

// checkKeyCountBatch refuses --batch beside --seqused-k values of another
// count: several values give B.
func (s *shapeFlags) checkKeyCountBatch() error {
	if n := len(s.seqUsedK); n > 1 && s.given("batch") && s.batch != n {
		return usagef("--batch %d disagrees with --seqused-k (%d key counts, one per sequence)", s.batch, n)
	}
	return nil
}

// alignment parses --align.
func (s *shapeFlags) alignment() (attention.Alignment, error) {
	a, err := attention.ParseAlignment(strings.ToLower(s.align))
	if err != nil {
		return 0, usagef("--align %q: want top-left or bottom-right", s.align)
	}
	return a, nil
}

// problem turns the flags of a one-problem command into its problem.
func (s *shapeFlags) problem() (problem, error) {
	if err := s.checkPacked(); err != nil {
		return problem{}, err
	}
	if err := s.checkSizes(); err != nil {
		return problem{}, err
	}
	p := problem{B: s.batch, Hq: s.heads, Hkv: s.kvHeads, Nq: s.seq[0], Nk: s.seq[0], D: s.dim[0], Dv: s.dv,
		DType: s.dtypes[0], Causal: s.causal.one(), Scale: s.scale}
	if len(s.nq) > 0 {
		p.Nq = s.nq[0]
	}
	if len(s.nk) > 0 {
		p.Nk = s.nk[0]
	}
	if s.kvHeads == 0 {
		p.Hkv = p.Hq
	}
	if s.dv == 0 {
		p.Dv = p.D
	}
	if err := s.checkKeyCountBatch(); err != nil {
		return p, err
	}
	if len(s.seqUsedK) > 1 {
		p.B = len(s.seqUsedK)
	}
	if len(s.seqLens) > 0 {
		p.B, p.Nq = len(s.seqLens), slices.Max(s.seqLens)
		p.Nk = p.Nq
	}
	p.features = s.features(p.B)
	p.bias = s.bias
	var err error
	if p.Layout, err = attention.ParseLayout(strings.ToLower(s.layout)); err != nil {
		return p, usagef("--layout %q: want bshd or bhsd", s.layout)
	}
	if p.Align, err = s.alignment(); err != nil {
		return p, err
	}
	return p, p.validate()
}

// checkSizes refuses sequence lengths and head dims < 1, naming the flag.
func (s *shapeFlags) checkSizes() error {
	for _, l := range []struct {
		name string
		xs   []int
	}{{"--seq", s.seq}, {"--nq", s.nq}, {"--nk", s.nk}, {"--dim", s.dim}} {
		if err := eachPositive(l.name, l.xs); err != nil {
			return err
		}
	}
	return nil
}

// checkGrid refuses grid flags out of range, naming the flag.
func (s *shapeFlags) checkGrid() error {
	if err := s.checkPacked(); err != nil {
		return err
	}
	if err := s.checkSizes(); err != nil {
		return err
	}
	for _, d := range s.dim {
		if d > attention.MaxHeadDim {
			return usagef("--dim %d: at most %d", d, attention.MaxHeadDim)
		}
	}
	if err := nonNegative(intFlag{"--batch", s.batch}, intFlag{"--heads", s.heads}, intFlag{"--kv-heads", s.kvHeads},
		intFlag{"--tokens", s.tokens}); err != nil {
		return err
	}
	return positive(intFlag{"--hidden", s.hidden})
}

// lengths are the grid's (Nq, Nk) pairs: Nq = Nk = N for each N of seqs,
// or, when --nq or --nk is given, every Nq × Nk (each defaulting to seqs);
// with --seqlens one pair, the longest length.
func (s *shapeFlags) lengths(seqs []int) [][2]int {
	if len(s.seqLens) > 0 {
		n := slices.Max(s.seqLens)
		return [][2]int{{n, n}}
	}
	var out [][2]int
	if len(s.nq) == 0 && len(s.nk) == 0 {
		for _, n := range seqs {
			out = append(out, [2]int{n, n})
		}
		return out
	}
	nqs, nks := s.nq, s.nk
	if len(nqs) == 0 {
		nqs = seqs
	}
	if len(nks) == 0 {
		nks = seqs
	}
	for _, nq := range nqs {
		for _, nk := range nks {
			out = append(out, [2]int{nq, nk})
		}
	}
	return out
}

// batchHeads are a grid point's batch and query heads: --batch, else
// the count of --seqlens's or --seqused-k's values where it has several,
// else tokens / max(Nq, Nk); --heads, else --hidden / d.
func (s *shapeFlags) batchHeads(nq, nk, d, tokens int) (b, h int) {
	switch b = s.batch; {
	case b > 0:
	case len(s.seqLens) > 0:
		b = len(s.seqLens)
	case len(s.seqUsedK) > 1:
		b = len(s.seqUsedK)
	default:
		b = max(tokens/max(nq, nk), 1)
	}
	if h = s.heads; h == 0 {
		h = max(s.hidden/d, 1)
	}
	return b, h
}

// given reports whether the command line gives the flag name.
func (s *shapeFlags) given(name string) bool { return s.changed != nil && s.changed(name) }

// checkEffect refuses the problem flags that the others make ineffective
// (flashvk ignores no flag): --seq beside both --nq and --nk,
// --dropout-seed and --dropout-offset without --dropout, and on the grids
// --tokens beside --batch and --hidden beside --heads.
func (s *shapeFlags) checkEffect() error {
	if s.given("seq") && len(s.nq) > 0 && len(s.nk) > 0 {
		return usagef("--seq has no effect: --nq and --nk give both lengths")
	}
	for _, name := range []string{"dropout-seed", "dropout-offset"} {
		if s.given(name) && s.dropout == 0 {
			return usagef("--%s has no effect without --dropout: it selects the dropout mask", name)
		}
	}
	if s.mode == oneProblem {
		return nil
	}
	if s.given("tokens") && s.batch > 0 {
		return usagef("--tokens has no effect: --batch %d sets B", s.batch)
	}
	if s.given("tokens") && len(s.seqUsedK) > 1 {
		return usagef("--tokens has no effect: --seqused-k gives one key count per sequence, which sets B")
	}
	if s.given("hidden") && s.heads > 0 {
		return usagef("--hidden has no effect: --heads %d sets H", s.heads)
	}
	return nil
}

// checkProblem refuses the flags that change nothing in the problem p:
// features that change nothing (features.effect) and --align where no
// mask or bias measures from the diagonal, or where top-left and
// bottom-right are the same diagonal (every sequence has Nq keys).
func (s *shapeFlags) checkProblem(p problem) error {
	if err := p.features.effect(p.Nk, p.Causal); err != nil {
		return err
	}
	if err := p.windowEffect(); err != nil {
		return err
	}
	switch {
	case !s.given("align"):
	case !p.Causal && !p.diagonal():
		return usagef("--align has no effect: the mask is not causal and there is no --window or --alibi (add --causal)")
	case p.SeqUsedK == nil && p.packed():
		return usagef("--align has no effect: every sequence of --seqlens has Nq = Nk, where top-left and bottom-right are the same diagonal (add --seqused-k)")
	case p.SeqUsedK == nil && p.Nq == p.Nk:
		return usagef("--align has no effect: Nq = Nk = %d, where top-left and bottom-right are the same diagonal", p.Nq)
	case p.packed():
		// --seqused-k changes some sequence's keys (features.effect): its
		// diagonals differ.
	case p.SeqUsedK != nil && !slices.ContainsFunc(p.SeqUsedK, func(n int) bool { return n != p.Nq }):
		return usagef("--align has no effect: every sequence uses Nq = %d keys (--seqused-k), where top-left and bottom-right are the same diagonal", p.Nq)
	}
	return nil
}

// checkGridAlign is checkProblem's --align check for a grid: --align
// needs a causal mask, --window or --alibi, and a point whose sequences
// have Nk ≠ Nq keys.
func (s *shapeFlags) checkGridAlign() error {
	if !s.given("align") {
		return nil
	}
	if !slices.Contains(s.causal.vals, true) && s.window == nil && !s.alibi {
		return usagef("--align has no effect: --causal false runs no causal mask, and there is no --window or --alibi")
	}
	if len(s.seqLens) > 0 {
		if ks := s.keyCounts(len(s.seqLens)); ks != nil && !slices.Equal(ks, s.seqLens) {
			return nil
		}
		return usagef("--align has no effect: every sequence of --seqlens has Nq = Nk, where top-left and bottom-right are the same diagonal (add --seqused-k)")
	}
	unequal := func(seqs []int) bool {
		return slices.ContainsFunc(s.lengths(seqs), func(n [2]int) bool {
			return n[0] != n[1] && len(s.seqUsedK) == 0 || slices.ContainsFunc(s.seqUsedK, func(k int) bool { return k != n[0] })
		})
	}
	if len(s.seq) > 0 && unequal(s.seq) || len(s.seq) == 0 && (unequal(paperSeqs) || unequal(cpuSeqs)) {
		return nil
	}
	if len(s.seqUsedK) > 0 {
		return usagef("--align has no effect: every sequence of every point uses Nq keys (--seqused-k), where top-left and bottom-right are the same diagonal")
	}
	return usagef("--align has no effect: every point has Nq = Nk, where top-left and bottom-right are the same diagonal (give --nq or --nk)")
}
