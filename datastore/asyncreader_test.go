package datastore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockList serves blocks to producers like the FileAssigner does.
func blockList(blocks []Block) func(context.Context) (Block, bool, error) {
	var mu sync.Mutex
	return func(ctx context.Context) (Block, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if err := ctx.Err(); err != nil {
			return Block{}, false, err
		}
		if len(blocks) == 0 {
			return Block{}, false, nil
		}
		b := blocks[0]
		blocks = blocks[1:]
		return b, true, nil
	}
}

// libsvmDir writes files files of rows rows each and returns the dir.
func libsvmDir(t *testing.T, files, rows int) string {
	dir := t.TempDir()
	for f := range files {
		var sb strings.Builder
		for i := range rows {
			fmt.Fprintf(&sb, "%d %d:1 %d:0.5\n", i%2, f*rows+i+1, 100000+i)
		}
		writeFile(t, dir, fmt.Sprintf("part-%03d", f), sb.String())
	}
	return dir
}

func asyncConfig(t *testing.T, dir string, bs int64) AsyncConfig {
	src := NewLocalSource()
	blocks, err := src.Blocks(context.Background(), dir, bs)
	if err != nil {
		t.Fatal(err)
	}
	return AsyncConfig{Source: src, Format: mustFormat(t, "libsvm", DefaultFormatOptions()), Next: blockList(blocks),
		Read: ReadOptions{BatchRecords: 50}}
}

func drain(t *testing.T, p Pass) (ids []uint64) {
	t.Helper()
	for {
		r, err := p.Next(context.Background())
		if err == io.EOF {
			return ids
		}
		if err != nil {
			t.Fatal(err)
		}
		checkRecords(t, r)
		for i := range r.Len() {
			_, k, _ := r.Row(i)
			ids = append(ids, k[0])
		}
	}
}

func TestAsyncReaderReadsEverything(t *testing.T) {
	dir := libsvmDir(t, 4, 500)
	for _, producers := range []int{1, 3} {
		t.Run(fmt.Sprint(producers), func(t *testing.T) {
			cfg := asyncConfig(t, dir, 4000)
			cfg.Producers = producers
			cfg.IsLocal = func(b Block) bool { return strings.HasSuffix(b.Path, "part-000") }
			r := NewAsyncReader(context.Background(), cfg)
			defer r.Close()
			ids := drain(t, r)
			slices.Sort(ids)
			if len(ids) != 2000 || ids[0] != 0 || ids[1999] != 1999 || slices.Compact(ids) == nil || len(slices.Compact(ids)) != 2000 {
				t.Fatalf("read %d records", len(ids))
			}
			st := r.Stats()
			if st.Records != 2000 || st.Blocks < 4 || st.LocalBytes == 0 || st.LocalBytes >= st.Bytes {
				t.Fatalf("stats %+v", st)
			}
			if _, err := r.Next(context.Background()); err != io.EOF {
				t.Fatalf("Next after EOF: %v", err)
			}
		})
	}
}

func TestAsyncReaderBackpressure(t *testing.T) {
	dir := libsvmDir(t, 2, 3000)
	cfg := asyncConfig(t, dir, 8000)
	cfg.Producers = 4
	// One batch of 50 records is a few KiB; the bound holds a few batches.
	probe := newBatch(50, nil, false)
	cfg.BufferBytes = 3 * probe.Bytes()
	r := NewAsyncReader(context.Background(), cfg)
	defer r.Close()
	n := 0
	for {
		rec, err := r.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n += rec.Len()
		time.Sleep(200 * time.Microsecond) // slow consumer
	}
	st := r.Stats()
	if n != 6000 {
		t.Fatalf("read %d records", n)
	}
	if st.PeakBuffered > cfg.BufferBytes || st.PeakBuffered == 0 {
		t.Fatalf("peak buffered %d exceeds bound %d", st.PeakBuffered, cfg.BufferBytes)
	}
}

func TestAsyncReaderOversizedBatch(t *testing.T) {
	cfg := asyncConfig(t, libsvmDir(t, 1, 500), 0)
	cfg.BufferBytes = 1 // every batch is larger: admitted one at a time
	r := NewAsyncReader(context.Background(), cfg)
	defer r.Close()
	if ids := drain(t, r); len(ids) != 500 {
		t.Fatalf("read %d", len(ids))
	}
	if st := r.Stats(); st.PeakBuffered > newBatch(50, nil, false).Bytes()*2 {
		t.Fatalf("peak %d: more than one batch buffered", st.PeakBuffered)
	}
}

