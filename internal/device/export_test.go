//go:build cgo

package device

// MarkLost simulates VK_ERROR_DEVICE_LOST on d (tests only): the path a
// real device loss takes through check.
func MarkLost(d *Device) { d.check("test", -4 /* VK_ERROR_DEVICE_LOST */) }
