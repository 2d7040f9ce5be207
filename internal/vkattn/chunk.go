//go:build cgo

package vkattn

// Chunked submissions: how a call's passes are submitted so that a
// cancelled call (or Close) waits for no more than a bounded piece of GPU
// work.
//
// A call whose context can be cancelled and whose work is expected to
// take longer than its device's ChunkTarget is recorded as several
// submissions (chunks) expected to take about ChunkTarget each: runs of
// its launches' workgroups, parts of the plan's grid recorded with
// vkCmdDispatchBase. The expected time of a run is its arithmetic
// (launchCost: the (query, key) pairs its workgroups compute, exact for
// the mask) over the rate the device has shown for that kernel and
// storage type (rateTable: measured on every submission, from a
// conservative prior per device type). Between chunks the call checks its
// context; a chunk in flight when the context ends is waited for
// (device.SubmitDrain), so that the call returns within about one chunk
// with its buffers free and no work of it left running.
//
// Every workgroup computes the same thing whichever submission runs it
// (the kernels' workgroups are independent and there are no atomics), so
// the results are bitwise those of one submission. A context that cannot
// be cancelled (Done() == nil), work expected within one chunk, or a
// device without vkCmdDispatchBase get one submission of the whole grid.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// ChunkTarget is the expected time of one submission of a cancellable
// call on a device (see chunk.go): what a cancellation or Close waits
// for at most, give or take the rate estimate's error. Each submission
// boundary costs a GPU the tail of its last wave of workgroups (on an
// H200, some 1–3 ms for the long workgroups of a backward at N = 32768):
// 250 ms keeps that near 1%; a CPU device (lavapipe), whose workgroups
// are few and whose calls are slow, takes 100 ms.
func ChunkTarget(info device.Info) time.Duration {
	if info.Type == "cpu" {
		return 100 * time.Millisecond
	}
	return 250 * time.Millisecond
}

// minLearnWall is the shortest submission whose measured rate may lower a
// kernel's rate: shorter ones are dominated by the submission's fixed
// cost, and only raise it.
const minLearnWall = 2 * time.Millisecond

// rateTable holds the arithmetic rate (operations per second, as
// launchCost counts them) each kernel has shown on the device.
type rateTable struct {
	mu    sync.Mutex
	m     map[string]float64
	prior float64
}

// priorRate is a conservative (low) rate for a kernel not yet measured:
// the first chunk sized with it is short rather than long.
func priorRate(info device.Info) float64 {
	switch info.Type {
	case "cpu":
		// lavapipe: about 0.6·10⁹ a core for the fp32 flash forward.
		return 0.25e9 * float64(runtime.NumCPU())
	case "integrated":
		return 1e11
	}
	return 1e12
}

// get returns key's rate and whether it was measured.
func (t *rateTable) get(key string) (float64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.m[key]
	if !ok {
		return t.prior, false
	}
	return r, true
}

// learn records that a submission of work operations of the kernels keys
// took wall: a long submission sets their rate, a short one only raises
// it.
func (t *rateTable) learn(keys []string, work float64, wall time.Duration) {
	if work <= 0 || wall <= 0 {
		return
	}
	s := work / wall.Seconds()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]float64{}
	}
	for _, k := range keys {
		old, ok := t.m[k]
		if !ok {
			old = t.prior
		}
		if wall < minLearnWall {
			t.m[k] = max(s, old)
		} else {
			t.m[k] = s
		}
	}
}

// launchCost models the arithmetic of one launch's workgroups. The grid
// is (tiles, heads, batches); every (head, batch) row of tiles costs the
// same, and row(x0, x1) is the work of tiles x0 … x1−1 of one row.
type launchCost struct {
	key  string // rate key: kernel and storage type
	grid [3]uint32
	row  func(x0, x1 uint32) float64
	full float64 // row(0, grid[0])
}

