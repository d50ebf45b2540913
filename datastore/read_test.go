package datastore

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readAll reads every block of pattern and returns the text lines or rows.
func readAll(t *testing.T, pattern string, bs int64, f Format, opt ReadOptions) ([]string, []row, ReadStats) {
	t.Helper()
	src := NewLocalSource()
	blocks, err := src.Blocks(context.Background(), pattern, bs)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var rows []row
	var total ReadStats
	for _, b := range blocks {
		st, err := ReadBlock(context.Background(), src, b, f, opt, func(r *Records) error {
			checkRecords(t, r)
			lines = append(lines, r.Lines...)
			rows = append(rows, rowsOf(r)...)
			return nil
		})
		if err != nil {
			t.Fatalf("block %v: %v", b, err)
		}
		total.Bytes += st.Bytes
		total.Records += st.Records
		total.BadLines += st.BadLines
		total.FirstBad = append(total.FirstBad, st.FirstBad...)
	}
	return lines, rows, total
}

// TestReadBlockExactlyOnce splits files with every kind of line ending
// at many block sizes and checks that every line is read once, in order.
func TestReadBlockExactlyOnce(t *testing.T) {
	// Short lines at small block sizes; lines longer than the bufio buffer
	// at large ones (a tiny block inside a long line rereads its rest).
	testExactlyOnce(t, false, []int64{1, 2, 3, 7, 64, 1000, 4096})
	testExactlyOnce(t, true, []int64{65536, readBufferSize - 1, readBufferSize, readBufferSize + 1, 1 << 30})
}

func testExactlyOnce(t *testing.T, longLines bool, sizes []int64) {
	rng := rand.New(rand.NewPCG(1, 2))
	var want []string
	var sb strings.Builder
	for i := range 300 {
		n := rng.IntN(40)
		if longLines && i%50 == 7 {
			n = 3*readBufferSize/2 + rng.IntN(100) // longer than the bufio buffer
		}
		line := fmt.Sprintf("%d:", i) + strings.Repeat(string(rune('a'+i%26)), n)
		want = append(want, line)
		sb.WriteString(line)
		if i%3 == 0 {
			sb.WriteString("\r\n")
		} else {
			sb.WriteString("\n")
		}
		if i%40 == 0 {
			sb.WriteString("\n") // blank lines produce no text record
		}
	}
	content := strings.TrimSuffix(sb.String(), "\n") // last line without newline
	dir := t.TempDir()
	p := writeFile(t, dir, "lines.txt", content)
	f := mustFormat(t, "text", DefaultFormatOptions())
	for _, bs := range sizes {
		got, _, st := readAll(t, p, bs, f, ReadOptions{BatchRecords: 17})
		if !slices.Equal(got, want) {
			t.Fatalf("block size %d: got %d lines, want %d", bs, len(got), len(want))
		}
		if st.Bytes != int64(len(content)) || st.Records != int64(len(want)) {
			t.Fatalf("block size %d: stats %+v, want %d bytes", bs, st, len(content))
		}
	}
}

func TestReadBlockSmallSplits(t *testing.T) {
	// Exhaustively: every block size over short files with edge endings.
	f := mustFormat(t, "text", DefaultFormatOptions())
	for _, content := range []string{"a\nbb\nccc\n", "a\nbb\nccc", "\n\na\n\n", "a", "a\r\n\r\nb\r\n", "abc\nd\n"} {
		p := writeFile(t, t.TempDir(), "f.txt", content)
		var want []string
		for _, l := range strings.Split(content, "\n") {
			if l = strings.TrimSuffix(l, "\r"); l != "" {
				want = append(want, l)
			}
		}
		for bs := int64(1); bs <= int64(len(content))+1; bs++ {
			got, _, _ := readAll(t, p, bs, f, ReadOptions{})
			if !slices.Equal(got, want) {
				t.Fatalf("%q block size %d: got %q, want %q", content, bs, got, want)
			}
		}
	}
}

