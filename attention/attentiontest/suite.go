// Package attentiontest is the conformance suite every attention backend
// runs (in the spirit of gonum's testblas): a table of awkward problems,
// random inputs drawn fresh for every run, outputs poisoned before each call,
// and every result checked against the float64 reference.
//
//	func TestConformance(t *testing.T) {
//		e, _ := attention.Open(attention.Config{Backend: attention.CPU})
//		defer e.Close()
//		attentiontest.Run(t, e)
//	}
//
// Tolerances: float32 storage must reach rel_l2 ≤ 1e-5 on O, LSE, dQ, dK and
// dV, except on small cases whose terms cancel to a far smaller result — dQ
// or dK terms to a small gradient, a row's score terms q_x·k_x to an LSE
// near 0 (one key: LSE is the score): there 8 fp32 ulps of the terms'
// magnitude (float32Tolerance).
// float16 and bfloat16 follow FlashAttention-2's rule: the error against
// the float64 reference may be at most twice that of a PyTorch-style
// computation in the same 16-bit type (matrix products accumulated in fp32
// and rounded to it, softmax in fp32 rounded to it) on the same inputs; that
// baseline is emulated here. On small cases (where rows have few keys
// and D = rowsum(dO∘O) cancels against dP) the gradients' bound is the
// larger of that and twice the error of the same computation in fp32 with
// no 16-bit rounding in between, on the same 16-bit O, its gradients
// rounded once to the 16-bit type (no kernel does better). A floor of
// half the ulp of values in [1/2, 1) (2^-12 for fp16, 2^-9 for bf16)
// keeps bounds from collapsing where the baseline happens to be exact.
// Inputs are drawn as values representable in the storage type. The
// backward is handed the reference's O rounded to the storage type and the
// LSE of the engine's own forward (RunBackward says why); the tests of
// special inputs, edges, determinism, concurrency and hidden tiles hand it
// the reference's LSE.
//
// Seeds: every run draws a new seed and logs it; FLASHVK_SEED=n replays one.
//
// The suite's checks are tested themselves (package attention's
// TestSuiteCatchesFaults): engines with one deliberate error each must
// fail them.
package attentiontest

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
)

// Case is one problem of the suite.
type Case struct {
	Name                      string
	B, Hq, Hkv, Nq, Nk, D, Dv int
	Causal                    bool
	Align                     attention.Alignment
	Scale                     float32
	Layout                    attention.Layout
	// Packed places Q, K and V inside one [B, N, 3, H, D] buffer (Nq = Nk,
	// Hq = Hkv, D = Dv) and O and the gradients inside larger buffers, so
	// strided views are exercised and writes outside a view are caught.
	Packed bool
	// Window, Softcap and SeqUsedK are Options'; ALiBi selects its slopes
	// (Slopes): 0 none, 1 per head, 2 per sequence and head.
	Window   *attention.Window
	Softcap  float32
	ALiBi    int
	SeqUsedK []int32
	// Dropout is Options' (nil: none); dropBatch0 is the index of the
	// case's first sequence in the call that drew its mask (a packed
	// batch's sequence checked alone).
	Dropout    *attention.Dropout
	dropBatch0 int
	// alibiBatch0 is the index of the case's first sequence in the call
	// whose per-sequence slopes (ALiBi 2) it has (a KV-cache call's
	// sequence checked alone).
	alibiBatch0 int
	// Bias is the case's additive bias (nil: none).
	Bias *BiasCase
}

// Slopes are the case's ALiBi slopes: the geometric 2^(−8(h+1)/Hq) of
// ALiBi's paper per head, and per sequence b that times 1 + b/2 (so
// sequences differ; b counted from alibiBatch0); nil without ALiBi.
func (c Case) Slopes() []float32 {
	if c.ALiBi == 0 {
		return nil
	}
	n, b0 := 1, 0
	if c.ALiBi == 2 {
		n, b0 = c.B, c.alibiBatch0
	}
	s := make([]float32, n*c.Hq)
	for b := range n {
		for h := range c.Hq {
			s[b*c.Hq+h] = float32(math.Exp2(-8*float64(h+1)/float64(c.Hq)) * (1 + float64(b+b0)/2))
		}
	}
	return s
}

