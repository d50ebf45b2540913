package datastore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Sources routes each path to its Source: hdfs:// URLs to one shared
// HDFSSource, everything else to the local disk. It is itself a Source.
type Sources struct {
	HDFS HDFSConfig

	once  sync.Once
	hdfs  *HDFSSource
	herr  error
	local LocalSource
}

// NewSources returns a router using cfg for hdfs:// paths.
func NewSources(cfg HDFSConfig) *Sources { return &Sources{HDFS: cfg} }

func (s *Sources) For(path string) (Source, error) {
	if !IsHDFS(path) {
		return &s.local, nil
	}
	s.once.Do(func() { s.hdfs, s.herr = NewHDFSSource(s.HDFS) })
	return s.hdfs, s.herr
}

// Blocks lists pattern's blocks on its source.
func (s *Sources) Blocks(ctx context.Context, pattern string, blockSize int64) ([]Block, error) {
	src, err := s.For(pattern)
	if err != nil {
		return nil, err
	}
	return src.Blocks(ctx, pattern, blockSize)
}

// Open opens path on its source.
func (s *Sources) Open(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	src, err := s.For(path)
	if err != nil {
		return nil, err
	}
	return src.Open(ctx, path, offset)
}

// Create opens path for writing; the file appears under its name only when
// Close succeeds, so nothing half-written is left behind.
func (s *Sources) Create(ctx context.Context, path string) (io.WriteCloser, error) {
	if IsHDFS(path) {
		src, err := s.For(path)
		if err != nil {
			return nil, err
		}
		return src.(*HDFSSource).Create(ctx, path)
	}
	path = trimFileScheme(path)
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("datastore: create %s: %w", path, err)
		}
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("datastore: create %s: %w", path, err)
	}
	// CreateTemp makes 0600; a model or data file is read by other users
	// and processes like any file os.Create writes.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("datastore: create %s: %w", path, err)
	}
	return &atomicFile{File: f, final: path}, nil
}

// Close releases the HDFS connection, if any.
func (s *Sources) Close() error {
	if s.hdfs != nil {
		return s.hdfs.Close()
	}
	return nil
}

// Aborter is implemented by writers from Create: Abort discards what was
// written, leaving nothing under the final name.
type Aborter interface{ Abort() }

// Abort closes w without publishing it when it supports that.
func Abort(w io.WriteCloser) {
	if a, ok := w.(Aborter); ok {
		a.Abort()
		return
	}
	w.Close()
}

type atomicFile struct {
	*os.File
	final string
}

// Abort removes the temporary file.
func (f *atomicFile) Abort() {
	f.File.Close()
	os.Remove(f.Name())
}

func (f *atomicFile) Close() error {
	if err := f.File.Close(); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("datastore: write %s: %w", f.final, err)
	}
	if err := os.Rename(f.Name(), f.final); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("datastore: write %s: %w", f.final, err)
	}
	return nil
}
