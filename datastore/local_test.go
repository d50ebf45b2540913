package datastore

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLocalSourceBlocks(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "b.txt", strings.Repeat("x", 25))
	writeFile(t, dir, "a.txt", strings.Repeat("y", 10))
	writeFile(t, dir, "c.gz", strings.Repeat("z", 30)) // content does not matter to Blocks
	writeFile(t, dir, "empty.txt", "")
	writeFile(t, dir, ".hidden", "h")
	writeFile(t, dir, "_SUCCESS", "s")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub"), "d.txt", "nested")
	host, _ := os.Hostname()
	s := NewLocalSource()
	ctx := context.Background()

	type blk struct {
		name      string
		off, size int64
		whole     bool
	}
	tests := []struct {
		name    string
		pattern string
		bs      int64
		want    []blk
	}{
		{"dir", dir, 10, []blk{{"a.txt", 0, 10, false}, {"b.txt", 0, 10, false}, {"b.txt", 10, 10, false}, {"b.txt", 20, 5, false}, {"c.gz", 0, 30, true}}},
		{"file scheme dir", "file://" + dir, 100, []blk{{"a.txt", 0, 10, false}, {"b.txt", 0, 25, false}, {"c.gz", 0, 30, true}}},
		{"file", filepath.Join(dir, "b.txt"), 0, []blk{{"b.txt", 0, 25, false}}},
		{"glob", filepath.Join(dir, "*.txt"), 12, []blk{{"a.txt", 0, 10, false}, {"b.txt", 0, 12, false}, {"b.txt", 12, 12, false}, {"b.txt", 24, 1, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bs, err := s.Blocks(ctx, tt.pattern, tt.bs)
			if err != nil {
				t.Fatal(err)
			}
			var got []blk
			for _, b := range bs {
				got = append(got, blk{filepath.Base(b.Path), b.Offset, b.Length, b.Whole})
				if len(b.Hosts) != 1 || b.Hosts[0] != host {
					t.Errorf("hosts %v, want [%s]", b.Hosts, host)
				}
				if st, _ := os.Stat(b.Path); st.Size() != b.FileSize {
					t.Errorf("FileSize %d, want %d", b.FileSize, st.Size())
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestLocalSourceErrors(t *testing.T) {
	dir := t.TempDir()
	empty := writeFile(t, dir, "empty.txt", "")
	s := &LocalSource{}
	ctx := context.Background()
	// Partitions (dt=.../part-0): a directory input does not read them,
	// and says how to (it said only "holds no data files").
	parts := filepath.Join(dir, "parts")
	onlyHidden := filepath.Join(dir, "hidden")
	for _, d := range []string{"dt=1", "dt=2", "_temporary"} {
		if err := os.MkdirAll(filepath.Join(parts, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(onlyHidden, "_temporary"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(parts, "dt=1"), "part-0", "1 1:1\n")
	writeFile(t, filepath.Join(parts, "dt=2"), "part-0", "1 1:1\n")
	writeFile(t, filepath.Join(parts, "_temporary"), "part-0", "1 1:1\n")
	writeFile(t, filepath.Join(onlyHidden, "_temporary"), "part-0", "1 1:1\n")
	tests := []struct {
		name    string
		pattern string
		is      error
		say     string
	}{
		{"missing", filepath.Join(dir, "nope.txt"), fs.ErrNotExist, ""},
		{"glob nothing", filepath.Join(dir, "*.csv"), ErrNoInput, ""},
		{"all empty", empty, ErrNoInput, ""},
		{"all empty glob", filepath.Join(dir, "*.txt"), ErrNoInput, ""},
		{"only subdirectories", parts, ErrNoInput, "holds no data files (only 2 subdirectories, which a directory input does not read: to read their files, give the glob " + parts + "/*/*)"},
		{"only hidden subdirectories", onlyHidden, ErrNoInput, "holds no data files: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Blocks(ctx, tt.pattern, 0)
			if !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.pattern) || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("err %q does not name %q and say %q", err, tt.pattern, tt.say)
			}
		})
	}
	if os.Geteuid() != 0 {
		locked := filepath.Join(dir, "locked")
		if err := os.Mkdir(locked, 0o000); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(locked, 0o755)
		_, err := s.Blocks(ctx, locked, 0)
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), locked) {
			t.Fatalf("permission err = %v", err)
		}
	}
}

func TestLocalSourceOpen(t *testing.T) {
	p := writeFile(t, t.TempDir(), "f.txt", "0123456789")
	s := NewLocalSource()
	rc, err := s.Open(context.Background(), "file://"+p, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if string(b) != "456789" {
		t.Fatalf("read %q", b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Open(ctx, p, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Open: %v", err)
	}
}

// A directory input reads only the files directly in it: SkippedSubdirs
// counts the subdirectories beside them, whose files would be left out
// of training without a word (names starting with '.' or '_' are not
// data, as Blocks skips them). A file, a glob, and a directory of only
// subdirectories (which Blocks refuses itself) count none.
func TestLocalSkippedSubdirs(t *testing.T) {
	dir := t.TempDir()
	mixed := filepath.Join(dir, "mixed")
	writeTree(t, dir, "mixed/top-0", "mixed/sub/part-0", "mixed/sub2/part-0", "mixed/_tmp/x", "mixed/.hidden/x", "flat/a", "flat/b", "only/dt=1/part-0")
	s := &LocalSource{}
	for _, tc := range []struct {
		pattern string
		want    int
	}{
		{mixed, 2},
		{"file://" + mixed, 2},
		{filepath.Join(dir, "flat"), 0},
		{filepath.Join(dir, "only"), 0},
		{filepath.Join(mixed, "top-0"), 0},
		{filepath.Join(mixed, "*"), 0},
		{filepath.Join(dir, "nosuch"), 0},
	} {
		got, err := s.SkippedSubdirs(context.Background(), tc.pattern)
		if err != nil || got != tc.want {
			t.Errorf("SkippedSubdirs(%s) = %d, %v; want %d", tc.pattern, got, err, tc.want)
		}
	}
}

// TestLocalGlobs: a glob expands as an hdfs:// one does
// (TestHDFSDirectoriesAndGlobs): a matched directory stands for the files
// directly in it, and hidden names ('.', '_': _SUCCESS, .crc) are not
// data unless the pattern's last part names them. Until now a local glob
// left matched directories out (dt=*/ read nothing) and read _SUCCESS.
func TestLocalGlobs(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, "glob/a/part-0", "glob/a/part-1", "glob/b/part-0", "glob/a/_SUCCESS", "glob/a/.crc", "glob/_tmp/part-0",
		"parts/dt=1/part-0", "parts/dt=2/part-0", "parts/dt=2/deeper/part-0", "parts/_SUCCESS")
	s := &LocalSource{}
	for _, tc := range []struct {
		pattern string
		want    []string
	}{
		{"glob/a/*", []string{"glob/a/part-0", "glob/a/part-1"}},
		{"glob/a/_*", []string{"glob/a/_SUCCESS"}},
		{"glob/a/.*", []string{"glob/a/.crc"}},
		{"glob/*/part-0", []string{"glob/a/part-0", "glob/b/part-0"}},
		{"glob/[ab]/part-?", []string{"glob/a/part-0", "glob/a/part-1", "glob/b/part-0"}},
		{"glob/*", []string{"glob/a/part-0", "glob/a/part-1", "glob/b/part-0"}},
		{"parts/dt=*", []string{"parts/dt=1/part-0", "parts/dt=2/part-0"}},
		{"parts/*/*", []string{"parts/dt=1/part-0", "parts/dt=2/deeper/part-0", "parts/dt=2/part-0"}},
	} {
		blocks, err := s.Blocks(context.Background(), filepath.Join(dir, tc.pattern), 0)
		if err != nil {
			t.Errorf("%s: %v", tc.pattern, err)
			continue
		}
		var got []string
		for _, b := range blocks {
			rel, _ := filepath.Rel(dir, b.Path)
			got = append(got, rel)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.pattern, got, tc.want)
		}
	}
}

// writeTree writes a one-record LIBSVM file at each path under dir,
// making its directories.
func writeTree(t *testing.T, dir string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("1 1:1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
