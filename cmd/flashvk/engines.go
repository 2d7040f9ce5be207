package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/flashvk/flashvk/attention"
	"github.com/spf13/cobra"
)

// backendUse says how a command opens engines.
type backendUse int

const (
	// manyEngines: run and bench, where --device all opens every Vulkan
	// device and the CPU backend.
	manyEngines backendUse = iota
	// oneEngine: explain, one backend.
	oneEngine
	// vulkanEngine: tune, one Vulkan device (auto means Vulkan; no CPU
	// backend, so no --workers).
	vulkanEngine
)

// backendFlags select where attention runs: the same flags on every
// command that opens an engine.
type backendFlags struct {
	use                     backendUse
	backend, device, kernel string
	addressing              string
	workers                 int
	validation              bool
	// stats is Config.PipelineStatistics: explain's --stats (registered
	// by explain alone).
	stats bool
	// tuneCache is Config.TuneCache (not a flag: tune opens its engine
	// without tuned configurations).
	tuneCache string
	// changed reports whether the command line gives a flag.
	changed func(name string) bool
}

func (b *backendFlags) register(c *cobra.Command, use backendUse) {
	b.use = use
	f := c.Flags()
	b.changed = f.Changed
	switch use {
	case vulkanEngine:
		f.StringVar(&b.backend, "backend", "auto", "backend: auto or vulkan (tuning needs a Vulkan device: auto means vulkan here)")
		f.StringVar(&b.device, "device", "", `Vulkan device: index, name substring or vendor ("nvidia", "lavapipe"…) (default: the best device)`)
	case oneEngine:
		f.StringVar(&b.backend, "backend", "auto", "backend: auto (the best hardware Vulkan device, else the CPU), cpu or vulkan")
		f.StringVar(&b.device, "device", "", `Vulkan device: index, name substring or vendor ("nvidia", "lavapipe"…)`)
	default:
		f.StringVar(&b.backend, "backend", "auto", "backend: auto (the best hardware Vulkan device, else the CPU), cpu or vulkan")
		f.StringVar(&b.device, "device", "", `Vulkan device: index, name substring, vendor ("nvidia", "lavapipe"…), or "all" for every Vulkan device and the CPU backend (with --backend vulkan: every Vulkan device)`)
	}
	f.StringVar(&b.kernel, "kernel", "", "Vulkan forward kernel: flash, flash_cm (cooperative matrices: float16, and bfloat16 and float32 (d ≤ 128, in bf16 planes) where the device has bf16 ones), minimal or naive (default: the fastest the device supports)")
	f.StringVar(&b.addressing, "addressing", "auto", "how Vulkan kernels reach q, k, v, o and the gradients: auto (bindings; 64-bit device addresses for an operand larger than one binding), bindings or addresses")
	if use != vulkanEngine {
		f.IntVar(&b.workers, "workers", 0, "CPU backend goroutines (default GOMAXPROCS)")
	}
	f.BoolVar(&b.validation, "validation", false, "enable the Khronos Vulkan validation layer and report its messages")
}

// target is one backend/device to run on.
type target struct {
	label string // for messages: "cpu", "vulkan device 0 (llvmpipe …)"
	cfg   attention.Config
}

