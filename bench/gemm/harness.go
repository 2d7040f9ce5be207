//go:build cgo

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/vkattn"
)

// kcfg is a kernel family plus configuration: flash_cm (cm) or flash_cm2 (cm2).
type kcfg struct {
	cm  *cmCfg
	cm2 *cm2Cfg
}

func (k kcfg) name() string {
	if k.cm != nil {
		return "flash_cm"
	}
	return "flash_cm2"
}

func (k kcfg) String() string {
	if k.cm != nil {
		return k.cm.String()
	}
	return k.cm2.String()
}

// family groups configurations whose best one goes to the grid.
func (k kcfg) family() string {
	if k.cm != nil {
		return fmt.Sprintf("cm-mode%d", k.cm.Mode)
	}
	return "cm2"
}

type harness struct {
	d     *device.Device
	lay   *vkattn.CMLayout
	rep   *report
	logf  func(string, ...any)
	pipes map[string]*attnKernel
	errs  map[string]error
	rng   *rand.Rand
	bad   map[string]bool // configurations that failed a check
	save  func()          // writes bench.json (progress survives a kill)
}

func (h *harness) closeAll() {
	for _, k := range h.pipes {
		k.close()
	}
}

// kernel returns the (cached) pipeline of c for the head dims and stride
// alignment of s.
func (h *harness) kernel(c kcfg, s attnShape) (*attnKernel, error) {
	key := fmt.Sprintf("%s/%s/%d/%d/%v", c.name(), c, s.D, s.DV, s.vecOK())
	if k, ok := h.pipes[key]; ok {
		return k, nil
	}
	if h.errs == nil {
		h.errs = map[string]error{}
	}
	if err, ok := h.errs[key]; ok {
		return nil, err
	}
	var k *attnKernel
	var err error
	t0 := time.Now()
	if c.cm != nil {
		if h.lay == nil {
			err = fmt.Errorf("no coopmat layout (probe failed)")
		} else {
			k, err = newFlashCM(h.d, h.lay, *c.cm, s)
		}
	} else {
		k, err = newFlashCM2(h.d, *c.cm2, s)
	}
	if err != nil {
		h.errs[key] = err
		return nil, err
	}
	if dt := time.Since(t0); dt > 2*time.Second {
		h.logf("  (pipeline %s d%d built in %v)", key, s.D, dt.Round(time.Millisecond))
	}
	h.pipes[key] = k
	return k, nil
}

// candidates lists the configurations tried.
func (h *harness) candidates() []kcfg {
	var out []kcfg
	if h.lay != nil {
		// (NSG, BC, prefetch, row blocks): the MODE 1 sweep (with d ≤ 64's
		// default of two row blocks), and MODE 0's fallback tiles.
		lists := map[int][][4]int{
			1: {{4, 32, 1, 0}, {4, 64, 1, 0}, {4, 64, 0, 0}, {4, 128, 1, 0}, {8, 32, 1, 0}, {8, 64, 1, 0}, {8, 64, 0, 0}, {8, 128, 1, 0},
				{4, 32, 1, 2}, {8, 32, 1, 2}},
			0: {{4, 32, 1, 0}, {4, 64, 1, 0}},
		}
		for _, mode := range []int{1, 0} {
			if mode == 1 && !h.lay.Mode1 {
				continue
			}
			for _, x := range lists[mode] {
				c := cmCfg{NSG: x[0], BC: x[1], Mode: mode, Prefetch: x[2] == 1, RowBlocks: x[3]}
				out = append(out, kcfg{cm: &c})
			}
		}
	}
	if *flagOnly != "" {
		var f []kcfg
		for _, c := range out {
			if strings.Contains(c.name()+"/"+c.String(), *flagOnly) {
				f = append(f, c)
			}
		}
		out = f
	}
	if cm2Supported(h.d.Info()) == nil && (*flagOnly == "" || strings.Contains("flash_cm2", *flagOnly)) {
		for _, c := range []cm2Cfg{{64, 64, 128}, {128, 64, 256}, {64, 32, 128}, {128, 32, 256}, {128, 128, 256}, {64, 128, 128}} {
			c := c
			out = append(out, kcfg{cm2: &c})
		}
	}
	return out
}

