package attention_test

import (
	"context"
	"testing"

	"github.com/flashvk/flashvk/attention"
)

func TestPlan(t *testing.T) {
	ctx := context.Background()
	q := attention.Shape{B: 2, S: 100, H: 4, D: 32}
	kv := attention.Shape{B: 2, S: 100, H: 2, D: 32}
	cpuE, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer cpuE.Close()
	pl, err := cpuE.Plan(ctx, q, kv, kv, attention.BSHD, attention.Float32, attention.Options{}, false)
	if err != nil || pl.Family != "cpu" || len(pl.Launches) != 1 || pl.Launches[0].TileRows != 64 || pl.Pass != "fwd" {
		t.Errorf("cpu engine: %+v, %v", pl, err)
	}
	if _, err := cpuE.Plan(ctx, q, attention.Shape{B: 2, S: 100, H: 3, D: 32}, kv, attention.BSHD, attention.Float32, attention.Options{}, false); err == nil {
		t.Error("3 kv heads for 4 query heads: no error")
	}
	e := openVulkan(t, "flash")
	fwd, err := e.Plan(ctx, q, kv, kv, attention.BSHD, attention.Float32, attention.Options{Causal: true}, false)
	if err != nil || fwd.Family != "flash" || len(fwd.Launches) != 1 || fwd.Launches[0].Kernel != "flash" ||
		fwd.Launches[0].Grid[1] != 4 || fwd.Launches[0].Grid[2] != 2 || fwd.Launches[0].Name == "" {
		t.Errorf("forward plan %+v, %v", fwd, err)
	}
	bwd, err := e.Plan(ctx, q, kv, kv, attention.BSHD, attention.Float32, attention.Options{}, true)
	if err != nil || bwd.Family != "bwd" || len(bwd.Launches) != 3 || bwd.Launches[1].Kernel != "bwd_dkdv" || bwd.Launches[1].Grid[1] != 2 {
		t.Errorf("backward plan %+v, %v", bwd, err)
	}
	// Scratch: the forward's options buffer; the backward's too, and D
	// (float32 [B, Hq, Nq]); none on the CPU backend.
	if d := int64(4 * q.B * q.H * q.S); fwd.ScratchBytes <= 0 || fwd.ScratchBytes >= 1024 || bwd.ScratchBytes != fwd.ScratchBytes+d || pl.ScratchBytes != 0 {
		t.Errorf("scratch: forward %d, backward %d (want the forward's + D's %d), cpu %d", fwd.ScratchBytes, bwd.ScratchBytes, d, pl.ScratchBytes)
	}
}
