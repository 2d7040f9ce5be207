package shaders

import (
	"encoding/binary"
	"math"

	"github.com/flashvk/flashvk/internal/spec"
)

// The KV-cache (decoding) kernels. They share kv_params.glsl's
// push-constant block (KVParams) instead of Params, are built like
// Kernels (f32, f16, bf16; SPIR-V 1.3) and have no addressed variants:
// the cache must fit one binding.
const (
	// KernelDecode is split-KV attention of a few queries per sequence
	// over a (paged) KV cache.
	KernelDecode = "decode"
	// KernelDecodeCombine merges decode's per-split partial results.
	KernelDecodeCombine = "decode_combine"
	// KernelKVAppend copies new K and V rows into the cache.
	KernelKVAppend = "kv_append"
)

// SpecKVec is decode's specialization constant 7: 1 reads cache K rows
// in 16-byte units (D and K's strides multiples of 16 bytes), 0 element
// by element.
const SpecKVec uint32 = 7

// decode's variant is specialization constant 8 (SpecExt), set to
// ExtSpec of the problem: 0 builds the plain kernel (it never reads the
// META buffer's options header), else bit 0 the window (per row
// key_first … key_limit, the diagonal placed by Ext.BottomRight) and bits
// 1 and 2 the softcap and ALiBi terms of the score (a KV-cache problem
// has no dropout: bit 3 is never set).

// KVKernels lists the KV-cache kernels.
var KVKernels = []string{KernelDecode, KernelDecodeCombine, KernelKVAppend}

func init() {
	kernelBindings[KernelDecode] = 7
	kernelBindings[KernelDecodeCombine] = 3
	kernelBindings[KernelKVAppend] = 5
	kernelSpecIDs[KernelDecode] = append(append([]uint32(nil), sharedSpecIDs...), SpecKVec, SpecExt)
	kernelSpecIDs[KernelDecodeCombine] = sharedSpecIDs
	kernelSpecIDs[KernelKVAppend] = sharedSpecIDs
}

// KVParams mirrors the push-constant block of kv_params.glsl field for
// field (params_test.go checks it against the KV modules). Strides are in
// elements; the cache strides' batch term is the page stride.
type KVParams struct {
	B, Hq, Hkv, Nq, Group uint32
	QB, QS, QH            uint32
	KB, KS, KH            uint32
	VB, VS, VH            uint32
	OB, OS, OH            uint32
	Scale                 float32
	Mask                  uint32
	PageSize, MaxPages    uint32
	NewRows               uint32
	NKB, NKS, NKH         uint32
	NVB, NVS, NVH         uint32
	SplitKeys, Splits     uint32
}

// KVParamsSize is the size in bytes of the KV push-constant block.
const KVParamsSize = 120

// Bytes encodes p as the KV kernels' push constants (little-endian, every
// field 4 bytes, in declaration order).
func (p *KVParams) Bytes() []byte {
	f := [KVParamsSize / 4]uint32{
		p.B, p.Hq, p.Hkv, p.Nq, p.Group,
		p.QB, p.QS, p.QH, p.KB, p.KS, p.KH, p.VB, p.VS, p.VH, p.OB, p.OS, p.OH,
		math.Float32bits(p.Scale), p.Mask, p.PageSize, p.MaxPages, p.NewRows,
		p.NKB, p.NKS, p.NKH, p.NVB, p.NVS, p.NVH, p.SplitKeys, p.Splits,
	}
	b := make([]byte, KVParamsSize)
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// DecodeSharedBytes is decode's shared memory for br rows per workgroup,
// wg invocations in subgroups of sg, head dims d and dv (decode.comp).
func DecodeSharedBytes(wg, sg, br, d, dv int) int {
	return 4 * (br*4*ceilDiv(d, 4) + wg*br + br*(dv+2))
}

// DecodeLoopIterations estimates the loop iterations one decode
// invocation runs (lavapipe's budget, see LoopIterations) for a split of
// keys cache rows.
func DecodeLoopIterations(wg, sg, br, d, dv, keys int) int {
	u := func(n int) int { return ceilDiv(max(n, 0), loopUnroll) }
	blocks := ceilDiv(keys, max(wg, 1))
	perBlock := 1 + (1 + u(d)) + (1 + sg)
	return 1 + ceilDiv(br*d, max(wg, 1)*loopUnroll) + blocks*perBlock + wg/max(sg, 1)
}

// KVMetaWords is the META buffer of the KV-cache kernels for the KV
// problem p (kv_params.glsl's layout, the one definition of it):
//   - words 0 … B−1: each sequence's cached length before the append
//     (spec.KV.SeqLens);
//   - words B … B+B·MaxPages−1: the page table [B, MaxPages];
//   - with p.Ext only, the options header at word KVMetaExt(p) = B +
//     B·MaxPages: word 0 left, 1 right (the window, int32; −1
//     unbounded, also for a side wider than Nq + Nk, so that the
//     kernel's int32 arithmetic cannot overflow; causal: right 0), word
//     2 the flags ExtBottomRight, ExtSoftcap, ExtALiBi and ExtALiBiBatch
//     (ext.glsl's values), word 3 the softcap c (float32 bits, with
//     ExtSoftcap), then from word 4 the ALiBi slopes (float32, [Hq] or
//     with ExtALiBiBatch [B, Hq]).
//
// A plain problem (p.Ext nil) has no header: its kernel (ExtSpec 0)
// reads none.
func KVMetaWords(p *spec.Problem) []uint32 {
	kv := p.KV
	w := make([]uint32, 0, KVMetaLen(p))
	for _, n := range kv.SeqLens {
		w = append(w, uint32(n))
	}
	for _, pg := range kv.Table {
		w = append(w, uint32(pg))
	}
	e := p.Ext
	if e == nil {
		return w
	}
	side := func(x int) uint32 {
		if x < 0 || x >= p.Nq+p.Nk {
			return math.MaxUint32 // int32 −1
		}
		return uint32(x)
	}
	var flags, softcap uint32
	if e.BottomRight {
		flags |= ExtBottomRight
	}
	if e.Softcap > 0 {
		flags |= ExtSoftcap
		softcap = math.Float32bits(e.Softcap)
	}
	if e.Slopes != nil {
		flags |= ExtALiBi
		if e.SlopesPerBatch {
			flags |= ExtALiBiBatch
		}
	}
	w = append(w, side(e.Left), side(e.Right), flags, softcap)
	for _, s := range e.Slopes {
		w = append(w, math.Float32bits(s))
	}
	return w
}

// KVMetaExt is the word at which KVMetaWords' options header starts.
func KVMetaExt(p *spec.Problem) int { return p.B + len(p.KV.Table) }

// kvMetaHeader is the number of words of the options header before the
// slopes.
const kvMetaHeader = 4

// KVMetaLen is the number of words of KVMetaWords(p).
func KVMetaLen(p *spec.Problem) int {
	n := KVMetaExt(p)
	if p.Ext != nil {
		n += kvMetaHeader + len(p.Ext.Slopes)
	}
	return n
}

// KVMetaBytes is KVMetaWords as the little-endian bytes the buffer holds.
func KVMetaBytes(p *spec.Problem) []byte { return wordBytes(KVMetaWords(p)) }
