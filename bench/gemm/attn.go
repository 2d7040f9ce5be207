//go:build cgo

package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/vkattn"
)

// attnShape is one attention problem (fp16 storage).
type attnShape struct {
	B, Hq, Hkv, Nq, Nk, D, DV int
	Mask                      uint32 // 0 none, 1 causal top-left, 2 causal bottom-right
	BHSD                      bool   // [B,H,S,D] storage instead of flashvk's [B,S,H,D]
}

func (s attnShape) String() string {
	m := [...]string{"full", "causal-TL", "causal-BR"}[s.Mask]
	l := "BSHD"
	if s.BHSD {
		l = "BHSD"
	}
	return fmt.Sprintf("B%d Hq%d Hkv%d Nq%d Nk%d d%d dv%d %s %s", s.B, s.Hq, s.Hkv, s.Nq, s.Nk, s.D, s.DV, m, l)
}

// strides returns (batch, seq, head) element strides of a [B,S,H,X] tensor.
func (s attnShape) strides(seq, heads, x int) (b, sq, h uint32) {
	if s.BHSD {
		return uint32(heads * seq * x), uint32(x), uint32(seq * x)
	}
	return uint32(seq * heads * x), uint32(heads * x), uint32(x)
}

func (s attnShape) params() shaders.Params {
	p := shaders.Params{B: uint32(s.B), Hq: uint32(s.Hq), Hkv: uint32(s.Hkv), Nq: uint32(s.Nq), Nk: uint32(s.Nk),
		Scale: float32(1 / math.Sqrt(float64(s.D))), Mask: s.Mask, Group: uint32(s.Hq / s.Hkv)}
	p.QB, p.QS, p.QH = s.strides(s.Nq, s.Hq, s.D)
	p.KB, p.KS, p.KH = s.strides(s.Nk, s.Hkv, s.D)
	p.VB, p.VS, p.VH = s.strides(s.Nk, s.Hkv, s.DV)
	p.OB, p.OS, p.OH = s.strides(s.Nq, s.Hq, s.DV)
	return p
}

func (s attnShape) vecOK() bool {
	p := s.params()
	for _, v := range []uint32{uint32(s.D), uint32(s.DV), p.QB, p.QS, p.QH, p.KB, p.KS, p.KH, p.VB, p.VS, p.VH, p.OB, p.OS, p.OH} {
		if v%8 != 0 {
			return false
		}
	}
	return true
}

func (s attnShape) keyLimit(i int) int {
	switch s.Mask {
	case 1:
		return min(i+1, s.Nk)
	case 2:
		return min(max(i+1+s.Nk-s.Nq, 0), s.Nk)
	}
	return s.Nk
}

// flops is the FlashAttention convention: 4·B·H·Nq·Nk·d (d the mean of d
// and dv), halved when causal.
func (s attnShape) flops() float64 {
	f := 4 * float64(s.B) * float64(s.Hq) * float64(s.Nq) * float64(s.Nk) * float64(s.D+s.DV) / 2
	if s.Mask != 0 {
		f /= 2
	}
	return f
}

// attnData is one problem's inputs (host fp16) and buffers.
type attnData struct {
	s          attnShape
	q, k, v    []uint16
	Q, K, V, O *device.Buffer
	LSE        *device.Buffer
}

func (s attnShape) lens() (nq, nk, nv, no, nl int) {
	return s.B * s.Nq * s.Hq * s.D, s.B * s.Nk * s.Hkv * s.D, s.B * s.Nk * s.Hkv * s.DV, s.B * s.Nq * s.Hq * s.DV, s.B * s.Hq * s.Nq
}

