//go:build cgo

package vkattn

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

var limitSets = []struct {
	name string
	lim  shaders.Limits
}{
	{"lavapipe", shaders.Limits{SharedBytes: 32768, Subgroup: 8, MaxWorkgroupSize: 1024}},
	{"h200", shaders.Limits{SharedBytes: 49152, Subgroup: 32, MaxWorkgroupSize: 1024}},
	{"amd", shaders.Limits{SharedBytes: 65536, Subgroup: 64, MaxWorkgroupSize: 1024}},
}

// TestDefaultConfig: every scalar kernel has a valid default for every
// head dim on the devices we know, within the limits it was chosen for.
func TestDefaultConfig(t *testing.T) {
	for _, ls := range limitSets {
		for _, k := range shaders.Kernels {
			for _, d := range []int{1, 16, 40, 64, 80, 96, 128, 160, 192, 256} {
				for _, dv := range []int{d, 1 + d/3} {
					for _, f16 := range []bool{false, true} {
						c, err := defaultConfig(k, d, dv, f16, ls.lim)
						if err != nil {
							t.Errorf("%s %s D=%d DV=%d: %v", ls.name, k, d, dv, err)
							continue
						}
						if err := shaders.CheckConfig(k, c, d, dv, f16, ls.lim); err != nil {
							t.Errorf("%s %s: defaultConfig %+v fails CheckConfig: %v", ls.name, k, c, err)
						}
						if (k == shaders.KernelFlash || k == shaders.KernelBwdPre) && c.WG%ls.lim.Subgroup != 0 {
							t.Errorf("%s %s d=%d: WG %d not a multiple of the subgroup %d", ls.name, k, d, c.WG, ls.lim.Subgroup)
						}
					}
				}
			}
		}
	}
	// A few expectations that document the choices.
	for _, x := range []struct {
		k     string
		d     int
		lim   shaders.Limits
		wantC shaders.Config
	}{
		{shaders.KernelFlash, 128, limitSets[1].lim, shaders.Config{WG: 128, BR: 64, BC: 16}},
		{shaders.KernelFlash, 64, limitSets[0].lim, shaders.Config{WG: 64, BR: 64, BC: 16}},
	} {
		c, err := defaultConfig(x.k, x.d, x.d, false, x.lim)
		if err != nil || c != x.wantC {
			t.Errorf("%s D=%d subgroup %d: defaultConfig = %+v (%v), expected %+v", x.k, x.d, x.lim.Subgroup, c, err, x.wantC)
		}
	}
}

func TestSizeClass(t *testing.T) {
	for _, n := range []int64{1, 3, 255, 256, 257, 1000, 4096, 4097, 1 << 20, 3<<20 + 1, 1<<31 + 5} {
		c := sizeClass(n)
		if c < n || c%4 != 0 || float64(c) > 1.25*float64(n)+256 {
			t.Errorf("sizeClass(%d) = %d", n, c)
		}
	}
}

func bshdProblem(b, hq, hkv, nq, nk, d int) *spec.Problem {
	return &spec.Problem{B: b, Hq: hq, Hkv: hkv, Nq: nq, Nk: nk, D: d, Dv: d, Scale: 0.125,
		Q: spec.BSHD(nq, hq, d), K: spec.BSHD(nk, hkv, d), V: spec.BSHD(nk, hkv, d), O: spec.BSHD(nq, hq, d)}
}

