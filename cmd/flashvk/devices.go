package main

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/flashvk/flashvk/attention"
	"github.com/spf13/cobra"
)

// deviceRow is one line of `flashvk devices`.
type deviceRow struct {
	Backend string `json:"backend"` // "vulkan" or "cpu"
	*attention.DeviceInfo
	Name string `json:"name"`
	// Auto marks the row Config{} / --backend auto runs on.
	Auto bool `json:"auto"`
	// Threads: CPU row only. DTypes are the storage types flashvk's
	// attention runs on the device (empty when it does not open).
	Threads int      `json:"threads,omitempty"`
	DTypes  []string `json:"dtypes,omitempty"`
	// Runnable says whether flashvk's attention backend opens on it; Error
	// says why not.
	Runnable bool   `json:"runnable"`
	Error    string `json:"error,omitempty"`
}

type devicesReport struct {
	Devices []deviceRow `json:"devices"`
	Notes   []string    `json:"notes,omitempty"`
}

func (a *app) devicesCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "devices",
		Aliases: []string{"device", "list"},
		Short:   "List the Vulkan devices and the CPU backend with their capabilities",
		Long: `List every Vulkan physical device (index, name, type, driver, Vulkan version,
subgroup size, shared memory per workgroup, workgroup limits, device-local memory,
the device's shader arithmetic types, cooperative-matrix shapes) and the CPU
backend. The index is what --device takes (a name substring or a vendor works
too).

FP16, INT8 and BF16 are Vulkan shader features: float16 arithmetic
(shaderFloat16), int8 arithmetic (shaderInt8) and the bfloat16 shader type
(VK_KHR_shader_bfloat16, shaderBFloat16Type); "-" on the CPU row. They are not
what flashvk needs for a storage type: DTYPES lists the storage types flashvk
runs there (fp16 and bf16 need only 16-bit storage buffers, math is fp32 but
for bf16's softcap tanh on cooperative matrices; bf16 does not use the
bfloat16 shader type).

RUNS says whether flashvk's attention backend opens on the device. AUTO marks
where --backend auto (the default of every command) runs: the best hardware
Vulkan device (discrete, integrated or virtual GPU), else the Go CPU backend.
A software Vulkan device (type cpu, such as Mesa's lavapipe) runs only when
named (--device lavapipe, FLASHVK_DEVICE) or with --backend vulkan. Without a
Vulkan loader or device only the CPU row is listed, with a note: that is not
an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := a.listDevices()
			if asJSON {
				if err := a.printJSON(rep); err != nil {
					return err
				}
				return nil
			}
			printDevices(a.stdout, rep)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (a *app) listDevices() *devicesReport {
	rep := &devicesReport{}
	gpus, err := a.gpus()
	if err != nil {
		rep.Notes = append(rep.Notes, "no Vulkan device: "+oneLine(err.Error()))
	}
	for i := range gpus {
		g := &gpus[i]
		row := deviceRow{Backend: "vulkan", DeviceInfo: g, Name: g.Name, Auto: g.Auto}
		e, err := attention.Open(attention.Config{Backend: attention.Vulkan, Device: strconv.Itoa(g.Index)})
		if err != nil {
			row.Error = oneLine(err.Error())
		} else {
			row.Runnable = true
			for _, d := range e.Info().DTypes {
				row.DTypes = append(row.DTypes, d.String())
			}
			_ = e.Close()
		}
		rep.Devices = append(rep.Devices, row)
	}
	cpu := deviceRow{Backend: "cpu", Name: "Go CPU backend", Threads: runtime.GOMAXPROCS(0), Runnable: true, Auto: true}
	for i := range rep.Devices {
		d := &rep.Devices[i]
		d.Auto = d.Auto && d.Runnable // Auto falls back to the CPU when its device does not open
		cpu.Auto = cpu.Auto && !d.Auto
	}
	if e, err := attention.Open(attention.Config{Backend: attention.CPU}); err == nil {
		in := e.Info()
		cpu.Name = in.Device
		for _, d := range in.DTypes {
			cpu.DTypes = append(cpu.DTypes, d.String())
		}
		_ = e.Close()
	} else {
		cpu.Runnable, cpu.Error = false, oneLine(err.Error())
	}
	rep.Devices = append(rep.Devices, cpu)
	// One note for a backend that fails the same way everywhere.
	seen := map[string]bool{}
	for _, d := range rep.Devices {
		if d.Error != "" && !seen[d.Error] {
			seen[d.Error] = true
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s backend does not run here: %s", d.Backend, d.Error))
		}
	}
	return rep
}

func printDevices(w io.Writer, rep *devicesReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tBACKEND\tNAME\tTYPE\tDRIVER\tVULKAN\tSUBGROUP\tSHARED/WG\tMAX WG\tMEMORY\tFP16\tINT8\tBF16\tCOOPMAT\tDTYPES\tRUNS\tAUTO")
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	for _, d := range rep.Devices {
		auto := "-"
		if d.Auto {
			auto = "auto"
		}
		if d.DeviceInfo == nil {
			fmt.Fprintf(tw, "-\t%s\t%s\tcpu\t%s, %d threads\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\t%s\t%s\n", d.Backend, d.Name,
				runtime.Version(), d.Threads, shortDTypes(d.DTypes), yes(d.Runnable), auto)
			continue
		}
		g := d.DeviceInfo
		cm := "-"
		if len(g.CoopMat) > 0 {
			cm = fmt.Sprintf("%d shapes", len(g.CoopMat))
		}
		if len(g.CoopMat2) > 0 {
			cm += " +coopmat2"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Index, d.Backend, d.Name, g.Type,
			g.Driver(), g.APIVersion, g.SubgroupSize, bytesIEC(uint64(g.MaxSharedMemory)), g.MaxWorkgroupInvocations,
			bytesIEC(g.DeviceLocalBytes), yes(g.Float16), yes(g.Int8), yes(g.BFloat16), cm, shortDTypes(d.DTypes), yes(d.Runnable), auto)
	}
	tw.Flush()
	for _, d := range rep.Devices {
		if d.DeviceInfo != nil && len(d.CoopMat) > 0 {
			fmt.Fprintf(w, "\ncooperative matrices of device %d (M×N×K A·B+C→Result):\n", d.Index)
			for _, s := range d.CoopMat {
				fmt.Fprintf(w, "  %s\n", s)
			}
			if len(d.CoopMat2) > 0 {
				fmt.Fprintf(w, "  coopmat2: %s\n", strings.Join(d.CoopMat2, ", "))
			}
		}
	}
	if len(rep.Notes) > 0 {
		fmt.Fprintln(w)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// bytesIEC formats a byte count with a binary prefix.
func bytesIEC(b uint64) string {
	if b == 0 {
		return "-"
	}
	const k = 1024
	switch {
	case b >= k*k*k:
		return fmt.Sprintf("%.1f GiB", float64(b)/(k*k*k))
	case b >= k*k:
		return fmt.Sprintf("%.0f MiB", float64(b)/(k*k))
	case b >= k:
		return fmt.Sprintf("%.0f KiB", float64(b)/k)
	}
	return fmt.Sprintf("%d B", b)
}

// shortDTypes lists storage types as benchmark names spell them
// ("fp32,fp16,bf16"), "-" for none.
func shortDTypes(dts []string) string {
	if len(dts) == 0 {
		return "-"
	}
	out := make([]string, len(dts))
	for i, d := range dts {
		out[i] = shortDType(d)
	}
	return strings.Join(out, ",")
}
