// Package hdfs serves hdfs:// URLs to the datastore: importing it registers
// the "hdfs" scheme with datastore.RegisterScheme (configured from
// $HADOOP_CONF_DIR), and a router serves a cluster configured otherwise
// with Sources.Handle("hdfs", hdfs.Opener(cfg)). It lives apart from the
// datastore core so that programs and packages that never read HDFS (stage
// code, the master's assigner) do not link its client, protobuf and
// Kerberos dependencies.
//
// Metadata and bytes go through the namenode RPC protocol
// (github.com/colinmarc/hdfs); block locations come from the namenode's
// WebHDFS endpoint (op=GETFILEBLOCKLOCATIONS, or GET_BLOCK_LOCATIONS on
// older namenodes), because the RPC client does not expose them. Without
// WebHDFS, Blocks still returns the file's HDFS block layout (from its block
// size) but without hosts, and counts a fallback in Stats.
package hdfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gohdfs "github.com/colinmarc/hdfs/v2"
	"github.com/colinmarc/hdfs/v2/hadoopconf"
	"github.com/flexps/flexps/datastore"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
)

// DefaultPort is the namenode RPC port assumed for hdfs://host/ URLs.
const DefaultPort = "8020"

// DefaultWebPort is the namenode HTTP port tried when Config.HTTPAddr is empty.
const DefaultWebPort = "9870"

// Config says how to reach an HDFS cluster. The zero value works for
// hdfs://host:port/ URLs, acting as $HADOOP_USER_NAME or the OS user.
type Config struct {
	// Namenodes (host:port) serve hdfs:///path URLs (no host) and
	// hdfs://name/path URLs whose name has no port (an HA nameservice).
	// A URL naming host:port is served by that namenode.
	Namenodes []string
	// User is the HDFS user (simple authentication); default
	// $HADOOP_USER_NAME, else the OS user. Kerberos is not supported.
	User string
	// HTTPAddr is the namenode's HTTP address (host:port) for WebHDFS block
	// locations, used for the namenodes in Namenodes. Empty means
	// <namenode host>:9870.
	HTTPAddr string
	// Timeout bounds dialing and each namenode or datanode round trip
	// (default 10s): an unreachable cluster fails instead of hanging.
	Timeout time.Duration
	// UseDatanodeHostname dials datanodes by the hostname they registered
	// under rather than their IP (dfs.client.use.datanode.hostname).
	UseDatanodeHostname bool
	// Logger receives warnings (WebHDFS unreachable); nil means zerolog's
	// global logger.
	Logger *zerolog.Logger
}

// ConfigFromEnv reads the Hadoop configuration in $HADOOP_CONF_DIR (or
// $HADOOP_HOME/conf): namenodes from fs.defaultFS or
// dfs.namenode.rpc-address*, the HTTP address from
// dfs.namenode.http-address*, and dfs.client.use.datanode.hostname. With no
// configuration it returns a config that only serves URLs naming their
// namenode.
func ConfigFromEnv() (Config, error) {
	conf, err := hadoopconf.LoadFromEnvironment()
	if err != nil {
		return Config{}, fmt.Errorf("datastore: hadoop configuration: %w", err)
	}
	cfg := Config{Namenodes: conf.Namenodes()}
	var httpKeys []string
	for k := range conf {
		if k == "dfs.namenode.http-address" || strings.HasPrefix(k, "dfs.namenode.http-address.") {
			httpKeys = append(httpKeys, k)
		}
	}
	sort.Strings(httpKeys) // deterministic; the plain key sorts first
	if len(httpKeys) > 0 {
		cfg.HTTPAddr = conf[httpKeys[0]]
		// A wildcard bind address means "the namenode's host".
		if h, p, err := net.SplitHostPort(cfg.HTTPAddr); err == nil && (h == "0.0.0.0" || h == "" || h == "::") && len(cfg.Namenodes) > 0 {
			if nh, _, err := net.SplitHostPort(cfg.Namenodes[0]); err == nil {
				cfg.HTTPAddr = net.JoinHostPort(nh, p)
			}
		}
	}
	cfg.UseDatanodeHostname = conf["dfs.client.use.datanode.hostname"] == "true"
	return cfg, nil
}

// IsURL reports whether path is an hdfs:// URL.
func IsURL(path string) bool {
	return len(path) >= 7 && strings.EqualFold(path[:7], "hdfs://")
}

