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

// TestKVKeys: in a KV-cache problem sequence b's keys are its cache rows
// after the append (KV.Len), which place its diagonal and bound its
// range — with and without Ext — and Sequence(b) is the same sequence as
// a one-sequence problem (keys, diagonals, ranges and slopes alike).
func TestKVKeys(t *testing.T) {
	kv := &KV{SeqLens: []int32{0, 3, 9}, New: 2, PageSize: 16, MaxPages: 1, Pages: 3, Table: []int32{0, 1, 2}}
	mk := func(mask Mask, e *Ext) *Problem {
		return &Problem{B: 3, Hq: 2, Hkv: 1, Nq: 3, Nk: 16, D: 4, Dv: 4, Scale: 1, Mask: mask, KV: kv, Ext: e}
	}
	type rng struct{ lo, hi int }
	for _, c := range []struct {
		name string
		p    *Problem
		diag [3][3]int // [b][i]
		keys [3][3]rng
	}{
		{"causal-br", mk(MaskCausalBottomRight, nil),
			[3][3]int{{-1, 0, 1}, {2, 3, 4}, {8, 9, 10}},
			[3][3]rng{{{0, 0}, {0, 1}, {0, 2}}, {{0, 3}, {0, 4}, {0, 5}}, {{0, 9}, {0, 10}, {0, 11}}}},
		{"causal-tl", mk(MaskCausalTopLeft, nil),
			[3][3]int{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}},
			[3][3]rng{{{0, 1}, {0, 2}, {0, 2}}, {{0, 1}, {0, 2}, {0, 3}}, {{0, 1}, {0, 2}, {0, 3}}}},
		{"none", mk(MaskNone, nil),
			[3][3]int{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}},
			[3][3]rng{{{0, 2}, {0, 2}, {0, 2}}, {{0, 5}, {0, 5}, {0, 5}}, {{0, 11}, {0, 11}, {0, 11}}}},
		{"window-causal-br", mk(MaskCausalBottomRight, &Ext{Left: 2, Right: 0, BottomRight: true}),
			[3][3]int{{-1, 0, 1}, {2, 3, 4}, {8, 9, 10}},
			[3][3]rng{{{0, 0}, {0, 1}, {0, 2}}, {{0, 3}, {1, 4}, {2, 5}}, {{6, 9}, {7, 10}, {8, 11}}}},
		{"window-both-tl", mk(MaskNone, &Ext{Left: 1, Right: 1}),
			[3][3]int{{0, 1, 2}, {0, 1, 2}, {0, 1, 2}},
			[3][3]rng{{{0, 2}, {0, 2}, {1, 2}}, {{0, 2}, {0, 3}, {1, 4}}, {{0, 2}, {0, 3}, {1, 4}}}},
	} {
		p := c.p
		if err := p.CheckExt(); err != nil {
			t.Fatalf("%s: CheckExt: %v", c.name, err)
		}
		for b := range p.B {
			if got, want := p.Keys(b), kv.Len(b); got != want {
				t.Errorf("%s: Keys(%d) = %d, want %d", c.name, b, got, want)
			}
			s := p.Sequence(b)
			if s.Keys(0) != p.Keys(b) {
				t.Errorf("%s: Sequence(%d).Keys(0) = %d, want %d", c.name, b, s.Keys(0), p.Keys(b))
			}
			for i := range p.Nq {
				if got := p.Diag(b, i); got != c.diag[b][i] {
					t.Errorf("%s: Diag(%d, %d) = %d, want %d", c.name, b, i, got, c.diag[b][i])
				}
				lo, hi := p.KeyRange(b, i)
				if (rng{lo, hi}) != c.keys[b][i] {
					t.Errorf("%s: KeyRange(%d, %d) = %d … %d, want %v", c.name, b, i, lo, hi, c.keys[b][i])
				}
				if d := s.Diag(0, i); d != p.Diag(b, i) && hi > lo {
					t.Errorf("%s: Sequence(%d).Diag(0, %d) = %d, want %d", c.name, b, i, d, p.Diag(b, i))
				}
				if slo, shi := s.KeyRange(0, i); slo != lo || shi != hi {
					t.Errorf("%s: Sequence(%d).KeyRange(0, %d) = %d … %d, want %d … %d", c.name, b, i, slo, shi, lo, hi)
				}
			}
		}
		var pairs float64
		for b := range c.keys {
			for _, r := range c.keys[b] {
				pairs += float64(r.hi - r.lo)
			}
		}
		if got, want := p.KVFlops(), 2*2*8*pairs; got != want {
			t.Errorf("%s: KVFlops = %v, want %v", c.name, got, want)
		}
	}

	// ALiBi: Sequence(b) keeps sequence b's slopes.
	p := mk(MaskCausalBottomRight, &Ext{Left: -1, Right: 0, BottomRight: true, Slopes: []float32{1, 2, 3, 4, 5, 6}, SlopesPerBatch: true, Softcap: 50})
	for b := range p.B {
		s := p.Sequence(b)
		for h := range p.Hq {
			if s.Slope(0, h) != p.Slope(b, h) {
				t.Errorf("Sequence(%d).Slope(0, %d) = %v, want %v", b, h, s.Slope(0, h), p.Slope(b, h))
			}
		}
		if s.Ext.Softcap != 50 || s.CheckExt() != nil {
			t.Errorf("Sequence(%d): Ext %+v", b, *s.Ext)
		}
	}

	// A KV problem's Ext holds no key counts, packed sequences or dropout.
	for name, e := range map[string]*Ext{
		"seqused": {Left: -1, Right: -1, SeqUsedK: []int32{1, 1, 1}},
		"cu":      {Left: -1, Right: -1, CuQ: []int32{0, 1, 2, 3}, CuK: []int32{0, 1, 2, 3}},
		"dropout": {Left: -1, Right: -1, Dropout: &Dropout{Threshold: 10}},
	} {
		if err := mk(MaskNone, e).CheckExt(); err == nil {
			t.Errorf("%s: a KV problem's Ext passed CheckExt", name)
		}
	}
}