// TestMaxBatchChunk: problems too large for one buffer are split by batch;
// one batch beyond 32-bit offsets, or a naive score matrix beyond the
// largest buffer, is refused with a size in the message; with device
// addresses the storage operands are bounded by the largest buffer only
// (and a batch stride beyond 32 bits runs one batch at a time), while
// LSE and scratch stay bound.
func TestMaxBatchChunk(t *testing.T) {
	const big = int64(1) << 40
	// bound: every operand through a binding of n bytes.
	bound := func(n int64, z uint32) chunkLimits { return chunkLimits{bind: n, buf: n, maxZ: z} }
	// Everything fits: one chunk.
	p := bshdProblem(4, 8, 8, 1024, 1024, 64)
	bwd := map[Operand]int64{OpD: BackwardScratchBytes(&spec.Problem{B: 1, Hq: 8, Nq: 1024})}
	if n, err := maxBatchChunk(p, spec.Float32, true, bwd, bound(big, 65535)); err != nil || n != 4 {
		t.Errorf("fits: %d, %v; want 4", n, err)
	}
	// 128 MiB buffers: each batch of Q is 8·1024·64·4 = 2 MiB; B = 100
	// needs 200 MiB → chunks of 64.
	p = bshdProblem(100, 8, 8, 1024, 1024, 64)
	if n, err := maxBatchChunk(p, spec.Float32, false, nil, bound(128<<20, 65535)); err != nil || n != 64 {
		t.Errorf("128 MiB: %d, %v; want 64", n, err)
	}
	// The grid's z dimension bounds the chunk too.
	if n, err := maxBatchChunk(p, spec.Float32, false, nil, bound(big, 7)); err != nil || n != 7 {
		t.Errorf("maxZ 7: %d, %v; want 7", n, err)
	}
	// 32-bit offsets: one batch of 2^20·64·128 = 2^33 elements.
	p = bshdProblem(1, 64, 64, 1<<20, 16, 128)
	_, err := maxBatchChunk(p, spec.Float16, false, nil, bound(big, 65535))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "8589934592 elements") {
		t.Errorf("uint32 overflow: %v", err)
	}
	// f16 batches of 2^30 elements: 2^32 elements hold 4 of them.
	p = bshdProblem(9, 1, 1, 1<<24, 16, 64)
	if n, err := maxBatchChunk(p, spec.Float16, false, nil, bound(big, 65535)); err != nil || n != 4 {
		t.Errorf("32-bit chunks: %d, %v; want 4", n, err)
	}
	// Naive: 8192² scores ·4 = 256 MiB > 128 MiB.
	p = bshdProblem(1, 1, 1, 8192, 8192, 8)
	one := *p
	_, err = maxBatchChunk(p, spec.Float32, false, map[Operand]int64{OpScores: NaiveScratchBytes(&one)}, bound(128<<20, 65535))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "268435456 bytes") || !strings.Contains(err.Error(), "scores") {
		t.Errorf("naive scratch: %v", err)
	}
	// …while flash runs it.
	if _, err := maxBatchChunk(p, spec.Float32, false, nil, bound(128<<20, 65535)); err != nil {
		t.Errorf("flash, same problem: %v", err)
	}
	// Naive with B = 4 of 64 MiB each: chunks of 2.
	p = bshdProblem(4, 1, 1, 4096, 4096, 8)
	one = *p
	one.B = 1
	if n, err := maxBatchChunk(p, spec.Float32, false, map[Operand]int64{OpScores: NaiveScratchBytes(&one)}, bound(128<<20, 65535)); err != nil || n != 2 {
		t.Errorf("naive chunks: %d, %v; want 2", n, err)
	}
	// Device addresses: the 2^33-element batch runs (in a 64 GiB buffer),
	// one at a time when its batch stride exceeds 32 bits.
	addr := chunkLimits{bind: 4 << 30, buf: 64 << 30, addressed: true, maxZ: 65535}
	p = bshdProblem(3, 64, 64, 1<<20, 16, 128)
	if n, err := maxBatchChunk(p, spec.Float16, false, nil, addr); err != nil || n != 1 {
		t.Errorf("addressed, batch stride 2^33: %d, %v; want 1", n, err)
	}
	// …but not in a 8 GiB one.
	addr.buf = 8 << 30
	if _, err := maxBatchChunk(p, spec.Float16, false, nil, addr); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "largest buffer") {
		t.Errorf("addressed, 16 GiB batch in 8 GiB buffers: %v", err)
	}
	// Batches of 2^30 elements (2 GiB): bindings are preferred while one
	// batch fits one (4 GiB, 2^32 elements: 2 a chunk).
	addr.buf = 16 << 30
	p = bshdProblem(9, 1, 1, 1<<24, 16, 64)
	if n, err := maxBatchChunk(p, spec.Float16, false, nil, addr); err != nil || n != 2 {
		t.Errorf("bindings preferred: %d, %v; want 2", n, err)
	}
	// LSE stays bound: with 32 MiB bindings one batch of Q (128 MiB)
	// needs addresses, and B·Hq·Nq = 2^24 rows of LSE (64 MiB) are bound,
	// 8 batches of 2^20 a chunk.
	addr.bind = 32 << 20
	p = bshdProblem(16, 1, 1, 1<<20, 16, 64)
	if n, err := maxBatchChunk(p, spec.Float16, false, nil, addr); err != nil || n != 8 {
		t.Errorf("addressed, LSE bound: %d, %v; want 8", n, err)
	}
}

func TestCheckProblem(t *testing.T) {
	good := bshdProblem(1, 4, 2, 8, 8, 16)
	if err := CheckProblem(good); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(p *spec.Problem){
		"zero B":   func(p *spec.Problem) { p.B = 0 },
		"D > 256":  func(p *spec.Problem) { p.D = 257 },
		"gqa":      func(p *spec.Problem) { p.Hkv = 3 },
		"mask":     func(p *spec.Problem) { p.Mask = 7 },
		"scale 0":  func(p *spec.Problem) { p.Scale = 0 },
		"scale ∞":  func(p *spec.Problem) { p.Scale = float32(math.Inf(1)) },
		"nil prob": nil,
	} {
		var p *spec.Problem
		if mod != nil {
			c := *good
			mod(&c)
			p = &c
		}
		if err := CheckProblem(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestParams(t *testing.T) {
	p := bshdProblem(1, 4, 2, 8, 1, 16)
	p.Mask = spec.MaskCausalBottomRight
	pc := params(p)
	// Dimensions of extent 1 send stride 0 (B = 1, Nk = 1).
	if pc.QB != 0 || pc.KB != 0 || pc.KS != 0 || pc.QS != uint32(p.Q.Seq) || pc.Group != 2 || pc.Mask != 2 || pc.Scale != p.Scale {
		t.Errorf("params %+v", pc)
	}
}
