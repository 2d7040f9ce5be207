package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/reference"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

type tuneFlags struct {
	shape         shapeFlags
	backend       backendFlags
	timing        timingFlags
	dirs          []string
	families      []string
	maxCandidates int
	budget        time.Duration
	cache         string
	jsonPath      string
	dryRun, show  bool
	seed          uint64
}

func (a *app) tuneCmd() *cobra.Command {
	var f tuneFlags
	c := &cobra.Command{
		Use:   "tune",
		Short: "Find the fastest tile configurations of a Vulkan device and cache them",
		Long: `Tune the Vulkan kernels' tile and workgroup configurations for one device.

For each key (dtype, head dim d, causal or not, direction fwd|bwd) and each
tunable kernel family the device runs there (flash: the scalar forward;
flash_cm: the cooperative-matrix forward (fp16, bf16, fp32 in bf16
planes); bwd_dkdv and bwd_dq: the scalar backward; bwd_cm_dkdv and
bwd_cm_dq: the cooperative-matrix backward (fp16, bf16, fp32 in bf16
planes up to d 128)), every configuration legal within the device's
shared-memory and workgroup limits is
  1. verified against the float64 reference on a small awkward problem
     (B=1, Hq=2, Hkv=1, Nq=150, Nk=203, causal bottom-right when causal):
     a candidate with wrong results is rejected and never chosen;
  2. timed with GPU timestamps (median of --iters calls after warm-up) on a
     representative problem: N = Nq = Nk (--seq, default 2048), B = tokens/N
     (or --batch), H = hidden/d (or --heads), Hkv = H. The tuner times
     Nq = Nk and Hkv = H only (tune entries are keyed by N alone), so tune
     takes no --nq, --nk or --kv-heads; bench takes them.
The fastest verified candidate wins (the default is kept unless a candidate
is more than 2% faster).

Options: --window L,R, --softcap C, --alibi and --dropout P tune the kernels
as calls with those options run them (both problems carry them; the
verification problem takes each window side at most 64). Their entries are
keyed by the options' names, not values ("softcap", "window+dropout"), and
apply to calls with the same options; a call with options and no entry of
its own keeps the default tiles of the cooperative-matrix kernels, which
have a variant of their own for options (flash_cm, bwd_cm_dkdv), and takes
the entry without options for the others.

Progress goes to stderr, the winners to stdout;
--json FILE writes every key's candidates and outcome (schema flashvk-tune/1,
see docs/results-schema.md; "-": stdout, instead of the table).

Results are merged into the tune cache (default
os.UserCacheDir()/flashvk/tune-v1.json, or $FLASHVK_TUNE_CACHE), keyed by
device name, vendor/device IDs, driver and driver version and the pipeline
cache UUID, so they apply only to the same device and driver. The library
(attention.Open) uses them for matching problems (the entry whose N is
nearest the problem's Nq); FLASHVK_TUNE=off or Config.TuneCache "off"
disables them. 'flashvk explain' shows whether each launch is tuned.

The cache and --json FILE are checked (their folders made) before tuning
starts and written all or none at the end: each into a temporary file beside
it, renamed into place once both are complete. Tuning stopped by a device
error still writes them (--json's "error" says why; the cache gets the keys
decided before it); an interrupted tune (SIGINT, SIGTERM: exit 130, 143)
writes neither.

A flag that would change nothing is refused (exit 2): any flag but --cache
with --show, --cache with --dry-run, --tokens beside --batch, --hidden beside
--heads, a --dir whose direction none of --family tunes.`,
		Example: `  flashvk tune --dtype f16 --dim 64,128
  flashvk tune --dir fwd --seq 1024,4096 --causal false --dry-run --json tune.json
  flashvk tune --dtype f16 --dim 256 --causal --seq 8192 --window 4096,0 --softcap 50
  flashvk tune --device lavapipe --dtype f32 --dim 16 --seq 64 --tokens 64 --hidden 32 --max-candidates 3
  flashvk tune --show`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.tune(cmd, &f) },
	}
	f.shape.register(c, tuneGrid, 0)
	f.backend.register(c, vulkanEngine)
	f.timing.register(c, 10, "timed runs per candidate (the median is used)")
	fl := c.Flags()
	fl.Lookup("warmup").Usage = "untimed runs per candidate (and at least 100 ms; 500 ms before a key's first)"
	fl.StringSliceVar(&f.dirs, "dir", []string{"fwd", "bwd"}, "directions: fwd, bwd")
	fl.StringSliceVar(&f.families, "family", nil, "tune only these kernel families (flash, flash_cm, bwd_dkdv, bwd_dq, bwd_cm_dkdv, bwd_cm_dq)")
	fl.IntVar(&f.maxCandidates, "max-candidates", 0, "try at most this many candidates per key and family, the default first (0: all)")
	fl.DurationVar(&f.budget, "budget", 0, "stop after about this long (e.g. 9m): the key in progress is decided among the candidates measured, later keys are not tuned (0: no limit)")
	fl.StringVar(&f.cache, "cache", "", "tune cache file (default $FLASHVK_TUNE_CACHE or os.UserCacheDir()/flashvk/tune-v1.json)")
	fl.StringVar(&f.jsonPath, "json", "", `write the results (every candidate of every key) to this file as JSON ("-": stdout, instead of the table)`)
	fl.BoolVar(&f.dryRun, "dry-run", false, "tune and print, but do not write the cache")
	fl.BoolVar(&f.show, "show", false, "print the tune cache and exit")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the random inputs")
	return c
}