func (c Case) String() string {
	s := fmt.Sprintf("B%d_Hq%d_Hkv%d_Nq%d_Nk%d_d%d", c.B, c.Hq, c.Hkv, c.Nq, c.Nk, c.D)
	s += dvMaskSuffix(c.D, c.Dv, c.Causal, c.Align)
	if c.Layout == attention.BHSD {
		s += "_bhsd"
	}
	if c.Packed {
		s += "_packed"
	}
	if c.Scale != 0 {
		s += fmt.Sprintf("_scale%g", c.Scale)
	}
	s += optionSuffix(c.Window, c.Softcap, c.ALiBi, c.SeqUsedK) + dropSuffix(c.Dropout) + c.Bias.String()
	if c.Name != "" {
		s = c.Name + "/" + s
	}
	return s
}

// dvMaskSuffix names in a case's name a Dv other than D and the causal
// mask.
func dvMaskSuffix(d, dv int, causal bool, align attention.Alignment) string {
	s := ""
	if dv != d {
		s += fmt.Sprintf("_dv%d", dv)
	}
	if causal {
		s += "_causal-" + align.String()
	}
	return s
}

// optionSuffix names in a case's name the options beyond the mask: the
// window, softcap, ALiBi (alibi as Case.ALiBi) and key counts set.
func optionSuffix(w *attention.Window, softcap float32, alibi int, seqUsedK []int32) string {
	s := ""
	if w != nil {
		s += fmt.Sprintf("_window%d,%d", w.Left, w.Right)
	}
	if softcap != 0 {
		s += fmt.Sprintf("_softcap%g", softcap)
	}
	if alibi > 0 {
		s += []string{"", "_alibi", "_alibi-batch"}[alibi]
	}
	if seqUsedK != nil {
		s += fmt.Sprintf("_seqused%v", seqUsedK)
	}
	return s
}

// dropSuffix names a case's dropout in its name.
func dropSuffix(d *attention.Dropout) string {
	if d == nil {
		return ""
	}
	return fmt.Sprintf("_dropout%g", d.P)
}

// refDropout is d as the reference's for sequences from b0 on: the P
// that the library applies (round(P·256)/256, Options.Dropout), so
// that both draw the same mask; nil for nil.
func refDropout(d *attention.Dropout, b0 int) *reference.Dropout {
	if d == nil {
		return nil
	}
	t := min(math.Round(float64(d.P)*256), 255)
	return &reference.Dropout{P: t / 256, Seed: d.Seed, Offset: d.Offset, Batch0: b0}
}

func (c Case) params() reference.Params {
	p := reference.Params{B: c.B, Hq: c.Hq, Hkv: c.Hkv, Nq: c.Nq, Nk: c.Nk, D: c.D, Dv: c.Dv,
		Scale: float64(c.Scale), Causal: c.Causal, BottomRight: c.Align == attention.BottomRight,
		Softcap: float64(c.Softcap), Dropout: refDropout(c.Dropout, c.dropBatch0)}
	if w := c.Window; w != nil {
		p.Window = &reference.Window{Left: w.Left, Right: w.Right}
	}
	for _, x := range c.Slopes() {
		p.ALiBi = append(p.ALiBi, float64(x))
	}
	for _, n := range c.SeqUsedK {
		p.SeqUsedK = append(p.SeqUsedK, int(n))
	}
	return p
}

func (c Case) options() attention.Options {
	return attention.Options{Scale: c.Scale, Causal: c.Causal, Align: c.Align,
		Window: c.Window, Softcap: c.Softcap, ALiBi: c.Slopes(), SeqUsedK: c.SeqUsedK, Dropout: c.Dropout}
}

