//go:build cgo

package vkattn

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/internal/spec/spectest"
	"github.com/flashvk/flashvk/reference"
	"github.com/x448/float16"
)

func toF16(x []float32) []uint16 {
	out := make([]uint16, len(x))
	for i, v := range x {
		out[i] = float16.Fromfloat32(v).Bits()
	}
	return out
}

func fromF16(x []uint16) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float16.Frombits(v).Float32()
	}
	return out
}

// bwdCMVariant is a coopmat backward's MODE and flags: pf and sw (the
// staggered walk) in both kernels; kv, sp, dk (dK in two halves, with sp)
// and fh (subgroup pairs over the features, with kv) in the dK/dV kernel;
// dq (subgroup pairs over the keys) and rb (two row blocks per subgroup)
// in the dQ kernel.
type bwdCMVariant struct {
	mode                           int
	kv, pf, sp, dk, dq, fh, sw, rb bool
}

func (v bwdCMVariant) String() string {
	s := fmt.Sprintf("mode%d-kv%v-pf%v-sp%v-dk%v-dq%v", v.mode, v.kv, v.pf, v.sp, v.dk, v.dq)
	if v.fh {
		s += "-fh"
	}
	if v.rb {
		s += "-rb"
	}
	if v.sw {
		s += "-sw"
	}
	return s
}

