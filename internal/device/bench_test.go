//go:build cgo

package device_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
)

// submitBench opens the device of the submission benchmarks, with the axpb
// pipeline, its buffer of 64 floats and the push constants of x = x·1 + 0.
func submitBench(b *testing.B) (*device.Device, *device.Pipeline, *device.Buffer, []byte) {
	d := devicetest.Open(b)
	return d, axpb(b, d), newBuf(b, d, 256), push(uint32(64), float32(1), float32(0))
}

// BenchmarkSubmit measures the round trip of one small dispatch: record,
// vkQueueSubmit, fence wait.
func BenchmarkSubmit(b *testing.B) {
	d, p, x, pc := submitBench(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := d.Record()
		if err := r.Dispatch(p, pc, [3]uint32{1, 1, 1}, x); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Submit(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSubmit100 records 100 dependent dispatches (with barriers) per
// submission; ns/op is per submission.
func BenchmarkSubmit100(b *testing.B) {
	d, p, x, pc := submitBench(b)
	r := d.Record()
	for k := 0; k < 100; k++ {
		require.NoError(b, r.Dispatch(p, pc, [3]uint32{1, 1, 1}, x))
		r.Barrier()
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := d.Submit(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

func benchTransfer(b *testing.B, size int, up bool) {
	d := devicetest.Open(b)
	buf := newBuf(b, d, int64(size))
	host := make([]byte, size)
	ctx := context.Background()
	require.NoError(b, buf.UploadBytes(ctx, 0, host)) // warm the staging pool
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var err error
		if up {
			err = buf.UploadBytes(ctx, 0, host)
		} else {
			err = buf.DownloadBytes(ctx, 0, host)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUpload1MiB(b *testing.B)    { benchTransfer(b, 1<<20, true) }
func BenchmarkUpload64MiB(b *testing.B)   { benchTransfer(b, 64<<20, true) }
func BenchmarkDownload1MiB(b *testing.B)  { benchTransfer(b, 1<<20, false) }
func BenchmarkDownload64MiB(b *testing.B) { benchTransfer(b, 64<<20, false) }
