package vkattn

// Tuning of the coopmat backward (bwd_cm_dkdv, bwd_cm_dq): two tune
// families (tune.go's registry). Drop-in for vkattn/; bwdCMPlanFor applies
// the tuned tiles (see the patch next to this file).

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

func parseBwdCMTile(s string) (bwdCMTile, error) {
	var c bwdCMTile
	base, pf := strings.CutSuffix(s, "-pf1")
	base, kv := strings.CutSuffix(base, "-kv1")
	c.KVReg, c.Prefetch = kv, pf
	if _, err := fmt.Sscanf(base, "nsg%d-step%d-mode%d", &c.NSG, &c.Step, &c.Mode); err != nil || c.String() != s {
		return bwdCMTile{}, fmt.Errorf("%w: coopmat backward tile %q (want nsgN-stepN-modeN)", ErrInvalid, s)
	}
	return c, nil
}

func bwdCMFamily(kernel string, dkdv bool) *TuneFamily {
	layout := func(ctx context.Context, b *Backend, dt DType) (*CMLayout, error) {
		if b.cm == nil || dt != F16 {
			return nil, fmt.Errorf("%w: coopmat backward not in use", ErrUnsupported)
		}
		return b.flashCMLayout(ctx)
	}
	return &TuneFamily{
		Name: kernel, Dir: DirBwd, Active: dispatches(kernel, DirBwd),
		Default: func(ctx context.Context, b *Backend, p *spec.Problem, dt DType) (Candidate, error) {
			l, err := layout(ctx, b, dt)
			if err != nil {
				return nil, err
			}
			c, err := chooseBwdCMTile(l, dkdv, p.D, p.Dv, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
			return c, err
		},
		Candidates: func(ctx context.Context, b *Backend, p *spec.Problem, dt DType) ([]Candidate, error) {
			l, err := layout(ctx, b, dt)
			if err != nil {
				return nil, err
			}
			var out []Candidate
			for _, nsg := range []int{1, 2, 4, 8} {
				for _, step := range []int{16, 32, 64, 128} {
					for _, mode := range []int{0, 1} {
						for _, kv := range []bool{false, true} {
							for _, pf := range []bool{false, true} {
								c := bwdCMTile{NSG: nsg, Step: step, Mode: mode, KVReg: kv, Prefetch: pf}
								if bwdCMCheckTile(l, dkdv, c, p.D, p.Dv, b.lim.SharedBytes, b.lim.MaxWorkgroupSize) == nil {
									out = append(out, c)
								}
							}
						}
					}
				}
			}
			// Nearest the default first (MaxCandidates keeps a neighbourhood).
			if def, err := chooseBwdCMTile(l, dkdv, p.D, p.Dv, b.lim.SharedBytes, b.lim.MaxWorkgroupSize); err == nil {
				dist := func(c Candidate) int {
					t := c.(bwdCMTile)
					lg := func(x int) int { return bits.Len(uint(x)) }
					d := abs(lg(t.NSG)-lg(def.NSG)) + abs(lg(t.Step)-lg(def.Step)) + 2*abs(t.Mode-def.Mode)
					if t.KVReg != def.KVReg {
						d++
					}
					if t.Prefetch != def.Prefetch {
						d++
					}
					return d
				}
				slices.SortStableFunc(out, func(a, b Candidate) int { return dist(a) - dist(b) })
			}
			return out, nil
		},
		Parse: func(s string) (Candidate, error) { return parseBwdCMTile(s) },
		Check: func(ctx context.Context, b *Backend, p *spec.Problem, dt DType, c Candidate) error {
			t, ok := c.(bwdCMTile)
			if !ok {
				return fmt.Errorf("%w: %T is not a coopmat backward tile", ErrInvalid, c)
			}
			l, err := layout(ctx, b, dt)
			if err != nil {
				return err
			}
			return bwdCMCheckTile(l, dkdv, t, p.D, p.Dv, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
		},
	}
}

func init() {
	registerTuneFamily(bwdCMFamily(shaders.KernelBwdCMDKDV, true))
	registerTuneFamily(bwdCMFamily(shaders.KernelBwdCMDQ, false))
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