// primary are the configurations checked on every shape.
func (h *harness) primary() []kcfg {
	var out []kcfg
	for _, c := range h.candidates() {
		if c.cm != nil && c.cm.BC == 64 && c.cm.Prefetch && (c.cm.NSG == 4 || c.cm.Mode == 1) {
			out = append(out, c)
		}
		if c.cm2 != nil && c.cm2.BC == 64 {
			out = append(out, c)
		}
	}
	if h.d.Info().MaxSharedMemory < 40000 { // CPU devices: small tiles
		out = nil
		for _, c := range h.candidates() {
			if c.cm != nil && c.cm.BC == 32 && c.cm.NSG == 4 {
				out = append(out, c)
			}
		}
	}
	return out
}

func checkShapes(quick bool) []attnShape {
	big := 1024
	if quick {
		big = 192
	}
	return []attnShape{
		{B: 1, Hq: 2, Hkv: 2, Nq: 128, Nk: 128, D: 64, DV: 64},
		{B: 2, Hq: 4, Hkv: 2, Nq: 200, Nk: 333, D: 64, DV: 64},
		{B: 1, Hq: 2, Hkv: 1, Nq: 257, Nk: 190, D: 128, DV: 128, Mask: 1},
		{B: 1, Hq: 2, Hkv: 2, Nq: 190, Nk: 257, D: 128, DV: 128, Mask: 2},
		{B: 1, Hq: 2, Hkv: 2, Nq: 300, Nk: 150, D: 64, DV: 64, Mask: 2},
		{B: 2, Hq: 2, Hkv: 1, Nq: 77, Nk: 513, D: 64, DV: 64, Mask: 2, BHSD: true},
		{B: 1, Hq: 3, Hkv: 3, Nq: 100, Nk: 100, D: 80, DV: 80, Mask: 1},
		{B: 1, Hq: 2, Hkv: 2, Nq: 100, Nk: 130, D: 60, DV: 60},
		{B: 1, Hq: 2, Hkv: 2, Nq: 1, Nk: 1000, D: 128, DV: 128},
		{B: 1, Hq: 4, Hkv: 4, Nq: big, Nk: big, D: 128, DV: 128, Mask: 1},
		{B: 1, Hq: 4, Hkv: 4, Nq: big, Nk: big, D: 64, DV: 64},
	}
}

// quickShapes validate every other configuration (one per head dim).
var quickShapes = []int{1, 2}

func (h *harness) checks() {
	ctx := context.Background()
	shapes := checkShapes(*flagQuick)
	h.bad = map[string]bool{}
	prim := map[string]bool{}
	for _, c := range h.primary() {
		prim[c.name()+c.String()] = true
	}
	isQuick := map[int]bool{}
	for _, i := range quickShapes {
		isQuick[i] = true
	}
	only := map[int]bool{}
	for _, i := range parseInts(*flagShapes) {
		only[i] = true
	}
	for si, s := range shapes {
		if len(only) > 0 && !only[si] {
			continue
		}
		a, err := newAttnData(ctx, h.d, s, h.rng, true)
		if err != nil {
			h.rep.Errors = append(h.rep.Errors, fmt.Sprintf("check data %s: %v", s, err))
			continue
		}
		ref := reference(a)
		h.logf("check %-55s fp16-baseline rel_l2 O %.2e LSE %.2e (rows without keys: %d)", s, ref.BaseO, ref.BaseLSE, ref.NoKeys)
		for _, c := range h.candidates() {
			if !prim[c.name()+c.String()] && !isQuick[si] {
				continue
			}
			k, err := h.kernel(c, s)
			if err != nil {
				h.logf("  %-9s %-22s skip: %v", c.name(), c, err)
				continue
			}
			cr := runCheck(ctx, h.d, k, a, ref)
			h.rep.Checks = append(h.rep.Checks, cr)
			if !cr.Pass {
				h.bad[c.name()+c.String()] = true
			}
			h.logf("  %-9s %-22s rel_l2 O %-9v LSE %-9v max|dO| %-9v pass=%v %s %s", c.name(), c, fmtNum(cr.RelO), fmtNum(cr.RelLSE), fmtNum(cr.MaxO), cr.Pass, cr.Err, cr.FirstBad)
		}
		a.close()
	}
}

