package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// rowKey identifies a problem across result files: compare matches on it.
type rowKey struct {
	Direction string `json:"direction"`
	DType     string `json:"dtype"`
	B         int    `json:"B"`
	H         int    `json:"H"`
	Nq        int    `json:"Nq"`
	Nk        int    `json:"Nk"`
	D         int    `json:"d"`
	Causal    bool   `json:"causal"`
	// Options tells results with packed lengths, a window, softcap, ALiBi,
	// key counts, dropout or a bias apart (problem.featuresLabel: more
	// than 8 lengths are summarised there; the dropout's P, not its seed
	// and offset; the bias's file name, shape and type, and bias_grad);
	// "" for the others.
	Options string `json:"options,omitempty"`
	// SeqLens are a packed batch's lengths, every one ("100,512,300"):
	// packed results whose summaries agree stay apart; "" for the others.
	SeqLens string `json:"seqlens,omitempty"`
	// Cache tells KV-cache results (direction "kv") apart: their lengths,
	// rows appended and block size (see cacheLabel); "" for the others.
	Cache string `json:"cache,omitempty"`
}

func keyOf(r *Result) rowKey {
	k := rowKey{Direction: r.Direction, DType: r.DType, B: r.B, H: r.H, Nq: r.Nq, Nk: r.Nk, D: r.D, Causal: r.Causal}
	if r.features.set() {
		k.Options = r.problem().featuresLabel()
	}
	if r.SeqLens != nil {
		k.SeqLens = joinInts(r.SeqLens)
	}
	if r.Direction == "kv" {
		k.Cache = cacheLabel(*r)
	}
	return k
}

func (k rowKey) less(o rowKey) int {
	return cmp.Or(cmp.Compare(dirOrder(k.Direction), dirOrder(o.Direction)), cmp.Compare(k.DType, o.DType), cmp.Compare(k.D, o.D),
		boolCmp(k.Causal, o.Causal), cmp.Compare(k.Options, o.Options), cmp.Compare(k.Nq, o.Nq), cmp.Compare(k.Nk, o.Nk),
		cmp.Compare(k.B, o.B), cmp.Compare(k.H, o.H), cmp.Compare(k.Cache, o.Cache), cmp.Compare(k.SeqLens, o.SeqLens))
}