func init() {
	datastore.RegisterScheme("hdfs", func() (datastore.Source, error) {
		cfg, err := ConfigFromEnv()
		if err != nil {
			return nil, err
		}
		return New(cfg)
	})
}

// Opener returns a datastore.Opener making a Source with cfg, for
// datastore.Sources.Handle.
func Opener(cfg Config) datastore.Opener {
	return func() (datastore.Source, error) { return New(cfg) }
}

// NewSources returns a datastore router that serves hdfs:// URLs with cfg
// (and local paths, and any other registered scheme).
func NewSources(cfg Config) *datastore.Sources {
	s := datastore.NewSources()
	s.Handle("hdfs", Opener(cfg))
	return s
}

// Stats counts what a Source did.
type Stats struct {
	Connects          int64 // namenode clients created
	LocationLookups   int64 // WebHDFS block-location requests that succeeded
	LocationFallbacks int64 // files whose blocks were computed without hosts
}

// Source reads hdfs:// URLs. It connects lazily, one client per
// namenode set, and is safe for concurrent use.
//
// Block.Hosts holds the hostnames the namenode reports for the datanodes
// holding a replica (their dfs.datanode.hostname, as Hadoop's
// BlockLocation.getHosts does); a MiniHDFS from internal/hdfstest names
// its datanodes dn0.localhost, dn1.localhost, ...
type Source struct {
	cfg  Config
	http *http.Client
	log  zerolog.Logger

	mu      sync.Mutex
	clients map[string]*gohdfs.Client
	conns   map[string]*connSet // each client's namenode connections
	closed  bool

	connects, lookups, fallbacks atomic.Int64

	// dialDatanode replaces the dialer for datanode connections (tests
	// point it at a datanode that stalls); nil dials for real.
	dialDatanode func(ctx context.Context, network, addr string) (net.Conn, error)
}

// New validates cfg and returns a source; it does not connect.
func New(cfg Config) (*Source, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.User == "" {
		cfg.User = os.Getenv("HADOOP_USER_NAME")
	}
	if cfg.User == "" {
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("datastore: hdfs: no user given and no OS user: %w", err)
		}
		cfg.User = u.Username
	}
	for _, nn := range cfg.Namenodes {
		if _, _, err := net.SplitHostPort(nn); err != nil {
			return nil, fmt.Errorf("datastore: hdfs namenode %q: want host:port: %w", nn, err)
		}
	}
	s := &Source{
		cfg: cfg,
		// Its own transport, so Close can drop its idle connections.
		http:    &http.Client{Timeout: cfg.Timeout, Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: cfg.Timeout}).DialContext, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second}},
		clients: make(map[string]*gohdfs.Client),
		conns:   make(map[string]*connSet),
	}
	if cfg.Logger != nil {
		s.log = *cfg.Logger
	} else {
		s.log = log.Logger
	}
	return s, nil
}

// Stats returns counters of what s has done.
func (s *Source) Stats() Stats {
	return Stats{Connects: s.connects.Load(), LocationLookups: s.lookups.Load(), LocationFallbacks: s.fallbacks.Load()}
}

// Close closes every namenode connection.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.http.CloseIdleConnections()
	var errs []error
	for k, c := range s.clients {
		errs = append(errs, closeClient(c, s.conns[k]))
		delete(s.clients, k)
		delete(s.conns, k)
	}
	return errors.Join(errs...)
}

