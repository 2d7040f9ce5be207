package shaders

import (
	"os"
	"testing"
	"time"
)

func TestScratchCompileTime(t *testing.T) {
	if os.Getenv("SCRATCH_CT") == "" {
		t.Skip()
	}
	g := openGPU(t)
	defer g.d.Close()
	for _, k := range Kernels {
		for _, d := range []int{64, 128, 256} {
			c, err := DefaultConfig(k, d, d, false, g.lim)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			g.pipe(t, k, DTypeF32, c, d, d, 0)
			t.Logf("%s D=%d %+v: %v", k, d, c, time.Since(t0))
		}
	}
}