// TestFeatures: the options' names in their fixed order; a causal mask
// alone is none, an Ext with nothing else a window.
func TestFeatures(t *testing.T) {
	causal := func(e *Ext) *Problem { return &Problem{Mask: MaskCausalTopLeft, Ext: e} }
	plain := func(e *Ext) *Problem { return &Problem{Ext: e} }
	for _, c := range []struct {
		p    *Problem
		want string
	}{
		{causal(nil), ""},
		{plain(nil), ""},
		{causal(&Ext{Left: -1, Right: 0, Softcap: 30}), "softcap"},
		{causal(&Ext{Left: -1, Right: 0}), "window"},
		{plain(&Ext{Left: -1, Right: -1}), "window"},
		{plain(&Ext{Left: -1, Right: 0, Dropout: &Dropout{Threshold: 26}}), "window+dropout"},
		{causal(&Ext{Left: 128, Right: 0, Slopes: []float32{1}}), "window+alibi"},
		{plain(&Ext{Left: -1, Right: 5}), "window"},
		{causal(&Ext{Left: -1, Right: 0, SeqUsedK: []int32{3}}), "keys"},
		{causal(&Ext{Left: -1, Right: 0, CuQ: []int32{0, 3}, CuK: []int32{0, 3}}), "packed"},
		{plain(&Ext{Left: -1, Right: -1, Bias: &Bias{DType: Float32}}), "bias"},
		{causal(&Ext{Left: 7, Right: 0, SeqUsedK: []int32{3}, CuQ: []int32{0, 3}, CuK: []int32{0, 3}, Softcap: 1,
			Slopes: []float32{1}, Dropout: &Dropout{Threshold: 1}, Bias: &Bias{DType: Float16}}), "window+keys+packed+softcap+alibi+dropout+bias"},
	} {
		if got := c.p.Features(); got != c.want {
			t.Errorf("%+v (mask %v): %q, want %q", *c.p, c.p.Mask, got, c.want)
		}
	}
}
