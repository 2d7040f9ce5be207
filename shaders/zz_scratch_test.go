package shaders

// THROWAWAY (not to be committed): runs the kernels through device/ against
// a float64 CPU computation.

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flashvk/flashvk/device"
)

func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b>>23)&0xff) - 127 + 15
	man := b & 0x7fffff
	if (b>>23)&0xff == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	if exp >= 31 {
		return sign | 0x7c00
	}
	if exp <= 0 {
		if exp < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint(14 - exp)
		h := man >> shift
		rem := man & ((1 << shift) - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		for man&0x400 == 0 {
			man <<= 1
			exp--
		}
		exp++
		man &= 0x3ff
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

type sprob struct {
	B, Hq, Hkv, Nq, Nk, D, DV int
	Mask                      uint32
	Layout                    string // "bshd", "bhsd", "pad"
	F16                       bool
}

func (p sprob) String() string {
	dt := "f32"
	if p.F16 {
		dt = "f16"
	}
	return fmt.Sprintf("B%d Hq%d Hkv%d Nq%d Nk%d D%d DV%d mask%d %s %s", p.B, p.Hq, p.Hkv, p.Nq, p.Nk, p.D, p.DV, p.Mask, p.Layout, dt)
}

type strides struct{ b, s, h int }

func mkStrides(layout string, s, h, d int) (strides, int) {
	switch layout {
	case "bhsd":
		return strides{h * s * d, d, s * d}, h * s * d
	case "pad":
		// padded rows and heads: seq stride h·(d+3)+5
		hs := d + 3
		ss := h*hs + 5
		return strides{s*ss + 11, ss, hs}, s*ss + 11
	}
	return strides{s * h * d, h * d, d}, s * h * d
}

func (st strides) off(b, s, h int) int { return b*st.b + s*st.s + h*st.h }

type tensor struct {
	st   strides
	data []float64 // logical values at storage offsets
	n    int       // elements
}

func newTensor(layout string, B, S, H, Dm int) *tensor {
	st, per := mkStrides(layout, S, H, Dm)
	n := B * per
	return &tensor{st: st, data: make([]float64, n), n: n}
}

func (t *tensor) at(b, s, h, d int) float64     { return t.data[t.st.off(b, s, h)+d] }
func (t *tensor) set(b, s, h, d int, v float64) { t.data[t.st.off(b, s, h)+d] = v }

func (t *tensor) fill(rng *rand.Rand, B, S, H, Dm int, f16 bool, amp float64) {
	for b := 0; b < B; b++ {
		for s := 0; s < S; s++ {
			for h := 0; h < H; h++ {
				for d := 0; d < Dm; d++ {
					v := float32((rng.Float64()*2 - 1) * amp)
					if f16 {
						v = f16ToF32(f32ToF16(v))
					}
					t.set(b, s, h, d, float64(v))
				}
			}
		}
	}
}

func keyLimit(p sprob, i int) int {
	var lim int
	switch p.Mask {
	case 1:
		lim = i + 1
	case 2:
		lim = i + 1 + p.Nk - p.Nq
	default:
		return p.Nk
	}
	return min(max(lim, 0), p.Nk)
}

type refOut struct {
	O, DQ, DK, DV *tensor
	LSE           []float64
}

func reference(p sprob, Q, K, V, DO *tensor, scale float64) refOut {
	G := p.Hq / p.Hkv
	r := refOut{
		O:   newTensor(p.Layout, p.B, p.Nq, p.Hq, p.DV),
		DQ:  newTensor(p.Layout, p.B, p.Nq, p.Hq, p.D),
		DK:  newTensor(p.Layout, p.B, p.Nk, p.Hkv, p.D),
		DV:  newTensor(p.Layout, p.B, p.Nk, p.Hkv, p.DV),
		LSE: make([]float64, p.B*p.Hq*p.Nq),
	}
	P := make([]float64, p.Nk)
	dP := make([]float64, p.Nk)
	for b := 0; b < p.B; b++ {
		for h := 0; h < p.Hq; h++ {
			kh := h / G
			for i := 0; i < p.Nq; i++ {
				lim := keyLimit(p, i)
				li := (b*p.Hq+h)*p.Nq + i
				if lim == 0 {
					r.LSE[li] = math.Inf(-1)
					continue
				}
				m := math.Inf(-1)
				for j := 0; j < lim; j++ {
					s := 0.0
					for d := 0; d < p.D; d++ {
						s += Q.at(b, i, h, d) * K.at(b, j, kh, d)
					}
					P[j] = s * scale
					m = math.Max(m, P[j])
				}
				l := 0.0
				for j := 0; j < lim; j++ {
					P[j] = math.Exp(P[j] - m)
					l += P[j]
				}
				for j := 0; j < lim; j++ {
					P[j] /= l
				}
				r.LSE[li] = m + math.Log(l)
				Di := 0.0
				for dv := 0; dv < p.DV; dv++ {
					o := 0.0
					for j := 0; j < lim; j++ {
						o += P[j] * V.at(b, j, kh, dv)
					}
					r.O.set(b, i, h, dv, o)
					Di += o * DO.at(b, i, h, dv)
				}
				for j := 0; j < lim; j++ {
					x := 0.0
					for dv := 0; dv < p.DV; dv++ {
						x += DO.at(b, i, h, dv) * V.at(b, j, kh, dv)
						r.DV.data[r.DV.st.off(b, j, kh)+dv] += P[j] * DO.at(b, i, h, dv)
					}
					dP[j] = P[j] * (x - Di) // dS
				}
				for j := 0; j < lim; j++ {
					for d := 0; d < p.D; d++ {
						r.DQ.data[r.DQ.st.off(b, i, h)+d] += scale * dP[j] * K.at(b, j, kh, d)
						r.DK.data[r.DK.st.off(b, j, kh)+d] += scale * dP[j] * Q.at(b, i, h, d)
					}
				}
			}
		}
	}
	return r
}

type gpu struct {
	d     *device.Device
	pipes map[string]*device.Pipeline
	lim   Limits
}

func (g *gpu) pipe(t *testing.T, kernel, dt string, c Config, d, dv, pass int) *device.Pipeline {
	key := fmt.Sprintf("%s.%s.%v.%d.%d.%d", kernel, dt, c, d, dv, pass)
	if p, ok := g.pipes[key]; ok {
		return p
	}
	spv, err := SPIRV(kernel, dt)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := SpecEntries(kernel, c, d, dv, g.lim.Subgroup, pass)
	var sp []device.Spec
	for _, e := range ents {
		sp = append(sp, device.Spec{ID: e.ID, Value: e.Value})
	}
	nb, _ := Bindings(kernel)
	info := g.d.Info()
	p, err := g.d.NewPipeline(device.PipelineDesc{Name: key, SPIRV: spv, Spec: sp, PushSize: ParamsSize, Bindings: nb,
		FullSubgroups: info.ComputeFullSubgroups && c.WG%int(info.SubgroupSize) == 0})
	if err != nil {
		t.Fatalf("pipeline %s: %v", key, err)
	}
	g.pipes[key] = p
	return p
}

func (g *gpu) upload(t *testing.T, x []float64, f16 bool) *device.Buffer {
	ctx := context.Background()
	n := max(len(x), 1)
	if f16 {
		b, err := g.d.NewBuffer(int64(2 * ((n + 1) &^ 1)))
		if err != nil {
			t.Fatal(err)
		}
		h := make([]uint16, (n+1)&^1)
		for i, v := range x {
			h[i] = f32ToF16(float32(v))
		}
		if err := device.Upload(ctx, b, 0, h); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b, err := g.d.NewBuffer(int64(4 * n))
	if err != nil {
		t.Fatal(err)
	}
	h := make([]float32, n)
	for i, v := range x {
		h[i] = float32(v)
	}
	if err := device.Upload(ctx, b, 0, h); err != nil {
		t.Fatal(err)
	}
	return b
}

// poison fills a buffer with NaN (f32 0x7fc00000 / f16 0x7e00 pairs).
func (g *gpu) poisoned(t *testing.T, n int, f16 bool) *device.Buffer {
	ctx := context.Background()
	var b *device.Buffer
	var err error
	if f16 {
		b, err = g.d.NewBuffer(int64(2 * ((max(n, 1) + 1) &^ 1)))
		if err == nil {
			err = g.d.Fill(ctx, b, 0x7e007e00)
		}
	} else {
		b, err = g.d.NewBuffer(int64(4 * max(n, 1)))
		if err == nil {
			err = g.d.Fill(ctx, b, 0x7fc00000)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (g *gpu) download(t *testing.T, b *device.Buffer, n int, f16 bool) []float64 {
	ctx := context.Background()
	out := make([]float64, n)
	if f16 {
		h := make([]uint16, (n+1)&^1)
		if err := device.Download(ctx, b, 0, h); err != nil {
			t.Fatal(err)
		}
		for i := range out {
			out[i] = float64(f16ToF32(h[i]))
		}
		return out
	}
	h := make([]float32, n)
	if err := device.Download(ctx, b, 0, h); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		out[i] = float64(h[i])
	}
	return out
}

// compare returns max |got−want| over the logical elements, relative to
// max(1, max|want|), and fails on NaN.
func compareT(t *testing.T, what string, p sprob, ref *tensor, got []float64, S, H, Dm int) float64 {
	worst, scale := 0.0, 1.0
	for b := 0; b < p.B; b++ {
		for s := 0; s < S; s++ {
			for h := 0; h < H; h++ {
				for d := 0; d < Dm; d++ {
					scale = math.Max(scale, math.Abs(ref.at(b, s, h, d)))
				}
			}
		}
	}
	for b := 0; b < p.B; b++ {
		for s := 0; s < S; s++ {
			for h := 0; h < H; h++ {
				for d := 0; d < Dm; d++ {
					o := ref.st.off(b, s, h) + d
					if math.IsNaN(got[o]) || math.IsInf(got[o], 0) {
						t.Errorf("%s %v: %s[%d,%d,%d,%d] = %v", what, p, what, b, s, h, d, got[o])
						return math.Inf(1)
					}
					worst = math.Max(worst, math.Abs(got[o]-ref.at(b, s, h, d))/scale)
				}
			}
		}
	}
	return worst
}

func compareLSE(t *testing.T, what string, p sprob, ref, got []float64) float64 {
	worst := 0.0
	for i := range ref {
		if math.IsInf(ref[i], -1) {
			if !math.IsInf(got[i], -1) {
				t.Errorf("%s %v: LSE[%d] = %v, want -Inf", what, p, i, got[i])
			}
			continue
		}
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
			t.Errorf("%s %v: LSE[%d] = %v, want %v", what, p, i, got[i], ref[i])
			return math.Inf(1)
		}
		worst = math.Max(worst, math.Abs(got[i]-ref[i]))
	}
	return worst
}

func openGPU(t *testing.T) *gpu {
	d, err := device.Open(device.Options{Validation: os.Getenv("FLASHVK_VALIDATION") == "1", DefaultTimeout: 20 * time.Second})
	if err != nil {
		t.Skipf("no device: %v", err)
	}
	inf := d.Info()
	t.Logf("device %s subgroup %d shared %d", inf.Name, inf.SubgroupSize, inf.MaxSharedMemory)
	return &gpu{d: d, pipes: map[string]*device.Pipeline{}, lim: Limits{
		SharedBytes: int(inf.MaxSharedMemory), Subgroup: int(inf.SubgroupSize),
		MaxWorkgroupSize: int(min(inf.MaxWorkgroupInvocations, inf.MaxWorkgroupSize[0]))}}
}

func scratchProblems() []sprob {
	var ps []sprob
	base := []sprob{
		{B: 1, Hq: 1, Hkv: 1, Nq: 1, Nk: 1, D: 40, DV: 40, Layout: "bshd"},
		{B: 1, Hq: 2, Hkv: 1, Nq: 17, Nk: 129, D: 80, DV: 80, Layout: "pad"},
		{B: 2, Hq: 4, Hkv: 2, Nq: 129, Nk: 17, D: 40, DV: 72, Layout: "bhsd"},
		{B: 1, Hq: 2, Hkv: 2, Nq: 129, Nk: 129, D: 256, DV: 256, Layout: "bshd"},
		{B: 1, Hq: 3, Hkv: 1, Nq: 33, Nk: 65, D: 3, DV: 5, Layout: "pad"},
		{B: 1, Hq: 1, Hkv: 1, Nq: 64, Nk: 64, D: 64, DV: 64, Layout: "bshd"},
	}
	if v := os.Getenv("SCRATCH_PROB"); v != "" {
		var x sprob
		fmt.Sscanf(v, "%d,%d,%d,%d,%d,%d,%d", &x.B, &x.Hq, &x.Hkv, &x.Nq, &x.Nk, &x.D, &x.DV)
		x.Layout = "bshd"
		base = []sprob{x}
	}
	for _, b := range base {
		for _, m := range []uint32{0, 1, 2} {
			for _, f16 := range []bool{false, true} {
				x := b
				x.Mask, x.F16 = m, f16
				ps = append(ps, x)
			}
		}
	}
	return ps
}

func TestScratchKernels(t *testing.T) {
	g := openGPU(t)
	defer g.d.Close()
	ctx := context.Background()
	only := os.Getenv("SCRATCH_ONLY")
	for pi, p := range scratchProblems() {
		if only != "" && !strings.Contains(p.String(), only) {
			continue
		}
		rng := rand.New(rand.NewSource(int64(pi + 1)))
		Q := newTensor(p.Layout, p.B, p.Nq, p.Hq, p.D)
		K := newTensor(p.Layout, p.B, p.Nk, p.Hkv, p.D)
		V := newTensor(p.Layout, p.B, p.Nk, p.Hkv, p.DV)
		DO := newTensor(p.Layout, p.B, p.Nq, p.Hq, p.DV)
		Q.fill(rng, p.B, p.Nq, p.Hq, p.D, p.F16, 1.5)
		K.fill(rng, p.B, p.Nk, p.Hkv, p.D, p.F16, 1.5)
		V.fill(rng, p.B, p.Nk, p.Hkv, p.DV, p.F16, 1)
		DO.fill(rng, p.B, p.Nq, p.Hq, p.DV, p.F16, 1)
		scale := 1 / math.Sqrt(float64(p.D))
		scale = float64(float32(scale))
		ref := reference(p, Q, K, V, DO, scale)
		dt := DTypeF32
		if p.F16 {
			dt = DTypeF16
		}
		O := newTensor(p.Layout, p.B, p.Nq, p.Hq, p.DV)
		prm := Params{B: uint32(p.B), Hq: uint32(p.Hq), Hkv: uint32(p.Hkv), Nq: uint32(p.Nq), Nk: uint32(p.Nk),
			QB: uint32(Q.st.b), QS: uint32(Q.st.s), QH: uint32(Q.st.h),
			KB: uint32(K.st.b), KS: uint32(K.st.s), KH: uint32(K.st.h),
			VB: uint32(V.st.b), VS: uint32(V.st.s), VH: uint32(V.st.h),
			OB: uint32(O.st.b), OS: uint32(O.st.s), OH: uint32(O.st.h),
			Scale: float32(scale), Mask: p.Mask, Group: uint32(p.Hq / p.Hkv)}
		push := prm.Bytes()
		bq, bk, bv, bdo := g.upload(t, Q.data, p.F16), g.upload(t, K.data, p.F16), g.upload(t, V.data, p.F16), g.upload(t, DO.data, p.F16)
		nl := p.B * p.Hq * p.Nq

		tol := 2e-5
		if p.F16 {
			tol = 4e-3
		}
		check := func(name string, bo, bl *device.Buffer) {
			o := g.download(t, bo, O.n, p.F16)
			l := g.download(t, bl, nl, false)
			if os.Getenv("SCRATCH_DUMP") != "" && strings.HasPrefix(name, os.Getenv("SCRATCH_DUMP")) {
				for i := 0; i < min(8, O.n); i++ {
					t.Logf("O[%d] got %v want %v", i, o[i], ref.O.data[i])
				}
				for i := 0; i < min(8, nl); i++ {
					t.Logf("LSE[%d] got %v want %v", i, l[i], ref.LSE[i])
				}
				bad := 0
				for i := range o {
					if math.IsNaN(o[i]) {
						bad++
					}
				}
				t.Logf("NaN count %d of %d", bad, O.n)
			}
			eo := compareT(t, name+" O", p, ref.O, o, p.Nq, p.Hq, p.DV)
			el := compareLSE(t, name, p, ref.LSE, l)
			if eo > tol || el > tol*4 {
				t.Errorf("%-8s %v: O err %.2e LSE err %.2e", name, p, eo, el)
			} else if testing.Verbose() {
				t.Logf("%-8s %v: O err %.2e LSE err %.2e", name, p, eo, el)
			}
		}

		// naive
		{
			c, err := DefaultConfig(KernelNaive, p.D, p.DV, p.F16, g.lim)
			if err != nil {
				t.Fatal(err)
			}
			bo, bl := g.poisoned(t, O.n, p.F16), g.poisoned(t, nl, false)
			bs := g.poisoned(t, nl*p.Nk, false)
			r := g.d.Record()
			for pass := 0; pass < 3; pass++ {
				if err := r.Dispatch(g.pipe(t, KernelNaive, dt, c, p.D, p.DV, pass), push, NaiveGrid(p.B, p.Hq, p.Nq), bq, bk, bv, bo, bl, bs); err != nil {
					t.Fatal(err)
				}
				r.Barrier()
			}
			if _, err := g.d.Submit(ctx, r); err != nil {
				t.Fatal(err)
			}
			check("naive", bo, bl)
			bo.Close()
			bl.Close()
			bs.Close()
		}
		// minimal
		{
			c, err := DefaultConfig(KernelMinimal, p.D, p.DV, p.F16, g.lim)
			if err != nil {
				t.Fatal(err)
			}
			if v := os.Getenv("SCRATCH_MIN_BC"); v != "" {
				fmt.Sscan(v, &c.BC)
			}
			if v := os.Getenv("SCRATCH_MIN_WG"); v != "" {
				fmt.Sscan(v, &c.WG)
				c.BR = c.WG
			}
			t.Logf("minimal cfg %+v", c)
			bo, bl := g.poisoned(t, O.n, p.F16), g.poisoned(t, nl, false)
			r := g.d.Record()
			if err := r.Dispatch(g.pipe(t, KernelMinimal, dt, c, p.D, p.DV, 0), push, MinimalGrid(p.B, p.Hq, p.Nq, c.BR), bq, bk, bv, bo, bl); err != nil {
				t.Fatal(err)
			}
			if _, err := g.d.Submit(ctx, r); err != nil {
				t.Fatal(err)
			}
			check("minimal", bo, bl)
			bo.Close()
			bl.Close()
		}
		// flash with several configs, then the backward on the default's output
		fc, err := DefaultConfig(KernelFlash, p.D, p.DV, p.F16, g.lim)
		if err != nil {
			t.Fatal(err)
		}
		cfgs := []Config{fc}
		for _, c := range []Config{{64, 16, 16}, {32, 16, 8}, {128, 32, 4}, {64, 8, 1}, {g.lim.Subgroup, 4, 2}} {
			if CheckConfig(KernelFlash, c, p.D, p.DV, p.F16, g.lim) == nil && c != fc {
				cfgs = append(cfgs, c)
			}
		}
		var fo, fl *device.Buffer
		for ci, c := range cfgs {
			bo, bl := g.poisoned(t, O.n, p.F16), g.poisoned(t, nl, false)
			r := g.d.Record()
			if err := r.Dispatch(g.pipe(t, KernelFlash, dt, c, p.D, p.DV, 0), push, FlashFwdGrid(p.B, p.Hq, p.Nq, c.BR), bq, bk, bv, bo, bl); err != nil {
				t.Fatal(err)
			}
			if _, err := g.d.Submit(ctx, r); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("flash%v", c), bo, bl)
			if ci == 0 {
				fo, fl = bo, bl
			} else {
				bo.Close()
				bl.Close()
			}
		}
		// backward
		pc, err := DefaultConfig(KernelBwdPre, p.D, p.DV, p.F16, g.lim)
		if err != nil {
			t.Fatal(err)
		}
		kc, err := DefaultConfig(KernelBwdDKDV, p.D, p.DV, p.F16, g.lim)
		if err != nil {
			t.Fatal(err)
		}
		qc, err := DefaultConfig(KernelBwdDQ, p.D, p.DV, p.F16, g.lim)
		if err != nil {
			t.Fatal(err)
		}
		type bcfg struct{ k, q Config }
		bcfgs := []bcfg{{kc, qc}}
		if v := os.Getenv("SCRATCH_BWD"); v != "" {
			var x bcfg
			fmt.Sscanf(v, "%d,%d,%d", &x.k.WG, &x.k.BR, &x.k.BC)
			x.q = qc
			bcfgs = []bcfg{x}
			t.Logf("dkdv cfg %+v", x.k)
		}
		for _, x := range []bcfg{{Config{64, 8, 16}, Config{64, 16, 8}}, {Config{32, 4, 64}, Config{32, 64, 4}}, {Config{128, 16, 4}, Config{128, 4, 16}}} {
			if os.Getenv("SCRATCH_BWD") != "" {
				break
			}
			if CheckConfig(KernelBwdDKDV, x.k, p.D, p.DV, p.F16, g.lim) == nil && CheckConfig(KernelBwdDQ, x.q, p.D, p.DV, p.F16, g.lim) == nil {
				bcfgs = append(bcfgs, x)
			}
		}
		for _, bc := range bcfgs {
			bD := g.poisoned(t, nl, false)
			bdq := g.poisoned(t, Q.n, p.F16)
			bdk := g.poisoned(t, K.n, p.F16)
			bdv := g.poisoned(t, V.n, p.F16)
			r := g.d.Record()
			if err := r.Dispatch(g.pipe(t, KernelBwdPre, dt, pc, p.D, p.DV, 0), push, BwdPreGrid(p.B, p.Hq, p.Nq, pc.BR), fo, bdo, bD); err != nil {
				t.Fatal(err)
			}
			r.Barrier()
			if err := r.Dispatch(g.pipe(t, KernelBwdDKDV, dt, bc.k, p.D, p.DV, 0), push, BwdDKDVGrid(p.B, p.Hkv, p.Nk, bc.k.BC), bq, bk, bv, bdo, fl, bD, bdk, bdv); err != nil {
				t.Fatal(err)
			}
			if _, err := g.d.Submit(ctx, r); err != nil {
				t.Fatal("pre+dkdv:", err)
			}
			r = g.d.Record()
			if err := r.Dispatch(g.pipe(t, KernelBwdDQ, dt, bc.q, p.D, p.DV, 0), push, BwdDQGrid(p.B, p.Hq, p.Nq, bc.q.BR), bq, bk, bv, bdo, fl, bD, bdq); err != nil {
				t.Fatal(err)
			}
			if _, err := g.d.Submit(ctx, r); err != nil {
				t.Fatal("dq:", err)
			}
			btol := 5e-5
			if p.F16 {
				btol = 8e-3
			}
			eq := compareT(t, "dQ", p, ref.DQ, g.download(t, bdq, Q.n, p.F16), p.Nq, p.Hq, p.D)
			ek := compareT(t, "dK", p, ref.DK, g.download(t, bdk, K.n, p.F16), p.Nk, p.Hkv, p.D)
			ev := compareT(t, "dV", p, ref.DV, g.download(t, bdv, V.n, p.F16), p.Nk, p.Hkv, p.DV)
			if eq > btol || ek > btol || ev > btol {
				t.Errorf("bwd dkdv%v dq%v %v: dQ %.2e dK %.2e dV %.2e", bc.k, bc.q, p, eq, ek, ev)
			} else if testing.Verbose() {
				t.Logf("bwd dkdv%v dq%v %v: dQ %.2e dK %.2e dV %.2e", bc.k, bc.q, p, eq, ek, ev)
			}
			bD.Close()
			bdq.Close()
			bdk.Close()
			bdv.Close()
		}
		fo.Close()
		fl.Close()
		for _, b := range []*device.Buffer{bq, bk, bv, bdo} {
			b.Close()
		}
	}
	if v := g.d.ValidationErrors(); len(v) > 0 {
		t.Errorf("validation: %v", v[:min(len(v), 5)])
	}
}

// TestScratchBench times flash fwd and bwd for a typical shape
// (SCRATCH_BENCH=1).
func TestScratchBench(t *testing.T) {
	if os.Getenv("SCRATCH_BENCH") == "" {
		t.Skip("SCRATCH_BENCH unset")
	}
	g := openGPU(t)
	defer g.d.Close()
	ctx := context.Background()
	for _, sh := range []struct{ B, H, N, D int }{{4, 16, 2048, 64}, {4, 16, 2048, 128}, {1, 16, 4096, 128}} {
		for _, f16 := range []bool{false, true} {
			for _, mask := range []uint32{0, 1} {
				dt := DTypeF32
				es := 4
				if f16 {
					dt, es = DTypeF16, 2
				}
				n := sh.B * sh.H * sh.N * sh.D
				mk := func() *device.Buffer {
					b, err := g.d.NewBuffer(int64(n * es))
					if err != nil {
						t.Fatal(err)
					}
					g.d.Fill(ctx, b, 0x3c003c00&uint32(0x33333333))
					return b
				}
				bq, bk, bv, bo, bdo, bdq, bdk, bdv := mk(), mk(), mk(), mk(), mk(), mk(), mk(), mk()
				bl, _ := g.d.NewBuffer(int64(4 * sh.B * sh.H * sh.N))
				bD, _ := g.d.NewBuffer(int64(4 * sh.B * sh.H * sh.N))
				st := BSHDParams(sh.B, sh.H, sh.H, sh.N, sh.N, sh.D, sh.D)
				st.Scale = float32(1 / math.Sqrt(float64(sh.D)))
				st.Mask = mask
				push := st.Bytes()
				fc, _ := DefaultConfig(KernelFlash, sh.D, sh.D, f16, g.lim)
				pc, _ := DefaultConfig(KernelBwdPre, sh.D, sh.D, f16, g.lim)
				kc, _ := DefaultConfig(KernelBwdDKDV, sh.D, sh.D, f16, g.lim)
				qc, _ := DefaultConfig(KernelBwdDQ, sh.D, sh.D, f16, g.lim)
				cfgs := []Config{fc}
				if os.Getenv("SCRATCH_SWEEP") != "" {
					for _, wg := range []int{64, 128, 256} {
						for _, br := range []int{16, 32, 64, 128} {
							for _, bc := range []int{16, 32, 64} {
								c := Config{wg, br, bc}
								if c != fc && CheckConfig(KernelFlash, c, sh.D, sh.D, f16, g.lim) == nil {
									cfgs = append(cfgs, c)
								}
							}
						}
					}
				}
				flops := 4 * float64(sh.B*sh.H) * float64(sh.N) * float64(sh.N) * float64(sh.D)
				if mask != 0 {
					flops /= 2
				}
				for _, c := range cfgs {
					fp := g.pipe(t, KernelFlash, dt, c, sh.D, sh.D, 0)
					best := time.Duration(math.MaxInt64)
					for it := 0; it < 4; it++ {
						r := g.d.Record()
						r.Timestamp("a")
						r.Dispatch(fp, push, FlashFwdGrid(sh.B, sh.H, sh.N, c.BR), bq, bk, bv, bo, bl)
						r.Timestamp("b")
						res, err := g.d.Submit(ctx, r)
						if err != nil {
							t.Fatal(err)
						}
						best = min(best, res.Elapsed("a", "b"))
					}
					t.Logf("fwd %v %s mask%d %+v: %v  %.2f TFLOP/s", sh, dt, mask, c, best, flops/best.Seconds()/1e12)
				}
				best := time.Duration(math.MaxInt64)
				for it := 0; it < 3; it++ {
					r := g.d.Record()
					r.Timestamp("a")
					r.Dispatch(g.pipe(t, KernelBwdPre, dt, pc, sh.D, sh.D, 0), push, BwdPreGrid(sh.B, sh.H, sh.N, pc.BR), bo, bdo, bD)
					r.Barrier()
					r.Dispatch(g.pipe(t, KernelBwdDKDV, dt, kc, sh.D, sh.D, 0), push, BwdDKDVGrid(sh.B, sh.H, sh.N, kc.BC), bq, bk, bv, bdo, bl, bD, bdk, bdv)
					r.Dispatch(g.pipe(t, KernelBwdDQ, dt, qc, sh.D, sh.D, 0), push, BwdDQGrid(sh.B, sh.H, sh.N, qc.BR), bq, bk, bv, bdo, bl, bD, bdq)
					r.Timestamp("b")
					res, err := g.d.Submit(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					best = min(best, res.Elapsed("a", "b"))
				}
				t.Logf("bwd %v %s mask%d dkdv%+v dq%+v: %v  %.2f TFLOP/s", sh, dt, mask, kc, qc, best, 2.5*flops/best.Seconds()/1e12)
				for _, b := range []*device.Buffer{bq, bk, bv, bo, bdo, bdq, bdk, bdv, bl, bD} {
					b.Close()
				}
			}
		}
	}
}

func BSHDParams(b, hq, hkv, nq, nk, d, dv int) Params {
	return Params{B: uint32(b), Hq: uint32(hq), Hkv: uint32(hkv), Nq: uint32(nq), Nk: uint32(nk),
		QB: uint32(nq * hq * d), QS: uint32(hq * d), QH: uint32(d),
		KB: uint32(nk * hkv * d), KS: uint32(hkv * d), KH: uint32(d),
		VB: uint32(nk * hkv * dv), VS: uint32(hkv * dv), VH: uint32(dv),
		OB: uint32(nq * hq * dv), OS: uint32(hq * dv), OH: uint32(dv), Group: uint32(hq / hkv)}
}
