package cpu

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/flashvk/flashvk/internal/spec"
)

// Default tile sizes: Br query rows by Bc keys.
const (
	DefaultBr = 64
	DefaultBc = 64
)

// Config tunes the backend. The zero value is the default.
type Config struct {
	// Br is the query tile height and Bc the key tile width; ≤ 0 selects
	// DefaultBr and DefaultBc. Results depend on neither beyond float32
	// rounding (and, for a fixed Config, are bitwise reproducible).
	Br, Bc int
	// Workers is the number of goroutines; ≤ 0 selects GOMAXPROCS. The
	// backward's result does not depend on it.
	Workers int
}

// Forward computes O and LSE with the default Config. q, k, v and o are
// indexed with p's strides (views into larger buffers are allowed); lse is
// contiguous [B, Hq, Nq], or [Hq, Tq] for a packed problem (p.Varlen:
// the operands then hold one batch of Tq query and Tk key rows).
func Forward(ctx context.Context, p *spec.Problem, q, k, v, o, lse []float32) error {
	return ForwardWith(ctx, Config{}, p, q, k, v, o, lse)
}

// Backward computes dQ, dK and dV with the default Config, recomputing the
// probabilities from Q, K and LSE. dO has O's strides, dQ Q's, dK K's and
// dV V's. Every element of dq, dk and dv is overwritten.
func Backward(ctx context.Context, p *spec.Problem, q, k, v, o, lse, do, dq, dk, dv []float32) error {
	return BackwardWith(ctx, Config{}, p, q, k, v, o, lse, do, dq, dk, dv)
}

// resolve fills in Config defaults, capping the tiles to the problem.
func (c Config) resolve(p *spec.Problem) Config {
	if c.Br <= 0 {
		c.Br = DefaultBr
	}
	if c.Bc <= 0 {
		c.Bc = DefaultBc
	}
	c.Br = max(min(c.Br, p.Nq), 1)
	c.Bc = max(min(c.Bc, p.Nk), 1)
	if c.Workers <= 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	return c
}

// checkProblem rejects problems the kernels cannot index safely. The
// attention package validates fully; this only guards against panics.
func checkProblem(p *spec.Problem) error {
	if p == nil {
		return errors.New("cpu: nil problem")
	}
	if p.B < 0 || p.Hq < 0 || p.Nq < 0 || p.Nk < 0 || p.D < 1 || p.Dv < 1 || p.Hkv < 1 {
		return fmt.Errorf("cpu: invalid sizes B=%d Hq=%d Hkv=%d Nq=%d Nk=%d D=%d Dv=%d",
			p.B, p.Hq, p.Hkv, p.Nq, p.Nk, p.D, p.Dv)
	}
	if p.Hq%p.Hkv != 0 {
		return fmt.Errorf("cpu: Hq=%d is not a multiple of Hkv=%d", p.Hq, p.Hkv)
	}
	switch p.Mask {
	case spec.MaskNone, spec.MaskCausalTopLeft, spec.MaskCausalBottomRight:
	default:
		return fmt.Errorf("cpu: invalid mask %d", p.Mask)
	}
	if p.KV != nil && p.Varlen() {
		return errors.New("cpu: packed sequences with a KV cache")
	}
	if err := p.CheckExt(); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	return nil
}

// role says whose shape and strides an operand has: Q's (also dQ), K's
// (dK), V's (dV) or O's (dO).
type role uint8

const (
	asQ role = iota
	asK
	asV
	asO
)

// operand is a named slice of a call.
type operand struct {
	name string
	buf  []float32
	as   role
}

// checkOperands checks that every operand's slice holds its view ([B, Nq,
// …] and [B, Nk, …], or packed [1, Tq, …] and [1, Tk, …], whose batch
// stride is never used) and that lse holds LSELen values.
func checkOperands(p *spec.Problem, lse []float32, ops ...operand) error {
	batches, nq, nk := p.B, p.Nq, p.Nk
	if p.Varlen() {
		batches, nq, nk = 1, p.TotalQ(), p.TotalK()
	}
	for _, o := range ops {
		s, n, h, w := p.Q, nq, p.Hq, p.D
		switch o.as {
		case asK:
			s, n, h = p.K, nk, p.Hkv
		case asV:
			s, n, h, w = p.V, nk, p.Hkv, p.Dv
		case asO:
			s, w = p.O, p.Dv
		}
		if batches == 1 {
			s.Batch = 0 // one batch (a packed problem's stride is never used)
		}
		if err := checkLen(o.name, o.buf, s, batches, n, h, w); err != nil {
			return err
		}
	}
	return checkLSE("lse", lse, p)
}

// checkLen reports an error if buf cannot hold a [b, n, h, w] operand with
// strides s (every reachable index must lie in [0, len(buf))).
func checkLen(name string, buf []float32, s spec.Strides, b, n, h, w int) error {
	if b == 0 || n == 0 || h == 0 || w == 0 {
		return nil
	}
	lo, hi := 0, w-1
	for _, d := range [...]struct{ count, stride int }{{b, s.Batch}, {n, s.Seq}, {h, s.Head}} {
		if d.stride >= 0 {
			hi += (d.count - 1) * d.stride
		} else {
			lo += (d.count - 1) * d.stride
		}
	}
	if lo < 0 || hi >= len(buf) {
		return fmt.Errorf("cpu: %s has %d elements, its strides %+v reach [%d, %d]", name, len(buf), s, lo, hi)
	}
	return nil
}

// checkLSE reports an error if buf is shorter than a contiguous [B, Hq, Nq]
// (packed: [Hq, Tq]).
func checkLSE(name string, buf []float32, p *spec.Problem) error {
	if n := p.LSELen(); len(buf) < n {
		shape := "[B, Hq, Nq]"
		if p.Varlen() {
			shape = "[Hq, Tq]"
		}
		return fmt.Errorf("cpu: %s has %d elements, want %d (%s)", name, len(buf), n, shape)
	}
	return nil
}