// closeClient closes c, its connections first: the client's Close waits
// for the RPC in flight (it renews leases every second), which against a
// stalled namenode takes a whole timeout.
func closeClient(c *gohdfs.Client, conns *connSet) error {
	conns.closeAll()
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// connSet holds the namenode connections one client dialed.
type connSet struct {
	mu     sync.Mutex
	conns  []net.Conn
	broken atomic.Bool // a read or write on one of them failed
}

func (cs *connSet) add(c net.Conn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.conns = append(cs.conns, c)
}

func (cs *connSet) closeAll() {
	if cs == nil {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.conns {
		c.Close()
	}
	cs.conns = nil
}

// hdfsURL is a parsed hdfs:// URL.
type hdfsURL struct {
	prefix     string   // "hdfs://authority", prepended to paths to make URLs
	namenodes  []string // who serves it
	configured bool     // namenodes came from (or match) cfg.Namenodes
	path       string   // absolute, cleaned
}

func (u hdfsURL) url(p string) string { return u.prefix + p }

func (s *Source) parse(raw string) (hdfsURL, error) {
	if !IsURL(raw) {
		return hdfsURL{}, fmt.Errorf("datastore: %q is not an hdfs:// URL", raw)
	}
	// Split by hand: url.Parse would take glob brackets and '?' for syntax.
	rest := raw[len("hdfs://"):]
	host, p := rest, "/"
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		host, p = rest[:i], rest[i:]
	}
	u := hdfsURL{prefix: "hdfs://" + host, path: path.Clean(p)}
	switch {
	case host == "":
		if len(s.cfg.Namenodes) == 0 {
			return u, fmt.Errorf("datastore: %s names no namenode and none is configured (set HADOOP_CONF_DIR)", raw)
		}
		u.namenodes, u.configured = s.cfg.Namenodes, true
	case !strings.Contains(host, ":") && len(s.cfg.Namenodes) > 0:
		// hdfs://nameservice/path: the configured (HA) namenodes.
		u.namenodes, u.configured = s.cfg.Namenodes, true
	case !strings.Contains(host, ":"):
		u.namenodes = []string{net.JoinHostPort(host, DefaultPort)}
	default:
		u.namenodes = []string{host}
		for _, nn := range s.cfg.Namenodes {
			if nn == host {
				u.configured = true
			}
		}
	}
	return u, nil
}

// Canonical spells an hdfs:// URL by the namenodes that serve it and its
// cleaned path: hdfs:///p and hdfs://nameservice/p (served by the
// configured namenodes), hdfs://nn/p (port 8020) and hdfs://nn:8020//p/ are
// all hdfs://nn:8020/p when nn:8020 is the namenode. A URL it cannot
// parse is returned as is. Host names are not resolved: hdfs://localhost
// and hdfs://127.0.0.1 stay two.
func (s *Source) Canonical(raw string) string {
	u, err := s.parse(raw)
	if err != nil {
		return raw
	}
	return "hdfs://" + strings.Join(u.namenodes, ",") + u.path
}

// client returns the (cached) client for u's namenodes, connecting if needed.
// Its errors name u and the namenodes: callers (flexps eval's --model and
// --data, an input's listing) pass them on as they are.
func (s *Source) client(ctx context.Context, u hdfsURL) (*gohdfs.Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := strings.Join(u.namenodes, ",")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("datastore: hdfs source is closed")
	}
	if c := s.clients[key]; c != nil {
		if !s.conns[key].broken.Load() {
			return c, nil
		}
		// A namenode connection failed mid-call (a stalled namenode's
		// timeout): the client would read that call's late answer as the
		// next call's and fail every call after it ("unexpected sequence
		// number"), long after the namenode is back. Start a new one.
		s.log.Warn().Str("namenode", key).Msg("datastore: hdfs namenode connection failed; reconnecting")
		closeClient(c, s.conns[key])
		delete(s.clients, key)
		delete(s.conns, key)
	}
	timeout := s.cfg.Timeout
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	dialDatanode := dialer.DialContext
	if s.dialDatanode != nil {
		dialDatanode = s.dialDatanode
	}
	conns := &connSet{}
	c, err := gohdfs.NewClient(gohdfs.ClientOptions{
		Addresses:           u.namenodes,
		User:                s.cfg.User,
		UseDatanodeHostname: s.cfg.UseDatanodeHostname,
		NamenodeDialFunc: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			conns.add(conn)
			return &idleTimeoutConn{Conn: conn, timeout: timeout, set: conns}, nil
		},
		// The block reader sets its deadline on a datanode connection only
		// after the read request's answer: a datanode that accepts and
		// stalls (a paused or overloaded process) would hang the read
		// forever, whatever SetDeadline said. Each read and write on the
		// connection is bounded instead.
		DatanodeDialFunc: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialDatanode(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleTimeoutConn{Conn: conn, timeout: timeout}, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("datastore: hdfs %s: namenode %s: %w", u.url(u.path), key, err)
	}
	// The client caches the namenode's server defaults on first use without
	// a lock, and readers sharing it race on that; filling it here, under
	// s.mu, makes every later use a read. It is also the first RPC: a
	// namenode that does not answer it (a port that accepts and stalls, a
	// service that is no namenode) fails here, once, not in every call.
	if _, err := c.ServerDefaults(); err != nil {
		closeClient(c, conns)
		return nil, fmt.Errorf("datastore: hdfs %s: namenode %s: %w", u.url(u.path), key, err)
	}
	s.connects.Add(1)
	s.clients[key] = c
	s.conns[key] = conns
	return c, nil
}

// idleTimeoutConn bounds each namenode or datanode read and write by
// timeout. The RPC client sets no deadlines, and the block reader none
// until a datanode answered its request, so a namenode or datanode that
// accepts and then stalls would otherwise hang its caller forever.
//
// A namenode connection (set != nil) whose read or write fails is closed
// and its set marked broken: the RPC client keeps using a connection after
// a timeout, so the answer that arrives late would be taken for the next
// call's.
type idleTimeoutConn struct {
	net.Conn
	timeout time.Duration
	set     *connSet // the client's namenode connections; nil for a datanode
}

func (c *idleTimeoutConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
	n, err := c.Conn.Read(b)
	if err != nil {
		c.fail()
	}
	return n, err
}

func (c *idleTimeoutConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	n, err := c.Conn.Write(b)
	if err != nil {
		c.fail()
	}
	return n, err
}

func (c *idleTimeoutConn) fail() {
	if c.set != nil {
		c.set.broken.Store(true)
		c.Conn.Close()
	}
}

// fsErr gives an HDFS error the URL, and the user when it is a permission error.
func (s *Source) fsErr(op, url string, err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("datastore: hdfs %s %s: permission denied for user %q: %w", op, url, s.cfg.User, err)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the URL replaces the bare path
	}
	return fmt.Errorf("datastore: hdfs %s %s: %w", op, url, err)
}

