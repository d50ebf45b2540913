// Command lr measures logistic-regression training in the flexps engine
// against a plain single-threaded Go SGD loop over the same data, in one
// run: it generates a seeded LIBSVM data set (train and held-out test),
// measures how fast the file parses, trains the plain loop on the records
// parsed into memory (only the epochs are timed), then runs the lr.sgd
// stage on an in-process cluster (1 slave) with 1 worker and with 2
// workers, and prints samples/s, the ratios the project aims for, and
// every model's accuracy on the held-out file.
//
//	go run ./bench/lr [-rows 200000 -dim 100000 -nnz 20 -epochs 3]
//
// Nothing here asserts a timing; the targets are printed beside the ratios.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// Targets the project set (see bench/README.md).
const (
	oneWorkerTarget  = 0.5 // engine with 1 worker / plain loop
	twoWorkersTarget = 1.6 // engine with 2 workers / engine with 1 worker
)

type options struct {
	rows, testRows, dim, nnz, epochs, batch int
	lr, zipf, noise                         float64
	seed                                    int64
	dtype                                   string
	dir                                     string
	jsonOut                                 bool
	workers                                 []int
	kinds                                   []string
	consistency                             kvstore.Consistency
	cacheSize                               int
	rounds                                  int
	chunk                                   int
	slaves                                  int
	blockSize                               int64
}

func main() {
	var o options
	var cpuprofile string
	flag.IntVar(&o.rows, "rows", 200000, "training rows")
	flag.IntVar(&o.testRows, "test-rows", 0, "held-out rows (default rows/10)")
	flag.IntVar(&o.dim, "dim", 100000, "feature dimensions (table size)")
	flag.IntVar(&o.nnz, "nnz", 20, "non-zeros per row")
	flag.IntVar(&o.epochs, "epochs", 3, "training epochs")
	flag.IntVar(&o.batch, "batch", 100, "mini-batch size")
	flag.Float64Var(&o.lr, "lr", 0.5, "learning rate")
	flag.Float64Var(&o.zipf, "zipf", 1.1, "Zipf skew of feature ids (0: uniform), as configs/lr.toml")
	flag.Float64Var(&o.noise, "noise", 0.02, "label noise")
	flag.Int64Var(&o.seed, "seed", 1, "data seed")
	flag.StringVar(&o.dtype, "dtype", "float32", "table dtype (float32 or float64); the plain loop stores its weights the same way")
	flag.StringVar(&o.dir, "dir", "", "where to write the data and models (default: a temporary directory, removed at the end)")
	flag.BoolVar(&o.jsonOut, "json", false, "also write one JSON line per result to stdout")
	flag.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the engine runs to this file")
	kinds := flag.String("kinds", "ps", "worker kinds to run, comma-separated (ps, ps+lru, ps+lfu: ps with that process cache, local, hogwild, single); each with every -workers count (single: 1)")
	cons := flag.String("consistency", "asp", "consistency of the engine's stage: asp, bsp or ssp:N")
	workers := flag.String("workers", "1,2", "worker counts to run each kind with")
	flag.IntVar(&o.cacheSize, "cache-size", 100000, "keys of the process cache of ps+lru and ps+lfu runs")
	flag.IntVar(&o.slaves, "slaves", 1, "in-process slaves; with 2, a ps stage's keys are half remote (and each slave has workers/slaves slots)")
	flag.IntVar(&o.chunk, "chunk", 0, "local kind: keys per chunk lock (0: the engine's default)")
	flag.IntVar(&o.rounds, "rounds", 1, "interleaved rounds of the plain loop and every engine run")
	flag.Int64Var(&o.blockSize, "block-size", 0, "bytes per input block of the engine runs (0: the cluster default, 8 MiB: 7 blocks for 200k rows, so 2 workers get 4 and 3)")
	flag.Parse()
	var err error
	if o.consistency, err = parseConsistency(*cons); err != nil {
		fmt.Fprintln(os.Stderr, "bench/lr:", err)
		os.Exit(2)
	}
	o.kinds = strings.Split(*kinds, ",")
	for _, w := range strings.Split(*workers, ",") {
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench/lr: bad -workers %q\n", *workers)
			os.Exit(2)
		}
		o.workers = append(o.workers, n)
	}
	if o.testRows <= 0 {
		o.testRows = max(o.rows/10, 1)
	}
	if err := run(o, cpuprofile); err != nil {
		fmt.Fprintln(os.Stderr, "bench/lr:", err)
		os.Exit(1)
	}
}

