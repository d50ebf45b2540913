package checkpoint

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/flexps/flexps/datastore"
)

// Store is where checkpoints live: *datastore.Sources, which routes local
// paths and hdfs:// URLs, writes atomically (temporary name, fsync,
// rename) and enforces the cluster's allowed paths.
type Store interface {
	Create(ctx context.Context, path string) (io.WriteCloser, error)
	Open(ctx context.Context, path string, offset int64) (io.ReadCloser, error)
	Blocks(ctx context.Context, pattern string, blockSize int64) ([]datastore.Block, error)
	Remove(ctx context.Context, path string) error
}

// List returns the paths of the checkpoint files in dir (none when dir
// does not exist yet), empty ones included when st can list them
// (datastore.Lister): Blocks skips empty files, and a 0-byte checkpoint
// must reach Latest to be skipped with a warning naming it, not vanish.
func List(ctx context.Context, st Store, dir string) ([]string, error) {
	return list(ctx, st, dir, pattern)
}

// Temps returns the paths of the temporary checkpoint files in dir
// (".ckpt-NNNNNN.flexps.tmp-*"): a writer's being written, or one a writer
// killed mid-write left. In a dir without a lock (hdfs://) nothing tells
// the two apart, so they are named (Master warns), not removed.
func Temps(ctx context.Context, st Store, dir string) ([]string, error) {
	return list(ctx, st, dir, "."+pattern+".tmp*")
}

func list(ctx context.Context, st Store, dir, pattern string) ([]string, error) {
	if l, ok := st.(datastore.Lister); ok {
		out, err := l.Files(ctx, join(dir, pattern))
		if errors.Is(err, datastore.ErrNoInput) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint: list %s: %w", dir, err)
		}
		return out, nil
	}
	blocks, err := st.Blocks(ctx, join(dir, pattern), 1<<62)
	if errors.Is(err, datastore.ErrNoInput) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", dir, err)
	}
	var out []string
	for _, b := range blocks {
		if len(out) == 0 || out[len(out)-1] != b.Path {
			out = append(out, b.Path)
		}
	}
	return out, nil
}

// Written describes a checkpoint Write produced.
type Written struct {
	Path    string
	Bytes   int64
	Seconds float64 // encoding and writing, after the tables were read
	Removed []string
	// RemoveErrs are old checkpoints that could not be deleted: the new
	// one is written all the same.
	RemoveErrs []error
}

// Write stores c in dir as the newest checkpoint (its Seq is set here),
// atomically, then deletes all but the newest keep of its task's own
// (c.Owns the task each records): the checkpoints of another task left in
// the dir (one interrupted, the dir reused) are neither counted nor
// deleted; before, a new task deleted them once it had written keep of
// its own. Seq follows the highest in the dir, whoever wrote it, so no
// name is reused and the newest file is the last written. A failure to
// delete an old checkpoint is not an error of the write
// (Written.RemoveErrs).
func Write(ctx context.Context, st Store, dir string, c *Checkpoint, keep int, now time.Time) (Written, error) {
	start := time.Now()
	paths, err := List(ctx, st, dir)
	if err != nil {
		return Written{}, err
	}
	c.Seq = NextSeq(paths)
	c.Created = now
	p := join(dir, Name(c.Seq))
	var n int64
	for attempt := 1; ; attempt++ {
		n, err = writeOnce(ctx, st, p, c)
		wait, again := datastore.RetryWrite(err, attempt)
		if !again {
			break
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return Written{}, err
		}
	}
	if err != nil {
		return Written{}, err
	}
	out := Written{Path: p, Bytes: n, Seconds: time.Since(start).Seconds()}
	own := []string{p}
	if len(Newest(paths)) >= max(keep, 1) {
		// Only then can one be stale: read who wrote each.
		for _, e := range Newest(paths) {
			if id, err := writerOf(ctx, st, e.Path); err == nil && c.Owns(id) {
				own = append(own, e.Path)
			}
		}
	}
	for _, e := range Stale(own, keep) {
		if err := st.Remove(ctx, e.Path); err != nil {
			out.RemoveErrs = append(out.RemoveErrs, fmt.Errorf("checkpoint: delete old %s: %w", e.Path, err))
			continue
		}
		out.Removed = append(out.Removed, e.Path)
	}
	return out, nil
}

