//go:build cgo

package vkattn

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// allocOperands allocates every operand tensor of p (contents undefined).
func allocOperands(t *testing.T, b *Backend, p *spec.Problem, dt spec.DType) Operands {
	t.Helper()
	ts := &tensorSet{b: b, p: p, dt: dt}
	t.Cleanup(ts.free)
	var s Operands
	for op := range OpD {
		x, err := ts.alloc(op)
		if err != nil {
			t.Fatal(err)
		}
		s[op] = x
	}
	return s
}

// TestPlanMatchesRecording: for every kernel family the device runs (each
// kernel selection, dtype, pass and a few shapes) the recorder dispatches
// exactly the plan's launches — the pipelines Launch.Name names, with
// their grids and bindings, and a barrier where the plan says — so that
// what explain prints is what runs. Every launch fits the device's limits.
// The addressed builds (AddressAlways) are planned and recorded too.
func TestPlanMatchesRecording(t *testing.T) {
	ctx := context.Background()
	seen := map[string]bool{}
	var opts []Options
	for _, k := range append([]string{""}, ForwardKernels()...) {
		opts = append(opts, Options{Kernel: k})
	}
	opts = append(opts, Options{Addressing: AddressAlways})
	for _, o := range opts {
		kernel := o.Kernel
		dev := openBackend(t, "")
		b, err := New(dev.dev, o)
		if err != nil {
			t.Logf("options %+v: %v", o, err) // e.g. flash_cm without cooperative matrices
			continue
		}
		defer b.Close()
		lim := b.Limits()
		for _, sh := range []struct{ b, hq, hkv, nq, nk, d int }{{1, 8, 8, 256, 256, 64}, {2, 4, 2, 100, 77, 40}, {1, 2, 2, 513, 300, 128}} {
			p := bshdProblem(sh.b, sh.hq, sh.hkv, sh.nq, sh.nk, sh.d)
			for _, dt := range b.DTypes() {
				set := allocOperands(t, b, p, dt)
				for _, dir := range []Dir{Fwd, Bwd} {
					name := fmt.Sprintf("kernel %q %v %v %+v", kernel, dt, dir, sh)
					pl, err := b.Plan(ctx, p, dt, dir)
					if kernel != "" && errors.Is(err, ErrUnsupported) {
						// A named kernel runs only its own dtypes
						// (flash_cm no float32); the default plan
						// runs every dtype of b.DTypes().
						t.Logf("%s: %v", name, err)
						continue
					}
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					seen[pl.Family] = true
					r := b.dev.Record()
					s := &scratch{b: b}
					if err := b.recordPasses(r, s, p, []*Plan{pl}, set.bufs()); err != nil {
						t.Fatalf("%s: record: %v", name, err)
					}
					s.done(true)
					var got []string
					for _, c := range r.Commands() {
						if c.Kind == "dispatch" {
							got = append(got, fmt.Sprintf("%s grid %v buffers %d", c.Pipeline, c.Groups, c.Buffers))
						} else {
							got = append(got, c.Kind)
						}
					}
					var want []string
					for _, l := range pl.Launches {
						if l.Barrier {
							want = append(want, "barrier")
						}
						want = append(want, fmt.Sprintf("%s grid %v buffers %d", l.Name(), l.Grid, len(l.Bindings)))
						if n, err := shaders.Bindings(l.Kernel); err != nil || n != len(l.Bindings) {
							t.Errorf("%s: %s binds %d buffers, the module declares %d (%v)", name, l.Kernel, len(l.Bindings), n, err)
						}
						if slots, _ := shaders.AddressSlots(l.Kernel); (o.Addressing == AddressAlways) != (len(l.Addresses) > 0) ||
							(len(l.Addresses) > 0 && len(slots) != len(l.Addresses)) {
							t.Errorf("%s (%v): %s reads %v by address (slots %v)", name, o.Addressing, l.Kernel, l.Addresses, slots)
						}
						if len(l.Addresses) > 0 {
							seen[pl.Family+" addressed"] = true
						}
						if l.SharedBytes > lim.SharedBytes || l.Workgroup > lim.MaxWorkgroupSize || l.Workgroup < 1 {
							t.Errorf("%s: launch %+v exceeds the limits %+v", name, l, lim)
						}
						if l.Family != pl.Family || l.DType != dt {
							t.Errorf("%s: launch %s of family %q dtype %v in a %q %v plan", name, l.Kernel, l.Family, l.DType, pl.Family, dt)
						}
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("%s (%s):\n recorded %q\n planned  %q", name, pl.Family, got, want)
					}
				}
			}
		}
	}
	want := []string{"flash", "minimal", "naive", "bwd"}
	if in := devicetest.Open(t).Info(); in.BufferDeviceAddress && in.Int64 {
		want = append(want, "flash addressed", "bwd addressed")
	}
	for _, f := range want {
		if !seen[f] {
			t.Errorf("family %s was never planned", f)
		}
	}
	t.Logf("families planned and recorded: %v", seen)
}

// TestScalarGrids checks the scalar families' launches against the
// shaders package's grid functions and the default tiles.
func TestScalarGrids(t *testing.T) {
	ctx := context.Background()
	for _, kernel := range []string{"flash", "minimal", "naive"} {
		b := openBackend(t, kernel)
		for _, p := range []struct{ b, hq, hkv, n, d int }{{1, 8, 8, 2048, 64}, {2, 4, 2, 100, 40}, {1, 2, 2, 513, 128}} {
			prob := bshdProblem(p.b, p.hq, p.hkv, p.n, p.n, p.d)
			for _, dt := range b.DTypes() {
				fwd, err := b.Launches(ctx, prob, dt, false)
				if err != nil {
					t.Fatalf("%s %v %+v forward: %v", kernel, dt, p, err)
				}
				wantN := 1
				if kernel == shaders.KernelNaive {
					wantN = naivePasses
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
				}
			}
		}
	}
}

func TestPlanInvalid(t *testing.T) {
	b := openBackend(t, "")
	if _, err := b.Plan(context.Background(), nil, spec.Float32, Fwd); err == nil {
		t.Error("nil problem: no error")
	}
	if _, err := New(b.dev, Options{Kernel: "fast"}); err == nil {
		t.Error("unknown kernel accepted")
	}
}