func fmtNum(x any) string {
	if f, ok := x.(float64); ok {
		return fmt.Sprintf("%.2e", f)
	}
	return fmt.Sprint(x)
}

type sweepResult struct {
	Kernel, Cfg string
	D           int
	Causal      bool
	MedianMS    float64
	TFLOPS      float64
	Err         string `json:",omitempty"`
}

func gridShape(d, n, tokens int, causal bool) attnShape {
	s := attnShape{B: max(tokens/n, 1), Hq: 2048 / d, Hkv: 2048 / d, Nq: n, Nk: n, D: d, DV: d}
	if causal {
		s.Mask = 1
	}
	return s
}

// gridData allocates one input set holding tokens·2048 elements per tensor
// (the grid's every point has B·N·H·d = tokens·2048).
func (h *harness) gridData(ctx context.Context, d int) (*attnData, error) {
	s := gridShape(d, *flagTokens, *flagTokens, false)
	return newAttnData(ctx, h.d, s, h.rng, false)
}

func (h *harness) timeShape(ctx context.Context, k *attnKernel, a *attnData, s attnShape, warm, iters int) (timing, error) {
	b := *a
	b.s = s
	return timeDispatch(ctx, h.d, func(r *device.Recorder) error { return k.dispatch(r, &b) }, warm, iters)
}

func (h *harness) sweep() {
	ctx := context.Background()
	best := map[string]float64{} // family/d → summed ms
	for _, d := range parseInts(*flagDims) {
		a, err := h.gridData(ctx, d)
		if err != nil {
			h.rep.Errors = append(h.rep.Errors, fmt.Sprintf("sweep data d%d: %v", d, err))
			continue
		}
		for _, c := range h.candidates() {
			if h.bad[c.name()+c.String()] {
				h.logf("sweep d%d %-9s %-22s skip (failed a check)", d, c.name(), c)
				continue
			}
			sum := 0.0
			ok := true
			line := fmt.Sprintf("sweep d%-3d %-9s %-22s", d, c.name(), c)
			for _, causal := range []bool{false, true} {
				s := gridShape(d, *flagSweepN, *flagTokens, causal)
				sr := sweepResult{Kernel: c.name(), Cfg: c.String(), D: d, Causal: causal}
				k, err := h.kernel(c, s)
				var t timing
				if err == nil {
					t, err = h.timeShape(ctx, k, a, s, 2, 10)
				}
				if err != nil {
					sr.Err = err.Error()
					ok = false
					line += " ERR " + err.Error()
				} else {
					sr.MedianMS = t.ms()
					sr.TFLOPS = s.flops() / (t.ms() * 1e-3) / 1e12
					sum += t.ms()
					line += fmt.Sprintf("  causal=%v %7.3f ms %6.1f TF", causal, sr.MedianMS, sr.TFLOPS)
				}
				h.rep.Sweep = append(h.rep.Sweep, sr)
				if !ok {
					break
				}
			}
			h.logf("%s", line)
			if ok {
				key := fmt.Sprintf("%s/d%d", c.family(), d)
				if v, have := best[key]; !have || sum < v {
					best[key] = sum
					h.rep.Chosen[key] = c.String()
				}
			}
		}
		a.close()
	}
}