func TestAsyncReaderErrors(t *testing.T) {
	dir := libsvmDir(t, 2, 100)
	writeFile(t, dir, "part-999", "1 1:1\nbroken\n")
	cfg := asyncConfig(t, dir, 0)
	r := NewAsyncReader(context.Background(), cfg)
	var err error
	for err == nil {
		_, err = r.Next(context.Background())
	}
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Path != filepath.Join(dir, "part-999") {
		t.Fatalf("err = %v", err)
	}
	r.Close()
	r.Close() // idempotent
	if _, err := r.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}

	boom := errors.New("assigner down")
	r = NewAsyncReader(context.Background(), AsyncConfig{Source: NewLocalSource(), Format: cfg.Format,
		Next: func(context.Context) (Block, bool, error) { return Block{}, false, boom }})
	if _, err := r.Next(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("assigner error: %v", err)
	}
	r.Close()

	r = NewAsyncReader(context.Background(), AsyncConfig{})
	if _, err := r.Next(context.Background()); err == nil {
		t.Fatal("empty config accepted")
	}
	r.Close()
}

func TestAsyncReaderCancel(t *testing.T) {
	dir := libsvmDir(t, 2, 3000)
	// Producers fill the buffer and block; cancelling must release them.
	ctx, cancel := context.WithCancel(context.Background())
	cfg := asyncConfig(t, dir, 0)
	cfg.Producers = 2
	cfg.BufferBytes = 1
	r := NewAsyncReader(ctx, cfg)
	if _, err := r.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	var err error
	for err == nil {
		_, err = r.Next(context.Background())
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	r.Close()

	// Close with blocked producers and no consumer.
	cfg = asyncConfig(t, dir, 0)
	cfg.BufferBytes = 1
	r = NewAsyncReader(context.Background(), cfg)
	time.Sleep(5 * time.Millisecond)
	r.Close()

	// A consumer's own ctx bounds its wait.
	block := make(chan struct{})
	r = NewAsyncReader(context.Background(), AsyncConfig{Source: NewLocalSource(), Format: cfg.Format,
		Next: func(ctx context.Context) (Block, bool, error) {
			select {
			case <-block:
			case <-ctx.Done():
			}
			return Block{}, false, ctx.Err()
		}})
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer ccancel()
	if _, err := r.Next(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("consumer deadline: %v", err)
	}
	if r.Stats().WaitTime < 5*time.Millisecond {
		t.Fatalf("WaitTime %v", r.Stats().WaitTime)
	}
	r.Close()
	close(block)
}

func TestAsyncReaderMaxBadFraction(t *testing.T) {
	// 1000 lines, of which bad are garbage.
	lines := func(bad int) string {
		var sb strings.Builder
		for i := range 1000 {
			if i < bad {
				sb.WriteString("this is not libsvm\n")
			} else {
				fmt.Fprintf(&sb, "1 %d:1\n", i+1)
			}
		}
		return sb.String()
	}
	for _, tc := range []struct {
		name     string
		bad      int
		fraction float64
		wantErr  bool
	}{
		{"all garbage", 1000, 0, true},
		{"half garbage", 500, 0, true},
		{"under the default 1%", 9, 0, false},
		{"over the default 1%", 11, 0, true},
		{"any allowed", 1000, 1, false},
		{"custom bound", 200, 0.25, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "data", lines(tc.bad))
			cfg := asyncConfig(t, dir, 3000)
			cfg.Read.OnError, cfg.Read.MaxBadFraction = OnErrorSkip, tc.fraction
			r := NewAsyncReader(context.Background(), cfg)
			defer r.Close()
			var err error
			n := 0
			for {
				var rec *Records
				rec, err = r.Next(context.Background())
				if err != nil {
					break
				}
				n += rec.Len()
			}
			var tooMany *TooManyBadLinesError
			if tc.wantErr {
				if !errors.As(err, &tooMany) || tooMany.BadLines != int64(tc.bad) || !strings.Contains(err.Error(), "line 1") {
					t.Fatalf("err = %v, want %d bad lines reported with the first one", err, tc.bad)
				}
				return
			}
			if err != io.EOF || n != 1000-tc.bad {
				t.Fatalf("err = %v after %d records, want EOF after %d", err, n, 1000-tc.bad)
			}
		})
	}
	dir := t.TempDir()
	writeFile(t, dir, "data", "1 1:1\n")
	cfg := asyncConfig(t, dir, 0)
	cfg.Read.MaxBadFraction = 2
	if _, err := NewAsyncReader(context.Background(), cfg).Next(context.Background()); err == nil || !strings.Contains(err.Error(), "max_bad_fraction") {
		t.Fatalf("fraction 2: %v", err)
	}
}

