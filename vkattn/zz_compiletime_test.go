package vkattn

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/flashvk/flashvk/internal/spec"
)

// Temporary: first-dispatch (JIT) times per kernel on a cold Mesa cache.
func TestZZCompileTimes(t *testing.T) {
	if os.Getenv("ZZ_CT") == "" {
		t.Skip()
	}
	ctx := context.Background()
	for _, kernel := range []string{"flash", "minimal", "naive"} {
		b := openBackend(t, kernel)
		for _, d := range []int{1, 8, 16, 64, 256} {
			h := newHostProblem(1, 1, 1, 1, 8, 8, d, d, spec.MaskNone)
			t0 := time.Now()
			if err := ForwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse); err != nil {
				t.Fatal(err)
			}
			t1 := time.Now()
			if err := ForwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse); err != nil {
				t.Fatal(err)
			}
			t2 := time.Now()
			t.Logf("%s d=%d: first %v, second %v", kernel, d, t1.Sub(t0), t2.Sub(t1))
			if kernel == "flash" {
				t0 = time.Now()
				if err := BackwardHost(ctx, b, h.p, h.q, h.k, h.v, h.o, h.lse, h.dO, h.dq, h.dk, h.dv); err != nil {
					t.Fatal(err)
				}
				t.Logf("backward d=%d: first %v", d, time.Since(t0))
			}
		}
	}
}
