package main

import (
	"bytes"
	"cmp"
	"fmt"
	"html/template"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

type reportFlags struct {
	out, markdown, title string
}

func (a *app) reportCmd() *cobra.Command {
	var f reportFlags
	c := &cobra.Command{
		Use:   "report A.json [B.json …] -o report.html",
		Short: "Write an HTML (or Markdown) report of benchmark result files",
		Long: `Write one self-contained HTML page (no external files or scripts) from one or
more result files (schema flashvk-bench/1):

  - TFLOP/s against N, one chart per (direction, d, causal), one line per
    device/kernel/tool (and dtype);
  - the results table (median, p10, p90, TFLOP/s);
  - the errors against the float64 reference, when the results carry
    max_abs/rel_l2 (bench --check);
  - the launch configuration of every dispatch, when the results carry
    "launches" (or "launch");
  - the memory analysis of 'flashvk explain' for every shape of the grid.

--markdown FILE writes the same tables as Markdown, with the charts as SVG
files next to it. The output paths are checked (a missing folder is made)
before the result files are read, and the files are written all or none:
each into a temporary file beside it, renamed into place once every one is
complete. A report that cannot be written leaves no new file and every
existing one as it was.`,
		Example: `  flashvk report h200.json torch.json -o report.html
  flashvk report cpu.json --markdown reports/cpu/report.md`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.out == "" && f.markdown == "" {
				return usagef("give -o FILE.html and/or --markdown FILE.md")
			}
			if f.out != "" && f.markdown != "" && filepath.Clean(f.out) == filepath.Clean(f.markdown) {
				return usagef("-o and --markdown name the same file %s", f.out)
			}
			ctx := cmd.Context()
			// The outputs can be written: checked before any work.
			o := a.newOutputs(ctx)
			defer o.abort()
			for _, t := range []outFile{{flag: "--output", path: f.out}, {flag: "--markdown", path: f.markdown}} {
				if t.path != "" {
					if err := o.prepare(t.flag, t.path); err != nil {
						return err
					}
				}
			}
			files, err := readAllResults(ctx, args)
			if err != nil {
				return err
			}
			rep, err := buildReport(args, files, f.title)
			if err != nil {
				return err
			}
			// Every file is staged, then all are renamed into place: a
			// report that cannot be written leaves no half of it behind.
			var outs []outFile
			if f.out != "" {
				var buf bytes.Buffer
				if err := rep.html(&buf); err != nil {
					return err
				}
				outs = append(outs, outFile{"--output", f.out, buf.Bytes()})
			}
			if f.markdown != "" {
				outs = append(outs, rep.markdown(f.markdown)...)
			}
			if err := distinctOutputs(outs); err != nil {
				return err
			}
			for _, out := range outs {
				if err := o.writeBytes(out.flag, out.path, out.data); err != nil {
					return err
				}
			}
			if err := o.commit(); err != nil {
				return err
			}
			if f.out != "" {
				fmt.Fprintf(a.stdout, "wrote %s (%d results, %d charts)\n", f.out, len(rep.Rows), len(rep.Charts))
			}
			if f.markdown != "" {
				fmt.Fprintf(a.stdout, "wrote %s\n", f.markdown)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&f.out, "output", "o", "", "write the HTML report to this file")
	c.Flags().StringVar(&f.markdown, "markdown", "", "write a Markdown report to this file (charts as SVG files beside it)")
	c.Flags().StringVar(&f.title, "title", "flashvk benchmark report", "report title")
	return c
}

// reportRow is one result with its source.
type reportRow struct {
	Source string
	Series string
	R      Result
	Dev    DeviceInfo
}

type chart struct {
	Title  string
	Slug   string
	SVG    template.HTML // without legend: the page draws it below
	SVGMD  string        // with its legend, for the Markdown report
	Legend []legendItem
}

type legendItem struct {
	Name  string
	Color template.CSS
}

type sourceInfo struct {
	File, Tool, Version, Date string
	Devices                   string
	N                         int
}

type launchRow struct {
	Series, Problem, Kernel, Grid, Workgroup, Shared, Tile string
}

type memRow struct {
	Problem                    string
	Naive, Flash, Ratio, FLOPs string
	NaiveAI, FlashAI           string
}

type report struct {
	Title     string
	Generated string
	Version   string
	Sources   []sourceInfo
	Charts    []chart
	Rows      []reportRow
	HasErrors bool
	Launches  []launchRow
	Memory    []memRow
}

func buildReport(paths []string, files []*ResultsFile, title string) (*report, error) {
	rep := &report{Title: title, Generated: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Version: version()}
	multiTool := false
	for _, f := range files {
		multiTool = multiTool || f.Tool != files[0].Tool
	}
	dtypes := map[string]bool{}
	for i, f := range files {
		devs := map[string]bool{}
		var devList []string
		for j := range f.Results {
			r := f.Results[j]
			d := r.device(f)
			if !devs[d.Name] {
				devs[d.Name] = true
				devList = append(devList, d.Name)
			}
			dtypes[r.DType] = true
			rep.Rows = append(rep.Rows, reportRow{Source: filepath.Base(paths[i]), R: r, Dev: d})
			if r.RelL2 != nil || r.MaxAbs != nil {
				rep.HasErrors = true
			}
		}
		rep.Sources = append(rep.Sources, sourceInfo{File: filepath.Base(paths[i]), Tool: f.Tool, Version: f.Version, Date: f.Date,
			Devices: strings.Join(devList, ", "), N: len(f.Results)})
	}
	if len(rep.Rows) == 0 {
		return nil, fmt.Errorf("the files have no results")
	}
	for i := range rep.Rows {
		row := &rep.Rows[i]
		s := row.Dev.Name
		if row.R.Kernel != "" {
			s += " / " + row.R.Kernel
		}
		if multiTool {
			f := files[slices.IndexFunc(rep.Sources, func(si sourceInfo) bool { return si.File == row.Source })]
			s = f.Tool + ": " + s
		}
		if len(dtypes) > 1 {
			s += " / " + shortDType(row.R.DType)
		}
		row.Series = s
	}
	slices.SortStableFunc(rep.Rows, func(a, b reportRow) int {
		return cmp.Or(keyOf(&a.R).less(keyOf(&b.R)), cmp.Compare(a.Series, b.Series))
	})

	// Charts: one per (direction, d, causal, options); a series keeps its
	// colour across charts.
	colorOf := map[string]int{}
	for _, r := range rep.Rows {
		if _, ok := colorOf[r.Series]; !ok {
			colorOf[r.Series] = len(colorOf)
		}
	}
	type chartKey struct {
		dir     string
		d       int
		causal  bool
		options string
	}
	groups := map[chartKey][]reportRow{}
	var keys []chartKey
	for _, r := range rep.Rows {
		k := chartKey{r.R.Direction, r.R.D, r.R.Causal, keyOf(&r.R).Options}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	slices.SortFunc(keys, func(a, b chartKey) int {
		return cmp.Or(cmp.Compare(dirOrder(a.dir), dirOrder(b.dir)), cmp.Compare(a.d, b.d), boolCmp(a.causal, b.causal),
			cmp.Compare(a.options, b.options))
	})
	for _, k := range keys {
		mask := "non-causal"
		if k.causal {
			mask = "causal"
		}
		dir := map[string]string{"fwd": "forward", "bwd": "backward", "kv": "KV-cache decode"}[k.dir]
		t := fmt.Sprintf("%s, d = %d, %s", dir, k.d, mask)
		name := fmt.Sprintf("%s-d%d-%s", k.dir, k.d, mask)
		if k.options != "" {
			t += ", " + k.options
			name += "-" + slug(k.options)
		}
		svg, legend, err := chartSVG(t, groups[k], colorOf, false)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", t, err)
		}
		svgMD, _, err := chartSVG(t, groups[k], colorOf, true)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", t, err)
		}
		rep.Charts = append(rep.Charts, chart{Title: t, Slug: name, SVG: template.HTML(svg),
			SVGMD: svgMD, Legend: legend})
	}

	// Launch configurations.
	seenLaunch := map[string]bool{}
	for _, r := range rep.Rows {
		ls := r.R.Launches
		if len(ls) == 0 && r.R.Launch != nil {
			ls = []Launch{*r.R.Launch}
		}
		for _, l := range ls {
			lr := launchRow{Series: r.Series, Problem: shapeLabel(&r.R), Kernel: l.Kernel,
				Grid: ints(l.Grid), Workgroup: ints(l.Workgroup), Tile: l.Tile}
			if l.SharedBytes > 0 {
				lr.Shared = fmt.Sprintf("%d (%s)", l.SharedBytes, bytesIEC(uint64(l.SharedBytes)))
			}
			id := fmt.Sprint(lr)
			if !seenLaunch[id] {
				seenLaunch[id] = true
				rep.Launches = append(rep.Launches, lr)
			}
		}
	}

	// Memory analysis of every forward shape of the grid.
	seenShape := map[string]bool{}
	for _, r := range rep.Rows {
		if r.R.Direction == "kv" {
			continue // no naive attention to compare a KV-cache call with
		}
		p := r.R.problem()
		label := fmt.Sprintf("%s B=%d H=%d N=%d d=%d %s", shortDType(r.R.DType), p.B, p.Hq, p.Nq, p.D, p.optionsString())
		if p.Hkv != p.Hq {
			label += fmt.Sprintf(" Hkv=%d", p.Hkv)
		}
		if p.Nk != p.Nq {
			label += fmt.Sprintf(" Nk=%d", p.Nk)
		}
		if seenShape[label] {
			continue
		}
		seenShape[label] = true
		an := analyze(p)
		rep.Memory = append(rep.Memory, memRow{Problem: label, Naive: si(an.NaiveBytes, "B"), Flash: si(an.FlashBytes, "B"),
			Ratio: fmt.Sprintf("%.1f×", an.TrafficGain), FLOPs: siFlops(an.Flops),
			NaiveAI: fmt.Sprintf("%.1f", an.NaiveAI), FlashAI: fmt.Sprintf("%.1f", an.FlashAI)})
	}
	return rep, nil
}

func shapeLabel(r *Result) string {
	s := fmt.Sprintf("%s %s B=%d H=%d N=%d d=%d", r.Direction, shortDType(r.DType), r.B, r.H, r.Nq, r.D)
	if r.Causal {
		s += " causal"
	}
	if o := keyOf(r).Options; o != "" {
		s += " " + o
	}
	if r.Direction == "kv" {
		s += " " + cacheLabel(*r)
	}
	return s
}

func ints(xs []int) string {
	if len(xs) == 0 {
		return "-"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, "×")
}

// seqTicks labels the x axis with the sequence lengths measured.
type seqTicks []float64

func (t seqTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for _, x := range t {
		if x >= lo && x <= hi {
			out = append(out, plot.Tick{Value: x, Label: seqLabel(int(x))})
		}
	}
	return out
}

func seqLabel(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dk", n/1024)
	}
	return fmt.Sprint(n)
}

