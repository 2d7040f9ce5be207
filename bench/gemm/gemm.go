//go:build cgo

package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/pipeline"
	"github.com/flashvk/flashvk/internal/vkattn"
)

// gemmVariant is one GEMM kernel configuration.
type gemmVariant struct {
	Name, Kernel   string
	BM, BN, BK, WG int
	WM, WN, Stages int
	PF, Raster     int  // gemm_khr: register prefetch depth, workgroup bands (gemm_khr.comp)
	Probe          int  // gemm_khr: a timing probe (gemm_khr.comp's PROBE; its C is not checked)
	Direct         bool // gemm_khr: fragments loaded straight from the buffers (gemm_khr.comp's DIRECT)
	Pad, Pipe      int
	Note           string
}

func gemmVariants(info device.Info, sh device.CoopMatShape) []gemmVariant {
	sg := int(info.SubgroupSize)
	// khr: STAGES 1 without prefetch, 2 with one register set ahead.
	khr := func(name string, bm, bn, bk, wm, wn, stages, pad int, note string) gemmVariant {
		return gemmVariant{Name: name, Kernel: "gemm_khr", BM: bm, BN: bn, BK: bk, WM: wm, WN: wn, WG: wm * wn * sg, Stages: stages, PF: stages - 1, Pad: pad, Note: note}
	}
	// khrp: any shared buffers, register sets and band width.
	khrp := func(name string, bm, bn, bk, wm, wn, stages, pf, raster int, note string) gemmVariant {
		v := khr(name, bm, bn, bk, wm, wn, stages, 1, note)
		v.PF, v.Raster = pf, raster
		return v
	}
	// probe: a timing probe of PROBE kind on STAGES stages (gemm_khr.comp).
	probe := func(name string, bm, bn, bk, wm, wn, stages, kind int, note string) gemmVariant {
		v := khr(name, bm, bn, bk, wm, wn, stages, 1, note)
		v.Probe = kind
		return v
	}
	// direct: every subgroup's fragments from the buffers, no staging
	// (gemm_khr.comp's DIRECT), workgroups in bands of raster tile rows.
	direct := func(name string, bm, bn, wm, wn, raster int, note string) gemmVariant {
		v := khrp(name, bm, bn, 32, wm, wn, 1, 1, raster, note)
		v.Direct = true
		return v
	}
	cm2 := func(name string, bm, bn, bk, wg, pipe int, note string) gemmVariant {
		return gemmVariant{Name: name, Kernel: "gemm_cm2", BM: bm, BN: bn, BK: bk, WG: wg, Pipe: pipe, Note: note}
	}
	return []gemmVariant{
		khr("khr-128x128x32-s1", 128, 128, 32, 2, 2, 1, 1, "4 subgroups of 64x64, single buffer"),
		khr("khr-128x128x32-s2", 128, 128, 32, 2, 2, 2, 1, "double-buffered shared, register prefetch"),
		khr("khr-128x128x32-s2-nopad", 128, 128, 32, 2, 2, 2, 0, "as s2 without row padding"),
		khr("khr-128x128x32-s2-8sg", 128, 128, 32, 4, 2, 2, 1, "8 subgroups of 32x64"),
		khr("khr-128x256x16-s2", 128, 256, 16, 2, 4, 2, 1, "8 subgroups of 64x64"),
		khr("khr-256x128x16-s2", 256, 128, 16, 4, 2, 2, 1, "8 subgroups of 64x64"),
		khr("khr-64x128x32-s2", 64, 128, 32, 1, 2, 2, 1, "2 subgroups of 64x64 (more workgroups)"),
		khrp("khr-128x128x32-s2-r8", 128, 128, 32, 2, 2, 2, 1, 8, "s2, workgroups in bands of 8 tile rows"),
		khrp("khr-128x128x32-s2pf2", 128, 128, 32, 2, 2, 2, 2, 0, "s2, loads two steps ahead"),
		khrp("khr-128x128x32-s2pf2-r8", 128, 128, 32, 2, 2, 2, 2, 8, "s2pf2 in bands of 8"),
		khrp("khr-128x128x64-s1pf1", 128, 128, 64, 2, 2, 1, 1, 0, "one buffer of BK 64, loads a step ahead"),
		khrp("khr-128x128x64-s1pf1-r8", 128, 128, 64, 2, 2, 1, 1, 8, "s1pf1 in bands of 8"),
		khrp("khr-256x128x32-s1pf1", 256, 128, 32, 4, 2, 1, 1, 0, "8 subgroups of 64x64, one buffer"),
		khrp("khr-256x128x32-s1pf1-r8", 256, 128, 32, 4, 2, 1, 1, 8, "the same in bands of 8"),
		khrp("khr-128x256x32-s1pf1-r8", 128, 256, 32, 2, 4, 1, 1, 8, "8 subgroups of 64x64, one buffer, bands of 8"),
		khrp("khr-256x128x16-s2pf2-r8", 256, 128, 16, 4, 2, 2, 2, 8, "8 subgroups, BK 16, two steps ahead, bands of 8"),
		khrp("khr-128x128x32-s1pf1-r8", 128, 128, 32, 2, 2, 1, 1, 8, "one buffer: more workgroups per SM"),
		khrp("khr-192x128x32-s2", 192, 128, 32, 3, 2, 2, 1, 0, "6 subgroups of 64x64: 17% fewer L2 bytes a FLOP, 47 KiB"),
		khrp("khr-192x128x32-s2-r8", 192, 128, 32, 3, 2, 2, 1, 8, "the same in bands of 8"),
		khrp("khr-128x192x32-s2", 128, 192, 32, 2, 3, 2, 1, 0, "6 subgroups of 64x64, 45 KiB"),
		khrp("khr-192x128x32-s2pf2", 192, 128, 32, 3, 2, 2, 2, 0, "192x128, loads two steps ahead"),
		khrp("khr-64x64x32-s2pf2-r2", 64, 64, 32, 2, 2, 2, 2, 2, "small: fits a CPU driver's 32 KiB"),
		probe("probe-mma-128x128x32", 128, 128, 32, 2, 2, 1, 1, "MMAs only, fragments loaded once"),
		probe("probe-shared-128x128x32", 128, 128, 32, 2, 2, 1, 2, "fragment loads and MMAs, no barrier"),
		probe("probe-barrier-128x128x32", 128, 128, 32, 2, 2, 1, 3, "fragment loads, MMAs, a barrier a step"),
		probe("probe-mma-128x128x32-8sg", 128, 128, 32, 4, 2, 1, 1, "MMAs only, 8 subgroups of 32x64"),
		probe("probe-shared-128x128x32-8sg", 128, 128, 32, 4, 2, 1, 2, "fragment loads and MMAs, 8 subgroups of 32x64"),
		probe("probe-mma-64x64x32-4sg", 64, 64, 32, 2, 2, 1, 1, "MMAs only, 4 subgroups of 32x32"),
		probe("probe-l1-128x128x32-s2", 128, 128, 32, 2, 2, 2, 4, "s2 with every step's loads from tile 0 (L1 hits)"),
		probe("probe-l1-256x128x16-s2", 256, 128, 16, 4, 2, 2, 4, "the same, 8 subgroups, BK 16"),
		direct("direct-128x128", 128, 128, 2, 2, 0, "4 subgroups of 64x64, fragments from the buffers"),
		direct("direct-128x128-r8", 128, 128, 2, 2, 8, "the same in bands of 8"),
		direct("direct-256x128-r8", 256, 128, 4, 2, 8, "8 subgroups of 64x64, bands of 8"),
		direct("direct-128x128-8sg-r8", 128, 128, 4, 2, 8, "8 subgroups of 32x64, bands of 8"),
		direct("direct-64x64-r8", 64, 64, 2, 2, 8, "4 subgroups of 32x32, bands of 8"),
		cm2("cm2-128x128x32", 128, 128, 32, 128, 0, "anchor's naive configuration"),
		cm2("cm2-128x128x32-pipe", 128, 128, 32, 128, 1, "next loads issued before the multiply"),
		cm2("cm2-128x256x32", 128, 256, 32, 256, 0, ""),
		cm2("cm2-256x128x32", 256, 128, 32, 256, 0, ""),
		cm2("cm2-128x128x64", 128, 128, 64, 256, 0, ""),
		cm2("cm2-256x128x64-pipe", 256, 128, 64, 256, 1, ""),
	}
}