// dirOrder puts the forward before the backward, and KV-cache calls last.
func dirOrder(d string) int {
	switch d {
	case "fwd":
		return 0
	case "kv":
		return 2
	}
	return 1
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// source is one column of a comparison: the results of one device and
// kernel in one file.
type source struct {
	file, tool     string
	device, kernel string
	label          string
	vals           map[rowKey]float64 // TFLOP/s
}

// sources splits loaded files into columns.
func sources(paths []string, files []*ResultsFile) []*source {
	var out []*source
	for i, f := range files {
		byID := map[string]*source{}
		var order []*source
		for j := range f.Results {
			r := &f.Results[j]
			d := r.device(f)
			id := d.Name + "\x00" + r.Kernel
			s := byID[id]
			if s == nil {
				s = &source{file: paths[i], tool: f.Tool, device: d.Name, kernel: r.Kernel, vals: map[rowKey]float64{}}
				byID[id] = s
				order = append(order, s)
			}
			k := keyOf(r)
			if _, dup := s.vals[k]; !dup {
				s.vals[k] = r.TFLOPS
			}
		}
		for _, s := range order {
			s.label = filepath.Base(paths[i])
			if len(order) > 1 {
				s.label += " " + s.device
				if s.kernel != "" {
					s.label += "/" + s.kernel
				}
			}
		}
		out = append(out, order...)
	}
	// Files with the same base name: use the full path.
	seen := map[string]int{}
	for _, s := range out {
		seen[s.label]++
	}
	for _, s := range out {
		if seen[s.label] > 1 {
			s.label = strings.Replace(s.label, filepath.Base(s.file), s.file, 1)
		}
	}
	// Still equal (the same file twice): number them.
	count := map[string]int{}
	for _, s := range out {
		count[s.label]++
		if count[s.label] > 1 {
			s.label += fmt.Sprintf(" (%d)", count[s.label])
		}
	}
	return out
}

type compareFlags struct{ format string }

func (a *app) compareCmd() *cobra.Command {
	var f compareFlags
	c := &cobra.Command{
		Use:   "compare A.json B.json [C.json …]",
		Short: "Compare benchmark result files side by side (TFLOP/s and ratios)",
		Long: `Compare two or more result files (schema flashvk-bench/1, written by
flashvk bench --json or bench/torch_sdpa.py). Results are matched on
(direction, dtype, B, H, N, d, causal; with packed lengths, a window,
softcap, ALiBi, key counts or dropout also those, and the diagonal where it
matters — for dropout its probability: the seed and offset select which
elements drop, not how many, so results differing only there are one
problem; for KV-cache results, direction "kv", also the cache lengths, rows
appended and block size); each file (each device and kernel in a file) is a column of
TFLOP/s, followed by the ratio of every other column to the first. A geometric mean of each ratio closes the table. "-" marks a problem a
column did not measure; a column that shares no problem with the first is
warned about on stderr.`,
		Example: `  flashvk compare before.json after.json
  flashvk compare flashvk.json torch.json --format plain`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch f.format {
			case "markdown", "md", "plain", "json":
			default:
				return usagef("--format %q: want markdown, plain or json", f.format)
			}
			files, err := readAllResults(cmd.Context(), args)
			if err != nil {
				return err
			}
			t := buildComparison(sources(args, files))
			if len(t.rows) == 0 {
				return fmt.Errorf("the files have no results")
			}
			for i, s := range t.srcs[1:] {
				if !t.shares(i + 1) {
					fmt.Fprintf(a.stderr, "warning: %s and %s share no problem: no ratio to compare (results match on direction, dtype, B, H, Nq, Nk, d, causal and options)\n",
						t.srcs[0].label, s.label)
				}
			}
			switch f.format {
			case "plain":
				t.plain(a.stdout)
			case "json":
				return t.json(a.stdout)
			default:
				t.markdown(a.stdout)
			}
			return nil
		},
	}
	c.Flags().StringVar(&f.format, "format", "markdown", "output format: markdown, plain or json")
	return c
}

type comparison struct {
	srcs    []*source
	rows    []rowKey
	options bool      // some row has options: the table has their column
	geomean []float64 // per source (index 0 unused): geometric mean of ratio to the first
	matched []int     // rows the ratio was taken over
}

func buildComparison(srcs []*source) *comparison {
	t := &comparison{srcs: srcs}
	seen := map[rowKey]bool{}
	for _, s := range srcs {
		for k := range s.vals {
			if !seen[k] {
				seen[k] = true
				t.rows = append(t.rows, k)
				t.options = t.options || k.Options != ""
			}
		}
	}
	slices.SortFunc(t.rows, rowKey.less)
	t.geomean = make([]float64, len(srcs))
	t.matched = make([]int, len(srcs))
	for i := 1; i < len(srcs); i++ {
		var sum float64
		for _, k := range t.rows {
			if r, ok := t.ratio(k, i); ok {
				sum += math.Log(r)
				t.matched[i]++
			}
		}
		if t.matched[i] > 0 {
			t.geomean[i] = math.Exp(sum / float64(t.matched[i]))
		}
	}
	return t
}

// shares reports whether column i measured a problem the first did.
func (t *comparison) shares(i int) bool {
	for k := range t.srcs[i].vals {
		if _, ok := t.srcs[0].vals[k]; ok {
			return true
		}
	}
	return false
}

func (t *comparison) ratio(k rowKey, i int) (float64, bool) {
	base, ok0 := t.srcs[0].vals[k]
	v, ok := t.srcs[i].vals[k]
	if !ok0 || !ok || base <= 0 || v <= 0 {
		return 0, false
	}
	return v / base, true
}