// chartSVG draws TFLOP/s against N, one line per series, as inline SVG,
// with the legend inside the plot or returned for the page to draw.
func chartSVG(title string, rows []reportRow, colorOf map[string]int, withLegend bool) (string, []legendItem, error) {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = "sequence length N"
	p.Y.Label.Text = "TFLOP/s"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	var names []string
	series := map[string]map[int]float64{}
	xs := map[int]bool{}
	for _, r := range rows {
		m := series[r.Series]
		if m == nil {
			m = map[int]float64{}
			series[r.Series] = m
			names = append(names, r.Series)
		}
		x := r.R.Nq
		if r.R.Direction == "kv" {
			// KV-cache calls: against the cache capacity.
			x = r.R.Nk
			p.X.Label.Text = "cache capacity Nk"
		}
		if _, ok := m[x]; !ok {
			m[x] = r.R.TFLOPS
		}
		xs[x] = true
	}
	var ticks seqTicks
	for x := range xs {
		ticks = append(ticks, float64(x))
	}
	slices.Sort(ticks)
	if len(ticks) > 1 && ticks[len(ticks)-1]/ticks[0] >= 4 {
		p.X.Scale = plot.LogScale{}
	}
	p.X.Tick.Marker = ticks
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	ymax := 0.0
	var legend []legendItem
	for _, name := range names {
		i := colorOf[name]
		m := series[name]
		var pts plotter.XYs
		for _, x := range slices.Sorted(mapsKeys(m)) {
			pts = append(pts, plotter.XY{X: float64(x), Y: m[x]})
			ymax = max(ymax, m[x])
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return "", nil, err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		s.Color = plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		if withLegend {
			p.Legend.Add(name, l, s)
		}
		r, g, b, _ := plotutil.Color(i).RGBA()
		legend = append(legend, legendItem{Name: name, Color: template.CSS(fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, b>>8))})
	}
	p.Y.Max = max(ymax*1.1, 1e-9)
	if withLegend {
		// Room for the legend above the highest line.
		p.Y.Max = max(ymax*(1.15+0.1*float64(len(names))), 1e-9)
	}
	if len(ticks) == 1 {
		p.X.Min, p.X.Max = ticks[0]*0.5, ticks[0]*1.5
	}
	c := vgsvg.NewWith(vgsvg.UseWH(6*vg.Inch, 3.6*vg.Inch), vgsvg.EmbedFonts(false))
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", nil, err
	}
	return inlineSVG(buf.String()), legend, nil
}

