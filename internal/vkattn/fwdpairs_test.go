//go:build cgo

package vkattn

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flashvk/flashvk/bfloat16"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/internal/spec/spectest"
	"github.com/flashvk/flashvk/reference"
)

// TestFlashCMPairs runs flash_cm's subgroup pairs (MODE 1, fp16 and bf16)
// at every pair tile the problem takes, against the float64 reference and
// against the tile without pairs of the same rows and keys: a pair
// computes S in halves and passes it through shared memory exactly, so
// nothing in the arithmetic changes — the results are bitwise equal where
// the compiler contracts both kernels alike, and within rounding of each
// other where it does not. Both tiles are checked against the reference,
// with each option (a window with a softcap, ALiBi, dropout, key counts).
func TestFlashCMPairs(t *testing.T) {
	testFlashCMTwins(t, "pair", pairTiles, func(c CMTile) CMTile {
		c.Pairs, c.NSG = false, c.NSG/2
		return c
	})
}

// TestFlashCMRowBlocks runs flash_cm's row blocks (MODE 1, fp16 and bf16:
// each subgroup owning two blocks of CM_M rows) as TestFlashCMPairs runs
// the pairs: against the reference and against the tile of one block per
// subgroup and twice the subgroups (the same rows and keys), whose
// arithmetic per row is the same.
func TestFlashCMRowBlocks(t *testing.T) {
	testFlashCMTwins(t, "row-block", rowBlockTiles, func(c CMTile) CMTile {
		c.RowBlocks, c.NSG = 0, c.NSG*c.RowBlocks
		return c
	})
}

