package attention_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/flashvk/flashvk/attention"
)

// TestPipelineStatisticsVulkan: with Config.PipelineStatistics on a
// device that reports compiler statistics every launch of a plan carries
// them; on one that does not, Open fails with ErrBackend; without it,
// launches carry none.
func TestPipelineStatisticsVulkan(t *testing.T) {
	skipWithoutVulkan(t)
	ctx := context.Background()
	q := attention.Shape{B: 1, S: 64, H: 2, D: 32}
	plan := func(e *attention.Engine) *attention.Plan {
		pl, err := e.Plan(ctx, q, q, q, attention.BSHD, attention.Float32, attention.Options{}, false)
		if err != nil {
			t.Fatal(err)
		}
		return pl
	}
	for _, l := range plan(openVulkan(t, "")).Launches {
		if l.Statistics != nil {
			t.Errorf("%s: statistics without Config.PipelineStatistics: %v", l.Name, l.Statistics)
		}
	}

	devs, err := attention.Devices(attention.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0] // a device that reports statistics where there is one
	for _, g := range devs {
		if g.PipelineStatistics {
			d = g
			break
		}
	}
	cfg := attention.Config{Backend: attention.Vulkan, Device: strconv.Itoa(d.Index), PipelineStatistics: true, PipelineCacheDir: "off",
		Validation: os.Getenv("FLASHVK_VALIDATION") == "1"}
	e, err := attention.Open(cfg)
	if !d.PipelineStatistics {
		if !errors.Is(err, attention.ErrBackend) {
			t.Fatalf("Open with PipelineStatistics on %s, which reports none: %v, want ErrBackend", d.Name, err)
		}
		t.Logf("no device reports compiler statistics: Open's refusal is checked (%v)", err)
		return
	}
	if err != nil {
		t.Fatalf("Open with PipelineStatistics on %s: %v", d.Name, err)
	}
	defer e.Close()
	if !e.Info().Vulkan.PipelineStatistics {
		t.Errorf("engine with PipelineStatistics: %+v", e.Info().Vulkan)
	}
	for _, l := range plan(e).Launches {
		if len(l.Statistics) == 0 {
			t.Errorf("%s: no statistics", l.Name)
		}
		for _, s := range l.Statistics {
			if s.Name == "" || s.ValueString() == "" {
				t.Errorf("%s: statistic %+v", l.Name, s)
			}
			t.Logf("%s: %s", l.Name, s)
		}
	}
}
