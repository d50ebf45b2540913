package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/datastore"
)

func files(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteKeepsTheNewestAndLatestLoadsIt(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ck") // created by the first Write
	st := datastore.NewSources()
	if _, _, _, err := Latest(ctx, st, dir); !errors.Is(err, ErrNone) {
		t.Fatalf("empty dir: %v", err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for epoch := 1; epoch <= 4; epoch++ {
		c := sample()
		c.Progress.Epoch = epoch
		w, err := Write(ctx, st, dir, c, 2, now)
		if err != nil {
			t.Fatal(err)
		}
		if w.Path != filepath.Join(dir, Name(epoch)) || w.Bytes <= 0 || len(w.RemoveErrs) != 0 {
			t.Fatalf("write %d: %+v", epoch, w)
		}
	}
	if got, want := files(t, dir), []string{Name(3), Name(4)}; !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v (keep 2, no temporary files)", got, want)
	}
	c, path, skipped, err := Latest(ctx, st, dir)
	if err != nil || len(skipped) != 0 {
		t.Fatal(err, skipped)
	}
	if path != filepath.Join(dir, Name(4)) || c.Progress.Epoch != 4 || c.Seq != 4 {
		t.Fatalf("latest %s epoch %d seq %d", path, c.Progress.Epoch, c.Seq)
	}
}

func TestLatestSkipsTornAndForeignFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := datastore.NewSources()
	for epoch := 1; epoch <= 2; epoch++ {
		c := sample()
		c.Progress.Epoch = epoch
		if _, err := Write(ctx, st, dir, c, 5, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// A newer file torn in half, and one renamed from another sequence
	// number; a temporary file left by a crash mid-write is not listed.
	data, err := os.ReadFile(filepath.Join(dir, Name(2)))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, Name(4)), data[:len(data)/2])
	writeFile(t, filepath.Join(dir, Name(3)), data)
	writeFile(t, filepath.Join(dir, "."+Name(5)+".tmp123"), data)
	c, path, skipped, err := Latest(ctx, st, dir)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, Name(2)) || c.Progress.Epoch != 2 {
		t.Fatalf("resumed from %s epoch %d", path, c.Progress.Epoch)
	}
	if len(skipped) != 2 || skipped[0].Seq != 4 || skipped[1].Seq != 3 {
		t.Fatalf("skipped %v", skipped)
	}
	for _, s := range skipped {
		if !errors.Is(s.Err, ErrFormat) || !strings.Contains(s.Err.Error(), s.Path) {
			t.Fatalf("skip reason %q does not name %s", s.Err, s.Path)
		}
	}
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// failingStore is the real local store whose files fail after n bytes, as
// a full disk would.
type failingStore struct {
	*datastore.Sources
	n int
}

func (f failingStore) Create(ctx context.Context, p string) (io.WriteCloser, error) {
	w, err := f.Sources.Create(ctx, p)
	if err != nil {
		return nil, err
	}
	return &failingWriter{WriteCloser: w, left: f.n}, nil
}

type failingWriter struct {
	io.WriteCloser
	left int
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		n, _ := w.WriteCloser.Write(p[:w.left])
		w.left = 0
		return n, errors.New("no space left on device")
	}
	w.left -= len(p)
	return w.WriteCloser.Write(p)
}

func (w *failingWriter) Abort() { datastore.Abort(w.WriteCloser) }

// A write that fails midway leaves the previous checkpoints as they were
// and nothing else: no partial file under a checkpoint name, no temporary
// file.
func TestFailedWriteLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := datastore.NewSources()
	if _, err := Write(ctx, st, dir, sample(), 2, time.Now()); err != nil {
		t.Fatal(err)
	}
	before := files(t, dir)
	if _, err := Write(ctx, failingStore{st, 100}, dir, sample(), 2, time.Now()); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("err %v", err)
	}
	if got := files(t, dir); !slices.Equal(got, before) {
		t.Fatalf("files after a failed write %v, before %v", got, before)
	}
	if _, path, _, err := Latest(ctx, st, dir); err != nil || path != filepath.Join(dir, Name(1)) {
		t.Fatalf("latest %s, %v", path, err)
	}
}

