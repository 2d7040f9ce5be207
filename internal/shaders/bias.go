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
	kernelBindings[KernelBiasReduce] = 4
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
// pipeline does not depend on bits it ignores; for the forward kernels
// (flash, flash_cm) with ExtSpecPlainBounds where PlainBounds(p).
func ExtSpecFor(kernel string, p *spec.Problem) uint32 {
	v := ExtSpec(p)
	k := BaseKernel(kernel)
	switch k {
	case KernelBwdPre:
		v &^= extSpecBiasBits
	case KernelBwdDQ, KernelBwdCMDQ, KernelBiasReduce:
	default:
		v &^= extSpecDBiasBits
	}
	if (k == KernelFlash || k == KernelFlashCM) && PlainBounds(p) {
		v |= ExtSpecPlainBounds
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
// scratch (DSChunks) that bias_reduce folds.
func DBiasFolds(p *spec.Problem) bool {
	if p.Ext == nil {
		return false
	}
	x := p.Ext.Bias
	return x != nil && x.Grad && x.GradFolds(p.B, p.Hq, p.Nq)
}

// DSChunks is how a folding dBias's dS scratch is used: the (b, h) planes
// run in Chunks chunks of Planes consecutive planes in their order —
// batch-major, q = b·Hq + h, or head-major, q = h·B + b, when dBias keeps
// the heads and folds the batch, so that each of its elements' planes are
// consecutive (one chunk holds them all where it holds B planes). Planes
// is a multiple of the inner dimension (Hq batch-major, B head-major) or
// a divisor of it, so that a chunk is a box of the dQ kernels' grid
// (tiles, Hq, B). The scratch holds one chunk, [Planes, Nq, Nk] float32
// (plane q at q mod Planes): a dQ launch per chunk stores into it, and
// bias_reduce's part for that chunk adds it to dBias (bias_reduce.comp).
type DSChunks struct {
	Planes, Chunks int
	HeadMajor      bool
}

// DSChunking is the chunking of p's dS scratch (DBiasFolds(p)) into
// chunks of at most maxBytes, or of one plane where one is larger.
func DSChunking(p *spec.Problem, maxBytes int64) DSChunks {
	x := p.Ext.Bias
	c := DSChunks{HeadMajor: x.GradBatch == 0 && x.GradHead != 0 && p.B > 1}
	inner := c.inner(p)
	all := p.B * p.Hq
	n := int(min(max(maxBytes/DSPlaneBytes(p), 1), int64(all)))
	switch {
	case n >= inner:
		n -= n % inner
	default:
		for inner%n != 0 {
			n--
		}
	}
	c.Planes, c.Chunks = n, ceilDiv(all, n)
	return c
}

// inner is the size of the planes' inner dimension: Hq batch-major, B
// head-major.
func (c DSChunks) inner(p *spec.Problem) int {
	if c.HeadMajor {
		return p.B
	}
	return p.Hq
}

// DSPlaneBytes is the bytes of one plane of p's dS scratch (Nq·Nk float32).
func DSPlaneBytes(p *spec.Problem) int64 { return 4 * int64(p.Nq) * int64(p.Nk) }

// Bytes is the scratch's size.
func (c DSChunks) Bytes(p *spec.Problem) int64 { return int64(c.Planes) * DSPlaneBytes(p) }

// DQBox is the part of a dQ kernel's grid (x whole: tiles of queries; y
// heads, z batches) that chunk k covers: its first workgroup and counts.
func (c DSChunks) DQBox(p *spec.Problem, k int, tiles uint32) (base, n [3]uint32) {
	inner, outer := c.inner(p), p.B*p.Hq/c.inner(p)
	q0 := k * c.Planes
	o0, i0 := q0/inner, q0%inner
	var bo, bi, no, ni int // (outer, inner) first and counts
	if c.Planes >= inner {
		bo, bi, no, ni = o0, 0, min(c.Planes/inner, outer-o0), inner
	} else {
		bo, bi, no, ni = o0, i0, 1, c.Planes
	}
	if c.HeadMajor { // outer heads (y), inner batches (z)
		return [3]uint32{0, uint32(bo), uint32(bi)}, [3]uint32{tiles, uint32(no), uint32(ni)}
	}
	return [3]uint32{0, uint32(bi), uint32(bo)}, [3]uint32{tiles, uint32(ni), uint32(no)}
}

// kept is the dBias plane (bias_reduce's z: batch·heads + head of the
// dimensions dBias keeps) that plane q of the chunks' order folds into.
func (c DSChunks) kept(p *spec.Problem, q int) int {
	b, h := q/p.Hq, q%p.Hq
	if c.HeadMajor {
		b, h = q%p.B, q/p.B
	}
	x := p.Ext.Bias
	z := 0
	if x.GradBatch != 0 {
		z = b
	}
	if x.GradHead != 0 {
		z = z*p.Hq + h
	}
	return z
}

// ReduceBox is chunk k's part of bias_reduce's grid: its key tiles at x =
// k·T … (T = BiasReduceGrid(p)[0]), every row, and the dBias planes its
// planes fold into (consecutive: the kept plane does not decrease along
// the chunks' order).
func (c DSChunks) ReduceBox(p *spec.Problem, k int) (base, n [3]uint32) {
	g := BiasReduceGrid(p)
	q0, q1 := k*c.Planes, min((k+1)*c.Planes, p.B*p.Hq)
	z0, z1 := c.kept(p, q0), c.kept(p, q1-1)
	return [3]uint32{uint32(k) * g[0], 0, uint32(z0)}, [3]uint32{g[0], g[1], uint32(z1 - z0 + 1)}
}

// Spans reports whether some dBias element's planes lie in more than one
// chunk (its partial sum then waits between them in a float32 buffer).
func (c DSChunks) Spans(p *spec.Problem) bool {
	first := map[int]int{} // kept plane → chunk of its first plane
	for q := range p.B * p.Hq {
		z := c.kept(p, q)
		if k, ok := first[z]; !ok {
			first[z] = q / c.Planes
		} else if k != q/c.Planes {
			return true
		}
	}
	return false
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

// BiasReduceGrid is one chunk's part of bias_reduce's grid for p: a
// thread per dBias element (BiasWG keys a workgroup, its rows, its
// batch·head planes). Chunk k's part starts at x = k·BiasReduceGrid(p)[0].
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

// biasWords fills the Ext header's bias words (13 … 26) of p, whose dS
// scratch, when its dBias folds, is used as ds says.
func biasWords(w []uint32, p *spec.Problem, ds DSChunks) {
	x := p.Ext.Bias
	if x == nil {
		return
	}
	s := BiasSummary(p)
	w[13], w[14], w[15] = uint32(x.Batch), uint32(x.Head), uint32(x.Row)
	if x.Grad {
		// The dS target: dBias, or the scratch's planes (word 16 unused).
		w[16], w[17], w[18] = uint32(x.GradBatch), uint32(x.GradHead), uint32(x.GradRow)
		if DBiasFolds(p) {
			w[16], w[17], w[18], w[25] = 0, uint32(p.Nq*p.Nk), uint32(p.Nk), uint32(ds.Planes)
			if ds.HeadMajor {
				w[26] = 1
			}
		}
		w[22], w[23], w[24] = uint32(x.GradBatch), uint32(x.GradHead), uint32(x.GradRow)
	}
	w[19], w[20], w[21] = uint32(s.BatchStride), uint32(s.HeadStride), uint32(s.RowStride)
}