func newAttnData(ctx context.Context, d *device.Device, s attnShape, rng *rand.Rand, keepHost bool) (*attnData, error) {
	nq, nk, nv, no, nl := s.lens()
	a := &attnData{s: s}
	q, k, v := randF16(rng, nq, true), randF16(rng, nk, true), randF16(rng, nv, true)
	if keepHost {
		a.q, a.k, a.v = q, k, v
	}
	var err error
	alloc := func(n int) *device.Buffer {
		if err != nil {
			return nil
		}
		var b *device.Buffer
		b, err = d.NewBuffer(int64(n))
		return b
	}
	a.Q, a.K, a.V, a.O, a.LSE = alloc(2*nq), alloc(2*nk), alloc(2*nv), alloc(max(2*no, 4)), alloc(4*nl)
	if err != nil {
		a.close()
		return nil, err
	}
	for _, x := range []struct {
		b *device.Buffer
		h []uint16
	}{{a.Q, q}, {a.K, k}, {a.V, v}} {
		if err := device.Upload(ctx, x.b, 0, x.h); err != nil {
			a.close()
			return nil, err
		}
	}
	return a, nil
}

func (a *attnData) close() {
	for _, b := range []*device.Buffer{a.Q, a.K, a.V, a.O, a.LSE} {
		if b != nil {
			b.Close()
		}
	}
}

// attnRef is the float64 reference O and LSE, plus the error of a
// PyTorch-style fp16 computation (fp32 products rounded to fp16, softmax in
// fp32 rounded to fp16, P·V accumulated in fp32 and rounded) against it.
type attnRef struct {
	O, LSE           []float64
	BaseO, BaseLSE   float64
	BaseOMax, NoKeys int
}

func reference(a *attnData) *attnRef {
	s := a.s
	p := s.params()
	scale := float64(p.Scale)
	nq, _, _, no, nl := s.lens()
	_ = nq
	ref := &attnRef{O: make([]float64, no), LSE: make([]float64, nl)}
	baseO := make([]float64, no)
	baseL := make([]float64, nl)
	q := make([]float64, len(a.q))
	k := make([]float64, len(a.k))
	v := make([]float64, len(a.v))
	for i, x := range a.q {
		q[i] = float64(f16to32(x))
	}
	for i, x := range a.k {
		k[i] = float64(f16to32(x))
	}
	for i, x := range a.v {
		v[i] = float64(f16to32(x))
	}
	g := s.Hq / s.Hkv
	type job struct{ b, h int }
	jobs := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := make([]float64, s.Nk)
			s16 := make([]float64, s.Nk)
			for jb := range jobs {
				b, h := jb.b, jb.h
				kh := h / g
				for i := range s.Nq {
					qo := int(uint32(b)*p.QB + uint32(i)*p.QS + uint32(h)*p.QH)
					lim := s.keyLimit(i)
					m, m16 := math.Inf(-1), math.Inf(-1)
					for j := range lim {
						ko := int(uint32(b)*p.KB + uint32(j)*p.KS + uint32(kh)*p.KH)
						var acc float64
						var acc32 float32
						for x := range s.D {
							acc += q[qo+x] * k[ko+x]
							acc32 += float32(q[qo+x] * k[ko+x])
						}
						sc[j] = acc * scale
						s16[j] = r16(float64(float32(scale) * acc32))
						m = math.Max(m, sc[j])
						m16 = math.Max(m16, s16[j])
					}
					oo := int(uint32(b)*p.OB + uint32(i)*p.OS + uint32(h)*p.OH)
					li := (b*s.Hq+h)*s.Nq + i
					if lim == 0 {
						ref.LSE[li] = math.Inf(-1)
						baseL[li] = math.Inf(-1)
						mu.Lock()
						ref.NoKeys++
						mu.Unlock()
						continue
					}
					var sum float64
					var sum32 float32
					for j := range lim {
						sc[j] = math.Exp(sc[j] - m)
						sum += sc[j]
						e := float32(math.Exp(s16[j] - m16))
						s16[j] = float64(e)
						sum32 += e
					}
					for x := range s.DV {
						var o float64
						var o32 float32
						for j := range lim {
							vo := int(uint32(b)*p.VB + uint32(j)*p.VS + uint32(kh)*p.VH)
							o += sc[j] * v[vo+x]
							o32 += float32(r16(s16[j]/float64(sum32)) * v[vo+x])
						}
						ref.O[oo+x] = o / sum
						baseO[oo+x] = r16(float64(o32))
					}
					ref.LSE[li] = m + math.Log(sum)
					baseL[li] = m16 + math.Log(float64(sum32))
				}
			}
		}()
	}
	for b := range s.B {
		for h := range s.Hq {
			jobs <- job{b, h}
		}
	}
	close(jobs)
	wg.Wait()
	ref.BaseO = relL2(baseO, ref.O)
	ref.BaseLSE = relL2(baseL, ref.LSE)
	return ref
}

