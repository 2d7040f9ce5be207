// Package cpu is the float32 FlashAttention backend for the CPU, in Go
// without cgo: exact attention (forward and backward) computed tile by tile,
// never materialising the Nq×Nk score matrix.
//
// # Algorithm
//
// Forward is FlashAttention-2. A work item is one (batch, query head, tile
// of Br query rows). It streams the key/value tiles of Bc keys that the
// tile's last row can see (causal block skipping; the per-element mask is
// applied only on the tiles that cross the diagonal), keeps a running row
// maximum m, a running sum l and the unnormalised output in float32, and
// finishes with O = acc/l and LSE = m + log(l). Scores are kept in base 2
// (the softmax scale is multiplied by log2(e)) so the exponential is a
// cheap exp2 polynomial.
//
// A problem with [spec.Ext] options follows spec.Ext's definition. Its
// mask is spec.Problem.KeyRange: a query tile streams only the key tiles
// between its first row's first key and its last row's last key, so a
// sliding window skips the tiles outside it, and a sequence's key count
// bounds its keys. With a softcap or ALiBi slopes each visible element of
// a score tile is rewritten in float32, one tile row at a time, into
// spec.Ext's score: c·tanh(Scale·q·k/c) with a softcap c (tanh to about
// an ulp: a polynomial near 0, where the shaders' branch-free
// 1 − 2/(e^2a + 1) is less accurate, both within the tolerance), else
// Scale·q·k, minus slope·|diagonal − key| (the distances run along the
// row as an arithmetic progression); the softmax then multiplies the
// scores by log2(e) where a plain problem's multiplies the raw products
// by Scale·log2(e). The backward multiplies dS by the softcap's
// derivative 1 − tanh² before it meets K or Q. With neither (nor a
// bias), the arithmetic is the plain problem's.
//
// With spec.Ext's Bias (PyTorch SDPA's attn_mask; ForwardBias and
// BackwardBias take its buffers, Bias) each visible element's score gains
// its bias element after the softcap and ALiBi: the tile rows are
// rewritten as above, then addBias adds the row's bias elements (one
// pass, Scale·q·k + bias, without a softcap or slope), in natural-log
// units, the softmax's factor being log2(e). Rows and keys index the bias
// within their sequence, packed or not; strides of 0 broadcast it. An
// element of −Inf hides the pair as the mask does: its score is −Inf
// whatever q·k holds, so P = 0, and a row whose keys it hides all is
// empty. A tile whose visible pairs the bias hides all is skipped by the
// forward and both backward passes, so that a boolean mask saves the
// tiles it masks; the scan that decides it stops at the first element
// that is not −Inf (a bias broadcast over the rows scans one row). The
// dK/dV pass gathers a key's bias down a tile's rows. dBias is dS =
// P∘(Z∘dP − D) before the softcap's factor (the bias lies after the
// softcap), 0 where the mask or the bias hides the pair: the dQ pass,
// which computes each (b, h, i, j)'s dS once, adds it into a dBias zeroed
// beforehand (every element of its view: the keys of skipped tiles, the
// rows past a packed sequence's queries). When dBias folds (a stride of 0
// over the batch, the heads or the rows: spec.Bias.GradFolds) the dQ
// items that add into the same dBias rows form a group, taken in item
// order and cut into as many chunks (at most its item count) as give 64
// work units in all, fixed by the problem and the tiles; chunk 0 adds
// into dBias, each later chunk into a scratch block of its own (2²⁴
// floats at most in all), which a last pass adds into dBias in chunk
// order, so that dBias, like the other gradients, does not depend on the
// worker count.
//
// With spec.Ext's Dropout, probability P(i, j) is kept or dropped as
// spec.Dropout.Keep says: bit j mod 16 of the keep bits of the
// Philox4x32-10 block j/16 of row i (sequence Batch0 + b, query head h;
// rows and keys counted within the sequence, packed or not). The kernels
// walk a row's keys contiguously in groups of 8 and draw one block per 16
// keys of it (a tile whose keys do not start on a multiple of 16 draws
// the blocks it straddles), so no mask
// is stored, and the forward and the backward drop the same elements
// whatever the tiles or the worker count. The forward's running sum l and
// LSE take the undropped P; P·V takes P∘keep, and O = Scale·acc/l
// (Scale/l rounded once, from float64). A dropped element is multiplied
// by −0, not skipped, so that 0·NaN = NaN reaches O as in the reference
// (the portable accumulation skips +0, masked, probabilities only). The
// backward keeps D = rowsum(dO∘O) (O being the dropped output, D = Σ
// P·Z·dP), takes dV = Scale·(P∘keep)ᵀ·dO (Scale applied once, at the end)
// and dS = P∘(Z∘dP − D), Z∘dP being Scale·dP where kept and −0·dP where
// dropped. Its dQ pass draws each row's groups as the forward does; its
// dK/dV pass, whose tiles are transposed, draws a tile's groups row by row
// into one byte per (group, row) and reads them per key. Without Dropout
// none of this runs: such a problem keeps the plain arithmetic, bit for
// bit.
//
// A packed problem (spec.Problem.Varlen: spec.Ext's CuQ and CuK) holds
// variable-length sequences in one batch of operands, sequence b's rows
// at spec.Problem.QRow and KRow (every operand and LSE access goes
// through QOffset, KOffset and LSEIndex; the batch stride is never used).
// Its work items are cut per sequence: each sequence's query rows (its
// stored key rows for the dK/dV pass) in tiles of Br (Bc) rows, listed by
// their index in the sequence (last first where later rows see more
// keys), then by sequence and head, so no item runs past its sequence,
// none is empty and a sequence without queries (or keys) has no query
// (key) tiles. Each sequence attends within itself with its own lengths
// (KeyRange), so a packed sequence's results are bitwise those of the
// same sequence run alone with the same Config (and, with dropout, its
// Batch0 raised by b, so that it draws sequence b's mask): a sequence
// without keys gets O = 0, LSE = −Inf and dQ = 0, one without queries
// dK = dV = 0, and the keys past a key count (SeqUsedK) are masked (their
// dK and dV 0).
//
// Backward recomputes the probabilities from Q, K and LSE (no stored P):
// first D = rowsum(dO∘O) per query row, then one pass whose work item is a
// (batch, key/value head, key tile) that accumulates dK and dV over the
// group's query heads in a fixed order (visiting only the query tiles
// that hold a row seeing one of its keys), then one pass whose work item
// is a (batch, query head, query tile) that accumulates dQ. Every output
// element is owned by exactly one work item and summed in a fixed order,
// so the gradients are bitwise identical whatever the worker count or
// scheduling.
//
// Work items run on a pool of Config.Workers goroutines (GOMAXPROCS by
// default). The context is checked between work items and, within an
// item, between its tiles (a Br×Bc tile of scores: at most milliseconds
// of work); on cancellation the call returns ctx.Err() and the outputs are
// partially written. Extra memory is O(tile) per worker (with dropout, the
// dK/dV pass adds a Bc×Br tile of P∘keep and its keep bytes) plus, for the
// backward, two float32 per query row and head (D and LSE in base 2) and,
// for a packed problem, a list of its tiles; with a folding dBias, its
// chunks' scratch blocks.
//
// # Kernels
//
// The tile products are two kernels: scores as row dot products
// (S = Q·Kᵀ, dP = dO·Vᵀ and their transposes) and accumulation as row
// axpys (O += P·V, dQ += dS·K, dV += Pᵀ·dO, dK += dSᵀ·Q), plus the
// exponential, row maximum, rescaling and dS = P∘(dP − D) row passes,
// for spec.Ext's scores the softcap, ALiBi and bias row passes and, for
// dropout, the Philox4x32-10 generator (eight blocks of 16 keys at once)
// and the passes that multiply a row, or a transposed tile's column, by
// its keep factors. On amd64 with
// AVX2 and FMA (detected at start-up) they run as Go assembly
// (kernels_amd64.s, 8-wide, register-blocked); elsewhere, or when built
// with the purego tag, as portable unrolled Go. Both paths are tested
// against the same float64 reference; the results of the two differ by
// float32 rounding, and each is deterministic.
//
// # Layout
//
// Operands are addressed through the strides of a [spec.Problem], so views
// into larger tensors (a packed QKV buffer, BHSD storage) work without
// copies. LSE is contiguous [B, Hq, Nq]; for a packed problem the
// operands are [1, Tq, …] and [1, Tk, …] (Tq and Tk the total query and
// key rows) and LSE is [Hq, Tq]. Rows that see no key (bottom-right
// causal with Nq > Nk, a window past the keys, a key count of 0, a packed
// sequence without keys) or whose visible scores are all −Inf get O = 0,
// LSE = −Inf and zero gradients.
//
// Storage is float32 only: package attention widens float16 and bfloat16
// operands to float32 exactly before calling in, and rounds the outputs back
// to nearest even.
//
// The problem is assumed validated by the caller (package attention); the
// backend still checks that every slice is long enough for its strides and
// returns an error instead of panicking.
package cpu
