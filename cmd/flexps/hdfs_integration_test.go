package main

// End-to-end tests of reading input from HDFS: a MiniHDFS (a Hadoop
// MiniDFSCluster in a JVM, internal/hdfstest) and a flexps cluster of real
// master and slave processes (internal/clustertest) on 127.0.0.1. They skip
// when java or mvn is missing, unless CI is set.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/flexps/flexps/internal/testkit" // testkit.count, known to the re-executed slaves too

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/hdfs"
	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/internal/hdfstest"
	"github.com/flexps/flexps/master/assign"
	"github.com/flexps/flexps/status"
)

// The HDFS tests of this package share one MiniHDFS: 2 datanodes
// (dn0.localhost, dn1.localhost), replication 1 so every block has exactly
// one host, and 256 KiB blocks so small files span several blocks.
const hdfsBlockSize = 256 << 10

func miniHDFS(t *testing.T) *hdfstest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("HDFS integration test (starts a JVM and processes); skipped with -short")
	}
	c := hdfstest.Shared(t, hdfstest.Datanodes(2), hdfstest.Replication(1), hdfstest.BlockSize(hdfsBlockSize))
	if len(c.Datanodes) != 2 || c.BlockSize != hdfsBlockSize {
		t.Fatalf("the shared MiniHDFS was started with other options: %d datanodes, %d-byte blocks", len(c.Datanodes), c.BlockSize)
	}
	return c
}

// hdfsConfig is the [hdfs] table that points master and slaves at c.
// A generous timeout: a cold MiniHDFS JVM on a loaded machine may take
// over 10 s for its first WebHDFS answer; a healthy one answers at once.
func hdfsConfig(c *hdfstest.Cluster) string {
	return fmt.Sprintf("[hdfs]\nnamenodes = [%q]\nuser = %q\nhttp = %q\ntimeout = \"60s\"\n", c.Namenode, c.Superuser, c.HTTP)
}

// hdfsBlocks lists url's blocks as the master does.
func hdfsBlocks(t *testing.T, c *hdfstest.Cluster, url string, blockSize int64) []datastore.Block {
	t.Helper()
	src, err := hdfs.New(hdfs.Config{Namenodes: []string{c.Namenode}, HTTPAddr: c.HTTP, User: c.Superuser})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	blocks, err := src.Blocks(context.Background(), url, blockSize)
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

func submitOK(t *testing.T, c *clustertest.Cluster, job string) clustertest.Result {
	t.Helper()
	r := c.Run(4*time.Minute, "submit", job)
	if r.Exit != 0 {
		t.Fatalf("flexps submit %s failed (%d):\n%s\n%s", filepath.Base(job), r.Exit, r.Stdout, lastBytes(r.Stderr, 4000))
	}
	return r
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// lastTask is the status of the most recently submitted task.
func lastTask(t *testing.T, c *clustertest.Cluster) status.Task {
	t.Helper()
	rep, err := c.Client().Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tasks) == 0 {
		t.Fatal("status lists no task")
	}
	return rep.Tasks[len(rep.Tasks)-1]
}

func TestHDFSLRMatchesLocalFiles(t *testing.T) {
	h := miniHDFS(t)
	dir := t.TempDir()
	train, test := lrData(t, dir, 12000, 2000)
	fi, err := os.Stat(train)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 3*hdfsBlockSize {
		t.Fatalf("train file %d bytes is not several HDFS blocks", fi.Size())
	}
	h.Upload(t, train, "/lr/train.libsvm")
	h.Upload(t, test, "/lr/test.libsvm")
	hTrain, hTest := h.URL("/lr/train.libsvm"), h.URL("/lr/test.libsvm")
	if n := len(hdfsBlocks(t, h, hTrain, 0)); n < 3 {
		t.Fatalf("train file has %d HDFS blocks, want several", n)
	}

	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, ExtraConfig: hdfsConfig(h)})

	localModel := filepath.Join(dir, "local.model")
	submitOK(t, c, lrJob(t, dir, "local", train, test, localModel, 2000, 4, 3, "bsp"))

	// The HDFS job reads whole HDFS blocks (no block_size: the cluster's
	// 8 MiB default exceeds the 256 KiB HDFS blocks), so records straddle
	// the edges of the blocks the workers read.
	hdfsModel := filepath.Join(dir, "hdfs.model")
	job := lrJob(t, dir, "hdfs", hTrain, hTest, hdfsModel, 2000, 4, 3, "bsp")
	data, _ := os.ReadFile(job)
	os.WriteFile(job, bytes.Replace(data, []byte("block_size = 65536\n"), nil, 1), 0o644)
	t0 := time.Now()
	r := submitOK(t, c, job)
	t.Logf("HDFS job took %v", time.Since(t0))
	if !strings.Contains(r.Stdout, "test_acc") {
		t.Fatalf("submit output lacks the summary:\n%s", r.Stdout)
	}
	st := lastTask(t, c)
	if st.State != status.Done || len(st.Results) != 1 {
		t.Fatalf("HDFS task: %+v", st)
	}
	// 3 epochs of train + test; later epochs may replay from the data cache.
	if rb := st.Results[0].Metrics["read_bytes"]; rb < float64(fi.Size()) {
		t.Errorf("the HDFS stage read %.0f bytes, less than the train file's %d", rb, fi.Size())
	}

	la, ha := accuracy(t, localModel, test), accuracy(t, hdfsModel, test)
	t.Logf("test accuracy: local files %.4f, HDFS %.4f", la, ha)
	if la < 0.75 || ha < 0.75 {
		t.Fatalf("accuracy too low: local %.4f HDFS %.4f", la, ha)
	}
	if d := la - ha; d > 0.02 || d < -0.02 {
		t.Fatalf("HDFS accuracy %.4f differs from local files' %.4f by more than 2 points", ha, la)
	}
}