// attnKernel is one compiled attention pipeline with its launch shape.
type attnKernel struct {
	Name   string
	Cfg    string
	BR, WG int
	Shared int
	pipe   *device.Pipeline
}

func (k *attnKernel) grid(s attnShape) [3]uint32 {
	return [3]uint32{uint32((s.Nq + k.BR - 1) / k.BR), uint32(s.Hq), uint32(s.B)}
}

func (k *attnKernel) dispatch(r *device.Recorder, a *attnData) error {
	p := a.s.params()
	return r.Dispatch(k.pipe, p.Bytes(), k.grid(a.s), a.Q, a.K, a.V, a.O, a.LSE)
}

func (k *attnKernel) close() {
	if k.pipe != nil {
		k.pipe.Close()
	}
}

// cmCfg is a flash_cm configuration: the library's tile.
type cmCfg = vkattn.CMTile

func newFlashCM(d *device.Device, l *vkattn.CMLayout, c cmCfg, s attnShape) (*attnKernel, error) {
	info := d.Info()
	if err := vkattn.CheckCMTile(l, c, s.D, s.DV, vkattn.TileExtras{}, int(info.MaxSharedMemory), int(info.MaxWorkgroupInvocations)); err != nil {
		return nil, err
	}
	vec := s.vecOK()
	c.Prefetch = c.Prefetch && vec
	spv, err := shaders.SPIRV(shaders.KernelFlashCM, shaders.DTypeF16)
	if err != nil {
		return nil, err
	}
	p, err := d.NewPipeline(device.PipelineDesc{Name: "flash_cm " + c.String(), SPIRV: spv, Spec: vkattn.CMSpec(l, c, s.D, s.DV, vec),
		PushSize: shaders.ParamsSize, Bindings: 5, RequiredSubgroupSize: subgroupReq(info), FullSubgroups: info.ComputeFullSubgroups})
	if err != nil {
		return nil, err
	}
	sh := shaders.FlashCMSharedBytes(shaders.FlashCMShape{M: int(l.M), N: int(l.N), K: int(l.K), NSG: c.NSG, BC: c.BC, Mode: c.Mode, D: s.D, DV: s.DV, Planes: 1, Pairs: c.Pairs, RowBlocks: c.RowBlocks})
	return &attnKernel{Name: "flash_cm", Cfg: c.String(), BR: c.Rows(l), WG: c.NSG * l.SG, Shared: sh, pipe: p}, nil
}

// cm2Cfg is a flash_cm2 configuration.
type cm2Cfg struct{ BR, BC, WG int }

func (c cm2Cfg) String() string { return fmt.Sprintf("br%d-bc%d-wg%d", c.BR, c.BC, c.WG) }

func cm2Supported(info device.Info) error {
	f := info.CoopMat2
	if !(f.WorkgroupScope && f.FlexibleDimensions && f.Reductions && f.Conversions && f.PerElementOps && f.TensorAddressing) {
		return fmt.Errorf("device lacks VK_NV_cooperative_matrix2 features (have %+v)", f)
	}
	return nil
}