func mapsKeys(m map[int]float64) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var (
	xmlDecl   = regexp.MustCompile(`(?s)<\?xml.*?\?>\s*`)
	doctype   = regexp.MustCompile(`(?s)<!DOCTYPE.*?>\s*`)
	svgOpen   = regexp.MustCompile(`<svg\b`)
	svgFamily = regexp.MustCompile(`font-family:\s*([^;"']*)`)
)

// inlineSVG prepares a standalone SVG document for embedding in HTML: no
// XML declaration or doctype, scalable, and fonts that fall back to the
// browser's sans-serif.
func inlineSVG(s string) string {
	s = xmlDecl.ReplaceAllString(s, "")
	s = doctype.ReplaceAllString(s, "")
	s = svgFamily.ReplaceAllString(s, "font-family:$1, Liberation Sans, Arial, Helvetica, sans-serif")
	s = svgOpen.ReplaceAllString(s, `<svg class="chart" preserveAspectRatio="xMidYMid meet"`)
	return strings.TrimSpace(s)
}

func (rep *report) html(w io.Writer) error {
	return reportTemplate.Execute(w, rep)
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":    func(v float64) string { return fmtMS(v) },
	"tf":    fmtTFLOPS,
	"dt":    shortDType,
	"n":     func(r Result) string { return seqN(&r) },
	"sci":   sciMetric,
	"mask":  maskLabel,
	"dir":   func(s string) string { return s },
	"heads": headsLabel,
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
  :root { --fg: #1d1d1f; --muted: #6e6e73; --line: #d2d2d7; --bg: #fff; --head: #f5f5f7; }
  body { font: 14px/1.45 -apple-system, "Segoe UI", "Liberation Sans", Arial, sans-serif; color: var(--fg); background: var(--bg); margin: 0; }
  main { max-width: 1200px; margin: 0 auto; padding: 24px 32px 48px; }
  h1 { font-size: 26px; margin: 0 0 4px; }
  h2 { font-size: 19px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
  p.meta, p.note { color: var(--muted); margin: 4px 0 12px; }
  table { border-collapse: collapse; width: 100%; font-size: 12.5px; font-variant-numeric: tabular-nums; }
  th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
  th { background: var(--head); position: sticky; top: 0; font-weight: 600; }
  td.l, th.l { text-align: left; }
  tr:hover td { background: #fafafc; }
  .charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 18px; }
  figure { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 8px; background: #fff; }
  svg.chart { width: 100%; height: auto; display: block; }
  figcaption { display: flex; flex-wrap: wrap; gap: 4px 16px; padding: 4px 8px 2px; font-size: 12.5px; }
  .key { display: inline-flex; align-items: center; gap: 6px; }
  .swatch { display: inline-block; width: 18px; height: 3px; border-radius: 2px; }
  .scroll { overflow-x: auto; }
  code { background: var(--head); padding: 1px 4px; border-radius: 3px; }
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
<p class="meta">Generated {{.Generated}} by flashvk {{.Version}} from {{len .Sources}} result file{{if gt (len .Sources) 1}}s{{end}}.</p>

<h2>Sources</h2>
<div class="scroll"><table>
<tr><th class="l">file</th><th class="l">tool</th><th class="l">version</th><th class="l">date</th><th class="l">devices</th><th>results</th></tr>
{{range .Sources}}<tr><td class="l">{{.File}}</td><td class="l">{{.Tool}}</td><td class="l">{{.Version}}</td><td class="l">{{.Date}}</td><td class="l">{{.Devices}}</td><td>{{.N}}</td></tr>
{{end}}</table></div>

<h2>Throughput</h2>
<p class="note">TFLOP/s over the median time, FlashAttention convention: forward 4·B·H·N²·d, halved when causal (with a window, softcap, ALiBi, key counts or dropout: 4·H·d per visible (query, key) pair, exactly); backward 2.5× the forward. B·N and H·d follow the result files (the FlashAttention-2 grid keeps B·N = 16k and H·d = 2048).</p>
<div class="charts">
{{range .Charts}}<figure id="{{.Slug}}">{{.SVG}}
<figcaption>{{range .Legend}}<span class="key"><span class="swatch" style="background: {{.Color}}"></span>{{.Name}}</span>{{end}}</figcaption></figure>
{{end}}</div>

<h2>Results</h2>
<div class="scroll"><table>
<tr><th class="l">series</th><th class="l">dir</th><th class="l">dtype</th><th>B</th><th>H</th><th>N</th><th>d</th><th class="l">mask</th><th>median</th><th>p10</th><th>p90</th><th>TFLOP/s</th><th>iters</th><th class="l">clock</th></tr>
{{range .Rows}}<tr><td class="l">{{.Series}}</td><td class="l">{{.R.Direction}}</td><td class="l">{{dt .R.DType}}</td><td>{{.R.B}}</td><td>{{heads .R}}</td><td>{{n .R}}</td><td>{{.R.D}}</td><td class="l">{{mask .R}}</td><td>{{ms .R.MedianMS}}</td><td>{{ms .R.P10MS}}</td><td>{{ms .R.P90MS}}</td><td><b>{{tf .R.TFLOPS}}</b></td><td>{{.R.Iters}}</td><td class="l">{{.R.Clock}}</td></tr>
{{end}}</table></div>

{{if .HasErrors}}
<h2>Errors against the float64 reference</h2>
<p class="note">max_abs and rel_l2 of O (forward) or the worst of dQ, dK, dV (backward). flashvk's bounds: rel_l2 ≤ 1e-5 for float32, ≤ 2e-3 for float16, ≤ 1.6e-2 for bfloat16.</p>
<div class="scroll"><table>
<tr><th class="l">series</th><th class="l">dir</th><th class="l">dtype</th><th>B</th><th>H</th><th>N</th><th>d</th><th class="l">mask</th><th>max_abs</th><th>rel_l2</th></tr>
{{range .Rows}}{{if .R.RelL2}}<tr><td class="l">{{.Series}}</td><td class="l">{{.R.Direction}}</td><td class="l">{{dt .R.DType}}</td><td>{{.R.B}}</td><td>{{heads .R}}</td><td>{{n .R}}</td><td>{{.R.D}}</td><td class="l">{{mask .R}}</td><td>{{sci .R.MaxAbs}}</td><td>{{sci .R.RelL2}}</td></tr>
{{end}}{{end}}</table></div>
{{end}}

{{if .Launches}}
<h2>Launch configuration</h2>
<div class="scroll"><table>
<tr><th class="l">series</th><th class="l">problem</th><th class="l">kernel</th><th>grid</th><th>workgroup</th><th>shared memory (bytes)</th><th class="l">tile</th></tr>
{{range .Launches}}<tr><td class="l">{{.Series}}</td><td class="l">{{.Problem}}</td><td class="l">{{.Kernel}}</td><td>{{.Grid}}</td><td>{{.Workgroup}}</td><td>{{.Shared}}</td><td class="l">{{.Tile}}</td></tr>
{{end}}</table></div>
{{end}}

<h2>Memory traffic: naive vs flash attention</h2>
<p class="note">Per forward call (<code>flashvk explain</code>). Naive attention writes S = QKᵀ, reads it for the softmax, writes P and reads it for P·V: 4·B·H·N² elements on top of reading Q, K, V and writing O. Flash attention keeps S and P in on-chip tiles; assumed to read Q, K, V once and write O once (4·B·H·N·d). Intensity is FLOP per byte moved.</p>
<div class="scroll"><table>
<tr><th class="l">problem</th><th>naive bytes</th><th>flash bytes</th><th>naive / flash</th><th>FLOPs</th><th>naive FLOP/B</th><th>flash FLOP/B</th></tr>
{{range .Memory}}<tr><td class="l">{{.Problem}}</td><td>{{.Naive}}</td><td>{{.Flash}}</td><td>{{.Ratio}}</td><td>{{.FLOPs}}</td><td>{{.NaiveAI}}</td><td>{{.FlashAI}}</td></tr>
{{end}}</table></div>
</main>
</body>
</html>
`))

func seqN(r *Result) string {
	if r.Nk != r.Nq {
		return fmt.Sprintf("%d×%d", r.Nq, r.Nk)
	}
	return fmt.Sprint(r.Nq)
}

// maskLabel is a result's mask in the report's tables: "causal" or "—",
// and its options.
func maskLabel(r Result) string {
	s := "—"
	if r.Causal {
		s = "causal"
	}
	if o := keyOf(&r).Options; o != "" {
		s += " " + o
	}
	return s
}

func headsLabel(r Result) string {
	if r.Hkv != 0 && r.Hkv != r.H {
		return fmt.Sprintf("%d/%d", r.H, r.Hkv)
	}
	return fmt.Sprint(r.H)
}

func sciMetric(m *Metric) string {
	if m == nil {
		return "-"
	}
	f := float64(*m)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Sprint(f)
	}
	return fmt.Sprintf("%.2e", f)
}

// outFile is a file a command writes, for the flag that names it.
type outFile struct {
	flag, path string
	data       []byte
}

// markdown renders the report as Markdown at path with the charts as SVG
// files next to it: the SVG files, then the Markdown.
func (rep *report) markdown(path string) []outFile {
	var files []outFile
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\nGenerated %s by flashvk %s.\n\n## Sources\n\n", rep.Title, rep.Generated, rep.Version)
	fmt.Fprintln(&b, "| file | tool | version | date | devices | results |\n|---|---|---|---|---|---:|")
	for _, s := range rep.Sources {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d |\n", s.File, s.Tool, s.Version, s.Date, s.Devices, s.N)
	}
	fmt.Fprintf(&b, "\n## Throughput\n\n")
	base := strings.TrimSuffix(path, filepath.Ext(path))
	for _, c := range rep.Charts {
		name := base + "-" + c.Slug + ".svg"
		// The inlined SVG keeps its xmlns: drop only the HTML class.
		svg := `<?xml version="1.0"?>` + "\n" + strings.Replace(c.SVGMD, `<svg class="chart"`, `<svg`, 1) + "\n"
		files = append(files, outFile{"--markdown", name, []byte(svg)})
		fmt.Fprintf(&b, "![%s](%s)\n\n", c.Title, filepath.Base(name))
	}
	fmt.Fprintln(&b, "## Results\n\n| series | dir | dtype | B | H | N | d | mask | median | p10 | p90 | TFLOP/s | iters | clock |\n|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
	for _, r := range rep.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %d | %s | %s | %s | %s | %s | %d | %s |\n", r.Series, r.R.Direction, shortDType(r.R.DType),
			r.R.B, headsLabel(r.R), seqN(&r.R), r.R.D, maskLabel(r.R),
			fmtMS(r.R.MedianMS), fmtMS(r.R.P10MS), fmtMS(r.R.P90MS), fmtTFLOPS(r.R.TFLOPS), r.R.Iters, r.R.Clock)
	}
	if rep.HasErrors {
		fmt.Fprintln(&b, "\n## Errors against the float64 reference\n\n| series | problem | max_abs | rel_l2 |\n|---|---|---:|---:|")
		for _, r := range rep.Rows {
			if r.R.RelL2 != nil {
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Series, shapeLabel(&r.R), sciMetric(r.R.MaxAbs), sciMetric(r.R.RelL2))
			}
		}
	}
	if len(rep.Launches) > 0 {
		fmt.Fprintln(&b, "\n## Launch configuration\n\n| series | problem | kernel | grid | workgroup | shared bytes | tile |\n|---|---|---|---:|---:|---:|---|")
		for _, l := range rep.Launches {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", l.Series, l.Problem, l.Kernel, l.Grid, l.Workgroup, l.Shared, l.Tile)
		}
	}
	fmt.Fprintln(&b, "\n## Memory traffic: naive vs flash attention\n\nNaive attention writes and reads S and P (4·B·H·N² elements) besides Q, K, V, O; flash attention is assumed to read Q, K, V once and write O once.\n\n| problem | naive bytes | flash bytes | naive / flash | FLOPs | naive FLOP/B | flash FLOP/B |\n|---|---:|---:|---:|---:|---:|---:|")
	for _, m := range rep.Memory {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", m.Problem, m.Naive, m.Flash, m.Ratio, m.FLOPs, m.NaiveAI, m.FlashAI)
	}
	return append(files, outFile{"--markdown", path, []byte(b.String())})
}

// distinctOutputs refuses outputs that name one file twice: -o naming one
// of the charts --markdown writes beside its file would be overwritten by
// it (a usage error, before anything is written).
func distinctOutputs(outs []outFile) error {
	seen := map[string]string{}
	for _, o := range outs {
		p := filepath.Clean(o.path)
		if prev, ok := seen[p]; ok {
			return usagef("%s %s is also the file of %s: give another name", prev, o.path, o.flag)
		}
		seen[p] = o.flag
	}
	return nil
}
