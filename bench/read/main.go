// Command read measures the input path of a flexps worker against
// baselines in the same run:
//
//	go run ./bench/read [-rows 600000 -dim 100000 -nnz 20]
//
// It measures, on a generated LIBSVM file: (1) local: ReadBlock (read +
// LIBSVM parse) over every block on local disk, against a raw read of the
// same blocks (open at the block's offset, copy its bytes to io.Discard);
// (2) hdfs: the same over a MiniHDFS started with scripts/hdfs/minihdfs.sh
// (skipped with -hdfs=false, or when java is missing); (3) overlap: one
// epoch of LR (examples/lr MiniBatch.Step on an in-memory table) fed by the
// AsyncReader, reading and training at once, against reading everything
// first and training after.
//
// Nothing here asserts a timing; read the ratios.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/hdfs"
	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/internal/hdfstest"
	"github.com/flexps/flexps/kvstore"
)

type options struct {
	rows, dim, nnz int
	blockSize      int64 // blocks the workers read (the master's data.block_size)
	hdfsBlockSize  int64 // dfs.blocksize of the MiniHDFS
	rounds         int
	batch          int
	lr             float64
	hdfs           bool
	dir            string
}

func main() {
	var o options
	flag.IntVar(&o.rows, "rows", 600000, "rows of the generated LIBSVM file (600k rows of nnz 20: about 150 MB)")
	flag.IntVar(&o.dim, "dim", 100000, "feature dimensions")
	flag.IntVar(&o.nnz, "nnz", 20, "non-zeros per row")
	flag.Int64Var(&o.blockSize, "block-size", 8<<20, "bytes per block read (the master's default data.block_size)")
	flag.Int64Var(&o.hdfsBlockSize, "hdfs-block-size", 64<<20, "HDFS block size of the MiniHDFS (blocks are read in -block-size pieces, as the master splits them)")
	flag.IntVar(&o.rounds, "rounds", 3, "measure each row this many times, alternating with its baseline; keep the best")
	flag.IntVar(&o.batch, "batch", 100, "LR mini-batch size (overlap experiment)")
	flag.Float64Var(&o.lr, "lr", 0.5, "LR learning rate (overlap experiment)")
	flag.BoolVar(&o.hdfs, "hdfs", true, "also measure reading from a MiniHDFS (needs java; mvn on first use)")
	flag.StringVar(&o.dir, "dir", "", "where to write the data (default: a temporary directory, removed at the end)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/read:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx := context.Background()
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "flexps-bench-read-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	path := filepath.Join(dir, "train.libsvm")
	t0 := time.Now()
	if err := generate(path, o); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Printf("# flexps read bench: %d rows, dim %d, nnz %d: %s (%.1f MB, generated in %.1fs); blocks of %s; GOMAXPROCS=%d; best of %d\n",
		o.rows, o.dim, o.nnz, path, mb(fi.Size()), time.Since(t0).Seconds(), size(o.blockSize), runtime.GOMAXPROCS(0), o.rounds)
	format, err := datastore.NewFormat("libsvm", datastore.DefaultFormatOptions())
	if err != nil {
		return err
	}

	local := datastore.NewLocalSource()
	blocks, err := local.Blocks(ctx, path, o.blockSize)
	if err != nil {
		return err
	}
	fmt.Printf("\n%-34s %10s %10s %12s %8s\n", "row", "seconds", "MB/s", "records/s", "ratio")
	rawLocal, parseLocal, err := readRows(ctx, "local", local, blocks, format, o.rounds)
	if err != nil {
		return err
	}

	if o.hdfs {
		if err := hdfsRows(ctx, o, dir, path, format, rawLocal, parseLocal); err != nil {
			fmt.Printf("# hdfs: skipped: %v\n", err)
		}
	}

	return overlap(ctx, o, local, blocks, format)
}

func generate(path string, o options) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := synth.WriteLIBSVM(w, synth.LIBSVMConfig{Rows: o.rows, Dim: o.dim, NNZ: o.nnz, Zipf: 1.1, Seed: 1, Noise: 0.02}); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// measured is one timed pass over the blocks.
type measured struct {
	seconds float64
	bytes   int64
	records int64
}

func (m measured) mbps() float64 { return mb(m.bytes) / m.seconds }

// rawRead copies every block's bytes to io.Discard, one goroutine: the
// bytes ReadBlock consumes, without finding lines or parsing.
func rawRead(ctx context.Context, src datastore.Source, blocks []datastore.Block) (measured, error) {
	buf := make([]byte, 1<<20)
	t0 := time.Now()
	var m measured
	for _, b := range blocks {
		r, err := src.Open(ctx, b.Path, b.Offset)
		if err != nil {
			return m, err
		}
		n, err := io.CopyBuffer(io.Discard, io.LimitReader(r, b.Length), buf)
		r.Close()
		if err != nil {
			return m, fmt.Errorf("raw read of %v: %w", b, err)
		}
		if n != b.Length {
			return m, fmt.Errorf("raw read of %v: %d bytes", b, n)
		}
		m.bytes += n
	}
	m.seconds = time.Since(t0).Seconds()
	return m, nil
}

// parseRead runs ReadBlock over every block, one goroutine, dropping the
// batches.
func parseRead(ctx context.Context, src datastore.Source, blocks []datastore.Block, f datastore.Format) (measured, error) {
	t0 := time.Now()
	var m measured
	for _, b := range blocks {
		st, err := datastore.ReadBlock(ctx, src, b, f, datastore.ReadOptions{}, func(*datastore.Records) error { return nil })
		if err != nil {
			return m, err
		}
		m.bytes += st.Bytes
		m.records += st.Records
	}
	m.seconds = time.Since(t0).Seconds()
	return m, nil
}

// readRows prints the raw and ReadBlock rows of one source, alternating
// them for rounds and keeping the best of each.
func readRows(ctx context.Context, name string, src datastore.Source, blocks []datastore.Block, f datastore.Format, rounds int) (raw, parse measured, err error) {
	if _, err := rawRead(ctx, src, blocks); err != nil { // warm the page cache
		return raw, parse, err
	}
	for i := 0; i < max(rounds, 1); i++ {
		r, err := rawRead(ctx, src, blocks)
		if err != nil {
			return raw, parse, err
		}
		p, err := parseRead(ctx, src, blocks, f)
		if err != nil {
			return raw, parse, err
		}
		if i == 0 || r.seconds < raw.seconds {
			raw = r
		}
		if i == 0 || p.seconds < parse.seconds {
			parse = p
		}
	}
	if raw.bytes != parse.bytes {
		return raw, parse, fmt.Errorf("%s: raw read %d bytes, ReadBlock %d", name, raw.bytes, parse.bytes)
	}
	fmt.Printf("%-34s %10.3f %10.1f %12s %8s\n", name+" raw read", raw.seconds, raw.mbps(), "", "")
	fmt.Printf("%-34s %10.3f %10.1f %12.0f %8.3f\n", name+" ReadBlock (read+parse)", parse.seconds, parse.mbps(),
		float64(parse.records)/parse.seconds, parse.mbps()/raw.mbps())
	return raw, parse, nil
}

// hdfsRows starts a one-datanode MiniHDFS, uploads the file and measures
// reading it back in the pieces the master hands out.
func hdfsRows(ctx context.Context, o options, dir, path string, f datastore.Format, rawLocal, parseLocal measured) error {
	if _, err := exec.LookPath("java"); err != nil {
		return errors.New("java not found on PATH")
	}
	script := hdfstest.Script()
	stateDir := filepath.Join(dir, "minihdfs")
	t0 := time.Now()
	cmd := exec.Command("bash", script, "start", stateDir, "--datanodes", "1", "--block-size", fmt.Sprint(o.hdfsBlockSize))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s start: %w", script, err)
	}
	defer func() {
		stop := exec.Command("bash", script, "stop", stateDir)
		stop.Stdout, stop.Stderr = os.Stderr, os.Stderr
		stop.Run()
	}()
	var st struct {
		Namenode  string `json:"namenode"`
		HTTP      string `json:"http"`
		Superuser string `json:"superuser"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return fmt.Errorf("MiniHDFS state %q: %w", out, err)
	}
	fmt.Printf("# hdfs: MiniHDFS (1 datanode, %s blocks) up in %.1fs at %s\n", size(o.hdfsBlockSize), time.Since(t0).Seconds(), st.Namenode)
	src, err := hdfs.New(hdfs.Config{Namenodes: []string{st.Namenode}, HTTPAddr: st.HTTP, User: st.Superuser, Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer src.Close()
	url := "hdfs://" + st.Namenode + "/bench/train.libsvm"
	up, err := upload(ctx, src, path, url)
	if err != nil {
		return err
	}
	fmt.Printf("# hdfs: uploaded in %.1fs (%.1f MB/s)\n", up.seconds, up.mbps())
	blocks, err := src.Blocks(ctx, url, o.blockSize)
	if err != nil {
		return err
	}
	raw, parse, err := readRows(ctx, "hdfs", src, blocks, f, o.rounds)
	if err != nil {
		return err
	}
	fmt.Printf("%-34s %10s %10s %12s %8.3f\n", "hdfs raw / local raw", "", "", "", raw.mbps()/rawLocal.mbps())
	fmt.Printf("%-34s %10s %10s %12s %8.3f\n", "hdfs ReadBlock / local ReadBlock", "", "", "", parse.mbps()/parseLocal.mbps())
	return nil
}

func upload(ctx context.Context, src *hdfs.Source, path, url string) (measured, error) {
	in, err := os.Open(path)
	if err != nil {
		return measured{}, err
	}
	defer in.Close()
	t0 := time.Now()
	w, err := src.Create(ctx, url)
	if err != nil {
		return measured{}, err
	}
	n, err := io.Copy(w, in)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return measured{seconds: time.Since(t0).Seconds(), bytes: n}, err
}

// memTable is an in-memory dense float32 table for lr.MiniBatch: what a
// worker's table costs when it is local and free.
type memTable struct {
	spec kvstore.TableSpec
	w    []float32
}

func newMemTable(dim int) *memTable {
	return &memTable{spec: kvstore.TableSpec{Name: "w", Size: uint64(dim), Width: 1, DType: kvstore.Float32}, w: make([]float32, dim)}
}

func (t *memTable) Spec() kvstore.TableSpec { return t.spec }

func (t *memTable) Get(keys []uint64, out []float64) error {
	for i, k := range keys {
		out[i] = float64(t.w[k])
	}
	return nil
}

func (t *memTable) Add(keys []uint64, deltas []float64) error {
	for i, k := range keys {
		t.w[k] += float32(deltas[i])
	}
	return nil
}

func (t *memTable) GetChunk([]uint64, []float64) error { return errors.New("memTable: no chunks") }
func (t *memTable) AddChunk([]uint64, []float64) error { return errors.New("memTable: no chunks") }
func (t *memTable) Localize([]uint64) error            { return nil }
func (t *memTable) LocalizeChunks([]uint64) error      { return nil }
func (t *memTable) Flush() error                       { return nil }
func (t *memTable) LocalizeAsync([]uint64) (kvstore.Pending, error) {
	return kvstore.Done{}, nil
}
func (t *memTable) GetAsync(keys []uint64, out []float64) (kvstore.Pending, error) {
	return kvstore.Done{}, t.Get(keys, out)
}

// trainBatches runs MiniBatch.Step over one parsed batch, as lr.sgd does.
func trainBatches(m *lr.MiniBatch, r *datastore.Records, o options, st *lr.Stats) error {
	for lo := 0; lo < r.Len(); lo += o.batch {
		bs, err := m.Step(r, lo, min(lo+o.batch, r.Len()), o.lr, 0)
		if err != nil {
			return err
		}
		st.Add(bs)
	}
	return nil
}

// epochRun is one LR epoch's timings.
type epochRun struct {
	read, train, total float64 // seconds
	stats              lr.Stats
}

// sequential reads and parses every block into memory, then trains.
func sequential(ctx context.Context, o options, src datastore.Source, blocks []datastore.Block, f datastore.Format) (epochRun, error) {
	var e epochRun
	var recs []*datastore.Records
	t0 := time.Now()
	for _, b := range blocks {
		_, err := datastore.ReadBlock(ctx, src, b, f, datastore.ReadOptions{}, func(r *datastore.Records) error {
			recs = append(recs, r)
			return nil
		})
		if err != nil {
			return e, err
		}
	}
	e.read = time.Since(t0).Seconds()
	t1 := time.Now()
	m := lr.NewMiniBatch(newMemTable(o.dim))
	for _, r := range recs {
		if err := trainBatches(m, r, o, &e.stats); err != nil {
			return e, err
		}
	}
	e.train = time.Since(t1).Seconds()
	e.total = time.Since(t0).Seconds()
	return e, nil
}

// overlapped trains on batches as the AsyncReader (one producer, the
// default 64 MiB buffer) parses them, blocks handed out one at a time as a
// worker's FileAssigner would.
func overlapped(ctx context.Context, o options, src datastore.Source, blocks []datastore.Block, f datastore.Format) (epochRun, datastore.PassStats, error) {
	var e epochRun
	var mu sync.Mutex
	next := 0
	t0 := time.Now()
	r := datastore.NewAsyncReader(ctx, datastore.AsyncConfig{Source: src, Format: f,
		Next: func(context.Context) (datastore.Block, bool, error) {
			mu.Lock()
			defer mu.Unlock()
			if next == len(blocks) {
				return datastore.Block{}, false, nil
			}
			next++
			return blocks[next-1], true, nil
		}})
	defer r.Close()
	m := lr.NewMiniBatch(newMemTable(o.dim))
	var train time.Duration
	for {
		rec, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return e, r.Stats(), err
		}
		t := time.Now()
		if err := trainBatches(m, rec, o, &e.stats); err != nil {
			return e, r.Stats(), err
		}
		train += time.Since(t)
	}
	e.total = time.Since(t0).Seconds()
	e.train = train.Seconds()
	return e, r.Stats(), nil
}

func overlap(ctx context.Context, o options, src datastore.Source, blocks []datastore.Block, f datastore.Format) error {
	fmt.Printf("\n# overlap: one LR epoch (MiniBatch.Step, batch %d, in-memory float32 table) over the local file\n", o.batch)
	var seq, ovl epochRun
	var pst datastore.PassStats
	for i := 0; i < max(o.rounds, 1); i++ {
		runtime.GC()
		s, err := sequential(ctx, o, src, blocks, f)
		if err != nil {
			return err
		}
		runtime.GC()
		v, ps, err := overlapped(ctx, o, src, blocks, f)
		if err != nil {
			return err
		}
		if i == 0 || s.total < seq.total {
			seq = s
		}
		if i == 0 || v.total < ovl.total {
			ovl, pst = v, ps
		}
	}
	if seq.stats.N != ovl.stats.N {
		return fmt.Errorf("overlap: sequential trained %d samples, overlapped %d", seq.stats.N, ovl.stats.N)
	}
	lo, hi := max(seq.read, seq.train), seq.read+seq.train
	fmt.Printf("%-34s %10.3f\n", "read (read+parse into memory)", seq.read)
	fmt.Printf("%-34s %10.3f\n", "train (over parsed records)", seq.train)
	fmt.Printf("%-34s %10.3f   (= read + train: %.3f)\n", "sequential epoch", seq.total, hi)
	fmt.Printf("%-34s %10.3f   (consumer waited %.3fs for data, trained %.3fs; producer parsed %.3fs; peak buffer %.1f MB)\n",
		"overlapped epoch (AsyncReader)", ovl.total, pst.WaitTime.Seconds(), ovl.train, pst.ParseTime.Seconds(), mb(pst.PeakBuffered))
	fmt.Printf("%-34s %10.3f .. %.3f\n", "bounds max(read,train) .. read+train", lo, hi)
	pos := 0.0
	if hi > lo {
		pos = (ovl.total - lo) / (hi - lo)
	}
	fmt.Printf("%-34s %10.2f   (0 = perfect overlap, 1 = none; outside [0,1] = outside the bounds)\n", "overlap position", pos)
	fmt.Printf("%-34s %10.3f\n", "speedup sequential / overlapped", seq.total/ovl.total)
	fmt.Printf("# both trained %d samples; train accuracy %.4f (sequential) %.4f (overlapped)\n",
		seq.stats.N, float64(seq.stats.Correct)/float64(seq.stats.N), float64(ovl.stats.Correct)/float64(ovl.stats.N))
	return nil
}

func mb(b int64) float64 { return float64(b) / 1e6 }

func size(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}
