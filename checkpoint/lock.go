package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/flexps/flexps/datastore"
)

// LockName is the lock file of a local checkpoint dir. It is never
// removed: a process that holds the lock holds an flock on it, which the
// kernel releases when the process ends however it ends (kill -9
// included), so a lock left by a dead process never blocks; the file only
// names the last holder.
const LockName = ".flexps-lock"

// ErrLocked is wrapped when another process (or another master in this
// one) holds a checkpoint dir's lock.
var ErrLocked = errors.New("in use by another flexps process")

// ErrLockUnsupported is wrapped when the file system of a local dir has no
// flock (some NFS mounts): the dir is used without a lock.
var ErrLockUnsupported = errors.New("the file system does not support locks")

// DirLock is a held lock of a local checkpoint dir: two processes (two
// flexps run, two masters) writing checkpoints into one dir interleave
// their numbering and delete each other's files (keep), so the second is
// refused. Unlock releases it; so does the end of the process.
type DirLock struct {
	mu   sync.Mutex
	f    *os.File
	Path string // the lock file
}

// Unlock releases the lock (a nil or released lock: nothing to do).
func (l *DirLock) Unlock() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close() // closing the only descriptor releases the flock
		l.f = nil
	}
}

// LockDir takes the lock of checkpoint dir, which must exist, without
// waiting: held by anyone else, it fails with an error wrapping ErrLocked
// that names the dir and, as its lock file records it, the holder's pid
// and host. An hdfs:// (any non-local) dir is not locked: nil, nil.
func LockDir(dir string) (*DirLock, error) {
	local, ok := localDir(dir)
	if !ok {
		return nil, nil
	}
	p := filepath.Join(local, LockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("checkpoint dir %s: lock: %w", dir, err)
	}
	if err := flock(f); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, ErrLocked) {
			return nil, fmt.Errorf("checkpoint dir %s: %w (%s) that writes its checkpoints there (lock file %s): wait for it to end or stop it, or give this task another dir", dir, ErrLocked, holder, p)
		}
		return nil, fmt.Errorf("checkpoint dir %s: lock %s: %w", dir, p, err)
	}
	host, _ := os.Hostname()
	// Who holds it, for the error of the next one to try.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(fmt.Sprintf("pid %d on host %s\n", os.Getpid(), host)), 0)
	}
	return &DirLock{f: f, Path: p}, nil
}

// CheckFree reports whether checkpoint dir is free to write into, taking
// its lock and releasing it at once: flexps run checks so before starting
// a cluster. A dir that does not exist yet, a non-local one, or one whose
// file system has no locks, is free.
func CheckFree(dir string) error {
	local, ok := localDir(dir)
	if !ok || dir == "" {
		return nil
	}
	if fi, err := os.Stat(local); errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.IsDir()) {
		return nil // the master says what is wrong with it
	}
	l, err := LockDir(dir)
	if errors.Is(err, ErrLockUnsupported) {
		return nil
	}
	l.Unlock()
	return err
}

// readHolder is what the lock file says of the process holding it.
func readHolder(f *os.File) string {
	b, _ := io.ReadAll(io.NewSectionReader(f, 0, 256))
	if s := strings.TrimSpace(string(b)); strings.HasPrefix(s, "pid ") {
		return s
	}
	return "pid unknown"
}

// localDir is the local path of dir, and false for a dir of another
// scheme (hdfs://).
func localDir(dir string) (string, bool) {
	switch datastore.Scheme(dir) {
	case "":
		return dir, true
	case "file":
		return dir[len("file://"):], true
	}
	return "", false
}

// RemoveStaleTemps removes the temporary checkpoint files (".ckpt-....tmp*")
// a writer that died left in local dir (a master killed while it wrote a
// checkpoint), and returns their paths. The caller holds the dir's lock:
// nothing else writes there.
func RemoveStaleTemps(dir string) ([]string, error) {
	return datastore.RemoveStaleTempsOf(dir, pattern)
}
