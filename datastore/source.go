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

// Opener makes the Source for one URL scheme; a Sources router calls it
// on the first path of that scheme, so a cluster that is never used is
// never dialed.
type Opener func() (Source, error)

// Creator is implemented by sources that can write files (the model
// output): the file appears under its name only when Close succeeds.
type Creator interface {
	Create(ctx context.Context, path string) (io.WriteCloser, error)
}

var schemes = struct {
	sync.Mutex
	m map[string]Opener
}{m: map[string]Opener{}}

// RegisterScheme makes every later NewSources serve scheme:// URLs with
// open, unless a router overrides it with Handle. Source packages register
// themselves in init (package datastore/hdfs does for "hdfs", with its
// configuration from the environment), so a program reads hdfs:// URLs
// when it imports that package, and the core of datastore, which stage
// code and the master's assigner use, does not pull in the HDFS client.
func RegisterScheme(scheme string, open Opener) {
	schemes.Lock()
	defer schemes.Unlock()
	schemes.m[strings.ToLower(scheme)] = open
}

// Scheme returns the lower-cased URL scheme of path ("hdfs" for
// hdfs://nn/x), or "" for a plain path. "file" URLs are local paths.
func Scheme(path string) string {
	i := strings.Index(path, "://")
	if i <= 0 {
		return ""
	}
	for j, c := range path[:i] {
		alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alpha && (j == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return ""
		}
	}
	return strings.ToLower(path[:i])
}

// Sources routes each path to its Source by URL scheme: plain paths and
// file:// URLs to the local disk, other schemes to the source registered
// for them (RegisterScheme, or Handle on this router). It is itself a
// Source and a Creator. Sources are opened on first use and shared by
// every path of their scheme.
type Sources struct {
	mu      sync.Mutex
	openers map[string]Opener
	opened  map[string]*opened
	local   LocalSource
	policy  *PathPolicy
}

// Restrict makes the router refuse every path p does not allow, before it
// is opened or listed (each file a pattern expands to is checked too). A
// nil p allows every path. It returns s.
func (s *Sources) Restrict(p *PathPolicy) *Sources {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policy = p
	return s
}

// Check reports whether the router's policy allows path (see Restrict).
func (s *Sources) Check(path string) error {
	s.mu.Lock()
	p := s.policy
	s.mu.Unlock()
	return p.Check(path)
}

type opened struct {
	once sync.Once
	src  Source
	err  error
}

// NewSources returns a router serving the schemes registered so far.
func NewSources() *Sources {
	schemes.Lock()
	defer schemes.Unlock()
	s := &Sources{openers: make(map[string]Opener, len(schemes.m)), opened: map[string]*opened{}}
	for k, v := range schemes.m {
		s.openers[k] = v
	}
	return s
}

// Handle serves scheme:// URLs of this router with open (for example an
// HDFS source configured from the cluster's configuration file rather than
// the environment). Call it before the router's first use of the scheme.
func (s *Sources) Handle(scheme string, open Opener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.openers[strings.ToLower(scheme)] = open
}

// For returns the source serving path. An unknown scheme is an error
// naming the path and the schemes this router serves.
func (s *Sources) For(path string) (Source, error) {
	scheme := Scheme(path)
	if scheme == "" || scheme == "file" {
		return &s.local, nil
	}
	s.mu.Lock()
	open, ok := s.openers[scheme]
	o := s.opened[scheme]
	if ok && o == nil {
		o = &opened{}
		s.opened[scheme] = o
	}
	known := make([]string, 0, len(s.openers))
	for k := range s.openers {
		known = append(known, k+"://")
	}
	s.mu.Unlock()
	if !ok {
		sort.Strings(known)
		hint := ""
		if scheme == "hdfs" {
			hint = " (a Go program enables hdfs:// by importing github.com/flexps/flexps/datastore/hdfs)"
		}
		return nil, fmt.Errorf("datastore: %s: no source for scheme %q; this program reads local paths, file://%s%s",
			path, scheme, strings.Join(append([]string{""}, known...), ", "), hint)
	}
	o.once.Do(func() { o.src, o.err = open() })
	return o.src, o.err
}

// Canonicalizer is implemented by sources whose URLs spell one file in
// several ways (hdfs:///p, hdfs://nameservice/p and hdfs://nn:8020//p).
type Canonicalizer interface {
	// Canonical is path's one spelling; path as is when it cannot say.
	Canonical(path string) string
}

// Canonical is path's one spelling on its source (see Canonicalizer), for
// comparing paths (an output against its task's input files); a local
// path, or one whose source has a single spelling, as is.
func (s *Sources) Canonical(path string) string {
	if sc := Scheme(path); sc == "" || sc == "file" {
		return path
	}
	src, err := s.For(path)
	if err != nil {
		return path
	}
	if c, ok := src.(Canonicalizer); ok {
		return c.Canonical(path)
	}
	return path
}

