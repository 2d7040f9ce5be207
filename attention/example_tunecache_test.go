package attention_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/flashvk/flashvk/attention"
)

// Adding an entry to a tune cache file that other processes may be
// writing at the same time: read, change and write it under its lock.
func ExampleLockTuneCache() {
	dir, err := os.MkdirTemp("", "flashvk-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, attention.TuneCacheName)

	unlock, err := attention.LockTuneCache(context.Background(), path)
	if err != nil {
		panic(err)
	}
	defer unlock()
	c, err := attention.LoadTuneCache(path) // a missing file is an empty cache
	if err != nil {
		fmt.Println("warning:", err) // a corrupt one too, and it is replaced
	}
	c.Put(attention.TuneEntry{
		Device:    attention.DeviceKey{Name: "example device"},
		Key:       attention.TuneKey{Family: "flash", D: 64, DV: 64},
		N:         4096,
		Candidate: "wg128-br32-bc32",
	})
	if err := c.Save(path); err != nil {
		panic(err)
	}
	fmt.Println(len(c.Entries), "entry")
	// Output: 1 entry
}
