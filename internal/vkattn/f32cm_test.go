//go:build cgo

package vkattn

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
	"github.com/flashvk/flashvk/reference"
)

// openF32CM opens the default device and its f32 coopmat layout (bf16's,
// with three planes), skipping the test where the device has no bf16
// cooperative matrices for the planes (CI's lavapipe).
func openF32CM(t *testing.T) (*Backend, *CMLayout) {
	t.Helper()
	b, l := openCMLayout(t, spec.Float32)
	if l.planes() != shaders.CMPlanes(shaders.DTypeF32) {
		t.Fatalf("f32 layout has %d planes", l.planes())
	}
	return b, l
}

// TestF32CM runs flash_cm's f32 build (every operand in three bf16 planes)
// in every tile cmSplitTiles lists, and MODE 1 with prefetch, on awkward
// problems (and ones with thousands of keys) against the float64 reference
// at the fp32 bound (rel_l2 ≤ 1e-5 on O and LSE), with poisoned outputs;
// above d 128 (cmSplitMaxD) the forward is the scalar kernel's.
func TestF32CM(t *testing.T) {
	b, l := openF32CM(t)
	ctx := context.Background()
	const tol = 1e-5
	cases := append(awkwardCases[:len(awkwardCases):len(awkwardCases)],
		hostCase{1, 2, 1, 300, 333, 64, 64, spec.MaskCausalBottomRight},
		hostCase{1, 1, 1, 260, 200, 128, 128, spec.MaskNone},
		// Many keys: O's error must not grow with Nk (a tile's P·V is
		// added to O in fp32 arithmetic, not on the matrix units).
		hostCase{1, 2, 1, 64, 4096, 128, 128, spec.MaskNone},
		hostCase{1, 1, 1, 40, 6000, 64, 64, spec.MaskCausalBottomRight})
	for i, c := range cases {
		h := c.problem(uint64(500 + i))
		p := h.p
		rp := h.ref()
		ro, rlse, err := reference.Forward(rp, to64(h.q), to64(h.k), to64(h.v))
		if err != nil {
			t.Fatal(err)
		}
		tiles := cmSplitTiles(l, p.D, p.Dv)
		if l.Mode1 {
			tiles = append(tiles, CMTile{NSG: 4, BC: 16, Mode: 1, Prefetch: true}, CMTile{NSG: 8, BC: 32, Mode: 1, Prefetch: true})
		}
		var fit []CMTile
		for _, tl := range tiles {
			if CheckCMTile(l, tl, p.D, p.Dv, TileExtras{}, b.lim.SharedBytes, b.lim.MaxWorkgroupSize) == nil {
				fit = append(fit, tl)
			}
		}
		if len(fit) == 0 {
			t.Run(fmt.Sprintf("%s/none", c.name(i)), func(t *testing.T) {
				if kn := familyOf(ctx, b, p, spec.Float32, Fwd); kn == shaders.KernelFlashCM {
					t.Fatalf("no f32 tile runs d %d, yet the forward runs %q", p.D, kn)
				}
			})
			continue
		}
		for _, tl := range fit {
			t.Run(fmt.Sprintf("%s/%s", c.name(i), tl), func(t *testing.T) {
				force(b, shaders.KernelFlashCM, p, spec.Float32, tl)
				defer b.tune.clearOverrides()
				ls, err := b.Launches(ctx, p, spec.Float32, false)
				if err != nil {
					t.Fatal(err)
				}
				if len(ls) != 1 || ls[0].Kernel != shaders.KernelFlashCM || ls[0].Config != tl.String() {
					t.Fatalf("launches %+v; want flash_cm %s", ls, tl)
				}
				o := slices.Repeat([]float32{float32(math.NaN())}, len(h.o)) // unwritten
				lse := slices.Repeat([]float32{float32(math.NaN())}, len(h.lse))
				if err := ForwardHost(ctx, b, p, h.q, h.k, h.v, o, lse, HostBias{}); err != nil {
					t.Fatal(err)
				}
				checkClose(t, "o", o, ro, tol)
				checkClose(t, "lse", lse, rlse, tol)
			})
		}
	}
}