// groups is the number of workgroups of the launch.
func (c *launchCost) groups() float64 {
	return float64(c.grid[0]) * float64(c.grid[1]) * float64(c.grid[2])
}

// total is the work of the whole launch.
func (c *launchCost) total() float64 { return c.full * float64(c.grid[1]) * float64(c.grid[2]) }

// span is the rows (queries or keys) of one tile of a dimension of n
// rows split into g tiles: hint when the grid was made with it.
func span(n int, g uint32, hint int) int {
	if hint > 0 && (n+hint-1)/hint == int(g) {
		return hint
	}
	return (n + int(g) - 1) / int(g)
}

// clampSum is Σ_{i=0}^{t−1} clamp(i+c, 0, n) (n ≥ 1).
func clampSum(t, c, n int64) float64 {
	if t <= 0 {
		return 0
	}
	lo := min(max(1-c, 0), t) // first i with i+c ≥ 1
	hi := min(max(n-c, 0), t) // first i with i+c ≥ n
	k := float64(hi - lo)
	return k*float64(c) + k*float64(hi-1+lo)/2 + float64(t-hi)*float64(n)
}

// maskShift is c of KeyLimit(i) = clamp(i+c, 0, Nk) under a causal mask.
func maskShift(p *spec.Problem) int64 {
	if p.Mask == spec.MaskCausalBottomRight {
		return 1 + int64(p.Nk) - int64(p.Nq)
	}
	return 1
}

// pairsOfRows is Σ KeyLimit(i) over query rows i0 … i1−1: the (query, key)
// pairs the rows compute.
func pairsOfRows(p *spec.Problem, i0, i1 int) float64 {
	if p.Ext != nil {
		return extPairs(p, i0, i1, 0, p.Nk)
	}
	if !p.Causal() {
		return float64(i1-i0) * float64(p.Nk)
	}
	c, n := maskShift(p), int64(p.Nk)
	return clampSum(int64(i1), c, n) - clampSum(int64(i0), c, n)
}

// pairsOfKeys is the number of (query, key) pairs of keys j0 … j1−1: for
// each, the query rows that see it.
func pairsOfKeys(p *spec.Problem, j0, j1 int) float64 {
	if p.Ext != nil {
		return extPairs(p, 0, p.Nq, j0, j1)
	}
	nq := float64(p.Nq)
	if !p.Causal() {
		return float64(j1-j0) * nq
	}
	// Rows i ≥ j−c+1 see key j: Nq − clamp(j+1−c, 0, Nq) of them.
	c, n := 1-maskShift(p), int64(p.Nq)
	return float64(j1-j0)*nq - (clampSum(int64(j1), c, n) - clampSum(int64(j0), c, n))
}

// extPairs is the mean over the batch of the (query, key) pairs of rows
// i0 … i1−1 and keys j0 … j1−1 that p's window and key counts leave
// visible (sequences differ only in their key counts).
func extPairs(p *spec.Problem, i0, i1, j0, j1 int) float64 {
	nb := 1
	if p.Ext.SeqUsedK != nil {
		nb = p.B
	}
	var n float64
	for b := range nb {
		for i := i0; i < i1; i++ {
			lo, hi := p.KeyRange(b, i)
			n += float64(max(min(hi, j1)-max(lo, j0), 0))
		}
	}
	return n / float64(nb)
}