// result is one trainer's outcome.
type result struct {
	Name           string    `json:"name"`
	Seconds        float64   `json:"seconds"` // training time (plain: the epochs; engine: the stage)
	Samples        int64     `json:"samples"`
	SamplesPerS    float64   `json:"samples_per_s"`
	LaterPerS      float64   `json:"epoch2_samples_per_s,omitempty"` // epochs 2.. only
	TrainLoss      float64   `json:"last_epoch_train_loss"`          // mean progressive loss of the last epoch
	TestAccuracy   float64   `json:"test_accuracy"`
	TestLogLoss    float64   `json:"test_logloss"`
	EpochSeconds   []float64 `json:"epoch_seconds"`
	EpochSamplesPS []float64 `json:"epoch_samples_per_s"`
	CacheHitRate   float64   `json:"cache_hit_rate,omitempty"`
	BlockedSeconds float64   `json:"blocked_seconds"` // workers' time waiting on the consistency model
}

func run(o options, cpuprofile string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	dir := o.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "flexps-bench-lr-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	train, test := filepath.Join(dir, "train.libsvm"), filepath.Join(dir, "test.libsvm")
	t0 := time.Now()
	if err := synth.Generate(train, synth.Spec{Kind: "libsvm", Rows: o.rows, Dim: o.dim, NNZ: o.nnz, Zipf: o.zipf,
		Noise: o.noise, Seed: o.seed, TestPath: test, TestRows: o.testRows}); err != nil {
		return err
	}
	fi, err := os.Stat(train)
	if err != nil {
		return err
	}
	fmt.Printf("# flexps lr bench: %d train + %d test rows, dim %d, nnz %d, zipf %v, %d epochs, batch %d, lr %v, %s weights, GOMAXPROCS=%d\n",
		o.rows, o.testRows, o.dim, o.nnz, o.zipf, o.epochs, o.batch, o.lr, o.dtype, runtime.GOMAXPROCS(0))
	fmt.Printf("# data: %s (%.1f MB) generated in %.1fs\n", train, float64(fi.Size())/1e6, time.Since(t0).Seconds())

	// Parse throughput: ReadBlock over every block, as a worker's
	// AsyncReader does each epoch. The batches are kept for the plain loop.
	trainRecs, parse, err := parseAll(ctx, train)
	if err != nil {
		return err
	}
	testRecs, _, err := parseAll(ctx, test)
	if err != nil {
		return err
	}
	testAll := concat(testRecs)
	parseMBs := float64(parse.bytes) / 1e6 / parse.seconds
	fmt.Printf("# parse: %d blocks, %d records, %.1f MB in %.2fs = %.1f MB/s, %.0f records/s (one goroutine, ReadBlock with the libsvm format)\n",
		parse.blocks, parse.records, float64(parse.bytes)/1e6, parse.seconds, parseMBs, float64(parse.records)/parse.seconds)

	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// Rounds interleave the plain loop and every engine run, so each
	// engine/plain ratio is taken within a round; the summary prints the
	// median over rounds.
	var rounds [][]result
	for round := 1; round <= o.rounds; round++ {
		results := []result{plainSGD(o, trainRecs, testAll)}
		for _, kind := range o.kinds {
			for _, w := range o.workers {
				if kind == tasks.KindSingle && w > 1 {
					continue
				}
				r, err := engineSGD(ctx, o, kind, w, train, filepath.Join(dir, fmt.Sprintf("model-%s-%dw", kind, w)), testAll)
				if err != nil {
					return fmt.Errorf("engine, %s kind with %d workers: %w", kind, w, err)
				}
				results = append(results, r)
			}
		}
		if round == 1 {
			report(o, results, parse)
		}
		rounds = append(rounds, results)
	}
	summarize(rounds)
	return nil
}

