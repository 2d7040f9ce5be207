package attention

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func testDeviceKey() DeviceKey {
	return DeviceKey{Name: "synthetic H200", VendorID: 0x10de, DeviceID: 0x2335, Driver: "NVIDIA 580.65.06", DriverVersion: "580.65.6",
		PipelineCacheUUID: "00112233445566778899aabbccddeeff"}
}

func testEntry(dev DeviceKey, fam string, d int, causal bool, n int, cand string) TuneEntry {
	return TuneEntry{Device: dev, Key: TuneKey{Family: fam, Dir: "fwd", DType: "f32", D: d, DV: d, Causal: causal},
		N: n, Candidate: cand, Default: "wg64-br64-bc16", MedianMS: 1, DefaultMS: 1.5}
}

// TestTuneCachePutForDevice: entries apply only to their device and
// driver; Put replaces an entry of the same device, key and N.
func TestTuneCachePutForDevice(t *testing.T) {
	dev := testDeviceKey()
	other := dev
	other.DriverVersion = "590.1.0"
	otherUUID := dev
	otherUUID.PipelineCacheUUID = "ff112233445566778899aabbccddeeff"
	c := &TuneCache{}
	c.Put(testEntry(dev, "flash", 64, false, 512, "wg64-br32-bc32"))
	c.Put(testEntry(dev, "flash", 64, false, 4096, "wg128-br64-bc16"))
	c.Put(testEntry(dev, "flash", 64, true, 2048, "wg32-br16-bc16"))
	c.Put(testEntry(other, "flash", 64, false, 2048, "wg256-br64-bc64"))
	c.Put(testEntry(otherUUID, "flash", 64, false, 2048, "wg256-br64-bc64"))
	c.Put(testEntry(dev, "flash", 64, false, 512, "wg64-br16-bc32")) // replaces the first
	if len(c.Entries) != 5 {
		t.Fatalf("%d entries after Put, want 5 (same device, key and N replaces)", len(c.Entries))
	}
	es := c.ForDevice(dev)
	if len(es) != 3 || es[0].Candidate != "wg64-br16-bc32" {
		t.Fatalf("ForDevice: %+v, want 3 (driver version and pipeline cache UUID must match)", es)
	}
}

func TestTuneCacheRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", TuneCacheName) // directories are created
	c := &TuneCache{Tool: "test"}
	c.Put(testEntry(testDeviceKey(), "flash", 64, false, 2048, "wg64-br16-bc32"))
	e := testEntry(testDeviceKey(), "flash_cm", 128, true, 2048, "nsg8-bc64-mode1-pf1")
	e.Key.DType = "f16"
	c.Put(e)
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := LoadTuneCache(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != TuneCacheVersion || !reflect.DeepEqual(got.Entries, c.Entries) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, c)
	}
	if sp := got.Entries[0].Speedup(); sp != 1.5 {
		t.Errorf("Speedup = %v", sp)
	}
	// Missing file: empty, no error.
	if c, err := LoadTuneCache(filepath.Join(t.TempDir(), "none.json")); err != nil || len(c.Entries) != 0 {
		t.Errorf("missing file: %v, %v", c, err)
	}
}

func TestTuneCacheVersionAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"other version": `{"version": 2, "entries": [{"candidate": "x"}]}`,
		"no version":    `{"entries": []}`,
		"corrupt":       `{"version": 1, "entries": [`,
		"garbage":       "\x00\x01not json",
		"wrong types":   `{"version": 1, "entries": {"a": 1}}`,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadTuneCache(path)
		if !errors.Is(err, ErrTuneCache) {
			t.Errorf("%s: err %v, want ErrTuneCache", name, err)
		}
		if c == nil || len(c.Entries) != 0 || c.Version != TuneCacheVersion {
			t.Errorf("%s: cache %+v, want an empty one", name, c)
		}
	}
	// Malformed entries are dropped, the rest kept.
	path := filepath.Join(dir, "partial.json")
	os.WriteFile(path, []byte(`{"version": 1, "entries": [{"key": {"family": "flash", "d": 64, "dv": 64}, "n": 2048, "candidate": "wg64-br16-bc32"}, {"n": 0}]}`), 0o644)
	if c, err := LoadTuneCache(path); err != nil || len(c.Entries) != 1 {
		t.Errorf("partial: %+v, %v", c, err)
	}
	// So are entries that do not decode at all (not an object, a field of
	// the wrong type): the others survive.
	os.WriteFile(path, []byte(`{"version": 1, "entries": [7, {"key": {"family": "flash", "d": 64, "dv": 64}, "n": 2048, "candidate": "wg64-br16-bc32"}, {"n": "x"}, "s"]}`), 0o644)
	if c, err := LoadTuneCache(path); err != nil || len(c.Entries) != 1 || c.Entries[0].Candidate != "wg64-br16-bc32" {
		t.Errorf("undecodable entries: %+v, %v", c, err)
	}
}

func TestTuneCacheAtomicSave(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, TuneCacheName)
	c := &TuneCache{}
	for i := range 50 {
		c.Put(testEntry(testDeviceKey(), "flash", 64, false, 1<<i%20+i, "wg64-br16-bc32"))
		if err := c.Save(path); err != nil {
			t.Fatal(err)
		}
		got, err := LoadTuneCache(path)
		if err != nil || len(got.Entries) != len(c.Entries) {
			t.Fatalf("save %d: %d entries, %v", i, len(got.Entries), err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v: temporary files left behind", names)
	}
	// A failed save (the target is a directory) leaves no temporary file
	// and does not touch what is there.
	bad := filepath.Join(dir, "isdir")
	if err := os.Mkdir(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(bad); !errors.Is(err, ErrTuneCache) {
		t.Errorf("save onto a directory: %v", err)
	}
	ents, _ = os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("after a failed save: %d entries in the directory, want 2", len(ents))
	}
	if _, err := LoadTuneCache(path); err != nil {
		t.Errorf("the good file was damaged: %v", err)
	}
}

// TestConfigWithEnv: the environment fills only the fields left zero.
func TestConfigWithEnv(t *testing.T) {
	env := map[string]string{"FLASHVK_BACKEND": "vulkan", "FLASHVK_DEVICE": "lavapipe", "FLASHVK_TUNE_CACHE": "/x.json",
		"FLASHVK_VULKAN_LIBRARY": "/lib/v.so", "FLASHVK_PIPELINE_CACHE_DIR": "off", "FLASHVK_SPIN_WAIT": "50us", "FLASHVK_ADDRESSING": "Bindings"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := Config{}.withEnv(lookup)
	if err != nil || c.Backend != Vulkan || c.Device != "lavapipe" || c.TuneCache != "/x.json" || c.VulkanLibrary != "/lib/v.so" ||
		c.PipelineCacheDir != "off" || c.SpinWait.Microseconds() != 50 || c.Addressing != "bindings" {
		t.Errorf("from the environment: %+v, %v", c, err)
	}
	// An explicit CPU engine takes neither the device nor the addressing
	// (which would refuse it: the CPU backend has none).
	c, err = Config{Backend: CPU, TuneCache: "mine.json", SpinWait: 3}.withEnv(lookup)
	if err != nil || c.Backend != CPU || c.Device != "" || c.Addressing != "" || c.TuneCache != "mine.json" || c.SpinWait != 3 {
		t.Errorf("explicit fields overridden: %+v, %v", c, err)
	}
	env["FLASHVK_TUNE"] = "off"
	if c, _ := (Config{}).withEnv(lookup); c.TuneCache != TuneOff {
		t.Errorf("FLASHVK_TUNE=off: TuneCache %q", c.TuneCache)
	}
	env["FLASHVK_SPIN_WAIT"] = "soon"
	if _, err := (Config{}).withEnv(lookup); !errors.Is(err, ErrOption) {
		t.Errorf("FLASHVK_SPIN_WAIT=soon: %v", err)
	}
}
