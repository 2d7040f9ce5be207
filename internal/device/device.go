//go:build cgo

package device

/*
#include <stdlib.h>
#include "vk.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Options configure Open.
type Options struct {
	// Select chooses the physical device:
	//   "" or "best"    the highest-ranked device (discrete > integrated >
	//                   virtual > cpu, then device-local memory)
	//   "gpu"           the best hardware device (discrete, integrated or
	//                   virtual: not a CPU implementation such as lavapipe)
	//   "0", "1", …     an index into Devices()
	//   "nvidia", "amd", "intel", "lavapipe"/"llvmpipe", "cpu",
	//   "discrete", "integrated"   the best device of that vendor or type
	//   anything else   a case-insensitive substring of the device name
	Select string
	// Library is the Vulkan loader library to open ("": libvulkan.so.1,
	// then libvulkan.so). A process opens one loader: a later Open naming
	// another fails.
	Library string
	// Validation enables VK_LAYER_KHRONOS_validation. Open fails with
	// ErrNoValidation when the layer is missing. Warnings and errors are
	// kept (see Device.ValidationErrors) and all messages go to Log.
	Validation bool
	// Log receives validation/debug messages (may be called from any goroutine).
	Log func(msg string)
	// PipelineCache seeds the VkPipelineCache (see Device.PipelineCacheData).
	// A blob from another device or driver is ignored.
	PipelineCache []byte
	// DefaultTimeout bounds waits whose context has no deadline; 0 means 60 s
	// (10 min on a CPU device such as lavapipe).
	DefaultTimeout time.Duration
	// SpinWait is how long a wait polls the fence before blocking in the
	// driver: polling cuts the latency of short submissions (a blocking
	// wait costs tens of microseconds on NVIDIA) at the price of a busy
	// CPU core. 0 means DefaultSpinWait on GPUs and no spinning on CPU
	// devices (where it would steal cycles from the driver's threads);
	// negative disables spinning.
	SpinWait time.Duration
	// NoBufferDeviceAddress leaves bufferDeviceAddress off even where the
	// device supports it, as on a device without it: Buffer.Address is 0,
	// NewBuffer refuses buffers larger than MaxStorageBufferRange and
	// NewPipeline refuses PipelineDesc.Addressed. For tests of that
	// fallback.
	NoBufferDeviceAddress bool
	// PipelineStatistics enables VK_KHR_pipeline_executable_properties
	// where the device supports it (Info.PipelineStatistics of Devices):
	// every pipeline is then created with its compiler statistics
	// captured (registers, spills, shared memory…; see
	// Pipeline.Statistics). Off by default: capturing them can slow
	// pipeline creation. On a device without the extension Open succeeds
	// and Pipeline.Statistics fails with ErrUnsupported.
	PipelineStatistics bool
}

// DefaultSpinWait is the default Options.SpinWait on GPUs.
const DefaultSpinWait = 200 * time.Microsecond

// Device is an open Vulkan logical device with one compute queue.
// All methods are safe for concurrent use; see the package documentation.
type Device struct {
	info    Info
	cinfo   *C.fvk_info
	in      *instance
	c       *C.fvk_device
	timeout time.Duration
	spin    time.Duration

	// life guards the C objects: every operation holds it for reading,
	// Close takes it for writing.
	life   sync.RWMutex
	closed atomic.Bool
	lost   atomic.Bool

	qmu sync.Mutex // serializes vkQueueSubmit

	fmu     sync.Mutex
	frames  []*C.fvk_frame // idle, reset frames
	pending []*inflight    // submissions abandoned by a timed-out wait

	smu     sync.Mutex
	staging []*staging // idle staging buffers
	stBytes int64

	lmu          sync.Mutex
	setLayouts   map[uint32]C.VkDescriptorSetLayout
	pipeLayouts  map[[2]uint32]C.VkPipelineLayout
	buffers      map[*Buffer]struct{}
	pipelines    map[*Pipeline]struct{}
	finalCounts  C.fvk_counters
	submissions  atomic.Int64
	bytesUp      atomic.Int64
	bytesDown    atomic.Int64
	closeErr     error
	closeOnce    sync.Once
	validationOn bool
	// statsSupported: the device has VK_KHR_pipeline_executable_properties
	// (whether or not Options.PipelineStatistics enabled it).
	statsSupported bool
}

// Devices lists the physical devices of this machine through the Vulkan
// loader library ("": the default, see Options.Library). It creates and
// destroys a temporary Vulkan instance. Without a Vulkan loader it returns
// an error wrapping ErrNoVulkan; with a loader but no devices, an empty list
// and an error wrapping ErrNoDevice.
func Devices(library string) ([]Info, error) {
	in, err := newInstance(library, false, nil)
	if err != nil {
		return nil, err
	}
	defer in.destroy()
	n := in.count()
	infos := make([]Info, 0, n)
	for i := 0; i < n; i++ {
		inf, ci := in.query(i)
		C.free(unsafe.Pointer(ci))
		infos = append(infos, inf)
	}
	if n == 0 {
		return infos, fmt.Errorf("%w: the Vulkan loader found no physical device", ErrNoDevice)
	}
	return infos, nil
}

// Open creates a Device on the selected physical device.
func Open(opt Options) (*Device, error) {
	sink := &logSink{log: opt.Log}
	in, err := newInstance(opt.Library, opt.Validation, sink)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			in.destroy()
		}
	}()
	n := in.count()
	if n == 0 {
		return nil, fmt.Errorf("%w: the Vulkan loader found no physical device", ErrNoDevice)
	}
	infos := make([]Info, n)
	cinfos := make([]*C.fvk_info, n)
	defer func() {
		for _, ci := range cinfos {
			if ci != nil {
				C.free(unsafe.Pointer(ci))
			}
		}
	}()
	for i := 0; i < n; i++ {
		infos[i], cinfos[i] = in.query(i)
	}
	idx, err := Select(infos, opt.Select)
	if err != nil {
		return nil, err
	}
	ci := cinfos[idx]
	var cache unsafe.Pointer
	var cacheLen C.size_t
	if len(opt.PipelineCache) > 0 && cacheBlobMatches(opt.PipelineCache, infos[idx]) {
		cache = C.CBytes(opt.PipelineCache)
		cacheLen = C.size_t(len(opt.PipelineCache))
		defer C.free(cache)
	}
	d := &Device{
		info:         infos[idx],
		in:           in,
		timeout:      opt.DefaultTimeout,
		setLayouts:   map[uint32]C.VkDescriptorSetLayout{},
		pipeLayouts:  map[[2]uint32]C.VkPipelineLayout{},
		buffers:      map[*Buffer]struct{}{},
		pipelines:    map[*Pipeline]struct{}{},
		validationOn: opt.Validation,

		statsSupported: infos[idx].PipelineStatistics,
	}
	if d.timeout <= 0 {
		d.timeout = 60 * time.Second
		if d.info.Type == "cpu" {
			// A CPU device (lavapipe) shares the cores with its caller and
			// compiles pipelines on first use: on a loaded 2-core machine a
			// large submission can take minutes without being hung.
			d.timeout = 10 * time.Minute
		}
	}
	switch {
	case opt.SpinWait == 0 && d.info.Type != "cpu":
		d.spin = DefaultSpinWait
	case opt.SpinWait > 0:
		d.spin = opt.SpinWait
	}
	if opt.NoBufferDeviceAddress {
		ci.bda, ci.ext_bda = 0, 0
	}
	if opt.PipelineStatistics && ci.exec_props != 0 {
		ci.ext_exec_props = 1
	}
	if r := VkResult(C.fvk_device_create(in.c, C.uint32_t(idx), ci, cache, cacheLen, &d.c)); r != 0 {
		return nil, fmt.Errorf("device: open %s: %w", infos[idx].Name, vkErr("vkCreateDevice", r))
	}
	d.info.BufferDeviceAddress = d.c.bda != 0
	d.info.DispatchBase = d.c.dispatch_base != 0
	d.info.PipelineStatistics = d.c.capture_stats != 0
	d.cinfo = ci
	cinfos[idx] = nil // owned by d now
	ok = true
	return d, nil
}

// Select returns the index of the device chosen by sel (see Options.Select).
func Select(infos []Info, sel string) (int, error) {
	var usable []Info
	for _, inf := range infos {
		if inf.QueueFamily != ^uint32(0) {
			usable = append(usable, inf)
		}
	}
	list := func() string {
		var b strings.Builder
		for _, inf := range infos {
			fmt.Fprintf(&b, "\n  %d: %s (%s, %s)", inf.Index, inf.Name, inf.Vendor, inf.Type)
		}
		return b.String()
	}
	if len(usable) == 0 {
		return 0, fmt.Errorf("%w: no device with a compute queue; devices:%s", ErrNoDevice, list())
	}
	s := strings.ToLower(strings.TrimSpace(sel))
	if i, err := strconv.Atoi(s); err == nil {
		for _, inf := range usable {
			if inf.Index == i {
				return i, nil
			}
		}
		return 0, fmt.Errorf("%w: no usable device with index %d; devices:%s", ErrNoDevice, i, list())
	}
	var match func(Info) bool
	switch s {
	case "", "best", "any", "default":
		match = func(Info) bool { return true }
	case "nvidia", "amd", "intel", "arm", "qualcomm", "apple", "imgtec":
		match = func(i Info) bool { return i.Vendor == s }
	case "lavapipe", "llvmpipe":
		match = func(i Info) bool {
			return i.DriverID == C.VK_DRIVER_ID_MESA_LLVMPIPE || strings.Contains(strings.ToLower(i.Name), "llvmpipe")
		}
	case "cpu", "discrete", "integrated", "virtual":
		match = func(i Info) bool { return i.Type == s }
	case "gpu":
		match = func(i Info) bool { return i.Type == "discrete" || i.Type == "integrated" || i.Type == "virtual" }
	default:
		match = func(i Info) bool { return strings.Contains(strings.ToLower(i.Name), s) }
	}
	var cands []Info
	for _, inf := range usable {
		if match(inf) {
			cands = append(cands, inf)
		}
	}
	if len(cands) == 0 {
		return 0, fmt.Errorf("%w: no device matches %q; devices:%s", ErrNoDevice, sel, list())
	}
	rank := map[string]int{"discrete": 4, "integrated": 3, "virtual": 2, "cpu": 1}
	sort.SliceStable(cands, func(a, b int) bool {
		ra, rb := rank[cands[a].Type], rank[cands[b].Type]
		if ra != rb {
			return ra > rb
		}
		return cands[a].DeviceLocalBytes() > cands[b].DeviceLocalBytes()
	})
	return cands[0].Index, nil
}

// Info describes the device; feature flags are those enabled.
func (d *Device) Info() Info { return d.info }

// String is a one-line description of the device.
func (d *Device) String() string { return d.info.String() }

// ValidationErrors returns the validation-layer warnings and errors seen so
// far (empty when Options.Validation is off).
func (d *Device) ValidationErrors() []string { return d.in.sink.snapshot() }

// Validation reports whether the validation layer is enabled.
func (d *Device) Validation() bool { return d.validationOn }

// use takes the life lock for reading and checks the device is usable.
func (d *Device) use() error {
	d.life.RLock()
	if d.closed.Load() {
		d.life.RUnlock()
		return ErrClosed
	}
	if d.lost.Load() {
		d.life.RUnlock()
		return ErrDeviceLost
	}
	return nil
}

func (d *Device) done() { d.life.RUnlock() }

// closeObject runs destroyLocked, with d.lmu held, for the Close of a
// Buffer or Pipeline: not once the device is closed, Device.Close having
// destroyed them all.
func (d *Device) closeObject(destroyLocked func()) {
	d.life.RLock()
	defer d.life.RUnlock()
	if d.closed.Load() {
		return
	}
	d.lmu.Lock()
	defer d.lmu.Unlock()
	destroyLocked()
}

// check converts a VkResult into an error, noting device loss.
func (d *Device) check(op string, r C.VkResult) error {
	if r == 0 {
		return nil
	}
	if r == C.VK_ERROR_DEVICE_LOST {
		d.lost.Store(true)
	}
	return vkErr(op, VkResult(r))
}

// Lost reports whether the device was lost (VK_ERROR_DEVICE_LOST).
func (d *Device) Lost() bool { return d.lost.Load() }

// Close waits for outstanding GPU work, destroys every object the device
// created (including Buffers and Pipelines not yet closed) in reverse order
// and the instance. It is safe to call more than once.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		d.life.Lock()
		defer d.life.Unlock()
		d.closed.Store(true)
		if r := C.fvk_device_wait_idle(d.c); r != 0 && r != C.VK_ERROR_DEVICE_LOST {
			d.closeErr = vkErr("vkDeviceWaitIdle", VkResult(r))
		}
		d.fmu.Lock()
		for _, p := range d.pending {
			p.release(d, false)
		}
		d.pending = nil
		for _, f := range d.frames {
			C.fvk_frame_destroy(d.c, f)
		}
		d.frames = nil
		d.fmu.Unlock()
		d.smu.Lock()
		for _, s := range d.staging {
			C.fvk_buffer_destroy(d.c, &s.b)
		}
		d.staging, d.stBytes = nil, 0
		d.smu.Unlock()
		d.lmu.Lock()
		for p := range d.pipelines {
			p.destroyLocked()
		}
		for b := range d.buffers {
			b.destroyLocked()
		}
		for _, l := range d.pipeLayouts {
			C.fvk_pipeline_layout_destroy(d.c, l)
		}
		for _, l := range d.setLayouts {
			C.fvk_set_layout_destroy(d.c, l)
		}
		d.pipelines, d.buffers, d.pipeLayouts, d.setLayouts = nil, nil, nil, nil
		d.lmu.Unlock()
		C.fvk_device_destroy(d.c)
		d.c = nil
		d.finalCounts = d.in.destroy()
		C.free(unsafe.Pointer(d.cinfo))
		d.cinfo = nil
	})
	return d.closeErr
}

// PipelineCacheData returns the VkPipelineCache contents, to be passed as
// Options.PipelineCache to a later Open on the same device and driver.
func (d *Device) PipelineCacheData() ([]byte, error) {
	if err := d.use(); err != nil {
		return nil, err
	}
	defer d.done()
	for tries := 0; tries < 4; tries++ {
		var n C.size_t
		if r := C.fvk_pipeline_cache_data(d.c, &n, nil); r != 0 {
			return nil, d.check("vkGetPipelineCacheData", r)
		}
		if n == 0 {
			return nil, nil
		}
		buf := C.malloc(n)
		r := C.fvk_pipeline_cache_data(d.c, &n, buf)
		if r == C.VK_INCOMPLETE { // the cache grew in between
			C.free(buf)
			continue
		}
		if r != 0 {
			C.free(buf)
			return nil, d.check("vkGetPipelineCacheData", r)
		}
		out := C.GoBytes(buf, C.int(n))
		C.free(buf)
		return out, nil
	}
	return nil, errors.New("device: pipeline cache kept changing")
}

// MergePipelineCache merges a blob from PipelineCacheData (of an earlier
// run) into the device's pipeline cache. A blob whose header names another
// device or driver is rejected with ErrInvalid without reaching the driver.
func (d *Device) MergePipelineCache(blob []byte) error {
	if !cacheBlobMatches(blob, d.info) {
		return fmt.Errorf("%w: pipeline cache blob is not for this device and driver", ErrInvalid)
	}
	if err := d.use(); err != nil {
		return err
	}
	defer d.done()
	p := C.CBytes(blob)
	defer C.free(p)
	return d.check("vkMergePipelineCaches", C.fvk_pipeline_cache_merge(d.c, p, C.size_t(len(blob))))
}

// PipelineCacheCompatible reports whether a pipeline-cache blob's header
// matches this device and driver.
func (d *Device) PipelineCacheCompatible(blob []byte) bool { return cacheBlobMatches(blob, d.info) }

// cacheBlobMatches checks the VkPipelineCacheHeaderVersionOne header of a
// pipeline-cache blob against the device, so a blob from another device or
// driver is never handed to the driver.
func cacheBlobMatches(blob []byte, inf Info) bool {
	if len(blob) < 32 {
		return false
	}
	le := func(o int) uint32 {
		return uint32(blob[o]) | uint32(blob[o+1])<<8 | uint32(blob[o+2])<<16 | uint32(blob[o+3])<<24
	}
	if le(0) < 32 || int(le(0)) > len(blob) || le(4) != 1 || le(8) != inf.VendorID || le(12) != inf.DeviceID {
		return false
	}
	return string(blob[16:32]) == string(inf.PipelineCacheUUID[:])
}

// ---- Stats -------------------------------------------------------------------------------

// Counts are numbers of Vulkan objects by type.
type Counts struct {
	Instances, Messengers, Devices                    int64
	Buffers, Memory                                   int64
	ShaderModules, SetLayouts, PipelineLayouts        int64
	Pipelines, PipelineCaches                         int64
	DescriptorPools, CommandPools, Fences, QueryPools int64
}

// Total is the sum over all types.
func (c Counts) Total() int64 {
	return c.Instances + c.Messengers + c.Devices + c.Buffers + c.Memory + c.ShaderModules +
		c.SetLayouts + c.PipelineLayouts + c.Pipelines + c.PipelineCaches + c.DescriptorPools +
		c.CommandPools + c.Fences + c.QueryPools
}

// Stats are object and traffic counters.
type Stats struct {
	Live    Counts // objects alive now
	Created Counts // objects created so far
	// Submissions counts queue submissions (Submit, Upload, Download, Fill).
	Submissions int64
	// BytesUploaded and BytesDownloaded count host<->device traffic.
	BytesUploaded, BytesDownloaded int64
	// StagingBytes is the size of idle pooled staging buffers.
	StagingBytes int64
}

func countsFromC(a *[C.FVK_OBJ_COUNT]C.int64_t) Counts {
	return Counts{
		Instances:       int64(a[C.FVK_OBJ_INSTANCE]),
		Messengers:      int64(a[C.FVK_OBJ_MESSENGER]),
		Devices:         int64(a[C.FVK_OBJ_DEVICE]),
		Buffers:         int64(a[C.FVK_OBJ_BUFFER]),
		Memory:          int64(a[C.FVK_OBJ_MEMORY]),
		ShaderModules:   int64(a[C.FVK_OBJ_SHADER_MODULE]),
		SetLayouts:      int64(a[C.FVK_OBJ_SET_LAYOUT]),
		PipelineLayouts: int64(a[C.FVK_OBJ_PIPELINE_LAYOUT]),
		Pipelines:       int64(a[C.FVK_OBJ_PIPELINE]),
		PipelineCaches:  int64(a[C.FVK_OBJ_PIPELINE_CACHE]),
		DescriptorPools: int64(a[C.FVK_OBJ_DESCRIPTOR_POOL]),
		CommandPools:    int64(a[C.FVK_OBJ_COMMAND_POOL]),
		Fences:          int64(a[C.FVK_OBJ_FENCE]),
		QueryPools:      int64(a[C.FVK_OBJ_QUERY_POOL]),
	}
}

// Stats returns live and created object counts for this device (including
// its instance). After Close, Live is all zero unless something leaked.
func (d *Device) Stats() Stats {
	var c C.fvk_counters
	d.life.RLock()
	if d.in.c != nil {
		// Counters are updated atomically in C; copy them under the life lock.
		C.fvk_instance_counters(d.in.c, &c)
	} else {
		c = d.finalCounts
	}
	d.life.RUnlock()
	d.smu.Lock()
	st := d.stBytes
	d.smu.Unlock()
	return Stats{
		Live:            countsFromC(&c.live),
		Created:         countsFromC(&c.created),
		Submissions:     d.submissions.Load(),
		BytesUploaded:   d.bytesUp.Load(),
		BytesDownloaded: d.bytesDown.Load(),
		StagingBytes:    st,
	}
}

// GlobalStats returns object counts over all devices and instances of the
// process, including Devices() calls.
func GlobalStats() Stats {
	var c C.fvk_counters
	C.fvk_global_counters(&c)
	return Stats{Live: countsFromC(&c.live), Created: countsFromC(&c.created)}
}