// Blocks lists pattern's blocks on its source.
func (s *Sources) Blocks(ctx context.Context, pattern string, blockSize int64) ([]Block, error) {
	if err := s.Check(pattern); err != nil {
		return nil, err
	}
	src, err := s.For(pattern)
	if err != nil {
		return nil, err
	}
	blocks, err := src.Blocks(ctx, pattern, blockSize)
	if err != nil {
		return nil, err
	}
	last := ""
	for _, b := range blocks {
		if b.Path != last {
			if err := s.Check(b.Path); err != nil {
				return nil, err
			}
			last = b.Path
		}
	}
	return blocks, nil
}

// SubdirCounter is a Source that can count the subdirectories a
// directory input holds beside its files, which Blocks does not read.
type SubdirCounter interface {
	SkippedSubdirs(ctx context.Context, pattern string) (int, error)
}

// SkippedSubdirs is how many subdirectories the directory input pattern
// holds beside its data files: Blocks reads only the files directly in a
// directory, so their files are not read (0 when pattern's source cannot
// tell, or pattern is a file or a glob).
func (s *Sources) SkippedSubdirs(ctx context.Context, pattern string) (int, error) {
	src, err := s.For(pattern)
	if err != nil {
		return 0, err
	}
	if c, ok := src.(SubdirCounter); ok {
		return c.SkippedSubdirs(ctx, pattern)
	}
	return 0, nil
}

// Open opens path on its source.
func (s *Sources) Open(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	if err := s.Check(path); err != nil {
		return nil, err
	}
	src, err := s.For(path)
	if err != nil {
		return nil, err
	}
	return src.Open(ctx, path, offset)
}

// Create opens path for writing on its source; the file appears under its
// name only when Close succeeds, so nothing half-written is left behind.
func (s *Sources) Create(ctx context.Context, path string) (io.WriteCloser, error) {
	if err := s.Check(path); err != nil {
		return nil, err
	}
	src, err := s.For(path)
	if err != nil {
		return nil, err
	}
	c, ok := src.(Creator)
	if !ok {
		return nil, fmt.Errorf("datastore: create %s: the %s source cannot write files", path, Scheme(path))
	}
	return c.Create(ctx, path)
}

// Lister is implemented by sources that can list the files a pattern
// matches, empty ones included (Blocks skips empty files, which is right
// for input but would hide a 0-byte checkpoint from the resume that
// should warn about it).
type Lister interface {
	Files(ctx context.Context, pattern string) ([]string, error)
}

