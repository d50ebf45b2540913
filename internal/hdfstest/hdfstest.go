// Package hdfstest runs a real HDFS (a Hadoop MiniDFSCluster in a JVM) for
// integration tests.
//
// The cluster is launched by scripts/hdfs/minihdfs.sh, which builds a small
// Java launcher from Maven Central artifacts on first use (cached in
// scripts/hdfs/target/). The JVM is started with a pipe on its stdin and
// exits when that pipe closes, so a test binary that dies never leaves a
// cluster behind. Starting a cluster takes several seconds: packages with
// many HDFS tests share one with Shared, which shuts down by itself when the
// test binary exits (StopShared or Main stop it sooner).
//
// Datanodes register with the namenode under distinct fake hostnames
// (dn0.localhost, dn1.localhost, ...; Cluster.Hostnames) on distinct racks,
// but every client reaches them by IP at 127.0.0.1 (Cluster.Datanodes), so
// the names need no DNS. Tests are skipped when java or mvn is missing,
// unless the CI environment variable is set, in which case they fail.
package hdfstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/colinmarc/hdfs/v2"
)

// Cluster is a running MiniHDFS.
type Cluster struct {
	Namenode  string   // namenode RPC address, 127.0.0.1:port
	HTTP      string   // namenode HTTP (WebHDFS) address, 127.0.0.1:port
	Datanodes []string // datanode transfer addresses, 127.0.0.1:port
	Hostnames []string // hostname each datanode registered under, parallel to Datanodes
	Racks     []string // rack of each datanode, parallel to Datanodes
	Superuser string   // the HDFS superuser (the OS user running the JVM)
	BlockSize int64    // dfs.blocksize: default block size of new files
	Dir       string   // state, log and data directory
	Log       string   // path of the JVM's log

	proc *process
	once sync.Once
}

type options struct {
	datanodes   int
	replication int
	blockSize   int64
	ipHosts     bool
	timeout     time.Duration
	cleanup     bool // the JVM removes Dir when it exits
}

// Option configures Start.
type Option func(*options)

// Datanodes sets the number of datanodes (default 3).
func Datanodes(n int) Option { return func(o *options) { o.datanodes = n } }

// Replication sets dfs.replication (default min(2, datanodes)).
func Replication(n int) Option { return func(o *options) { o.replication = n } }

// BlockSize sets dfs.blocksize in bytes, a multiple of 512 (default 1 MiB).
func BlockSize(n int64) Option { return func(o *options) { o.blockSize = n } }

// IPHostnames registers every datanode as 127.0.0.1 instead of dnI.localhost.
func IPHostnames() Option { return func(o *options) { o.ipHosts = true } }

// StartTimeout bounds the wait for the cluster to come up (default 120s).
func StartTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Script is the path of minihdfs.sh, found from this source file's location;
// FLEXPS_MINIHDFS_SCRIPT overrides it.
func Script() string {
	if s := os.Getenv("FLEXPS_MINIHDFS_SCRIPT"); s != "" {
		return s
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "hdfs", "minihdfs.sh")
}

// errUnavailable marks a machine without the tools to run HDFS.
var errUnavailable = errors.New("hdfstest: HDFS unavailable")

var installOnce struct {
	sync.Once
	err error
}

// install builds the launcher once per process; the script itself skips a
// build that is up to date and serializes concurrent test binaries.
func install() error {
	installOnce.Do(func() {
		if _, err := exec.LookPath("java"); err != nil {
			installOnce.err = fmt.Errorf("%w: java not found on PATH (install a JDK 11+)", errUnavailable)
			return
		}
		script := Script()
		built := filepath.Join(filepath.Dir(script), "target", "minihdfs-1.0.jar")
		if _, err := os.Stat(built); err != nil {
			if _, err := exec.LookPath("mvn"); err != nil {
				installOnce.err = fmt.Errorf("%w: mvn not found on PATH (needed once to build %s)", errUnavailable, built)
				return
			}
		}
		var out bytes.Buffer
		cmd := exec.Command("bash", script, "install")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			installOnce.err = fmt.Errorf("hdfstest: %s install: %v\n%s", script, err, out.String())
		}
	})
	return installOnce.err
}