// queryRows returns the query rows of sequence b that see key j: first …
// limit−1 (first ≤ limit, equal when none). Both bounds of KeyRange are
// non-decreasing in the row, so the rows whose range ends after j are a
// suffix, those whose range starts at or before j a prefix, and the rows
// seeing j their intersection (without a left window bound, limit is the
// sequence's query count).
func queryRows(p *spec.Problem, b, j int) (first, limit int) {
	n := p.Queries(b)
	first = sort.Search(n, func(i int) bool { _, hi := p.KeyRange(b, i); return hi > j })
	limit = sort.Search(n, func(i int) bool { lo, _ := p.KeyRange(b, i); return lo > j })
	return first, limit
}

// tileItem splits work item it of a pass over tiles × batches × heads,
// numbered tile-major, into its tile t, batch b and head h.
func tileItem(it, batches, heads int) (t, b, h int) {
	bh := it % (batches * heads)
	return it / (batches * heads), bh / heads, bh % heads
}

// tiling numbers the work items of a pass over the tiles of size rows of
// every sequence's query rows (or stored key rows) and every head (heads
// of them): tile-major, then sequence, then head. In a plain problem
// every sequence has n rows, perSeq tiles, and reverse takes the tiles
// last first. A packed problem's sequences have their own lengths: its
// tiles are listed, each within one sequence, ordered by their index in
// the sequence (descending with reverse), then by sequence, so that no
// item runs past its sequence and none is empty.
type tiling struct {
	size, heads, batches int
	reverse              bool
	n, perSeq            int       // plain: rows and tiles per sequence
	list                 []seqTile // packed: the tiles in item order
	lens                 []int     // packed: each sequence's rows
}

// seqTile is a packed problem's tile: sequence b's rows r0 … r0+size−1
// (cut to its length).
type seqTile struct{ b, r0 int }

// newTiling returns the tiling of p's query rows (keys false) or stored
// key rows (keys true) in tiles of size rows, over heads heads.
func newTiling(p *spec.Problem, size, heads int, keys, reverse bool) *tiling {
	t := &tiling{size: size, heads: heads, batches: p.B, reverse: reverse}
	if !p.Varlen() {
		t.n = p.Nq
		if keys {
			t.n = p.Nk
		}
		t.perSeq = (t.n + size - 1) / size
		return t
	}
	// Counting sort of the tiles by their index k in their sequence:
	// count[k] tiles have index k (the sequences with more than k tiles).
	t.lens = make([]int, p.B)
	maxTiles := 0
	for b := range p.B {
		n := p.Queries(b)
		if keys {
			n = p.StoredKeys(b)
		}
		t.lens[b] = n
		maxTiles = max(maxTiles, (n+size-1)/size)
	}
	exact := make([]int, maxTiles+1) // sequences with exactly k tiles
	for _, n := range t.lens {
		exact[(n+size-1)/size]++
	}
	count := make([]int, maxTiles)
	above := 0
	for k := maxTiles - 1; k >= 0; k-- {
		above += exact[k+1]
		count[k] = above
	}
	// count[k] becomes the list position of the first tile of index k.
	pos := 0
	for x := range maxTiles {
		k := x
		if reverse {
			k = maxTiles - 1 - x
		}
		count[k], pos = pos, pos+count[k]
	}
	t.list = make([]seqTile, pos)
	for b, n := range t.lens {
		for k := range (n + size - 1) / size {
			t.list[count[k]] = seqTile{b, k * size}
			count[k]++
		}
	}
	return t
}

// items is the number of work items.
func (t *tiling) items() int {
	if t.list != nil {
		return len(t.list) * t.heads
	}
	return t.perSeq * t.batches * t.heads
}

// at returns work item it: its sequence b, head h, and rows r0 … r0+nr−1
// of the sequence (nr ≥ 1).
func (t *tiling) at(it int) (b, h, r0, nr int) {
	if t.list != nil {
		e := t.list[it/t.heads]
		return e.b, it % t.heads, e.r0, min(t.size, t.lens[e.b]-e.r0)
	}
	k, b, h := tileItem(it, t.batches, t.heads)
	if t.reverse {
		k = t.perSeq - 1 - k
	}
	r0 = k * t.size
	return b, h, r0, min(t.size, t.n-r0)
}

// queryTiling returns the tiling of p's query tiles of br rows over the
// query heads. When later rows see more keys (keysGrow) the tiles are
// taken last first, the late ones (the longest) leading.
func queryTiling(p *spec.Problem, br int) *tiling {
	return newTiling(p, br, p.Hq, false, keysGrow(p))
}

// keysGrow reports whether later query rows see more keys: a causal mask,
// or a window bounded on the right only.
func keysGrow(p *spec.Problem) bool {
	if e := p.Ext; e != nil {
		return e.Left < 0 && e.Right >= 0
	}
	return p.Causal()
}

// parallel runs fn(w, item) for item in [0, n) on up to workers goroutines,
// w being the worker's scratch from newScratch. It stops early and returns
// ctx.Err() when the context is done (checked before every item, and by
// the items between their tiles: an item cut short leaves its outputs
// unwritten, so a context done at the end is an error too).
func parallel[S any](ctx context.Context, workers, n int, newScratch func() S, fn func(S, int)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	workers = min(workers, n)
	if workers <= 1 {
		s := newScratch()
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			fn(s, i)
		}
		return ctx.Err()
	}
	var (
		next    atomic.Int64
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			s := newScratch()
			for !stopped.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if ctx.Err() != nil {
					stopped.Store(true)
					return
				}
				fn(s, i)
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}
