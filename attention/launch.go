package attention

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/flashvk/flashvk/internal/spec"
)

// Plan is how one pass of a problem runs on an engine: the kernel family
// that runs it, its dispatches in recording order, and why the families
// tried before it did not take the problem. The Vulkan backend records
// exactly these dispatches; explain, benchmarks and the tuner read them.
type Plan struct {
	// Pass is "fwd", "bwd" or "kv" (a KV-cache call: PlanKVCache).
	Pass string
	// Family is the kernel family ("flash_cm", "flash", "bwd_cm", "bwd",
	// …; "cpu" on the CPU backend).
	Family   string
	Launches []Launch
	// Declined: "family: reason" for each family tried first.
	Declined []string
	// Batches is how many batches one submission runs: all of them, or,
	// where the operands of all are too large for the device at once, as
	// many as fit (a call then makes ceil(B/Batches) submissions, and the
	// launches are those of one).
	Batches int
	// Tiles is the number of query×key tiles (TileRows×TileCols) of the
	// pass's first tiled launch over every batch (per head), and
	// TilesVisited how many of them hold a (query, key) pair the mask,
	// window and key counts leave visible: the tiles the kernels compute,
	// the rest being skipped (0 and 0 when no launch is tiled).
	Tiles, TilesVisited int64
	// Splits is the number of parts a KV-cache call splits each
	// sequence's cache into (workgroups that run side by side, merged by
	// their log-sum-exp), of SplitKeys rows each; 0 for other passes and
	// on the CPU backend.
	Splits, SplitKeys int
	// ScratchBytes is the device memory one submission of the pass takes
	// beside its operands: the backward's D, the options' parameter
	// buffer, a bias's tile summary, a folded dBias's chunk of dS and
	// partial sums, the naive kernel's scores, a KV-cache call's lengths
	// and partial results (0 on the CPU backend, whose workspace is per
	// worker thread).
	ScratchBytes int64
}

// Configuration sources (Launch.Source).
const (
	SourceDefault = "default"
	SourceTuned   = "tuned"
)

// Launch is one compute dispatch (on the CPU backend: its tile per
// worker).
type Launch struct {
	// Kernel is the compute kernel ("flash_cm", "bwd_cm_dkdv", …).
	Kernel string `json:"kernel"`
	// Name is the pipeline's full name: kernel, dtype, configuration and
	// head dims (per-kernel benchmark times carry it).
	Name string `json:"name,omitempty"`
	// Grid is the number of workgroups in x, y, z and Workgroup the
	// invocations per workgroup (zero on the CPU backend). Base is the
	// first workgroup of a launch that runs part of a larger grid (a
	// backward whose dBias sums over the bias's broadcast dimensions runs
	// its dQ kernel a chunk of heads and sequences at a time); zero
	// otherwise.
	Grid      [3]int `json:"grid"`
	Base      [3]int `json:"base,omitzero"`
	Workgroup int    `json:"workgroup"`
	// TileRows and TileCols are the query and key rows of a tile (0 where
	// the kernel has none); SharedBytes is the shared memory per workgroup.
	TileRows    int `json:"tile_rows"`
	TileCols    int `json:"tile_cols"`
	SharedBytes int `json:"shared_bytes"`
	// Config is the tile or variant as the tune cache spells it
	// ("nsg8-bc64-mode1-pf1", "wg64-br64-bc16", …); Source says where it
	// came from: "tuned" (the tune cache) or "default".
	Config string `json:"config,omitempty"`
	Source string `json:"source,omitempty"`
	// HeadGroup > 1: the workgroups of HeadGroup consecutive heads (query
	// heads, or the dK/dV kernel's KV heads) of one tile run one after
	// another, not a head's tiles first: the coopmat kernels with a bias
	// broadcast over heads, on tiles of at most 64 rows, whose heads then
	// read the tile's bias rows together, from the device's cache; 0
	// otherwise.
	HeadGroup int `json:"head_group,omitempty"`
	// Addresses are the operands the kernel reads and writes through
	// 64-bit buffer device addresses instead of bindings ("q", "k", …;
	// empty when every operand is bound; see Config.Addressing).
	Addresses []string `json:"addresses,omitempty"`
	// Statistics are what the Vulkan driver's compiler reports of the
	// launch's pipeline — register count, spills, shared memory…, in the
	// driver's own names and in its order — when Config.PipelineStatistics
	// asked for them (nil otherwise, and on the CPU backend).
	Statistics []Statistic `json:"statistics,omitempty"`
}

// Statistic is one compiler statistic of a pipeline
// (VK_KHR_pipeline_executable_properties), e.g. NVIDIA's "Register
// Count" or RADV's "VGPRs", "Spilled VGPRs" and "LDS size".
type Statistic struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Value is a bool, int64, uint64 or float64, as the driver gives it.
	Value any `json:"value"`
	// Executable is the index of the pipeline executable the statistic
	// is of, where the driver compiled the pipeline into several (0: the
	// first, and for compute pipelines usually the only one).
	Executable int `json:"executable,omitempty"`
}

// ValueString is the value as text: "128", "-3", "true", "0.75".
func (s Statistic) ValueString() string {
	switch v := s.Value.(type) {
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case nil:
		return ""
	}
	return fmt.Sprint(s.Value)
}

// String is "name: value", e.g. "Register Count: 128".
func (s Statistic) String() string { return s.Name + ": " + s.ValueString() }

