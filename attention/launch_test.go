package attention_test

import (
	"context"
	"testing"

	"github.com/flashvk/flashvk/attention"
)

func TestLaunches(t *testing.T) {
	ctx := context.Background()
	q := attention.Shape{B: 2, S: 100, H: 4, D: 32}
	kv := attention.Shape{B: 2, S: 100, H: 2, D: 32}
	cpuE, err := attention.Open(attention.Config{Backend: attention.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer cpuE.Close()
	if ls, err := cpuE.Launches(ctx, q, kv, kv, attention.BSHD, attention.Float32, attention.Options{}, false); ls != nil || err != nil {
		t.Errorf("cpu engine: %v, %v; want nil, nil", ls, err)
	}
	e := openVulkan(t, "flash")
	fwd, err := e.Launches(ctx, q, kv, kv, attention.BSHD, attention.Float32, attention.Options{Causal: true}, false)
	if err != nil || len(fwd) != 1 || fwd[0].Kernel != "flash" || fwd[0].Grid[1] != 4 || fwd[0].Grid[2] != 2 {
		t.Errorf("forward launches %+v, %v", fwd, err)
	}
	bwd, err := e.Launches(ctx, q, kv, kv, attention.BSHD, attention.Float32, attention.Options{}, true)
	if err != nil || len(bwd) != 3 || bwd[1].Kernel != "bwd_dkdv" || bwd[1].Grid[1] != 2 {
		t.Errorf("backward launches %+v, %v", bwd, err)
	}
}