// hdfsFile is a file Blocks found.
type hdfsFile struct {
	path      string // absolute path on the cluster
	size      int64
	blockSize int64 // the file's HDFS block size
}

// Blocks expands pattern (an hdfs:// URL of a file, a directory, or a glob
// with * ? [...] in any path segment) into the HDFS blocks of its files.
// A directory means its files, not recursive, skipping names that start
// with '.' or '_' (like Hadoop's _SUCCESS). Each block carries the hosts of
// its replicas; a blockSize > 0 smaller than an HDFS block splits it
// further, and each piece keeps the block's hosts. A .gz file is one Whole
// block. Files are taken in name order and empty files are skipped.
func (s *Source) Blocks(ctx context.Context, pattern string, blockSize int64) ([]datastore.Block, error) {
	u, files, err := s.files(ctx, pattern)
	if err != nil {
		return nil, err
	}
	webOK := true // after one failure, skip WebHDFS for the rest of the files
	var blocks []datastore.Block
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if f.size == 0 {
			continue
		}
		var locs []blockLoc
		if webOK {
			locs, err = s.locations(ctx, u, f)
			if err != nil {
				if errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) || ctx.Err() != nil {
					return nil, s.fsErr("block locations of", u.url(f.path), err)
				}
				webOK = false
				s.log.Warn().Err(err).Str("path", u.url(f.path)).
					Msg("datastore: hdfs block locations unavailable; blocks will carry no hosts (no worker reads its slave's replicas first): set [hdfs] http, or dfs.namenode.http-address in HADOOP_CONF_DIR, to the namenode's HTTP (WebHDFS) address")
			}
		}
		if !webOK {
			s.fallbacks.Add(1)
			locs = splitLocs(f.size, f.blockSize)
		}
		blocks = appendBlocks(blocks, u.url(f.path), f.size, locs, blockSize)
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("datastore: input %q: every matched file is empty: %w", pattern, datastore.ErrNoInput)
	}
	return blocks, nil
}

// SkippedSubdirs is how many subdirectories the directory input pattern
// holds beside its data files, which Blocks does not read (0 for a file,
// a glob, or a directory without files).
func (s *Source) SkippedSubdirs(ctx context.Context, pattern string) (int, error) {
	u, err := s.parse(pattern)
	if err != nil || hasMeta(u.path) {
		return 0, err
	}
	c, err := s.client(ctx, u)
	if err != nil {
		return 0, err
	}
	if fi, err := c.Stat(u.path); err != nil || !fi.IsDir() {
		return 0, nil
	}
	files, subdirs, err := s.listFiles(ctx, c, u, u.path)
	if err != nil || len(files) == 0 {
		return 0, err
	}
	return subdirs, nil
}