// forceBwdCM makes b's coopmat backward of problems like p run variant
// v: the first default tile of its mode that fits with v's flags, forced
// as the tuner forces candidates, and returns the dQ tile. Pairs that do
// not fit the problem (an odd count of dQ's column blocks) and row blocks
// that do not fit the shared memory fall back to tiles without them; a
// variant without row blocks runs the dQ tiles the rule lists after its
// row-block tile (d ≤ 64: nsg4-step64, the tile of the calls the row
// blocks are not for).
func forceBwdCM(t *testing.T, b *Backend, l *CMLayout, p *spec.Problem, dt spec.DType, v bwdCMVariant) (dq bwdCMTile) {
	t.Helper()
	for _, dkdv := range []bool{true, false} {
		var cands, plain []bwdCMTile
		for _, c := range bwdCMTiles(l, dkdv, p.D, p.Dv, p.Mask, p.Ext) {
			if c.Mode == v.mode {
				c.Prefetch, c.Stagger = v.pf, v.sw
				if dkdv {
					c.KVReg, c.Split, c.Halves, c.FHalves = v.kv, v.sp, v.dk, v.fh
					if v.fh && c.NSG < 2 {
						continue
					}
				} else {
					if c.RowBlocks > 1 && !v.rb {
						continue
					}
					c.Pairs, c.RowBlocks = false, 0
					plain = append(plain, c)
					c.Pairs = v.dq
					if v.rb {
						c.RowBlocks = 2
					}
				}
				cands = append(cands, c)
			}
		}
		c, err := firstFit(append(cands, plain...), func(c bwdCMTile) error {
			return bwdCMCheckTile(l, dkdv, c, p.D, p.Dv, TileExtras{}, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
		})
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if dkdv && c.FHalves != v.fh {
			t.Fatalf("%s: the dK/dV kernel runs %s", v, c)
		}
		t.Logf("%s: %s", map[bool]string{true: "dK/dV", false: "dQ"}[dkdv], c)
		stage := shaders.KernelBwdCMDQ
		if dkdv {
			stage = shaders.KernelBwdCMDKDV
		} else {
			dq = c
		}
		force(b, stage, p, dt, c)
	}
	return dq
}

// TestBwdCM runs the cooperative-matrix backward in each MODE the device's
// layout allows on awkward problems (tails, GQA, causal both alignments,
// Nq ≠ Nk, head dims 40/64/96/128/256, D ≠ Dv) against the float64
// reference on the fp16-rounded inputs, and checks bitwise repeatability.
// The FlashAttention-2 error criterion itself is the conformance suite's
// (attention.TestConformanceVulkanCoopmat); here the bound is a fixed
// rel_l2 of 4e-3, several times the fp16 error of these problems. Skipped
// where the device has no cooperative matrices (CI's lavapipe); run it on
// the GPU or on Mesa 26's lavapipe (bench/gemm/lavapipe26.sh).
func TestBwdCM(t *testing.T) {
	b, l := openBwdCM16(t)
	ctx := context.Background()
	// sp: dK and dV in two launches (the large head dims' tile); dk: dK
	// in two more, half its columns each (odd counts of column blocks at
	// d 40 and 80); dq: the dQ kernel's subgroup pairs (MODE 1; d 40 and
	// 80 have odd counts of dQ's column blocks on 16-column matrices and
	// run without); fh: the dK/dV kernel's pairs over the features (MODE
	// 1, K and V in registers, one launch; D and Dv padded to whole pairs
	// of chunks); sw: both kernels' staggered walks.
	vars := []bwdCMVariant{{mode: 0}, {mode: 0, kv: true, pf: true}, {mode: 0, sp: true}, {mode: 0, kv: true, sp: true, dk: true}, {mode: 0, pf: true, sw: true}}
	if l.Mode1 {
		vars = append(vars, bwdCMVariant{mode: 1, kv: true, sw: true}, bwdCMVariant{mode: 1, pf: true, sp: true, dk: true, sw: true},
			bwdCMVariant{mode: 1, kv: true, fh: true, dq: true, sw: true})
		vars = append(vars, bwdCMVariant{mode: 1}, bwdCMVariant{mode: 1, kv: true}, bwdCMVariant{mode: 1, pf: true},
			bwdCMVariant{mode: 1, sp: true}, bwdCMVariant{mode: 1, kv: true, pf: true, sp: true}, bwdCMVariant{mode: 1, kv: true, sp: true, dk: true},
			bwdCMVariant{mode: 1, pf: true, sp: true, dk: true}, bwdCMVariant{mode: 1, dq: true}, bwdCMVariant{mode: 1, pf: true, kv: true, sp: true, dk: true, dq: true},
			bwdCMVariant{mode: 1, kv: true, fh: true}, bwdCMVariant{mode: 1, kv: true, pf: true, fh: true, dq: true},
			bwdCMVariant{mode: 1, rb: true}, bwdCMVariant{mode: 1, kv: true, pf: true, rb: true, sw: true})
	}
	// The last case's key tiles past the first are seen by no query row:
	// their workgroups take no step and store dK = dV = 0. D 256 with Dv
	// 128 gives the dQ kernel's pairs the least room for dS in V's place.
	cases := append(awkwardCases[:len(awkwardCases):len(awkwardCases)], hostCase{1, 3, 1, 33, 97, 96, 96, spec.MaskNone},
		hostCase{1, 2, 1, 70, 90, 256, 128, spec.MaskCausalBottomRight}, hostCase{1, 1, 1, 40, 200, 128, 128, spec.MaskCausalTopLeft})
	for _, vr := range vars {
		for i, c := range cases {
			t.Run(fmt.Sprintf("%s/%s", vr, c.name(i)), func(t *testing.T) {
				h := c.problem(uint64(100 + i))
				p := h.p
				dqTile := forceBwdCM(t, b, l, p, spec.Float16, vr)
				if vr.dq && !dqTile.Pairs && p.D == p.Dv && (p.D == 64 || p.D == 128 || p.D == 256) {
					t.Fatalf("%s: the dQ kernel runs %s, without pairs", vr, dqTile)
				}
				if vr.rb && dqTile.RowBlocks != 2 && max(p.D, p.Dv) <= 64 {
					t.Fatalf("%s: the dQ kernel runs %s, without row blocks", vr, dqTile)
				}
				defer b.tune.clearOverrides()
				if pl, err := b.Plan(ctx, p, spec.Float16, Bwd); err != nil || pl.Family != "bwd_cm" {
					t.Fatalf("the coopmat backward does not take this problem (%+v, %v)", pl, err)
				}
				dq, dk, dv := checkBwdF16(t, b, p, h, h.ref())
				dq2, dk2, dv2 := checkBwdF16(t, b, p, h, h.ref())
				if !slices.Equal(dq, dq2) || !slices.Equal(dk, dk2) || !slices.Equal(dv, dv2) {
					t.Error("gradients differ bitwise between two runs")
				}
			})
		}
	}
}

// TestBwdCMFHalvesOptions runs the 16-bit dK/dV kernel's pairs over the
// features (fh2, forced; the rule takes them for plain fp16 problems
// above d 128, a tuned choice may take them for every call) with each
// option a model uses at the large head dims — Gemma 2's window and
// softcap, ALiBi, dropout, key counts — against the float64 reference on
// the fp16-rounded inputs (rel_l2 ≤ 4e-3, as TestBwdCM), and checks the
// refusal of a bias.
func TestBwdCMFHalvesOptions(t *testing.T) {
	b, l := openBwdCM16(t)
	if !l.Mode1 {
		t.Skipf("%s: no MODE 1 (%s): no pairs over the features", b.info.Name, l.Why)
	}
	fh := bwdCMTile{NSG: 4, Step: 16, Mode: 1, KVReg: true, FHalves: true}
	if err := bwdCMCheckTile(l, true, fh, 256, 256, ExtrasOf(l, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}}), b.lim.SharedBytes, b.lim.MaxWorkgroupSize); err == nil {
		t.Errorf("%s with a bias: accepted", fh)
	}
	cases := []hostCase{{1, 2, 1, 150, 170, 256, 256, spec.MaskCausalBottomRight}, {2, 2, 2, 33, 97, 192, 128, spec.MaskNone}}
	for i, c := range cases {
		h := c.problem(uint64(1300 + i))
		for _, opt := range pairOptions(h.p)[1:] {
			p := *h.p
			p.Mask, p.Ext = opt.mask, opt.ext
			t.Run(fmt.Sprintf("%s/%s", c.name(i), opt.name), func(t *testing.T) { checkForcedBwdCM(t, b, l, &p, h, true, fh) })
		}
	}
}

