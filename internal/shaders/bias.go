package shaders

import "github.com/flashvk/flashvk/internal/spec"

// The bias kernels (spec.Bias; ext.glsl documents the bias): bias_summary
// writes the bias's per-block summary that the attention kernels read to
// skip the tiles it hides (bias_next_key_tile, bias_next_query_tile), and
// bias_reduce folds the dQ kernels' dS into a dBias that a broadcast sums
// over. Both are built
// like Kernels (f32, f16, bf16: the storage type is the bias's when it is
// not float32; SPIR-V 1.3), bind the Ext buffer at 0 and read the
// attention kernels' push constants (Params).
const (
	KernelBiasSummary = "bias_summary"
	KernelBiasReduce  = "bias_reduce"
)

// BiasKernels lists the bias kernels.
var BiasKernels = []string{KernelBiasSummary, KernelBiasReduce}

// BiasWG is the bias kernels' workgroup size (a multiple of 32: bias_summary
// has a thread per key block of its word; at most 128, Vulkan's minimum
// maxComputeWorkGroupInvocations).
const BiasWG = 128

func init() {
	kernelBindings[KernelBiasSummary] = 3
	kernelBindings[KernelBiasReduce] = 3
	kernelSpecIDs[KernelBiasSummary] = append(append([]uint32(nil), sharedSpecIDs...), SpecExt)
	kernelSpecIDs[KernelBiasReduce] = append(append([]uint32(nil), sharedSpecIDs...), SpecExt)
}

// ExtSpec's bias bits (ext.glsl's EXT_ON_BIAS …).
const (
	ExtSpecBias      uint32 = 16  // the score adds the bias; tiles it hides are skipped
	ExtSpecBiasF32   uint32 = 32  // the bias (and dBias) is float32, else the storage type
	ExtSpecDBias     uint32 = 64  // the dQ kernels store dS
	ExtSpecDBiasF32  uint32 = 128 // … as float32 (a folding dBias's scratch, or a float32 dBias)
	extSpecBiasBits         = ExtSpecBias | ExtSpecBiasF32 | ExtSpecDBias | ExtSpecDBiasF32
	extSpecDBiasBits        = ExtSpecDBias | ExtSpecDBiasF32
)

// ExtSpecFor is ExtSpec(p) for kernel: without the bias bits for the
// kernels that do not score (bwd_pre) and without the dBias bits for those
// that do not store dS (all but bwd_dq and bwd_cm_dq), so that a kernel's
// pipeline does not depend on bits it ignores.
func ExtSpecFor(kernel string, p *spec.Problem) uint32 {
	v := ExtSpec(p)
	switch baseKernel(kernel) {
	case KernelBwdPre:
		v &^= extSpecBiasBits
	case KernelBwdDQ, KernelBwdCMDQ, KernelBiasReduce:
	default:
		v &^= extSpecDBiasBits
	}
	return v
}

// biasSpec is ExtSpec's bias bits of p.
func biasSpec(p *spec.Problem) uint32 {
	x := p.Ext.Bias
	if x == nil {
		return 0
	}
	v := ExtSpecBias
	if x.DType == spec.Float32 {
		v |= ExtSpecBiasF32
	}
	if x.Grad {
		v |= ExtSpecDBias
		if x.DType == spec.Float32 || DBiasFolds(p) {
			v |= ExtSpecDBiasF32
		}
	}
	return v
}

// DBiasFolds reports whether p's dBias sums several (b, h, i) per element
// (spec.Bias.GradFolds): the dQ kernels then store dS into a float32
// [B, Hq, Nq, Nk] scratch (DBiasAccStrides) that bias_reduce folds.
func DBiasFolds(p *spec.Problem) bool {
	if p.Ext == nil {
		return false
	}
	x := p.Ext.Bias
	return x != nil && x.Grad && x.GradFolds(p.B, p.Hq, p.Nq)
}

// DBiasAccElems is the number of float32 elements of p's dS scratch
// (B·Hq·Nq·Nk) when its dBias folds.
func DBiasAccElems(p *spec.Problem) int64 {
	return int64(p.B) * int64(p.Hq) * int64(p.Nq) * int64(p.Nk)
}

