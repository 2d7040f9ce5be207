package attention

// The tune cache file: tuned configurations per device, driver and key,
// written by Engine.Tune's caller (flashvk tune) and read by Open.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// TuneCacheVersion is the schema version of the tune cache file. A file of
// another version is ignored (with a warning) and replaced by the next
// tune.
const TuneCacheVersion = 1

// TuneCacheName is the cache file's name under os.UserCacheDir()/flashvk.
const TuneCacheName = "tune-v1.json"

// ErrTuneCache: the tune cache file is unreadable, corrupt or of another
// schema version.
var ErrTuneCache = errors.New("tune cache")

// DeviceKey identifies a device and its driver: a tuned configuration
// applies only where every field matches.
type DeviceKey struct {
	Name              string `json:"name"`
	VendorID          uint32 `json:"vendor_id"`
	DeviceID          uint32 `json:"device_id"`
	Driver            string `json:"driver"`
	DriverVersion     string `json:"driver_version"`
	PipelineCacheUUID string `json:"pipeline_cache_uuid,omitempty"`
}

// TuneEntry is one tuned choice: on Device, for Key, at sequence length N
// (B·H as the tuner's representative problem), Candidate was the fastest
// verified configuration.
type TuneEntry struct {
	Device DeviceKey `json:"device"`
	Key    TuneKey   `json:"key"`
	// N is the sequence length (Nq = Nk) tuned at; B and H the batch and
	// heads of that problem.
	N int `json:"n"`
	B int `json:"b,omitempty"`
	H int `json:"h,omitempty"`
	// Candidate is the chosen configuration, as the stage spells it.
	Candidate string `json:"candidate"`
	// Default is the configuration used without tuning when the entry
	// was made. An entry whose Candidate is its Default (nothing faster
	// was found) gives way to the current default rule where that has
	// changed since (a newer flashvk with newer measurements).
	Default string `json:"default,omitempty"`
	// MedianMS and DefaultMS are the measured medians of the pass (all of
	// its kernels) with Candidate and with Default.
	MedianMS  float64 `json:"median_ms"`
	DefaultMS float64 `json:"default_ms,omitempty"`
	TFLOPS    float64 `json:"tflops,omitempty"`
	// Date is when it was tuned (RFC 3339, UTC).
	Date string `json:"date,omitempty"`
}

// Speedup is DefaultMS / MedianMS (0 when unknown).
func (e TuneEntry) Speedup() float64 {
	if e.MedianMS <= 0 || e.DefaultMS <= 0 {
		return 0
	}
	return e.DefaultMS / e.MedianMS
}

// TuneCache is the tune cache file's content.
type TuneCache struct {
	Version int         `json:"version"`
	Tool    string      `json:"tool,omitempty"`
	Entries []TuneEntry `json:"entries"`
}

// DefaultTuneCachePath is the tune cache file used when
// Config.TuneCache and FLASHVK_TUNE_CACHE are empty:
// os.UserCacheDir()/flashvk/tune-v1.json.
func DefaultTuneCachePath() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("attention: tune cache: %w", err)
	}
	return filepath.Join(base, "flashvk", TuneCacheName), nil
}

// LoadTuneCache reads a tune cache file. A missing file is an empty cache
// (no error); an unreadable or corrupt file, or one of another schema
// version, returns an empty cache and an error wrapping ErrTuneCache (the
// caller warns and goes on: a bad cache is never fatal).
func LoadTuneCache(path string) (*TuneCache, error) {
	empty := &TuneCache{Version: TuneCacheVersion}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, fmt.Errorf("%w: %w", ErrTuneCache, err)
	}
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return empty, fmt.Errorf("%w: %s: corrupt: %w", ErrTuneCache, path, err)
	}
	if probe.Version == nil {
		return empty, fmt.Errorf("%w: %s: no schema version", ErrTuneCache, path)
	}
	if *probe.Version != TuneCacheVersion {
		return empty, fmt.Errorf("%w: %s: schema version %d, this flashvk reads %d", ErrTuneCache, path, *probe.Version, TuneCacheVersion)
	}
	// The entries one by one: a malformed entry (not an object, a field of
	// the wrong type, a missing field) is dropped, not the whole file with
	// every other device's results.
	var raw struct {
		Tool    string            `json:"tool"`
		Entries []json.RawMessage `json:"entries"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return empty, fmt.Errorf("%w: %s: corrupt: %w", ErrTuneCache, path, err)
	}
	c := TuneCache{Version: TuneCacheVersion, Tool: raw.Tool, Entries: []TuneEntry{}}
	for _, m := range raw.Entries {
		var e TuneEntry
		if json.Unmarshal(m, &e) != nil || e.Candidate == "" || e.N < 1 || e.Key.Family == "" || e.Key.D < 1 || e.Key.DV < 1 {
			continue
		}
		c.Entries = append(c.Entries, e)
	}
	return &c, nil
}

// Save writes the cache to path atomically: into a temporary file in the
// same directory, synced, then renamed over path (readers see the old or
// the new file, never a partial one).
func (c *TuneCache) Save(path string) error {
	c.Version = TuneCacheVersion
	if c.Entries == nil {
		c.Entries = []TuneEntry{}
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTuneCache, err)
	}
	data = append(data, '\n')
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrTuneCache, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTuneCache, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("%w: writing %s: %w", ErrTuneCache, path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%w: writing %s: %w", ErrTuneCache, path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%w: writing %s: %w", ErrTuneCache, path, err)
	}
	return nil
}

// Put adds e, replacing an entry of the same device, key and N.
func (c *TuneCache) Put(e TuneEntry) {
	for i := range c.Entries {
		o := &c.Entries[i]
		if o.Device == e.Device && o.Key == e.Key && o.N == e.N {
			*o = e
			return
		}
	}
	c.Entries = append(c.Entries, e)
}

// ForDevice returns the entries of device k.
func (c *TuneCache) ForDevice(k DeviceKey) []TuneEntry {
	var out []TuneEntry
	for _, e := range c.Entries {
		if e.Device == k {
			out = append(out, e)
		}
	}
	return out
}

// TuneCacheFile is the tune cache file Open reads for cfg, the
// environment applied (FLASHVK_TUNE_CACHE, FLASHVK_TUNE=off): "" when
// tuning is off.
func TuneCacheFile(cfg Config) (string, error) {
	cfg, err := cfg.withEnv(os.LookupEnv)
	if err != nil {
		return "", err
	}
	return tuneCacheFile(cfg)
}

// tuneCacheFile resolves Config.TuneCache (the environment applied): ""
// when tuning is off, else the file to read.
func tuneCacheFile(cfg Config) (string, error) {
	switch cfg.TuneCache {
	case TuneOff:
		return "", nil
	case "":
		return DefaultTuneCachePath()
	}
	return cfg.TuneCache, nil
}
