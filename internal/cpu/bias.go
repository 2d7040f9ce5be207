package cpu

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/flashvk/flashvk/internal/spec"
)

// Bias holds the buffers of a problem's additive bias (spec.Ext.Bias):
// Bias the bias, element (b, h, i, j) at spec.Bias.At(b, h, i, j), and,
// for a backward whose spec.Bias has Grad, DBias the gradient, element
// (b, h, i, j) at spec.Bias.GradAt(b, h, i, j) (strides of 0 fold its
// elements, whose gradients are then summed). Rows and keys count within
// their sequence, also for packed problems. The zero Bias is a problem
// without a bias.
type Bias struct {
	Bias, DBias []float32
}

// checkBias checks x against p: the bias buffer is set exactly when p has
// a bias, and holds every element its strides address; with grad (a
// backward) the dBias buffer is set exactly when the bias has Grad, holds
// its elements, and its strides address each element once apart from
// their folds (strides of 0). The forward does not read x.DBias.
func checkBias(p *spec.Problem, x Bias, grad bool) error {
	if !biased(p) {
		if x.Bias != nil || (grad && x.DBias != nil) {
			return errors.New("cpu: a bias buffer for a problem without spec.Ext.Bias")
		}
		return nil
	}
	sb := p.Ext.Bias
	if x.Bias == nil {
		return errors.New("cpu: spec.Ext.Bias without a bias buffer (ForwardBias, BackwardBias)")
	}
	if err := checkBiasLen("bias", x.Bias, p, sb.Batch, sb.Head, sb.Row); err != nil {
		return err
	}
	if !grad {
		return nil
	}
	switch {
	case !sb.Grad && x.DBias != nil:
		return errors.New("cpu: a dbias buffer for a bias without Grad")
	case !sb.Grad:
		return nil
	case x.DBias == nil:
		return errors.New("cpu: a bias with Grad without a dbias buffer")
	}
	if err := checkBiasLen("dbias", x.DBias, p, sb.GradBatch, sb.GradHead, sb.GradRow); err != nil {
		return err
	}
	// Nested strides (each covering the span of the smaller ones): no
	// two elements of the folded view share an offset.
	dims := [][2]int{{p.Nk, 1}, {p.B, sb.GradBatch}, {p.Hq, sb.GradHead}, {p.Nq, sb.GradRow}}
	dims = slices.DeleteFunc(dims, func(d [2]int) bool { return d[0] <= 1 || d[1] == 0 })
	slices.SortStableFunc(dims, func(a, b [2]int) int { return a[1] - b[1] })
	span := 1
	for _, d := range dims {
		if d[1] < span {
			return fmt.Errorf("cpu: dbias strides %d, %d, %d make elements overlap", sb.GradBatch, sb.GradHead, sb.GradRow)
		}
		span += (d[0] - 1) * d[1]
	}
	return nil
}

// checkBiasLen reports an error unless buf holds element (b, h, i, j) at
// b·sb + h·sh + i·si + j for every b < B, h < Hq, i < Nq, j < Nk (the
// strides are not negative: spec.Problem.CheckExt).
func checkBiasLen(name string, buf []float32, p *spec.Problem, sb, sh, si int) error {
	if p.B == 0 || p.Hq == 0 || p.Nq == 0 || p.Nk == 0 {
		return nil
	}
	last, ok := uint64(p.Nk-1), true
	for _, d := range [...][2]int{{p.B, sb}, {p.Hq, sh}, {p.Nq, si}} {
		hi, lo := bits.Mul64(uint64(d[0]-1), uint64(d[1]))
		ok = ok && hi == 0 && lo <= 1<<61
		last += lo
	}
	if !ok || last >= uint64(len(buf)) {
		return fmt.Errorf("cpu: %s has %d elements, its strides %d, %d, %d reach beyond (B=%d Hq=%d Nq=%d Nk=%d)",
			name, len(buf), sb, sh, si, p.B, p.Hq, p.Nq, p.Nk)
	}
	return nil
}

// biasRows is the bias of one (sequence, query head): the element of row
// i and key j at buf[off + i·row + j]. A nil buf is no bias.
type biasRows struct {
	buf      []float32
	off, row int
}

// biasOf returns the bias of sequence b, query head h (no bias: the zero
// biasRows).
func biasOf(p *spec.Problem, buf []float32, b, h int) biasRows {
	if buf == nil {
		return biasRows{}
	}
	x := p.Ext.Bias
	return biasRows{buf, x.At(b, h, 0, 0), x.Row}
}