func TestWriteRespectsAllowedPaths(t *testing.T) {
	ok := t.TempDir()
	policy, err := datastore.NewPathPolicy([]string{ok})
	if err != nil {
		t.Fatal(err)
	}
	st := datastore.NewSources().Restrict(policy)
	if _, err := Write(context.Background(), st, t.TempDir(), sample(), 2, time.Now()); !errors.Is(err, datastore.ErrPathNotAllowed) {
		t.Fatalf("outside the allowed paths: %v", err)
	}
	if _, err := Write(context.Background(), st, filepath.Join(ok, "ck"), sample(), 2, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// retryStore fails the first `fails` files it creates after 100 bytes
// with datastore.ErrRetryWrite, as an HDFS namenode refuses a next block
// (NotReplicatedYetException) until a datanode reported the one before.
type retryStore struct {
	*datastore.Sources
	fails   int
	creates int
}

func (r *retryStore) Create(ctx context.Context, p string) (io.WriteCloser, error) {
	r.creates++
	w, err := r.Sources.Create(ctx, p)
	if err != nil || r.creates > r.fails {
		return w, err
	}
	return &retryWriter{WriteCloser: w, left: 100}, nil
}

type retryWriter struct {
	io.WriteCloser
	left int
}

func (w *retryWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		return 0, fmt.Errorf("addBlock: NotReplicatedYetException (%w)", datastore.ErrRetryWrite)
	}
	w.left -= len(p)
	return w.WriteCloser.Write(p)
}

func (w *retryWriter) Abort() { datastore.Abort(w.WriteCloser) }

// A write refused for a moment (datastore.ErrRetryWrite) is written again
// from the start: a checkpoint of several HDFS blocks failed now and then
// on the namenode's NotReplicatedYetException, which Hadoop's client
// retries.
func TestWriteRetriesARetryableFailure(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := &retryStore{Sources: datastore.NewSources(), fails: 2}
	w, err := Write(ctx, st, dir, sample(), 2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.creates != 3 {
		t.Errorf("%d attempts, want 3", st.creates)
	}
	if got := files(t, dir); !slices.Equal(got, []string{Name(1)}) {
		t.Fatalf("files %v, want only %s", got, Name(1))
	}
	if _, err := Load(ctx, st.Sources, w.Path); err != nil {
		t.Fatal(err)
	}
}

// Resuming from a directory that does not exist says so, not that it
// holds no checkpoints (a mistyped --resume DIR); an empty one says it
// holds none. Both are ErrNone.
func TestLatestNamesAMissingDirectory(t *testing.T) {
	ctx := context.Background()
	st := datastore.NewSources()
	empty := t.TempDir()
	// A dir of other files (one named as the dir) is no file for all that.
	others := t.TempDir()
	if err := os.WriteFile(filepath.Join(others, filepath.Base(others)), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// --resume given another file on HDFS, not a dir: the glob under it
	// matches nothing, the file's blocks are its own. It was told "the
	// directory holds no ckpt-*.flexps files".
	hdfsFile := "hdfs://nn:8020/ck/lr/model.bin"
	fake := fileStore{Sources: st, file: hdfsFile}
	for _, tc := range []struct {
		st        Store
		dir, want string
	}{
		{st, filepath.Join(empty, "typo"), "no such directory"},
		{st, empty, "holds no"},
		{st, others, "holds no"},
		{fake, hdfsFile, "neither a directory nor a checkpoint file"},
		{fake, "hdfs://nn:8020/ck/lr", "holds no"},
	} {
		_, _, _, err := Latest(ctx, tc.st, tc.dir)
		if !errors.Is(err, ErrNone) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.dir) {
			t.Fatalf("Latest(%s): %v, want ErrNone saying %q", tc.dir, err, tc.want)
		}
	}
}

// fileStore lists as HDFS does around one file: a glob under it matches
// nothing, the file's blocks are its own, the dir holding it holds no
// checkpoint (it is not ckpt-*'s match here).
type fileStore struct {
	*datastore.Sources
	file string
}

func (f fileStore) Files(context.Context, string) ([]string, error) {
	return nil, datastore.ErrNoInput
}

func (f fileStore) Blocks(_ context.Context, pattern string, _ int64) ([]datastore.Block, error) {
	if pattern == f.file {
		return []datastore.Block{{Path: f.file, Length: 10, FileSize: 10}}, nil
	}
	if strings.HasPrefix(pattern, f.file+"/") || strings.HasSuffix(pattern, "/ckpt-*.flexps") {
		return nil, datastore.ErrNoInput
	}
	return []datastore.Block{{Path: f.file, Length: 10, FileSize: 10}}, nil
}

// A 0-byte or torn checkpoint file is never passed over in silence: as
// the newest file it is skipped with its name and why, and as the only
// one the error names it (an empty file once vanished from the listing,
// so resuming went back to an older checkpoint without a word, or said
// the directory held no checkpoint files at all).
func TestLatestNamesAnEmptyOrTornCheckpoint(t *testing.T) {
	ctx := context.Background()
	st := datastore.NewSources()
	for _, tc := range []struct {
		name      string
		valid     bool   // an older valid checkpoint 1 is there too
		bad       []byte // the content of the newest file, checkpoint 2
		wantEpoch int    // resumed from, when valid
		wantWhy   string
	}{
		{"empty newest", true, []byte{}, 1, "empty"},
		{"torn newest", true, []byte("{\"format\":"), 1, "checkpoint"},
		{"empty only", false, []byte{}, 0, "empty"},
		{"torn only", false, []byte("{\"format\":"), 0, "checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.valid {
				c := sample()
				c.Progress.Epoch = 1
				if _, err := Write(ctx, st, dir, c, 5, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			badPath := filepath.Join(dir, Name(2))
			writeFile(t, badPath, tc.bad)
			c, path, skipped, err := Latest(ctx, st, dir)
			if len(skipped) != 1 || skipped[0].Path != badPath ||
				!strings.Contains(skipped[0].Err.Error(), badPath) || !strings.Contains(skipped[0].Err.Error(), tc.wantWhy) {
				t.Fatalf("skipped %v, want %s with %q", skipped, badPath, tc.wantWhy)
			}
			if !tc.valid {
				if !errors.Is(err, ErrNone) || !strings.Contains(err.Error(), badPath) || !strings.Contains(err.Error(), tc.wantWhy) {
					t.Fatalf("Latest: %v, want ErrNone naming %s and %q", err, badPath, tc.wantWhy)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if path != filepath.Join(dir, Name(1)) || c.Progress.Epoch != tc.wantEpoch {
				t.Fatalf("resumed from %s epoch %d", path, c.Progress.Epoch)
			}
		})
	}
}

// A task prunes only its own checkpoints (those recording its id or a task
// it was resumed from): another task's left in the dir, an interrupted
// run of the job before, are neither counted nor deleted, and the new
// task's numbers follow theirs, so no name is reused. Before, Write
// counted every ckpt-* file, and a new task deleted the earlier task's
// once it had written keep of its own.
func TestWritePrunesOnlyItsTasksOwnCheckpoints(t *testing.T) {
	ctx := context.Background()
	st := datastore.NewSources()
	by := func(id string, lineage ...string) *Checkpoint {
		c := sample()
		c.Task.ID, c.Lineage = id, lineage
		return c
	}
	for _, tc := range []struct {
		name    string
		before  []*Checkpoint // written first, in order (nil: a file that is no checkpoint)
		writer  *Checkpoint   // then writes `writes` checkpoints, keep 2
		writes  int
		want    []int  // the checkpoint numbers left
		wantIDs string // the tasks that wrote them, in order
	}{
		{"an earlier task's", []*Checkpoint{by("t0"), by("t0")}, by("t1"), 3, []int{1, 2, 4, 5}, "t0 t0 t1 t1"},
		{"an earlier task's, one write", []*Checkpoint{by("t0"), by("t0")}, by("t1"), 1, []int{1, 2, 3}, "t0 t0 t1"},
		{"its own, after a restart", []*Checkpoint{by("t1"), by("t1")}, by("t1"), 1, []int{2, 3}, "t1 t1"},
		{"the task it was resumed from", []*Checkpoint{by("t0"), by("t0")}, by("t1", "t0"), 1, []int{2, 3}, "t0 t1"},
		{"resumed twice", []*Checkpoint{by("t0"), by("t1", "t0")}, by("t2", "t0", "t1"), 2, []int{3, 4}, "t2 t2"},
		{"resumed, beside another task's", []*Checkpoint{by("t9"), by("t0"), by("t0")}, by("t1", "t0"), 2, []int{1, 4, 5}, "t9 t1 t1"},
		{"a file that is no checkpoint", []*Checkpoint{nil, by("t1")}, by("t1"), 2, []int{1, 3, 4}, "? t1 t1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, c := range tc.before {
				if c == nil {
					writeFile(t, filepath.Join(dir, Name(i+1)), []byte("not a checkpoint\n"))
					continue
				}
				if _, err := Write(ctx, st, dir, c, 100, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			for range tc.writes {
				if _, err := Write(ctx, st, dir, tc.writer, 2, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			var want []string
			for _, n := range tc.want {
				want = append(want, Name(n))
			}
			got := files(t, dir)
			var ids []string
			for _, f := range got {
				id, err := writerOf(ctx, st, filepath.Join(dir, f))
				if err != nil {
					id = "?"
				}
				ids = append(ids, id)
			}
			if !slices.Equal(got, want) || strings.Join(ids, " ") != tc.wantIDs {
				t.Fatalf("files %v written by %v, want %v by %s", got, ids, want, tc.wantIDs)
			}
		})
	}
}

// brokenReadStore is the real local store whose file path fails to open
// (n < 0), or whose reads fail after n bytes with err: a namenode or
// datanode killed while the checkpoint is read, or (io.EOF) a file that
// ends early.
type brokenReadStore struct {
	*datastore.Sources
	path string
	n    int64
	err  error
}

func (b brokenReadStore) Open(ctx context.Context, p string, off int64) (io.ReadCloser, error) {
	if p != b.path {
		return b.Sources.Open(ctx, p, off)
	}
	if b.n < 0 {
		return nil, fmt.Errorf("datastore: hdfs %s: namenode nn:8020: %w", p, b.err)
	}
	r, err := b.Sources.Open(ctx, p, off)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(r, b.n), errReader{b.err}), r}, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// The newest checkpoint, if it cannot be read (its namenode or datanode
// killed mid-read), fails the resume naming it and why; it is not taken
// for torn and passed over for the one before, which lost the epochs
// between them ("not a valid checkpoint: ... table \"w\" truncated").
// A file that ends early still is.
func TestLatestDoesNotSkipAnUnreadableCheckpoint(t *testing.T) {
	ctx := context.Background()
	st := datastore.NewSources()
	dir := t.TempDir()
	for epoch := 1; epoch <= 2; epoch++ {
		c := sample()
		c.Progress.Epoch = epoch
		if _, err := Write(ctx, st, dir, c, 5, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	newest := filepath.Join(dir, Name(2))
	fi, err := os.Stat(newest)
	if err != nil {
		t.Fatal(err)
	}
	reset := errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")
	for _, tc := range []struct {
		name      string
		n         int64
		err       error
		wantEpoch int // 0: the resume fails
	}{
		{"open fails", -1, reset, 0},
		{"read fails in the header", 10, reset, 0},
		{"read fails in a table", fi.Size() - 40, reset, 0},
		{"read fails at the trailer", fi.Size() - 4, reset, 0},
		{"the file ends in a table", fi.Size() - 40, io.EOF, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, path, skipped, err := Latest(ctx, brokenReadStore{st, newest, tc.n, tc.err}, dir)
			if tc.wantEpoch == 0 {
				if err == nil || !strings.Contains(err.Error(), "connection reset") || !strings.Contains(err.Error(), newest) || !strings.Contains(err.Error(), "it is not torn") || len(skipped) != 0 {
					t.Fatalf("Latest: %v (loaded %s, skipped %v), want an error naming %s and its read error", err, path, skipped, newest)
				}
				return
			}
			if err != nil || c.Progress.Epoch != tc.wantEpoch || len(skipped) != 1 || !errors.Is(skipped[0].Err, ErrFormat) {
				t.Fatalf("Latest: %v, epoch %v, skipped %v; want epoch %d with %s skipped as torn", err, c, skipped, tc.wantEpoch, newest)
			}
		})
	}
}