func (f *tuneFlags) cachePath() (string, error) {
	if f.cache != "" {
		return f.cache, nil
	}
	if p := os.Getenv("FLASHVK_TUNE_CACHE"); p != "" {
		return p, nil
	}
	return attention.DefaultTuneCachePath()
}

// options checks the flags and returns the tune options common to every
// timed problem (N, Dims, Tokens and Hidden are set per problem).
func (f *tuneFlags) options() (attention.TuneOptions, error) {
	var o attention.TuneOptions
	for _, dt := range f.shape.dtypes {
		if dt == attention.BFloat16 {
			return o, usagef("--dtype bfloat16: not tuned (bfloat16 runs float16's tile configurations); tune float16 or float32")
		}
	}
	o.DTypes = f.shape.dtypes
	if err := f.shape.checkGrid(); err != nil {
		return o, err
	}
	o.Causal = f.shape.causal.vals
	for _, d := range f.dirs {
		switch d {
		case "fwd", "bwd":
			o.Dirs = append(o.Dirs, d)
		default:
			return o, usagef("--dir %q: want fwd or bwd", d)
		}
	}
	known := attention.TuneFamilies()
	for _, fam := range f.families {
		if !slices.Contains(known, fam) {
			return o, usagef("--family %q: want one of %s", fam, strings.Join(known, ", "))
		}
	}
	o.Families = f.families
	if err := f.timing.check(1); err != nil {
		return o, err
	}
	if err := nonNegative(intFlag{"--max-candidates", f.maxCandidates}); err != nil {
		return o, err
	}
	if f.budget < 0 {
		return o, usagef("--budget %v: must be ≥ 0", f.budget)
	}
	o.Warmup, o.Iters = f.timing.warmup, f.timing.iters
	if o.Warmup == 0 {
		o.Warmup = -1
	}
	if err := f.checkWindow(o.Causal); err != nil {
		return o, err
	}
	if w := f.shape.window; w != nil {
		o.Features.Window = &attention.Window{Left: w[0], Right: w[1]}
	}
	o.Features.Softcap = float32(f.shape.softcap)
	o.Features.ALiBi = f.shape.alibi
	o.Features.Dropout = float32(f.shape.dropout)
	o.Reference = tuneReference
	o.MaxCandidates = f.maxCandidates
	o.Budget = f.budget
	o.Seed = f.seed
	return o, nil
}

// checkWindow refuses a --window that a causal key cannot take (R > 0),
// that changes nothing, or that hides no key of a timed problem (Nq = Nk
// = N) of --seq: there it would tune calls without one.
func (f *tuneFlags) checkWindow(causal []bool) error {
	w := f.shape.window
	if w == nil {
		return nil
	}
	for _, c := range causal {
		if c && w[1] > 0 {
			return usagef("--window %d,%d with --causal: R must be −1 or 0 (a causal mask shows no key after the diagonal)", w[0], w[1])
		}
		if err := f.features().effect(0, c); err != nil {
			return err
		}
		for _, n := range f.shape.seq {
			hides := func(side int) bool { return side >= 0 && side < n-1 }
			if !hides(w[0]) && (c || !hides(w[1])) {
				return usagef("--window %d,%d has no effect at --seq %d: it hides no key of the timed problem (narrow it)", w[0], w[1], n)
			}
		}
	}
	return nil
}