// targets resolves the backend flags to the engines to open. notes are
// printed on stderr (e.g. "no Vulkan device").
func (a *app) targets(b *backendFlags) (ts []target, notes []string, err error) {
	var kind attention.BackendKind
	switch strings.ToLower(b.backend) {
	case "auto", "":
		kind = attention.Auto
	case "cpu":
		kind = attention.CPU
	case "vulkan", "vk":
		kind = attention.Vulkan
	default:
		if b.use == vulkanEngine {
			return nil, nil, usagef("--backend %q: want auto or vulkan", b.backend)
		}
		return nil, nil, usagef("--backend %q: want auto, cpu or vulkan", b.backend)
	}
	all := strings.ToLower(b.device) == "all"
	switch {
	case b.use == vulkanEngine && kind == attention.CPU:
		return nil, nil, usagef("--backend cpu: tuning needs a Vulkan device (the CPU backend has no tile configurations)")
	case all && b.use != manyEngines:
		return nil, nil, usagef("--device all: this command runs on one device")
	case b.workers < 0:
		return nil, nil, usagef("--workers %d: must be ≥ 0", b.workers)
	case kind == attention.CPU && b.device != "" && !all:
		return nil, nil, usagef("--device %q selects a Vulkan device: it does not apply to --backend cpu", b.device)
	case kind == attention.CPU && all:
		return nil, nil, usagef("--device all adds every Vulkan device to the CPU backend: it has no effect with --backend cpu")
	case b.kernel != "" && !slices.Contains(attention.Kernels(), b.kernel):
		return nil, nil, usagef("--kernel %q: want one of %s", b.kernel, strings.Join(attention.Kernels(), ", "))
	case b.kernel != "" && kind == attention.CPU:
		return nil, nil, usagef("--kernel %q selects a Vulkan kernel: it does not apply to --backend cpu", b.kernel)
	case b.addressing != "" && !slices.Contains([]string{"auto", "bindings", "addresses"}, b.addressing):
		return nil, nil, usagef("--addressing %q: want auto, bindings or addresses", b.addressing)
	case b.given("addressing") && kind == attention.CPU:
		return nil, nil, usagef("--addressing %s applies to the Vulkan kernels: it does not apply to --backend cpu", b.addressing)
	case b.given("validation") && kind == attention.CPU:
		return nil, nil, usagef("--validation enables the Vulkan validation layer: it does not apply to --backend cpu")
	case b.given("stats") && kind == attention.CPU:
		return nil, nil, usagef("--stats reports the Vulkan driver's compiler statistics: it does not apply to --backend cpu")
	case b.given("workers") && kind == attention.Vulkan:
		return nil, nil, usagef("--workers sets the CPU backend's goroutines: it does not apply to --backend vulkan")
	}
	if b.use == vulkanEngine {
		kind = attention.Vulkan
	}
	base := attention.Config{Backend: kind, Device: b.device, Kernel: b.kernel, Workers: b.workers, Validation: b.validation,
		TuneCache: b.tuneCache, Addressing: b.addressing, PipelineStatistics: b.stats}
	if !all {
		label := kind.String()
		if b.device != "" {
			label += " device " + b.device
		}
		return []target{{label: label, cfg: base}}, nil, nil
	}
	// --device all: every Vulkan device, then the CPU.
	if kind != attention.CPU {
		gpus, err := a.gpus()
		if err != nil {
			notes = append(notes, "no Vulkan device: "+oneLine(err.Error()))
		}
		for _, g := range gpus {
			c := base
			c.Backend, c.Device = attention.Vulkan, strconv.Itoa(g.Index)
			ts = append(ts, target{label: fmt.Sprintf("vulkan device %d (%s)", g.Index, g.Name), cfg: c})
		}
	}
	if kind == attention.Vulkan {
		// --backend vulkan --device all: the Vulkan devices only.
		if len(ts) == 0 {
			why := "no Vulkan device"
			if len(notes) > 0 {
				why = notes[0]
			}
			return nil, nil, fmt.Errorf("--device all --backend vulkan: %s", why)
		}
		return ts, notes, nil
	}
	c := base
	c.Backend, c.Device, c.Kernel, c.Addressing, c.Validation, c.PipelineStatistics = attention.CPU, "", "", "", false, false
	ts = append(ts, target{label: "cpu", cfg: c})
	return ts, notes, nil
}

// given reports whether the command line gives the flag name.
func (b *backendFlags) given(name string) bool { return b.changed != nil && b.changed(name) }

// checkOpened refuses the engine flags that none of the opened engines
// uses (flashvk ignores no flag): the Vulkan ones when everything runs on
// the CPU backend (auto found no Vulkan device, FLASHVK_BACKEND=cpu, or
// --device all opened none), --workers when nothing does.
func (b *backendFlags) checkOpened(es []*engine, notes []string) error {
	var vulkan, cpu *engine
	for _, e := range es {
		if e.Info().Kind == attention.CPU {
			cpu = firstOf(cpu, e)
		} else {
			vulkan = firstOf(vulkan, e)
		}
	}
	if vulkan == nil {
		why := "everything runs on the CPU backend"
		if len(notes) > 0 {
			why += "; " + strings.Join(notes, "; ")
		}
		for _, fl := range []string{"device", "kernel", "addressing", "validation", "stats"} {
			if fl == "device" && strings.EqualFold(b.device, "all") {
				continue // every device there is: the CPU backend here
			}
			if b.given(fl) {
				return usagef("--%s applies to Vulkan devices: it has no effect here (%s)", fl, why)
			}
		}
	}
	if cpu == nil && b.given("workers") {
		return usagef("--workers sets the CPU backend's goroutines: it has no effect on %s", vulkan.Info().Device)
	}
	return nil
}