func TestHDFSLocality(t *testing.T) {
	h := miniHDFS(t)
	dir := t.TempDir()
	train, _ := lrData(t, dir, 40000, 2000)
	h.Upload(t, train, "/locality/train.libsvm")
	url := h.URL("/locality/train.libsvm")
	// Each 256 KiB HDFS block is read as 4 pieces of 64 KiB that keep its
	// host: finer units for the pulling workers.
	const split = 64 << 10
	blocks := hdfsBlocks(t, h, url, split)
	perHost := map[string]int64{}
	var total int64
	for _, b := range blocks {
		if len(b.Hosts) != 1 {
			t.Fatalf("block %v has hosts %v, want exactly one (replication 1)", b, b.Hosts)
		}
		perHost[b.Hosts[0]] += b.Length
		total += b.Length
	}
	t.Logf("%d blocks, bytes per datanode %v", len(blocks), perHost)
	if len(perHost) != 2 {
		t.Fatalf("all blocks on one datanode %v: locality cannot be told from chance", perHost)
	}

	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 1,
		ExtraConfig: hdfsConfig(h), SlaveHosts: h.Hostnames})
	job := filepath.Join(dir, "locality.toml")
	os.WriteFile(job, []byte(fmt.Sprintf(`name = "locality"
kind = "lr"
[[table]]
name = "w"
size = 2000
[input.train]
path = %q
block_size = %d
[[stage]]
name = "sgd"
func = "lr.sgd"
workers = 2
consistency = "asp"
[stage.params]
epochs = 1
batch = 50
standardize = false  # one pass over the data: every byte read once
`, url, split)), 0o644)
	submitOK(t, c, job)

	st := lastTask(t, c)
	if st.State != status.Done || len(st.Results) != 1 {
		t.Fatalf("task: %+v", st)
	}
	res := st.Results[0]
	if len(res.WorkerStats) != 2 || len(res.Placement) != 2 {
		t.Fatalf("want 2 workers on 2 slaves: placement %v, worker stats %+v", res.Placement, res.WorkerStats)
	}
	hostOf := map[string]string{}
	for i := range c.Slaves {
		hostOf[fmt.Sprintf("slave-%d", i)] = h.Hostnames[i] // clustertest names slave i "slave-i"
	}
	var workers []assign.Worker
	var read, local int64
	for _, w := range res.WorkerStats {
		host, ok := hostOf[w.Slave]
		if !ok {
			t.Fatalf("worker %d ran on unknown slave %q", w.Rank, w.Slave)
		}
		workers = append(workers, assign.Worker{Rank: w.Rank, Host: host})
		read += w.ReadBytes
		local += w.LocalBytes
		t.Logf("rank %d on %s (%s): read %d bytes, %d local, %d blocks, waited %.2fs", w.Rank, w.Slave, host, w.ReadBytes, w.LocalBytes, w.Blocks, w.WaitSecs)
	}
	if read != total {
		t.Fatalf("workers read %d bytes, the file has %d", read, total)
	}
	if m := res.Metrics; int64(m["read_bytes"]) != read || int64(m["read_local_bytes"]) != local {
		t.Errorf("stage metrics read_bytes %v read_local_bytes %v disagree with the worker stats (%d, %d)", m["read_bytes"], m["read_local_bytes"], read, local)
	}
	got := float64(local) / float64(read)

	// The locality-blind baseline over the same blocks and workers,
	// averaged over seeds.
	var sum float64
	const seeds = 200
	for seed := range uint64(seeds) {
		l, tot := assign.Locality(assign.Random(blocks, workers, seed), workers)
		sum += float64(l) / float64(tot)
	}
	random := sum / seeds
	t.Logf("locally read: %.1f%% of %d bytes; random assignment: %.1f%%", 100*got, read, 100*random)
	if got <= random {
		t.Fatalf("local fraction %.3f is not above the random assignment's %.3f", got, random)
	}
}

