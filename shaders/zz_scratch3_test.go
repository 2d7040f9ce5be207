package shaders

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestScratchHang submits one kernel many times on a tiny problem.
func TestScratchHang(t *testing.T) {
	k := os.Getenv("SCRATCH_HANG")
	if k == "" {
		t.Skip()
	}
	g := openGPU(t)
	defer g.d.Close()
	ctx := context.Background()
	dd := 40
	if v := os.Getenv("SCRATCH_D"); v != "" {
		fmt.Sscan(v, &dd)
	}
	p := sprob{B: 1, Hq: 1, Hkv: 1, Nq: 1, Nk: 1, D: dd, DV: dd, Layout: "bshd"}
	prm := BSHDParams(1, 1, 1, 1, 1, dd, dd)
	prm.Scale = 0.1
	push := prm.Bytes()
	z := make([]float64, 4*dd)
	bq, bk, bv, bdo, bl, bD, bo := g.upload(t, z, false), g.upload(t, z, false), g.upload(t, z, false), g.upload(t, z, false), g.upload(t, z, false), g.upload(t, z, false), g.upload(t, z, false)
	bx, by := g.upload(t, z, false), g.upload(t, z, false)
	c, _ := DefaultConfig(k, p.D, p.DV, false, g.lim)
	if v := os.Getenv("SCRATCH_CFG"); v != "" {
		fmt.Sscanf(v, "%d,%d,%d", &c.WG, &c.BR, &c.BC)
	}
	pl := g.pipe(t, k, DTypeF32, c, p.D, p.DV, 0)
	for it := 0; it < 3; it++ {
		t0 := time.Now()
		r := g.d.Record()
		var err error
		switch k {
		case KernelBwdDQ:
			err = r.Dispatch(pl, push, BwdDQGrid(1, 1, 1, c.BR), bq, bk, bv, bdo, bl, bD, bx)
		case KernelBwdDKDV:
			err = r.Dispatch(pl, push, BwdDKDVGrid(1, 1, 1, c.BC), bq, bk, bv, bdo, bl, bD, bx, by)
		case KernelFlash:
			err = r.Dispatch(pl, push, FlashFwdGrid(1, 1, 1, c.BR), bq, bk, bv, bo, bl)
		case KernelBwdPre:
			err = r.Dispatch(pl, push, BwdPreGrid(1, 1, 1, c.BR), bo, bdo, bD)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.d.Submit(ctx, r); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		t.Logf("%s %+v D=%d iteration %d: %v", k, c, dd, it, time.Since(t0))
	}
}
