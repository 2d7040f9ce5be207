//go:build cgo

package vkattn

// Per-device tile autotuning: the tunable stages of the kernel families,
// the tuned configurations a Backend was given (Options.Tuned) and how a
// family's plan resolves one (tuner.go has the search). See "Autotuning"
// in doc.go.

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/spec"
)

// Candidate is one configuration of a tunable stage. Its String is
// stable: the tune cache stores it and the stage's Parse reads it back.
type Candidate interface{ String() string }

// Tunable is a stage of a kernel family whose launch configuration the
// tuner may choose (a family lists its tunables; the family's plan asks
// Backend.tuned for the configuration).
type Tunable struct {
	// Name is the stage's name in the cache ("flash", "bwd_dkdv", …).
	Name string
	// Dir is the pass the tuner times it in.
	Dir Dir
	// Default is the configuration b uses for p without a tuned one.
	Default func(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) (Candidate, error)
	// Candidates lists the configurations to try for p on b (the tuner
	// tries Default first, then these, skipping duplicates and those Check
	// rejects).
	Candidates func(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType) ([]Candidate, error)
	// Parse reads a Candidate back from its String.
	Parse func(s string) (Candidate, error)
	// Check reports why c cannot run p on b (nil: it can). A tuned
	// candidate that fails Check is ignored with a warning.
	Check func(ctx context.Context, b *Backend, p *spec.Problem, dt spec.DType, c Candidate) error
	// PlainOnly: a choice tuned without options (TuneKey.Options "")
	// does not apply to a problem with options. Every stage first takes
	// the entry of the problem's own options; a stage whose kernel has an
	// extended variant with other resources (and its own default rule)
	// sets PlainOnly, so that a choice timed on the plain variant never
	// replaces the extended variant's default, while the others fall back
	// to the plain entry.
	PlainOnly bool
	// FromPlain (optional) fits a choice tuned without options to p when
	// p, which has options, takes it as the fallback above (a coopmat dQ
	// tile's staggered walk, which a bias does not take, walks in order).
	FromPlain func(c Candidate, p *spec.Problem) Candidate
}

// Tunables lists the tunable stages of every family, in registry order
// (the tuner tunes the stages of one direction in this order).
func Tunables() []*Tunable {
	var ts []*Tunable
	for _, f := range registry {
		ts = append(ts, f.tunables...)
	}
	return ts
}

func tunableByName(name string) *Tunable {
	for _, f := range registry {
		for _, t := range f.tunables {
			if t.Name == name {
				return t
			}
		}
	}
	return nil
}

// TuneKey is what a tuned choice applies to on one device: the stage,
// direction, storage type, head dims, whether the mask is causal (either
// alignment) and the options beyond them (spec.Problem.Features: "" for
// none, "softcap", "window+dropout", …). Choices for one key may exist for
// several sequence lengths; a problem uses the one nearest its Nq.
type TuneKey struct {
	Stage   string
	Dir     Dir
	DType   spec.DType
	D, DV   int
	Causal  bool
	Options string
}

func (k TuneKey) String() string {
	s := fmt.Sprintf("%s %s (%v, d %d, dv %d, causal %v", k.Stage, k.Dir, k.DType, k.D, k.DV, k.Causal)
	if k.Options != "" {
		s += ", " + k.Options
	}
	return s + ")"
}

func tuneKeyOf(t *Tunable, p *spec.Problem, dt spec.DType) TuneKey {
	return TuneKey{Stage: t.Name, Dir: t.Dir, DType: dt, D: p.D, DV: p.Dv, Causal: p.Causal(), Options: p.Features()}
}

// Tuned is a tuned configuration: for Key, at sequence length N, the
// Candidate (its String) was the fastest verified one; Default was the
// default rule's then ("" unknown). An entry whose Candidate is its
// Default (the tuner found nothing faster) gives way to today's default
// rule where that now chooses otherwise: the rule changed since, on
// newer measurements.
type Tuned struct {
	Key       TuneKey
	N         int
	Candidate string
	Default   string
}

// tuneState is a Backend's tuned configurations.
type tuneState struct {
	log func(string) // Options.Log

	mu       sync.Mutex
	file     string  // where the entries came from (warnings)
	entries  []Tuned // this device's entries
	warnings []string
	warned   map[string]bool
	override map[TuneKey]string // forced by the tuner (its private backend only)
}

