//go:build unix

package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// flock takes an exclusive flock on f without waiting.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return ErrLocked
		case errors.Is(err, syscall.ENOLCK), errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOSYS):
			return fmt.Errorf("%w: %v", ErrLockUnsupported, err)
		}
		return err
	}
}