// gemmResult is one measured variant at one size.
type gemmResult struct {
	Variant    gemmVariant
	Size       int
	MedianMS   float64
	P10MS      float64
	P90MS      float64
	TFLOPS     float64
	RelErr     any
	Pass       bool
	SharedByte int
	// Compiler is the driver's register and local-memory counts of the
	// pipeline (empty where it reports none).
	Compiler string `json:",omitempty"`
	Err      string `json:",omitempty"`
}

// compilerStats is the driver's register count and local (spill) memory of
// pipeline p, as "Register Count=… Local Memory Size=…" (the names its
// statistics have on NVIDIA; empty without them).
func compilerStats(p *device.Pipeline) string {
	st, err := p.Statistics()
	if err != nil {
		return ""
	}
	var parts []string
	for _, s := range st {
		if strings.Contains(s.Name, "Register") || strings.Contains(s.Name, "Local Memory") || strings.Contains(s.Name, "Spill") {
			parts = append(parts, fmt.Sprintf("%s=%v", s.Name, s.Value))
		}
	}
	return strings.Join(parts, " ")
}

func newGemmPipeline(d *device.Device, v gemmVariant, sh device.CoopMatShape) (*device.Pipeline, int, error) {
	info := d.Info()
	if v.Kernel == "gemm_khr" {
		if ok := (v.Stages == 1 && v.PF <= 1) || (v.Stages == 2 && (v.PF == 1 || v.PF == 2)); !ok {
			return nil, 0, fmt.Errorf("no gemm_khr pipeline for STAGES %d with PF %d", v.Stages, v.PF)
		}
		lda4, ldb4 := v.BK/8+v.Pad, v.BN/8+v.Pad
		shared := 16 * v.Stages * (v.BM*lda4 + v.BK*ldb4)
		if v.Direct {
			shared = 16 // (gemm_khr.comp's one unused unit)
		}
		if shared > int(info.MaxSharedMemory) {
			return nil, shared, fmt.Errorf("shared %d > %d", shared, info.MaxSharedMemory)
		}
		if (v.BM/v.WM)%int(sh.M) != 0 || (v.BN/v.WN)%int(sh.N) != 0 || v.BK%int(sh.K) != 0 {
			return nil, shared, fmt.Errorf("tile not divisible by coopmat %v", sh)
		}
		direct := uint32(0)
		if v.Direct {
			direct = 1
		}
		sp := []device.Spec{spec(0, uint32(v.WG)), spec(1, uint32(v.BM)), spec(2, uint32(v.BN)), spec(3, uint32(v.BK)),
			spec(4, uint32(v.WM)), spec(5, uint32(v.WN)), spec(6, sh.M), spec(7, sh.N), spec(8, sh.K), spec(9, uint32(v.Stages)), spec(10, uint32(v.Pad)),
			spec(11, uint32(v.PF)), spec(12, uint32(v.Raster)), spec(13, uint32(v.Probe)), spec(14, direct)}
		p, err := d.NewPipeline(device.PipelineDesc{Name: v.Name, SPIRV: spirv("gemm_khr"), Spec: sp, PushSize: 12, Bindings: 3,
			RequiredSubgroupSize: subgroupReq(info), FullSubgroups: info.ComputeFullSubgroups})
		return p, shared, err
	}
	if err := cm2Supported(info); err != nil {
		return nil, 0, err
	}
	if m := info.CoopMat2.MaxWorkgroupScopeInvocations; m != 0 && uint32(v.WG) > m {
		return nil, 0, fmt.Errorf("workgroup %d > workgroup-scope max %d", v.WG, m)
	}
	sp := []device.Spec{spec(0, uint32(v.WG)), spec(1, uint32(v.BM)), spec(2, uint32(v.BN)), spec(3, uint32(v.BK)), spec(4, uint32(v.Pipe))}
	p, err := d.NewPipeline(device.PipelineDesc{Name: v.Name, SPIRV: spirv("gemm_cm2"), Spec: sp, PushSize: 12, Bindings: 3})
	return p, 0, err
}

