package vkattn

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/flashvk/flashvk/internal/shaders"
)

// TileHeadDims are the head dims the tile table lists.
var TileHeadDims = []int{32, 40, 64, 80, 96, 128, 256}

// TileRow is one kernel's tile configuration for one (D = Dv, dtype).
type TileRow struct {
	Kernel      string
	D, DV       int
	DType       DType
	Config      shaders.Config
	SharedBytes int   // shared memory per workgroup
	Err         error // no configuration fits
}

// SharedBytes is the shared memory of kernel with configuration c.
func SharedBytes(kernel string, c shaders.Config, d, dv int, f16 bool) int {
	switch kernel {
	case shaders.KernelNaive:
		return shaders.NaiveSharedBytes(c.WG, d)
	case shaders.KernelMinimal:
		return shaders.MinimalSharedBytes(c.BR, c.BC, d, dv, f16)
	case shaders.KernelFlash:
		return shaders.FlashFwdSharedBytes(c.BR, c.BC, d, dv, f16)
	case shaders.KernelBwdDKDV:
		return shaders.BwdDKDVSharedBytes(c.BR, c.BC, d, dv, f16)
	case shaders.KernelBwdDQ:
		return shaders.BwdDQSharedBytes(c.BR, c.BC, d, dv, f16)
	}
	return 0
}

// TileTable lists shaders.DefaultConfig for every kernel in kernels, every
// dtype in dts and every head dim of TileHeadDims (Dv = D) on a device with
// limits lim.
func TileTable(lim shaders.Limits, kernels []string, dts []DType) []TileRow {
	var rows []TileRow
	for _, k := range kernels {
		for _, dt := range dts {
			for _, d := range TileHeadDims {
				c, err := shaders.DefaultConfig(k, d, d, dt.Size() == 2, lim)
				rows = append(rows, tileRow(k, d, dt, c, err))
			}
		}
	}
	return rows
}

func tileRow(k string, d int, dt DType, c shaders.Config, err error) TileRow {
	r := TileRow{Kernel: k, D: d, DV: d, DType: dt, Config: c, Err: err}
	if err == nil {
		r.SharedBytes = SharedBytes(k, c, d, d, dt.Size() == 2)
	}
	return r
}

// Tiles lists the configurations this backend uses: its forward kernel and
// the three backward kernels, for each dtype it runs and each head dim of
// TileHeadDims.
func (b *Backend) Tiles() []TileRow {
	var rows []TileRow
	for _, k := range []string{b.kernel, shaders.KernelBwdPre, shaders.KernelBwdDKDV, shaders.KernelBwdDQ} {
		for _, dt := range b.dtypes {
			for _, d := range TileHeadDims {
				c, err := b.Config(k, d, d, dt)
				rows = append(rows, tileRow(k, d, dt, c, err))
			}
		}
	}
	return rows
}

// FormatTiles writes rows as a table.
func FormatTiles(w io.Writer, rows []TileRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kernel\tdtype\td\tWG\tBR\tBC\tshared B\t")
	for _, r := range rows {
		if r.Err != nil {
			fmt.Fprintf(tw, "%s\t%v\t%d\t-\t-\t-\t%v\t\n", r.Kernel, r.DType, r.D, r.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%d\t%d\t%d\t\n", r.Kernel, r.DType, r.D, r.Config.WG, r.Config.BR, r.Config.BC, r.SharedBytes)
	}
	tw.Flush()
}
