package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/internal/cpu"
)

// cpuTiles describes the CPU backend's tiles for p (package cpu's defaults,
// clamped to the sequence lengths as cpu does).
func cpuTiles(p problem) (br, bc int) {
	return max(min(cpu.DefaultBr, p.Nq), 1), max(min(cpu.DefaultBc, p.Nk), 1)
}

// cpuLaunch is the CPU backend's "launch": its tile per worker goroutine.
func cpuLaunch(p problem) Launch {
	br, bc := cpuTiles(p)
	return Launch{Kernel: "cpu", Tile: fmt.Sprintf("Br=%d Bc=%d per worker", br, bc)}
}

// launchesOf returns the dispatches of p's forward (or backward) on e, in
// recording order: the Vulkan backend's real grids and tiles, or the CPU
// backend's tile.
func launchesOf(ctx context.Context, e *attention.Engine, p problem, backward bool) ([]Launch, error) {
	if e.Info().Kind != attention.Vulkan {
		return []Launch{cpuLaunch(p)}, nil
	}
	ls, err := e.Launches(ctx, p.qShape(), p.kShape(), p.vShape(), p.Layout, p.DType, p.options(), backward)
	if err != nil {
		return nil, err
	}
	out := make([]Launch, len(ls))
	for i, l := range ls {
		var tile []string
		if l.BR > 0 || l.BC > 0 {
			tile = append(tile, fmt.Sprintf("Br=%d Bc=%d", l.BR, l.BC))
		}
		if l.Mode != "" {
			tile = append(tile, l.Mode)
		}
		out[i] = Launch{Kernel: l.Kernel, Grid: []int{int(l.Grid[0]), int(l.Grid[1]), int(l.Grid[2])},
			Workgroup: []int{l.Workgroup, 1, 1}, SharedBytes: l.SharedBytes, Tile: strings.Join(tile, " "), Source: l.Source}
	}
	return out, nil
}

// mainLaunch is the dispatch a result's "launch" shows: the forward kernel
// (the first dispatch), or for the backward bwd_dkdv, which does most of
// its work.
func mainLaunch(ls []Launch) *Launch {
	if len(ls) == 0 {
		return nil
	}
	m := ls[0]
	for _, l := range ls {
		if l.Kernel == "bwd_dkdv" {
			m = l
		}
	}
	return &m
}

// explainLaunch is one dispatch in explain's launch table.
type explainLaunch struct {
	Direction string `json:"direction"` // "fwd" or "bwd"
	Launch
}

// printLaunches writes explain's launch table.
func printLaunches(w io.Writer, ls []explainLaunch, sharedMax uint32) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tkernel\tgrid (x×y×z)\tworkgroup\tshared B\tof limit\ttile\tconfig\t")
	for _, l := range ls {
		grid := strings.Trim(strings.ReplaceAll(fmt.Sprint(l.Grid), " ", "×"), "[]")
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
