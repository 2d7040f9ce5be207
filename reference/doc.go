// Package reference is flashvk's float64 ground truth: a deliberately naive,
// obviously-correct implementation of exact attention
//
//	O = softmax(scale·Q·Kᵀ + mask)·V
//
// and its analytic backward, against which every other implementation in the
// project (CPU kernels, Vulkan shaders) is tested. It favours clarity over
// speed: for every (batch, query head) pair it materialises the full score
// matrix S and probability matrix P with gonum's mat.Dense. It is a leaf
// package and imports nothing from flashvk.
//
// # Layout
//
// All tensors are contiguous, row-major float64 slices in BSHD order:
//
//	Q  [B, Nq, Hq,  D]
//	K  [B, Nk, Hkv, D]
//	V  [B, Nk, Hkv, Dv]
//	O  [B, Nq, Hq,  Dv]   (dO has the same shape; dQ, dK, dV have Q's, K's, V's)
//	LSE [B, Hq, Nq]       (note: head-major, not BSHD)
//
// so element (b, n, h, c) of a [B, N, H, X] tensor is at ((b·N+n)·H+h)·X+c.
//
// # Heads (MHA / GQA / MQA)
//
// Hq must be a multiple of Hkv. Query head h reads key/value head
// h / (Hq/Hkv): consecutive query heads share a kv head. dK and dV of a kv
// head are the sums of the contributions of all query heads in its group.
//
// # Scale
//
// Params.Scale multiplies QKᵀ before the mask and softmax; 0 selects the
// default 1/√D. Any other finite value (including a negative one) is used as
// given; NaN and ±Inf are rejected.
//
// # Masks, window, softcap, ALiBi and key counts
//
// Query i of sequence b has its diagonal at key Diag(b, i): i (top-left,
// BottomRight false) or i + Nk_b − Nq (bottom-right, FlashAttention-2's
// rule), where Nk_b is the sequence's key count (SeqUsedK[b], or Nk). It
// sees key j iff j < Nk_b and
//
//	Diag − Left ≤ j ≤ Diag + Right
//
// with Window{Left, Right} (−1: unbounded on that side; no Window: both
// unbounded) and Right taken as 0 when Causal. Plain causal masks are
// thus j ≤ i (top-left, PyTorch SDPA's is_causal) and j ≤ i + Nk − Nq
// (bottom-right); the two coincide when Nq == Nk. Params.Visible
// implements exactly this rule.
//
// The score of a visible key is the scaled product s = scale·q_i·k_j,
// then c·tanh(s/c) when Softcap c > 0, then s − slope·|Diag(b, i) − j|
// with the ALiBi slope of (b, h) (Params.Score). FlashAttention-2
// measures ALiBi's distance from the bottom-right diagonal; with
// BottomRight false it is measured from the top-left one, which differs
// only when Nq ≠ Nk (and, under a causal mask, by a constant per row,
// which the softmax cancels).
//
// # Bias
//
// With Params.Bias (PyTorch SDPA's float attn_mask; a boolean mask is a
// bias of 0 and −Inf) the score gains the bias element of (b, h, i, j)
// after the softcap and ALiBi; the bias is [B, H, S, Nk] with B, H and S
// each either the problem's size or 1 (broadcast). An element of −Inf
// hides its key from the row exactly as the mask does (Params.Sees): the
// pair is not scored, and a row whose keys are all hidden is empty.
// BiasGrad is the gradient with respect to the bias: dS of the Backward
// section without the softcap's factor G (the softcap lies before the
// bias), summed over the (b, h, i) each broadcast element is added to.
//
// # Dropout
//
// With Params.Dropout, each probability P_ij of (b, h) is multiplied by
// Z_ij = 0 (dropped) or 256/(256 − T) (kept), T = round(P·256) (at most
// 255): the dropout probability applied is T/256, and the kept elements'
// scale makes the expectation of O the undropped O. The element is kept
// when its 8-bit draw is at least T; the draw is byte j mod 4 (low byte
// first) of word (j mod 16)/4 of the Philox4x32-10 block of counter
// (⌊j/16⌋, i, b·Hq + h, Offset) and key (Seed mod 2³², ⌊Seed/2³²⌋)
// (Dropout.Keep, Params.DropFactor). LSE is the undropped
// softmax's. O = (P ∘ Z)·V, and the backward is
//
//	dV = (P ∘ Z)ᵀ·dO
//	dS = P ∘ (Z ∘ dP − rowsum(dP ∘ P ∘ Z)) ∘ G
//
// with dP, G, dQ and dK as below (rowsum(dP ∘ P ∘ Z) = rowsum(dO ∘ O)).
//
// # Softmax, LSE and empty rows
//
// The softmax is computed stably (the row maximum over visible keys is
// subtracted before exponentiating). LSE is the natural-log log-sum-exp of
// the scores of the visible keys: LSE_i = log Σ_{j visible} exp(score_ij).
// Masked probabilities are exactly 0.
//
// A row with no visible key (bottom-right with Nq > Nk leaves the first
// Nq − Nk rows empty), or whose visible scores are all −Inf, is empty: P
// row 0, O row 0, LSE −Inf, dQ row 0, and it contributes exactly 0 to dK
// and dV, even where its Q or dO holds ±Inf; it never produces NaN.
//
// # Special values
//
// Inputs holding NaN or ±Inf are evaluated element by element, in IEEE
// float64 and over exactly the keys each row sees (gonum's products, used
// for finite inputs, skip zero factors): a masked key is never read, while
// a visible key is read even where its probability is 0, so 0·NaN = NaN
// reaches the output as IEEE arithmetic says. A NaN score makes its row's
// maximum, P and LSE NaN. This is the special-value contract every flashvk
// backend follows (see package attention).
//
// # Backward
//
// Backward recomputes P and applies the textbook formulas, per (b, h):
//
//	dV  = Pᵀ·dO
//	dP  = dO·Vᵀ
//	dS  = P ∘ (dP − rowsum(dP ∘ P)) ∘ G
//	dQ  = scale · dS·K
//	dK  = scale · dSᵀ·Q
//
// where G is 1, or with a softcap the derivative 1 − tanh²(s/c) at each
// scaled product s (ALiBi is a constant and has no gradient; a Bias has
// BiasGrad).
//
// # Cancellation
//
// ForwardContext and BackwardContext are Forward and Backward that stop
// between (batch, head) pairs once their context is done.
//
// # Errors
//
// Invalid Params (non-positive sizes, Hq not a multiple of Hkv, non-finite
// scale, sizes whose element counts overflow int) and slices of the wrong
// length yield errors that wrap ErrShape (test with errors.Is). Nothing in
// the package panics on bad input.
//
// # Comparison helpers
//
// RelL2, MaxAbs and Compare compare a float32 or float64 result against a
// float64 reference and are used by every test in the project. A NaN in the
// result never passes (the error metrics become +Inf). Where the reference
// holds ±Inf (for instance the LSE of an empty row), the result must hold the
// identical value; such positions then count as zero error and are left out
// of the norms, and any mismatch makes the metrics +Inf.
package reference