// at returns the n elements of row i from key j on, nil without a bias
// (never nil with one, even for n = 0: scoresBias tells the two apart).
func (x biasRows) at(i, j, n int) []float32 {
	if x.buf == nil {
		return nil
	}
	o := x.off + i*x.row + j
	return x.buf[o : o+n : o+n]
}

// col sets dst[r] to the element of row i+r and key j (a transposed
// tile's key row), r < len(dst).
func (x biasRows) col(dst []float32, i, j int) {
	if len(dst) == 0 {
		return
	}
	o := x.off + i*x.row + j
	if x.row == 0 {
		v := x.buf[o]
		for r := range dst {
			dst[r] = v
		}
		return
	}
	_ = x.buf[o+(len(dst)-1)*x.row]
	for r := range dst {
		dst[r] = x.buf[o+r*x.row]
	}
}

// hides reports whether the bias hides (−Inf) every pair that rows i0 …
// i0+nr−1 of sequence b see among keys j0 … j0+nc−1 (KeyRange): such a
// tile is skipped, as it adds nothing (P = 0, dS = 0). False without a
// bias. It stops at the first element that is not −Inf, so a tile the
// bias does not mask costs a compare or two; a bias broadcast over the
// rows (Row 0) has one row to scan, over the keys any row of the tile
// sees (a superset of each row's).
func (x biasRows) hides(p *spec.Problem, b, i0, nr, j0, nc int) bool {
	if x.buf == nil {
		return false
	}
	if x.row == 0 {
		lo, _ := rowKeys(p, b, i0, j0, nc)
		_, hi := rowKeys(p, b, i0+nr-1, j0, nc)
		return hi <= lo || allNegInf(x.at(0, j0+lo, hi-lo))
	}
	for i := range nr {
		lo, hi := rowKeys(p, b, i0+i, j0, nc)
		if !allNegInf(x.at(i0+i, j0+lo, hi-lo)) {
			return false
		}
	}
	return true
}

// allNegInf reports whether every element of r is −Inf.
func allNegInf(r []float32) bool {
	for _, v := range r {
		if v != negInf {
			return false
		}
	}
	return true
}

// dbRows addresses the float32 rows the dQ pass adds dS to (dBias, or a
// fold's scratch): row (b, h, i), Nk long, at buf[off + b·sb + h·sh +
// i·si]. A nil buf is no dBias.
type dbRows struct {
	buf            []float32
	off            int
	sb, sh, si, nk int
}

// row returns row (b, h, i).
func (d dbRows) row(b, h, i int) []float32 {
	o := d.off + b*d.sb + h*d.sh + i*d.si
	return d.buf[o : o+d.nk : o+d.nk]
}

// dbOutput returns the rows of p's dBias in buf (nil: none).
func dbOutput(p *spec.Problem, buf []float32) dbRows {
	if buf == nil {
		return dbRows{}
	}
	x := p.Ext.Bias
	return dbRows{buf: buf, sb: x.GradBatch, sh: x.GradHead, si: x.GradRow, nk: p.Nk}
}

// clearDBias zeroes every element of the dBias view (each distinct row
// once: a folded dimension counts 1), in parallel over its batches and
// heads, before the dQ pass adds into it.
func clearDBias(ctx context.Context, workers int, p *spec.Problem, d dbRows) error {
	nb, nh, ni := p.B, p.Hq, p.Nq
	if d.sb == 0 {
		nb = 1
	}
	if d.sh == 0 {
		nh = 1
	}
	if d.si == 0 {
		ni = 1
	}
	if nb == 0 || nh == 0 || ni == 0 || d.nk == 0 {
		return ctx.Err()
	}
	return parallel(ctx, workers, nb*nh, func() struct{} { return struct{}{} }, func(_ struct{}, it int) {
		for i := range ni {
			clear(d.row(it/nh, it%nh, i))
		}
	})
}

// Folding dBias (spec.Bias.GradFolds: several (b, h, i) add into one
// element). The dQ items that add into the same rows of dBias (the same
// block: sequence, head and query tile, each taken as 0 where its
// dimension folds) form a group, listed in item order; a group is cut
// into at most foldChunks contiguous chunks, and a chunk is one work unit
// that runs its items in order. Chunk 0 adds into dBias itself, chunk c ≥
// 1 into a scratch block of its own, which a last pass adds into dBias in
// chunk order. Every sum is thus taken in an order fixed by the problem
// and the tiles, whatever the workers or their scheduling. The chunk
// count is the smallest that gives foldUnits units (at most each group's
// item count), bounded so that the scratch stays within foldScratch
// floats.
const (
	foldUnits   = 64
	foldScratch = 1 << 24
)