// Files lists the hdfs:// URLs of the files pattern matches, as Blocks
// expands it, empty ones included.
func (s *Source) Files(ctx context.Context, pattern string) ([]string, error) {
	u, files, err := s.files(ctx, pattern)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = u.url(f.path)
	}
	return out, nil
}

// files parses pattern and expands it into the files it matches, on the
// client of its namenode.
func (s *Source) files(ctx context.Context, pattern string) (hdfsURL, []hdfsFile, error) {
	u, err := s.parse(pattern)
	if err != nil {
		return u, nil, err
	}
	c, err := s.client(ctx, u)
	if err != nil {
		return u, nil, err
	}
	files, err := s.expand(ctx, c, u, pattern)
	return u, files, err
}

// appendBlocks turns one file's HDFS blocks into Blocks.
func appendBlocks(blocks []datastore.Block, url string, size int64, locs []blockLoc, blockSize int64) []datastore.Block {
	if strings.HasSuffix(url, ".gz") {
		var hosts []string
		if len(locs) > 0 {
			hosts = locs[0].hosts
		}
		return append(blocks, datastore.Block{Path: url, Offset: 0, Length: size, Hosts: hosts, Whole: true, FileSize: size})
	}
	for _, l := range locs {
		step := l.length
		if blockSize > 0 && blockSize < step {
			step = blockSize
		}
		for off := l.offset; off < l.offset+l.length; off += step {
			n := min(step, l.offset+l.length-off)
			blocks = append(blocks, datastore.Block{Path: url, Offset: off, Length: n, Hosts: l.hosts, FileSize: size})
		}
	}
	return blocks
}

// splitLocs is the block layout of a file written with blockSize, without hosts.
func splitLocs(size, blockSize int64) []blockLoc {
	if blockSize <= 0 {
		blockSize = size
	}
	var locs []blockLoc
	for off := int64(0); off < size; off += blockSize {
		locs = append(locs, blockLoc{offset: off, length: min(blockSize, size-off)})
	}
	return locs
}

func hasMeta(s string) bool { return strings.ContainsAny(s, "*?[") }

// expand lists the files pattern names.
func (s *Source) expand(ctx context.Context, c *gohdfs.Client, u hdfsURL, pattern string) ([]hdfsFile, error) {
	if !hasMeta(u.path) {
		fi, err := c.Stat(u.path)
		if err != nil {
			return nil, s.fsErr("stat", pattern, err)
		}
		if !fi.IsDir() {
			return []hdfsFile{fileOf(u.path, fi)}, nil
		}
		files, subdirs, err := s.listFiles(ctx, c, u, u.path)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("datastore: input directory %q holds no data files%s: %w", pattern, datastore.SubdirsHint(pattern, subdirs), datastore.ErrNoInput)
		}
		return files, nil
	}
	matches, err := s.glob(ctx, c, u, u.path)
	if err != nil {
		return nil, err
	}
	var files []hdfsFile
	for _, m := range matches {
		if datastore.HiddenMatch(u.path, m.path) {
			// Not data (_SUCCESS, .crc, _temporary/), as in a
			// directory input, unless the pattern names such files.
			continue
		}
		if m.fi.IsDir() {
			sub, _, err := s.listFiles(ctx, c, u, m.path)
			if err != nil {
				return nil, err
			}
			files = append(files, sub...)
		} else {
			files = append(files, fileOf(m.path, m.fi))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("datastore: input pattern %q matches no file: %w", pattern, datastore.ErrNoInput)
	}
	return files, nil
}

func fileOf(p string, fi os.FileInfo) hdfsFile {
	f := hdfsFile{path: p, size: fi.Size()}
	if st, ok := fi.Sys().(*gohdfs.FileStatus); ok {
		f.blockSize = int64(st.GetBlocksize())
	}
	return f
}

