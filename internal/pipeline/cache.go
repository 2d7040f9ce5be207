//go:build cgo

package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/flashvk/flashvk/internal/device"
)

// Options configure a Cache.
type Options struct {
	// CacheDir is where the VkPipelineCache blob is persisted. Empty means
	// os.UserCacheDir()/flashvk/pipelines.
	CacheDir string
	// NoDiskCache disables loading and saving the blob.
	NoDiskCache bool
}

// Key identifies a pipeline. Two Gets with equal keys return the same
// *device.Pipeline. Name is only a label (the first Get's Name is used).
type Key struct {
	Name          string
	SPIRV         []byte // must not be modified after the first Get with it
	Entry         string // "" means "main"
	Spec          []device.Spec
	PushSize      uint32
	Bindings      int
	SubgroupSize  uint32 // required subgroup size, 0 = driver's choice
	FullSubgroups bool
	// Addressed: the shader reads operands through buffer device
	// addresses (device.PipelineDesc.Addressed).
	Addressed bool
}

// mapKey is the comparable form of Key.
type mapKey struct {
	spirv         [32]byte // sha256
	entry         string
	spec          string // little-endian (id, value) pairs in order
	push          uint32
	bindings      int
	subgroup      uint32
	fullSubgroups bool
	addressed     bool
}

type entry struct {
	ready chan struct{}
	p     *device.Pipeline
	err   error
}

// spirvRef remembers the digest of a SPIR-V slice by its backing array.
type spirvRef struct {
	ptr uintptr
	n   int
}

type spirvDigest struct {
	code   []byte // keeps the backing array alive, so ptr stays unique
	digest [32]byte
}

// Stats are cache counters.
type Stats struct {
	Pipelines   int           // pipelines built and alive
	Hits        int64         // Gets served from the cache (including waits on an in-flight build)
	Misses      int64         // Gets that built a pipeline
	CompileTime time.Duration // total time spent in vkCreateComputePipelines
	LoadedBytes int           // size of the blob loaded from disk (0: none)
	File        string        // blob file ("" when the disk cache is off)
}

// Cache builds and owns the compute pipelines of one device, building each
// distinct Key once (concurrent Gets of a key being built wait for it), and
// persists the driver's VkPipelineCache across runs. It is safe for
// concurrent use.
type Cache struct {
	dev  *device.Device
	file string

	mu      sync.Mutex
	entries map[mapKey]*entry
	digests map[spirvRef]spirvDigest
	closed  bool
	stats   Stats

	closeOnce sync.Once
	closeErr  error
}

// ErrClosed is returned by Get after Close.
var ErrClosed = fmt.Errorf("pipeline: cache closed: %w", device.ErrClosed)

// New creates a pipeline cache for dev and merges the blob saved by an
// earlier run on the same device and driver. A missing, corrupt or foreign
// blob is ignored.
func New(dev *device.Device, opts Options) (*Cache, error) {
	if dev == nil {
		return nil, fmt.Errorf("pipeline: %w: nil device", device.ErrInvalid)
	}
	c := &Cache{dev: dev, entries: map[mapKey]*entry{}, digests: map[spirvRef]spirvDigest{}}
	if opts.NoDiskCache {
		return c, nil
	}
	dir := opts.CacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return c, nil // no cache directory: run without the disk cache
		}
		dir = filepath.Join(base, "flashvk", "pipelines")
	}
	c.file = filepath.Join(dir, blobName(dev.Info()))
	c.stats.File = c.file
	if blob, err := readBlob(c.file); err == nil && dev.PipelineCacheCompatible(blob) {
		if dev.MergePipelineCache(blob) == nil {
			c.stats.LoadedBytes = len(blob)
		}
	}
	return c, nil
}

// Device returns the cache's device.
func (c *Cache) Device() *device.Device { return c.dev }

// File is the path of the persisted blob ("" when the disk cache is off).
func (c *Cache) File() string { return c.file }