// Cases is the conformance table: tails around tile sizes, Nq ≠ Nk both
// ways, head dims 1…256, Dv ≠ D, causal with both alignments (including rows
// that see no key), GQA and MQA, batches, BHSD, packed views, custom scales.
func Cases() []Case {
	tl, br := attention.TopLeft, attention.BottomRight
	return []Case{
		{Name: "tiny", B: 1, Hq: 1, Hkv: 1, Nq: 1, Nk: 1, D: 1, Dv: 1},
		{Name: "tiny", B: 1, Hq: 1, Hkv: 1, Nq: 2, Nk: 2, D: 8, Dv: 8, Causal: true},
		{Name: "tail", B: 1, Hq: 2, Hkv: 2, Nq: 17, Nk: 17, D: 40, Dv: 40, Causal: true, Align: tl},
		{Name: "tile", B: 1, Hq: 2, Hkv: 1, Nq: 64, Nk: 64, D: 64, Dv: 64, Causal: true, Align: br},
		{Name: "tail", B: 2, Hq: 2, Hkv: 2, Nq: 127, Nk: 129, D: 80, Dv: 80},
		{Name: "tail", B: 1, Hq: 1, Hkv: 1, Nq: 129, Nk: 127, D: 96, Dv: 96, Causal: true, Align: tl},
		{Name: "nq<nk", B: 1, Hq: 2, Hkv: 1, Nq: 100, Nk: 300, D: 64, Dv: 64, Causal: true, Align: br},
		{Name: "nq<nk", B: 1, Hq: 2, Hkv: 2, Nq: 100, Nk: 300, D: 32, Dv: 32, Causal: true, Align: tl},
		{Name: "nq>nk", B: 1, Hq: 2, Hkv: 2, Nq: 300, Nk: 128, D: 64, Dv: 64, Causal: true, Align: br},
		{Name: "nq>nk", B: 1, Hq: 1, Hkv: 1, Nq: 300, Nk: 128, D: 48, Dv: 48, Causal: true, Align: tl},
		{Name: "nq>nk", B: 2, Hq: 1, Hkv: 1, Nq: 200, Nk: 33, D: 16, Dv: 16},
		{Name: "d256", B: 1, Hq: 1, Hkv: 1, Nq: 129, Nk: 129, D: 256, Dv: 256, Causal: true, Align: br},
		{Name: "d128", B: 1, Hq: 2, Hkv: 2, Nq: 257, Nk: 257, D: 128, Dv: 128},
		{Name: "mqa", B: 2, Hq: 8, Hkv: 1, Nq: 65, Nk: 65, D: 32, Dv: 32, Causal: true, Align: tl},
		{Name: "gqa", B: 3, Hq: 4, Hkv: 2, Nq: 50, Nk: 70, D: 64, Dv: 64, Causal: true, Align: br},
		{Name: "dv", B: 1, Hq: 2, Hkv: 1, Nq: 70, Nk: 90, D: 64, Dv: 24},
		{Name: "dv", B: 1, Hq: 1, Hkv: 1, Nq: 33, Nk: 33, D: 8, Dv: 200, Causal: true},
		{Name: "bhsd", B: 2, Hq: 4, Hkv: 2, Nq: 96, Nk: 80, D: 64, Dv: 64, Layout: attention.BHSD, Causal: true, Align: br},
		{Name: "packed", B: 2, Hq: 3, Hkv: 3, Nq: 77, Nk: 77, D: 40, Dv: 40, Packed: true, Causal: true},
		{Name: "scale", B: 1, Hq: 1, Hkv: 1, Nq: 40, Nk: 40, D: 16, Dv: 16, Scale: -0.7},
		{Name: "long", B: 1, Hq: 1, Hkv: 1, Nq: 1000, Nk: 1000, D: 64, Dv: 64, Causal: true, Align: tl},
	}
}

