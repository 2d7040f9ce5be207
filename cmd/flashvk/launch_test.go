package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashvk/flashvk/attention"
	"github.com/flashvk/flashvk/internal/shaders"
)

// TestExplainLaunches: on a Vulkan device explain lists the real
// dispatches, within the device's shared memory and with the shaders'
// grids for the shape.
func TestExplainLaunches(t *testing.T) {
	skipWithoutVulkan(t)
	const B, H, N, d = 2, 8, 2048, 64
	var an analysis
	out := mustRun(t, "explain", "--backend", "vulkan", "-b", "2", "--heads", "8", "--seq", "2048", "--dim", "64", "--dtype", "float32", "--json")
	if err := json.Unmarshal([]byte(out), &an); err != nil {
		t.Fatal(err)
	}
	if an.Backend != "vulkan" || an.MaxSharedMemory == 0 || len(an.Launches) != 4 {
		t.Fatalf("explain --json: backend %q, limit %d, launches %+v", an.Backend, an.MaxSharedMemory, an.Launches)
	}
	for _, l := range an.Launches {
		if l.SharedBytes > int(an.MaxSharedMemory) || len(l.Grid) != 3 || len(l.Workgroup) != 3 || l.Workgroup[0] <= 0 {
			t.Errorf("launch %+v (limit %d)", l, an.MaxSharedMemory)
			continue
		}
		var br, bc int
		if _, err := fmtSscanTile(l.Tile, &br, &bc); err != nil {
			t.Errorf("%s: tile %q: %v", l.Kernel, l.Tile, err)
			continue
		}
		var want [3]uint32
		switch l.Kernel {
		case shaders.KernelFlash:
			want = shaders.FlashFwdGrid(B, H, N, br)
		case shaders.KernelBwdPre:
			want = shaders.BwdPreGrid(B, H, N, br)
		case shaders.KernelBwdDKDV:
			want = shaders.BwdDKDVGrid(B, H, N, bc)
		case shaders.KernelBwdDQ:
			want = shaders.BwdDQGrid(B, H, N, br)
		default:
			t.Errorf("unexpected kernel %q", l.Kernel)
			continue
		}
		if got := [3]uint32{uint32(l.Grid[0]), uint32(l.Grid[1]), uint32(l.Grid[2])}; got != want {
			t.Errorf("%s %s: grid %v, shaders say %v", l.Direction, l.Kernel, got, want)
		}
	}
	text := mustRun(t, "explain", "--backend", "vulkan", "--seq", "2048", "--dim", "64", "--heads", "8", "--dtype", "float32")
	for _, want := range []string{"launch configuration (vulkan backend", "of shared memory per workgroup", "bwd_dkdv", "Br=", "of limit"} {
		if !strings.Contains(text, want) {
			t.Errorf("explain lacks %q:\n%s", want, text)
		}
	}
	cpuOut := mustRun(t, "explain", "--backend", "cpu", "--seq", "2048", "--dim", "64")
	if !strings.Contains(cpuOut, "launch configuration (cpu backend") || !strings.Contains(cpuOut, "br64-bc64 per worker") {
		t.Errorf("explain --backend cpu:\n%s", cpuOut)
	}
}

// TestBenchLaunch: bench on Vulkan writes each result's launch.
func TestBenchLaunch(t *testing.T) {
	skipWithoutVulkan(t)
	path := filepath.Join(t.TempDir(), "vk.json")
	mustRun(t, "bench", "--backend", "vulkan", "--seq", "32", "--dim", "16", "--tokens", "32", "--hidden", "32", "--causal=false",
		"--dtype", "float32", "--backward", "--warmup", "0", "--iters", "2", "--progress", "none", "--json", path)
	f, err := readResults(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Results) == 0 {
		t.Fatal("no results")
	}
	for _, r := range f.Results {
		l := r.Launch
		if l == nil || l.Kernel == "" || len(l.Grid) != 3 || l.Grid[1] != r.H || l.Grid[2] != r.B || !strings.Contains(l.Tile, "Br=") {
			t.Errorf("%s result: launch %+v", r.Direction, l)
		}
		if want := map[string]int{"fwd": 1, "bwd": 3}[r.Direction]; len(r.Launches) != want {
			t.Errorf("%s result: %d launches, want %d", r.Direction, len(r.Launches), want)
		}
		if r.Direction == "bwd" && (l == nil || l.Kernel != "bwd_dkdv") {
			t.Errorf("bwd result: main launch %+v, want bwd_dkdv", l)
		}
	}
}

// fmtSscanTile reads "Br=%d Bc=%d" (or "Br=%d" for a rows-only tile,
// bc then 0) from the start of a tile description.
func fmtSscanTile(tile string, br, bc *int) (int, error) {
	if n, err := fmt.Sscanf(tile, "Br=%d Bc=%d", br, bc); err == nil {
		return n, nil
	}
	*bc = 0
	return fmt.Sscanf(tile, "Br=%d", br)
}

// TestResultLaunchesHeadGroup: a launch whose workgroups run heads of a
// tile together says so in its tile; the others do not.
func TestResultLaunchesHeadGroup(t *testing.T) {
	pl := &attention.Plan{Launches: []attention.Launch{
		{Kernel: "flash_cm", TileRows: 64, TileCols: 32, Config: "nsg4-bc32-mode1-pf1", HeadGroup: 8, Workgroup: 128},
		{Kernel: "bwd_cm_dq", TileRows: 64, TileCols: 64, Config: "nsg4-step64-mode1-pf1", Workgroup: 128},
	}}
	ls := resultLaunches(pl)
	if want := "Br=64 Bc=32 nsg4-bc32-mode1-pf1 (8 heads a tile together)"; ls[0].Tile != want {
		t.Errorf("tile %q, want %q", ls[0].Tile, want)
	}
	if strings.Contains(ls[1].Tile, "heads") {
		t.Errorf("tile %q names a head group it has not", ls[1].Tile)
	}
}
