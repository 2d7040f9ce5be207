//go:build !unix && !windows

package attention

import (
	"errors"
	"os"
)

// tryLock: this platform has no file locks that flashvk uses, so the tune
// cache cannot be updated safely there (LockTuneCache fails).
func tryLock(*os.File) (bool, error) { return false, errors.ErrUnsupported }

func unlockFile(*os.File) {}