// summarize prints, per engine run, the median over rounds of its
// samples/s divided by the plain loop's of the same round (whole run and
// epochs 2+), and the per-round values.
func summarize(rounds [][]result) {
	fmt.Printf("\n%d round(s); ratio = engine samples/s / plain loop samples/s in the same round, median over rounds\n", len(rounds))
	fmt.Printf("(vs first engine run: epochs 2+ samples/s / the first engine run's in the same round, e.g. ps+lru / ps)\n")
	fmt.Printf("%-40s %8s %10s %22s   %s\n", "run", "whole", "epochs 2+", "vs first engine run", "per round (epochs 2+)")
	for i := 1; i < len(rounds[0]); i++ {
		var whole, later, first []float64
		for _, rs := range rounds {
			whole = append(whole, rs[i].SamplesPerS/rs[0].SamplesPerS)
			if rs[i].LaterPerS > 0 && rs[0].LaterPerS > 0 {
				later = append(later, rs[i].LaterPerS/rs[0].LaterPerS)
			}
			if rs[i].LaterPerS > 0 && rs[1].LaterPerS > 0 {
				first = append(first, rs[i].LaterPerS/rs[1].LaterPerS)
			}
		}
		per := ""
		for j, v := range later {
			per += fmt.Sprintf(" %.2f", v)
			if len(first) == len(later) && i > 1 {
				per += fmt.Sprintf(" (%.2f)", first[j])
			}
		}
		fmt.Printf("%-40s %8.2f %10.2f %22.2f  %s\n", rounds[0][i].Name, median(whole), median(later), median(first), per)
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// parseConsistency reads asp, bsp or ssp:N.
func parseConsistency(s string) (kvstore.Consistency, error) {
	switch {
	case s == "asp":
		return kvstore.Consistency{Kind: kvstore.ASP}, nil
	case s == "bsp":
		return kvstore.Consistency{Kind: kvstore.BSP}, nil
	case strings.HasPrefix(s, "ssp:"):
		n, err := strconv.Atoi(s[len("ssp:"):])
		if err != nil || n < 0 {
			return kvstore.Consistency{}, fmt.Errorf("-consistency %q: want ssp:N with N >= 0", s)
		}
		return kvstore.Consistency{Kind: kvstore.SSP, Staleness: n}, nil
	}
	return kvstore.Consistency{}, fmt.Errorf("-consistency %q: want asp, bsp or ssp:N", s)
}

// engineBlockSize is the master's default block size for local files, so
// the parse measurement reads the blocks the engine's workers read.
const engineBlockSize = 8 << 20

type parseStats struct {
	blocks  int
	records int64
	bytes   int64
	seconds float64
}

// parseAll reads every block of path with the libsvm format (1-based ids,
// as the engine's input defaults) and keeps the emitted batches.
func parseAll(ctx context.Context, path string) ([]*datastore.Records, parseStats, error) {
	var st parseStats
	f, err := datastore.NewFormat("libsvm", datastore.DefaultFormatOptions())
	if err != nil {
		return nil, st, err
	}
	src := datastore.NewLocalSource()
	blocks, err := src.Blocks(ctx, path, engineBlockSize)
	if err != nil {
		return nil, st, err
	}
	var out []*datastore.Records
	start := time.Now()
	for _, b := range blocks {
		rs, err := datastore.ReadBlock(ctx, src, b, f, datastore.ReadOptions{}, func(r *datastore.Records) error {
			out = append(out, r)
			return nil
		})
		if err != nil {
			return nil, st, err
		}
		st.records += rs.Records
		st.bytes += rs.Bytes
	}
	st.seconds = time.Since(start).Seconds()
	st.blocks = len(blocks)
	return out, st, nil
}

func concat(batches []*datastore.Records) *datastore.Records {
	all := &datastore.Records{}
	for _, r := range batches {
		for i := 0; i < r.Len(); i++ {
			l, k, v := r.Row(i)
			all.Append(l, k, v)
		}
	}
	return all
}

// engineSGD runs lr.sgd with the given number of workers on a fresh
// in-process cluster of one slave with that many slots.
func engineSGD(ctx context.Context, o options, kind string, workers int, train, output string, test *datastore.Records) (result, error) {
	name := fmt.Sprintf("engine %s, %d worker", kind, workers)
	if workers > 1 {
		name += "s"
	}
	res := result{Name: name}
	cache := ""
	if base, c, ok := strings.Cut(kind, "+"); ok {
		kind, cache = base, c
	}
	slots := max(1, (workers+o.slaves-1)/o.slaves)
	l, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: o.slaves, Slots: slots, Log: zerolog.Nop()})
	if err != nil {
		return res, err
	}
	defer l.Close()
	t := tasks.NewTask("bench-lr")
	t.Kind = "lr"
	t.Output = output
	t.AddTable(kvstore.TableSpec{Name: "w", Size: uint64(o.dim), DType: kvstore.DType(o.dtype), Storage: kvstore.Dense})
	t.SetInput("train", tasks.InputSpec{Path: train, Format: "libsvm", BlockSize: o.blockSize})
	cons := o.consistency
	if workers == 1 {
		cons = kvstore.Consistency{Kind: kvstore.ASP}
	}
	stage := tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: workers, WorkerKind: kind,
		Consistency: cons,
		Params: tasks.Params{"epochs": o.epochs, "batch": o.batch, "lr": o.lr,
			// The same workload as the plain loop and the peers: raw features, no intercept.
			"standardize": false, "intercept": false}}
	if kind != tasks.KindPS {
		stage.ChunkSize = o.chunk // a ps stage has no chunk locks (refused)
	}
	if cache != "" {
		stage.Cache, stage.CacheSize = cache, o.cacheSize
	}
	t.SetStages(stage)
	st, err := l.SubmitAndWait(ctx, t, nil)
	if err != nil {
		return res, err
	}
	if len(st.Results) != 1 {
		return res, fmt.Errorf("task ended with %d stage results, want 1", len(st.Results))
	}
	sr := st.Results[0]
	res.Seconds, res.Samples = sr.Seconds, sr.Samples
	res.BlockedSeconds = sr.Metrics[tasks.MetricBlockedSeconds]
	if h, m := sr.Metrics[tasks.MetricCacheHits], sr.Metrics[tasks.MetricCacheMisses]; h+m > 0 {
		res.CacheHitRate = h / (h + m)
		res.Name += fmt.Sprintf(" (%.0f%% hits)", 100*res.CacheHitRate)
	}
	res.SamplesPerS = float64(sr.Samples) / sr.Seconds
	var laterN, laterS float64
	for _, e := range sr.Epochs {
		n := e.Metrics["samples"]
		res.EpochSeconds = append(res.EpochSeconds, e.Seconds)
		res.EpochSamplesPS = append(res.EpochSamplesPS, n/e.Seconds)
		if e.Epoch >= 2 {
			laterN += n
			laterS += e.Seconds
		}
		res.TrainLoss = e.Metrics["loss_sum"] / n
	}
	if laterS > 0 {
		res.LaterPerS = laterN / laterS
	}
	m, err := tasks.LoadModel(output)
	if err != nil {
		return res, err
	}
	ev, err := lr.EvalModel(m, test)
	if err != nil {
		return res, err
	}
	res.TestAccuracy, res.TestLogLoss = ev["accuracy"], ev["logloss"]
	return res, nil
}

