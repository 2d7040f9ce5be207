//go:build cgo

package device_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
)

// statsSupported reports whether the device the tests open has
// VK_KHR_pipeline_executable_properties (Info.PipelineStatistics of
// Devices: supported, enabled or not).
func statsSupported(t *testing.T) (bool, string) {
	t.Helper()
	devicetest.Skip(t)
	opt := devicetest.Options(t)
	infos, err := device.Devices(opt.Library)
	require.NoError(t, err)
	i, err := device.Select(infos, opt.Select)
	require.NoError(t, err)
	return infos[i].PipelineStatistics, infos[i].Name
}

// TestPipelineStatistics: with Options.PipelineStatistics on a device
// with VK_KHR_pipeline_executable_properties, a pipeline reports named,
// typed compiler statistics and still runs; without the option, or on a
// device without the extension, Statistics fails with ErrUnsupported,
// saying which.
func TestPipelineStatistics(t *testing.T) {
	supported, name := statsSupported(t)
	t.Logf("%s: VK_KHR_pipeline_executable_properties supported: %v", name, supported)

	t.Run("not enabled", func(t *testing.T) {
		d := devicetest.Open(t)
		assert.False(t, d.Info().PipelineStatistics, "enabled without Options.PipelineStatistics")
		p := vadd(t, d, 64, 1)
		st, err := p.Statistics()
		require.ErrorIs(t, err, device.ErrUnsupported)
		assert.Nil(t, st)
		if supported {
			assert.Contains(t, err.Error(), "not enabled")
			assert.Contains(t, err.Error(), "Options.PipelineStatistics")
		} else {
			assert.Contains(t, err.Error(), "no VK_KHR_pipeline_executable_properties")
		}
		_, err = p.Executables()
		assert.ErrorIs(t, err, device.ErrUnsupported)
	})

	t.Run("enabled", func(t *testing.T) {
		opt := devicetest.Options(t)
		opt.PipelineStatistics = true
		d := devicetest.OpenWith(t, opt)
		assert.Equal(t, supported, d.Info().PipelineStatistics, "Info.PipelineStatistics of the open device is what the device supports")
		p := vadd(t, d, 64, 2)
		st, err := p.Statistics()
		if !supported {
			require.ErrorIs(t, err, device.ErrUnsupported)
			assert.Contains(t, err.Error(), "no VK_KHR_pipeline_executable_properties")
			t.Logf("%s lacks VK_KHR_pipeline_executable_properties: the error path is checked; the statistics themselves need a device with the extension (e.g. NVIDIA, RADV, ANV; lavapipe up to Mesa 26 has none)", name)
			return
		}
		require.NoError(t, err)
		require.NotEmpty(t, st)
		for _, s := range st {
			t.Logf("  [%d] %s = %s (%s; %s)", s.Executable, s.Name, s.ValueString(), s.Format, s.Description)
			assert.NotEmpty(t, s.Name)
			assert.Equal(t, s.Name+": "+s.ValueString(), s.String())
			switch v := s.Value.(type) {
			case bool:
				assert.Equal(t, device.StatBool, s.Format, s.Name)
			case int64:
				assert.Equal(t, device.StatInt64, s.Format, s.Name)
			case uint64:
				assert.Equal(t, device.StatUint64, s.Format, s.Name)
			case float64:
				assert.Equal(t, device.StatFloat64, s.Format, s.Name)
				assert.False(t, math.IsNaN(v), s.Name)
			default:
				t.Errorf("%s: value %v of type %T (format %v)", s.Name, s.Value, s.Value, s.Format)
			}
		}
		exs, err := p.Executables()
		require.NoError(t, err)
		require.NotEmpty(t, exs)
		var n int
		for i, ex := range exs {
			t.Logf("executable %d: %q (%s), subgroup size %d, %d statistics", i, ex.Name, ex.Description, ex.SubgroupSize, len(ex.Statistics))
			for _, s := range ex.Statistics {
				assert.Equal(t, i, s.Executable)
			}
			n += len(ex.Statistics)
		}
		assert.Len(t, st, n)

		// A pipeline created to capture statistics runs as any other.
		ctx := ctxT(t)
		const groups = 4
		const count = 64 * groups
		a, b, out := newBuf(t, d, 4*count), newBuf(t, d, 4*count), newBuf(t, d, 4*count)
		x := make([]float32, count)
		for i := range x {
			x[i] = float32(i)
		}
		require.NoError(t, device.Upload(ctx, a, 0, x))
		require.NoError(t, device.Upload(ctx, b, 0, x))
		r := d.Record()
		require.NoError(t, r.Dispatch(p, push(uint32(count), float32(1)), [3]uint32{groups, 1, 1}, a, b, out))
		_, err = d.Submit(ctx, r)
		require.NoError(t, err)
		got := make([]float32, count)
		require.NoError(t, device.Download(ctx, out, 0, got))
		assert.Equal(t, float32(3*7+1), got[7]) // a + 2b + 1

		require.NoError(t, p.Close())
		_, err = p.Statistics()
		assert.ErrorIs(t, err, device.ErrClosed)
	})
}

// TestStatisticString: values of every format print as Go's.
func TestStatisticString(t *testing.T) {
	for _, tc := range []struct {
		s    device.Statistic
		want string
	}{
		{device.Statistic{Name: "Register Count", Format: device.StatUint64, Value: uint64(128)}, "Register Count: 128"},
		{device.Statistic{Name: "delta", Format: device.StatInt64, Value: int64(-3)}, "delta: -3"},
		{device.Statistic{Name: "spills", Format: device.StatBool, Value: false}, "spills: false"},
		{device.Statistic{Name: "occupancy", Format: device.StatFloat64, Value: 0.75}, "occupancy: 0.75"},
	} {
		assert.Equal(t, tc.want, tc.s.String())
	}
	assert.Equal(t, "uint64", device.StatUint64.String())
}
