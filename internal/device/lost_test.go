//go:build cgo

package device_test

import (
	"context"
	"errors"
	"testing"

	"github.com/flashvk/flashvk/internal/device"
	"github.com/flashvk/flashvk/internal/device/devicetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeviceLost: after VK_ERROR_DEVICE_LOST every call fails clearly with
// ErrDeviceLost (no hang, no panic) and Close still releases everything.
func TestDeviceLost(t *testing.T) {
	d := devicetest.Open(t)
	b, err := d.NewBuffer(64)
	require.NoError(t, err)
	device.MarkLost(d)
	assert.True(t, d.Lost())
	_, err = d.NewBuffer(64)
	assert.ErrorIs(t, err, device.ErrDeviceLost)
	err = device.Upload(context.Background(), b, 0, []float32{1})
	assert.ErrorIs(t, err, device.ErrDeviceLost)
	_, err = d.Submit(context.Background(), d.Record())
	assert.True(t, errors.Is(err, device.ErrDeviceLost), "submit: %v", err)
}