// FeatureCases is the table of the options beyond Scale/Causal/Align and
// the combinations models use: sliding windows (one side, both, with
// causal in both alignments, wider than the sequence, Nq ≠ Nk both ways,
// a long sequence whose window skips tiles), softcap (alone, with a
// window as Gemma 2), ALiBi (per head with causal, per sequence), key
// counts (0, a few, all) with and without the rest, dropout (p 0.1 …
// 0.9, alone and with each option), GQA and MQA, D ≠ Dv, d256, BHSD and
// packed views.
func FeatureCases() []Case {
	tl, br := attention.TopLeft, attention.BottomRight
	win := func(l, r int) *attention.Window { return &attention.Window{Left: l, Right: r} }
	// drop: dropout p with seed and offset that set both halves of the
	// Philox key and the counter's last word.
	drop := func(p float32, n uint64) *attention.Dropout {
		return &attention.Dropout{P: p, Seed: n<<40 | 0x9e3779b9*n, Offset: uint32(n * 7)}
	}
	return []Case{
		{Name: "window", B: 1, Hq: 1, Hkv: 1, Nq: 1, Nk: 1, D: 8, Dv: 8, Window: win(0, 0)},
		{Name: "window", B: 1, Hq: 2, Hkv: 1, Nq: 129, Nk: 129, D: 64, Dv: 64, Window: win(32, 16)},
		{Name: "window", B: 1, Hq: 2, Hkv: 2, Nq: 70, Nk: 90, D: 40, Dv: 40, Window: win(-1, 5), Align: br},
		{Name: "window-causal", B: 2, Hq: 4, Hkv: 2, Nq: 100, Nk: 300, D: 64, Dv: 64, Causal: true, Align: br, Window: win(64, -1)},
		{Name: "window-causal", B: 1, Hq: 2, Hkv: 2, Nq: 300, Nk: 128, D: 32, Dv: 32, Causal: true, Align: br, Window: win(17, 0)},
		{Name: "window-causal", B: 1, Hq: 1, Hkv: 1, Nq: 129, Nk: 127, D: 48, Dv: 48, Causal: true, Align: tl, Window: win(3, -1)},
		{Name: "window-wide", B: 1, Hq: 1, Hkv: 1, Nq: 33, Nk: 47, D: 16, Dv: 16, Window: win(5000, 70)},
		{Name: "window-long", B: 1, Hq: 1, Hkv: 1, Nq: 1000, Nk: 1000, D: 64, Dv: 64, Causal: true, Window: win(127, 0)},
		{Name: "softcap", B: 1, Hq: 2, Hkv: 2, Nq: 127, Nk: 129, D: 80, Dv: 80, Scale: 1, Softcap: 5},
		{Name: "softcap", B: 1, Hq: 2, Hkv: 1, Nq: 70, Nk: 90, D: 64, Dv: 24, Softcap: 0.5, Causal: true, Align: br},
		{Name: "gemma", B: 2, Hq: 4, Hkv: 2, Nq: 257, Nk: 257, D: 128, Dv: 128, Scale: 0.25, Softcap: 20, Causal: true, Align: br, Window: win(100, 0)},
		{Name: "alibi", B: 2, Hq: 4, Hkv: 4, Nq: 129, Nk: 129, D: 64, Dv: 64, Causal: true, ALiBi: 1},
		{Name: "alibi", B: 2, Hq: 4, Hkv: 2, Nq: 50, Nk: 70, D: 64, Dv: 64, Align: br, ALiBi: 2},
		{Name: "alibi", B: 1, Hq: 8, Hkv: 1, Nq: 65, Nk: 33, D: 32, Dv: 32, ALiBi: 1, Softcap: 3},
		// Score terms under the causal mask alone, bottom-right with more
		// queries than keys: the forwards take the plain kernel's bounds
		// (shaders.PlainBounds), where the first 60 rows see no key.
		{Name: "alibi-empty-rows", B: 1, Hq: 2, Hkv: 1, Nq: 150, Nk: 90, D: 64, Dv: 64, Causal: true, Align: br, ALiBi: 1, Softcap: 8},
		// d 128 with a score term and with a mask alone: a GPU's backward
		// takes the tile with K and V in registers and 64-row steps.
		{Name: "alibi", B: 2, Hq: 2, Hkv: 1, Nq: 130, Nk: 200, D: 128, Dv: 128, Causal: true, Align: br, ALiBi: 1, SeqUsedK: []int32{200, 77}},
		{Name: "window", B: 1, Hq: 2, Hkv: 2, Nq: 200, Nk: 200, D: 128, Dv: 128, Window: win(50, 20)},
		// Enough query rows for the large 64 < d ≤ 128 tile that a GPU's
		// forward takes with a bias (BiasCases) from 2048 rows on (with
		// ALiBi at d 128 from there too, at d 96 at every length); d 96
		// so that it fits Mesa's lavapipe too.
		{Name: "alibi-long", B: 1, Hq: 1, Hkv: 1, Nq: 2048, Nk: 300, D: 96, Dv: 96, Causal: true, Align: tl, ALiBi: 1},
		{Name: "seqused", B: 3, Hq: 2, Hkv: 1, Nq: 64, Nk: 129, D: 64, Dv: 64, Causal: true, Align: br, SeqUsedK: []int32{129, 0, 17}},
		{Name: "seqused", B: 3, Hq: 2, Hkv: 2, Nq: 40, Nk: 100, D: 32, Dv: 32, SeqUsedK: []int32{1, 100, 63}, Window: win(20, 10), ALiBi: 2},
		{Name: "d256", B: 1, Hq: 1, Hkv: 1, Nq: 129, Nk: 129, D: 256, Dv: 256, Causal: true, Align: br, Window: win(40, 0), Softcap: 10},
		{Name: "bhsd", B: 2, Hq: 4, Hkv: 2, Nq: 96, Nk: 80, D: 64, Dv: 64, Layout: attention.BHSD, Window: win(30, 30), ALiBi: 1},
		{Name: "packed", B: 2, Hq: 3, Hkv: 3, Nq: 77, Nk: 77, D: 40, Dv: 40, Packed: true, Causal: true, Window: win(9, 0), Softcap: 2},
		{Name: "dropout", B: 1, Hq: 1, Hkv: 1, Nq: 1, Nk: 1, D: 8, Dv: 8, Dropout: drop(0.5, 3)},
		{Name: "dropout", B: 2, Hq: 4, Hkv: 2, Nq: 127, Nk: 129, D: 64, Dv: 64, Dropout: drop(0.1, 1)},
		{Name: "dropout", B: 1, Hq: 2, Hkv: 2, Nq: 100, Nk: 300, D: 80, Dv: 80, Causal: true, Align: br, Dropout: drop(0.5, 2)},
		{Name: "dropout", B: 1, Hq: 2, Hkv: 1, Nq: 129, Nk: 127, D: 128, Dv: 128, Causal: true, Align: tl, Dropout: drop(0.9, 4)},
		// 64 < d ≤ 96 with a score term: a GPU's forward takes longer key
		// tiles with dropout there (128 keys to d 80, 64 above).
		{Name: "dropout", B: 1, Hq: 2, Hkv: 2, Nq: 129, Nk: 257, D: 72, Dv: 72, Softcap: 5, Causal: true, Align: tl, Dropout: drop(0.1, 9)},
		{Name: "dropout", B: 1, Hq: 2, Hkv: 1, Nq: 150, Nk: 200, D: 96, Dv: 96, ALiBi: 1, Dropout: drop(0.2, 10)},
		{Name: "dropout-gemma", B: 2, Hq: 4, Hkv: 2, Nq: 257, Nk: 257, D: 128, Dv: 128, Scale: 0.25, Softcap: 20, Causal: true, Align: br, Window: win(100, 0), Dropout: drop(0.2, 5)},
		{Name: "dropout", B: 3, Hq: 2, Hkv: 2, Nq: 40, Nk: 100, D: 32, Dv: 32, SeqUsedK: []int32{1, 100, 63}, ALiBi: 2, Dropout: drop(0.3, 6)},
		{Name: "dropout", B: 1, Hq: 1, Hkv: 1, Nq: 129, Nk: 129, D: 256, Dv: 256, Causal: true, Dropout: drop(0.25, 7)},
		{Name: "dropout", B: 2, Hq: 4, Hkv: 2, Nq: 96, Nk: 80, D: 64, Dv: 64, Layout: attention.BHSD, Dropout: drop(0.4, 8)},
	}
}