// Files lists the files pattern matches on its source, empty ones
// included; a source that cannot list them falls back to the files of
// its Blocks.
func (s *Sources) Files(ctx context.Context, pattern string) ([]string, error) {
	if err := s.Check(pattern); err != nil {
		return nil, err
	}
	src, err := s.For(pattern)
	if err != nil {
		return nil, err
	}
	var files []string
	if l, ok := src.(Lister); ok {
		files, err = l.Files(ctx, pattern)
	} else {
		var blocks []Block
		blocks, err = src.Blocks(ctx, pattern, 1<<62)
		for _, b := range blocks {
			if len(files) == 0 || files[len(files)-1] != b.Path {
				files = append(files, b.Path)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := s.Check(f); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// Remover is implemented by sources that can delete files (old
// checkpoints).
type Remover interface {
	Remove(ctx context.Context, path string) error
}

// Remove deletes the file at path on its source.
func (s *Sources) Remove(ctx context.Context, path string) error {
	if err := s.Check(path); err != nil {
		return err
	}
	src, err := s.For(path)
	if err != nil {
		return err
	}
	r, ok := src.(Remover)
	if !ok {
		return fmt.Errorf("datastore: remove %s: the %s source cannot delete files", path, Scheme(path))
	}
	return r.Remove(ctx, path)
}

// Remove deletes path on the local disk.
func (s *LocalSource) Remove(ctx context.Context, path string) error {
	if err := os.Remove(trimFileScheme(path)); err != nil {
		return fmt.Errorf("datastore: %w", err)
	}
	return nil
}

// Close closes every source this router opened.
func (s *Sources) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, o := range s.opened {
		if c, ok := o.src.(io.Closer); ok && o.err == nil {
			errs = append(errs, c.Close())
		}
	}
	s.opened = map[string]*opened{}
	return errors.Join(errs...)
}

// Create writes path on the local disk through a temporary file renamed
// into place by Close.
func (s *LocalSource) Create(ctx context.Context, path string) (io.WriteCloser, error) {
	path = trimFileScheme(path)
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		// Refused here, by the master's probe at submission, rather than
		// by the rename after training.
		return nil, fmt.Errorf("datastore: create %s: is a directory (name a file in it)", path)
	}
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

// RemoveStaleTemps removes the temporary files Create left next to the
// local file path (".NAME.tmp*") when the process writing it died before
// it renamed or removed them (kill -9 of the master while it wrote a
// model): a restarted master calls it before it writes the file again.
// It returns the paths removed; a path on another file system
// (hdfs://) is left alone.
func RemoveStaleTemps(path string) ([]string, error) {
	if sc := Scheme(path); sc != "" && sc != "file" {
		return nil, nil
	}
	path = trimFileScheme(path)
	base := filepath.Base(path)
	return removeTemps(filepath.Dir(path), func(name string) bool { return name == base })
}

// RemoveStaleTemps is the package's RemoveStaleTemps for a local path,
// and for a URL (hdfs://) the same on its source: the ".NAME.tmp*" files
// beside it, listed and removed there (a restarted master removed a local
// output's and left an hdfs:// one's for good).
func (s *Sources) RemoveStaleTemps(ctx context.Context, path string) ([]string, error) {
	if sc := Scheme(path); sc == "" || sc == "file" {
		return RemoveStaleTemps(path)
	}
	i := strings.LastIndexByte(path, '/')
	if i < 0 || i == len(path)-1 {
		return nil, nil
	}
	// The name as a glob of itself: "[", "*", "?" and "\\" escaped.
	base := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`).Replace(path[i+1:])
	temps, err := s.Files(ctx, path[:i+1]+"."+base+".tmp*")
	if errors.Is(err, ErrNoInput) || errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, t := range temps {
		if err := s.Remove(ctx, t); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, err
		}
		removed = append(removed, t)
	}
	return removed, nil
}

// RemoveStaleTempsOf is RemoveStaleTemps of every file in local dir whose
// name matches glob (filepath.Match): a restarted master's checkpoint dir,
// where its predecessor may have died writing any checkpoint. The caller
// must know that nothing writes there now (it holds the dir's lock).
func RemoveStaleTempsOf(dir, glob string) ([]string, error) {
	if sc := Scheme(dir); sc != "" && sc != "file" {
		return nil, nil
	}
	return removeTemps(trimFileScheme(dir), func(name string) bool {
		ok, _ := filepath.Match(glob, name)
		return ok
	})
}

// removeTemps removes the temporary files (".NAME.tmp*") in dir of the
// names match accepts, and returns their paths.
func removeTemps(dir string, match func(name string) bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("datastore: %s: %w", dir, err)
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		i := strings.LastIndex(name, ".tmp")
		if !e.Type().IsRegular() || !strings.HasPrefix(name, ".") || i < 1 || !match(name[1:i]) {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("datastore: %w", err)
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// Hidden reports whether a file or directory name is not data: it starts
// with '.' or '_', as Hadoop's _SUCCESS, _logs and .crc files do.
func Hidden(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// HiddenMatch reports whether match, a path the glob pattern matched,
// passes through a hidden name (see Hidden) where the pattern did not ask
// for one: "d/*/part-0" matching "d/_temporary/part-0", "d/*" matching
// "d/_SUCCESS". Such a match is not data; "d/_*" asks for it.
func HiddenMatch(pattern, match string) bool {
	ps := strings.Split(strings.Trim(pattern, "/"), "/")
	ms := strings.Split(strings.Trim(match, "/"), "/")
	for i := 1; i <= min(len(ps), len(ms)); i++ {
		if Hidden(ms[len(ms)-i]) && !Hidden(ps[len(ps)-i]) {
			return true
		}
	}
	return false
}

// SubdirsHint is what the error of a directory input without data files
// adds when the directory holds subdirectories (Hive-style partitions,
// dt=2024-01-01/): a directory input reads the files directly in it, the
// glob DIR/*/* those of its subdirectories, locally and on HDFS.
func SubdirsHint(dir string, subdirs int) string {
	if subdirs == 0 {
		return ""
	}
	noun := "subdirectories"
	if subdirs == 1 {
		noun = "subdirectory"
	}
	return fmt.Sprintf(" (only %d %s, which a directory input does not read: to read their files, give the glob %s/*/*)",
		subdirs, noun, strings.TrimRight(dir, "/"))
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
	// Flushed to disk before it takes the final name: after a crash the
	// name holds either the previous file or this one whole.
	if err := f.File.Sync(); err != nil {
		f.File.Close()
		os.Remove(f.Name())
		return fmt.Errorf("datastore: write %s: %w", f.final, err)
	}
	if err := f.File.Close(); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("datastore: write %s: %w", f.final, err)
	}
	if err := os.Rename(f.Name(), f.final); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("datastore: write %s: %w", f.final, err)
	}
	// The rename itself is durable only once the directory is synced.
	d, err := os.Open(filepath.Dir(f.final))
	if err != nil {
		return fmt.Errorf("datastore: write %s: sync directory: %w", f.final, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("datastore: write %s: sync directory: %w", f.final, err)
	}
	return nil
}