// TestFlashCMStagger runs flash_cm's staggered walk (sw1: each
// workgroup's key tiles from a place of its own) on each problem's default
// tile, fp16 and bf16, with each option, against the reference and
// against the same tile walking its key tiles in order, whose sums differ
// from it only in their order (within rounding).
func TestFlashCMStagger(t *testing.T) {
	testFlashCMTwins(t, "staggered", func(b *Backend, l *CMLayout, p *spec.Problem) []CMTile {
		c, err := chooseCMTile(l, p.D, p.Dv, p.Nq, p.Mask, p.Ext, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
		if err != nil {
			return nil
		}
		c.Stagger = true
		return []CMTile{c}
	}, func(c CMTile) CMTile {
		c.Stagger = false
		return c
	})
}

// testFlashCMTwins runs each tile that tiles lists for a problem (kind: a
// name for the log) against the reference and against its twin, the tile
// of the same rows and keys without the tile's feature.
func testFlashCMTwins(t *testing.T, kind string, tiles func(*Backend, *CMLayout, *spec.Problem) []CMTile, twin func(CMTile) CMTile) {
	b := openBackend(t, "")
	ctx := context.Background()
	ran := 0
	for _, dt := range []spec.DType{spec.Float16, spec.BFloat16} {
		if b.cm[dt] == nil {
			continue
		}
		l, err := b.cmLayout(ctx, dt)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Mode1 {
			t.Logf("%s: no MODE 1 (%s): no %s tiles", dt, l.Why, kind)
			continue
		}
		tol := 4e-3
		if dt == spec.BFloat16 {
			tol = 1.6e-2
		}
		cases := append(awkwardCases[:len(awkwardCases):len(awkwardCases)],
			hostCase{1, 2, 1, 300, 333, 256, 256, spec.MaskCausalBottomRight},
			hostCase{1, 2, 1, 70, 90, 256, 128, spec.MaskCausalTopLeft},
			hostCase{2, 2, 1, 33, 700, 192, 192, spec.MaskNone},
			hostCase{1, 2, 1, 600, 650, 72, 72, spec.MaskCausalBottomRight}) // (256-row workgroups, the last partial)
		for i, c := range cases {
			h := c.problem(uint64(900 + i))
			for _, opt := range pairOptions(h.p) {
				p := *h.p
				p.Mask, p.Ext = opt.mask, opt.ext
				ts := tiles(b, l, &p)
				if p.Ext != nil && len(ts) > 1 {
					ts = ts[:1] // (the options on the largest tile)
				}
				for _, tl := range ts {
					ran++
					t.Run(fmt.Sprintf("%s/%s/%s/%s", dt, c.name(i), opt.name, tl), func(t *testing.T) {
						defer b.tune.clearOverrides()
						o, lse := runPairTile(t, b, &p, dt, h, tl)
						plain := twin(tl)
						// The two tiles do the same arithmetic: bitwise equal where
						// the compiler contracts both alike (every pair case on an
						// NVIDIA H200), within rounding of each other everywhere.
						o0, lse0 := runPairTile(t, b, &p, dt, h, plain)
						if !slices.Equal(o, o0) || !slices.Equal(lse, lse0) {
							do, dl := reference.Compare(o, to64(o0)), reference.Compare(lse, to64(lse0))
							t.Logf("O and LSE differ from %s's by rel_l2 %.3g and %.3g", plain, do.RelL2, dl.RelL2)
							if do.NaN > 0 || dl.NaN > 0 || !(do.RelL2 <= tol/4) || !(dl.RelL2 <= 1e-6) {
								t.Errorf("O or LSE differ from %s's by more than rounding: rel_l2 %.3g, %.3g (NaN %d, %d)", plain, do.RelL2, dl.RelL2, do.NaN, dl.NaN)
							}
						}
						ro, rlse, err := reference.Forward(spectest.Reference(&p), to64(roundTo(dt, h.q)), to64(roundTo(dt, h.k)), to64(roundTo(dt, h.v)))
						if err != nil {
							t.Fatal(err)
						}
						checkClose(t, "o", o, ro, tol)
						checkClose(t, "lse", lse, rlse, 1e-4)
						checkClose(t, "o of "+plain.String(), o0, ro, tol)
						checkClose(t, "lse of "+plain.String(), lse0, rlse, 1e-4)
					})
				}
			}
		}
	}
	if ran == 0 {
		t.Skipf("%s: no flash_cm %s tile runs here", b.info.Name, kind)
	}
}

type pairOption struct {
	name string
	mask spec.Mask
	ext  *spec.Ext
}

// pairOptions: the problem's own mask, then options a model uses with the
// large head dims (Gemma 2's window and softcap), ALiBi, dropout and key
// counts.
func pairOptions(p *spec.Problem) []pairOption {
	slopes := make([]float32, p.Hq)
	for h := range slopes {
		slopes[h] = 0.25 / float32(h+1)
	}
	used := make([]int32, p.B)
	for i := range used {
		used[i] = int32(max(1, p.Nk-13*(i+1)))
	}
	return []pairOption{
		{"mask", p.Mask, nil},
		{"window-softcap", spec.MaskNone, &spec.Ext{Left: 37, Right: 0, BottomRight: true, Softcap: 2}},
		{"alibi", spec.MaskNone, &spec.Ext{Left: -1, Right: 0, Slopes: slopes}},
		{"dropout", spec.MaskNone, &spec.Ext{Left: -1, Right: -1, Dropout: &spec.Dropout{Threshold: 51, Seed: 11, Offset: 3}}},
		{"seqused", spec.MaskNone, &spec.Ext{Left: -1, Right: -1, SeqUsedK: used}},
	}
}

// pairTiles are the pair tiles p takes on b, the most subgroups first:
// every MODE 1 tile of 32 or 64 keys with pairs, with and without the
// prefetch, that fits.
func pairTiles(b *Backend, l *CMLayout, p *spec.Problem) []CMTile {
	return fittingTiles(b, l, p, []int{8, 4, 2}, []bool{false, true}, func(nsg, bc int, pf bool) CMTile {
		return CMTile{NSG: nsg, BC: bc, Mode: 1, Prefetch: pf, Pairs: true}
	})
}

// rowBlockTiles are the row-block tiles p takes on b: every MODE 1 tile
// of two blocks, four, eight, two or one subgroups (in that order) and 32
// or 64 keys, with and without the prefetch, that fits — the options'
// tile at d ≤ 64, nsg4-bc32 with the prefetch, first: calls with options
// run it alone.
func rowBlockTiles(b *Backend, l *CMLayout, p *spec.Problem) []CMTile {
	return fittingTiles(b, l, p, []int{4, 8, 2, 1}, []bool{true, false}, func(nsg, bc int, pf bool) CMTile {
		return CMTile{NSG: nsg, BC: bc, Mode: 1, Prefetch: pf, RowBlocks: 2}
	})
}

// fittingTiles are the tiles mk makes of nsg subgroups (nsgs, in order),
// 32 or 64 keys and the prefetch on or off (pfs, in order) that CheckCMTile
// accepts for p on b.
func fittingTiles(b *Backend, l *CMLayout, p *spec.Problem, nsgs []int, pfs []bool, mk func(nsg, bc int, pf bool) CMTile) []CMTile {
	var out []CMTile
	x := ExtrasOf(l, p.Ext)
	for _, nsg := range nsgs {
		for _, bc := range []int{32, 64} {
			for _, pf := range pfs {
				c := mk(nsg, bc, pf)
				if CheckCMTile(l, c, p.D, p.Dv, x, b.lim.SharedBytes, b.lim.MaxWorkgroupSize) == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// runPairTile runs p's forward in dtype dt on tile c (forced) from h's
// inputs rounded to dt, with poisoned outputs, and returns O (widened)
// and the LSE.
func runPairTile(t *testing.T, b *Backend, p *spec.Problem, dt spec.DType, h *hostProblem, c CMTile) ([]float32, []float32) {
	t.Helper()
	ctx := context.Background()
	force(b, shaders.KernelFlashCM, p, dt, c)
	ls, err := b.Launches(ctx, p, dt, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Kernel != shaders.KernelFlashCM || ls[0].Config != c.String() {
		t.Fatalf("launches %+v; want flash_cm %s", ls, c)
	}
	lse := slices.Repeat([]float32{float32(math.NaN())}, len(h.lse))
	switch dt {
	case spec.BFloat16:
		o := slices.Repeat([]bfloat16.BFloat16{0x7fc0}, len(h.o)) // NaN: unwritten
		if err := ForwardHost(ctx, b, p, bfloat16.Slice(h.q), bfloat16.Slice(h.k), bfloat16.Slice(h.v), o, lse, HostBias{}); err != nil {
			t.Fatal(err)
		}
		return bfloat16.Float32s(o), lse
	default:
		o := slices.Repeat([]uint16{0x7e00}, len(h.o))
		if err := ForwardHost(ctx, b, p, toF16(h.q), toF16(h.k), toF16(h.v), o, lse, HostBias{}); err != nil {
			t.Fatal(err)
		}
		return fromF16(o), lse
	}
}

// roundTo is x rounded to dt (16-bit) and widened again.
func roundTo(dt spec.DType, x []float32) []float32 {
	if dt == spec.BFloat16 {
		return bfloat16.Float32s(bfloat16.Slice(x))
	}
	return fromF16(toF16(x))
}

// TestFlashCMSoftcapRange runs flash_cm's fp16 softcap forward with a cap
// far below the scale (c = 1e-4, scale 1), whose folded polynomial
// coefficients (ext.glsl ext_capped) overflow fp32 — (scale/c)^13 — on
// products small enough (|s| ≤ 4e-5, within 0.5·c/scale) for every tile to
// be admitted to the polynomial: the kernel must take tanh2c there (an
// infinite coefficient gives NaN), against the float64 reference.
func TestFlashCMSoftcapRange(t *testing.T) {
	b := openBackend(t, "")
	ctx := context.Background()
	if b.cm[spec.Float16] == nil {
		t.Skipf("%s: no fp16 flash_cm", b.info.Name)
	}
	l, err := b.cmLayout(ctx, spec.Float16)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Mode1 {
		t.Skipf("no MODE 1 (%s): no polynomial", l.Why)
	}
	h := newHostProblem(77, 1, 2, 1, 40, 70, 128, 128, spec.MaskNone)
	p := *h.p
	p.Scale = 1
	p.Ext = &spec.Ext{Left: -1, Right: -1, Softcap: 1e-4}
	for i := range h.q {
		h.q[i] *= 1e-6
	}
	tl, err := chooseCMTile(l, p.D, p.Dv, p.Nq, p.Mask, p.Ext, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
	if err != nil {
		t.Fatal(err)
	}
	defer b.tune.clearOverrides()
	o, lse := runPairTile(t, b, &p, spec.Float16, h, tl)
	ro, rlse, err := reference.Forward(spectest.Reference(&p), to64(roundTo(spec.Float16, h.q)), to64(roundTo(spec.Float16, h.k)), to64(roundTo(spec.Float16, h.v)))
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "o", o, ro, 4e-3)
	checkClose(t, "lse", lse, rlse, 1e-4)
}
