//go:build cgo

// Package device is flashvk's Vulkan compute runtime: device discovery and
// selection, storage buffers, host transfers, compute pipelines, command
// recording and submission with timeouts, GPU timestamps and object
// accounting. It knows nothing about attention, and it reads no
// environment variable: its callers pass every setting in Options. It is
// the only flashvk package with cgo and unsafe, and it builds with cgo only
// (a CGO_ENABLED=0 build leaves it, and the Vulkan backend above it, out).
//
// # Loading
//
// The Vulkan loader is opened at run time with dlopen (Options.Library, or
// "libvulkan.so.1" then "libvulkan.so"), once per process, so programs
// start on machines without Vulkan and get an error wrapping ErrNoVulkan. No
// physical device gives ErrNoDevice. All Vulkan calls go through a small C
// layer (vk.c) with its own function-pointer tables, built against the
// vendored Vulkan 1.3.239 headers in include/ plus the few newer structures
// flashvk needs (VK_KHR_cooperative_matrix, VK_NV_cooperative_matrix2,
// VK_KHR_shader_bfloat16), defined in vk.h.
//
// Driver libraries are pinned (RTLD_NODELETE) once an instance has been
// created: the loader would otherwise unload and reload the driver for
// every instance, and NVIDIA's driver, which uses static TLS, then fails
// vkCreateInstance after a few dozen Open/Close cycles.
//
// # Typical use
//
//	d, err := device.Open(device.Options{})        // best device; Select picks another
//	defer d.Close()
//	buf, _ := d.NewBuffer(4 * n)
//	_ = device.Upload(ctx, buf, 0, data)            // []float32, []uint16, …
//	p, _ := d.NewPipeline(device.PipelineDesc{SPIRV: spv, PushSize: 4, Bindings: 1})
//	r := d.Record()
//	_ = r.Dispatch(p, push, [3]uint32{groups, 1, 1}, buf)
//	r.Barrier()
//	…
//	res, err := d.Submit(ctx, r)                     // one vkQueueSubmit, waits
//	_ = device.Download(ctx, buf, 0, out)
//
// # Synchronisation model
//
// Submit, Upload, Download and Fill are synchronous: they return after the
// GPU finished (or the context ended). Every submission begins with a full
// memory barrier, so it sees all writes of earlier submissions. Within one
// Recorder, commands may overlap: put Recorder.Barrier (compute→compute),
// BarrierTransferToCompute, BarrierComputeToTransfer or BarrierAll between
// dependent commands.
//
// Waits first poll the fence for up to Options.SpinWait (200 µs by
// default on GPUs, off on CPU devices; this halves the round trip of a
// small submission on NVIDIA, from about 41 µs to 18 µs on an H200), then
// block in vkWaitForFences in slices of at most 10 ms, and give up with an
// error wrapping ErrTimeout (and the context's error) when the context is
// cancelled or its deadline passes; without a deadline Options.DefaultTimeout
// (60 s) applies. The abandoned submission keeps its command buffer and
// staging memory until its fence signals; they are reclaimed by later calls
// or by Close, which waits for the device to go idle. SubmitDrain instead
// waits (a bounded time) for the work of a submission whose context
// ended, so that its buffers may be reused at once; Upload and Download,
// which copy in pieces of at most 64 MiB, stop between pieces and drain
// the piece in flight the same way. Recorder.DispatchBase
// runs part of a grid (vkCmdDispatchBase: every pipeline is created to
// allow it where the device has Vulkan 1.1), so that long work can be
// split into submissions of bounded duration. VK_ERROR_DEVICE_LOST
// marks the device lost: every later call fails with ErrDeviceLost.
//
// # Concurrency
//
// A Device and its Buffers and Pipelines are safe for concurrent use by
// many goroutines. Queue submission is serialised by a mutex; each
// submission gets its own command pool, command buffer, fence, descriptor
// pools and query pool (pooled and reused once the submission completed);
// staging buffers are pooled under a lock and owned by one transfer at a
// time. A Recorder is not safe for concurrent use, but separate Recorders
// can be filled and submitted concurrently. The GPU executes submissions
// from different goroutines in submission order; ordering between
// goroutines, and not closing or overwriting a Buffer that another
// goroutine's submission uses, is up to the caller. Close waits for calls
// in progress, then destroys everything, including Buffers and Pipelines
// that were not closed (closing those later is a no-op).
//
// # Accounting and validation
//
// Every Vulkan object created or destroyed is counted (Device.Stats,
// GlobalStats), so tests can assert that nothing leaks. Options.Validation
// enables VK_LAYER_KHRONOS_validation; warnings and errors are collected
// (Device.ValidationErrors) and every message goes to Options.Log. The
// devicetest package opens devices for tests with validation on when the
// layer is installed and fails tests on validation messages.
//
// # Features
//
// Open enables exactly the features flashvk kernels use when the device
// supports them: 8/16-bit storage, float16/int8/int16/int64/float64
// arithmetic, subgroup extended types, the Vulkan memory model, subgroup
// size control and full subgroups, buffer device addresses
// (bufferDeviceAddress: core in Vulkan 1.2, VK_KHR_buffer_device_address
// on 1.1; Options.NoBufferDeviceAddress leaves it off),
// VK_KHR_cooperative_matrix, VK_NV_cooperative_matrix2 and
// VK_KHR_shader_bfloat16. Info reports them along with the limits
// (subgroup sizes, shared memory, workgroup limits, push-constant size,
// allocation and buffer limits); never assume these, read them.
//
// # Compiler statistics
//
// Options.PipelineStatistics enables VK_KHR_pipeline_executable_properties
// (its pipelineExecutableInfo feature) where the device has it
// (Info.PipelineStatistics: from Devices, supported; for an open Device,
// enabled). Every pipeline is then created with
// VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR, and Pipeline.Statistics
// (or Executables, one entry per executable the driver compiled the
// pipeline into: one for compute on most drivers) returns what the
// driver's compiler reports — register count, spills, shared memory and
// the like, named by the driver — each value a bool, int64, uint64 or
// float64. It is off by default, as capturing can slow pipeline creation;
// without it, or on a device without the extension (lavapipe up to Mesa
// 26), Statistics fails with an error wrapping ErrUnsupported that says
// which.
//
// # Large buffers and device addresses
//
// One storage-buffer binding covers at most Info.MaxStorageBufferRange
// bytes (a 32-bit limit; 128 MiB on lavapipe): Dispatch binds each buffer
// with a descriptor of min(size, MaxStorageBufferRange) bytes. On a device
// with Info.BufferDeviceAddress, device-local Buffers are also created for
// shader device addresses: Buffer.Address is a 64-bit address that a
// shader reads through GL_EXT_buffer_reference, passed in push constants,
// reaching every byte of the buffer. On such a device NewBuffer accepts
// buffers up to MaxBufferSize (maintenance4), trying sizes beyond
// MaxAllocation (a limit some drivers allocate past; a refusal fails with
// ErrOutOfMemory), and only pipelines created with PipelineDesc.Addressed
// may bind buffers larger than MaxStorageBufferRange (they read those by
// address; Dispatch refuses such a buffer for any other pipeline with
// ErrTooLarge). Where MaxBufferSize is unknown, MaxAllocation is the
// limit. Without buffer device addresses, NewBuffer refuses buffers larger
// than MaxStorageBufferRange, Buffer.Address is 0 and NewPipeline refuses
// Addressed pipelines with ErrUnsupported.
package device
