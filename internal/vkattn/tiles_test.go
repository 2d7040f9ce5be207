package vkattn

import (
	"bytes"
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

// TestTileTableRespectsLimits checks every default tile against the
// limits it was chosen for: it passes CheckConfig, fits shared memory and
// the workgroup limit, and the subgroup kernels get whole subgroups.
func TestTileTableRespectsLimits(t *testing.T) {
	for _, ls := range limitSets {
		t.Run(ls.name, func(t *testing.T) {
			rows := TileTable(ls.lim, shaders.Kernels, []DType{F32, F16})
			if want := len(shaders.Kernels) * 2 * len(TileHeadDims); len(rows) != want {
				t.Fatalf("%d rows, want %d", len(rows), want)
			}
			for _, r := range rows {
				if r.Err != nil {
					t.Errorf("%s %v d=%d: %v", r.Kernel, r.DType, r.D, r.Err)
					continue
				}
				c := r.Config
				if err := shaders.CheckConfig(r.Kernel, c, r.D, r.DV, r.DType == F16, ls.lim); err != nil {
					t.Errorf("%s %v d=%d %+v: %v", r.Kernel, r.DType, r.D, c, err)
				}
				if r.SharedBytes > ls.lim.SharedBytes {
					t.Errorf("%s d=%d %+v: %d shared bytes > %d", r.Kernel, r.D, c, r.SharedBytes, ls.lim.SharedBytes)
				}
				if c.WG < 1 || c.WG > ls.lim.MaxWorkgroupSize {
					t.Errorf("%s d=%d: WG %d outside 1…%d", r.Kernel, r.D, c.WG, ls.lim.MaxWorkgroupSize)
				}
				if (r.Kernel == shaders.KernelFlash || r.Kernel == shaders.KernelBwdPre) && c.WG%ls.lim.Subgroup != 0 {
					t.Errorf("%s d=%d: WG %d not a multiple of the subgroup %d", r.Kernel, r.D, c.WG, ls.lim.Subgroup)
				}
			}
			var buf bytes.Buffer
			FormatTiles(&buf, rows)
			t.Logf("tiles for %s %+v:\n%s", ls.name, ls.lim, buf.String())
		})
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
// largest buffer, is refused with a size in the message.
func TestMaxBatchChunk(t *testing.T) {
	const big = int64(1) << 40
	// Everything fits: one chunk.
	p := bshdProblem(4, 8, 8, 1024, 1024, 64)
	if n, err := maxBatchChunk(p, F32, shaders.KernelFlash, true, big, 65535); err != nil || n != 4 {
		t.Errorf("fits: %d, %v; want 4", n, err)
	}
	// 128 MiB buffers: each batch of Q is 8·1024·64·4 = 2 MiB; B = 100
	// needs 200 MiB → chunks of 64.
	p = bshdProblem(100, 8, 8, 1024, 1024, 64)
	if n, err := maxBatchChunk(p, F32, shaders.KernelFlash, false, 128<<20, 65535); err != nil || n != 64 {
		t.Errorf("128 MiB: %d, %v; want 64", n, err)
	}
	// The grid's z dimension bounds the chunk too.
	if n, err := maxBatchChunk(p, F32, shaders.KernelFlash, false, big, 7); err != nil || n != 7 {
		t.Errorf("maxZ 7: %d, %v; want 7", n, err)
	}
	// 32-bit offsets: one batch of 2^20·64·128 = 2^33 elements.
	p = bshdProblem(1, 64, 64, 1<<20, 16, 128)
	_, err := maxBatchChunk(p, F16, shaders.KernelFlash, false, big, 65535)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "8589934592 elements") {
		t.Errorf("uint32 overflow: %v", err)
	}
	// f16 batches of 2^30 elements: 2^32 elements hold 4 of them.
	p = bshdProblem(9, 1, 1, 1<<24, 16, 64)
	if n, err := maxBatchChunk(p, F16, shaders.KernelFlash, false, big, 65535); err != nil || n != 4 {
		t.Errorf("32-bit chunks: %d, %v; want 4", n, err)
	}
	// Naive: 8192² scores ·4 = 256 MiB > 128 MiB.
	p = bshdProblem(1, 1, 1, 8192, 8192, 8)
	_, err = maxBatchChunk(p, F32, shaders.KernelNaive, false, 128<<20, 65535)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "268435456 bytes") || !strings.Contains(err.Error(), "naive") {
		t.Errorf("naive scratch: %v", err)
	}
	// …while flash runs it.
	if _, err := maxBatchChunk(p, F32, shaders.KernelFlash, false, 128<<20, 65535); err != nil {
		t.Errorf("flash, same problem: %v", err)
	}
	// Naive with B = 4 of 64 MiB each: chunks of 2.
	p = bshdProblem(4, 1, 1, 4096, 4096, 8)
	if n, err := maxBatchChunk(p, F32, shaders.KernelNaive, false, 128<<20, 65535); err != nil || n != 2 {
		t.Errorf("naive chunks: %d, %v; want 2", n, err)
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
