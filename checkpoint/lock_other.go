//go:build !unix

package checkpoint

import "os"

// flock: without flock, local dirs are used without a lock.
func flock(*os.File) error { return ErrLockUnsupported }