// Plan returns how the forward (or, with backward, the backward) of
// attention on contiguous tensors of shapes q, k, v in layout l and dtype
// dt with opt runs on this engine: the kernels, grids and tiles of each
// dispatch. A problem the device cannot run (an operand larger than the
// device can address, even one batch at a time) fails here with ErrShape,
// so callers can check before they allocate inputs. On Vulkan it may run
// the cooperative-matrix layout probe (once per engine and dtype) and waits
// for it under ctx. With Config.PipelineStatistics it also builds each
// launch's pipeline and fills Launch.Statistics.
func (e *Engine) Plan(ctx context.Context, q, k, v Shape, l Layout, dt DType, opt Options, backward bool) (*Plan, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	if err := e.supports(dt); err != nil {
		return nil, err
	}
	if err := checkShapes(namedShape{"q", q}, namedShape{"k", k}, namedShape{"v", v}); err != nil {
		return nil, err
	}
	if err := checkLayout("layout", l); err != nil {
		return nil, err
	}
	p, err := newProblem(q, k, v, Contiguous(q, l), Contiguous(k, l), Contiguous(v, l), opt)
	if err != nil {
		return nil, err
	}
	bias, dbias, err := planBias(opt, backward)
	if err != nil {
		return nil, err
	}
	if err := attachBias(p, dt, bias, dbias); err != nil {
		return nil, err
	}
	p.O = Contiguous(outShape(p), l)
	pl, err := e.b.plan(ctx, p, dt, backward)
	if err != nil {
		return nil, err
	}
	pl.Tiles, pl.TilesVisited = tileCounts(p, pl.Launches)
	return pl, nil
}

// tileCounts are Plan.Tiles and Plan.TilesVisited of p for the first
// launch with a tile: per batch and query tile, the key tiles from the
// one holding its first row's first visible key to the one holding its
// last row's last.
func tileCounts(p *spec.Problem, ls []Launch) (all, visited int64) {
	i := slices.IndexFunc(ls, func(l Launch) bool { return l.TileRows > 0 && l.TileCols > 0 })
	if i < 0 {
		return 0, 0
	}
	br, bc := ls[i].TileRows, ls[i].TileCols
	qt, kt := (p.Nq+br-1)/br, (p.Nk+bc-1)/bc
	for b := range p.B {
		for t := range (p.Queries(b) + br - 1) / br { // (the tiles past a packed sequence's queries do nothing)
			lo, _ := p.KeyRange(b, t*br)
			_, hi := p.KeyRange(b, min(t*br+br, p.Queries(b))-1)
			if hi > lo {
				visited += int64((hi+bc-1)/bc - lo/bc)
			}
		}
	}
	return int64(p.B) * int64(qt) * int64(kt), visited
}

// Flops is the FLOP count of the forward of attention on q, k, v shapes
// with opt, as the benchmarks count it: FlashAttention's 4·B·Hq·Nq·Nk·d
// (d the mean of D and Dv), halved when causal, for options no richer
// than Scale, Causal and Align; with a window, softcap, ALiBi or key
// counts, 2·Hq·(D+Dv) per (query, key) pair left visible, exactly. The
// backward is counted as 2.5× the forward.
func Flops(q, k, v Shape, opt Options) (float64, error) {
	if err := checkShapes(namedShape{"q", q}, namedShape{"k", k}, namedShape{"v", v}); err != nil {
		return 0, err
	}
	p, err := newProblem(q, k, v, Contiguous(q, BSHD), Contiguous(k, BSHD), Contiguous(v, BSHD), opt)
	if err != nil {
		return 0, err
	}
	return p.Flops(), nil
}

// PlanKVCache is Plan for a KV-cache call (ForwardKVCache): q's shape, the
// cache's (cache.K and cache.V are read for their shapes only; their Data
// may be nil), its lengths and block table, the rows an append adds, all
// operands contiguous in layout l. The plan depends on the lengths (the
// splits follow the longest sequence). With Config.PipelineStatistics its
// launches carry their Statistics, as Plan's do.
func (e *Engine) PlanKVCache(ctx context.Context, q Shape, cache *KVCache, nNew int, l Layout, dt DType, opt Options) (*Plan, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	if err := e.supports(dt); err != nil {
		return nil, err
	}
	if cache == nil {
		return nil, fmt.Errorf("attention: cache: nil: %w", ErrOption)
	}
	if err := checkLayout("layout", l); err != nil {
		return nil, err
	}
	k, v := cache.K.Shape, cache.V.Shape
	if err := checkShapes(namedShape{"q", q}, namedShape{"cache.K", k}, namedShape{"cache.V", v}); err != nil {
		return nil, err
	}
	if nNew < 0 {
		return nil, fmt.Errorf("attention: new rows: %d: %w", nNew, ErrShape)
	}
	in := kvInput{q: q, k: k, v: v, qs: Contiguous(q, l), ks: Contiguous(k, l), vs: Contiguous(v, l),
		seqLens: cache.SeqLens, table: cache.BlockTable, blockSize: cache.BlockSize}
	if nNew > 0 {
		in.append = true
		in.nk, in.nv = Shape{B: q.B, S: nNew, H: k.H, D: k.D}, Shape{B: q.B, S: nNew, H: v.H, D: v.D}
		in.nks, in.nvs = Contiguous(in.nk, l), Contiguous(in.nv, l)
	}
	p, err := kvProblem(in, opt)
	if err != nil {
		return nil, err
	}
	p.O = Contiguous(outShape(p), l)
	return e.b.plan(ctx, p, dt, false)
}
