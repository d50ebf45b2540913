package datastore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordsWhere checks that every record read knows its file and line:
// comments and blank lines are skipped without shifting the count, a block
// that does not start the file says so, and ReadAll keeps the locations
// of several files.
func TestRecordsWhere(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tsv"), filepath.Join(dir, "b.tsv")
	if err := os.WriteFile(a, []byte("# header comment\n0\t1\t3\n\n1\t2\t4\n2\t0\t5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("7\t7\t1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	all, err := ReadAll(context.Background(), filepath.Join(dir, "*.tsv"), "ratings")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a + " line 2", a + " line 4", a + " line 5", b + " line 1"}
	if all.Len() != len(want) {
		t.Fatalf("%d records, want %d", all.Len(), len(want))
	}
	for i, w := range want {
		if got := all.Where(i); got != w {
			t.Errorf("record %d: Where = %q, want %q", i, got, w)
		}
	}

	// A block starting mid-file names the line in the file too.
	f, err := NewFormat("ratings", DefaultFormatOptions())
	if err != nil {
		t.Fatal(err)
	}
	src := NewLocalSource()
	blk := Block{Path: a, Offset: int64(strings.Index("# header comment\n0\t1\t3\n\n1\t2\t4\n", "1\t2")), Length: 6, FileSize: 40}
	var got []string
	if _, err := ReadBlock(context.Background(), src, blk, f, ReadOptions{}, func(r *Records) error {
		for i := 0; i < r.Len(); i++ {
			got = append(got, r.Where(i))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if w := fmt.Sprintf("%s line 4", a); len(got) != 1 || got[0] != w {
		t.Errorf("mid-file block: Where = %q, want [%q]", got, w)
	}

	// A file gone before the lines could be counted: the block's own line.
	gone := filepath.Join(dir, "gone.tsv")
	data, _ := os.ReadFile(a)
	if err := os.WriteFile(gone, data, 0o644); err != nil {
		t.Fatal(err)
	}
	blk.Path = gone
	var kept *Records
	if _, err := ReadBlock(context.Background(), src, blk, f, ReadOptions{}, func(r *Records) error {
		kept = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if w := fmt.Sprintf("%s line 1 of the block at byte %d", gone, blk.Offset); kept.Where(0) != w {
		t.Errorf("file gone: Where = %q, want %q", kept.Where(0), w)
	}

	var hand Records
	hand.Append(1, []uint64{1, 2}, nil)
	if got := hand.Where(0); got != "record 1" {
		t.Errorf("hand-built record: Where = %q, want \"record 1\"", got)
	}
}

// A block past maxLineCount does not read the file up to itself to count
// lines (every block of a huge file with a bad line would): its errors
// name the line within the block.
func TestFarBlocksNameTheirOwnLines(t *testing.T) {
	l := &linesBefore{src: NewLocalSource(), path: "/nonexistent", off: maxLineCount + 1}
	if _, err := l.get(context.Background()); err == nil || !strings.Contains(err.Error(), "too far") {
		t.Fatalf("get: %v, want the count refused", err)
	}
	e := &ParseError{Path: "big.libsvm", Offset: maxLineCount + 100, BlockLine: 3, Block: maxLineCount + 1, Err: errMissingLabel, Text: "x"}
	if want := fmt.Sprintf("big.libsvm line 3 of the block at byte %d (byte %d)", maxLineCount+1, maxLineCount+100); !strings.HasPrefix(e.Error(), want) {
		t.Fatalf("%q, want it to start %q", e.Error(), want)
	}
}