// countData writes rows LIBSVM records whose label is the row index, with
// a varying number of features so lines have many lengths.
func countData(rows int) []byte {
	var b bytes.Buffer
	for i := range rows {
		fmt.Fprintf(&b, "%d", i)
		for j := range i%17 + 1 {
			fmt.Fprintf(&b, " %d:%.3f", j*7+i%5+1, float64(i%1000)/999)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func TestHDFSExactlyOnceWithStraggler(t *testing.T) {
	h := miniHDFS(t)
	const rows = 50000
	data := countData(rows)
	h.WriteFile(t, "/count/train.libsvm", data)
	url := h.URL("/count/train.libsvm")
	blocks := hdfsBlocks(t, h, url, 0)
	straddle := 0
	for _, b := range blocks[1:] {
		if data[b.Offset-1] != '\n' {
			straddle++
		}
	}
	t.Logf("%d bytes in %d HDFS blocks; %d block edges cut a record", len(data), len(blocks), straddle)
	if len(blocks) < 4 || straddle == 0 {
		t.Fatalf("want several blocks with records straddling their edges: %d blocks, %d straddling", len(blocks), straddle)
	}

	command, env := cli()
	// A small read buffer keeps each worker's AsyncReader at most about a
	// block ahead of its consumer, so blocks go to whoever consumes them:
	// with a buffer larger than the data (64 MiB, say) the straggler's
	// producer would pull blocks as fast as it parses them, whatever the
	// worker's speed.
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2,
		ExtraConfig: hdfsConfig(h) + "[data]\nread_buffer = \"256KiB\"\n"})
	dir := t.TempDir()
	job := filepath.Join(dir, "count.toml")
	os.WriteFile(job, []byte(fmt.Sprintf(`name = "count"
[[table]]
name = "w"
size = 10
[input.train]
path = %q
[[stage]]
name = "count"
func = "testkit.count"
workers = 4
consistency = "asp"
[stage.params]
epochs = 2
sleep_ms = 200
`, url)), 0o644)
	submitOK(t, c, job)

	st := lastTask(t, c)
	if st.State != status.Done || len(st.Results) != 1 {
		t.Fatalf("task: %+v", st)
	}
	res := st.Results[0]
	wantSum := float64(rows) * float64(rows-1) / 2
	if len(res.Epochs) != 2 {
		t.Fatalf("want 2 epochs, got %+v", res.Epochs)
	}
	for _, e := range res.Epochs {
		n, sum := e.Metrics["records"], e.Metrics["label_sum"]
		t.Logf("epoch %d: %d workers, %.0f records (%.0f by the straggler), label sum %.0f (slowest worker %.2fs)", e.Epoch, e.Workers, n, e.Metrics["straggler_records"], sum, e.Seconds)
		if e.Workers != 4 || n != rows || sum != wantSum {
			t.Errorf("epoch %d: %d workers saw %.0f records with label sum %.0f, want 4 workers, %d records, sum %.0f",
				e.Epoch, e.Workers, n, sum, rows, wantSum)
		}
	}
	for _, w := range res.WorkerStats {
		t.Logf("rank %d on %s: %d blocks (%d from the cache), %d bytes read", w.Rank, w.Slave, w.Blocks, w.Cached, w.ReadBytes)
	}
	// Pulling balances: the straggler, 200 ms per batch of 1024 records, reads
	// well under a fair quarter (it holds at most the block it trains on
	// and one prefetched; with a 64 MiB read buffer it took about
	// 4 of 17 blocks in trials, 24% of the records).
	for _, e := range res.Epochs {
		if s := e.Metrics["straggler_records"]; s >= rows/5 {
			t.Errorf("epoch %d: the straggler (rank 0) read %.0f of %d records, 20%% or more: pulling did not balance", e.Epoch, s, rows)
		}
	}
}

func TestHDFSBadInput(t *testing.T) {
	dir := t.TempDir()
	_, test := lrData(t, dir, 200, 50)
	command, env := cli()

	t.Run("unreachable namenode", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts processes")
		}
		c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 1, Slots: 1})
		addr := fmt.Sprintf("127.0.0.1:%d", clustertest.FreePort(t))
		job := lrJob(t, t.TempDir(), "unreachable", "hdfs://"+addr+"/x", test, "", 50, 1, 1, "bsp")
		r := c.Run(time.Minute, "submit", job)
		msg := r.Stdout + r.Stderr
		t.Logf("submit took %v: %s", r.Took, strings.TrimSpace(msg))
		if r.Exit == 0 {
			t.Fatalf("submit succeeded with an unreachable namenode:\n%s", msg)
		}
		if !strings.Contains(msg, addr) {
			t.Errorf("the error does not name the namenode %s:\n%s", addr, msg)
		}
		if r.Took > 15*time.Second {
			t.Errorf("submit took %v to report an unreachable namenode", r.Took)
		}
		checkOneClearError(t, r.Stderr)
	})

	t.Run("missing path", func(t *testing.T) {
		h := miniHDFS(t)
		c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 1, Slots: 1, ExtraConfig: hdfsConfig(h)})
		url := h.URL("/no/such/train.libsvm")
		job := lrJob(t, t.TempDir(), "missing", url, test, "", 50, 1, 1, "bsp")
		r := c.Run(time.Minute, "submit", job)
		msg := r.Stdout + r.Stderr
		t.Logf("submit took %v: %s", r.Took, strings.TrimSpace(msg))
		if r.Exit == 0 {
			t.Fatalf("submit succeeded with a missing input:\n%s", msg)
		}
		if !strings.Contains(msg, url) {
			t.Errorf("the error does not name the URL %s:\n%s", url, msg)
		}
		if !strings.Contains(msg, "not exist") {
			t.Errorf("the error does not say the file does not exist:\n%s", msg)
		}
		if r.Took > 15*time.Second {
			t.Errorf("submit took %v to report a missing input", r.Took)
		}
		checkOneClearError(t, r.Stderr)
	})
}