func newFlashCM2(d *device.Device, c cm2Cfg, s attnShape) (*attnKernel, error) {
	info := d.Info()
	if err := cm2Supported(info); err != nil {
		return nil, err
	}
	if m := info.CoopMat2.MaxWorkgroupScopeInvocations; m != 0 && uint32(c.WG) > m {
		return nil, fmt.Errorf("workgroup %d > workgroup-scope max %d", c.WG, m)
	}
	sp := []device.Spec{spec(0, uint32(c.WG)), spec(1, uint32(s.D)), spec(2, uint32(s.DV)), spec(3, uint32(c.BR)), spec(4, uint32(c.BC)), spec(5, info.SubgroupSize)}
	p, err := d.NewPipeline(device.PipelineDesc{Name: "flash_cm2 " + c.String(), SPIRV: spirv("flash_cm2"), Spec: sp,
		PushSize: shaders.ParamsSize, Bindings: 5})
	if err != nil {
		return nil, err
	}
	return &attnKernel{Name: "flash_cm2", Cfg: c.String(), BR: c.BR, WG: c.WG, pipe: p}, nil
}

// checkResult is one correctness run.
type checkResult struct {
	Kernel, Cfg, Shape        string
	RelO, RelLSE, MaxO        any
	BaseO, BaseLSE            float64
	BoundO, BoundLSE          float64
	NaN, Unwritten, InfMismat int
	FirstBad                  string `json:",omitempty"`
	Pass                      bool
	Err                       string `json:",omitempty"`
}

// runCheck runs kernel k on a (after poisoning O and LSE) and compares with
// the reference.
func runCheck(ctx context.Context, d *device.Device, k *attnKernel, a *attnData, ref *attnRef) checkResult {
	cr := checkResult{Kernel: k.Name, Cfg: k.Cfg, Shape: a.s.String(), BaseO: ref.BaseO, BaseLSE: ref.BaseLSE}
	fail := func(err error) checkResult { cr.Err = err.Error(); return cr }
	if err := d.Fill(ctx, a.O, 0x7E007E00); err != nil { // fp16 NaN pairs
		return fail(err)
	}
	if err := d.Fill(ctx, a.LSE, 0x7FC00000); err != nil {
		return fail(err)
	}
	r := d.Record()
	if err := k.dispatch(r, a); err != nil {
		return fail(err)
	}
	if _, err := d.Submit(ctx, r); err != nil {
		return fail(err)
	}
	_, _, _, no, nl := a.s.lens()
	o16 := make([]uint16, no)
	lse := make([]float32, nl)
	if err := device.Download(ctx, a.O, 0, o16); err != nil {
		return fail(err)
	}
	if err := device.Download(ctx, a.LSE, 0, lse); err != nil {
		return fail(err)
	}
	o := make([]float64, no)
	for i, h := range o16 {
		if h == 0x7E00 {
			cr.Unwritten++
		}
		o[i] = float64(f16to32(h))
		if math.IsNaN(o[i]) {
			if cr.NaN == 0 {
				cr.FirstBad = fmt.Sprintf("O elem %d (row-major [B,S,H,D] index if BSHD: s=%d h=%d d=%d)", i, i/(a.s.Hq*a.s.DV)%a.s.Nq, i/a.s.DV%a.s.Hq, i%a.s.DV)
			}
			cr.NaN++
		}
	}
	l := make([]float64, nl)
	for i, x := range lse {
		l[i] = float64(x)
		if math.IsNaN(l[i]) {
			cr.NaN++
		}
		if math.IsInf(ref.LSE[i], -1) != math.IsInf(l[i], -1) {
			cr.InfMismat++
		}
	}
	eo, el := relL2(o, ref.O), relL2(l, ref.LSE)
	cr.RelO, cr.RelLSE, cr.MaxO = jsonNum(eo), jsonNum(el), jsonNum(maxAbs(o, ref.O))
	cr.BoundO = math.Max(2*ref.BaseO, 1.0/4096)
	cr.BoundLSE = math.Max(2*ref.BaseLSE, 1.0/4096)
	cr.Pass = cr.NaN == 0 && cr.Unwritten == 0 && cr.InfMismat == 0 && eo <= cr.BoundO && el <= cr.BoundLSE
	return cr
}