// problems describes the timed problems for the progress line.
func (f *tuneFlags) problems(tokens int) string {
	s := fmt.Sprintf("N=%s", joinInts(f.shape.seq))
	if f.shape.batch > 0 {
		s += fmt.Sprintf(", B=%d", f.shape.batch)
	} else {
		s += fmt.Sprintf(", B·N=%d", tokens)
	}
	if f.shape.heads > 0 {
		s += fmt.Sprintf(", H=%d", f.shape.heads)
	} else {
		s += fmt.Sprintf(", H·d=%d", f.shape.hidden)
	}
	if opts := f.features().String(); opts != "" {
		s += ", " + opts
	}
	return s
}

// features are the options of the timed problems (--window, --softcap,
// --alibi, --dropout).
func (f *tuneFlags) features() features {
	return features{Window: f.shape.window, Softcap: f.shape.softcap, ALiBi: f.shape.alibi, Dropout: f.shape.dropout}
}

// checkEffect refuses the flags of tune that would change nothing.
func (f *tuneFlags) checkEffect(cmd *cobra.Command) error {
	fl := cmd.Flags()
	if f.show {
		var other []string
		fl.Visit(func(x *pflag.Flag) {
			if x.Name != "show" && x.Name != "cache" {
				other = append(other, "--"+x.Name)
			}
		})
		if len(other) > 0 {
			return usagef("%s has no effect with --show: it only prints the tune cache", other[0])
		}
		return nil
	}
	if f.dryRun && fl.Changed("cache") {
		return usagef("--cache has no effect with --dry-run: no cache is written")
	}
	if len(f.families) > 0 && fl.Changed("dir") {
		for _, d := range f.dirs {
			if !slices.ContainsFunc(f.families, func(fam string) bool { return familyDir(fam) == d }) {
				return usagef("--dir %s has no effect: no --family (%s) tunes %s", d, strings.Join(f.families, ", "), d)
			}
		}
	}
	return f.shape.checkEffect()
}

// familyDir is the direction a tunable kernel family runs: "bwd" for the
// backward stages (bwd_…), else "fwd".
func familyDir(family string) string {
	if strings.HasPrefix(family, "bwd") {
		return "bwd"
	}
	return "fwd"
}