// TestF32BwdCM runs the coopmat backward's f32 build (every operand, P and
// dS in three bf16 planes) in every tile bwdCMSplitTiles lists for each
// kernel (the other kernel at its default), on awkward problems and ones
// whose gradients sum thousands of products (dQ over 4096 keys, dK and dV
// over 4096 query rows), against the float64 reference at the fp32 bound
// (rel_l2 ≤ 1e-5 on dQ, dK, dV), with poisoned outputs and bitwise
// repeatability; from d 64 (bwdCMSplitWholeMaxD) to 128 (bwdCMSplitMaxD)
// in subgroup pairs over the features (D and Dv padded to whole pairs of
// chunks: d 72 and 80 to 96); where no tile runs, the backward is the
// scalar kernels'.
func TestF32BwdCM(t *testing.T) {
	b, l := openF32CM(t)
	ctx := context.Background()
	const tol = 1e-5
	cases := append(awkwardCases[:len(awkwardCases):len(awkwardCases)],
		hostCase{1, 2, 1, 300, 333, 64, 64, spec.MaskCausalBottomRight},
		hostCase{2, 2, 2, 33, 97, 32, 16, spec.MaskNone},
		hostCase{1, 1, 1, 17, 5, 8, 8, spec.MaskCausalTopLeft},
		// Head dims not multiples of 8: element loads, partial fp32 stores.
		hostCase{1, 2, 1, 70, 90, 36, 20, spec.MaskCausalBottomRight},
		hostCase{1, 2, 1, 64, 4096, 64, 64, spec.MaskNone},
		hostCase{1, 1, 1, 4096, 40, 64, 64, spec.MaskNone},
		// Pairs over the features: d 96 and 128, D ≠ Dv, GQA, thousands of
		// keys and of query rows.
		hostCase{1, 2, 1, 300, 333, 128, 128, spec.MaskCausalBottomRight},
		hostCase{2, 2, 2, 33, 97, 96, 64, spec.MaskNone},
		hostCase{1, 4, 2, 17, 50, 128, 32, spec.MaskCausalTopLeft},
		hostCase{1, 2, 1, 90, 110, 72, 72, spec.MaskCausalBottomRight},
		hostCase{1, 2, 1, 64, 4096, 128, 128, spec.MaskNone},
		hostCase{1, 1, 1, 4096, 40, 128, 128, spec.MaskNone})
	for i, c := range cases {
		h := c.problem(uint64(700 + i))
		p := h.p
		rp := h.ref()
		q64, k64, v64, do64 := to64(h.q), to64(h.k), to64(h.v), to64(h.dO)
		o, lse, err := reference.Forward(rp, q64, k64, v64)
		if err != nil {
			t.Fatal(err)
		}
		rdq, rdk, rdv, err := reference.Backward(rp, q64, k64, v64, do64)
		if err != nil {
			t.Fatal(err)
		}
		o32, lse32 := to32(o), to32(lse)
		fits := func(dkdv bool) []bwdCMTile {
			var fit []bwdCMTile
			for _, tl := range bwdCMSplitTiles(l, dkdv, p.D, p.Dv) {
				if bwdCMCheckTile(l, dkdv, tl, p.D, p.Dv, TileExtras{}, b.lim.SharedBytes, b.lim.MaxWorkgroupSize) == nil {
					fit = append(fit, tl)
				}
			}
			return fit
		}
		if len(fits(true)) == 0 || len(fits(false)) == 0 {
			t.Run(c.name(i)+"/scalar", func(t *testing.T) {
				if max(p.D, p.Dv) <= bwdCMSplitWholeMaxD && l.Mode1 {
					t.Fatalf("no f32 tile runs d %d, %d", p.D, p.Dv)
				}
				if kn := familyOf(ctx, b, p, spec.Float32, Bwd); kn != "bwd" {
					t.Fatalf("the f32 backward of d %d, %d runs %q, want the scalar bwd", p.D, p.Dv, kn)
				}
			})
			continue
		}
		for _, dkdv := range []bool{true, false} {
			stage := shaders.KernelBwdCMDQ
			if dkdv {
				stage = shaders.KernelBwdCMDKDV
			}
			for _, tl := range fits(dkdv) {
				t.Run(fmt.Sprintf("%s/%s/%s", c.name(i), stage, tl), func(t *testing.T) {
					force(b, stage, p, spec.Float32, tl)
					defer b.tune.clearOverrides()
					ls, err := b.Launches(ctx, p, spec.Float32, true)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.ContainsFunc(ls, func(ln Launch) bool { return ln.Kernel == stage && ln.Config == tl.String() }) {
						t.Fatalf("launches %+v; want %s %s", ls, stage, tl)
					}
					run := func() (dq, dk, dv []float32) {
						dq = slices.Repeat([]float32{float32(math.NaN())}, len(h.q)) // unwritten
						dk = slices.Repeat([]float32{float32(math.NaN())}, len(h.k))
						dv = slices.Repeat([]float32{float32(math.NaN())}, len(h.v))
						if err := BackwardHost(ctx, b, p, h.q, h.k, h.v, o32, lse32, h.dO, dq, dk, dv, HostBias{}); err != nil {
							t.Fatal(err)
						}
						return dq, dk, dv
					}
					dq, dk, dv := run()
					checkClose(t, "dq", dq, rdq, tol)
					checkClose(t, "dk", dk, rdk, tol)
					checkClose(t, "dv", dv, rdv, tol)
					dq2, dk2, dv2 := run()
					if !slices.Equal(dq, dq2) || !slices.Equal(dk, dk2) || !slices.Equal(dv, dv2) {
						t.Error("gradients differ bitwise between two runs")
					}
				})
			}
		}
	}
}