// TestBwdCMRowBlocksOptions runs the dQ kernel's two row blocks per
// subgroup (rb2, forced, with and without the prefetch) with each option
// a model uses — a window with a softcap, ALiBi, dropout, key counts —
// against the float64 reference on the fp16-rounded inputs (rel_l2 ≤
// 4e-3, as TestBwdCM), and checks the refusal of a bias, of MODE 0 and of
// the pairs.
func TestBwdCMRowBlocksOptions(t *testing.T) {
	b, l := openBwdCM16(t)
	if !l.Mode1 {
		t.Skipf("%s: no MODE 1 (%s): no row blocks", b.info.Name, l.Why)
	}
	rbs := []bwdCMTile{{NSG: 4, Step: 32, Mode: 1, Prefetch: true, RowBlocks: 2}, {NSG: 2, Step: 32, Mode: 1, RowBlocks: 2}}
	bias := ExtrasOf(l, &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{}})
	for _, bad := range []struct {
		c bwdCMTile
		x TileExtras
	}{{rbs[0], bias}, {bwdCMTile{NSG: 4, Step: 32, Mode: 0, RowBlocks: 2}, TileExtras{}}, {bwdCMTile{NSG: 4, Step: 32, Mode: 1, Pairs: true, RowBlocks: 2}, TileExtras{}}} {
		if err := bwdCMCheckTile(l, false, bad.c, 64, 64, bad.x, b.lim.SharedBytes, b.lim.MaxWorkgroupSize); err == nil || !strings.Contains(err.Error(), "row blocks") {
			t.Errorf("%s (bias %v): %v, want a refusal of its row blocks", bad.c, bad.x.BiasElem != 0, err)
		}
	}
	if err := bwdCMCheckTile(l, true, rbs[0], 64, 64, TileExtras{}, b.lim.SharedBytes, b.lim.MaxWorkgroupSize); err == nil || !strings.Contains(err.Error(), "row blocks") {
		t.Errorf("%s for the dK/dV kernel: %v, want a refusal of its row blocks", rbs[0], err)
	}
	cases := []hostCase{{1, 2, 1, 150, 170, 64, 64, spec.MaskCausalBottomRight}, {2, 2, 2, 33, 97, 40, 64, spec.MaskNone}}
	for i, c := range cases {
		h := c.problem(uint64(1400 + i))
		for _, opt := range pairOptions(h.p) {
			for _, rb := range rbs {
				p := *h.p
				p.Mask, p.Ext = opt.mask, opt.ext
				t.Run(fmt.Sprintf("%s/%s/%s", c.name(i), opt.name, rb), func(t *testing.T) { checkForcedBwdCM(t, b, l, &p, h, false, rb) })
			}
		}
	}
}