// listFiles returns the data files directly in dir, in name order, and
// how many subdirectories it skipped.
func (s *Source) listFiles(ctx context.Context, c *gohdfs.Client, u hdfsURL, dir string) ([]hdfsFile, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	entries, err := c.ReadDir(dir)
	if err != nil {
		return nil, 0, s.fsErr("list", u.url(dir), err)
	}
	var files []hdfsFile
	subdirs := 0
	for _, e := range entries { // ReadDir sorts by name
		name := e.Name()
		if datastore.Hidden(name) {
			continue
		}
		if e.IsDir() {
			subdirs++
			continue
		}
		files = append(files, fileOf(path.Join(dir, name), e))
	}
	return files, subdirs, nil
}

type globMatch struct {
	path string
	fi   os.FileInfo
}

// glob matches an absolute path pattern segment by segment, listing only
// the directories the pattern reaches into.
func (s *Source) glob(ctx context.Context, c *gohdfs.Client, u hdfsURL, pattern string) ([]globMatch, error) {
	segs := strings.Split(strings.TrimPrefix(pattern, "/"), "/")
	for _, seg := range segs {
		if _, err := path.Match(seg, ""); err != nil {
			return nil, fmt.Errorf("datastore: input pattern %q: %w", u.url(pattern), err)
		}
	}
	// Start at the longest literal prefix.
	i := 0
	for i < len(segs) && !hasMeta(segs[i]) {
		i++
	}
	base := "/" + strings.Join(segs[:i], "/")
	fi, err := c.Stat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fsErr("stat", u.url(base), err)
	}
	cur := []globMatch{{base, fi}}
	for _, seg := range segs[i:] {
		var next []globMatch
		for _, m := range cur {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if !m.fi.IsDir() {
				continue
			}
			if !hasMeta(seg) {
				fi, err := c.Stat(path.Join(m.path, seg))
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					return nil, s.fsErr("stat", u.url(path.Join(m.path, seg)), err)
				}
				next = append(next, globMatch{path.Join(m.path, seg), fi})
				continue
			}
			entries, err := c.ReadDir(m.path)
			if err != nil {
				return nil, s.fsErr("list", u.url(m.path), err)
			}
			for _, e := range entries {
				if ok, _ := path.Match(seg, e.Name()); ok {
					next = append(next, globMatch{path.Join(m.path, e.Name()), e})
				}
			}
		}
		cur = next
	}
	return cur, nil
}

// Open opens the file at an hdfs:// URL for reading from byte offset. Each
// read from a datanode is bounded by the configured Timeout.
func (s *Source) Open(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	u, err := s.parse(path)
	if err != nil {
		return nil, err
	}
	c, err := s.client(ctx, u)
	if err != nil {
		return nil, err
	}
	f, err := c.Open(u.path)
	if err != nil {
		return nil, s.fsErr("open", path, err)
	}
	if f.Stat().IsDir() {
		f.Close()
		return nil, fmt.Errorf("datastore: hdfs open %s: is a directory", path)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, fmt.Errorf("datastore: hdfs seek %s to %d: %w", path, offset, err)
		}
	}
	return &hdfsReader{f: f, timeout: s.cfg.Timeout}, nil
}

type hdfsReader struct {
	f       *gohdfs.FileReader
	timeout time.Duration
}

func (r *hdfsReader) Read(b []byte) (int, error) {
	r.f.SetDeadline(time.Now().Add(r.timeout))
	return r.f.Read(b)
}

func (r *hdfsReader) Close() error { return r.f.Close() }