func report(o options, rs []result, parse parseStats) {
	fmt.Println()
	fmt.Printf("%-28s %10s %10s %14s %14s %12s %10s %10s\n", "trainer", "seconds", "samples", "samples/s", "epoch2+ /s", "train loss", "test acc", "test loss")
	for _, r := range rs {
		later := "-"
		if r.LaterPerS > 0 {
			later = fmt.Sprintf("%.0f", r.LaterPerS)
		}
		fmt.Printf("%-28s %10.2f %10d %14.0f %14s %12.4f %10.4f %10.4f\n", r.Name, r.Seconds, r.Samples, r.SamplesPerS, later, r.TrainLoss, r.TestAccuracy, r.TestLogLoss)
	}
	fmt.Println()
	fmt.Println("per-epoch samples/s (engine epochs: the slowest worker's epoch time, which includes re-reading and parsing the file):")
	for _, r := range rs {
		fmt.Printf("  %-28s", r.Name)
		for i, v := range r.EpochSamplesPS {
			fmt.Printf("  e%d %.0f (%.2fs)", i+1, v, r.EpochSeconds[i])
		}
		fmt.Println()
	}
	plain, one := rs[0], rs[1]
	if len(o.kinds) != 1 || !slices.Equal(o.workers, []int{1, 2}) {
		writeJSON(o, rs)
		return
	}
	fmt.Println()
	check := func(what string, v, target float64) {
		mark := "ok"
		if v < target {
			mark = "BELOW"
		}
		fmt.Printf("%-52s %6.2f   (target >= %.1f: %s)\n", what, v, target, mark)
	}
	check("ratio engine 1 worker / plain (whole stage)", one.SamplesPerS/plain.SamplesPerS, oneWorkerTarget)
	if one.LaterPerS > 0 {
		check("ratio engine 1 worker / plain (epochs 2+)", one.LaterPerS/plain.LaterPerS, oneWorkerTarget)
	}
	if len(rs) > 2 {
		two := rs[2]
		check("ratio engine 2 workers / 1 worker (whole stage)", two.SamplesPerS/one.SamplesPerS, twoWorkersTarget)
		if two.LaterPerS > 0 && one.LaterPerS > 0 {
			check("ratio engine 2 workers / 1 worker (epochs 2+)", two.LaterPerS/one.LaterPerS, twoWorkersTarget)
		}
	}
	// Where the engine's time goes: every engine epoch re-parses the file.
	parsePerEpoch := parse.seconds
	trainPerEpoch := float64(o.rows) / plain.SamplesPerS
	fmt.Printf("\nper epoch of %d rows: parsing alone takes %.2fs (%.1f MB/s), the plain loop's training %.2fs;\n",
		o.rows, parsePerEpoch, float64(parse.bytes)/1e6/parse.seconds, trainPerEpoch)
	fmt.Printf("a single-threaded parse+train epoch would take about %.2fs (%.0f samples/s); the 1-worker engine epoch took %.2fs\n",
		parsePerEpoch+trainPerEpoch, float64(o.rows)/(parsePerEpoch+trainPerEpoch), meanLater(one))
	writeJSON(o, rs)
}

func writeJSON(o options, rs []result) {
	if !o.jsonOut {
		return
	}
	enc := json.NewEncoder(os.Stdout)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, "bench/lr:", err)
		}
	}
}

// meanLater is the mean epoch time from epoch 2 on (or of all epochs).
func meanLater(r result) float64 {
	s, n := 0.0, 0
	for i, v := range r.EpochSeconds {
		if i >= 1 || len(r.EpochSeconds) == 1 {
			s += v
			n++
		}
	}
	return s / float64(max(n, 1))
}