func TestReadBlockLIBSVMAndGzip(t *testing.T) {
	content := "1 1:1 2:2\n0 3:3\n# comment\n\n1 4:0.5\n"
	want := []row{{1, []uint64{0, 1}, []float64{1, 2}}, {0, []uint64{2}, []float64{3}}, {1, []uint64{3}, []float64{0.5}}}
	dir := t.TempDir()
	p := writeFile(t, dir, "a.libsvm", content)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(content))
	zw.Close()
	gp := filepath.Join(dir, "b.libsvm.gz")
	os.WriteFile(gp, gz.Bytes(), 0o644)
	f := mustFormat(t, "libsvm", DefaultFormatOptions())
	for _, bs := range []int64{3, 1 << 20} {
		_, got, _ := readAll(t, p, bs, f, ReadOptions{})
		if !sameRows(got, want) {
			t.Fatalf("plain, block size %d: %v", bs, got)
		}
		_, got, st := readAll(t, gp, bs, f, ReadOptions{})
		if !sameRows(got, want) || st.Bytes != int64(gz.Len()) {
			t.Fatalf("gzip, block size %d: %v %+v", bs, got, st)
		}
	}
	// Truncated gzip names the file.
	tp := filepath.Join(dir, "c.gz")
	os.WriteFile(tp, gz.Bytes()[:gz.Len()-10], 0o644)
	src := NewLocalSource()
	blocks, _ := src.Blocks(context.Background(), tp, 0)
	_, err := ReadBlock(context.Background(), src, blocks[0], f, ReadOptions{}, func(*Records) error { return nil })
	if err == nil || !strings.Contains(err.Error(), tp) {
		t.Fatalf("truncated gzip: %v", err)
	}
	os.WriteFile(tp, []byte("not gzip at all\n"), 0o644)
	blocks, _ = src.Blocks(context.Background(), tp, 0)
	_, err = ReadBlock(context.Background(), src, blocks[0], f, ReadOptions{}, func(*Records) error { return nil })
	if err == nil || !strings.Contains(err.Error(), tp) {
		t.Fatalf("corrupt gzip: %v", err)
	}
}

// A UTF-8 byte order mark (Windows editors and Excel write one) at the
// start of a file is not part of its first line, at any block size, plain
// or gzipped, in every format; one inside a line is still an error.
func TestReadBlockSkipsByteOrderMark(t *testing.T) {
	const bom = "\xef\xbb\xbf"
	dir := t.TempDir()
	for _, tc := range []struct {
		format, content string
		want            []row
	}{
		{"libsvm", bom + "1 1:1 2:2\n0 3:3\n", []row{{1, []uint64{0, 1}, []float64{1, 2}}, {0, []uint64{2}, []float64{3}}}},
		{"csv", bom + "1,2,3\n0,4,5\n", []row{{1, []uint64{0, 1}, []float64{2, 3}}, {0, []uint64{0, 1}, []float64{4, 5}}}},
		{"ratings", bom + "1\t2\t5\n", []row{{5, []uint64{1, 2}, []float64{1, 1}}}},
	} {
		p := writeFile(t, dir, "a."+tc.format, tc.content)
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write([]byte(tc.content))
		zw.Close()
		gp := filepath.Join(dir, "b."+tc.format+".gz")
		os.WriteFile(gp, gz.Bytes(), 0o644)
		f := mustFormat(t, tc.format, DefaultFormatOptions())
		for _, bs := range []int64{1, 2, 3, 4, 5, 1 << 20} {
			for _, path := range []string{p, gp} {
				_, got, _ := readAll(t, path, bs, f, ReadOptions{})
				if !sameRows(got, tc.want) {
					t.Fatalf("%s, block size %d: %v, want %v", path, bs, got, tc.want)
				}
			}
		}
	}
	p := writeFile(t, dir, "mid.libsvm", "1 1:1\n"+bom+"0 3:3\n")
	src := NewLocalSource()
	blocks, _ := src.Blocks(context.Background(), p, 0)
	_, err := ReadBlock(context.Background(), src, blocks[0], mustFormat(t, "libsvm", DefaultFormatOptions()), ReadOptions{}, func(*Records) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a mark inside the file: %v", err)
	}
}