// An output that is an input's file spelled otherwise on HDFS (the
// configured namenode's hdfs:///, an HA nameservice's name, a doubled
// slash, the input's directory) is refused at submission, the data left
// as it was: it was written over the training data, and the task
// reported success.
func TestHDFSOutputOverAnInputSpelledOtherwise(t *testing.T) {
	h := miniHDFS(t)
	dir := t.TempDir()
	train, test := lrData(t, dir, 200, 50)
	data, err := os.ReadFile(train)
	if err != nil {
		t.Fatal(err)
	}
	h.WriteFile(t, "/spelled/train.libsvm", data)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 1, Slots: 1, ExtraConfig: hdfsConfig(h)})
	st := hdfs.NewSources(hdfs.Config{Namenodes: []string{h.Namenode}, User: h.Superuser})
	defer st.Close()
	for _, tc := range []struct{ name, input, output string }{
		{"default namenode", "hdfs:///spelled/train.libsvm", h.URL("/spelled/train.libsvm")},
		{"nameservice", "hdfs://ns1/spelled/train.libsvm", h.URL("/spelled/train.libsvm")},
		{"doubled slash", h.URL("/spelled"), h.URL("//spelled//train.libsvm")},
		{"output spelled by the default namenode", h.URL("/spelled/"), "hdfs:///spelled/train.libsvm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := lrJob(t, t.TempDir(), "spelled", tc.input, test, tc.output, 50, 1, 1, "bsp")
			r := c.Run(time.Minute, "submit", job)
			msg := r.Stdout + r.Stderr
			if r.Exit == 0 || !strings.Contains(msg, "output "+tc.output+" is a file of its input \"train\"") {
				t.Errorf("submit (exit %d) did not refuse the output over its input:\n%s", r.Exit, msg)
			}
			r2, err := st.Open(context.Background(), h.URL("/spelled/train.libsvm"), 0)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r2)
			r2.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the training data was overwritten (%d bytes, want %d; %v)", len(got), len(data), err)
			}
		})
	}
}

