package main

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/flashvk/flashvk/attention"
)

// resultLaunches converts a plan's launches to the results schema's.
func resultLaunches(pl *attention.Plan) []Launch {
	out := make([]Launch, len(pl.Launches))
	for i, l := range pl.Launches {
		var tile []string
		switch {
		case l.TileCols > 0:
			tile = append(tile, fmt.Sprintf("Br=%d Bc=%d", l.TileRows, l.TileCols))
		case l.TileRows > 0: // a KV-cache kernel: query rows, no key tile
			tile = append(tile, fmt.Sprintf("Br=%d", l.TileRows))
		}
		if l.Config != "" {
			tile = append(tile, l.Config)
		}
		if l.HeadGroup > 1 {
			tile = append(tile, fmt.Sprintf("(%d heads a tile together)", l.HeadGroup))
		}
		out[i] = Launch{Kernel: l.Kernel, Tile: strings.Join(tile, " "), Source: l.Source, SharedBytes: l.SharedBytes}
		if l.Workgroup > 0 {
			out[i].Grid, out[i].Workgroup = l.Grid[:], []int{l.Workgroup, 1, 1}
			if l.Base != ([3]int{}) {
				out[i].Base = l.Base[:]
			}
		}
	}
	return out
}

// mainLaunch is the dispatch a result's "launch" shows: the first, or in a
// backward the dK/dV kernel (bwd_dkdv or bwd_cm_dkdv, or their addressed
// builds "….addr"), which does most of its work.
func mainLaunch(ls []Launch) *Launch {
	if len(ls) == 0 {
		return nil
	}
	m := ls[0]
	for _, l := range ls {
		if strings.HasSuffix(strings.TrimSuffix(l.Kernel, ".addr"), "_dkdv") {
			m = l
			break
		}
	}
	return &m
}

// explainLaunch is one dispatch in explain's launch table.
type explainLaunch struct {
	Direction string `json:"direction"` // "fwd" or "bwd"
	Launch
	// Statistics are the driver compiler's statistics of the launch's
	// pipeline (explain --stats: attention.Launch.Statistics), all of
	// them, in the driver's names and order.
	Statistics []attention.Statistic `json:"statistics,omitempty"`
}

// keyStatistic matches the names of the statistics explain's text shows
// (the rest are in --json): registers (NVIDIA "Register Count", RADV
// "VGPRs"/"SGPRs", ANV "… registers"), spills, scratch, stack and local
// memory, shared memory (RADV "LDS size", ANV "Workgroup Memory Size")
// and occupancy (RADV "Subgroups per SIMD").
var keyStatistic = regexp.MustCompile(`(?i)regist|gprs?\b|spill|scratch|stack|local mem|shared|\blds\b|workgroup mem|occupancy|per simd|waves`)

// keyStatistics are the statistics explain's text shows of a launch: those
// keyStatistic matches, in the driver's order, or where none matches the
// first 6; more counts the rest.
func keyStatistics(st []attention.Statistic) (shown []attention.Statistic, more int) {
	for _, s := range st {
		if keyStatistic.MatchString(s.Name) {
			shown = append(shown, s)
		}
	}
	if len(shown) == 0 {
		shown = st[:min(len(st), 6)]
	}
	return shown, len(st) - len(shown)
}

// printStatistics writes explain --stats's lines: per launch, its key
// compiler statistics.
func printStatistics(w io.Writer, ls []explainLaunch) {
	if !slices.ContainsFunc(ls, func(l explainLaunch) bool { return l.Statistics != nil }) {
		return
	}
	fmt.Fprintln(w, "\ncompiler statistics (the driver's, per launch: registers, spills, shared memory where reported; all in --json)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, l := range ls {
		shown, more := keyStatistics(l.Statistics)
		parts := make([]string, len(shown))
		for i, s := range shown {
			parts[i] = s.Name + " " + s.ValueString()
		}
		text := strings.Join(parts, ", ")
		switch {
		case len(l.Statistics) == 0:
			text = "none reported"
		case more > 0:
			text += fmt.Sprintf(" (+%d more)", more)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", l.Direction, l.Kernel, text)
	}
	tw.Flush()
}

// printLaunches writes explain's launch table.
func printLaunches(w io.Writer, ls []explainLaunch, sharedMax uint32) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tkernel\tgrid (x×y×z)\tworkgroup\tshared B\tof limit\ttile\tconfig\t")
	for _, l := range ls {
		grid := strings.Trim(strings.ReplaceAll(fmt.Sprint(l.Grid), " ", "×"), "[]")
		if l.Base != nil {
			grid += " from " + joinInts(l.Base)
		}
		wg := "-"
		if len(l.Workgroup) > 0 {
			wg = fmt.Sprint(l.Workgroup[0])
		}
		frac := "-"
		if sharedMax > 0 && l.Grid != nil {
			frac = fmt.Sprintf("%.0f%%", 100*float64(l.SharedBytes)/float64(sharedMax))
		}
		if grid == "" {
			grid = "-"
		}
		src := l.Source
		if src == "" {
			src = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t\n", l.Direction, l.Kernel, grid, wg, l.SharedBytes, frac, l.Tile, src)
	}
	tw.Flush()
}
