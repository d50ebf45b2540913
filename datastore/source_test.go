package datastore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCreateIsAtomic(t *testing.T) {
	dir := t.TempDir()
	s := NewSources()
	defer s.Close()
	final := filepath.Join(dir, "sub", "model")
	w, err := s.Create(context.Background(), final)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("half"))
	if _, err := os.Stat(final); !os.IsNotExist(err) {
		t.Fatal("the final name exists before Close")
	}
	Abort(w)
	if _, err := os.Stat(final); !os.IsNotExist(err) {
		t.Fatal("an aborted write left the final file")
	}
	if left, _ := os.ReadDir(filepath.Dir(final)); len(left) != 0 {
		t.Fatalf("an aborted write left %v", left)
	}
	w, err = s.Create(context.Background(), final)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("whole"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(final); err != nil || string(b) != "whole" {
		t.Fatalf("%q %v", b, err)
	}
}

// An output that names a directory is refused when it is created (the
// master's probe at submission), not at the rename after training.
func TestCreateRefusesADirectory(t *testing.T) {
	dir := t.TempDir()
	s := NewSources()
	defer s.Close()
	for _, p := range []string{dir, dir + "/"} {
		w, err := s.Create(context.Background(), p)
		if err == nil {
			Abort(w)
			t.Fatalf("Create(%q): no error", p)
		}
		if !strings.Contains(err.Error(), "is a directory") || !strings.Contains(err.Error(), dir) {
			t.Errorf("Create(%q): %v", p, err)
		}
	}
	if left, _ := os.ReadDir(filepath.Dir(dir)); len(left) != 1 {
		t.Errorf("a refused create left %v", left)
	}
}

func TestScheme(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"hdfs://nn:8020/x", "hdfs"},
		{"HDFS:///x", "hdfs"},
		{"file:///tmp/x", "file"},
		{"s3+v2.x-y://b/k", "s3+v2.x-y"},
		{"/data/train.libsvm", ""},
		{"data/a://b", ""},
		{"://x", ""},
		{"1hdfs://x", ""},
		{"c:\\data", ""},
	} {
		if got := Scheme(tc.path); got != tc.want {
			t.Errorf("Scheme(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

func FuzzScheme(f *testing.F) {
	for _, s := range []string{"hdfs://x", "file:///y", "/z", "a+b://", "://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		s := Scheme(path)
		if s != "" && !strings.HasPrefix(strings.ToLower(path), s+"://") {
			t.Fatalf("Scheme(%q) = %q is not the path's prefix", path, s)
		}
	})
}

// memSource serves one in-memory file, to test routing without a cluster.
type memSource struct {
	data   string
	closed bool
}

func (m *memSource) Blocks(ctx context.Context, pattern string, blockSize int64) ([]Block, error) {
	return []Block{{Path: pattern, Length: int64(len(m.data)), FileSize: int64(len(m.data)), Whole: true}}, nil
}

func (m *memSource) Open(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(m.data[offset:])), nil
}

func (m *memSource) Close() error { m.closed = true; return nil }

func TestSourcesRouteByScheme(t *testing.T) {
	mem := &memSource{data: "1 1:2\n0 2:1\n"}
	opens := 0
	RegisterScheme("memtest", func() (Source, error) { opens++; return mem, nil })
	s := NewSources()
	recs := &Records{}
	f, err := NewFormat("libsvm", DefaultFormatOptions())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		blocks, err := s.Blocks(context.Background(), "memtest://x/train", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ReadBlock(context.Background(), s, blocks[0], f, ReadOptions{}, func(r *Records) error {
			for i := 0; i < r.Len(); i++ {
				recs.Append(r.Row(i))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if recs.Len() != 4 || opens != 1 {
		t.Fatalf("read %d records with %d opens, want 4 records and one open", recs.Len(), opens)
	}
	if _, err := s.Create(context.Background(), "memtest://x/model"); err == nil || !strings.Contains(err.Error(), "cannot write") {
		t.Fatalf("Create on a read-only source: %v", err)
	}
	if err := s.Close(); err != nil || !mem.closed {
		t.Fatalf("Close: %v, source closed %v", err, mem.closed)
	}

	// A router's own handler overrides the registered one.
	other := &memSource{data: "0 3:1\n"}
	s2 := NewSources()
	s2.Handle("MEMTEST", func() (Source, error) { return other, nil })
	if src, err := s2.For("memtest://y"); err != nil || src != other {
		t.Fatalf("Handle did not override: %v %v", src, err)
	}

	_, err = NewSources().Blocks(context.Background(), "nosuch://nn/data", 0)
	if err == nil || !strings.Contains(err.Error(), "nosuch://nn/data") || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Fatalf("unknown scheme: %v", err)
	}
	_, err = NewSources().Blocks(context.Background(), "hdfs://nn/data", 0)
	if err == nil || !strings.Contains(err.Error(), "datastore/hdfs") {
		t.Fatalf("hdfs without the hdfs package should say how to enable it: %v", err)
	}
}

// The datastore core, stage code and the master's assigner must not link
// the HDFS client (and its protobuf and Kerberos dependencies).
func TestCoreHasNoHDFSDependency(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	for _, pkg := range []string{"github.com/flexps/flexps/datastore", "github.com/flexps/flexps/tasks", "github.com/flexps/flexps/master/assign"} {
		out, err := exec.Command(gobin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.Contains(dep, "colinmarc/hdfs") || strings.Contains(dep, "jcmturner") || strings.Contains(dep, "protobuf") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}

func TestRetryWrite(t *testing.T) {
	if _, again := RetryWrite(errors.New("disk full"), 1); again {
		t.Error("a plain error is retried")
	}
	if _, again := RetryWrite(nil, 1); again {
		t.Error("success is retried")
	}
	err := fmt.Errorf("hdfs write: NotReplicatedYetException (%w)", ErrRetryWrite)
	var waits []time.Duration
	for a := 1; ; a++ {
		w, again := RetryWrite(err, a)
		if !again {
			break
		}
		waits = append(waits, w)
	}
	if len(waits) != 5 || waits[0] != 400*time.Millisecond || waits[4] != 6400*time.Millisecond {
		t.Errorf("waits %v, want 5 from 0.4s doubling", waits)
	}
}
