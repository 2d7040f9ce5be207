package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/flashvk/flashvk/attention"
)

// SchemaV1 names the benchmark results format written by `flashvk bench
// --json` and by bench/torch_sdpa.py, and read by `flashvk compare` and
// `flashvk report`. docs/results-schema.md documents it field by field.
const SchemaV1 = "flashvk-bench/1"

// ResultsFile is one benchmark run: who produced it, on what, and the
// measured points.
type ResultsFile struct {
	Schema  string `json:"schema"`  // always SchemaV1
	Tool    string `json:"tool"`    // "flashvk" or "torch"
	Version string `json:"version"` // producer version ("devel" for an untagged build)
	Date    string `json:"date"`    // RFC 3339, UTC
	// Device is the device of the run; with several devices (--device
	// all) it is the first, and every result carries its own.
	Device  DeviceInfo `json:"device"`
	Results []Result   `json:"results"`
}

// DeviceInfo names the device and backend a result was measured on.
type DeviceInfo struct {
	Name    string `json:"name"`    // e.g. "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)", "Go CPU backend"
	Driver  string `json:"driver"`  // driver name and version where known ("" otherwise)
	Backend string `json:"backend"` // "vulkan", "cpu", "cuda" (torch), …
}

// Result is one measured problem.
type Result struct {
	Direction string  `json:"direction"` // "fwd", "bwd", or "kv" (a KV-cache decoding call, bench's decode mode)
	DType     string  `json:"dtype"`     // "float16", "float32", "bfloat16"
	B         int     `json:"B"`
	H         int     `json:"H"` // query heads
	Hkv       int     `json:"Hkv"`
	Nq        int     `json:"Nq"`
	Nk        int     `json:"Nk"`
	D         int     `json:"d"`
	Dv        int     `json:"dv"`
	Causal    bool    `json:"causal"`
	Align     string  `json:"align"`  // "top-left" or "bottom-right" (meaningful when causal, or with a window or ALiBi)
	Kernel    string  `json:"kernel"` // kernel variant, e.g. "flash", "naive", torch's "flash"/"efficient"/"math"
	MedianMS  float64 `json:"median_ms"`
	P10MS     float64 `json:"p10_ms"`
	P90MS     float64 `json:"p90_ms"`
	TFLOPS    float64 `json:"tflops"` // FLOPs over the median time (see problem.flops)
	Iters     int     `json:"iters"`
	Clock     string  `json:"clock"` // "gpu-timestamps", "wall", "cuda-events"
	// The packed lengths, window, softcap, ALiBi, key counts, dropout and
	// bias of the problem (each omitted when unset; see features); TFLOPS
	// then counts the visible (query, key) pairs exactly.
	features
	// A KV-cache result (direction "kv") has Nk = the cache capacity per
	// sequence, and: CacheSeqLens, the rows each of the B sequences holds
	// before the call; Append, the rows appended to each before it is
	// attended to; BlockSize, the rows per block of a paged cache (0:
	// contiguous); CacheBytes, the cache bytes one call reads
	// (attention.KVCacheBytes, the memory-bound floor); GBPerS, those
	// bytes over the median time. TFLOPS counts the visible (query,
	// cache row) pairs exactly.
	CacheSeqLens []int   `json:"cache_seqlens,omitempty"`
	Append       int     `json:"append,omitempty"`
	BlockSize    int     `json:"block_size,omitempty"`
	CacheBytes   float64 `json:"cache_bytes,omitempty"`
	GBPerS       float64 `json:"gb_per_s,omitempty"`
	// TimesMS are the per-iteration times in call order (flashvk only), so
	// that a bimodal or drifting series can be seen, not only its quantiles.
	TimesMS []float64 `json:"times_ms,omitempty"`
	// SamplesMS are the medians of the independent timed series of the
	// point (bench --count N > 1: N series of Iters/N calls each, their
	// times concatenated in TimesMS).
	SamplesMS []float64 `json:"samples_ms,omitempty"`
	// Retimed counts timed series discarded for a step (a GPU clock change
	// during timing); Unsteady marks a kept series that still has one.
	Retimed  int  `json:"retimed,omitempty"`
	Unsteady bool `json:"unsteady,omitempty"`
	// Kernels are per-kernel times (bench --per-kernel).
	Kernels []KernelResult `json:"kernels,omitempty"`
	// MaxAbs and RelL2 are the errors against a float64 reference, when
	// the run checked them (bwd: the worst of dQ, dK, dV).
	MaxAbs *Metric `json:"max_abs,omitempty"`
	RelL2  *Metric `json:"rel_l2,omitempty"`
	// Device repeats the device of this result (always written by
	// flashvk; optional on input, where the file's device applies).
	Device *DeviceInfo `json:"device,omitempty"`
	// Launch is the main kernel's launch configuration, when the backend
	// reports it: the forward kernel, or bwd_dkdv for the backward.
	Launch *Launch `json:"launch,omitempty"`
	// Launches are all the dispatches of the measured call, in order
	// (the backward: bwd_pre, bwd_dkdv, bwd_dq), when the backend reports
	// them.
	Launches []Launch `json:"launches,omitempty"`
}