// Get returns the pipeline for k, building it on first use.
func (c *Cache) Get(k Key) (*device.Pipeline, error) {
	if len(k.SPIRV) == 0 {
		return nil, fmt.Errorf("pipeline %s: %w: empty SPIR-V", k.Name, device.ErrInvalid)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	mk := c.keyLocked(k)
	if e, ok := c.entries[mk]; ok {
		c.stats.Hits++
		c.mu.Unlock()
		<-e.ready
		return e.p, e.err
	}
	e := &entry{ready: make(chan struct{})}
	c.entries[mk] = e
	c.stats.Misses++
	c.mu.Unlock()

	start := time.Now()
	e.p, e.err = c.dev.NewPipeline(device.PipelineDesc{
		Name:                 k.Name,
		SPIRV:                k.SPIRV,
		Entry:                k.Entry,
		Spec:                 k.Spec,
		PushSize:             k.PushSize,
		Bindings:             k.Bindings,
		RequiredSubgroupSize: k.SubgroupSize,
		FullSubgroups:        k.FullSubgroups,
		Addressed:            k.Addressed,
	})
	took := time.Since(start)

	c.mu.Lock()
	c.stats.CompileTime += took
	if e.err != nil {
		delete(c.entries, mk) // let a later Get retry (e.g. after out-of-memory)
	} else if c.closed {
		// Close ran while we were building: it could not see this pipeline.
		_ = e.p.Close()
		e.p, e.err = nil, ErrClosed
	}
	c.mu.Unlock()
	close(e.ready)
	return e.p, e.err
}

func (c *Cache) keyLocked(k Key) mapKey {
	ref := spirvRef{reflect.ValueOf(k.SPIRV).Pointer(), len(k.SPIRV)}
	d, ok := c.digests[ref]
	// bytes.Equal is O(1) for the same backing array; it guards against a
	// caller reusing a buffer for different code.
	if !ok || !bytes.Equal(d.code, k.SPIRV) {
		d = spirvDigest{code: k.SPIRV, digest: sha256.Sum256(k.SPIRV)}
		c.digests[ref] = d
	}
	entry := k.Entry
	if entry == "" {
		entry = "main"
	}
	spec := make([]byte, 0, 8*len(k.Spec))
	for _, s := range k.Spec {
		spec = binary.LittleEndian.AppendUint32(spec, s.ID)
		spec = binary.LittleEndian.AppendUint32(spec, s.Value)
	}
	return mapKey{spirv: d.digest, entry: entry, spec: string(spec), push: k.PushSize,
		bindings: k.Bindings, subgroup: k.SubgroupSize, fullSubgroups: k.FullSubgroups, addressed: k.Addressed}
}

// Stats returns cache counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	for _, e := range c.entries {
		select {
		case <-e.ready:
			if e.err == nil && e.p != nil {
				s.Pipelines++
			}
		default:
		}
	}
	return s
}

// Close destroys every pipeline built by the cache and saves the
// VkPipelineCache blob (unless disabled). Safe to call more than once; the
// device must still be open for the blob to be saved.
func (c *Cache) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		var pending []*entry
		for _, e := range c.entries {
			pending = append(pending, e)
		}
		c.entries = nil
		c.digests = nil
		c.mu.Unlock()
		for _, e := range pending {
			select {
			case <-e.ready:
				if e.p != nil {
					_ = e.p.Close()
				}
			default:
				// Still building: Get sees closed and destroys it.
			}
		}
		if c.file == "" {
			return
		}
		blob, err := c.dev.PipelineCacheData()
		if err != nil {
			if !errors.Is(err, device.ErrClosed) {
				c.closeErr = fmt.Errorf("pipeline: saving cache: %w", err)
			}
			return
		}
		if len(blob) == 0 {
			return
		}
		if err := writeBlob(c.file, blob); err != nil {
			c.closeErr = fmt.Errorf("pipeline: saving cache: %w", err)
		}
	})
	return c.closeErr
}

// ---- Blob files ----------------------------------------------------------------

// blobName names the blob by vendor, device, driver version and the
// driver's pipeline-cache UUID, so drivers never see each other's blobs.
func blobName(inf device.Info) string {
	drv := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, inf.DriverVersion)
	return fmt.Sprintf("%04x-%04x-%s-%x.vkpc", inf.VendorID, inf.DeviceID, drv, inf.PipelineCacheUUID[:8])
}

// File format: magic, format version, payload length, CRC-32 (IEEE) of the
// payload, payload (the VkPipelineCache data, which carries its own
// vendor/device/UUID header, checked again before use).
const (
	blobMagic   = "FVKPCACH"
	blobVersion = 1
	blobHeader  = 8 + 4 + 8 + 4
	maxBlob     = 1 << 30
)

func readBlob(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < blobHeader || string(data[:8]) != blobMagic {
		return nil, errors.New("not a flashvk pipeline cache")
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != blobVersion {
		return nil, fmt.Errorf("pipeline cache format %d", v)
	}
	n := binary.LittleEndian.Uint64(data[12:])
	sum := binary.LittleEndian.Uint32(data[20:])
	payload := data[blobHeader:]
	if n > maxBlob || uint64(len(payload)) != n || crc32.ChecksumIEEE(payload) != sum {
		return nil, errors.New("truncated or corrupt pipeline cache")
	}
	return payload, nil
}

func writeBlob(path string, blob []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	hdr := make([]byte, blobHeader, blobHeader+len(blob))
	copy(hdr, blobMagic)
	binary.LittleEndian.PutUint32(hdr[8:], blobVersion)
	binary.LittleEndian.PutUint64(hdr[12:], uint64(len(blob)))
	binary.LittleEndian.PutUint32(hdr[20:], crc32.ChecksumIEEE(blob))
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*.vkpc")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(hdr, blob...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path) // atomic: concurrent processes never see a partial file
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
