package datastore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// LocalSource reads files from the local file system. Its blocks name the
// local host, so locality logic treats them as local wherever they are read
// (a local path is expected to exist on every node, e.g. a shared mount).
// The zero value is ready to use.
type LocalSource struct {
	once sync.Once
	host string
}

// NewLocalSource returns a LocalSource.
func NewLocalSource() *LocalSource { return &LocalSource{} }

// DefaultBlockSize is the block size used when Blocks is given blockSize <= 0.
const DefaultBlockSize = 64 << 20

func (s *LocalSource) hostname() string {
	s.once.Do(func() {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "localhost"
		}
		s.host = h
	})
	return s.host
}

func trimFileScheme(p string) string { return strings.TrimPrefix(p, "file://") }

// Blocks expands pattern: a file, a directory (its regular files, not
// recursive, skipping names that start with '.' or '_', like Hadoop's
// _SUCCESS), or a filepath.Glob pattern (each matched directory its
// files, as a directory input; a match through a hidden name skipped
// unless the pattern asks for it there, HiddenMatch), as hdfs.Source expands an
// hdfs:// one; a "file://" prefix is accepted.
// Files are taken in name order; empty files contribute no blocks.
func (s *LocalSource) Blocks(ctx context.Context, pattern string, blockSize int64) ([]Block, error) {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	files, err := s.expand(pattern)
	if err != nil {
		return nil, err
	}
	host := s.hostname()
	var blocks []Block
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		size := f.size
		if size == 0 {
			continue
		}
		if strings.HasSuffix(f.path, ".gz") {
			blocks = append(blocks, Block{Path: f.path, Offset: 0, Length: size, Hosts: []string{host}, Whole: true, FileSize: size})
			continue
		}
		for off := int64(0); off < size; off += blockSize {
			blocks = append(blocks, Block{Path: f.path, Offset: off, Length: min(blockSize, size-off), Hosts: []string{host}, FileSize: size})
		}
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("datastore: input %q: every matched file is empty: %w", pattern, ErrNoInput)
	}
	return blocks, nil
}

// Files lists the files pattern matches, as Blocks expands it, empty
// ones included.
func (s *LocalSource) Files(ctx context.Context, pattern string) ([]string, error) {
	files, err := s.expand(pattern)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.path
	}
	return out, nil
}

type localFile struct {
	path string
	size int64
}

// listDir lists the data files directly in directory p, in name order,
// skipping names that start with '.' or '_', and counts its
// subdirectories, which a directory input does not read.
func listDir(p string) (files []localFile, subdirs int, err error) {
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, 0, fmt.Errorf("datastore: input %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if Hidden(name) {
			continue
		}
		full := filepath.Join(p, name)
		fi, err := os.Stat(full) // follows symlinks
		if err != nil {
			return nil, 0, fmt.Errorf("datastore: input %w", err)
		}
		if fi.Mode().IsRegular() {
			files = append(files, localFile{full, fi.Size()})
		} else if fi.IsDir() {
			subdirs++
		}
	}
	return files, subdirs, nil
}

// SkippedSubdirs is how many subdirectories the directory input pattern
// holds beside its files, which Blocks does not read (0 for a file, a
// glob, or a directory without files: Blocks refuses that one itself).
func (s *LocalSource) SkippedSubdirs(ctx context.Context, pattern string) (int, error) {
	p := trimFileScheme(pattern)
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		return 0, nil
	}
	files, subdirs, err := listDir(p)
	if err != nil || len(files) == 0 {
		return 0, err
	}
	return subdirs, nil
}

func (s *LocalSource) expand(pattern string) ([]localFile, error) {
	p := trimFileScheme(pattern)
	if p == "" {
		return nil, fmt.Errorf("datastore: empty input path: %w", ErrNoInput)
	}
	st, err := os.Stat(p)
	switch {
	case err == nil && st.IsDir():
		files, subdirs, err := listDir(p)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("datastore: input directory %q holds no data files%s: %w", pattern, SubdirsHint(pattern, subdirs), ErrNoInput)
		}
		return files, nil // ReadDir sorts by name
	case err == nil:
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("datastore: input %q is not a regular file", pattern)
		}
		return []localFile{{p, st.Size()}}, nil
	case !strings.ContainsAny(p, "*?[") || !errors.Is(err, fs.ErrNotExist):
		// os errors name the path.
		return nil, fmt.Errorf("datastore: input %w", err)
	}
	matches, gerr := filepath.Glob(p)
	if gerr != nil {
		return nil, fmt.Errorf("datastore: input pattern %q: %w", pattern, gerr)
	}
	sort.Strings(matches)
	// As on HDFS (and Hadoop's inputs): a matched directory stands for
	// the files directly in it, and hidden names ('.', '_') are not data
	// unless the pattern names them (HiddenMatch). Until now a glob here
	// left matched directories out and read _SUCCESS and .crc files.
	var files []localFile
	for _, m := range matches {
		if HiddenMatch(filepath.ToSlash(filepath.Clean(p)), filepath.ToSlash(m)) {
			continue
		}
		fi, err := os.Stat(m)
		if err != nil {
			return nil, fmt.Errorf("datastore: input %w", err)
		}
		switch {
		case fi.Mode().IsRegular():
			files = append(files, localFile{m, fi.Size()})
		case fi.IsDir():
			sub, _, err := listDir(m)
			if err != nil {
				return nil, err
			}
			files = append(files, sub...)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("datastore: input pattern %q matches no file: %w", pattern, ErrNoInput)
	}
	return files, nil
}

// Open opens path at byte offset.
func (s *LocalSource) Open(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(trimFileScheme(path))
	if err != nil {
		return nil, err
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, fmt.Errorf("seek %s to %d: %w", path, offset, err)
		}
	}
	return f, nil
}
