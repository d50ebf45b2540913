package synth

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Spec is a data set to generate, as `flexps gen` and a job file's
// [input.NAME.generate] table describe it.
type Spec struct {
	Kind     string  `toml:"kind"` // libsvm (default) or ratings
	Rows     int     `toml:"rows"`
	Dim      int     `toml:"dim"`
	NNZ      int     `toml:"nnz"`
	Zipf     float64 `toml:"zipf"`
	Noise    float64 `toml:"noise"`
	Seed     int64   `toml:"seed"`
	TestPath string  `toml:"test_path"` // also write a held-out file here
	TestRows int     `toml:"test_rows"` // rows in the held-out file
	Users    int     `toml:"users"`     // ratings
	Items    int     `toml:"items"`     // ratings
	Rank     int     `toml:"rank"`      // ratings
}

// Check reports the first setting of gs that Generate refuses, with its
// key (the TOML name of the Spec field: "rows", "test_rows"), so that a
// job file's [input.NAME.generate] is refused when the job is read,
// naming the line, and `flexps gen` names its flag. Generate checks gs
// with it too: before, a bad spec surfaced only once its file was
// written, and a negative rank or test_rows was silently replaced.
func (gs Spec) Check() (key string, err error) {
	switch gs.Kind {
	case "", "libsvm":
		switch {
		case gs.Rows < 0:
			return "rows", fmt.Errorf("rows: want >= 0, got %d", gs.Rows)
		case gs.Dim <= 0:
			return "dim", fmt.Errorf("dim: want > 0 feature dimensions, got %d", gs.Dim)
		case gs.NNZ <= 0 || gs.NNZ > gs.Dim:
			return "nnz", fmt.Errorf("nnz: want non-zeros per row in [1, dim = %d], got %d", gs.Dim, gs.NNZ)
		case !(gs.Zipf == 0 || gs.Zipf > 1 && !math.IsInf(gs.Zipf, 1)):
			return "zipf", fmt.Errorf("zipf: want a finite exponent > 1, or 0 for uniform ids, got %v", gs.Zipf)
		case !(gs.Noise >= 0 && gs.Noise <= 1):
			return "noise", fmt.Errorf("noise: want a label flip probability in [0, 1], got %v", gs.Noise)
		}
	case "ratings":
		switch {
		case gs.Rows < 0:
			return "rows", fmt.Errorf("rows: want >= 0 ratings, got %d", gs.Rows)
		case gs.Users <= 0:
			return "users", fmt.Errorf("users: want > 0, got %d", gs.Users)
		case gs.Items <= 0:
			return "items", fmt.Errorf("items: want > 0, got %d", gs.Items)
		case gs.Rank < 0:
			return "rank", fmt.Errorf("rank: want >= 1 (0: 1), got %d", gs.Rank)
		case !(gs.Noise >= 0) || math.IsInf(gs.Noise, 1):
			return "noise", fmt.Errorf("noise: want a finite standard deviation >= 0, got %v", gs.Noise)
		}
	default:
		return "kind", fmt.Errorf("kind: want libsvm or ratings, got %q", gs.Kind)
	}
	// A setting of the other kind was ignored without a word: dim = 50 on
	// kind = "ratings" wrote the ratings it always writes.
	kind, otherKind, other := "libsvm", "ratings", []struct {
		key string
		set bool
	}{{"users", gs.Users != 0}, {"items", gs.Items != 0}, {"rank", gs.Rank != 0}}
	if gs.Kind == "ratings" {
		kind, otherKind, other = "ratings", "libsvm", []struct {
			key string
			set bool
		}{{"dim", gs.Dim != 0}, {"nnz", gs.NNZ != 0}, {"zipf", gs.Zipf != 0}}
	}
	for _, o := range other {
		if o.set {
			return o.key, fmt.Errorf("%s: a %s setting, not read by kind %s", o.key, otherKind, kind)
		}
	}
	if gs.TestRows < 0 {
		return "test_rows", fmt.Errorf("test_rows: want >= 0 (0: rows/5), got %d", gs.TestRows)
	}
	return "", nil
}

// ErrSameFile is wrapped when the held-out file is the training file: a
// mistake in the arguments, which a command reports as a usage error.
var ErrSameFile = errors.New("is the training file")

// Generate writes the data gs describes to path (and gs.TestPath): train
// and test rows come from one seeded stream, so they share the hidden
// model. Files are written to a temporary name and renamed when complete.
func Generate(path string, gs Spec) error {
	return GenerateContext(context.Background(), path, gs)
}