// costOf is the work model of launch l of p (in a plan whose folding
// dBias's scratch holds dsPlanes planes): per (query, key) pair, the
// multiply-adds of the products the kernel computes (2 operations each);
// bwd_pre's is per query row, the bias kernels' one per element they read
// (a workgroup's share of the whole; bias_reduce's part reads its chunk's
// scratch once). An addressed build (shaders.Addressed) has its base
// kernel's model.
func costOf(p *spec.Problem, l *Launch, dsPlanes int) launchCost {
	c := launchCost{key: l.Kernel + "." + l.DType.Short(), grid: l.Grid}
	d, dv := float64(p.D), float64(p.Dv)
	gx := max(l.Grid[0], 1)
	rowsOf := func(x0, x1 uint32, n, hint int) (int, int) {
		s := span(n, gx, hint)
		return min(int(x0)*s, n), min(int(x1)*s, n)
	}
	kernel := shaders.BaseKernel(l.Kernel)
	switch kernel {
	case shaders.KernelBwdPre:
		c.row = func(x0, x1 uint32) float64 {
			i0, i1 := rowsOf(x0, x1, p.Nq, l.BR)
			return 2 * dv * float64(i1-i0)
		}
	case shaders.KernelBiasSummary, shaders.KernelBiasReduce:
		per := float64(p.Nk) * float64(p.Nq) / float64(gx)
		if kernel == shaders.KernelBiasReduce {
			per = float64(dsPlanes) * float64(p.Nq) * float64(p.Nk) / (float64(gx) * float64(max(l.Grid[1], 1)) * float64(max(l.Grid[2], 1)))
		}
		c.row = func(x0, x1 uint32) float64 { return per * float64(x1-x0) }
	case shaders.KernelBwdDKDV, shaders.KernelBwdCMDKDV:
		per := 2 * (2*d + 2*dv) * float64(p.Group()) // S, dP, dV, dK over the group's heads
		c.row = func(x0, x1 uint32) float64 {
			j0, j1 := rowsOf(x0, x1, p.Nk, l.BC)
			return per * pairsOfKeys(p, j0, j1)
		}
	default:
		per := 2 * (d + dv) // S and P·V (and the naive passes)
		switch kernel {
		case shaders.KernelBwdDQ, shaders.KernelBwdCMDQ:
			per = 2 * (2*d + dv) // S, dP, dQ
		}
		hint := l.BR
		if kernel == shaders.KernelNaive {
			hint = 1
		}
		c.row = func(x0, x1 uint32) float64 {
			i0, i1 := rowsOf(x0, x1, p.Nq, hint)
			return per * pairsOfRows(p, i0, i1)
		}
	}
	c.full = c.row(0, l.Grid[0])
	return c
}

// chunkLaunch is a launch of a chunked call with its work model and how
// far its workgroups have been recorded.
type chunkLaunch struct {
	ready   readyLaunch
	cost    launchCost
	barrier bool      // a barrier orders it after the launch before it
	order   [3]int    // the dimensions from the slowest to the fastest
	at      [3]uint32 // first workgroup not yet recorded (x, y, z)
	taken   float64   // the work recorded
	done    bool
	// init, when set, is written into initBuf before the launch's first
	// workgroups (the call's Ext buffer; see recordInit), and the zero
	// buffers are filled with zeros (Launch.Zero).
	init    []byte
	initBuf *device.Buffer
	zero    []*device.Buffer
}

// recordInit records the launch's init write and zero fills, once, and
// the barriers that order them after the compute work before (which may
// still read a buffer filled here) and before the dispatches.
func (cl *chunkLaunch) recordInit(r *device.Recorder) {
	if cl.init == nil && cl.zero == nil {
		return
	}
	// The work before may still read the buffers written here: a pass's
	// Ext buffer is the one the pass before it read (the passes of a call
	// share their scratch), and its words differ between passes.
	r.BarrierComputeToTransfer()
	for _, buf := range cl.zero {
		r.Fill(buf, 0)
	}
	for off := 0; off < len(cl.init); off += device.MaxUpdateBytes {
		r.Update(cl.initBuf, int64(off), cl.init[off:min(len(cl.init), off+device.MaxUpdateBytes)])
	}
	r.BarrierTransferToCompute()
	cl.init, cl.zero = nil, nil
}