func TestReadBlockHeader(t *testing.T) {
	opt := DefaultFormatOptions()
	opt.Header = true
	dir := t.TempDir()
	writeFile(t, dir, "a.csv", "y,x1,x2\n1,2,3\n0,4,5\n")
	writeFile(t, dir, "b.csv", "y,x1,x2\n1,6,7\n")
	want := []row{{1, []uint64{0, 1}, []float64{2, 3}}, {0, []uint64{0, 1}, []float64{4, 5}}, {1, []uint64{0, 1}, []float64{6, 7}}}
	for _, bs := range []int64{1, 5, 8, 9, 100} {
		_, got, _ := readAll(t, dir, bs, mustFormat(t, "csv", opt), ReadOptions{})
		if !sameRows(got, want) {
			t.Fatalf("block size %d: %v", bs, got)
		}
	}
	writeFile(t, dir, "r.tsv", "user\titem\trating\n1\t2\t5\n")
	_, got, _ := readAll(t, filepath.Join(dir, "r.tsv"), 4, mustFormat(t, "ratings", opt), ReadOptions{})
	if !sameRows(got, []row{{5, []uint64{1, 2}, []float64{1, 1}}}) {
		t.Fatalf("ratings with header: %v", got)
	}
}

// TestReadBlockRaggedCSV: a CSV row with fewer or more cells than the rows
// above it in its block is an error naming its line, also when it starts
// a batch (it was read as if its missing cells were 0).
func TestReadBlockRaggedCSV(t *testing.T) {
	f := mustFormat(t, "csv", DefaultFormatOptions())
	src := NewLocalSource()
	for _, tc := range []struct {
		name, content string
		line          int64
		want          string
	}{
		{"short row", "1,2,3\n0,4,5\n1,6\n", 3, "the row has 2 columns, the rows above it 3"},
		{"long row", "1,2\n0,4,5\n", 2, "the row has 3 columns, the rows above it 2"},
		{"after a blank line", "1,2,3\n\n0,4\n", 3, "the row has 2 columns"},
	} {
		for _, batch := range []int{1, 2, 1000} {
			p := writeFile(t, t.TempDir(), "r.csv", tc.content)
			b := Block{Path: p, Length: int64(len(tc.content)), FileSize: int64(len(tc.content))}
			_, err := ReadBlock(context.Background(), src, b, f, ReadOptions{BatchRecords: batch}, func(*Records) error { return nil })
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s, batches of %d: err = %v, want line %d: %q", tc.name, batch, err, tc.line, tc.want)
			}
		}
	}
	// Separate blocks and files are separate: each block's rows agree.
	dir := t.TempDir()
	writeFile(t, dir, "a.csv", "1,2,3\n")
	writeFile(t, dir, "b.csv", "1,2\n")
	if _, got, _ := readAll(t, dir, 100, f, ReadOptions{}); len(got) != 2 {
		t.Fatalf("two files of different widths: %v", got)
	}
}