// Create opens an hdfs:// URL for writing, creating missing parent
// directories. Bytes go to a hidden temporary file beside path that Close
// renames over path, so readers never see a half-written file; a failed
// write or Close removes the temporary file.
func (s *Source) Create(ctx context.Context, path string) (io.WriteCloser, error) {
	u, err := s.parse(path)
	if err != nil {
		return nil, err
	}
	if u.path == "/" {
		return nil, fmt.Errorf("datastore: hdfs create %s: not a file path", path)
	}
	c, err := s.client(ctx, u)
	if err != nil {
		return nil, err
	}
	if fi, err := c.Stat(u.path); err == nil && fi.IsDir() {
		// Refused here, by the master's probe at submission, as on the
		// local disk, rather than by the rename after training.
		return nil, fmt.Errorf("datastore: hdfs create %s: is a directory (name a file in it)", path)
	}
	dir, name := pathDirBase(u.path)
	if err := c.MkdirAll(dir, 0o755); err != nil {
		return nil, s.fsErr("mkdir", u.url(dir), err)
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := dir + "/." + name + ".tmp-" + hex.EncodeToString(rnd[:])
	if dir == "/" {
		tmp = tmp[1:]
	}
	w, err := c.Create(tmp)
	if err != nil {
		return nil, s.fsErr("create", path, err)
	}
	return &hdfsWriter{s: s, c: c, w: w, tmp: tmp, final: u.path, url: path}, nil
}

// Remove deletes the file at an hdfs:// URL.
func (s *Source) Remove(ctx context.Context, path string) error {
	u, err := s.parse(path)
	if err != nil {
		return err
	}
	c, err := s.client(ctx, u)
	if err != nil {
		return err
	}
	if err := c.Remove(u.path); err != nil {
		return s.fsErr("remove", path, err)
	}
	return nil
}

type hdfsWriter struct {
	s          *Source
	c          *gohdfs.Client
	w          *gohdfs.FileWriter
	tmp, final string
	url        string
	err        error
	closed     bool
}

func (w *hdfsWriter) Write(b []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.w.SetDeadline(time.Now().Add(w.s.cfg.Timeout))
	n, err := w.w.Write(b)
	if err != nil {
		w.err = retryable(w.s.fsErr("write", w.url, err))
	}
	return n, w.err
}

// retryable marks err with datastore.ErrRetryWrite when the namenode
// refused the file's next block because the one before is not yet
// reported by a datanode: the client cannot ask for the block again on
// the same file (it has dropped the previous block's writer), but the
// file written again from the start goes through once the datanodes
// caught up.
func retryable(err error) error {
	if err != nil && strings.Contains(err.Error(), "NotReplicatedYetException") {
		return fmt.Errorf("%w (%w)", err, datastore.ErrRetryWrite)
	}
	return err
}

// Abort discards what was written: the final name is never created.
func (w *hdfsWriter) Abort() {
	if w.err == nil {
		w.err = fmt.Errorf("write to %s aborted", w.url)
	}
	w.Close()
}

func (w *hdfsWriter) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err == nil {
		w.w.SetDeadline(time.Now().Add(w.s.cfg.Timeout))
		if err := closeHDFSFile(w.w, w.s.cfg.Timeout); err != nil {
			w.err = retryable(w.s.fsErr("close", w.url, err))
		}
	} else {
		w.w.Close()
	}
	if w.err == nil {
		if err := w.c.Rename(w.tmp, w.final); err != nil {
			w.err = w.s.fsErr("rename into", w.url, err)
		}
	}
	if w.err != nil {
		w.c.Remove(w.tmp)
	}
	return w.err
}