func newTuneState(opts Options) *tuneState {
	return &tuneState{log: opts.Log}
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

// lookup returns the entry for k and a problem of nq queries: the tuner's
// override (as an entry without a Default), else the entry of k whose N
// is nearest nq (in log scale; ties to the larger N).
func (t *tuneState) lookup(k TuneKey, nq int) (Tuned, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, forced := t.override[k]; forced {
		return Tuned{Key: k, Candidate: s}, true
	}
	best := -1
	bestDist := math.Inf(1)
	for i, en := range t.entries {
		if en.Key != k || en.N < 1 {
			continue
		}
		dist := math.Abs(math.Log2(float64(nq)) - math.Log2(float64(en.N)))
		if dist < bestDist || (dist == bestDist && en.N > t.entries[best].N) {
			best, bestDist = i, dist
		}
	}
	if best < 0 {
		return Tuned{}, false
	}
	return t.entries[best], true
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

// tuned returns the tuned configuration of stage for p with storage dt,
// when the tuned entries (or the tuner) name one that is valid here. A
// named configuration that does not parse or does not fit this device is
// ignored with a warning (TuneWarnings): the caller then uses its default.
func (b *Backend) tuned(ctx context.Context, stage string, p *spec.Problem, dt spec.DType) (Candidate, bool) {
	f := tunableByName(stage)
	if f == nil {
		return nil, false
	}
	k := tuneKeyOf(f, p, dt)
	en, ok := b.tune.lookup(k, p.Nq)
	fromPlain := false
	if !ok && k.Options != "" && !f.PlainOnly {
		k.Options = ""
		en, ok = b.tune.lookup(k, p.Nq)
		fromPlain = ok
	}
	if !ok {
		return nil, false
	}
	if en.Default != "" && en.Candidate == en.Default {
		if def, err := f.Default(ctx, b, p, dt); err == nil && def.String() != en.Default {
			return nil, false // (the default of its day; today's rule chooses def)
		}
	}
	s := en.Candidate
	c, err := f.Parse(s)
	if err == nil && fromPlain && f.FromPlain != nil {
		c = f.FromPlain(c, p)
	}
	if err == nil {
		err = f.Check(ctx, b, p, dt, c)
	}
	if err != nil {
		b.tune.mu.Lock()
		file := b.tune.file
		b.tune.mu.Unlock()
		b.tune.warn(fmt.Sprintf("tune cache %s: %s: tuned configuration %q is not valid on %s (%v); using the default", file, k, s, b.info.Name, err))
		return nil, false
	}
	return c, true
}

// TuneWarnings are the tuned configurations ignored so far because they
// are not valid on this device.
func (b *Backend) TuneWarnings() []string {
	b.tune.mu.Lock()
	defer b.tune.mu.Unlock()
	return slices.Clone(b.tune.warnings)
}

// SetTuned replaces the tuned configurations the Backend uses (Options.Tuned
// and TuneFile at Open); file names their source in warnings.
func (b *Backend) SetTuned(file string, entries []Tuned) {
	b.tune.mu.Lock()
	defer b.tune.mu.Unlock()
	b.tune.file, b.tune.entries = file, slices.Clone(entries)
}

// Config sources, as Launch.Source reports them.
const (
	SourceDefault = "default"
	SourceTuned   = "tuned"
)

// isLavapipe reports whether info is Mesa's lavapipe (llvmpipe).
func isLavapipe(info device.Info) bool {
	const driverIDLLVMPipe = 13 // VK_DRIVER_ID_MESA_LLVMPIPE
	return info.DriverID == driverIDLLVMPipe || strings.Contains(strings.ToLower(info.Name), "llvmpipe")
}

// nearestFirst orders cs by distance from a reference point in log2
// space (stable), so that a bounded search (TuneOptions.MaxCandidates)
// explores the default's neighbourhood first.
func nearestFirst(cs []Candidate, vec func(Candidate) []int, ref []int) {
	slices.SortStableFunc(cs, func(a, b Candidate) int { return cmp.Compare(log2Dist(vec(a), ref), log2Dist(vec(b), ref)) })
}