// foldPlan is the dQ pass of a problem whose dBias folds.
type foldPlan struct {
	units   []foldUnit
	groups  []foldGroup
	rows    int       // dBias rows per block: Br, or 1 when the query rows fold
	scratch []float32 // the chunks' blocks (rows × Nk each) past chunk 0
	nk, nq  int
}

// foldGroup is one block of dBias: sequence b, head h and first row i0
// (0 for a folded dimension, whose stride of 0 makes any value address
// the same element), added to by chunks units, chunk c ≥ 1 in scratch
// block slot0 + c − 1.
type foldGroup struct {
	b, h, i0      int
	chunks, slot0 int
}

// foldUnit is a chunk of a group: its dQ items, run in order.
type foldUnit struct {
	group, chunk int
	items        []int
}

// newFoldPlan plans the dQ pass over the items of tiles (query tiles of
// br rows) for p, whose dBias folds.
func newFoldPlan(p *spec.Problem, tiles *tiling, br int) *foldPlan {
	x := p.Ext.Bias
	fb, fh, fr := x.GradBatch == 0, x.GradHead == 0, x.GradRow == 0
	kb, kh, kt := p.B, p.Hq, (p.Nq+br-1)/br
	f := &foldPlan{rows: br, nk: p.Nk, nq: p.Nq}
	if fb {
		kb = 1
	}
	if fh {
		kh = 1
	}
	if fr {
		kt, f.rows = 1, 1
	}
	lists := make([][]int, kb*kh*kt)
	for it := range tiles.items() {
		b, h, r0, _ := tiles.at(it)
		t := r0 / br
		if fb {
			b = 0
		}
		if fh {
			h = 0
		}
		if fr {
			t = 0
		}
		key := (b*kh+h)*kt + t
		lists[key] = append(lists[key], it)
	}
	ng, most := 0, 0
	for _, l := range lists {
		if len(l) > 0 {
			ng++
			most = max(most, len(l))
		}
	}
	if ng == 0 {
		return f
	}
	chunks := min(most, (foldUnits+ng-1)/ng)
	if block := ng * f.rows * f.nk; block > 0 {
		chunks = min(chunks, 1+foldScratch/block)
	}
	chunks = max(chunks, 1)
	slots := 0
	for key, l := range lists {
		if len(l) == 0 {
			continue
		}
		c := min(chunks, len(l))
		g := foldGroup{b: key / (kh * kt), h: key / kt % kh, i0: key % kt * br, chunks: c, slot0: slots}
		if fr {
			g.i0 = 0
		}
		slots += c - 1
		for u := range c {
			f.units = append(f.units, foldUnit{group: len(f.groups), chunk: u, items: l[u*len(l)/c : (u+1)*len(l)/c]})
		}
		f.groups = append(f.groups, g)
	}
	f.scratch = make([]float32, slots*f.rows*f.nk)
	return f
}

// target returns the rows unit u adds dS into: dBias itself for chunk 0,
// else the chunk's scratch block (row i of the group's block at row
// i − i0 of the slot, or its only row when the rows fold).
func (f *foldPlan) target(u *foldUnit, out dbRows) dbRows {
	if u.chunk == 0 {
		return out
	}
	g := &f.groups[u.group]
	d := dbRows{buf: f.scratch, off: (g.slot0 + u.chunk - 1) * f.rows * f.nk, nk: f.nk}
	if f.rows > 1 {
		d.off -= g.i0 * f.nk
		d.si = f.nk
	}
	return d
}

// reduce adds the scratch blocks of chunks 1, 2, … of every group into
// dBias, in that order, in parallel over the groups.
func (f *foldPlan) reduce(ctx context.Context, workers int, out dbRows) error {
	return parallel(ctx, workers, len(f.groups), func() struct{} { return struct{}{} }, func(_ struct{}, gi int) {
		g := &f.groups[gi]
		for r := range f.rows {
			i := g.i0 + r
			if i >= f.nq {
				break
			}
			dst := out.row(g.b, g.h, i)
			for c := 1; c < g.chunks; c++ {
				o := ((g.slot0+c-1)*f.rows + r) * f.nk
				addRow(dst, f.scratch[o:o+f.nk])
			}
		}
	})
}
