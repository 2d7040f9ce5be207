package shaders

import (
	"encoding/binary"
	"math"
)

// Params mirrors the push-constant block of attn_params.glsl field for field
// (params_test.go checks it against every compiled module). Strides are in
// elements; the feature dimension has stride 1.
type Params struct {
	B, Hq, Hkv, Nq, Nk uint32
	QB, QS, QH         uint32  // Q (and dQ) strides: batch, sequence, head
	KB, KS, KH         uint32  // K (and dK)
	VB, VS, VH         uint32  // V (and dV)
	OB, OS, OH         uint32  // O and dO
	Scale              float32 // softmax scale (resolved, never 0)
	Mask               uint32  // 0 none, 1 causal top-left, 2 causal bottom-right
	Group              uint32  // Hq / Hkv
}

// ParamsSize is the size in bytes of the push-constant block.
const ParamsSize = 80

// Bytes encodes p as the kernels' push constants (little-endian, std430
// offsets: every field is 4 bytes, in declaration order).
func (p *Params) Bytes() []byte {
	f := [20]uint32{
		p.B, p.Hq, p.Hkv, p.Nq, p.Nk,
		p.QB, p.QS, p.QH,
		p.KB, p.KS, p.KH,
		p.VB, p.VS, p.VH,
		p.OB, p.OS, p.OH,
		math.Float32bits(p.Scale), p.Mask, p.Group,
	}
	b := make([]byte, ParamsSize)
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}
