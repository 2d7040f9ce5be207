package spec

import "testing"

func TestKeyLimit(t *testing.T) {
	p := Problem{Nq: 5, Nk: 3}
	for _, c := range []struct {
		mask Mask
		want []int
	}{
		{MaskNone, []int{3, 3, 3, 3, 3}},
		{MaskCausalTopLeft, []int{1, 2, 3, 3, 3}},
		{MaskCausalBottomRight, []int{0, 0, 1, 2, 3}}, // Nq > Nk: the first Nq−Nk rows see nothing
	} {
		p.Mask = c.mask
		for i, w := range c.want {
			if got := p.KeyLimit(i); got != w {
				t.Errorf("%v: KeyLimit(%d) = %d, want %d", c.mask, i, got, w)
			}
		}
	}
	p = Problem{Nq: 2, Nk: 4, Mask: MaskCausalBottomRight}
	if p.KeyLimit(0) != 3 || p.KeyLimit(1) != 4 {
		t.Errorf("Nq < Nk bottom-right: %d %d, want 3 4", p.KeyLimit(0), p.KeyLimit(1))
	}
}

func TestStridesAndFlops(t *testing.T) {
	if s := BSHD(7, 3, 5); s != (Strides{Batch: 105, Seq: 15, Head: 5}) || s.Offset(1, 2, 1) != 105+30+5 {
		t.Errorf("BSHD: %+v", s)
	}
	if s := BHSD(7, 3, 5); s != (Strides{Batch: 105, Seq: 5, Head: 35}) {
		t.Errorf("BHSD: %+v", s)
	}
	p := Problem{B: 2, Hq: 4, Hkv: 2, Nq: 8, Nk: 16, D: 64, Dv: 64}
	if f := p.Flops(); f != 4*2*4*8*16*64 {
		t.Errorf("Flops = %v", f)
	}
	p.Mask = MaskCausalTopLeft
	if f := p.Flops(); f != 2*2*4*8*16*64 {
		t.Errorf("causal Flops = %v", f)
	}
	if p.Group() != 2 || p.KVHead(3) != 1 || p.LSEIndex(1, 2, 3) != (1*4+2)*8+3 {
		t.Errorf("group %d kvhead %d lse %d", p.Group(), p.KVHead(3), p.LSEIndex(1, 2, 3))
	}
}

func TestCheckExt(t *testing.T) {
	base := func() *Problem {
		return &Problem{B: 2, Hq: 2, Hkv: 1, Nq: 5, Nk: 6, D: 4, Dv: 4,
			Ext: &Ext{Left: 2, Right: 0, CuQ: []int32{0, 5, 8}, CuK: []int32{0, 6, 10}, SeqUsedK: []int32{6, 4}, Slopes: []float32{1, 2}}}
	}
	if err := base().CheckExt(); err != nil {
		t.Fatalf("valid: %v", err)
	}
	for name, mod := range map[string]func(*Ext){
		"left":       func(e *Ext) { e.Left = -2 },
		"right":      func(e *Ext) { e.Right = 1 << 62 },
		"softcap":    func(e *Ext) { e.Softcap = -1 },
		"cu length":  func(e *Ext) { e.CuQ = []int32{0, 5} },
		"cu start":   func(e *Ext) { e.CuK = []int32{1, 6, 10} },
		"cu order":   func(e *Ext) { e.CuQ = []int32{0, 5, 4} },
		"cu long":    func(e *Ext) { e.CuK = []int32{0, 7, 10} },
		"used count": func(e *Ext) { e.SeqUsedK = []int32{6} },
		"used range": func(e *Ext) { e.SeqUsedK = []int32{6, 5} }, // sequence 1 stores 4 keys
		"slopes":     func(e *Ext) { e.SlopesPerBatch = true },
	} {
		p := base()
		mod(p.Ext)
		if err := p.CheckExt(); err == nil {
			t.Errorf("%s: %+v passed", name, *p.Ext)
		}
	}
}
