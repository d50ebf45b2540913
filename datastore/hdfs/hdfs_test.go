package hdfs

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/rs/zerolog"

	"github.com/flexps/flexps/internal/hdfstest"
)

// The HDFS tests share one MiniHDFS (3 datanodes, replication 2, 1 MiB
// blocks); it stops when the test binary exits.
func miniHDFS(t *testing.T) *hdfstest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("HDFS integration test (starts a JVM); skipped with -short")
	}
	return hdfstest.Shared(t)
}

func hdfsSource(t *testing.T, c *hdfstest.Cluster, user string) *Source {
	t.Helper()
	// Generous: a cold JVM on a loaded machine may take over 10 s to answer
	// its first WebHDFS call; a healthy cluster answers at once.
	s, err := New(Config{Namenodes: []string{c.Namenode}, HTTPAddr: c.HTTP, User: user, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// textLines makes n distinct lines of varying length.
func textLines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "line-%07d %s\n", i, strings.Repeat("x", i%97))
	}
	return b.Bytes()
}

var bigFile struct {
	once sync.Once
	data []byte
}

// uploadBig puts a file of about 3.4 blocks at /data/big.txt, once.
func uploadBig(t *testing.T, c *hdfstest.Cluster) (string, []byte) {
	t.Helper()
	bigFile.once.Do(func() {
		data := textLines(60000)
		c.WriteFile(t, "/data/big.txt", data)
		bigFile.data = data
	})
	if bigFile.data == nil {
		t.Fatal("upload of /data/big.txt failed earlier")
	}
	return c.URL("/data/big.txt"), bigFile.data
}