// TestBwdCMSplitRules: the backward's f32 tile rules on the NVIDIA layout
// with three planes, without a device: the defaults fit an H200's limits
// at d 64, and the pairs over the features at d 80, 96 and 128 (D ≠ Dv
// too); MODE 0, KVReg and split tiles are refused, whole operands above d
// 64, pairs over an odd subgroup count, and on a 16-bit layout; head dims
// above bwdCMSplitMaxD are refused once; and a layout without MODE 1 has
// no f32 tile.
func TestBwdCMSplitRules(t *testing.T) {
	l := *nvidiaLayout(t)
	l.Storage = spec.Float32
	const sharedMax, maxWG = 48 << 10, 1024
	for _, dkdv := range []bool{true, false} {
		for _, d := range [][2]int{{64, 64}, {128, 128}, {96, 64}, {32, 128}, {80, 80}, {72, 40}} {
			ts := bwdCMSplitTiles(&l, dkdv, d[0], d[1])
			if len(ts) == 0 {
				t.Fatalf("dkdv %v: no f32 tiles at d %v", dkdv, d)
			}
			for _, c := range ts {
				if err := bwdCMCheckTile(&l, dkdv, c, d[0], d[1], TileExtras{}, sharedMax, maxWG); err != nil {
					t.Errorf("dkdv %v: default %s at d %v: %v", dkdv, c, d, err)
				}
				if c.FHalves != (max(d[0], d[1]) > 64) {
					t.Errorf("dkdv %v: default %s at d %v", dkdv, c, d)
				}
			}
		}
		for _, bad := range []struct {
			c     bwdCMTile
			d, dv int
		}{
			{bwdCMTile{NSG: 4, Step: 16, Mode: 0}, 64, 64},
			{bwdCMTile{NSG: 4, Step: 16, Mode: 1, KVReg: dkdv, Split: !dkdv}, 64, 64},
			{bwdCMTile{NSG: 4, Step: 16, Mode: 1}, 128, 128},
			{bwdCMTile{NSG: 4, Step: 16, Mode: 1}, 64, 80},
			{bwdCMTile{NSG: 3, Step: 16, Mode: 1, FHalves: true}, 128, 128},
			{bwdCMTile{NSG: 4, Step: 16, Mode: 0, FHalves: true}, 128, 128},
		} {
			if bwdCMCheckTile(&l, dkdv, bad.c, bad.d, bad.dv, TileExtras{}, sharedMax, maxWG) == nil {
				t.Errorf("dkdv %v: f32 tile %s accepted at d %d, %d", dkdv, bad.c, bad.d, bad.dv)
			}
		}
		// The 16-bit builds pair over the features in the dK/dV kernel
		// only, with K and V in registers.
		l16 := *nvidiaLayout(t)
		err16 := bwdCMCheckTile(&l16, dkdv, bwdCMTile{NSG: 4, Step: 16, Mode: 1, FHalves: true}, 128, 128, TileExtras{}, sharedMax, maxWG)
		if want := map[bool]string{true: "(kv1)", false: "(dq2)"}[dkdv]; err16 == nil || !strings.Contains(err16.Error(), want) {
			t.Errorf("dkdv %v: fh2 on a 16-bit layout: %v", dkdv, err16)
		}
		if err := bwdCMCheckTile(&l16, true, bwdCMTile{NSG: 8, Step: 16, Mode: 1, KVReg: true, FHalves: true}, 256, 256, TileExtras{}, sharedMax, maxWG); err != nil {
			t.Errorf("16-bit nsg8-step16-mode1-kv1-fh2 at d 256: %v", err)
		}
		if err := bwdCMCheckTile(&l16, true, bwdCMTile{NSG: 4, Step: 32, Mode: 1, KVReg: true, Split: true, FHalves: true}, 256, 256, TileExtras{}, sharedMax, maxWG); err == nil {
			t.Error("16-bit fh2 with split launches accepted")
		}
		_, err := chooseBwdCMTile(&l, dkdv, 192, 64, spec.MaskNone, nil, sharedMax, maxWG)
		if err == nil || strings.Count(err.Error(), "takes 1 … 128") != 1 {
			t.Errorf("dkdv %v: f32 d 192: %v", dkdv, err)
		}
		m0 := l
		m0.Mode1, m0.Why = false, "synthetic"
		if _, err := chooseBwdCMTile(&m0, dkdv, 64, 64, spec.MaskNone, nil, sharedMax, maxWG); err == nil || !strings.Contains(err.Error(), "synthetic") {
			t.Errorf("dkdv %v: f32 without MODE 1: %v", dkdv, err)
		}
	}
}