// Orders of the workgroups of a chunked launch (dimensions from the
// slowest): batches, heads, tiles — the order of one dispatch — on a GPU;
// tiles, batches, heads on a CPU device, whose chunks then take tiles
// across every head and batch, workgroups of like cost.
var (
	gpuOrder = [3]int{2, 1, 0}
	cpuOrder = [3]int{0, 2, 1}
)

// piece is a run of a launch's workgroups: base … base+n−1.
type piece struct {
	base, n [3]uint32
	work    float64
}

// box is the work of the workgroups lo … hi−1 (in each dimension).
func (c *launchCost) box(lo, hi [3]uint32) float64 {
	return c.row(lo[0], hi[0]) * float64(hi[1]-lo[1]) * float64(hi[2]-lo[2])
}

// next is the launch's next run of workgroups, one dispatch, in its order:
// a range of the slowest dimension (the others whole), else of the next
// (within one index of the slowest), else of the fastest — as much as
// budget holds (at least one workgroup when force; false when nothing
// fits). With even, the rest of that dimension is split in parts of about
// equal work, so that the run ends where the dimension does.
func (cl *chunkLaunch) next(budget float64, force, even bool) (piece, bool) {
	g, c, ord := cl.cost.grid, &cl.cost, cl.order
	// The box of m indices of dimension ord[l] from at: whole in the
	// faster dimensions, one index in the slower.
	bounds := func(l int, m uint32) (lo, hi [3]uint32) {
		lo = cl.at
		for j, d := range ord {
			switch {
			case j < l:
				hi[d] = lo[d] + 1
			case j == l:
				hi[d] = lo[d] + m
			default:
				hi[d] = g[d]
			}
		}
		return lo, hi
	}
	for l := range 3 {
		whole := true // the faster dimensions are whole from at
		for _, d := range ord[l+1:] {
			whole = whole && cl.at[d] == 0
		}
		d := ord[l]
		left := g[d] - cl.at[d]
		if !whole || (l < 2 && c.box(bounds(l, 1)) > budget) {
			continue
		}
		if l == 2 && c.box(bounds(l, 1)) > budget && !force {
			return piece{}, false
		}
		// The most indices within budget, or with even the fewest reaching
		// a part's share of the rest (the work grows with the indices).
		share := budget
		if even {
			rest := c.box(bounds(l, left))
			share = rest / math.Ceil(rest/max(budget, rest/float64(left)))
		}
		m := uint32(sort.Search(int(left), func(i int) bool { return c.box(bounds(l, uint32(i)+1)) > share }))
		if even && m < left && c.box(bounds(l, m)) < share {
			m++ // reach the share rather than fall short of it
		}
		m = min(max(m, 1), left)
		lo, hi := bounds(l, m)
		var n [3]uint32
		for k := range n {
			n[k] = hi[k] - lo[k]
		}
		return piece{lo, n, c.box(lo, hi)}, true
	}
	panic("unreachable")
}

// take records piece pc (the launch's next) into r and moves past it: to
// the workgroup after it in the launch's order.
func (cl *chunkLaunch) take(r *device.Recorder, pc piece) error {
	g, ord := cl.cost.grid, cl.order
	// The piece is a range of one dimension, whole in the faster ones:
	// advance that dimension, carrying into the slower ones.
	l := 2
	for l > 0 && pc.n[ord[l]] == g[ord[l]] && pc.base[ord[l]] == 0 {
		l--
	}
	at := pc.base
	at[ord[l]] += pc.n[ord[l]]
	for ; l > 0 && at[ord[l]] == g[ord[l]]; l-- {
		at[ord[l]], at[ord[l-1]] = 0, at[ord[l-1]]+1
	}
	cl.at = at
	cl.done = at[ord[0]] >= g[ord[0]]
	cl.taken += pc.work
	return cl.ready.dispatch(r, pc.base, pc.n)
}