func TestHDFSBlocksAreRealBlocks(t *testing.T) {
	c := miniHDFS(t)
	url, data := uploadBig(t, c)
	s := hdfsSource(t, c, "")
	size := int64(len(data))
	if size < 3*c.BlockSize {
		t.Fatalf("test file %d bytes is not several %d-byte blocks", size, c.BlockSize)
	}

	blocks, err := s.Blocks(context.Background(), url, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := (size + c.BlockSize - 1) / c.BlockSize
	if int64(len(blocks)) != want {
		t.Fatalf("got %d blocks, want %d: %v", len(blocks), want, blocks)
	}
	for i, b := range blocks {
		if b.Path != url || b.Offset != int64(i)*c.BlockSize || b.Length != min(c.BlockSize, size-b.Offset) || b.FileSize != size || b.Whole {
			t.Errorf("block %d = %+v", i, b)
		}
		if len(b.Hosts) != 2 { // replication 2
			t.Errorf("block %d hosts %v, want 2 replicas", i, b.Hosts)
		}
		for _, h := range b.Hosts {
			if !slices.Contains(c.Hostnames, h) {
				t.Errorf("block %d host %q is not a datanode (%v)", i, h, c.Hostnames)
			}
		}
	}
	if st := s.Stats(); st.LocationLookups != 1 || st.LocationFallbacks != 0 || st.Connects != 1 {
		t.Errorf("stats %+v", st)
	}

	// A smaller blockSize splits each HDFS block; pieces keep its hosts.
	small, err := s.Blocks(context.Background(), url, 300_000)
	if err != nil {
		t.Fatal(err)
	}
	var next int64
	for _, b := range small {
		if b.Offset != next || b.Length > 300_000 || b.Length <= 0 {
			t.Fatalf("split %v does not follow byte %d", b, next)
		}
		parent := blocks[b.Offset/c.BlockSize]
		if b.Offset+b.Length > parent.Offset+parent.Length {
			t.Errorf("split %v crosses the HDFS block %v", b, parent)
		}
		if !slices.Equal(b.Hosts, parent.Hosts) {
			t.Errorf("split %v hosts %v, its block's %v", b, b.Hosts, parent.Hosts)
		}
		next += b.Length
	}
	if next != size {
		t.Errorf("splits cover %d bytes, file has %d", next, size)
	}
}

func TestHDFSOpenAtOffsets(t *testing.T) {
	c := miniHDFS(t)
	url, data := uploadBig(t, c)
	s := hdfsSource(t, c, "")
	size := int64(len(data))
	bs := c.BlockSize
	for _, off := range []int64{0, 1, bs - 1, bs, bs + 7, 2*bs - 3, size - 5, size} {
		rc, err := s.Open(context.Background(), url, off)
		if err != nil {
			t.Fatalf("open at %d: %v", off, err)
		}
		got, err := io.ReadAll(io.LimitReader(rc, 10_000))
		rc.Close()
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if want := data[off:min(off+10_000, size)]; !bytes.Equal(got, want) {
			t.Errorf("at %d read %d bytes %.20q, want %d bytes %.20q", off, len(got), got, len(want), want)
		}
	}
}

// Every line is read exactly once however blocks cut through lines: the
// HDFS block edges and the finer splits fall mid-line.
func TestHDFSReadBlockExactlyOnce(t *testing.T) {
	c := miniHDFS(t)
	url, data := uploadBig(t, c)
	s := hdfsSource(t, c, "")
	f, err := datastore.NewFormat("text", datastore.DefaultFormatOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	sort.Strings(want)
	for _, split := range []int64{0, 300_007} {
		blocks, err := s.Blocks(context.Background(), url, split)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, b := range blocks {
			_, err := datastore.ReadBlock(context.Background(), s, b, f, datastore.ReadOptions{}, func(r *datastore.Records) error {
				got = append(got, r.Lines...)
				return nil
			})
			if err != nil {
				t.Fatalf("read %v: %v", b, err)
			}
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("split %d: read %d lines, file has %d (or they differ)", split, len(got), len(want))
		}
	}
}

func TestHDFSDirectoriesAndGlobs(t *testing.T) {
	c := miniHDFS(t)
	for _, p := range []string{"/glob/a/part-0", "/glob/a/part-1", "/glob/b/part-0", "/glob/a/_SUCCESS", "/glob/a/.crc", "/glob/_temporary/part-0"} {
		c.WriteFile(t, p, []byte(p+"\n"))
	}
	c.WriteFile(t, "/glob/empty/part-0", nil)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(textLines(50000))
	zw.Close()
	c.WriteFile(t, "/glob/gz/data.gz", gz.Bytes())
	s := hdfsSource(t, c, "")

	paths := func(pattern string) []string {
		t.Helper()
		blocks, err := s.Blocks(context.Background(), c.URL(pattern), 0)
		if err != nil {
			t.Fatalf("%s: %v", pattern, err)
		}
		var ps []string
		for _, b := range blocks {
			ps = append(ps, strings.TrimPrefix(b.Path, "hdfs://"+c.Namenode))
		}
		return ps
	}
	for pattern, want := range map[string][]string{
		"/glob/a":           {"/glob/a/part-0", "/glob/a/part-1"},
		"/glob/a/":          {"/glob/a/part-0", "/glob/a/part-1"},
		"/glob/*/part-0":    {"/glob/a/part-0", "/glob/b/part-0"},
		"/glob/[ab]/part-?": {"/glob/a/part-0", "/glob/a/part-1", "/glob/b/part-0"},
		"/glob/b/*":         {"/glob/b/part-0"},
		"/gl?b/b":           {"/glob/b/part-0"},
		"/glob/a/part-1":    {"/glob/a/part-1"},
		"/glob/*/data.gz":   {"/glob/gz/data.gz"},
		// Hidden names are not data unless the pattern asks for them,
		// as locally (TestLocalGlobs).
		"/glob/a/*":  {"/glob/a/part-0", "/glob/a/part-1"},
		"/glob/a/_*": {"/glob/a/_SUCCESS"},
		"/glob/a/.*": {"/glob/a/.crc"},
	} {
		if got := paths(pattern); !slices.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", pattern, got, want)
		}
	}

	// A directory input reads only the files directly in it: the
	// subdirectories beside them are counted, so the master can say their
	// files are not read ('_' names are not data).
	for _, p := range []string{"/mixed/top-0", "/mixed/sub/part-0", "/mixed/_tmp/x"} {
		c.WriteFile(t, p, []byte(p+"\n"))
	}
	for pattern, want := range map[string]int{"/mixed": 1, "/mixed/": 1, "/glob/a": 0, "/glob": 0, "/glob/*/part-0": 0, "/mixed/top-0": 0} {
		if got, err := s.SkippedSubdirs(context.Background(), c.URL(pattern)); err != nil || got != want {
			t.Errorf("SkippedSubdirs(%s) = %d, %v; want %d", pattern, got, err, want)
		}
	}

	blocks, err := s.Blocks(context.Background(), c.URL("/glob/gz/data.gz"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || !blocks[0].Whole || blocks[0].Length != int64(gz.Len()) || len(blocks[0].Hosts) == 0 {
		t.Errorf("gzip file: %+v", blocks)
	}

	for _, tc := range []struct{ pattern, say string }{
		{"/glob/*/nothing*", ""},
		{"/glob/empty", ""},
		{"/nope/*/x", ""},
		// Partitions only: their files are not read, and the error says
		// how to (it said only "holds no data files").
		{"/glob", "(only 4 subdirectories, which a directory input does not read: to read their files, give the glob " + c.URL("/glob") + "/*/*)"},
	} {
		_, err := s.Blocks(context.Background(), c.URL(tc.pattern), 0)
		if !errors.Is(err, datastore.ErrNoInput) || !strings.Contains(err.Error(), tc.say) {
			t.Errorf("%s: got %v, want ErrNoInput saying %q", tc.pattern, err, tc.say)
		}
	}
}

func TestHDFSMissingPath(t *testing.T) {
	c := miniHDFS(t)
	s := hdfsSource(t, c, "")
	url := c.URL("/no/such/file")
	_, err := s.Blocks(context.Background(), url, 0)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), url) {
		t.Errorf("Blocks: got %v, want ErrNotExist naming %s", err, url)
	}
	_, err = s.Open(context.Background(), url, 0)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), url) {
		t.Errorf("Open: got %v, want ErrNotExist naming %s", err, url)
	}
}

