package attention

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestLockTuneCacheConcurrentWriters: writers that each lock, load, add
// their entry, save and unlock keep every other writer's entry (each
// opens its own lock file, as separate processes would).
func TestLockTuneCacheConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", TuneCacheName)
	const writers = 16
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := LockTuneCache(ctx, path)
			if err != nil {
				errs <- err
				return
			}
			defer unlock()
			c, err := LoadTuneCache(path)
			if err != nil {
				errs <- err
				return
			}
			time.Sleep(time.Millisecond) // (a window for an unlocked writer to lose an entry)
			c.Put(TuneEntry{Key: TuneKey{Family: "flash_cm", D: 64, DV: 64}, N: 1000 + i, Candidate: fmt.Sprintf("c%d", i)})
			errs <- c.Save(path)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c, err := LoadTuneCache(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Entries) != writers {
		t.Fatalf("%d entries after %d locked writers, want %d", len(c.Entries), writers, writers)
	}
}

// TestLockTuneCacheWaits: a second lock waits for the first, and gives up
// with ctx's error; unlock is safe twice and frees it.
func TestLockTuneCacheWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), TuneCacheName)
	unlock, err := LockTuneCache(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := LockTuneCache(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while the first is held: %v, want %v", err, context.DeadlineExceeded)
	}
	unlock()
	unlock()
	u2, err := LockTuneCache(context.Background(), path)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	u2()
}

// TestLockTuneCacheBadDir: a path whose directory cannot be made fails
// with ErrTuneCache.
func TestLockTuneCacheBadDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := (&TuneCache{}).Save(file); err != nil {
		t.Fatal(err)
	}
	if _, err := LockTuneCache(context.Background(), filepath.Join(file, TuneCacheName)); !errors.Is(err, ErrTuneCache) {
		t.Fatalf("lock under a file: %v, want ErrTuneCache", err)
	}
}

// TestLockTuneCacheLink: a symbolic link to the cache file takes the
// file's lock, not one of its own.
func TestLockTuneCacheLink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, TuneCacheName)
	if err := (&TuneCache{}).Save(path); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(path, link); err != nil {
		t.Skip("no symbolic links:", err)
	}
	unlock, err := LockTuneCache(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := LockTuneCache(ctx, link); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock through a link while the file's is held: %v, want %v", err, context.DeadlineExceeded)
	}
}

// TestLockTuneCacheDone: a context already done gets its error, not the
// lock, even when the lock is free.
func TestLockTuneCacheDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := LockTuneCache(ctx, filepath.Join(t.TempDir(), TuneCacheName)); !errors.Is(err, context.Canceled) {
		t.Fatalf("lock with a cancelled context: %v, want %v", err, context.Canceled)
	}
}
