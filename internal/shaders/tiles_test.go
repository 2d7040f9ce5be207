package shaders

import (
	"testing"
)

func specMap(entries []SpecEntry) map[uint32]uint32 {
	m := map[uint32]uint32{}
	for _, e := range entries {
		m[e.ID] = e.Value
	}
	return m
}

// TestSharedBytesMatchSPIRV evaluates every module's shared arrays after
// specialization and compares them with the Go formulas (addressed
// variants: their base kernel's).
func TestSharedBytesMatchSPIRV(t *testing.T) {
	type tc struct {
		c        Config
		d, dv, s int
	}
	cases := []tc{
		{Config{128, 32, 32}, 128, 128, 32},
		{Config{128, 32, 16}, 64, 64, 8},
		{Config{64, 16, 8}, 256, 256, 8},
		{Config{256, 64, 64}, 40, 80, 64},
		{Config{32, 16, 4}, 1, 3, 16},
		{Config{64, 64, 16}, 17, 96, 32},
	}
	for _, base := range Kernels {
		names := []string{base}
		if HasAddressed(base) {
			names = append(names, Addressed(base))
		}
		for _, k := range names {
			for _, dt := range DTypes {
				m := reflectKernel(t, k, dt)
				for _, c := range cases {
					e, _ := SpecEntries(k, c.c, c.d, c.dv, c.s, 1, 0)
					got, err := m.SharedBytes(specMap(e))
					if err != nil {
						t.Fatalf("%s.%s: %v", k, dt, err)
					}
					f16 := dt == DTypeF16
					var want int
					switch base {
					case KernelNaive:
						want = NaiveSharedBytes(c.c.WG, c.d)
					case KernelMinimal:
						want = MinimalSharedBytes(c.c.BR, c.c.BC, c.d, c.dv, f16)
					case KernelFlash:
						want = FlashFwdSharedBytes(c.c.BR, c.c.BC, c.d, c.dv, f16)
					case KernelBwdPre:
						want = 0
					case KernelBwdDKDV:
						want = BwdDKDVSharedBytes(c.c.BR, c.c.BC, c.d, c.dv, f16)
					case KernelBwdDQ:
						want = BwdDQSharedBytes(c.c.BR, c.c.BC, c.d, c.dv, f16)
					}
					if got != want {
						t.Errorf("%s.%s %+v D=%d DV=%d: SPIR-V shared %d bytes, Go formula %d", k, dt, c.c, c.d, c.dv, got, want)
					}
				}
			}
		}
	}
}

// TestFlashLayoutMatchesSPIRV checks the derived thread layout of flash.comp
// against FlashFwdLayout.
func TestFlashLayoutMatchesSPIRV(t *testing.T) {
	m := reflectAll(t)["flash.f32"]
	for _, sg := range []int{8, 16, 32, 64} {
		for _, wg := range []int{32, 64, 128, 256} {
			for _, bc := range []int{1, 2, 4, 8, 16, 32, 64} {
				for _, br := range []int{1, 2, 4, 8, 16, 32, 64, 128} {
					c := Config{wg, br, bc}
					l, err := FlashFwdLayout(c, 80, sg)
					if err != nil {
						continue
					}
					e, _ := SpecEntries(KernelFlash, c, 64, 80, sg, 0, 0)
					sp := specMap(e)
					for name, want := range map[string]int{"TC": l.TC, "TR": l.TR, "RM": l.RM, "CN": l.CN, "DVN": l.DVN} {
						got, err := m.Constant(name, sp)
						if err != nil {
							t.Fatal(err)
						}
						if int(got) != want {
							t.Errorf("%+v sg=%d: shader %s = %d, Go %d", c, sg, name, got, want)
						}
					}
					if l.TC > sg || l.TR*l.TC != wg || l.RM*l.TR != br || l.CN*l.TC != bc {
						t.Errorf("%+v sg=%d: inconsistent layout %+v", c, sg, l)
					}
				}
			}
		}
	}
}

func TestBwdLayoutMatchesSPIRV(t *testing.T) {
	mods := reflectAll(t)
	for _, wg := range []int{32, 64, 128, 256} {
		for _, rows := range []int{1, 2, 4, 8, 16, 32, 64} {
			l, err := BwdTileLayout(wg, rows)
			if err != nil {
				t.Fatal(err)
			}
			if l.TX*l.T != wg || l.M*l.T != rows {
				t.Errorf("wg=%d rows=%d: inconsistent layout %+v", wg, rows, l)
			}
			e, _ := SpecEntries(KernelBwdDKDV, Config{wg, 16, rows}, 64, 64, 32, 0, 0)
			for name, want := range map[string]int{"TX": l.TX, "TK": l.T, "KM": l.M} {
				got, err := mods["bwd_dkdv.f32"].Constant(name, specMap(e))
				if err != nil || int(got) != want {
					t.Errorf("bwd_dkdv wg=%d BC=%d: %s = %d (%v), want %d", wg, rows, name, got, err, want)
				}
			}
			e, _ = SpecEntries(KernelBwdDQ, Config{wg, rows, 16}, 64, 64, 32, 0, 0)
			for name, want := range map[string]int{"TX": l.TX, "TQ": l.T, "QM": l.M} {
				got, err := mods["bwd_dq.f32"].Constant(name, specMap(e))
				if err != nil || int(got) != want {
					t.Errorf("bwd_dq wg=%d BR=%d: %s = %d (%v), want %d", wg, rows, name, got, err, want)
				}
			}
		}
	}
}

