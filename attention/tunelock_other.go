//go:build !windows && (!unix || solaris || aix)

package attention

import (
	"errors"
	"os"
)

// tryLock: flashvk has no file lock for this system (flock, LockFileEx),
// so the tune cache cannot be updated safely there (LockTuneCache fails
// with errors.ErrUnsupported).
func tryLock(*os.File) (bool, error) { return false, errors.ErrUnsupported }

func unlockFile(*os.File) {}