// BiasSum is the layout of a bias's summary (bias_summary.comp): Words
// words per row block of 16 queries (a bit per block of 16 keys), Rows
// row blocks (1 when the bias is one row for every query), Heads and
// Batches planes (1 where it broadcasts), and the word strides of a
// plane's batch, head and row block (0 where they broadcast).
type BiasSum struct {
	Words, Rows, Heads, Batches        int
	BatchStride, HeadStride, RowStride int
}

// BiasSummary is the summary layout of p's bias (p.Ext.Bias set).
func BiasSummary(p *spec.Problem) BiasSum {
	x := p.Ext.Bias
	s := BiasSum{Words: ceilDiv(ceilDiv(p.Nk, 16), 32), Rows: 1, Heads: 1, Batches: 1}
	if x.Row != 0 {
		s.Rows, s.RowStride = ceilDiv(p.Nq, 16), s.Words
	}
	if x.Head != 0 {
		s.Heads, s.HeadStride = p.Hq, s.Rows*s.Words
	}
	if x.Batch != 0 {
		s.Batches, s.BatchStride = p.B, s.Heads*s.Rows*s.Words
	}
	return s
}

// Len is the summary's size in words.
func (s BiasSum) Len() int { return s.Batches * s.Heads * s.Rows * s.Words }

// Grid is bias_summary's grid: a workgroup per word.
func (s BiasSum) Grid() [3]uint32 {
	return [3]uint32{uint32(s.Words), uint32(s.Rows), uint32(s.Batches * s.Heads)}
}

// BiasReduceGrid is bias_reduce's grid for p: a thread per dBias element
// (BiasWG keys a workgroup, its rows, its batch·head planes).
func BiasReduceGrid(p *spec.Problem) [3]uint32 {
	x := p.Ext.Bias
	rows, planes := 1, 1
	if x.GradRow != 0 {
		rows = p.Nq
	}
	if x.GradHead != 0 {
		planes *= p.Hq
	}
	if x.GradBatch != 0 {
		planes *= p.B
	}
	return [3]uint32{uint32(ceilDiv(p.Nk, BiasWG)), uint32(rows), uint32(planes)}
}

// dsTarget is the strides (batch, head, row) the dQ kernels store dS
// with: the dBias's, or a folding dBias's dense scratch's.
func dsTarget(p *spec.Problem) [3]uint32 {
	x := p.Ext.Bias
	if DBiasFolds(p) {
		return [3]uint32{uint32(p.Hq * p.Nq * p.Nk), uint32(p.Nq * p.Nk), uint32(p.Nk)}
	}
	return [3]uint32{uint32(x.GradBatch), uint32(x.GradHead), uint32(x.GradRow)}
}

// biasWords fills the Ext header's bias words (13 … 24) of p.
func biasWords(w []uint32, p *spec.Problem) {
	x := p.Ext.Bias
	if x == nil {
		return
	}
	s := BiasSummary(p)
	w[13], w[14], w[15] = uint32(x.Batch), uint32(x.Head), uint32(x.Row)
	if x.Grad {
		t := dsTarget(p)
		w[16], w[17], w[18] = t[0], t[1], t[2]
		w[22], w[23], w[24] = uint32(x.GradBatch), uint32(x.GradHead), uint32(x.GradRow)
	}
	w[19], w[20], w[21] = uint32(s.BatchStride), uint32(s.HeadStride), uint32(s.RowStride)
}

// BiasReduceTerms is the number of dS terms each dBias element of p sums
// (bias_reduce): the product of the folded dimensions' sizes.
func BiasReduceTerms(p *spec.Problem) float64 {
	x := p.Ext.Bias
	n := 1.0
	if x.GradBatch == 0 {
		n *= float64(p.B)
	}
	if x.GradHead == 0 {
		n *= float64(p.Hq)
	}
	if x.GradRow == 0 {
		n *= float64(p.Nq)
	}
	return n
}