func (t *comparison) header() []string {
	h := []string{"dir", "dtype", "B", "H", "N", "d", "causal"}
	if t.options {
		h = append(h, "options")
	}
	for _, s := range t.srcs {
		h = append(h, s.label+" TFLOP/s")
	}
	for _, s := range t.srcs[1:] {
		h = append(h, "×"+s.label)
	}
	return h
}

func (t *comparison) cells(k rowKey) []string {
	n := fmt.Sprint(k.Nq)
	if k.Nk != k.Nq {
		n = fmt.Sprintf("%d×%d", k.Nq, k.Nk)
	}
	if k.Cache != "" {
		n += " (" + k.Cache + ")"
	}
	c := []string{k.Direction, shortDType(k.DType), fmt.Sprint(k.B), fmt.Sprint(k.H), n, fmt.Sprint(k.D), fmt.Sprint(k.Causal)}
	if t.options {
		c = append(c, cmp.Or(k.Options, "-"))
	}
	for _, s := range t.srcs {
		if v, ok := s.vals[k]; ok {
			c = append(c, fmtTFLOPS(v))
		} else {
			c = append(c, "-")
		}
	}
	for i := 1; i < len(t.srcs); i++ {
		if r, ok := t.ratio(k, i); ok {
			c = append(c, fmt.Sprintf("%.2f", r))
		} else {
			c = append(c, "-")
		}
	}
	return c
}

func (t *comparison) footer() []string {
	c := []string{"geomean", "", "", "", "", "", ""}
	if t.options {
		c = append(c, "")
	}
	for range t.srcs {
		c = append(c, "")
	}
	for i := 1; i < len(t.srcs); i++ {
		if t.matched[i] > 0 {
			c = append(c, fmt.Sprintf("%.2f", t.geomean[i]))
		} else {
			c = append(c, "-")
		}
	}
	return c
}

func (t *comparison) markdown(w io.Writer) {
	row := func(c []string) { fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | ")) }
	h := t.header()
	row(h)
	sep := make([]string, len(h))
	for i := range sep {
		sep[i] = "---"
		if i >= 2 && i != 6 && !(t.options && i == 7) {
			sep[i] = "---:"
		}
	}
	row(sep)
	for _, k := range t.rows {
		row(t.cells(k))
	}
	if len(t.srcs) > 1 {
		f := t.footer()
		f[0] = "**geomean**"
		row(f)
	}
}

func (t *comparison) plain(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	line := func(c []string) { fmt.Fprintln(tw, strings.Join(c, "\t")+"\t") }
	line(t.header())
	for _, k := range t.rows {
		line(t.cells(k))
	}
	line(t.footer())
	tw.Flush()
}

func (t *comparison) json(w io.Writer) error {
	type col struct {
		File    string  `json:"file"`
		Tool    string  `json:"tool"`
		Device  string  `json:"device"`
		Kernel  string  `json:"kernel"`
		Geomean float64 `json:"geomean_ratio,omitempty"`
	}
	type row struct {
		rowKey
		TFLOPS []*float64 `json:"tflops"`
		Ratio  []*float64 `json:"ratio"`
	}
	out := struct {
		Columns []col `json:"columns"`
		Rows    []row `json:"rows"`
	}{}
	for i, s := range t.srcs {
		out.Columns = append(out.Columns, col{s.file, s.tool, s.device, s.kernel, t.geomean[i]})
	}
	for _, k := range t.rows {
		r := row{rowKey: k}
		for i, s := range t.srcs {
			if v, ok := s.vals[k]; ok {
				r.TFLOPS = append(r.TFLOPS, &v)
			} else {
				r.TFLOPS = append(r.TFLOPS, nil)
			}
			if i > 0 {
				if x, ok := t.ratio(k, i); ok {
					r.Ratio = append(r.Ratio, &x)
				} else {
					r.Ratio = append(r.Ratio, nil)
				}
			}
		}
		out.Rows = append(out.Rows, r)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\n", b)
	return nil
}
