package attention

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// lockPoll is how often LockTuneCache retries a lock another process holds.
const lockPoll = 10 * time.Millisecond

// LockTuneCache takes an exclusive lock for a read-modify-write of the tune
// cache file at path: callers that lock before LoadTuneCache and unlock
// after the file is written — `flashvk tune` does, one per GPU of a host
// may run at once — keep each other's entries, where two unlocked ones
// would each write back what they read and lose the other's. The lock is
// advisory, on the file path + ".lock" (path's target when it is a
// symbolic link; created, with its directory, when missing; never
// removed), and the operating system drops it if the process dies. It
// waits for the lock until ctx is done and then returns ctx's
// error (at once when ctx is done already, even if the lock is free).
// unlock is safe to call more than once. Systems without flock or
// LockFileEx get an error wrapping errors.ErrUnsupported.
func LockTuneCache(ctx context.Context, path string) (unlock func(), err error) {
	if t, err := filepath.EvalSymlinks(path); err == nil {
		path = t // (one lock for every link to the file)
	}
	name := path + ".lock"
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return nil, fmt.Errorf("%w: locking %s: %w", ErrTuneCache, path, err)
	}
	// Read-only: a lock file another user made still opens (flock and
	// LockFileEx take any handle).
	f, err := os.OpenFile(name, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: locking %s: %w", ErrTuneCache, path, err)
	}
	for {
		held, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: locking %s: %w", ErrTuneCache, path, err)
		}
		if held {
			var once sync.Once
			return func() {
				once.Do(func() {
					unlockFile(f)
					f.Close()
				})
			}, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}
