//go:build cgo

package vkattn

import (
	"context"
	"errors"
	"testing"

	"github.com/flashvk/flashvk/internal/pipeline"
	"github.com/flashvk/flashvk/internal/spec"
)

// gridBackend is a synthetic H200 with its real workgroup-count limits.
func gridBackend(t *testing.T, kernel string) *Backend {
	info := h200Info()
	info.MaxWorkgroupCount = [3]uint32{1<<31 - 1, 65535, 65535}
	info.SubgroupOps.Arithmetic = true
	return syntheticBackend(t, info, kernel, nil)
}

// TestBatchChunkBiasGridZ: the bias kernels put B·Hq in the grid's z, so
// the host path's chunk of a per-batch, per-head bias keeps n·Hq within
// the device's z count (it took the batch alone: Plan succeeded and the
// call failed).
func TestBatchChunkBiasGridZ(t *testing.T) {
	ctx := context.Background()
	b := gridBackend(t, "flash")
	p := bshdProblem(2048, 32, 32, 64, 64, 64)
	p.Ext = &spec.Ext{Left: -1, Right: -1, Bias: &spec.Bias{DType: spec.Float32, Batch: 32 * 64 * 64, Head: 64 * 64, Row: 64}}
	cb, err := b.MaxBatchChunk(ctx, p, spec.Float32, false)
	if err != nil {
		t.Fatal(err)
	}
	if cb < 1 || cb*32 > 65535 {
		t.Fatalf("MaxBatchChunk = %d: z of the bias kernels %d", cb, cb*32)
	}
	pl, err := b.Plan(ctx, p.Batches(0, cb), spec.Float32, Fwd)
	if err != nil {
		t.Fatalf("chunk of %d batches: %v", cb, err)
	}
	for _, l := range pl.Launches {
		if err := pipeline.CheckGroups(b.info, l.Grid); err != nil {
			t.Errorf("launch %s grid %v: %v", l.Kernel, l.Grid, err)
		}
	}
	// The whole problem in one submission (a resident call) is refused by
	// Plan, not by the call.
	if _, err := b.Plan(ctx, p, spec.Float32, Fwd); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Plan of 2048 batches × 32 heads of bias grid: %v, want ErrTooLarge", err)
	}
}

// TestPlanRefusesGrids: grids past the device's workgroup counts are
// refused by Plan (and MaxBatchChunk) with ErrTooLarge — 70,000 packed
// sequences (z), a KV-cache prefill whose decode tiles exceed y — instead
// of planning a call that then fails.
func TestPlanRefusesGrids(t *testing.T) {
	ctx := context.Background()
	b := gridBackend(t, "flash")
	n := 70000
	cu := make([]int32, n+1)
	for i := range cu {
		cu[i] = int32(16 * i)
	}
	p := bshdProblem(n, 4, 4, 16, 16, 64)
	p.Ext = &spec.Ext{Left: -1, Right: -1, CuQ: cu, CuK: cu}
	p.Q, p.K, p.V, p.O = spec.BSHD(16*n, 4, 64), spec.BSHD(16*n, 4, 64), spec.BSHD(16*n, 4, 64), spec.BSHD(16*n, 4, 64)
	if _, err := b.MaxBatchChunk(ctx, p, spec.Float32, false); !errors.Is(err, ErrTooLarge) {
		t.Errorf("packed, %d sequences: MaxBatchChunk %v, want ErrTooLarge", n, err)
	}
	if _, err := b.Plan(ctx, p, spec.Float32, Fwd); !errors.Is(err, ErrTooLarge) {
		t.Errorf("packed, %d sequences: Plan %v, want ErrTooLarge", n, err)
	}

	kb := gridBackend(t, "")
	kp := bshdProblem(1, 64, 8, 16384, 32768, 128)
	kp.Mask = spec.MaskCausalBottomRight
	kp.KV = &spec.KV{SeqLens: []int32{16384}, New: 16384, NewK: spec.BSHD(16384, 8, 128), NewV: spec.BSHD(16384, 8, 128),
		PageSize: 32768, MaxPages: 1, Pages: 1, Table: []int32{0}}
	if _, err := kb.Plan(ctx, kp, spec.Float16, KV); !errors.Is(err, ErrTooLarge) {
		t.Errorf("KV prefill of 16384 rows × 8 query heads per KV head: Plan %v, want ErrTooLarge", err)
	}
}

// TestBufLimitStaysBindable: a buffer that one binding reaches is never
// rounded past the binding range by its size class (an fp16 Q of 15
// batches × 32768 × 32 heads × 128 on an H200: 4,026,531,840 bytes would
// have become a 4 GiB buffer, refused to the bound kernel).
func TestBufLimitStaysBindable(t *testing.T) {
	b := &Backend{bindBytes: 4292870144, maxBuf: 1 << 40}
	for _, n := range []int64{1, 4026531840, 4292870144 - 1, 4292870144} {
		if c := classFor(n, b.bufLimit(n)); c < n || c > b.bindBytes {
			t.Errorf("%d bytes: buffer of %d, want %d … %d", n, c, n, b.bindBytes)
		}
	}
	if n := int64(5 << 30); classFor(n, b.bufLimit(n)) < n {
		t.Errorf("%d bytes: smaller buffer", n)
	}
}
