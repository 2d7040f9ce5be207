package shaders

import (
	"encoding/binary"
	"math"

	"github.com/flashvk/flashvk/internal/spec"
)

// SpecExt is the specialization constant (ext.glsl) that builds a
// kernel's extended variant: ExtSpec's bits, 0 for the plain kernel.
const SpecExt uint32 = 8

// ExtSpec is SpecExt's value for p: 0 without spec.Ext, else 1 (read the
// Ext buffer) plus 2 with a softcap, 4 with ALiBi slopes, 8 with
// dropout and the bias bits (ExtSpecBias …), so that a kernel carries only
// the terms its call uses (ExtSpecFor: a kernel's own bits).
func ExtSpec(p *spec.Problem) uint32 {
	e := p.Ext
	if e == nil {
		return 0
	}
	v := uint32(1)
	if e.Softcap > 0 {
		v |= 2
	}
	if e.Slopes != nil {
		v |= 4
	}
	if e.Dropout != nil {
		v |= ExtSpecDropout
	}
	return v | biasSpec(p)
}

// ExtSpecDropout is ExtSpec's dropout bit (ext.glsl's EXT_ON_DROPOUT).
const ExtSpecDropout uint32 = 8

// ExtSpecPlainBounds is ExtSpecFor's bit (ext.glsl's
// EXT_ON_PLAIN_BOUNDS) for a forward whose rows see the keys its causal
// mask (or none) gives them (PlainBounds): the extended kernel then takes
// the plain kernel's bounds from its push constants instead of reading
// its own from the Ext buffer. Measured on an NVIDIA H200 (flash_cm,
// fp16, N 16384, causal; bench/NOTES.md): the forward with a softcap or
// ALiBi 5–6% faster at d 128 (its registers no longer spill), ALiBi 3.5%
// at d 64; the backward kernels 0–4.5% slower with it, so they keep
// their own bounds.
const ExtSpecPlainBounds uint32 = 256

// PlainBounds reports whether every row of problem p (with options) sees
// the keys p.Mask gives it, as a plain problem's rows do: no window but
// the causal one (aligned as p.Mask is), no key counts, no packed
// sequences, no KV cache — only score terms, dropout or a bias.
func PlainBounds(p *spec.Problem) bool {
	e := p.Ext
	if e == nil || p.KV != nil || e.SeqUsedK != nil || e.CuQ != nil || e.Left >= 0 {
		return false
	}
	if p.Causal() {
		return e.Right == 0 && e.BottomRight == (p.Mask == spec.MaskCausalBottomRight)
	}
	return e.Right < 0
}

// DropSharedBytes is the shared memory of a dropout kernel's keep bits
// (ext.glsl's sDrop) for a tile of br query rows and bc keys: a bit per
// element, rows padded to 32-bit words. Without dropout sDrop is one word
// (DropPlaceholder), which the kernels' *SharedBytes count.
func DropSharedBytes(br, bc int) int { return 4 * br * ((bc + 31) / 32) }

// DropPlaceholder is sDrop's size without dropout.
const DropPlaceholder = 4

// ExtKernels are the kernels with an extended variant (they declare
// SpecExt and bind the Ext buffer last).
var ExtKernels = []string{KernelFlash, KernelBwdPre, KernelBwdDKDV, KernelBwdDQ, KernelFlashCM, KernelBwdCMDKDV, KernelBwdCMDQ}

// Flags of word 2 of the Ext buffer (ext.glsl's EXT_*).
const (
	ExtBottomRight uint32 = 1 << iota
	ExtSoftcap
	ExtALiBi
	ExtALiBiBatch
	ExtSeqUsed
	ExtVarlen
	ExtDropout
)

// extHeader is the number of words before the Ext buffer's arrays.
const extHeader = 29

// ExtPlan is what a plan adds to the Ext buffer beyond its problem: how a
// folding dBias's dS scratch is used (DS), and the head groups of its
// kernels' grid orders (ext.glsl grid_tile: the workgroups of G
// consecutive heads of one tile run one after another; 0 or 1 runs a
// head's tiles first): HeadGroup for those that take query tiles (word
// 27: flash_cm, bwd_cm_dq), KVHeadGroup for bwd_cm_dkdv (word 28).
type ExtPlan struct {
	DS                     DSChunks
	HeadGroup, KVHeadGroup int
}

// ExtWords is the Ext buffer of p (ext.glsl's layout): the window (a
// side wider than Nq + Nk stored as −1, unbounded), the flags, the
// softcap, the packed query rows Tq, the dropout's seed, offset,
// threshold and first sequence, the bias's, dS target's, summary's and
// dBias's strides and what the plan adds (ep: how a folding dBias's dS
// scratch is used, its kernels' head groups), then SeqUsedK, the ALiBi
// slopes and the packed sequences' offsets (CuQ then CuK). A plain
// problem (p.Ext nil) gets the header of an unbounded window with no
// flags.
func ExtWords(p *spec.Problem, ep ExtPlan) []uint32 {
	w := make([]uint32, extHeader)
	side := func(x int) uint32 {
		if x < 0 || x >= p.Nq+p.Nk {
			return math.MaxUint32 // int32 −1
		}
		return uint32(x)
	}
	e := p.Ext
	if e == nil {
		w[0], w[1] = side(-1), side(-1)
		return w
	}
	w[0], w[1] = side(e.Left), side(e.Right)
	if e.BottomRight {
		w[2] |= ExtBottomRight
	}
	if e.Softcap > 0 {
		w[2] |= ExtSoftcap
		w[3] = math.Float32bits(e.Softcap)
	}
	if e.SeqUsedK != nil {
		w[2] |= ExtSeqUsed
		w[4] = uint32(len(w))
		for _, n := range e.SeqUsedK {
			w = append(w, uint32(n))
		}
	}
	if e.Slopes != nil {
		w[2] |= ExtALiBi
		if e.SlopesPerBatch {
			w[2] |= ExtALiBiBatch
		}
		w[5] = uint32(len(w))
		for _, s := range e.Slopes {
			w = append(w, math.Float32bits(s))
		}
	}
	if d := e.Dropout; d != nil {
		w[2] |= ExtDropout
		w[8], w[9], w[10], w[11], w[12] = uint32(d.Seed), uint32(d.Seed>>32), d.Offset, d.Threshold, uint32(d.Batch0)
	}
	biasWords(w, p, ep.DS)
	w[27], w[28] = uint32(ep.HeadGroup), uint32(ep.KVHeadGroup)
	if e.CuQ != nil {
		w[2] |= ExtVarlen
		w[6] = uint32(len(w))
		for _, c := range append(append([]int32(nil), e.CuQ...), e.CuK...) {
			w = append(w, uint32(c))
		}
		w[7] = uint32(p.TotalQ())
	}
	return w
}

// ExtBytes is ExtWords as the little-endian bytes the buffer holds.
func ExtBytes(p *spec.Problem, ep ExtPlan) []byte { return wordBytes(ExtWords(p, ep)) }

// wordBytes is w as little-endian bytes, as a storage buffer holds it.
func wordBytes(w []uint32) []byte {
	b := make([]byte, 4*len(w))
	for i, x := range w {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}