func TestGrids(t *testing.T) {
	if g := FlashFwdGrid(3, 5, 129, 32); g != [3]uint32{5, 5, 3} {
		t.Errorf("FlashFwdGrid = %v", g)
	}
	if g := NaiveGrid(2, 7, 17); g != [3]uint32{17, 7, 2} {
		t.Errorf("NaiveGrid = %v", g)
	}
	if g := MinimalGrid(1, 1, 1, 64); g != [3]uint32{1, 1, 1} {
		t.Errorf("MinimalGrid = %v", g)
	}
	if g := BwdPreGrid(2, 4, 64, 16); g != [3]uint32{4, 4, 2} {
		t.Errorf("BwdPreGrid = %v", g)
	}
	if g := BwdDKDVGrid(2, 2, 17, 16); g != [3]uint32{2, 2, 2} {
		t.Errorf("BwdDKDVGrid = %v", g)
	}
	if g := BwdDQGrid(1, 8, 256, 64); g != [3]uint32{4, 8, 1} {
		t.Errorf("BwdDQGrid = %v", g)
	}
}

var (
	limLavapipe = Limits{SharedBytes: 32768, Subgroup: 8, MaxWorkgroupSize: 1024}
	limNVIDIA   = Limits{SharedBytes: 49152, Subgroup: 32, MaxWorkgroupSize: 1024}
	limAMD      = Limits{SharedBytes: 65536, Subgroup: 64, MaxWorkgroupSize: 1024}
)

func TestCheckConfigRejects(t *testing.T) {
	bad := []struct {
		k string
		c Config
	}{
		{KernelFlash, Config{96, 32, 32}},  // WG not a power of two
		{KernelFlash, Config{128, 8, 32}},  // BR < TR
		{KernelFlash, Config{128, 32, 32}}, // too much shared for D=256 on lavapipe
		{KernelMinimal, Config{32, 64, 8}}, // WG < BR
		{KernelBwdPre, Config{128, 2, 1}},  // 64 threads per row > subgroup
		{KernelBwdDKDV, Config{128, 12, 16}},
	}
	for _, b := range bad {
		if err := CheckConfig(b.k, b.c, 256, 256, false, limLavapipe); err == nil {
			t.Errorf("%s %+v accepted", b.k, b.c)
		}
	}
	if err := CheckConfig(KernelFlash, Config{128, 32, 32}, 300, 64, false, limNVIDIA); err == nil {
		t.Error("D=300 accepted")
	}
	// A subgroup of 128: BUTTERFLY reduces over at most 64 lanes, and a
	// dK/dV key tile spans at most 512 keys (the bias summary's scan); a
	// tune cache may name such tiles, so the check refuses them.
	wide := Limits{Subgroup: 128, SharedBytes: 64 << 10, MaxWorkgroupSize: 1024}
	for _, b := range []struct {
		k string
		c Config
	}{
		{KernelFlash, Config{128, 1, 512}}, // 128 threads per row
		{KernelBwdPre, Config{128, 1, 1}},  // 128 threads per row
		{KernelBwdDKDV, Config{64, 1, 1024}},
	} {
		if err := CheckConfig(b.k, b.c, 1, 1, false, wide); err == nil {
			t.Errorf("subgroup 128: %s %+v accepted", b.k, b.c)
		}
	}
	for _, b := range []struct {
		k string
		c Config
	}{
		{KernelFlash, Config{128, 2, 256}}, // 64 threads per row
		{KernelBwdPre, Config{128, 2, 1}},
		{KernelBwdDKDV, Config{64, 1, 512}},
	} {
		if err := CheckConfig(b.k, b.c, 1, 1, false, wide); err != nil {
			t.Errorf("subgroup 128: %s %+v: %v", b.k, b.c, err)
		}
	}
}

// TestDropKeyTile: dropout takes key tiles of 8, 16 or a multiple of 32
// keys (ext.glsl drop_word).
func TestDropKeyTile(t *testing.T) {
	for bc, want := range map[int]bool{8: true, 16: true, 32: true, 64: true, 96: true, 128: true, 4: false, 24: false, 40: false, 48: false} {
		if DropKeyTile(bc) != want {
			t.Errorf("DropKeyTile(%d) = %v, want %v", bc, !want, want)
		}
	}
}

func TestSpecEntries(t *testing.T) {
	e, err := SpecEntries(KernelFlash, Config{128, 32, 16}, 64, 80, 8, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []SpecEntry{{0, 128}, {1, 64}, {2, 80}, {3, 32}, {4, 16}, {5, 8}, {SpecExt, 0}}
	if len(e) != len(want) {
		t.Fatalf("entries %v", e)
	}
	for i := range e {
		if e[i] != want[i] {
			t.Fatalf("entries %v, want %v", e, want)
		}
	}
	if e, _ := SpecEntries(KernelFlash, Config{128, 32, 16}, 64, 80, 8, 0, 7); e[len(e)-1] != (SpecEntry{SpecExt, 7}) {
		t.Fatalf("extended entries %v, want EXT 7 last", e)
	}
}

func TestLoopIterations(t *testing.T) {
	c := Config{WG: 32, BR: 8, BC: 16}
	// flash D=256: 1 + 17 + 33 + 17 + 17 = 85 per tile of 16 keys, + 10.
	if got := LoopIterations(KernelFlash, c, 256, 256, 1, 16*100, 1); got != 10+100*85 {
		t.Errorf("flash: %d", got)
	}
	for _, k := range Kernels {
		small := LoopIterations(k, Config{128, 32, 32}, 64, 64, 128, 128, 1)
		big := LoopIterations(k, Config{128, 32, 32}, 64, 64, 4096, 4096, 4)
		if small <= 0 || big < small {
			t.Errorf("%s: LoopIterations small %d big %d", k, small, big)
		}
	}
}