// GenerateContext is Generate, stopped when ctx ends (a Ctrl-C of `flexps
// gen`): the temporary files are removed, nothing is renamed, and the
// error wraps ctx's.
func GenerateContext(ctx context.Context, path string, gs Spec) error {
	if _, err := gs.Check(); err != nil {
		return fmt.Errorf("gen %s: %w", path, err)
	}
	kind := gs.Kind
	if kind == "" {
		kind = "libsvm"
	}
	testRows := 0
	if gs.TestPath != "" {
		testRows = gs.TestRows
		if testRows <= 0 {
			testRows = max(gs.Rows/5, 1)
		}
	}
	files := []string{path}
	if gs.TestPath != "" {
		files = append(files, gs.TestPath)
	}
	for i, p := range files {
		// os would take hdfs://nn/x for a relative path and write
		// ./hdfs:/nn/x, which `flexps gen` then reported as written.
		scheme, rest, ok := strings.Cut(p, "://")
		if ok && strings.EqualFold(scheme, "file") {
			files[i] = rest
		} else if ok && scheme != "" && !strings.ContainsAny(scheme, "/\\") {
			return fmt.Errorf("gen %s: writes local files only: generate it locally, then copy it there", p)
		}
	}
	for i, p := range files {
		// Checked before generating: the rename at the end would fail
		// with "file exists" after all the work.
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return fmt.Errorf("gen %s: is a directory: give the file to write", []string{path, gs.TestPath}[i])
		}
	}
	if len(files) == 2 && samePath(files[0], files[1]) {
		// The held-out rows would be renamed over the training rows.
		return fmt.Errorf("gen %s: the held-out file %s %w: give it another name", path, gs.TestPath, ErrSameFile)
	}
	var outs []*os.File
	cleanup := func() {
		for _, f := range outs {
			f.Close()
			os.Remove(f.Name())
		}
	}
	for _, p := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			cleanup()
			return fmt.Errorf("gen: %w", err)
		}
		f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp*")
		if err != nil {
			cleanup()
			return fmt.Errorf("gen: %w", err)
		}
		outs = append(outs, f)
		// CreateTemp makes 0600; data files are shared with other users
		// and processes like any file written with os.Create.
		if err := f.Chmod(0o644); err != nil {
			cleanup()
			return fmt.Errorf("gen: %w", err)
		}
	}
	bufs := make([]*bufio.Writer, len(outs))
	for i, f := range outs {
		bufs[i] = bufio.NewWriterSize(f, 1<<20)
	}
	var w io.Writer = bufs[0]
	if len(bufs) > 1 {
		w = &lineSplitter{first: bufs[0], second: bufs[1], left: gs.Rows}
	}
	w = ctxWriter{ctx, w}
	var err error
	switch kind {
	case "libsvm":
		_, err = WriteLIBSVM(w, LIBSVMConfig{Rows: gs.Rows + testRows, Dim: gs.Dim, NNZ: gs.NNZ, Zipf: gs.Zipf, Seed: gs.Seed, Noise: gs.Noise})
	case "ratings":
		err = WriteRatings(w, RatingsConfig{Users: gs.Users, Items: gs.Items, Rank: max(gs.Rank, 1), Ratings: gs.Rows + testRows, Seed: gs.Seed, Noise: gs.Noise})
	default:
		err = fmt.Errorf("unknown kind %q (libsvm or ratings)", kind)
	}
	for _, b := range bufs {
		if err == nil {
			err = b.Flush()
		}
	}
	if err != nil {
		cleanup()
		return fmt.Errorf("gen %s: %w", path, err)
	}
	for i, f := range outs {
		if err := f.Close(); err != nil {
			cleanup()
			return fmt.Errorf("gen %s: %w", files[i], err)
		}
		if err := os.Rename(f.Name(), files[i]); err != nil {
			cleanup()
			return fmt.Errorf("gen %s: %w", files[i], err)
		}
	}
	return nil
}

// samePath reports whether local paths a and b name one file: the same
// path however spelled, or, when both exist, the same file under two
// names (a link).
func samePath(a, b string) bool {
	aa, errA := filepath.Abs(a)
	ab, errB := filepath.Abs(b)
	if errA == nil && errB == nil && aa == ab {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// ctxWriter fails every write once ctx ended. The generators write
// through a buffer of their own, so it is asked every 64 KiB.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// lineSplitter sends the first `left` lines to first, the rest to second.
type lineSplitter struct {
	first, second io.Writer
	left          int
}

func (s *lineSplitter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 && s.left > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			m, err := s.first.Write(p)
			return n + m, err
		}
		m, err := s.first.Write(p[:i+1])
		n += m
		if err != nil {
			return n, err
		}
		p = p[i+1:]
		s.left--
	}
	if len(p) == 0 {
		return n, nil
	}
	m, err := s.second.Write(p)
	return n + m, err
}