// benchRow is one flashvk-bench/1 result.
type benchRow struct {
	Direction string         `json:"direction"`
	DType     string         `json:"dtype"`
	B         int            `json:"B"`
	H         int            `json:"H"`
	Hkv       int            `json:"Hkv"`
	Nq        int            `json:"Nq"`
	Nk        int            `json:"Nk"`
	D         int            `json:"d"`
	DV        int            `json:"dv"`
	Causal    bool           `json:"causal"`
	Align     string         `json:"align"`
	Kernel    string         `json:"kernel"`
	MedianMS  float64        `json:"median_ms"`
	P10MS     float64        `json:"p10_ms"`
	P90MS     float64        `json:"p90_ms"`
	TFLOPS    float64        `json:"tflops"`
	Iters     int            `json:"iters"`
	Clock     string         `json:"clock"`
	Device    map[string]any `json:"device"`
	Launch    map[string]any `json:"launch"`
}

func (h *harness) findCfg(family, cfg string) (kcfg, bool) {
	for _, c := range h.candidates() {
		if c.family() == family && c.String() == cfg {
			return c, true
		}
	}
	return kcfg{}, false
}

func (h *harness) grid() {
	ctx := context.Background()
	info := h.d.Info()
	dev := map[string]any{"name": info.Name, "driver": info.DriverName + " " + info.DriverInfo, "backend": "vulkan"}
	fams := []string{"cm-mode1", "cm-mode0", "cm2"}
	for _, d := range parseInts(*flagDims) {
		a, err := h.gridData(ctx, d)
		if err != nil {
			h.rep.Errors = append(h.rep.Errors, fmt.Sprintf("grid data d%d: %v", d, err))
			continue
		}
		for _, fam := range fams {
			cfgName, ok := h.rep.Chosen[fmt.Sprintf("%s/d%d", fam, d)]
			if !ok {
				continue
			}
			c, _ := h.findCfg(fam, cfgName)
			kname := c.name()
			if c.cm != nil {
				kname = fmt.Sprintf("flash_cm.m%d", c.cm.Mode)
			}
			for _, n := range parseInts(*flagSeqs) {
				for _, causal := range []bool{false, true} {
					s := gridShape(d, n, *flagTokens, causal)
					k, err := h.kernel(c, s)
					var t timing
					if err == nil {
						t, err = h.timeShape(ctx, k, a, s, *flagWarm, *flagIters)
					}
					if err != nil {
						h.rep.Errors = append(h.rep.Errors, fmt.Sprintf("grid %s %s: %v", kname, s, err))
						h.logf("grid %s %s: %v", kname, s, err)
						continue
					}
					row := benchRow{Direction: "fwd", DType: "float16", B: s.B, H: s.Hq, Hkv: s.Hkv, Nq: n, Nk: n, D: d, DV: d,
						Causal: causal, Align: "top-left", Kernel: kname, MedianMS: t.ms(), P10MS: float64(t.P10) / 1e6, P90MS: float64(t.P90) / 1e6,
						TFLOPS: s.flops() / (t.ms() * 1e-3) / 1e12, Iters: t.Iters, Clock: "gpu-timestamps", Device: dev,
						Launch: map[string]any{"grid": k.grid(s), "workgroup": []int{k.WG, 1, 1}, "shared_bytes": k.Shared, "tile": k.Cfg}}
					h.rep.Grid = append(h.rep.Grid, row)
					h.logf("grid %-12s d%-3d N%-6d causal=%-5v %9.3f ms %6.1f TFLOP/s (%s)", kname, d, n, causal, row.MedianMS, row.TFLOPS, k.Cfg)
				}
			}
			if h.save != nil {
				h.save()
			}
		}
		a.close()
	}
	sort.SliceStable(h.rep.Grid, func(i, j int) bool {
		x, y := h.rep.Grid[i], h.rep.Grid[j]
		if x.D != y.D {
			return x.D < y.D
		}
		if x.Nq != y.Nq {
			return x.Nq < y.Nq
		}
		return !x.Causal && y.Causal
	})
	doc := map[string]any{"schema": "flashvk-bench/1", "tool": "flashvk", "version": "devel", "date": h.rep.Date, "device": dev, "results": h.rep.Grid}
	b, _ := json.MarshalIndent(doc, "", " ")
	_ = os.WriteFile(filepath.Join(*flagOut, outName("attn")), b, 0o644)
}