// Launch is a compute dispatch's configuration.
type Launch struct {
	Kernel      string `json:"kernel,omitempty"`       // the dispatched kernel, e.g. "flash", "bwd_dkdv"; "cpu" for the CPU backend
	Grid        []int  `json:"grid,omitempty"`         // workgroups dispatched (x, y, z)
	Base        []int  `json:"base,omitempty"`         // first workgroup of a part of a larger grid (absent: 0, 0, 0)
	Workgroup   []int  `json:"workgroup,omitempty"`    // invocations per workgroup (x, y, z)
	SharedBytes int    `json:"shared_bytes,omitempty"` // shared memory per workgroup
	Tile        string `json:"tile,omitempty"`         // free-form tile description, e.g. "Br=64 Bc=64"
	Source      string `json:"source,omitempty"`       // "tuned" (from the tune cache, see flashvk tune) or "default"
}

// Metric is an error metric. JSON has no infinities or NaN, so a
// non-finite value (a result holding NaN or Inf) is written as the string
// "inf" or "nan"; reading accepts numbers and those strings.
type Metric float64

// MarshalJSON implements json.Marshaler.
func (m Metric) MarshalJSON() ([]byte, error) {
	f := float64(m)
	switch {
	case math.IsNaN(f):
		return []byte(`"nan"`), nil
	case math.IsInf(f, 0):
		return []byte(`"inf"`), nil
	}
	return json.Marshal(f)
}

// UnmarshalJSON implements json.Unmarshaler.
func (m *Metric) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		switch strings.ToLower(s) {
		case "nan":
			*m = Metric(math.NaN())
			return nil
		case "inf", "+inf", "infinity":
			*m = Metric(math.Inf(1))
			return nil
		}
		return fmt.Errorf("metric %q: want a number, \"inf\" or \"nan\"", s)
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*m = Metric(f)
	return nil
}

func metric(f float64) *Metric { m := Metric(f); return &m }

// device returns the result's device, falling back to the file's.
func (r *Result) device(f *ResultsFile) DeviceInfo {
	if r.Device != nil && r.Device.Name != "" {
		return *r.Device
	}
	return f.Device
}

// flops is the FLOP count of a result's problem as bench counts it (see
// problem.flops; a KV-cache call's visible pairs exactly).
func (r *Result) flops() float64 {
	if r.Direction == "kv" {
		return kvFlops(r.CacheSeqLens, r.Append, r.Nq, r.H, r.D, r.Dv, r.Causal, r.Align == "bottom-right", r.Window)
	}
	return r.problem().flops(r.Direction == "bwd")
}

// problem is the problem a result measured (its layout and scale are
// not recorded: the defaults; a dtype flashvk does not know is taken as
// a 2-byte one, float32 where its name says 32).
func (r *Result) problem() problem {
	dt, err := attention.ParseDType(r.DType)
	if err != nil {
		dt = attention.Float16
		if strings.Contains(r.DType, "32") {
			dt = attention.Float32
		}
	}
	align := attention.TopLeft
	if r.Align == "bottom-right" {
		align = attention.BottomRight
	}
	return problem{B: r.B, Hq: r.H, Hkv: r.Hkv, Nq: r.Nq, Nk: r.Nk, D: r.D, Dv: r.Dv, DType: dt, Causal: r.Causal, Align: align,
		features: r.features}
}

// writeResults writes f as indented JSON to path ("-" is stdout).
func writeResults(path string, stdout io.Writer, f *ResultsFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return writeFile("--json", path, stdout, append(b, '\n'))
}

// writeFile writes b to the file path that flag names: "-" is stdout;
// a file is written all or nothing (see outputs), a missing folder made.
func writeFile(flag, path string, stdout io.Writer, b []byte) error {
	if path == "-" {
		_, err := stdout.Write(b)
		return err
	}
	o := (*app)(nil).newOutputs(context.Background())
	defer o.abort()
	if err := o.writeBytes(flag, path, b); err != nil {
		return err
	}
	return o.commit()
}

// readAllResults reads every file of paths, in order, stopping at the
// first that cannot be read, or with ctx's error once ctx is done (a
// FIFO with no writer blocks in open).
func readAllResults(ctx context.Context, paths []string) ([]*ResultsFile, error) {
	files := make([]*ResultsFile, len(paths))
	for i, p := range paths {
		rf, err := await(ctx, func() (*ResultsFile, error) { return readResults(p) })
		if err != nil {
			return nil, err
		}
		files[i] = rf
	}
	return files, nil
}