// firstOf returns cur, or e when cur is nil.
func firstOf(cur, e *engine) *engine {
	if cur == nil {
		return e
	}
	return cur
}

// engine is an open target.
type engine struct {
	*attention.Engine
	label string
}

func (e *engine) device() DeviceInfo {
	in := e.Info()
	return DeviceInfo{Name: in.Device, Driver: in.Driver, Backend: in.Name}
}

func (e *engine) kernel() string {
	if k := e.Info().Kernel; k != "" {
		return k
	}
	return e.Info().Name
}

// openAll opens the targets. With several targets (--device all) one that
// cannot be opened is reported on stderr and skipped; with one it is an
// error.
func (a *app) openAll(b *backendFlags) ([]*engine, error) {
	ts, notes, err := a.targets(b)
	if err != nil {
		return nil, err
	}
	var out []*engine
	for _, t := range ts {
		e, err := attention.Open(t.cfg)
		if err != nil {
			if len(ts) == 1 {
				if errors.Is(err, attention.ErrBackend) && t.cfg.Backend == attention.Vulkan {
					if t.cfg.PipelineStatistics {
						// (the error says whether the device lacks the statistics)
						return nil, fmt.Errorf("%s: %v (--stats needs a device whose driver reports compiler statistics: pipeline_statistics in flashvk devices --json)", t.label, err)
					}
					if b.use == vulkanEngine {
						return nil, fmt.Errorf("%s: %v (tuning needs a Vulkan device)", t.label, err)
					}
					return nil, fmt.Errorf("%s: %v (try --backend cpu)", t.label, err)
				}
				return nil, fmt.Errorf("%s: %v", t.label, err)
			}
			notes = append(notes, fmt.Sprintf("skipping %s: %s", t.label, oneLine(err.Error())))
			continue
		}
		if fb := e.Fallback(); fb != "" {
			notes = append(notes, "running on the CPU backend: "+oneLine(fb))
		}
		out = append(out, &engine{Engine: e, label: t.label})
	}
	if len(out) == 0 {
		for _, n := range notes {
			fmt.Fprintf(a.stderr, "note: %s\n", n)
		}
		return nil, errors.New("no backend could be opened")
	}
	// The notes follow the check: a refused flag is one line that says
	// why.
	if err := b.checkOpened(out, notes); err != nil {
		a.closeAll(out)
		return nil, err
	}
	for _, n := range notes {
		fmt.Fprintf(a.stderr, "note: %s\n", n)
	}
	return out, nil
}

// openOne opens the one engine of a command that runs on one device.
func (a *app) openOne(b *backendFlags) (*engine, error) {
	es, err := a.openAll(b)
	if err != nil {
		return nil, err
	}
	return es[0], nil
}

// planAll plans the passes of p on every engine (the forward, and with
// backward the backward too) before any input exists: a problem an engine
// cannot run, such as one larger than its device can hold, fails here
// and not after minutes spent making inputs. The plans are returned per
// engine, forward first.
func planAll(ctx context.Context, es []*engine, p problem, backward bool) ([][]*attention.Plan, error) {
	out := make([][]*attention.Plan, len(es))
	for i, e := range es {
		passes := []bool{false}
		if backward {
			passes = append(passes, true)
		}
		for _, bwd := range passes {
			pl, err := e.Plan(ctx, p.qShape(), p.kShape(), p.vShape(), p.Layout, p.DType, p.options(), bwd)
			if err != nil {
				return nil, fmt.Errorf("%s: %s %s: %w", e.label, direction(bwd), p, err)
			}
			out[i] = append(out[i], pl)
		}
	}
	return out, nil
}

// direction names a pass: "fwd" or "bwd".
func direction(backward bool) string {
	if backward {
		return "bwd"
	}
	return "fwd"
}