// RunFeatures runs the feature table forward and backward on every dtype,
// then the backward of a window + softcap + ALiBi + dropout GQA case n
// times,
// demanding bitwise-identical gradients, then the packed
// variable-length sequences (RunVarlen).
func RunFeatures(t *testing.T, e *attention.Engine) {
	t.Run("forward", func(t *testing.T) { RunForwardCases(t, e, FeatureCases()) })
	t.Run("backward", func(t *testing.T) { RunBackwardCases(t, e, FeatureCases()) })
	t.Run("bias", func(t *testing.T) { RunBias(t, e) })
	c := Case{B: 2, Hq: 4, Hkv: 2, Nq: 150, Nk: 130, D: 64, Dv: 64, Causal: true, Align: attention.BottomRight,
		Window: &attention.Window{Left: 50, Right: 0}, Softcap: 4, ALiBi: 1, SeqUsedK: []int32{130, 77},
		Dropout: &attention.Dropout{P: 0.25, Seed: 1<<63 | 12345, Offset: 9}}
	t.Run("deterministic", func(t *testing.T) { runDeterminism(t, e, c, 5) })
	t.Run("varlen", func(t *testing.T) { RunVarlen(t, e) })
}

// Seed returns FLASHVK_SEED when set, else a fresh seed; the test logs it.
func Seed(t testing.TB) uint64 {
	if s := os.Getenv("FLASHVK_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FLASHVK_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// Run runs the whole suite, forward and backward, for every dtype the engine
// supports.
func Run(t *testing.T, e *attention.Engine) {
	t.Run("forward", func(t *testing.T) { RunForward(t, e) })
	t.Run("backward", func(t *testing.T) { RunBackward(t, e) })
	t.Run("deterministic", func(t *testing.T) { RunDeterminism(t, e, 10) })
	t.Run("features", func(t *testing.T) { RunFeatures(t, e) })
	t.Run("edges", func(t *testing.T) { RunEdges(t, e) })
	t.Run("special", func(t *testing.T) { RunSpecial(t, e) })
	t.Run("concurrent", func(t *testing.T) { RunConcurrent(t, e) })
}

func dtypes(e *attention.Engine) []attention.DType {
	var out []attention.DType
	for _, dt := range []attention.DType{attention.Float32, attention.Float16, attention.BFloat16} {
		if slices.Contains(e.Info().DTypes, dt) {
			out = append(out, dt)
		}
	}
	return out
}

// RunForward checks O and LSE on every case.
func RunForward(t *testing.T, e *attention.Engine) { RunForwardCases(t, e, Cases()) }

// RunForwardCases checks O and LSE on the given cases, for every dtype the
// engine supports.
func RunForwardCases(t *testing.T, e *attention.Engine, cases []Case) {
	eachCase(t, e, cases, func(t *testing.T, in *Inputs, seed uint64) {
		out := in.forward(t, e)
		ref := in.Reference(t)
		tol := in.tolerance(t, ref)
		Check(t, "o", out.o, ref.O, tol.O, seed)
		CheckLSE(t, out.lse, ref.LSE, tol.LSE, seed)
	})
}

// RunBackward checks dQ, dK and dV on every case. The backward is handed
// the reference's O, rounded to the storage type, and the LSE of the
// engine's own forward — as in training, where P = exp(s − LSE) is
// recomputed from the scores that made the LSE, so an error the forward's
// and the backward's scores share (a softcap's tanh at reduced precision)
// cancels, as it does in the PyTorch-style baseline, whose softmax is
// normalised by its own sum (with one key per row P = 1 in both; against
// the reference's LSE it would not be). The forward's LSE is checked by
// RunForward.
func RunBackward(t *testing.T, e *attention.Engine) { RunBackwardCases(t, e, Cases()) }

// RunBackwardCases is RunBackward on the given cases.
func RunBackwardCases(t *testing.T, e *attention.Engine, cases []Case) {
	eachCase(t, e, cases, func(t *testing.T, in *Inputs, seed uint64) {
		ref := in.Reference(t)
		g := in.backward(t, e, ref, in.forward(t, e).lse)
		tol := in.tolerance(t, ref)
		Check(t, "dq", g[0], ref.DQ, tol.DQ, seed)
		Check(t, "dk", g[1], ref.DK, tol.DK, seed)
		Check(t, "dv", g[2], ref.DV, tol.DV, seed)
		if ref.DB != nil {
			Check(t, "dbias", in.dbiasFloats(), ref.DB, tol.DB, seed)
		}
	})
}

// eachCase runs check in a subtest for every dtype the engine supports and
// every case, on the case's inputs drawn from the subtest's seed; then it
// checks that nothing outside the outputs' views was written.
func eachCase(t *testing.T, e *attention.Engine, cases []Case, check func(t *testing.T, in *Inputs, seed uint64)) {
	for _, dt := range dtypes(e) {
		for _, c := range cases {
			t.Run(dt.String()+"/"+c.String(), func(t *testing.T) {
				seed := Seed(t)
				in := NewInputs(c, dt, seed)
				check(t, in, seed)
				in.checkOutsideUntouched(t)
			})
		}
	}
}

// RunDeterminism runs the backward of a GQA causal case n times and demands
// bitwise-identical gradients.
func RunDeterminism(t *testing.T, e *attention.Engine, n int) {
	runDeterminism(t, e, Case{B: 2, Hq: 4, Hkv: 2, Nq: 150, Nk: 130, D: 64, Dv: 64, Causal: true, Align: attention.BottomRight}, n)
}

func runDeterminism(t *testing.T, e *attention.Engine, c Case, n int) {
	for _, dt := range dtypes(e) {
		t.Run(dt.String(), func(t *testing.T) {
			in := NewInputs(c, dt, Seed(t))
			ref := in.Reference(t)
			lse := refLSE(ref)
			first := in.backward(t, e, ref, lse)
			var db []float32
			if ref.DB != nil {
				db = in.dbiasFloats()
			}
			for i := 1; i < n; i++ {
				again := in.backward(t, e, ref, lse)
				for j, name := range []string{"dq", "dk", "dv"} {
					if !slices.Equal(bitsOf(first[j]), bitsOf(again[j])) {
						t.Fatalf("run %d: %s differs bitwise from run 0", i, name)
					}
				}
				if db != nil && !slices.Equal(bitsOf(db), bitsOf(in.dbiasFloats())) {
					t.Fatalf("run %d: dbias differs bitwise from run 0", i)
				}
			}
		})
	}
}

func bitsOf(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}

// Check fails t when got (dense BSHD) differs from want by more than tol in
// rel_l2, or holds a NaN the reference does not.
func Check(t testing.TB, name string, got []float32, want []float64, tol float64, seed uint64) {
	t.Helper()
	s := reference.Compare(got, want)
	if s.NaN > 0 || !(s.RelL2 <= tol) {
		t.Errorf("%s: rel_l2 %.3g (tol %.3g) max_abs %.3g NaN %d (seed %d)", name, s.RelL2, tol, s.MaxAbs, s.NaN, seed)
		return
	}
	t.Logf("%s: rel_l2 %.3g (tol %.3g) max_abs %.3g", name, s.RelL2, tol, s.MaxAbs)
}

// CheckLSE compares LSE rows: −Inf exactly where the reference has −Inf,
// rel_l2 over the finite rows otherwise.
func CheckLSE(t testing.TB, got []float32, want []float64, tol float64, seed uint64) {
	t.Helper()
	var g []float32
	var w []float64
	for i := range want {
		if math.IsInf(want[i], -1) {
			if !math.IsInf(float64(got[i]), -1) {
				t.Errorf("lse[%d] = %v, want -Inf (row sees no key; seed %d)", i, got[i], seed)
				return
			}
			continue
		}
		g, w = append(g, got[i]), append(w, want[i])
	}
	Check(t, "lse", g, w, tol, seed)
}
