//go:build cgo

// Package pipeline turns SPIR-V into cached compute pipelines for a
// device.Device. It is pure Go on top of package device (so it too builds
// with cgo only).
//
// A Cache builds each distinct Key (SPIR-V, entry point, specialization
// constants, push-constant size, bindings, subgroup requirements) once,
// singleflight-style: concurrent Gets of the same key wait for one build.
// SPIR-V is identified by its SHA-256, computed once per backing array.
// The driver's VkPipelineCache is saved on Close to
// CacheDir/<vendor>-<device>-<driver version>-<cache UUID>.vkpc (default
// CacheDir: os.UserCacheDir()/flashvk/pipelines) and merged into the device's cache by New;
// the file carries a magic, a format version, a length and a CRC, and the
// Vulkan header inside is checked against the device, so blobs from another
// GPU or driver are ignored.
//
//	c, err := pipeline.New(dev, pipeline.Options{})
//	defer c.Close()
//	p, err := c.Get(pipeline.Key{Name: "vadd", SPIRV: vaddSPV,
//		Spec: []device.Spec{pipeline.SpecU32(0, 256)}, PushSize: 8, Bindings: 3})
//	push := pipeline.MustPush(struct{ N uint32; Bias float32 }{n, 0.5})
//	groups, err := pipeline.Grid(dev.Info(), n, 256)
//	rec.Dispatch(p, push, groups, a, b, out)
//
// Helpers: SpecU32/SpecI32/SpecF32/SpecBool build specialization
// constants; Push encodes push-constant structs (little endian, checked for
// size and alignment); Groups, Grid and CheckGroups compute and check
// workgroup counts against the device limits.
package pipeline
