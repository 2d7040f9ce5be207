package vkattn

// Per-device tile autotuning: the registry of tunable kernel families and
// how a Backend resolves a tuned configuration (tunecache.go has the cache
// file, tuner.go the search). See "Autotuning" in doc.go.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/shaders"
	"github.com/flashvk/flashvk/internal/spec"
)

// Candidate is one configuration of a tunable kernel family. Its String
// is stable: the tune cache stores it and the family's Parse reads it
// back.
type Candidate interface{ String() string }

// Tuning directions.
const (
	DirFwd = "fwd"
	DirBwd = "bwd"
)

// TuneFamily is a tunable kernel family: a kernel (or kernel stage) whose
// launch configuration the tuner may choose. A family is registered once
// (registerTuneFamily, from an init function) and consulted by the kernel
// code through Backend.tuned.
type TuneFamily struct {
	// Name is the family's name in the cache ("flash", "bwd_dkdv", …).
	Name string
	// Dir is DirFwd or DirBwd: the pass the tuner times it in.
	Dir string
	// Active reports whether b runs this family for p with storage dt
	// (only active families are tuned).
	Active func(ctx context.Context, b *Backend, p *spec.Problem, dt DType) bool
	// Default is the configuration b uses for p without a tuned one.
	Default func(ctx context.Context, b *Backend, p *spec.Problem, dt DType) (Candidate, error)
	// Candidates lists the configurations to try for p on b (the tuner
	// tries Default first, then these, skipping duplicates and those Check
	// rejects).
	Candidates func(ctx context.Context, b *Backend, p *spec.Problem, dt DType) ([]Candidate, error)
	// Parse reads a Candidate back from its String.
	Parse func(s string) (Candidate, error)
	// Check reports why c cannot run p on b (nil: it can). A tuned
	// candidate that fails Check is ignored with a warning.
	Check func(ctx context.Context, b *Backend, p *spec.Problem, dt DType, c Candidate) error
}

var (
	tuneFamMu    sync.Mutex
	tuneFamilies []*TuneFamily
)

// registerTuneFamily adds f to the registry (tuned in registration order
// within a direction). It panics on a duplicate name or a missing hook.
func registerTuneFamily(f *TuneFamily) {
	tuneFamMu.Lock()
	defer tuneFamMu.Unlock()
	if f.Name == "" || (f.Dir != DirFwd && f.Dir != DirBwd) || f.Active == nil || f.Default == nil || f.Candidates == nil || f.Parse == nil || f.Check == nil {
		panic(fmt.Sprintf("vkattn: incomplete tune family %q", f.Name))
	}
	for _, g := range tuneFamilies {
		if g.Name == f.Name {
			panic(fmt.Sprintf("vkattn: tune family %q registered twice", f.Name))
		}
	}
	tuneFamilies = append(tuneFamilies, f)
}

// TuneFamilies lists the registered families in tuning order.
func TuneFamilies() []*TuneFamily {
	tuneFamMu.Lock()
	defer tuneFamMu.Unlock()
	return slices.Clone(tuneFamilies)
}