func TestReadBlockErrors(t *testing.T) {
	content := "1 1:1\n1 2:2\n1 3:x\n1 4:4\nbad\n1 5:5\n"
	p := writeFile(t, t.TempDir(), "e.libsvm", content)
	src := NewLocalSource()
	f := mustFormat(t, "libsvm", DefaultFormatOptions())
	ctx := context.Background()
	whole := Block{Path: p, Offset: 0, Length: int64(len(content)), FileSize: int64(len(content))}

	var n int
	_, err := ReadBlock(ctx, src, whole, f, ReadOptions{}, func(r *Records) error { n += r.Len(); return nil })
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *ParseError", err)
	}
	if pe.Path != p || pe.Line != 3 || pe.Offset != int64(strings.Index(content, "1 3:x")) || pe.Text != "1 3:x" {
		t.Fatalf("ParseError = %+v", pe)
	}
	if !strings.Contains(pe.Error(), "line 3") {
		t.Fatalf("message %q", pe.Error())
	}

	// A block starting mid-file names the line in the file too (it
	// counts the lines before it), at every offset of the line before.
	for off := int64(6); off <= 12; off++ {
		mid := Block{Path: p, Offset: off, Length: int64(len(content)) - off}
		_, err = ReadBlock(ctx, src, mid, f, ReadOptions{}, func(*Records) error { return nil })
		if !errors.As(err, &pe) || pe.Line != 3 || pe.Offset != 12 || !strings.Contains(err.Error(), "line 3 (byte 12)") {
			t.Fatalf("block at %d: error = %v", off, err)
		}
	}
	// The second bad line, "bad", in a block of its own (skipping), line 5.
	at := int64(strings.Index(content, "1 4:4"))
	st, err := ReadBlock(ctx, src, Block{Path: p, Offset: at, Length: int64(len(content)) - at}, f,
		ReadOptions{OnError: "skip", MaxBadKept: 1}, func(*Records) error { return nil })
	if err != nil || st.BadLines != 1 || len(st.FirstBad) != 1 || !strings.HasPrefix(st.FirstBad[0], p+" line 5 (byte 24): ") {
		t.Fatalf("skip mid-file: %+v %v", st, err)
	}

	st, err = ReadBlock(ctx, src, whole, f, ReadOptions{OnError: "skip", MaxBadKept: 1}, func(*Records) error { return nil })
	if err != nil || st.Records != 4 || st.BadLines != 2 || len(st.FirstBad) != 1 || !strings.HasPrefix(st.FirstBad[0], p+" line 3 (byte 12): ") {
		t.Fatalf("skip: %+v %v", st, err)
	}
	if _, err := ReadBlock(ctx, src, whole, f, ReadOptions{OnError: "ignore"}, nil); err == nil {
		t.Fatal("bad OnError accepted")
	}

	// Long bad lines are truncated in the error.
	long := writeFile(t, t.TempDir(), "l.libsvm", "1 "+strings.Repeat("9", 1000)+"\n")
	_, err = ReadBlock(ctx, src, Block{Path: long, Length: 1003}, f, ReadOptions{}, func(*Records) error { return nil })
	if !errors.As(err, &pe) || len(pe.Text) != maxErrText {
		t.Fatalf("long line error: %v", err)
	}

	// emit errors and cancellation stop the read.
	stop := errors.New("stop")
	_, err = ReadBlock(ctx, src, whole, f, ReadOptions{BatchRecords: 1}, func(*Records) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("emit error: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	calls := 0
	_, err = ReadBlock(cctx, src, whole, f, ReadOptions{BatchRecords: 1}, func(*Records) error { calls++; cancel(); return nil })
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("cancel: %v after %d batches", err, calls)
	}
	_, err = ReadBlock(ctx, src, Block{Path: p + ".missing", Length: 1}, f, ReadOptions{}, nil)
	if err == nil || !strings.Contains(err.Error(), p+".missing") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestReadBlockBatches(t *testing.T) {
	var sb strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&sb, "%d 1:%d\n", i%2, i)
	}
	p := writeFile(t, t.TempDir(), "b.libsvm", sb.String())
	src := NewLocalSource()
	var sizes []int
	st, err := ReadBlock(context.Background(), src, Block{Path: p, Length: int64(sb.Len())}, mustFormat(t, "libsvm", DefaultFormatOptions()),
		ReadOptions{BatchRecords: 300}, func(r *Records) error { sizes = append(sizes, r.Len()); return nil })
	if err != nil || !slices.Equal(sizes, []int{300, 300, 300, 100}) || st.Records != 1000 || st.Bytes != int64(sb.Len()) {
		t.Fatalf("sizes %v stats %+v err %v", sizes, st, err)
	}
}

// A ".gz" file that fails to decompress names the file and says what is
// wrong once: compress/gzip's errors carry "gzip: " already ("x.gz: gzip:
// gzip: invalid header" before), and a file that is no gzip data at all
// says so.
func TestReadBlockGzipErrors(t *testing.T) {
	content := "1 1:1 2:2\n0 3:3\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(content))
	zw.Close()
	bad := bytes.Clone(gz.Bytes())
	bad[len(bad)-6] ^= 0xff // the CRC-32 of the data
	f := mustFormat(t, "libsvm", DefaultFormatOptions())
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"not gzip", []byte(content), ": not gzip data, though its name ends in .gz (gzip: invalid header)"},
		{"truncated", gz.Bytes()[:gz.Len()-10], ": gzip: unexpected EOF"},
		{"checksum", bad, ": gzip: invalid checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "d.libsvm.gz", string(tc.data))
			src := NewLocalSource()
			blocks, err := src.Blocks(context.Background(), p, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ReadBlock(context.Background(), src, blocks[0], f, ReadOptions{}, func(*Records) error { return nil })
			if err == nil || !strings.Contains(err.Error(), p+tc.want) || strings.Count(err.Error(), "gzip: ") != 1 {
				t.Fatalf("error %v, want %q after the path, \"gzip: \" once", err, tc.want)
			}
		})
	}
}