// minChunkGroups is the fewest workgroups a chunk of a launch holds (when
// the launch has that many left), so that the device's last partial wave
// of each chunk costs little: a few per CPU thread of a CPU device (whose
// driver runs a dispatch's workgroups on one thread per core), and on a
// GPU tens of waves of the largest parts (some hundred workgroups at
// once).
func minChunkGroups(info device.Info) float64 {
	if info.Type == "cpu" {
		return 4 * float64(runtime.NumCPU())
	}
	return 8192
}

// submitPasses records the passes pls of p (with operand buffers bufs and
// scratch from s) and submits them: as one submission, or, for a
// cancellable call expected to take longer than b.chunkTarget, in chunks
// (see above). tainted reports that GPU work of the call may still be
// running (a wait that timed out, or a chunk that did not finish when it
// was drained): its buffers must not be reused.
func (b *Backend) submitPasses(ctx context.Context, s *scratch, p *spec.Problem, pls []*Plan, bufs operandBufs) (tainted bool, err error) {
	cls, err := b.prepareAll(s, p, pls, bufs)
	if err != nil {
		return false, err
	}
	var expected float64
	whole := ctx.Done() == nil || !b.info.DispatchBase
	if ctx.Done() != nil {
		expected, _ = b.expected(cls)
		whole = whole || expected <= b.chunkTarget.Seconds()
	}
	if whole {
		r := b.dev.Record()
		work, keys, err := recordWhole(r, cls)
		if err != nil {
			return false, err
		}
		tainted, err := b.submitChunk(ctx, r, keys, work, expected)
		if err != nil {
			return tainted, fmt.Errorf("vkattn: %w", err)
		}
		return false, nil
	}
	return b.submitChunks(ctx, cls)
}

// prepareAll prepares the launches of the passes pls of p for recording
// (Backend.prepare), each with its work model; the first launch of a pass
// after the first follows a barrier (the backward reads the forward's O
// and LSE).
func (b *Backend) prepareAll(s *scratch, p *spec.Problem, pls []*Plan, bufs operandBufs) ([]chunkLaunch, error) {
	pc := params(p)
	var cls []chunkLaunch
	for i, pl := range pls {
		rls, err := b.prepare(s, pl, attentionPush(pc), bufs)
		if err != nil {
			return nil, err
		}
		first := len(cls)
		for j := range rls {
			cl := chunkLaunch{ready: rls[j], cost: costOf(p, rls[j].l, pl.ds.Planes), barrier: rls[j].l.Barrier || (i > 0 && j == 0), order: gpuOrder}
			if b.chunkCPU {
				cl.order = cpuOrder
			}
			for _, op := range rls[j].l.Zero {
				cl.zero = append(cl.zero, rls[j].args[slices.Index(rls[j].l.Bindings, op)])
			}
			cls = append(cls, cl)
		}
		if ext := boundTo(rls, OpExt); p.Ext != nil && ext != nil {
			// The pass's Ext scratch, written before its first launch.
			cls[first].init, cls[first].initBuf = shaders.ExtBytes(p, pl.extPlan()), ext
		}
	}
	return cls, nil
}

// recordWhole records every launch whole, each after its barrier, and
// returns their work and rate keys.
func recordWhole(r *device.Recorder, cls []chunkLaunch) (float64, []string, error) {
	var work float64
	var keys []string
	for i := range cls {
		cls[i].recordInit(r)
		if cls[i].barrier {
			r.Barrier()
		}
		if err := cls[i].ready.dispatch(r, [3]uint32{}, cls[i].cost.grid); err != nil {
			return 0, nil, err
		}
		work += cls[i].cost.total()
		if !slices.Contains(keys, cls[i].cost.key) {
			keys = append(keys, cls[i].cost.key)
		}
	}
	return work, keys, nil
}

// expected is the expected time in seconds of the launches' work not yet
// recorded, and whether every kernel's rate was measured.
func (b *Backend) expected(cls []chunkLaunch) (float64, bool) {
	var t float64
	known := true
	for i := range cls {
		cl := &cls[i]
		if cl.done {
			continue
		}
		rate, ok := b.rates.get(cl.cost.key)
		known = known && ok
		t += max(cl.cost.total()-cl.taken, 0) / rate
	}
	return t, known
}