func (a *app) tune(cmd *cobra.Command, f *tuneFlags) error {
	ctx := cmd.Context()
	if err := f.checkEffect(cmd); err != nil {
		return err
	}
	path, err := f.cachePath()
	if err != nil {
		return err
	}
	if f.show {
		return a.showTuneCache(ctx, path)
	}
	o, err := f.options()
	if err != nil {
		return err
	}
	// The cache and --json can be written: checked before any work.
	out := a.newOutputs(ctx)
	defer out.abort()
	cacheFlag := "the tune cache"
	if cmd.Flags().Changed("cache") {
		cacheFlag = "--cache"
	}
	if !f.dryRun {
		if err := out.prepare(cacheFlag, path); err != nil {
			return err
		}
	}
	if f.jsonPath != "" && f.jsonPath != "-" {
		if err := out.prepare("--json", f.jsonPath); err != nil {
			return err
		}
	}
	f.backend.tuneCache = attention.TuneOff
	e, err := a.openOne(&f.backend)
	if err != nil {
		return err
	}
	defer a.closeAll([]*engine{e})
	info := e.Info()
	for _, dt := range o.DTypes {
		if !slices.Contains(info.DTypes, dt) {
			return fmt.Errorf("%s does not run %v storage", info.Device, dt)
		}
	}
	tokens := f.shape.tokens
	if tokens == 0 {
		tokens = paperTokens
	}
	fmt.Fprintf(a.stderr, "tuning %s (driver %s) with kernel %s; timed problems %s\n", info.Device, info.Driver, info.Kernel, f.problems(tokens))
	fmt.Fprintf(a.stderr, "tune cache %s\n", path)
	if a.beforeInputs != nil {
		a.beforeInputs()
	}
	o.Progress = func(ev attention.TuneEvent) { printTuneEvent(a.stderr, ev) }
	start := time.Now()
	var rs []attention.TuneResult
	var tuneErr error
tuning:
	for _, n := range f.shape.seq {
		for _, d := range f.shape.dim {
			// One timed problem per (N, d): B and H as bench's grid has them.
			b, h := f.shape.batchHeads(n, n, d, tokens)
			o.N, o.Dims, o.Tokens, o.Hidden = n, []int{d}, b*n, h*d
			if f.budget > 0 {
				if o.Budget = f.budget - time.Since(start); o.Budget <= 0 {
					tuneErr = fmt.Errorf("%w (%v) before N=%d d=%d", attention.ErrTuneBudget, f.budget, n, d)
					break tuning
				}
			}
			r, err := e.Tune(ctx, o)
			rs = append(rs, r...)
			if tuneErr = err; err != nil {
				break tuning
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return interruptedError{detail: fmt.Sprintf("after %d (key, family) pairs (no cache or --json written)", len(rs)), err: err}
	}
	if f.jsonPath != "-" {
		printTuneResults(a.stdout, rs)
	}
	var c *attention.TuneCache
	if !f.dryRun {
		// Read, merged and written back under the cache's lock, so that
		// other tunes (one per GPU of the host) keep their entries (a
		// device or pipe is written, not merged: no lock).
		if !special(path) {
			unlock, err := attention.LockTuneCache(ctx, path)
			if err != nil {
				if ctx.Err() != nil {
					return interruptedError{detail: "waiting for the tune cache's lock (no cache or --json written)", err: ctx.Err()}
				}
				return outErr(cacheFlag, path, "%v", err)
			}
			defer unlock()
		}
		var lerr error
		c, lerr = await(ctx, func() (*attention.TuneCache, error) {
			c, err := attention.LoadTuneCache(path)
			if c == nil {
				c = &attention.TuneCache{}
			}
			return c, err
		})
		if ctx.Err() != nil {
			return interruptedError{err: ctx.Err()}
		}
		if lerr != nil {
			fmt.Fprintf(a.stderr, "warning: %s; it is replaced\n", oneLine(lerr.Error()))
		}
	}
	n := 0
	var failed []string
	for i := range rs {
		r := &rs[i]
		if r.Err != nil || r.Winner == "" {
			msg := "no winner"
			if r.Err != nil {
				msg = oneLine(r.Err.Error())
			}
			failed = append(failed, fmt.Sprintf("%s: %s", r.Key, msg))
			continue
		}
		if c != nil {
			c.Tool = "flashvk " + version()
			c.Put(r.Entry())
			n++
		}
	}
	fmt.Fprintf(a.stderr, "tuned %d (key, family) pairs in %s\n", len(rs), time.Since(start).Round(time.Millisecond))
	for _, m := range failed {
		fmt.Fprintf(a.stderr, "warning: %s\n", m)
	}
	// The cache and the JSON are staged, then committed together.
	if !f.dryRun && n > 0 {
		if err := out.writePath(cacheFlag, path, c.Save); err != nil {
			return err
		}
	}
	var jsonOut []byte
	if f.jsonPath != "" {
		rep := newTuneReport(e, rs, tuneErr)
		if !f.dryRun && n > 0 {
			rep.Cache = path
		}
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		jsonOut = append(b, '\n')
		if f.jsonPath != "-" {
			if err := out.writeBytes("--json", f.jsonPath, jsonOut); err != nil {
				return err
			}
		}
	}
	if err := out.commit(); err != nil {
		return err
	}
	switch {
	case f.dryRun:
		fmt.Fprintf(a.stderr, "dry run: %s not written\n", path)
	case n > 0:
		fmt.Fprintf(a.stderr, "wrote %d entries to %s (%d in all)\n", n, path, len(c.Entries))
	default:
		fmt.Fprintf(a.stderr, "nothing to write to %s\n", path)
	}
	switch f.jsonPath {
	case "":
	case "-":
		if _, err := a.stdout.Write(jsonOut); err != nil {
			return err
		}
	default:
		fmt.Fprintf(a.stderr, "wrote %d results to %s\n", len(rs), f.jsonPath)
	}
	if errors.Is(tuneErr, attention.ErrTuneBudget) {
		fmt.Fprintf(a.stderr, "warning: %s: the remaining keys were not tuned\n", oneLine(tuneErr.Error()))
		tuneErr = nil
	}
	if tuneErr != nil {
		return tuneErr
	}
	if len(rs) == 0 {
		return fmt.Errorf("nothing to tune: no tunable kernel family runs the requested keys on %s", info.Device)
	}
	return nil
}

func tuneLabel(k attention.TuneKey) string {
	mask := "non-causal"
	if k.Causal {
		mask = "causal"
	}
	if k.Options != "" {
		mask += " " + k.Options
	}
	return fmt.Sprintf("%s %s d=%d %s %s", k.Dir, k.DType, k.D, mask, k.Family)
}

func printTuneEvent(w io.Writer, ev attention.TuneEvent) {
	cand := ev.Candidate
	if ev.Default {
		cand += " (default)"
	}
	head := fmt.Sprintf("[%s N=%d %d/%d] %s:", tuneLabel(ev.Key), ev.N, ev.Index, ev.Count, cand)
	switch ev.Status {
	case attention.TuneTimed:
		fmt.Fprintf(w, "%s verified (rel_l2 %.2g), %s, %s TFLOP/s\n", head, ev.RelL2, fmtMS(float64(ev.Median)/1e6), fmtTFLOPS(ev.TFLOPS))
	case attention.TuneConfirm:
		fmt.Fprintf(w, "[%s N=%d] re-timed: default %s, %s %s\n", tuneLabel(ev.Key), ev.N, fmtMS(float64(ev.DefaultMedian)/1e6), ev.Candidate, fmtMS(float64(ev.Median)/1e6))
	case attention.TuneRejected:
		fmt.Fprintf(w, "%s REJECTED: %s\n", head, oneLine(ev.Err.Error()))
	default:
		fmt.Fprintf(w, "%s failed: %s\n", head, oneLine(fmt.Sprint(ev.Err)))
	}
}

// printTuneResults prints the winners against the defaults.
// tuneOptionsColumn is the options column of a table of tune keys: there
// (head "options", a key's options or "-") when some key has options, else
// empty.
type tuneOptionsColumn struct{ head string }

func optionsColumn(keys []attention.TuneKey) tuneOptionsColumn {
	for _, k := range keys {
		if k.Options != "" {
			return tuneOptionsColumn{head: "options\t"}
		}
	}
	return tuneOptionsColumn{}
}

// cell is k's cell with its tab ("" without the column).
func (c tuneOptionsColumn) cell(k attention.TuneKey) string {
	switch {
	case c.head == "":
		return ""
	case k.Options == "":
		return "-\t"
	}
	return k.Options + "\t"
}

func printTuneResults(w io.Writer, rs []attention.TuneResult) {
	if len(rs) == 0 {
		return
	}
	keys := make([]attention.TuneKey, len(rs))
	for i, r := range rs {
		keys[i] = r.Key
	}
	opts := optionsColumn(keys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "dir\tdtype\td\tcausal\t"+opts.head+"family\tN\ttried\tdefault\ttime\twinner\ttime\tTFLOP/s\tspeedup\t")
	for _, r := range rs {
		k := r.Key
		dt, wt, tf, sp := "-", "-", "-", "-"
		if r.DefaultTime > 0 {
			dt = fmtMS(float64(r.DefaultTime) / 1e6)
		}
		winner := r.Winner
		if winner == "" {
			winner = "none"
		} else {
			wt = fmtMS(float64(r.WinnerTime) / 1e6)
			tf = fmtTFLOPS(r.TFLOPS)
		}
		if s := r.Speedup(); s > 0 {
			sp = fmt.Sprintf("%.2f×", s)
		}
		def := r.Default
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%s%s\t%d\t%d/%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", k.Dir, k.DType, k.D, k.Causal, opts.cell(k), k.Family, r.N,
			r.Tried, r.Candidates, def, dt, winner, wt, tf, sp)
	}
	tw.Flush()
}

func (a *app) showTuneCache(ctx context.Context, path string) error {
	c, err := await(ctx, func() (*attention.TuneCache, error) {
		c, err := attention.LoadTuneCache(path)
		if c == nil {
			c = &attention.TuneCache{}
		}
		return c, err
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Fprintf(a.stdout, "tune cache %s (schema version %d)\n", path, attention.TuneCacheVersion)
	if tuneDisabled() {
		fmt.Fprintln(a.stdout, "FLASHVK_TUNE=off: the library does not use it")
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "warning: %s; the library ignores it\n", oneLine(err.Error()))
	}
	if len(c.Entries) == 0 {
		fmt.Fprintln(a.stdout, "no entries")
		return nil
	}
	type group struct {
		dev attention.DeviceKey
		es  []attention.TuneEntry
	}
	var groups []*group
	for _, e := range c.Entries {
		i := slices.IndexFunc(groups, func(g *group) bool { return g.dev == e.Device })
		if i < 0 {
			groups = append(groups, &group{dev: e.Device})
			i = len(groups) - 1
		}
		groups[i].es = append(groups[i].es, e)
	}
	for _, g := range groups {
		d := g.dev
		fmt.Fprintf(a.stdout, "\ndevice %s [%04x:%04x], driver %s (%s)", d.Name, d.VendorID, d.DeviceID, d.Driver, d.DriverVersion)
		if d.PipelineCacheUUID != "" {
			fmt.Fprintf(a.stdout, ", pipeline cache %s", d.PipelineCacheUUID)
		}
		fmt.Fprintln(a.stdout)
		keys := make([]attention.TuneKey, len(g.es))
		for i, e := range g.es {
			keys[i] = e.Key
		}
		opts := optionsColumn(keys)
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "dir\tdtype\td\tcausal\t"+opts.head+"family\tN\tcandidate\tdefault\tmedian\tTFLOP/s\tspeedup\tdate\t")
		for _, e := range g.es {
			k := e.Key
			sp := "-"
			if s := e.Speedup(); s > 0 {
				sp = fmt.Sprintf("%.2f×", s)
			}
			dd := fmt.Sprint(k.D)
			if k.DV != k.D {
				dd += "/" + fmt.Sprint(k.DV)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", k.Dir, k.DType, dd, k.Causal, opts.cell(k), k.Family, e.N,
				e.Candidate, e.Default, fmtMS(e.MedianMS), fmtTFLOPS(e.TFLOPS), sp, e.Date)
		}
		tw.Flush()
	}
	return nil
}

// tuningLine describes a backend's tune cache for explain.
func tuningLine(ti attention.TuneInfo) (string, []string) {
	switch {
	case ti.Off:
		return "tuned configurations off (FLASHVK_TUNE=off): default tiles", ti.Warnings
	case ti.File == "":
		return "no tune cache: default tiles", ti.Warnings
	case len(ti.Entries) == 0:
		return fmt.Sprintf("no tuned configurations for this device in %s: default tiles (run `flashvk tune`)", ti.File), ti.Warnings
	}
	return fmt.Sprintf("%d tuned configurations for this device in %s", len(ti.Entries), ti.File), ti.Warnings
}

// tuneDisabled reports whether the environment turns the tune cache off
// for the library (FLASHVK_TUNE=off).
func tuneDisabled() bool {
	f, err := attention.TuneCacheFile(attention.Config{})
	return err == nil && f == ""
}

// tuneReference is the tuner's float64 verifier: package reference.
func tuneReference(p attention.ReferenceProblem, q, k, v, do []float64, backward bool) ([][]float64, error) {
	rp := reference.Params{B: p.B, Hq: p.Hq, Hkv: p.Hkv, Nq: p.Nq, Nk: p.Nk, D: p.D, Dv: p.Dv,
		Scale: p.Scale, Causal: p.Causal, BottomRight: p.BottomRight, Softcap: p.Softcap, ALiBi: p.ALiBi}
	if w := p.Window; w != nil {
		rp.Window = &reference.Window{Left: w.Left, Right: w.Right}
	}
	if p.Dropout != 0 {
		rp.Dropout = &reference.Dropout{P: p.Dropout, Seed: p.DropoutSeed, Offset: p.DropoutOffset}
	}
	return reference.Outputs(rp, q, k, v, do, backward)
}

// TuneSchema names the JSON of tune --json (docs/results-schema.md).
const TuneSchema = "flashvk-tune/1"

// tuneReport is the JSON of tune --json.
type tuneReport struct {
	Schema  string `json:"schema"`
	Version string `json:"version"`
	Date    string `json:"date"`
	// Device is the tuned device; DeviceKey what its cache entries are
	// keyed by.
	Device    DeviceInfo          `json:"device"`
	DeviceKey attention.DeviceKey `json:"device_key"`
	// Cache is the tune cache the winners were written to ("" when none
	// was: a dry run, or no winner).
	Cache   string           `json:"cache"`
	Results []tuneResultJSON `json:"results"`
	// Error says why tuning stopped early (a spent --budget, a device
	// error): the keys after it were not tuned.
	Error string `json:"error,omitempty"`
}

// tuneResultJSON is the outcome of one key and kernel family.
type tuneResultJSON struct {
	Key attention.TuneKey `json:"key"`
	// N, B, H: the timed problem (Nq = Nk = N, Hkv = H).
	N int `json:"N"`
	B int `json:"B"`
	H int `json:"H"`
	// Default and Winner are configurations as the cache spells them;
	// Winner is "" when no candidate verified.
	Default    string  `json:"default"`
	DefaultMS  float64 `json:"default_ms,omitempty"`
	Winner     string  `json:"winner"`
	WinnerMS   float64 `json:"winner_ms,omitempty"`
	TFLOPS     float64 `json:"tflops,omitempty"`
	Speedup    float64 `json:"speedup,omitempty"`
	Candidates int     `json:"candidates"`
	Tried      int     `json:"tried"`
	Error      string  `json:"error,omitempty"`
	// Events are the candidates in the order they were tried, and the
	// confirming re-timing of the default against the winner.
	Events []tuneEventJSON `json:"events"`
}

// tuneEventJSON is one candidate's outcome.
type tuneEventJSON struct {
	Candidate string  `json:"candidate"`
	Default   bool    `json:"default,omitempty"`
	Status    string  `json:"status"` // timed, rejected, failed, confirm
	RelL2     *Metric `json:"rel_l2,omitempty"`
	Bound     *Metric `json:"bound,omitempty"`
	MedianMS  float64 `json:"median_ms,omitempty"`
	TFLOPS    float64 `json:"tflops,omitempty"`
	// DefaultMS is the default's time in a "confirm" event.
	DefaultMS float64 `json:"default_ms,omitempty"`
	Error     string  `json:"error,omitempty"`
}

func newTuneReport(e *engine, rs []attention.TuneResult, tuneErr error) *tuneReport {
	rep := &tuneReport{Schema: TuneSchema, Version: version(), Date: time.Now().UTC().Format(time.RFC3339),
		Device: e.device(), DeviceKey: e.TuneInfo().Device, Results: []tuneResultJSON{}}
	if tuneErr != nil {
		rep.Error = oneLine(tuneErr.Error())
	}
	for _, r := range rs {
		j := tuneResultJSON{Key: r.Key, N: r.N, B: r.B, H: r.H, Default: r.Default, DefaultMS: ms(r.DefaultTime),
			Winner: r.Winner, WinnerMS: ms(r.WinnerTime), TFLOPS: r.TFLOPS, Speedup: r.Speedup(),
			Candidates: r.Candidates, Tried: r.Tried, Events: []tuneEventJSON{}}
		if r.Err != nil {
			j.Error = oneLine(r.Err.Error())
		}
		if r.Device != (attention.DeviceKey{}) {
			rep.DeviceKey = r.Device
		}
		for _, ev := range r.Events {
			je := tuneEventJSON{Candidate: ev.Candidate, Default: ev.Default, Status: ev.Status, MedianMS: ms(ev.Median),
				TFLOPS: ev.TFLOPS, DefaultMS: ms(ev.DefaultMedian)}
			if ev.Status == attention.TuneTimed || ev.Status == attention.TuneRejected {
				je.RelL2, je.Bound = metric(ev.RelL2), metric(ev.Bound)
			}
			if ev.Err != nil {
				je.Error = oneLine(ev.Err.Error())
			}
			j.Events = append(j.Events, je)
		}
		rep.Results = append(rep.Results, j)
	}
	return rep
}