func tuneFamily(name string) *TuneFamily {
	tuneFamMu.Lock()
	defer tuneFamMu.Unlock()
	for _, f := range tuneFamilies {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// TuneKey is what a tuned choice applies to on one device: the family,
// direction, storage type, head dims and whether the mask is causal (either
// alignment). Entries of one key may exist for several sequence lengths;
// a problem uses the one nearest its Nq (see TuneEntry.N).
type TuneKey struct {
	Family string `json:"family"`
	Dir    string `json:"dir"`
	DType  string `json:"dtype"`
	D      int    `json:"d"`
	DV     int    `json:"dv"`
	Causal bool   `json:"causal"`
}

func (k TuneKey) String() string {
	mask := "non-causal"
	if k.Causal {
		mask = "causal"
	}
	d := fmt.Sprintf("d=%d", k.D)
	if k.DV != k.D {
		d += fmt.Sprintf(" dv=%d", k.DV)
	}
	return fmt.Sprintf("%s %s %s %s %s", k.Dir, k.DType, d, mask, k.Family)
}

func tuneKeyOf(f *TuneFamily, p *spec.Problem, dt DType) TuneKey {
	return TuneKey{Family: f.Name, Dir: f.Dir, DType: dt.String(), D: p.D, DV: p.Dv, Causal: p.Causal()}
}

// tuneState is a Backend's view of the tune cache.
type tuneState struct {
	file    string       // the cache file ("" when off)
	off     bool         // disabled (Options.TuneCache "off" or FLASHVK_TUNE=off)
	entries []TuneEntry  // this device's entries
	log     func(string) // Options.Log

	mu       sync.Mutex
	warnings []string
	warned   map[string]bool
	override map[TuneKey]string // forced by the tuner (its private backend only)
}

func (t *tuneState) warn(msg string) {
	t.mu.Lock()
	if t.warned == nil {
		t.warned = map[string]bool{}
	}
	seen := t.warned[msg]
	if !seen {
		t.warned[msg] = true
		t.warnings = append(t.warnings, msg)
	}
	t.mu.Unlock()
	if !seen && t.log != nil {
		t.log("flashvk: " + msg)
	}
}

// lookup returns the candidate string for k and a problem of nq queries:
// the tuner's override, else the cache entry of k whose N is nearest nq
// (in log scale; ties to the larger N).
func (t *tuneState) lookup(k TuneKey, nq int) (cand string, e *TuneEntry, ok bool) {
	t.mu.Lock()
	s, forced := t.override[k]
	t.mu.Unlock()
	if forced {
		return s, nil, true
	}
	best := -1
	bestDist := math.Inf(1)
	for i := range t.entries {
		en := &t.entries[i]
		if en.Key != k || en.N < 1 {
			continue
		}
		dist := math.Abs(math.Log2(float64(nq)) - math.Log2(float64(en.N)))
		if dist < bestDist || (dist == bestDist && en.N > t.entries[best].N) {
			best, bestDist = i, dist
		}
	}
	if best < 0 {
		return "", nil, false
	}
	return t.entries[best].Candidate, &t.entries[best], true
}

func (t *tuneState) setOverride(k TuneKey, c string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.override == nil {
		t.override = map[TuneKey]string{}
	}
	t.override[k] = c
}

func (t *tuneState) clearOverrides() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.override = nil
}

// tuned returns the tuned configuration of family for p with storage dt,
// when the tune cache (or the tuner) names one that is valid here. A named
// configuration that does not parse or does not fit this device is
// ignored with a warning (TuneInfo): the caller then uses its default.
func (b *Backend) tuned(ctx context.Context, family string, p *spec.Problem, dt DType) (Candidate, bool) {
	t := b.tune
	if t == nil {
		return nil, false
	}
	f := tuneFamily(family)
	if f == nil {
		return nil, false
	}
	k := tuneKeyOf(f, p, dt)
	s, _, ok := t.lookup(k, p.Nq)
	if !ok {
		return nil, false
	}
	c, err := f.Parse(s)
	if err == nil {
		err = f.Check(ctx, b, p, dt, c)
	}
	if err != nil {
		t.warn(fmt.Sprintf("tune cache %s: %s: tuned configuration %q is not valid on %s (%v); using the default", t.file, k, s, b.info.Name, err))
		return nil, false
	}
	return c, true
}

// TuneInfo describes a Backend's use of the tune cache.
type TuneInfo struct {
	// File is the cache file read at Open ("" when tuning is off).
	File string
	// Off is true when the cache is disabled (Options.TuneCache "off" or
	// FLASHVK_TUNE=off).
	Off bool
	// Entries are the cache's entries for this device and driver.
	Entries []TuneEntry
	// Warnings: a cache that could not be read (corrupt, another schema
	// version) and tuned configurations ignored because they are not valid
	// on this device.
	Warnings []string
}

// TuneInfo reports the tune cache this Backend uses and its warnings.
func (b *Backend) TuneInfo() TuneInfo {
	t := b.tune
	if t == nil {
		return TuneInfo{Off: true}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return TuneInfo{File: t.file, Off: t.off, Entries: slices.Clone(t.entries), Warnings: slices.Clone(t.warnings)}
}

// Config sources, as Launch.Source reports them.
const (
	SourceDefault = "default"
	SourceTuned   = "tuned"
)

// configFor is the configuration of a scalar kernel for p: a tuned one
// (family = kernel name) when the cache has a valid one, else Config's.
func (b *Backend) configFor(ctx context.Context, kernel string, p *spec.Problem, dt DType) (shaders.Config, string, error) {
	if c, ok := b.tuned(ctx, kernel, p, dt); ok {
		if sc, ok := c.(ScalarTile); ok {
			return shaders.Config(sc), SourceTuned, nil
		}
	}
	c, err := b.Config(kernel, p.D, p.Dv, dt)
	return c, SourceDefault, err
}

// cmTileFor is flash_cm's tile for p: a tuned one when valid, else
// chooseCMTile's.
func (b *Backend) cmTileFor(ctx context.Context, l *CMLayout, p *spec.Problem) (cmTile, string, error) {
	if c, ok := b.tuned(ctx, shaders.KernelFlashCM, p, F16); ok {
		if t, ok := c.(cmTile); ok {
			return t, SourceTuned, nil
		}
	}
	c, err := chooseCMTile(l, p.D, p.Dv, p.Nq, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
	return c, SourceDefault, err
}

// ScalarTile is a scalar kernel's tile configuration as a Candidate:
// "wg64-br64-bc16".
type ScalarTile shaders.Config

func (c ScalarTile) String() string { return fmt.Sprintf("wg%d-br%d-bc%d", c.WG, c.BR, c.BC) }

// ParseScalarTile reads a ScalarTile's String.
func ParseScalarTile(s string) (ScalarTile, error) {
	var c ScalarTile
	if _, err := fmt.Sscanf(s, "wg%d-br%d-bc%d", &c.WG, &c.BR, &c.BC); err != nil || c.String() != s {
		return ScalarTile{}, fmt.Errorf("%w: scalar tile %q (want wgN-brN-bcN)", ErrInvalid, s)
	}
	return c, nil
}

func parseCMTile(s string) (cmTile, error) {
	var c cmTile
	var pf int
	if _, err := fmt.Sscanf(s, "nsg%d-bc%d-mode%d-pf%d", &c.NSG, &c.BC, &c.Mode, &pf); err != nil || pf < 0 || pf > 1 {
		return cmTile{}, fmt.Errorf("%w: flash_cm tile %q (want nsgN-bcN-modeN-pf0|1)", ErrInvalid, s)
	}
	c.Prefetch = pf == 1
	if c.String() != s {
		return cmTile{}, fmt.Errorf("%w: flash_cm tile %q (want nsgN-bcN-modeN-pf0|1)", ErrInvalid, s)
	}
	return c, nil
}

// Scalar candidate grid: powers of two, filtered by CheckConfig and a
// register bound (tiles far above the default's register budget spill).
var (
	tuneWGs = []int{32, 64, 128, 256}
	tuneBRs = []int{8, 16, 32, 64, 128}
	tuneBCs = []int{8, 16, 32, 64}
)

// tuneMaxRegs bounds the per-thread fp32 state of scalar candidates.
const tuneMaxRegs = 160

// scalarRegs is a proxy of a scalar kernel's per-thread fp32 state
// (shaders' register estimates; 0 when not estimated).
func scalarRegs(kernel string, c shaders.Config, d, dv, sg int) int {
	switch kernel {
	case shaders.KernelFlash:
		l, err := shaders.FlashFwdLayout(c, dv, sg)
		if err != nil {
			return 0
		}
		return l.Registers()
	case shaders.KernelBwdDKDV, shaders.KernelBwdDQ:
		rows, other := c.BC, c.BR
		if kernel == shaders.KernelBwdDQ {
			rows, other = c.BR, c.BC
		}
		tx := max(c.WG/rows, 1)
		m := max(rows/max(c.WG/tx, 1), 1)
		cd := func(n int) int { return (n + tx - 1) / tx }
		if kernel == shaders.KernelBwdDKDV {
			return m*(cd(d)+cd(dv)) + m*cd(other)
		}
		return m*cd(d) + m*cd(other)
	}
	return 0
}

// scalarCandidates lists the legal configurations of a scalar kernel.
func scalarCandidates(b *Backend, kernel string, d, dv int, dt DType) []Candidate {
	var out []Candidate
	wgs := slices.Clone(tuneWGs)
	if sg := b.lim.Subgroup; sg > 0 && !slices.Contains(wgs, sg) {
		wgs = append([]int{sg}, wgs...)
	}
	for _, wg := range wgs {
		for _, br := range tuneBRs {
			for _, bc := range tuneBCs {
				c := shaders.Config{WG: wg, BR: br, BC: bc}
				if shaders.CheckConfig(kernel, c, d, dv, dt.Size() == 2, b.lim) != nil {
					continue
				}
				if r := scalarRegs(kernel, c, d, dv, b.lim.Subgroup); r > tuneMaxRegs {
					continue
				}
				out = append(out, ScalarTile(c))
			}
		}
	}
	return out
}

func scalarFamily(kernel, dir string, active func(ctx context.Context, b *Backend, p *spec.Problem, dt DType) bool) *TuneFamily {
	return &TuneFamily{
		Name: kernel, Dir: dir, Active: active,
		Default: func(_ context.Context, b *Backend, p *spec.Problem, dt DType) (Candidate, error) {
			c, err := b.Config(kernel, p.D, p.Dv, dt)
			return ScalarTile(c), err
		},
		Candidates: func(_ context.Context, b *Backend, p *spec.Problem, dt DType) ([]Candidate, error) {
			cs := scalarCandidates(b, kernel, p.D, p.Dv, dt)
			if def, err := b.Config(kernel, p.D, p.Dv, dt); err == nil {
				nearestFirst(cs, func(c Candidate) []int {
					t := c.(ScalarTile)
					return []int{t.WG, t.BR, t.BC}
				}, []int{def.WG, def.BR, def.BC})
			}
			return cs, nil
		},
		Parse: func(s string) (Candidate, error) { return ParseScalarTile(s) },
		Check: func(_ context.Context, b *Backend, p *spec.Problem, dt DType, c Candidate) error {
			sc, ok := c.(ScalarTile)
			if !ok {
				return fmt.Errorf("%w: %T is not a scalar tile", ErrInvalid, c)
			}
			if err := shaders.CheckConfig(kernel, shaders.Config(sc), p.D, p.Dv, dt.Size() == 2, b.lim); err != nil {
				return err
			}
			// lavapipe silently ends loops past LavapipeLoopLimit: a tuned
			// tile must not cross it where the default does not.
			if isLavapipe(b.info) {
				n := shaders.LoopIterations(kernel, shaders.Config(sc), p.D, p.Dv, p.Nq, p.Nk, p.Group())
				def, err := b.Config(kernel, p.D, p.Dv, dt)
				if n > shaders.LavapipeLoopLimit && (err != nil || shaders.LoopIterations(kernel, def, p.D, p.Dv, p.Nq, p.Nk, p.Group()) <= shaders.LavapipeLoopLimit) {
					return fmt.Errorf("%d loop iterations per invocation exceed lavapipe's limit of %d for Nq=%d Nk=%d", n, shaders.LavapipeLoopLimit, p.Nq, p.Nk)
				}
			}
			return nil
		},
	}
}

// isLavapipe reports whether info is Mesa's lavapipe (llvmpipe).
func isLavapipe(info device.Info) bool {
	const driverIDLLVMPipe = 13 // VK_DRIVER_ID_MESA_LLVMPIPE
	return info.DriverID == driverIDLLVMPipe || strings.Contains(strings.ToLower(info.Name), "llvmpipe")
}

// dispatches is an Active hook: whether the pass of direction dir of p
// dispatches kernel (per Launches, which records as Forward and Backward
// do).
func dispatches(kernel, dir string) func(ctx context.Context, b *Backend, p *spec.Problem, dt DType) bool {
	return func(ctx context.Context, b *Backend, p *spec.Problem, dt DType) bool {
		ls, err := b.Launches(ctx, p, dt, dir == DirBwd)
		return err == nil && slices.ContainsFunc(ls, func(l Launch) bool { return l.Kernel == kernel })
	}
}

func init() {
	registerTuneFamily(scalarFamily(shaders.KernelFlash, DirFwd, dispatches(shaders.KernelFlash, DirFwd)))
	registerTuneFamily(&TuneFamily{
		Name: shaders.KernelFlashCM, Dir: DirFwd, Active: dispatches(shaders.KernelFlashCM, DirFwd),
		Default: func(ctx context.Context, b *Backend, p *spec.Problem, dt DType) (Candidate, error) {
			if b.cm == nil {
				return nil, fmt.Errorf("%w: flash_cm not in use", ErrUnsupported)
			}
			l, err := b.flashCMLayout(ctx)
			if err != nil {
				return nil, err
			}
			c, err := chooseCMTile(l, p.D, p.Dv, p.Nq, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
			return c, err
		},
		Candidates: func(ctx context.Context, b *Backend, p *spec.Problem, dt DType) ([]Candidate, error) {
			if b.cm == nil {
				return nil, fmt.Errorf("%w: flash_cm not in use", ErrUnsupported)
			}
			l, err := b.flashCMLayout(ctx)
			if err != nil {
				return nil, err
			}
			var out []Candidate
			for _, nsg := range []int{2, 4, 8} {
				for _, bc := range []int{32, 64, 128} {
					for _, mode := range []int{0, 1} {
						for _, pf := range []bool{true, false} {
							c := cmTile{NSG: nsg, BC: bc, Mode: mode, Prefetch: pf}
							if cmCheckTile(l, c, p.D, p.Dv, b.lim.SharedBytes, b.lim.MaxWorkgroupSize) == nil {
								out = append(out, c)
							}
						}
					}
				}
			}
			if def, err := chooseCMTile(l, p.D, p.Dv, p.Nq, b.lim.SharedBytes, b.lim.MaxWorkgroupSize); err == nil {
				vec := func(t cmTile) []int {
					pf := 1
					if t.Prefetch {
						pf = 2
					}
					return []int{t.NSG, t.BC, 1 << t.Mode, pf}
				}
				nearestFirst(out, func(c Candidate) []int { return vec(c.(cmTile)) }, vec(def))
			}
			return out, nil
		},
		Parse: func(s string) (Candidate, error) { return parseCMTile(s) },
		Check: func(ctx context.Context, b *Backend, p *spec.Problem, dt DType, c Candidate) error {
			t, ok := c.(cmTile)
			if !ok {
				return fmt.Errorf("%w: %T is not a flash_cm tile", ErrInvalid, c)
			}
			if b.cm == nil || dt != F16 {
				return fmt.Errorf("%w: flash_cm not in use", ErrUnsupported)
			}
			l, err := b.flashCMLayout(ctx)
			if err != nil {
				return err
			}
			return cmCheckTile(l, t, p.D, p.Dv, b.lim.SharedBytes, b.lim.MaxWorkgroupSize)
		},
	})
	registerTuneFamily(scalarFamily(shaders.KernelBwdDKDV, DirBwd, dispatches(shaders.KernelBwdDKDV, DirBwd)))
	registerTuneFamily(scalarFamily(shaders.KernelBwdDQ, DirBwd, dispatches(shaders.KernelBwdDQ, DirBwd)))
}

// nearestFirst orders cs by distance from a reference point in log2
// space (stable), so that a bounded search (TuneOptions.MaxCandidates)
// explores the default's neighbourhood first.
func nearestFirst(cs []Candidate, vec func(Candidate) []int, ref []int) {
	dist := func(c Candidate) float64 {
		d := 0.0
		for i, x := range vec(c) {
			d += math.Abs(math.Log2(float64(max(x, 1))) - math.Log2(float64(max(ref[i], 1))))
		}
		return d
	}
	slices.SortStableFunc(cs, func(a, b Candidate) int {
		da, db := dist(a), dist(b)
		switch {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return 0
	})
}

// familyNames lists the names of fs.
func familyNames(fs []*TuneFamily) string {
	var s []string
	for _, f := range fs {
		s = append(s, f.Name)
	}
	return strings.Join(s, ", ")
}