// checkForcedBwdCM forces tile c on b's dK/dV (dkdv) or dQ kernel for
// problems like p (skipping the test where c does not fit), checks that
// p's backward launches it, and checks p's fp16 gradients against the
// float64 reference (checkBwdF16).
func checkForcedBwdCM(t *testing.T, b *Backend, l *CMLayout, p *spec.Problem, h *hostProblem, dkdv bool, c bwdCMTile) {
	t.Helper()
	if err := bwdCMCheckTile(l, dkdv, c, p.D, p.Dv, ExtrasOf(l, p.Ext), b.lim.SharedBytes, b.lim.MaxWorkgroupSize); err != nil {
		t.Skipf("%s does not fit here: %v", c, err)
	}
	stage := shaders.KernelBwdCMDQ
	if dkdv {
		stage = shaders.KernelBwdCMDKDV
	}
	force(b, stage, p, spec.Float16, c)
	defer b.tune.clearOverrides()
	ls, err := b.Launches(context.Background(), p, spec.Float16, true)
	if err != nil || !slices.ContainsFunc(ls, func(ln Launch) bool { return ln.Kernel == stage && ln.Config == c.String() }) {
		t.Fatalf("launches %+v, %v; want %s %s", ls, err, stage, c)
	}
	checkBwdF16(t, b, p, h, spectest.Reference(p))
}

// openBwdCM16 opens the default device and its fp16 coopmat layout,
// skipping the test where the device has no cooperative-matrix backward
// (CI's lavapipe).
func openBwdCM16(t *testing.T) (*Backend, *CMLayout) {
	t.Helper()
	b := openBackend(t, "")
	if b.cm[spec.Float16] == nil {
		t.Skipf("%s: no cooperative-matrix backward (no suitable KHR coopmat shape)", b.info.Name)
	}
	l, err := b.cmLayout(context.Background(), spec.Float16)
	if err != nil {
		t.Fatal(err)
	}
	return b, l
}

// checkBwdF16 runs p's backward in fp16 on b from h's inputs rounded to
// fp16 (O and the LSE from the float64 reference rp of the same inputs),
// with poisoned gradients, checks dQ, dK and dV against rp's (rel_l2 ≤
// 4e-3) and returns them.
func checkBwdF16(t *testing.T, b *Backend, p *spec.Problem, h *hostProblem, rp reference.Params) (dq, dk, dv []uint16) {
	t.Helper()
	q, k, v, dO := toF16(h.q), toF16(h.k), toF16(h.v), toF16(h.dO)
	q64, k64, v64, do64 := to64(fromF16(q)), to64(fromF16(k)), to64(fromF16(v)), to64(fromF16(dO))
	o, lse, err := reference.Forward(rp, q64, k64, v64)
	if err != nil {
		t.Fatal(err)
	}
	dq = slices.Repeat([]uint16{0x7e00}, len(q)) // NaN: unwritten
	dk = slices.Repeat([]uint16{0x7e00}, len(k))
	dv = slices.Repeat([]uint16{0x7e00}, len(v))
	if err := BackwardHost(context.Background(), b, p, q, k, v, toF16(to32(o)), to32(lse), dO, dq, dk, dv, HostBias{}); err != nil {
		t.Fatal(err)
	}
	rdq, rdk, rdv, err := reference.Backward(rp, q64, k64, v64, do64)
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "dq", fromF16(dq), rdq, 4e-3)
	checkClose(t, "dk", fromF16(dk), rdk, 4e-3)
	checkClose(t, "dv", fromF16(dv), rdv, 4e-3)
	return dq, dk, dv
}
