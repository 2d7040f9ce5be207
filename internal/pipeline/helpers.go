//go:build cgo

package pipeline

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"

	"github.com/flashvk/flashvk/internal/device"
)

// SpecU32 is a uint specialization constant.
func SpecU32(id, v uint32) device.Spec { return device.Spec{ID: id, Value: v} }

// SpecI32 is an int specialization constant.
func SpecI32(id uint32, v int32) device.Spec { return device.Spec{ID: id, Value: uint32(v)} }

// SpecF32 is a float specialization constant.
func SpecF32(id uint32, v float32) device.Spec {
	return device.Spec{ID: id, Value: math.Float32bits(v)}
}

// SpecBool is a bool specialization constant (SPIR-V booleans are 32-bit).
func SpecBool(id uint32, v bool) device.Spec {
	if v {
		return device.Spec{ID: id, Value: 1}
	}
	return device.Spec{ID: id, Value: 0}
}

// MinPushConstants is the push-constant size every Vulkan device supports.
const MinPushConstants = 128

// Push encodes a push-constant block: a struct (or pointer to one, or a
// slice/array) of fixed-size fields, little endian, without padding, as
// encoding/binary does. Use uint32/int32/float32 fields (GLSL uint, int,
// float); 8-byte fields must sit at 8-byte offsets; add blank `_ uint32`
// fields for explicit padding. The size must be a multiple of 4 and at most
// MinPushConstants (128 bytes, portable to every device); Cache.Push checks
// against the device's own limit instead.
func Push(v any) ([]byte, error) { return encodePush(v, MinPushConstants) }

// MustPush is Push that panics on error, for constant layouts.
func MustPush(v any) []byte {
	b, err := Push(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Push is the package-level Push, checked against the device's
// MaxPushConstants.
func (c *Cache) Push(v any) ([]byte, error) { return encodePush(v, c.dev.Info().MaxPushConstants) }

func encodePush(v any, limit uint32) ([]byte, error) {
	if err := checkAlignment(reflect.TypeOf(v)); err != nil {
		return nil, err
	}
	b, err := binary.Append(nil, binary.LittleEndian, v)
	if err != nil {
		return nil, fmt.Errorf("pipeline: push constants %T: %w", v, err)
	}
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("pipeline: %w: push constants %T are %d bytes, not a multiple of 4", device.ErrInvalid, v, len(b))
	}
	if uint32(len(b)) > limit {
		return nil, fmt.Errorf("pipeline: %w: push constants %T are %d bytes, limit %d", device.ErrTooLarge, v, len(b), limit)
	}
	return b, nil
}

// checkAlignment rejects struct fields whose packed offset is not a
// multiple of their scalar size (std430/scalar layout would pad them).
func checkAlignment(t reflect.Type) error {
	if t == nil {
		return fmt.Errorf("pipeline: %w: nil push constants", device.ErrInvalid)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var walk func(t reflect.Type, off int, path string) (int, error)
	walk = func(t reflect.Type, off int, path string) (int, error) {
		switch t.Kind() {
		case reflect.Struct:
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				var err error
				if off, err = walk(f.Type, off, path+"."+f.Name); err != nil {
					return 0, err
				}
			}
			return off, nil
		case reflect.Array:
			for i := 0; i < t.Len(); i++ {
				var err error
				if off, err = walk(t.Elem(), off, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return 0, err
				}
			}
			return off, nil
		case reflect.Slice:
			return off, nil // element layout checked by the caller's data; slices are top-level only
		case reflect.Int8, reflect.Uint8, reflect.Int16, reflect.Uint16, reflect.Int32, reflect.Uint32,
			reflect.Int64, reflect.Uint64, reflect.Float32, reflect.Float64:
			size := int(t.Size())
			if off%size != 0 {
				return 0, fmt.Errorf("pipeline: %w: push-constant field %s (%s) at offset %d is not %d-byte aligned; add padding",
					device.ErrInvalid, path, t, off, size)
			}
			return off + size, nil
		default: // including bool: GLSL bools in push constants are 32-bit, use uint32
			return 0, fmt.Errorf("pipeline: %w: push-constant field %s has unsupported type %s", device.ErrInvalid, path, t)
		}
	}
	_, err := walk(t, 0, t.Name())
	return err
}

// Groups is the number of workgroups of size per needed to cover n items:
// ceil(n/per). It panics when per <= 0, n < 0 or the result overflows uint32.
func Groups(n, per int) uint32 {
	if per <= 0 || n < 0 {
		panic(fmt.Sprintf("pipeline.Groups(%d, %d): need n >= 0 and per > 0", n, per))
	}
	g := n / per
	if n%per != 0 {
		g++
	}
	if uint64(g) > math.MaxUint32 {
		panic(fmt.Sprintf("pipeline.Groups(%d, %d): %d workgroups overflow uint32", n, per, g))
	}
	return uint32(g)
}

// CheckGroups verifies a dispatch size against the device's
// MaxWorkgroupCount, with an error wrapping device.ErrTooLarge that says
// which dimension overflows.
func CheckGroups(info device.Info, groups [3]uint32) error {
	axes := "xyz"
	for i, g := range groups {
		if g > info.MaxWorkgroupCount[i] {
			return fmt.Errorf("pipeline: %w: %d workgroups in %c exceed the device limit %d (%s); split the dispatch or spread it over y/z (see Grid)",
				device.ErrTooLarge, g, axes[i], info.MaxWorkgroupCount[i], info.Name)
		}
	}
	return nil
}

// Grid covers n items with workgroups of per invocations, spreading the
// workgroups over x and y when there are more than MaxWorkgroupCount[0]:
// the shader's linear workgroup index is then
// gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x, and it must
// ignore indices >= n (the grid can be slightly larger than needed).
func Grid(info device.Info, n, per int) ([3]uint32, error) {
	if per <= 0 || n < 0 {
		return [3]uint32{}, fmt.Errorf("pipeline: %w: Grid(%d, %d)", device.ErrInvalid, n, per)
	}
	total := uint64(n+per-1) / uint64(per)
	maxX := uint64(info.MaxWorkgroupCount[0])
	if maxX == 0 {
		return [3]uint32{}, fmt.Errorf("pipeline: %w: device info has no workgroup limits", device.ErrInvalid)
	}
	if total <= maxX {
		return [3]uint32{uint32(total), 1, 1}, nil
	}
	y := (total + maxX - 1) / maxX
	x := (total + y - 1) / y // balance the rows
	g := [3]uint32{uint32(x), 1, 1}
	if y > math.MaxUint32 {
		return [3]uint32{}, CheckGroups(info, [3]uint32{g[0], math.MaxUint32, 1})
	}
	g[1] = uint32(y)
	return g, CheckGroups(info, g)
}