// readResults loads and validates a results file.
func readResults(path string) (*ResultsFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f ResultsFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: not a results file: %s", path, oneLine(err.Error()))
	}
	if !strings.HasPrefix(f.Schema, "flashvk-bench/") {
		return nil, fmt.Errorf("%s: schema %q, want %q", path, f.Schema, SchemaV1)
	}
	if f.Schema != SchemaV1 {
		return nil, fmt.Errorf("%s: schema %q is newer than this flashvk understands (%q)", path, f.Schema, SchemaV1)
	}
	for i, r := range f.Results {
		if r.Direction != "fwd" && r.Direction != "bwd" && r.Direction != "kv" {
			return nil, fmt.Errorf("%s: results[%d]: direction %q, want \"fwd\", \"bwd\" or \"kv\"", path, i, r.Direction)
		}
		if r.Direction == "kv" && len(r.CacheSeqLens) != r.B {
			return nil, fmt.Errorf("%s: results[%d]: a kv result has %d cache_seqlens, want one per sequence (B = %d)", path, i, len(r.CacheSeqLens), r.B)
		}
		if r.B <= 0 || r.H <= 0 || r.Nq <= 0 || r.Nk <= 0 || r.D <= 0 {
			return nil, fmt.Errorf("%s: results[%d]: B, H, Nq, Nk and d must be positive", path, i)
		}
		if err := r.checkFeatures(); err != nil {
			return nil, fmt.Errorf("%s: results[%d]: %w", path, i, err)
		}
		if r.Dv == 0 {
			f.Results[i].Dv = r.D
		}
		if r.Hkv == 0 {
			f.Results[i].Hkv = r.H
		}
		if r.Align == "" {
			f.Results[i].Align = "top-left"
		}
	}
	return &f, nil
}

// checkFeatures refuses a result whose packed lengths, window, softcap,
// key counts or dropout are out of range (a kv result has no packed
// lengths, key counts, dropout or bias), or whose bias fields disagree
// (a bias and a mask, bias_grad without either or not on a backward).
func (r *Result) checkFeatures() error {
	switch {
	case (r.SeqLens != nil || r.SeqUsedK != nil || r.Dropout != 0 || r.DropoutSeed != 0 || r.DropoutOffset != 0) && r.Direction == "kv":
		return errors.New("a kv result has no seqlens, seqused_k or dropout (its cache_seqlens are the key counts)")
	case r.SeqLens != nil && len(r.SeqLens) != r.B:
		return fmt.Errorf("%d seqlens, want one per sequence (B = %d)", len(r.SeqLens), r.B)
	case r.SeqLens != nil && (r.Nq != r.Nk || slices.Max(r.SeqLens) != r.Nq || slices.Min(r.SeqLens) < 0):
		return fmt.Errorf("seqlens %v with Nq = %d, Nk = %d: want lengths ≥ 0, the longest Nq = Nk", r.SeqLens, r.Nq, r.Nk)
	case r.Window != nil && (r.Window[0] < -1 || r.Window[1] < -1):
		return fmt.Errorf("window %v: sides must be ≥ −1 (−1 unbounded)", *r.Window)
	case r.Softcap < 0 || math.IsNaN(r.Softcap) || math.IsInf(r.Softcap, 0):
		return fmt.Errorf("softcap %v: want a finite c > 0", r.Softcap)
	case !(r.Dropout >= 0 && r.Dropout < 1):
		return fmt.Errorf("dropout %v: want a probability 0 ≤ P < 1", r.Dropout)
	case r.Dropout == 0 && (r.DropoutSeed != 0 || r.DropoutOffset != 0):
		return errors.New("dropout_seed or dropout_offset without dropout")
	case r.SeqUsedK != nil && len(r.SeqUsedK) != r.B:
		return fmt.Errorf("%d seqused_k, want one per sequence (B = %d)", len(r.SeqUsedK), r.B)
	case r.Bias != "" && r.Mask != "":
		return errors.New("both a bias and a mask (a result has one at most)")
	case r.biased() && r.Direction == "kv":
		return errors.New("a kv result has no bias or mask (KV-cache calls take none)")
	case r.BiasGrad && !r.biased():
		return errors.New("bias_grad without a bias or mask")
	case r.BiasGrad && r.Direction != "bwd":
		return fmt.Errorf("bias_grad on a %s result (only the backward computes dBias)", r.Direction)
	}
	for i, n := range r.SeqUsedK {
		if nk := r.keys(i, r.Nk); n < 0 || n > nk {
			return fmt.Errorf("seqused_k %d: want 0 … %d, the keys of sequence %d", n, nk, i)
		}
	}
	return nil
}

// KernelResult is one kernel's time within a benchmarked call (bench
// --per-kernel): Name is the dispatch's pipeline (kernel, dtype, tile).
type KernelResult struct {
	Name     string  `json:"name"`
	MedianMS float64 `json:"median_ms"`
	P10MS    float64 `json:"p10_ms"`
}