func TestHDFSPermissionDenied(t *testing.T) {
	c := miniHDFS(t)
	su := c.Client(t, "")
	if err := su.MkdirAll("/private", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := su.Chmod("/private", 0o700); err != nil {
		t.Fatal(err)
	}
	c.WriteFile(t, "/private/secret.txt", []byte("secret\n"))

	s := hdfsSource(t, c, "alice")
	for _, p := range []string{"/private", "/private/secret.txt", "/private/*"} {
		_, err := s.Blocks(context.Background(), c.URL(p), 0)
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "/private") || !strings.Contains(err.Error(), `"alice"`) {
			t.Errorf("Blocks(%s) as alice: got %v, want a permission error naming the path and user", p, err)
		}
	}
	_, err := s.Open(context.Background(), c.URL("/private/secret.txt"), 0)
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "alice") {
		t.Errorf("Open as alice: got %v", err)
	}
	_, err = s.Create(context.Background(), c.URL("/private/mine.txt"))
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("Create as alice: got %v", err)
	}
	// The superuser reads it.
	if _, err := hdfsSource(t, c, "").Blocks(context.Background(), c.URL("/private"), 0); err != nil {
		t.Errorf("superuser: %v", err)
	}
}

func TestHDFSCreateRenamesOnClose(t *testing.T) {
	c := miniHDFS(t)
	s := hdfsSource(t, c, "bob") // /tmp is world-writable
	url := c.URL("/tmp/bob/models/model.bin")
	w, err := s.Create(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB, several blocks
	if _, err := w.Write(payload); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(context.Background(), url, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("before Close the model is visible: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Open(context.Background(), url, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("read back %d bytes (err %v), wrote %d", len(got), err, len(payload))
	}
	entries, err := c.Client(t, "").ReadDir("/tmp/bob/models")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "model.bin" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only model.bin", names)
	}
}

// An output naming a directory is refused by Create (the master's probe
// at submission), as on the local disk: it used to be accepted and fail
// only after training, when the rename found the directory
// ("rename2 call failed with ERROR_APPLICATION (java.io.IOException)").
func TestHDFSCreateRefusesADirectory(t *testing.T) {
	c := miniHDFS(t)
	s := hdfsSource(t, c, "bob")
	if err := c.Client(t, "bob").MkdirAll("/tmp/bob/adir", 0o755); err != nil {
		t.Fatal(err)
	}
	url := c.URL("/tmp/bob/adir")
	w, err := s.Create(context.Background(), url)
	if err == nil {
		w.Close()
		t.Fatal("Create of a directory's URL succeeded")
	}
	if !strings.Contains(err.Error(), url) || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("got %v, want an error naming %s as a directory", err, url)
	}
}