// fail skips the test when HDFS cannot run on this machine (fails under CI)
// and fails it on any other error.
func fail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, errUnavailable) && os.Getenv("CI") == "" {
		t.Skip(err.Error())
	}
	t.Fatal(err)
}

// Start starts a cluster for t and stops it when t ends.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	c, err := start(t.TempDir(), opts...)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(c.Stop)
	return c
}

var shared struct {
	sync.Mutex
	c   *Cluster
	err error
	dir string
	ran bool
}

// Shared returns the package's shared cluster, starting it on the first
// call (later calls ignore opts). It holds no goroutine (goleak-safe), and
// needs no explicit stop: when the test binary exits, the JVM's stdin
// closes and it shuts down and removes its directory. StopShared (or Main)
// stops it earlier.
func Shared(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.ran {
		shared.ran = true
		shared.dir, shared.err = os.MkdirTemp("", "hdfstest-")
		if shared.err == nil {
			// The JVM outlives the test binary by a moment when nobody
			// calls StopShared, so it removes its own directory.
			opts = append(opts, func(o *options) { o.cleanup = true })
			shared.c, shared.err = start(shared.dir, opts...)
			if shared.err != nil {
				os.RemoveAll(shared.dir)
				shared.dir = ""
			}
		}
	}
	if shared.err != nil {
		fail(t, shared.err)
	}
	return shared.c
}

// StopShared stops the shared cluster, if it was started, and removes its
// files.
func StopShared() {
	shared.Lock()
	defer shared.Unlock()
	if shared.c != nil {
		shared.c.Stop()
		shared.c = nil
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
		shared.dir = ""
	}
}

// Main runs a package's tests and then stops the shared cluster:
//
//	func TestMain(m *testing.M) { hdfstest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

type stateFile struct {
	Namenode  string `json:"namenode"`
	HTTP      string `json:"http"`
	Superuser string `json:"superuser"`
	BlockSize int64  `json:"block_size"`
	Datanodes []struct {
		Addr     string `json:"addr"`
		Hostname string `json:"hostname"`
		Rack     string `json:"rack"`
	} `json:"datanodes"`
}

