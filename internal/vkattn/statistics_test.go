//go:build cgo

package vkattn

import (
	"context"
	"errors"
	"testing"

	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/flashvk/flashvk/internal/spec"
)

// TestStatistics: on a device opened with pipeline statistics that
// supports them, every launch of a plan reports its pipeline's compiler
// statistics; otherwise Statistics, and Open with
// Options.PipelineStatistics on a device without them, fail with
// ErrUnsupported.
func TestStatistics(t *testing.T) {
	ctx := context.Background()
	p := bshdProblem(1, 2, 2, 64, 64, 32)
	plan := func(b *Backend) *Plan {
		pl, err := b.Plan(ctx, p, spec.Float32, Fwd)
		if err != nil {
			t.Fatal(err)
		}
		return pl
	}

	off := openBackend(t, "")
	if _, err := off.Statistics(&plan(off).Launches[0]); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Statistics without PipelineStatistics: %v, want ErrUnsupported", err)
	}

	opt := devicetest.Options(t)
	opt.PipelineStatistics = true
	dev := devicetest.OpenWith(t, opt)
	supported := dev.Info().PipelineStatistics
	b := openBackendOn(t, dev, Options{})
	pl := plan(b)
	for i := range pl.Launches {
		l := &pl.Launches[i]
		st, err := b.Statistics(l)
		if !supported {
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("%s: Statistics on %s: %v, want ErrUnsupported", l.Name(), dev.Info().Name, err)
			}
			continue
		}
		if err != nil || len(st) == 0 {
			t.Errorf("%s: statistics %v, %v", l.Name(), st, err)
		}
		for _, s := range st {
			t.Logf("%s: %s", l.Name(), s)
		}
	}

	ob, err := Open(Options{Device: opt.Select, Library: opt.Library, NoDiskCache: true, PipelineStatistics: true})
	switch {
	case supported && err != nil:
		t.Errorf("Open with PipelineStatistics on %s: %v", dev.Info().Name, err)
	case !supported && !errors.Is(err, ErrUnsupported):
		t.Errorf("Open with PipelineStatistics on %s, which has none: %v, want ErrUnsupported", dev.Info().Name, err)
	}
	if ob != nil {
		ob.Close()
	}
	if !supported {
		t.Logf("%s reports no compiler statistics: the refusals are checked; the statistics need a device with VK_KHR_pipeline_executable_properties", dev.Info().Name)
	}
}