// closeHDFSFile closes f, retrying while the namenode answers that the last
// block is not yet reported by enough datanodes (as the Java client does):
// the data is written, the namenode is only waiting for the datanodes'
// block reports.
func closeHDFSFile(f *gohdfs.FileWriter, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	wait := 50 * time.Millisecond
	for {
		err := f.Close()
		if !gohdfs.IsErrReplicating(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

func pathDirBase(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	dir, base = p[:i], p[i+1:]
	if dir == "" {
		dir = "/"
	}
	return dir, base
}

// blockLoc is one HDFS block of a file.
type blockLoc struct {
	offset, length int64
	hosts          []string
}

// httpAddr is where u's namenode serves WebHDFS.
func (s *Source) httpAddr(u hdfsURL) string {
	if u.configured && s.cfg.HTTPAddr != "" {
		return s.cfg.HTTPAddr
	}
	host, _, err := net.SplitHostPort(u.namenodes[0])
	if err != nil {
		host = u.namenodes[0]
	}
	return net.JoinHostPort(host, DefaultWebPort)
}

// errWebHDFSOp means the namenode does not know the operation asked for.
var errWebHDFSOp = errors.New("unsupported WebHDFS operation")

// locations asks WebHDFS where f's blocks are: GETFILEBLOCKLOCATIONS
// (Hadoop 3.3+), else GET_BLOCK_LOCATIONS. Any answer from the namenode that
// is not about the file itself (not found, permission) is an error the
// caller may fall back from.
func (s *Source) locations(ctx context.Context, u hdfsURL, f hdfsFile) ([]blockLoc, error) {
	addr := s.httpAddr(u)
	var v struct {
		BlockLocations struct {
			BlockLocation []struct {
				Offset int64    `json:"offset"`
				Length int64    `json:"length"`
				Hosts  []string `json:"hosts"`
			} `json:"BlockLocation"`
		} `json:"BlockLocations"`
	}
	err := s.webhdfs(ctx, addr, f.path, "GETFILEBLOCKLOCATIONS", f.size, &v)
	if err == nil {
		var locs []blockLoc
		for _, b := range v.BlockLocations.BlockLocation {
			locs = append(locs, blockLoc{b.Offset, b.Length, sortedHosts(b.Hosts)})
		}
		s.lookups.Add(1)
		return checkLocs(locs, f)
	}
	if !errors.Is(err, errWebHDFSOp) {
		return nil, err
	}
	var w struct {
		LocatedBlocks struct {
			LocatedBlocks []struct {
				StartOffset int64 `json:"startOffset"`
				Block       struct {
					NumBytes int64 `json:"numBytes"`
				} `json:"block"`
				Locations []struct {
					HostName string `json:"hostName"`
				} `json:"locations"`
			} `json:"locatedBlocks"`
		} `json:"LocatedBlocks"`
	}
	if err := s.webhdfs(ctx, addr, f.path, "GET_BLOCK_LOCATIONS", f.size, &w); err != nil {
		return nil, err
	}
	var locs []blockLoc
	for _, b := range w.LocatedBlocks.LocatedBlocks {
		l := blockLoc{offset: b.StartOffset, length: b.Block.NumBytes}
		for _, h := range b.Locations {
			l.hosts = append(l.hosts, h.HostName)
		}
		l.hosts = sortedHosts(l.hosts)
		locs = append(locs, l)
	}
	s.lookups.Add(1)
	return checkLocs(locs, f)
}

// sortedHosts orders replica hosts by name: the namenode orders them by
// distance to whoever asked, which says nothing to the FileAssigner, and
// shuffles ties, which would make Blocks nondeterministic.
func sortedHosts(h []string) []string {
	sort.Strings(h)
	return h
}

// checkLocs insists the blocks tile the file, so no byte is lost or read twice.
func checkLocs(locs []blockLoc, f hdfsFile) ([]blockLoc, error) {
	sort.Slice(locs, func(i, j int) bool { return locs[i].offset < locs[j].offset })
	var end int64
	for _, l := range locs {
		if l.offset != end || l.length <= 0 {
			return nil, fmt.Errorf("WebHDFS block list of %s has a gap or overlap at byte %d", f.path, end)
		}
		end += l.length
	}
	if end != f.size {
		return nil, fmt.Errorf("WebHDFS blocks of %s cover %d bytes, the file has %d (still being written?)", f.path, end, f.size)
	}
	return locs, nil
}

func (s *Source) webhdfs(ctx context.Context, addr, p, op string, length int64, out any) error {
	q := url.Values{"op": {op}, "offset": {"0"}, "length": {fmt.Sprint(length)}, "user.name": {s.cfg.User}}
	endpoint := (&url.URL{Scheme: "http", Host: addr, Path: "/webhdfs/v1" + p, RawQuery: q.Encode()}).String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("WebHDFS at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("WebHDFS at %s: %w", addr, err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("WebHDFS at %s: %s: %w", addr, op, err)
		}
		return nil
	}
	var re struct {
		RemoteException struct {
			Exception string `json:"exception"`
			Message   string `json:"message"`
		} `json:"RemoteException"`
	}
	json.Unmarshal(body, &re)
	ex := re.RemoteException
	switch {
	case ex.Exception == "FileNotFoundException":
		return fmt.Errorf("%s: %w", ex.Message, fs.ErrNotExist)
	case ex.Exception == "AccessControlException" || resp.StatusCode == http.StatusForbidden && ex.Exception == "":
		return fmt.Errorf("%s: %w", ex.Message, fs.ErrPermission)
	case ex.Exception == "IllegalArgumentException" && strings.Contains(ex.Message, op),
		ex.Exception == "UnsupportedOperationException":
		return fmt.Errorf("%s: %w", ex.Message, errWebHDFSOp)
	}
	msg := ex.Message
	if msg == "" {
		msg = strings.TrimSpace(string(body[:min(len(body), 200)]))
	}
	return fmt.Errorf("WebHDFS at %s: %s: HTTP %d: %s %s", addr, op, resp.StatusCode, ex.Exception, msg)
}