func runGemm(ctx context.Context, d *device.Device, sizes []int, warm, iters int, logf func(string, ...any)) ([]gemmResult, error) {
	info := d.Info()
	sh, err := vkattn.CMShape(info)
	if err != nil {
		return nil, err
	}
	vars := gemmVariants(info, sh)
	var out []gemmResult
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range sizes {
		a := randF16(rng, n*n, false)
		b := randF16(rng, n*n, false)
		A, err := d.NewBuffer(int64(2 * n * n))
		if err != nil {
			return out, err
		}
		B, err := d.NewBuffer(int64(2 * n * n))
		if err != nil {
			A.Close()
			return out, err
		}
		C, err := d.NewBuffer(int64(4 * n * n))
		if err != nil {
			A.Close()
			B.Close()
			return out, err
		}
		if err := device.Upload(ctx, A, 0, a); err != nil {
			return out, err
		}
		if err := device.Upload(ctx, B, 0, b); err != nil {
			return out, err
		}
		push := pipeline.MustPush(struct{ M, N, K uint32 }{uint32(n), uint32(n), uint32(n)})
		// Sampled reference: 8 rows × 32 columns.
		srows := make([]int, 8)
		scols := make([]int, 32)
		for i := range srows {
			srows[i] = rng.IntN(n)
		}
		for j := range scols {
			scols[j] = rng.IntN(n)
		}
		ref := make([]float64, len(srows)*len(scols))
		for i, r := range srows {
			for j, c := range scols {
				var s float64
				for k := range n {
					s += float64(f16to32(a[r*n+k])) * float64(f16to32(b[k*n+c]))
				}
				ref[i*len(scols)+j] = s
			}
		}
		for _, v := range vars {
			if *flagGemmOnly != "" && !strings.Contains(v.Name, *flagGemmOnly) {
				continue
			}
			res := gemmResult{Variant: v, Size: n}
			func() {
				if n%v.BM != 0 || n%v.BN != 0 || n%v.BK != 0 {
					res.Err = "size not a multiple of the tile"
					return
				}
				if (v.PF > 1 && (n/v.BK)%2 != 0) || (v.Raster > 0 && (n/v.BM)%v.Raster != 0) {
					res.Err = "size not a multiple of the pipeline's steps or bands"
					return
				}
				p, shared, err := newGemmPipeline(d, v, sh)
				res.SharedByte = shared
				if err != nil {
					res.Err = err.Error()
					return
				}
				defer p.Close()
				res.Compiler = compilerStats(p)
				groups := [3]uint32{uint32(n / v.BN), uint32(n / v.BM), 1}
				disp := func(r *device.Recorder) error { return r.Dispatch(p, push, groups, A, B, C) }
				if err := d.Fill(ctx, C, 0x7FC00000); err != nil {
					res.Err = err.Error()
					return
				}
				r := d.Record()
				if err := disp(r); err != nil {
					res.Err = err.Error()
					return
				}
				if _, err := d.Submit(ctx, r); err != nil {
					res.Err = err.Error()
					return
				}
				got := make([]float64, len(ref))
				row := make([]float32, n)
				for i, rr := range srows {
					if err := device.Download(ctx, C, int64(4*rr*n), row); err != nil {
						res.Err = err.Error()
						return
					}
					for j, c := range scols {
						got[i*len(scols)+j] = float64(row[c])
					}
				}
				if v.Probe == 0 {
					e := relL2(got, ref)
					res.RelErr = jsonNum(e)
					res.Pass = e < 1e-4
				}
				t, err := timeDispatch(ctx, d, disp, warm, iters)
				if err != nil {
					res.Err = err.Error()
					return
				}
				res.MedianMS, res.P10MS, res.P90MS = t.ms(), float64(t.P10)/1e6, float64(t.P90)/1e6
				res.TFLOPS = 2 * math.Pow(float64(n), 3) / (t.ms() * 1e-3) / 1e12
			}()
			if res.Err != "" {
				logf("gemm %5d %-26s ERROR %s", n, v.Name, res.Err)
			} else {
				check := fmt.Sprintf("rel_err %.2e pass=%v", res.RelErr, res.Pass)
				if v.Probe != 0 {
					check = "probe (C not checked)"
				}
				logf("gemm %5d %-26s %8.3f ms %7.1f TFLOP/s  %s  %s", n, v.Name, res.MedianMS, res.TFLOPS, check, res.Compiler)
			}
			out = append(out, res)
		}
		A.Close()
		B.Close()
		C.Close()
	}
	return out, nil
}
