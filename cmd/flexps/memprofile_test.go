package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestRunWritesHeapProfile: flexps run --memprofile (a real process)
// writes a gzipped pprof heap profile taken during training, while the
// slaves hold their parsed data: the data store's allocation sites are in
// it.
func TestRunWritesHeapProfile(t *testing.T) {
	dir := t.TempDir()
	train, test := lrData(t, dir, 20000, 500)
	job := lrJob(t, dir, "mem", train, test, filepath.Join(dir, "mem.model"), 500, 2, 2, "ssp")
	prof := filepath.Join(dir, "heap.prof")
	if out, errOut, code := runFlexps(t, "run", job, "--memprofile", prof, "--log-level", "error"); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s is not a gzipped pprof profile: %v", prof, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("github.com/flexps/flexps/datastore")) {
		t.Fatalf("the heap profile (%d bytes) names no datastore allocation: not taken while training", len(b))
	}
}