func checkOneClearError(t *testing.T, stderr string) {
	t.Helper()
	if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
		t.Errorf("stack trace in stderr:\n%s", stderr)
	}
	if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 3 {
		t.Errorf("want one clear error, got %d lines:\n%s", n+1, stderr)
	}
}

// A model written to hdfs:// is scored by `flexps eval --model hdfs://...`
// (and tasks.Evaluate): eval used to open the URL as a local path and say
// "no such file or directory".
func TestHDFSEvalModelOnHDFS(t *testing.T) {
	h := miniHDFS(t)
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	model := h.URL("/eval/" + t.Name() + ".model")
	cfg := filepath.Join(dir, "cluster.toml")
	if err := os.WriteFile(cfg, []byte(hdfsConfig(h)), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run([]string{"run", "--log-level", "error", "--config", cfg, lrJob(t, dir, "evalhdfs", train, test, model, 2000, 1, 2, "bsp")}, &stderr); code != 0 {
		t.Fatalf("run exited %d:\n%s", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"eval", "--model", model, "--data", test}, &stderr); code != 0 {
		t.Fatalf("eval --model %s exited %d:\n%s", model, code, stderr.String())
	}
	if a := accuracy(t, model, test); a < 0.7 {
		t.Errorf("accuracy of the model on HDFS %.3f, want at least 0.7", a)
	}
	stderr.Reset()
	missing := h.URL("/eval/none.model")
	if code := run([]string{"eval", "--model", missing, "--data", test}, &stderr); code == 0 || !strings.Contains(stderr.String(), missing) || !strings.Contains(stderr.String(), "not exist") {
		t.Errorf("eval of a missing model on HDFS: exit %d, stderr %q; want an error naming %s", code, stderr.String(), missing)
	}
}
