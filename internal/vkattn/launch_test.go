package vkattn

import (
	"context"
	"testing"

	"github.com/flashvk/flashvk/internal/shaders"
)

// TestLaunches checks Launches against the shaders grid functions and the
// device's limits for a few shapes and every kernel.
func TestLaunches(t *testing.T) {
	ctx := context.Background()
	for _, kernel := range []string{"flash", "minimal", "naive"} {
		b := openBackend(t, kernel)
		lim := b.Limits()
		for _, p := range []struct{ b, hq, hkv, n, d int }{{1, 8, 8, 2048, 64}, {2, 4, 2, 100, 40}, {1, 2, 2, 513, 128}} {
			prob := bshdProblem(p.b, p.hq, p.hkv, p.n, p.n, p.d)
			for _, dt := range b.DTypes() {
				fwd, err := b.Launches(ctx, prob, dt, false)
				if err != nil {
					t.Fatalf("%s %v %+v forward: %v", kernel, dt, p, err)
				}
				wantN := 1
				if kernel == shaders.KernelNaive {
					wantN = 3
				}
				if len(fwd) != wantN {
					t.Fatalf("%s: %d forward launches, want %d", kernel, len(fwd), wantN)
				}
				c, err := b.Config(kernel, p.d, p.d, dt)
				if err != nil {
					t.Fatal(err)
				}
				var want [3]uint32
				switch kernel {
				case shaders.KernelFlash:
					want = shaders.FlashFwdGrid(p.b, p.hq, p.n, c.BR)
				case shaders.KernelMinimal:
					want = shaders.MinimalGrid(p.b, p.hq, p.n, c.BR)
				case shaders.KernelNaive:
					want = shaders.NaiveGrid(p.b, p.hq, p.n)
				}
				for _, l := range fwd {
					if l.Kernel != kernel || l.Grid != want || l.Workgroup != c.WG {
						t.Errorf("%s %v %+v: launch %+v, want grid %v WG %d", kernel, dt, p, l, want, c.WG)
					}
					if l.SharedBytes > lim.SharedBytes || l.Workgroup > lim.MaxWorkgroupSize {
						t.Errorf("%s %v %+v: launch %+v exceeds the limits %+v", kernel, dt, p, l, lim)
					}
				}
				bwd, err := b.Launches(ctx, prob, dt, true)
				if err != nil {
					t.Fatalf("%s %v %+v backward: %v", kernel, dt, p, err)
				}
				if len(bwd) != 3 {
					t.Fatalf("%d backward launches, want 3", len(bwd))
				}
				cfg := func(k string) shaders.Config {
					c, err := b.Config(k, p.d, p.d, dt)
					if err != nil {
						t.Fatal(err)
					}
					return c
				}
				wants := []struct {
					k    string
					grid [3]uint32
				}{
					{shaders.KernelBwdPre, shaders.BwdPreGrid(p.b, p.hq, p.n, cfg(shaders.KernelBwdPre).BR)},
					{shaders.KernelBwdDKDV, shaders.BwdDKDVGrid(p.b, p.hkv, p.n, cfg(shaders.KernelBwdDKDV).BC)},
					{shaders.KernelBwdDQ, shaders.BwdDQGrid(p.b, p.hq, p.n, cfg(shaders.KernelBwdDQ).BR)},
				}
				for i, w := range wants {
					l := bwd[i]
					if l.Kernel != w.k || l.Grid != w.grid || l.Workgroup != cfg(w.k).WG {
						t.Errorf("%v %+v backward %d: %+v, want %s grid %v", dt, p, i, l, w.k, w.grid)
					}
					if l.SharedBytes > lim.SharedBytes {
						t.Errorf("%v %+v: %+v exceeds %d shared bytes", dt, p, l, lim.SharedBytes)
					}
				}
			}
		}
	}
}

func TestLaunchesInvalid(t *testing.T) {
	b := openBackend(t, "")
	if _, err := b.Launches(context.Background(), nil, F32, false); err == nil {
		t.Error("nil problem: no error")
	}
}
