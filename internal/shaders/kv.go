package shaders

import (
	"encoding/binary"
	"math"
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

// KVKernels lists the KV-cache kernels.
var KVKernels = []string{KernelDecode, KernelDecodeCombine, KernelKVAppend}

func init() {
	kernelBindings[KernelDecode] = 7
	kernelBindings[KernelDecodeCombine] = 3
	kernelBindings[KernelKVAppend] = 5
	kernelSpecIDs[KernelDecode] = append(append([]uint32(nil), sharedSpecIDs...), SpecKVec)
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