// Done hears of each block exactly once, from inside Next, after the
// consumer took every batch holding its records and asked for more.
func TestAsyncReaderDoneAfterLastBatch(t *testing.T) {
	dir := libsvmDir(t, 3, 400)
	for _, producers := range []int{1, 3} {
		t.Run(fmt.Sprint(producers), func(t *testing.T) {
			cfg := asyncConfig(t, dir, 3000)
			cfg.Producers = producers
			type at struct {
				path string
				off  int64
			}
			inNext := false
			done := map[at]int{}
			seen := map[at]bool{}
			cfg.Done = func(b Block) error {
				if !inNext {
					t.Errorf("Done(%v) outside Next", b)
				}
				done[at{b.Path, b.Offset}]++
				return nil
			}
			r := NewAsyncReader(context.Background(), cfg)
			defer r.Close()
			for {
				inNext = true
				rec, err := r.Next(context.Background())
				inNext = false
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range rec.Origins {
					k := at{o.Path, o.Block}
					seen[k] = true
					if done[k] > 0 {
						t.Fatalf("a batch of block %v after its Done", k)
					}
				}
			}
			if len(done) == 0 || len(done) < len(seen) {
				t.Fatalf("Done for %d blocks, records seen from %d", len(done), len(seen))
			}
			for b, n := range done {
				if n != 1 {
					t.Fatalf("Done(%v) %d times", b, n)
				}
			}
			for k := range seen {
				if done[k] != 1 {
					t.Fatalf("records of block %v seen, Done %d times", k, done[k])
				}
			}
		})
	}
}

func TestAsyncReaderDoneErrorFailsThePass(t *testing.T) {
	cfg := asyncConfig(t, libsvmDir(t, 2, 100), 1<<20)
	boom := errors.New("master unreachable")
	cfg.Done = func(Block) error { return boom }
	r := NewAsyncReader(context.Background(), cfg)
	defer r.Close()
	for {
		_, err := r.Next(context.Background())
		if errors.Is(err, boom) {
			return
		}
		if err != nil {
			t.Fatalf("Next: %v, want the Done error", err)
		}
	}
}

// A block with malformed lines (on_error = "skip") was kept out of the
// parsed-data cache: every epoch parsed it again and counted its lines
// again, so a file with one bad line reported "skipped 11 malformed
// lines" after 10 epochs. Now the block is cached like any other, its
// good records replayed, and its bad lines counted at the one parse.
func TestAsyncReaderCountsSkippedLinesOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  []int // the garbage lines' indexes among 400
	}{
		{"no bad line", nil},
		{"one", []int{1}},
		{"in several blocks", []int{0, 150, 151, 399}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var sb strings.Builder
			for i := range 400 {
				if slices.Contains(tc.bad, i) {
					sb.WriteString("not libsvm\n")
				} else {
					fmt.Fprintf(&sb, "1 %d:1\n", i+1)
				}
			}
			writeFile(t, dir, "data", sb.String())
			cache := NewBlockCache(64 << 20)
			var bad, records int64
			for pass := range 3 {
				cfg := asyncConfig(t, dir, 1000)
				cfg.Cache, cfg.CacheScope = cache, "t/train"
				cfg.Read.OnError, cfg.Read.MaxBadFraction = OnErrorSkip, 1
				r := NewAsyncReader(context.Background(), cfg)
				ids := drain(t, r)
				st := r.Stats()
				r.Close()
				if len(ids) != 400-len(tc.bad) {
					t.Fatalf("pass %d: %d records, want %d", pass, len(ids), 400-len(tc.bad))
				}
				if pass > 0 && st.CachedBlocks != st.Blocks {
					t.Fatalf("pass %d: %d of %d blocks replayed, want all", pass, st.CachedBlocks, st.Blocks)
				}
				bad += st.BadLines
				records += st.Records
			}
			if bad != int64(len(tc.bad)) || records != 3*int64(400-len(tc.bad)) {
				t.Fatalf("3 passes counted %d bad lines and %d records, want %d and %d", bad, records, len(tc.bad), 3*(400-len(tc.bad)))
			}
		})
	}
}

// The files of a csv input must have the same columns: each block checks
// its own rows, and a directory whose files differ by a column was read
// with every feature after the missing one shifted, without a word.
func TestAsyncReaderCSVColumnsAcrossFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		err   string // "" when read whole
	}{
		{"same columns", []string{"1,2,3\n0,4,5\n", "1,6,7\n"}, ""},
		{"a file short of a column", []string{"1,2,3\n0,4,5\n", "1,6\n0,7\n"}, "b.csv line 1: the row has 2 columns, the rows of "},
		{"a file with a column more", []string{"1,2\n", "1,6,7\n"}, "the row has 3 columns, the rows of "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, body := range tc.files {
				writeFile(t, dir, string(rune('a'+i))+".csv", body)
			}
			src := NewLocalSource()
			blocks, err := src.Blocks(context.Background(), dir, 0)
			if err != nil {
				t.Fatal(err)
			}
			r := NewAsyncReader(context.Background(), AsyncConfig{Source: src, Format: mustFormat(t, "csv", DefaultFormatOptions()),
				Next: blockList(blocks), Read: ReadOptions{BatchRecords: 50}, Producers: 1})
			defer r.Close()
			n := 0
			for err == nil {
				var rec *Records
				if rec, err = r.Next(context.Background()); rec != nil {
					n += rec.Len()
				}
			}
			if tc.err == "" {
				if err != io.EOF {
					t.Fatalf("%v after %d rows", err, n)
				}
				return
			}
			if err == io.EOF || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%v, want an error with %q", err, tc.err)
			}
		})
	}
}
