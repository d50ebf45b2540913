package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A local checkpoint dir is locked by one process at a time: a second
// taker (another flexps run or master; here another descriptor, which
// flock treats alike) is refused with an error naming the dir and the
// holder's pid, until the lock is released. Before, nothing was detected
// and the two overwrote and pruned each other's files. hdfs:// dirs are
// not locked.
func TestLockDirRefusesASecondTaker(t *testing.T) {
	pid := fmt.Sprintf("pid %d on host", os.Getpid())
	for _, tc := range []struct {
		name       string
		holder     func(dir string) string // the dir the first taker names ("": none)
		taker      func(dir string) string // the dir the second names
		wantLocked bool
	}{
		{"a free dir", nil, func(d string) string { return d }, false},
		{"held", func(d string) string { return d }, func(d string) string { return d }, true},
		{"held, named with a trailing slash", func(d string) string { return d }, func(d string) string { return d + "/" }, true},
		{"held, named as a file URL", func(d string) string { return d }, func(d string) string { return "file://" + d }, true},
		{"a dir inside a held one", func(d string) string { return d }, func(d string) string { return filepath.Join(d, "in") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "in"), 0o755); err != nil {
				t.Fatal(err)
			}
			var held *DirLock
			if tc.holder != nil {
				l, err := LockDir(tc.holder(dir))
				if err != nil {
					t.Fatal(err)
				}
				held = l
				defer l.Unlock()
			}
			d := tc.taker(dir)
			l, err := LockDir(d)
			if !tc.wantLocked {
				if err != nil {
					t.Fatal(err)
				}
				b, rerr := os.ReadFile(l.Path)
				if rerr != nil || !strings.HasPrefix(string(b), pid) {
					t.Fatalf("lock file %s says %q (%v), want %q", l.Path, b, rerr, pid)
				}
				l.Unlock()
				l.Unlock() // twice: nothing
				return
			}
			if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), d) || !strings.Contains(err.Error(), pid) {
				t.Fatalf("LockDir(%s): %v, want ErrLocked naming the dir and %q", d, err, pid)
			}
			if err := CheckFree(d); !errors.Is(err, ErrLocked) {
				t.Fatalf("CheckFree(%s): %v, want ErrLocked", d, err)
			}
			held.Unlock()
			l, err = LockDir(d)
			if err != nil {
				t.Fatalf("after the holder released it: %v", err)
			}
			l.Unlock()
		})
	}
}

// Dirs that are not local, and local ones that do not exist yet, are
// free for CheckFree (the master creates, and then locks, the latter).
func TestCheckFreeOfDirsWithoutALock(t *testing.T) {
	for _, dir := range []string{"", "hdfs://nn:9000/ck", filepath.Join(t.TempDir(), "not-yet")} {
		if err := CheckFree(dir); err != nil {
			t.Errorf("CheckFree(%q): %v", dir, err)
		}
	}
	if l, err := LockDir("hdfs://nn:9000/ck"); l != nil || err != nil {
		t.Fatalf("LockDir of an hdfs dir: %v, %v; want no lock", l, err)
	}
}

// The lock of a process killed with SIGKILL does not outlive it: the
// kernel releases the flock, and the stale lock file blocks nobody.
func TestLockOfAKilledProcessIsFree(t *testing.T) {
	if dir := os.Getenv("FLEXPS_TEST_LOCK_DIR"); dir != "" {
		if _, err := LockDir(dir); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("locked")
		select {} // until killed
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockOfAKilledProcessIsFree$")
	cmd.Env = append(os.Environ(), "FLEXPS_TEST_LOCK_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child said %q", line)
	}
	_, err = LockDir(dir)
	if want := fmt.Sprintf("pid %d", cmd.Process.Pid); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), want) {
		t.Errorf("while the child holds it: %v, want ErrLocked naming %s", err, want)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := LockDir(dir)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	l.Unlock()
}