func start(dir string, opts ...Option) (*Cluster, error) {
	o := options{datanodes: 3, blockSize: 1 << 20, timeout: 120 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if err := install(); err != nil {
		return nil, err
	}
	state := filepath.Join(dir, "state.json")
	logPath := filepath.Join(dir, "minihdfs.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("hdfstest: %w", err)
	}
	defer logf.Close()
	args := []string{Script(), "run", state, "--dir", filepath.Join(dir, "data"),
		"--datanodes", fmt.Sprint(o.datanodes), "--block-size", fmt.Sprint(o.blockSize),
		"--exit-on-stdin-eof"}
	if o.replication > 0 {
		args = append(args, "--replication", fmt.Sprint(o.replication))
	}
	if o.ipHosts {
		args = append(args, "--hostnames", "ip")
	}
	if o.cleanup {
		args = append(args, "--cleanup-dir", dir)
	}
	t0 := time.Now()
	proc, err := startProcess(logf, "bash", args...)
	if err != nil {
		return nil, fmt.Errorf("hdfstest: start MiniHDFS: %w", err)
	}
	c := &Cluster{Dir: dir, Log: logPath, proc: proc}

	deadline := time.NewTimer(o.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, exited := proc.exited(); exited {
			return nil, fmt.Errorf("hdfstest: MiniHDFS exited before it was ready (%s); log %s:\n%s", st, logPath, tail(logPath))
		}
		select {
		case <-deadline.C:
			c.Stop()
			return nil, fmt.Errorf("hdfstest: MiniHDFS not ready after %v; log %s:\n%s", o.timeout, logPath, tail(logPath))
		case <-tick.C:
		}
		b, err := os.ReadFile(state)
		if err != nil {
			continue // written atomically: absent until ready
		}
		var st stateFile
		if err := json.Unmarshal(b, &st); err != nil {
			c.Stop()
			return nil, fmt.Errorf("hdfstest: bad state file %s: %v", state, err)
		}
		c.Namenode, c.HTTP, c.Superuser, c.BlockSize = st.Namenode, st.HTTP, st.Superuser, st.BlockSize
		for _, d := range st.Datanodes {
			c.Datanodes = append(c.Datanodes, d.Addr)
			c.Hostnames = append(c.Hostnames, d.Hostname)
			c.Racks = append(c.Racks, d.Rack)
		}
		fmt.Fprintf(os.Stderr, "hdfstest: MiniHDFS up in %.1fs at %s (http %s)\n", time.Since(t0).Seconds(), c.Namenode, c.HTTP)
		return c, nil
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// Stop shuts the cluster down: it closes the JVM's stdin, and kills it if
// it has not exited within 10 seconds. Safe to call more than once.
func (c *Cluster) Stop() {
	c.once.Do(func() { c.proc.stop(10 * time.Second) })
}

// URL returns the hdfs:// URL of path on this cluster.
func (c *Cluster) URL(path string) string {
	return "hdfs://" + c.Namenode + "/" + strings.TrimPrefix(path, "/")
}

// Client returns a client acting as user (the superuser if user is ""),
// closed when t ends.
func (c *Cluster) Client(t testing.TB, user string) *hdfs.Client {
	t.Helper()
	if user == "" {
		user = c.Superuser
	}
	cl, err := hdfs.NewClient(hdfs.ClientOptions{
		Addresses:        []string{c.Namenode},
		User:             user,
		NamenodeDialFunc: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		DatanodeDialFunc: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	})
	if err != nil {
		t.Fatalf("hdfstest: connect to %s as %s: %v", c.Namenode, user, err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Upload copies localPath to hdfsPath (a plain path or this cluster's URL)
// as the superuser, creating parent directories and replacing any file
// already there.
func (c *Cluster) Upload(t testing.TB, localPath, hdfsPath string) {
	t.Helper()
	cl := c.Client(t, "")
	p := c.path(hdfsPath)
	if err := cl.MkdirAll(pathDir(p), 0o755); err != nil {
		t.Fatalf("hdfstest: mkdir for %s: %v", p, err)
	}
	// A namenode refuses a file's next block until the previous one has
	// its minimum replicas (NotReplicatedYetException); Java clients retry
	// addBlock, this client cannot resume a file: write it again.
	wait := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if err := cl.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("hdfstest: replace %s: %v", p, err)
		}
		err := copyToRemote(cl, localPath, p)
		if err == nil {
			return
		}
		if attempt == 5 || !strings.Contains(err.Error(), "NotReplicatedYetException") {
			t.Fatalf("hdfstest: upload %s to %s (attempt %d): %v", localPath, p, attempt, err)
		}
		t.Logf("hdfstest: upload %s: %v; writing it again", p, err)
		time.Sleep(wait)
		wait *= 2
	}
}

// copyToRemote is hdfs.Client.CopyToRemote, but retries the close while
// the namenode waits for datanodes to report the last block.
func copyToRemote(cl *hdfs.Client, local, remote string) error {
	src, err := os.Open(local)
	if err != nil {
		return err
	}
	defer src.Close()
	w, err := cl.Create(remote)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, src); err != nil {
		w.Close()
		return err
	}
	wait := 50 * time.Millisecond
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := w.Close()
		if !hdfs.IsErrReplicating(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// WriteFile writes data to hdfsPath like Upload.
func (c *Cluster) WriteFile(t testing.TB, hdfsPath string, data []byte) {
	t.Helper()
	local := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c.Upload(t, local, hdfsPath)
}

func (c *Cluster) path(p string) string {
	p = strings.TrimPrefix(p, "hdfs://"+c.Namenode)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return p
}

func pathDir(p string) string {
	if i := strings.LastIndex(p, "/"); i > 0 {
		return p[:i]
	}
	return "/"
}