// Without WebHDFS the blocks keep the HDFS layout but carry no hosts.
func TestHDFSWithoutWebHDFSFallsBack(t *testing.T) {
	c := miniHDFS(t)
	url, data := uploadBig(t, c)
	var logged bytes.Buffer
	lg := zerolog.New(&logged)
	s, err := New(Config{Namenodes: []string{c.Namenode}, HTTPAddr: closedAddr(t), Timeout: 5 * time.Second, Logger: &lg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	blocks, err := s.Blocks(context.Background(), url, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The warning says what to set (it said only that hosts were lost).
	if !strings.Contains(logged.String(), "set [hdfs] http, or dfs.namenode.http-address in HADOOP_CONF_DIR") {
		t.Errorf("the warning does not say what to set:\n%s", logged.String())
	}
	if want := (int64(len(data)) + c.BlockSize - 1) / c.BlockSize; int64(len(blocks)) != want {
		t.Fatalf("got %d blocks, want %d", len(blocks), want)
	}
	for i, b := range blocks {
		if b.Offset != int64(i)*c.BlockSize || len(b.Hosts) != 0 {
			t.Errorf("block %d = %+v", i, b)
		}
	}
	if st := s.Stats(); st.LocationFallbacks != 1 {
		t.Errorf("stats %+v, want one fallback", st)
	}
}

func TestHDFSConfigFromEnv(t *testing.T) {
	c := miniHDFS(t)
	uploadBig(t, c)
	dir := t.TempDir()
	_, httpPort, _ := net.SplitHostPort(c.HTTP)
	writeConf(t, filepath.Join(dir, "core-site.xml"), "fs.defaultFS", "hdfs://"+c.Namenode)
	writeConf(t, filepath.Join(dir, "hdfs-site.xml"), "dfs.namenode.http-address", "0.0.0.0:"+httpPort)
	t.Setenv("HADOOP_CONF_DIR", dir)
	cfg, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Namenodes, []string{c.Namenode}) || cfg.HTTPAddr != c.HTTP {
		t.Fatalf("config %+v, want namenode %s http %s", cfg, c.Namenode, c.HTTP)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// hdfs:///path uses the configured namenode; its blocks have hosts.
	blocks, err := s.Blocks(context.Background(), "hdfs:///data/big.txt", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) < 3 || len(blocks[0].Hosts) == 0 || blocks[0].Path != "hdfs:///data/big.txt" {
		t.Errorf("blocks %v (hosts %v)", blocks, blocks[0].Hosts)
	}
}

func writeConf(t *testing.T, path, key, value string) {
	t.Helper()
	x := fmt.Sprintf("<configuration><property><name>%s</name><value>%s</value></property></configuration>\n", key, value)
	if err := os.WriteFile(path, []byte(x), 0o644); err != nil {
		t.Fatal(err)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// These need no cluster: a namenode that refuses or never answers fails
// within the timeout and the error names it.
func TestHDFSUnreachableNamenode(t *testing.T) {
	addr := closedAddr(t)
	s, err := New(Config{User: "test", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Each names the URL too: flexps eval --model on a namenode that was
	// down said only "model: datastore: hdfs namenode ADDR: ...", and its
	// --data not even which flag.
	ctx := context.Background()
	for _, tc := range []struct {
		op  string
		url string
		do  func(url string) error
	}{
		{"Blocks", "/data/train.libsvm", func(u string) error { _, err := s.Blocks(ctx, u, 0); return err }},
		{"Files", "/data/part-*", func(u string) error { _, err := s.Files(ctx, u); return err }},
		{"Open", "/out/lr.model", func(u string) error { _, err := s.Open(ctx, u, 0); return err }},
		{"Create", "/out/new.model", func(u string) error { _, err := s.Create(ctx, u); return err }},
		{"Remove", "/ck/ckpt-000001.flexps", func(u string) error { return s.Remove(ctx, u) }},
	} {
		url := "hdfs://" + addr + tc.url
		err := tc.do(url)
		if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), url) {
			t.Errorf("%s: got %v, want an error naming %s and the namenode %s", tc.op, err, url, addr)
		}
	}
}

func TestHDFSStalledNamenode(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() { // accept and never answer
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	defer func() {
		l.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	}()
	addr := l.Addr().String()
	const timeout = 4 * time.Second
	s, err := New(Config{User: "test", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	// The namenode accepts and never answers: without the per-read deadline
	// the call would block forever, so it must come back with an error.
	// (How long the RPC client retries before giving up is its business;
	// the test asserts no wall-clock figure, only that the call returns.)
	done := make(chan error, 1)
	go func() {
		_, err := s.Blocks(context.Background(), "hdfs://"+addr+"/data", 0)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Blocks against a stalled namenode did not return")
	}
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("got %v, want an error naming %s", err, addr)
	}
	// Close does not wait out an RPC in flight (the client renews leases
	// every second): it ended a failed `flexps run` a timeout later, with
	// the slaves already reporting the closing master silent.
	start := time.Now()
	s.Close()
	closed = true
	if d := time.Since(start); d > timeout/2 {
		t.Errorf("Close took %v against a stalled namenode (timeout %v)", d, timeout)
	}
}

// stallListener accepts connections and never answers; it stops with t.
func stallListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// A datanode that accepts and never answers (a paused process, SIGSTOP)
// fails the read within the timeout: the block reader sets no deadline of
// its own before the datanode answered its request, and a paused
// MiniHDFS held a flexps task for as long as it stayed paused.
func TestHDFSStalledDatanode(t *testing.T) {
	c := miniHDFS(t)
	url, _ := uploadBig(t, c)
	stall := stallListener(t)
	const timeout = 2 * time.Second
	s, err := New(Config{Namenodes: []string{c.Namenode}, HTTPAddr: c.HTTP, User: c.Superuser, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var d net.Dialer
	s.dialDatanode = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, stall) // every replica stalls
	}
	r, err := s.Open(context.Background(), url, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 4096))
		done <- err
	}()
	start := time.Now()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("a read from stalled datanodes did not return in a minute")
	}
	t.Logf("read failed after %v: %v", time.Since(start), err)
	if err == nil {
		t.Fatal("a read from stalled datanodes succeeded")
	}
}

// A read goes on from another replica when a datanode is dead (refuses)
// or stalled: every byte comes back once, in order.
func TestHDFSReadSkipsADeadOrStalledReplica(t *testing.T) {
	c := miniHDFS(t)
	url, data := uploadBig(t, c)
	stall := stallListener(t)
	for _, mode := range []string{"dead", "stalled"} {
		t.Run(mode, func(t *testing.T) {
			s, err := New(Config{Namenodes: []string{c.Namenode}, HTTPAddr: c.HTTP, User: c.Superuser, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			bad := c.Datanodes[0] // holds a replica of some blocks (replication 2 of 3)
			var d net.Dialer
			s.dialDatanode = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if addr != bad {
					return d.DialContext(ctx, network, addr)
				}
				if mode == "dead" {
					return nil, fmt.Errorf("dial %s: connection refused", addr)
				}
				return d.DialContext(ctx, network, stall)
			}
			r, err := s.Open(context.Background(), url, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read %d of %d bytes, equal %v, err %v", len(got), len(data), bytes.Equal(got, data), err)
			}
		})
	}
}

// pausableProxy forwards TCP connections to target; while paused it holds
// every byte and delivers it on resume, as a namenode stopped with
// SIGSTOP and continued does.
type pausableProxy struct {
	addr   string
	mu     sync.Mutex
	resume chan struct{} // closed while running
}

func (p *pausableProxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume
}

func (p *pausableProxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resume = make(chan struct{})
}

func (p *pausableProxy) unpause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.resume)
}

func startProxy(t *testing.T, target string) *pausableProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pausableProxy{addr: l.Addr().String(), resume: make(chan struct{})}
	close(p.resume)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				<-p.gate()
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				dst.Close()
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		select {
		case <-p.resume:
		default:
			close(p.resume)
		}
		p.mu.Unlock()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return p
}

// A namenode that stalls past the timeout and comes back (SIGSTOP, then
// SIGCONT) serves the next call again: the client used to keep the
// connection on which its call timed out, read the late answer as the
// next call's, and fail every call after it with "unexpected sequence
// number", so a task's checkpoints and output failed long after the
// namenode was back.
func TestHDFSNamenodeStallThenRecovers(t *testing.T) {
	c := miniHDFS(t)
	url, data := uploadBig(t, c)
	p := startProxy(t, c.Namenode)
	const timeout = time.Second
	s, err := New(Config{Namenodes: []string{p.addr}, HTTPAddr: c.HTTP, User: c.Superuser, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	purl := strings.Replace(url, c.Namenode, p.addr, 1)
	read := func() error {
		r, err := s.Open(context.Background(), purl, 0)
		if err != nil {
			return err
		}
		defer r.Close()
		got, err := io.ReadAll(r)
		if err == nil && !bytes.Equal(got, data) {
			err = fmt.Errorf("read %d bytes, not the file's %d", len(got), len(data))
		}
		return err
	}
	if err := read(); err != nil {
		t.Fatal(err)
	}
	p.pause()
	if err := read(); err == nil {
		t.Fatal("a read through a stalled namenode succeeded")
	} else {
		t.Logf("while stalled: %v", err)
	}
	p.unpause()
	time.Sleep(100 * time.Millisecond) // the late answers arrive
	for i := range 3 {
		if err := read(); err != nil {
			t.Fatalf("read %d after the namenode came back: %v", i+1, err)
		}
	}
}

func TestIsHDFS(t *testing.T) {
	for p, want := range map[string]bool{"hdfs://nn:8020/x": true, "HDFS:///x": true, "/hdfs/x": false, "file:///x": false, "hdfs:/x": false} {
		if IsURL(p) != want {
			t.Errorf("IsURL(%q) = %v", p, !want)
		}
	}
}

// One file's spellings canonicalize alike (the master compares an output
// with its input files so); other namenodes and paths stay apart.
func TestHDFSCanonical(t *testing.T) {
	s, err := New(Config{Namenodes: []string{"nn:8020"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bare, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	for _, tc := range []struct {
		src       *Source
		url, want string
	}{
		{s, "hdfs:///d/train.libsvm", "hdfs://nn:8020/d/train.libsvm"},
		{s, "hdfs://ns1/d/train.libsvm", "hdfs://nn:8020/d/train.libsvm"},
		{s, "hdfs://nn:8020//d//train.libsvm", "hdfs://nn:8020/d/train.libsvm"},
		{s, "hdfs://nn:8020/d/", "hdfs://nn:8020/d"},
		{s, "hdfs://other:9000/d/train.libsvm", "hdfs://other:9000/d/train.libsvm"},
		{bare, "hdfs://nn/d/train.libsvm", "hdfs://nn:8020/d/train.libsvm"},
		{bare, "hdfs:///d/train.libsvm", "hdfs:///d/train.libsvm"}, // no namenode: as is
	} {
		if got := tc.src.Canonical(tc.url); got != tc.want {
			t.Errorf("Canonical(%s) = %s, want %s", tc.url, got, tc.want)
		}
	}
}

// The temporary files a writer killed mid-write left beside an hdfs://
// output are removed (a restarted master does so before it writes the
// model again; it removed a local output's, and left these for good), and
// nothing else.
func TestHDFSRemoveStaleTemps(t *testing.T) {
	c := miniHDFS(t)
	for _, p := range []string{"/stale/.m.model.tmp-0123456789ab", "/stale/.m.model.tmp-ba9876543210", "/stale/m.model", "/stale/.other.model.tmp-0123456789ab", "/stale/.m.model", "/stale/.m.models.tmp-x", "/stale/.a[1].model.tmp-x"} {
		c.WriteFile(t, p, []byte("x\n"))
	}
	s := NewSources(Config{Namenodes: []string{c.Namenode}, User: c.Superuser, Timeout: 60 * time.Second})
	defer s.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		output string
		want   []string
	}{
		{"/stale/m.model", []string{"/stale/.m.model.tmp-0123456789ab", "/stale/.m.model.tmp-ba9876543210"}},
		{"/stale/a[1].model", []string{"/stale/.a[1].model.tmp-x"}},
		{"/stale/none.model", nil},
		{"/nodir/m.model", nil},
	} {
		removed, err := s.RemoveStaleTemps(ctx, c.URL(tc.output))
		var want []string
		for _, p := range tc.want {
			want = append(want, c.URL(p))
		}
		if err != nil || !slices.Equal(removed, want) {
			t.Errorf("RemoveStaleTemps(%s) = %v, %v; want %v", tc.output, removed, err, want)
		}
	}
	var left []string
	for _, p := range []string{"/stale/m.model", "/stale/.other.model.tmp-0123456789ab", "/stale/.m.model", "/stale/.m.models.tmp-x", "/stale/.m.model.tmp-0123456789ab"} {
		if r, err := s.Open(ctx, c.URL(p), 0); err == nil {
			r.Close()
			left = append(left, p)
		}
	}
	if !slices.Equal(left, []string{"/stale/m.model", "/stale/.other.model.tmp-0123456789ab", "/stale/.m.model", "/stale/.m.models.tmp-x"}) {
		t.Errorf("files left %v", left)
	}
}