// writeOnce writes c to p, atomically.
func writeOnce(ctx context.Context, st Store, p string, c *Checkpoint) (int64, error) {
	w, err := st.Create(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	n, err := Encode(w, c)
	if err != nil {
		datastore.Abort(w)
		return 0, fmt.Errorf("checkpoint: write %s: %w", p, err)
	}
	if err := w.Close(); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	return n, nil
}

// maxHeader bounds the header line writerOf reads: a file without one in
// that much is not a checkpoint.
const maxHeader = 64 << 20

// writerOf returns the id of the task that wrote the checkpoint at path,
// from its header line alone (the tables are not read). A file whose
// header cannot be read (empty, torn, not a checkpoint) is an error: no
// task owns it, and Write leaves it alone.
func writerOf(ctx context.Context, st Store, path string) (string, error) {
	r, err := st.Open(ctx, path, 0)
	if err != nil {
		return "", fmt.Errorf("checkpoint %s: %w", path, err)
	}
	defer r.Close()
	line, err := bufio.NewReaderSize(io.LimitReader(r, maxHeader), 64<<10).ReadBytes('\n')
	if err != nil {
		return "", fmt.Errorf("checkpoint %s: %w: no header line", path, ErrFormat)
	}
	var hdr struct {
		Checkpoint *struct {
			Task struct {
				ID string `json:"id"`
			} `json:"task"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal(line, &hdr); err != nil || hdr.Checkpoint == nil {
		return "", fmt.Errorf("checkpoint %s: %w: no checkpoint record in its header", path, ErrFormat)
	}
	return hdr.Checkpoint.Task.ID, nil
}

// Load reads the checkpoint at path.
func Load(ctx context.Context, st Store, path string) (*Checkpoint, error) {
	r, err := st.Open(ctx, path, 0)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	defer r.Close()
	c, err := Decode(r)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return c, nil
}

// LoadFile reads the checkpoint file at path (DIR/ckpt-NNNNNN.flexps): the
// one to resume from when it is not the newest in its directory.
func LoadFile(ctx context.Context, st Store, path string) (*Checkpoint, error) {
	seq, ok := ParseName(path)
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: %w: not a checkpoint file name (%s)", path, ErrFormat, pattern)
	}
	return loadEntry(ctx, st, Entry{Path: path, Seq: seq})
}

// loadEntry loads e and checks that it records the sequence number its
// name gives.
func loadEntry(ctx context.Context, st Store, e Entry) (*Checkpoint, error) {
	c, err := Load(ctx, st, e.Path)
	if err != nil {
		return nil, err
	}
	if c.Seq != e.Seq {
		return nil, fmt.Errorf("checkpoint %s: %w: it records sequence number %d (renamed?)", e.Path, ErrFormat, c.Seq)
	}
	return c, nil
}

// ErrNone is wrapped when a directory holds no usable checkpoint.
var ErrNone = errors.New("no usable checkpoint")

// isFile reports whether bs, the blocks of p, are those of p itself, a
// file: a directory's are those of the files in it.
func isFile(bs []datastore.Block, p string) bool {
	if len(bs) == 0 {
		return false
	}
	for _, b := range bs {
		if b.Path != bs[0].Path {
			return false
		}
	}
	f, d := path.Clean(bs[0].Path), path.Clean(p)
	return path.Base(f) == path.Base(d) && path.Dir(f) != d
}

// Latest loads the newest valid checkpoint in dir and returns it with its
// path and the newer files it skipped (torn, corrupt), each with why.
func Latest(ctx context.Context, st Store, dir string) (*Checkpoint, string, []Skipped, error) {
	paths, err := List(ctx, st, dir)
	if err != nil {
		return nil, "", nil, err
	}
	entries := Newest(paths)
	if len(entries) == 0 {
		bs, err := st.Blocks(ctx, dir, 1<<62)
		if errors.Is(err, fs.ErrNotExist) {
			// A mistyped directory is not an empty one.
			return nil, "", nil, fmt.Errorf("checkpoint: %s: %w: no such directory (give the job's [checkpoint] dir)", dir, ErrNone)
		}
		if err == nil && isFile(bs, dir) {
			// --resume DIR/model.bin (flexps run says so of a local one
			// before it starts; flexps submit and hdfs:// did not: "the
			// directory holds no ckpt-*.flexps files"). A checkpoint
			// file is resumed by name (LoadFile), never listed here.
			return nil, "", nil, fmt.Errorf("checkpoint: %s: %w: neither a directory nor a checkpoint file (give the job's [checkpoint] dir, or a ckpt-NNNNNN.flexps file in it)", dir, ErrNone)
		}
		return nil, "", nil, fmt.Errorf("checkpoint: %s: %w: the directory holds no %s files", dir, ErrNone, pattern)
	}
	var got *Checkpoint
	// A file that could not be read (its namenode or datanode died
	// mid-read, permission) is not torn: it is not passed over for an
	// older checkpoint, which lost the epochs between them (a checkpoint
	// read while the namenode was killed was skipped as "table truncated").
	var unreadable error
	i, skipped := Pick(entries, func(e Entry) error {
		if unreadable != nil {
			return unreadable
		}
		c, err := loadEntry(ctx, st, e)
		if err != nil && !errors.Is(err, ErrFormat) && !errors.Is(err, fs.ErrNotExist) {
			unreadable = err
		}
		if err != nil {
			return err
		}
		got = c
		return nil
	})
	if unreadable != nil {
		var torn []Skipped // the newer files skipped before it
		for _, s := range skipped {
			if s.Err == unreadable {
				break
			}
			torn = append(torn, s)
		}
		return nil, "", torn, fmt.Errorf("%w (it is not torn: an older checkpoint is not taken for it; resume again once it can be read)", unreadable)
	}
	if i < 0 {
		var why []string
		for _, s := range skipped {
			why = append(why, s.Err.Error())
		}
		sort.Strings(why)
		return nil, "", skipped, fmt.Errorf("checkpoint: %s: %w: %s", dir, ErrNone, strings.Join(why, "; "))
	}
	return got, entries[i].Path, skipped, nil
}