// submitChunks runs the launches as a series of submissions of about
// b.chunkTarget each, checking ctx between them.
func (b *Backend) submitChunks(ctx context.Context, cls []chunkLaunch) (bool, error) {
	for n := 0; !allDone(cls); n++ {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("vkattn: stopped after %d chunks: %w", n, err)
		}
		// Even chunks of about the target each; the first one of a kernel
		// not yet measured is shorter, in case the prior rate is high.
		left, known := b.expected(cls)
		target := b.chunkTarget.Seconds()
		budget := target
		if left > 0 {
			budget = left / math.Ceil(left/target)
		}
		if !known {
			budget = min(budget, target/4)
		}
		r := b.dev.Record()
		work, secs, keys, err := b.recordChunk(r, cls, budget)
		if err != nil {
			return false, err
		}
		if tainted, err := b.submitChunk(ctx, r, keys, work, secs); err != nil {
			return tainted, fmt.Errorf("vkattn: chunk %d of a call: %w", n+1, err)
		}
	}
	return false, nil
}

func allDone(cls []chunkLaunch) bool {
	for i := range cls {
		if !cls[i].done {
			return false
		}
	}
	return true
}

// recordChunk records into r the next workgroups of the launches, in
// order, expected to take budget seconds at the kernels' rates — at least
// one workgroup, and at least b.chunkMinGroups' worth of the first
// launch — with a barrier before a launch that needs one (each
// submission starts with a full barrier). It returns the work recorded,
// its expected seconds and the rate keys of its kernels.
func (b *Backend) recordChunk(r *device.Recorder, cls []chunkLaunch, budget float64) (work, secs float64, keys []string, err error) {
	one := b.chunkCPU
	first := true
	for li := range cls {
		cl := &cls[li]
		if cl.done {
			continue
		}
		rate, _ := b.rates.get(cl.cost.key)
		if first {
			// Enough workgroups that the device's last wave is a small part.
			budget = max(budget, b.chunkMinGroups*cl.cost.total()/cl.cost.groups()/rate)
		}
		for started := false; !cl.done; started = true {
			pc, ok := cl.next((budget-secs)*rate, first, one)
			if !ok {
				break
			}
			cl.recordInit(r)
			if !first && !started && cl.barrier {
				r.Barrier() // (a chunk starts with a full barrier)
			}
			if err := cl.take(r, pc); err != nil {
				return 0, 0, nil, err
			}
			if !slices.Contains(keys, cl.cost.key) {
				keys = append(keys, cl.cost.key)
			}
			first = false
			work += pc.work
			secs += pc.work / rate
			if one {
				break
			}
		}
		if !cl.done {
			break
		}
	}
	return work, secs, keys, nil
}

// submitChunk submits r (work operations of kernels keys, expected to take
// secs) and learns the kernels' rate from its time. A cancellable call's
// submission is drained when ctx ends during it (device.SubmitDrain).
func (b *Backend) submitChunk(ctx context.Context, r *device.Recorder, keys []string, work, secs float64) (bool, error) {
	var res *device.Result
	var err error
	if ctx.Done() == nil {
		res, err = b.dev.Submit(ctx, r)
	} else {
		res, err = b.dev.SubmitDrain(ctx, r, max(time.Second, 4*time.Duration(secs*float64(time.Second))))
	}
	if err != nil {
		return submitted(err), err
	}
	b.rates.learn(keys, work, res.Wall())
	return false, nil
}

// submitted reports whether a submission's error may leave its GPU work
// running (a wait abandoned: ErrTimeout; a drained submission's error
// wraps the context's error alone).
func submitted(err error) bool {
	return errors.Is(err, device.ErrTimeout)
}
