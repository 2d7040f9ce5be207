//go:build cgo

package main

import (
	"context"
	"embed"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/x448/float16"
)

//go:embed shaders/*.spv
var spvFS embed.FS

func spirv(name string) []byte {
	b, err := spvFS.ReadFile("shaders/" + name + ".spv")
	if err != nil {
		panic(fmt.Sprintf("shaders/%s.spv not embedded (run make bench-shaders): %v", name, err))
	}
	return b
}

func f16(x float32) uint16     { return uint16(float16.Fromfloat32(x)) }
func f16to32(h uint16) float32 { return float16.Frombits(h).Float32() }
func r16(x float64) float64    { return float64(f16to32(f16(float32(x)))) }

// randF16 fills n fp16 values: normal (like torch.randn) when normal, else
// uniform in [-1, 1).
func randF16(rng *rand.Rand, n int, normal bool) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		var x float64
		if normal {
			x = rng.NormFloat64()
		} else {
			x = 2*rng.Float64() - 1
		}
		out[i] = f16(float32(x))
	}
	return out
}

func spec(id, v uint32) device.Spec { return device.Spec{ID: id, Value: v} }

// subgroupReq is the RequiredSubgroupSize for kernels that assume the
// device's default subgroup size.
func subgroupReq(info device.Info) uint32 {
	if info.SubgroupSizeControl || info.MinSubgroupSize == info.MaxSubgroupSize {
		return info.SubgroupSize
	}
	return 0
}

// timing is the per-dispatch GPU time distribution of one kernel.
type timing struct {
	Median, P10, P90, Min time.Duration
	Iters                 int
}

func (t timing) ms() float64 { return float64(t.Median) / 1e6 }

func quantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(q*float64(len(s)-1) + 0.5)
	return s[min(max(k, 0), len(s)-1)]
}

// timeDispatch records warm dispatches (one submission), then iters
// dispatches separated by barriers with a timestamp after each, and returns
// the distribution of the gaps between consecutive timestamps.
func timeDispatch(ctx context.Context, d *device.Device, dispatch func(r *device.Recorder) error, warm, iters int) (timing, error) {
	if warm > 0 {
		r := d.Record()
		for range warm {
			if err := dispatch(r); err != nil {
				return timing{}, err
			}
			r.Barrier()
		}
		if _, err := d.Submit(ctx, r); err != nil {
			return timing{}, err
		}
	}
	r := d.Record()
	r.Timestamp("t0")
	for i := range iters {
		if err := dispatch(r); err != nil {
			return timing{}, err
		}
		r.Barrier()
		r.Timestamp(fmt.Sprintf("t%d", i+1))
	}
	res, err := d.Submit(ctx, r)
	if err != nil {
		return timing{}, err
	}
	ds := make([]time.Duration, iters)
	for i := range iters {
		ds[i] = res.Elapsed(fmt.Sprintf("t%d", i), fmt.Sprintf("t%d", i+1))
		if ds[i] <= 0 {
			return timing{}, fmt.Errorf("no GPU timestamps (timestamp %d)", i)
		}
	}
	return timing{Median: quantile(ds, 0.5), P10: quantile(ds, 0.1), P90: quantile(ds, 0.9), Min: quantile(ds, 0), Iters: iters}, nil
}

// relL2 is ‖got − want‖₂ / ‖want‖₂ over finite want entries; NaN in got
// gives NaN.
func relL2(got, want []float64) float64 {
	var num, den float64
	for i := range want {
		if math.IsInf(want[i], 0) {
			continue
		}
		e := got[i] - want[i]
		num += e * e
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

func maxAbs(got, want []float64) float64 {
	m := 0.0
	for i := range want {
		if math.IsInf(want[i], 0) {
			continue
		}
		e := math.Abs(got[i] - want[i])
		if math.IsNaN(e) {
			return math.NaN()
		}
		m = max(m, e)
	}
	return m
}

// jsonNum keeps NaN and Inf representable in JSON (as strings).
func jsonNum(x float64) any {
	switch {
	case math.IsNaN(x):
		return "nan"
	case math.IsInf(x, 0):
		return "inf"
	}
	return x
}
