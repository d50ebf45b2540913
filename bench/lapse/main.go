// Command lapse measures matrix factorization with parameter blocking
// (mf.blocked, DSGD) on a real flexps cluster with and without dynamic
// parameter allocation, next to Lapse's own C++ implementation on the same
// data and machine.
//
// It generates a rating matrix with `flexps gen ratings` (low rank plus
// noise; -rows ratings, 10M by default, plus a tenth as a test split),
// sorts it by user (parameter blocking wants each worker's ratings to
// cover few users, as rating exports usually are grouped), and converts
// both files to Lapse's Matrix Market format. It then starts `flexps
// master` and -slaves `flexps slave --slots -slots` processes on 127.0.0.1
// and submits, round by round (ROUNDS, default 1, interleaved so every run
// sees the same machine load):
//
//	(a) static   mf.blocked localize=false, worker_kind ps, ASP: the same
//	             DSGD schedule on the static range directory (a classic PS)
//	(b) localize mf.blocked localize=true: each worker localizes its users
//	             once and the item block of every sub-epoch
//	(c) local    mf.blocked, worker_kind local on one slave (-slots workers):
//	             the model in one process's memory
//	(d) lapse    Lapse's apps/matrix_factorization, DSGD, -slaves processes x
//	             -slots worker threads, same rank, epochs and step
//
// Epoch times are the slowest worker's; flexps's first epoch includes
// reading the input into memory and localizing the users, so the table
// reports the mean of epochs 2..N (and epoch 1 apart); Lapse's epoch time
// excludes its data loading and loss computation. Test RMSE is computed
// from the written model (flexps) or Lapse's own test loss.
//
//	go run ./bench/lapse                         # 10M ratings, one round
//	ROUNDS=3 go run ./bench/lapse
//	go run ./bench/lapse -rows 1000000 -users 20000 -items 5000   # quick
//
// Nothing here asserts a timing; the target ((a)/(b) >= 4) is printed
// beside the ratio.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/flexps/flexps/examples/mf" // the "mf" model evaluator
	"github.com/flexps/flexps/internal/benchkit"
	"github.com/flexps/flexps/tasks"
)

// targetRatio is the target for static / localize epoch time.
const targetRatio = 4.0

type opts struct {
	dir, flexps, lapse        string
	rows                      int64
	users, items, hiddenRank  int
	rank, epochs, batch, seed int
	lr, l2                    float64
	slaves, slots, rounds     int
	only                      string
	lapseTimeout              time.Duration
	keepCluster               bool
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

// slaveRole is the program's own slave mode (its stage functions registered).
var slaveRole *benchkit.SlaveRole

func main() {
	var o opts
	rounds := 1
	if v := os.Getenv("ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "ROUNDS=%q: want a positive integer\n", v)
			os.Exit(2)
		}
		rounds = n
	}
	flag.StringVar(&o.dir, "dir", filepath.Join(os.TempDir(), "flexps-bench-lapse"), "work directory (data is kept there and reused)")
	flag.StringVar(&o.flexps, "flexps", "", "flexps binary (default: go build ./cmd/flexps into -dir)")
	flag.StringVar(&o.lapse, "lapse", "", "Lapse's matrix_factorization binary (default: DIR/lapse-mf/matrix_factorization, as bench/lapse/build_lapse.sh writes it)")
	flag.Int64Var(&o.rows, "rows", 10_000_000, "training ratings")
	flag.IntVar(&o.users, "users", 200_000, "users (rows of the matrix)")
	flag.IntVar(&o.items, "items", 20_000, "items (columns)")
	flag.IntVar(&o.hiddenRank, "hidden-rank", 8, "rank of the generating model")
	flag.IntVar(&o.rank, "rank", 16, "factorization rank")
	flag.IntVar(&o.epochs, "epochs", 3, "epochs")
	flag.IntVar(&o.batch, "batch", 1000, "mf.blocked mini-batch (ratings per Get/Add)")
	flag.Float64Var(&o.lr, "lr", 0.01, "SGD step")
	flag.Float64Var(&o.l2, "l2", 0.05, "L2 regularization")
	flag.IntVar(&o.seed, "seed", 1, "data seed")
	flag.IntVar(&o.slaves, "slaves", 2, "slave processes (Lapse: server processes)")
	flag.IntVar(&o.slots, "slots", 2, "workers per slave (Lapse: worker threads per process)")
	flag.StringVar(&o.only, "only", "", "comma-separated subset of static,localize,local,lapse,probe (prep: only write the data)")
	flag.DurationVar(&o.lapseTimeout, "lapse-timeout", 20*time.Minute, "give up on a Lapse run after this long")
	slaveRole = benchkit.RegisterSlaveRole()
	flag.Parse()
	slaveRole.Run("bench/lapse")
	o.rounds = rounds
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/lapse:", err)
		os.Exit(2)
	}
	// The cluster's and Lapse's processes run in their own process groups
	// (so one signal reaches a process and its children): on Ctrl-C or
	// SIGTERM stop them before exiting, or they would outlive the bench.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-sigs
		cancel()
		benchkit.RunCleanups()
		os.Exit(130)
	}()
	if err := run(ctx, o); err != nil {
		benchkit.RunCleanups()
		fmt.Fprintln(os.Stderr, "bench/lapse:", err)
		os.Exit(1)
	}
}

// runNames are the parts -only may name ("prep" alone: only write the data).
var runNames = []string{"static", "localize", "local", "lapse", "probe", "prep"}

func (o opts) check() error {
	switch {
	case o.rows < 1 || o.users < 1 || o.items < 1 || o.hiddenRank < 1:
		return fmt.Errorf("-rows, -users, -items and -hidden-rank must be >= 1")
	case o.rank < 2: // Lapse aggregates train and test loss in one rank-wide vector
		return fmt.Errorf("-rank must be >= 2, got %d", o.rank)
	case o.epochs < 1 || o.batch < 1 || o.slaves < 1 || o.slots < 1:
		return fmt.Errorf("-epochs, -batch, -slaves and -slots must be >= 1")
	case !(o.lr > 0) || o.l2 < 0:
		return fmt.Errorf("-lr must be > 0 and -l2 >= 0")
	}
	if o.only != "" {
		for _, n := range strings.Split(o.only, ",") {
			if !slices.Contains(runNames, n) {
				return fmt.Errorf("-only: unknown part %q (want some of %s)", n, strings.Join(runNames, ","))
			}
		}
	}
	return nil
}

func (o opts) want(name string) bool {
	return o.only == "" || slices.Contains(strings.Split(o.only, ","), name)
}

func run(ctx context.Context, o opts) error {
	if o.flexps == "" {
		logf("building %s", filepath.Join(o.dir, "flexps"))
	}
	var err error
	if o.dir, o.flexps, err = benchkit.WorkDir(o.dir, o.flexps); err != nil {
		return err
	}
	if o.lapse == "" {
		o.lapse = filepath.Join(o.dir, "lapse-mf", "matrix_factorization")
	}
	d, err := prepare(o, o.flexps)
	if err != nil {
		return err
	}
	logf("data: %d training and %d test ratings; flexps %s, Lapse %s", d.rows, d.testRows, d.train, d.lapseDir)
	lapseWhy := ""
	if o.want("lapse") {
		lapseWhy = lapseMissing(o.lapse)
		if lapseWhy != "" {
			logf("Lapse skipped: %s", lapseWhy)
		}
	}
	runDir := filepath.Join(o.dir, "run-"+time.Now().UTC().Format("20060102-150405"))
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	var cl *benchkit.Cluster
	if o.want("static") || o.want("localize") || o.want("local") {
		logf("starting flexps master + %d slaves x %d slots (logs in %s)", o.slaves, o.slots, runDir)
		if cl, err = benchkit.Start(o.flexps, runDir, o.slaves, o.slots, benchkit.Options{}); err != nil {
			return err
		}
		defer cl.Stop()
	}
	var rows []row
	for r := 1; r <= o.rounds; r++ {
		for _, v := range variants {
			if !o.want(v.name) {
				continue
			}
			logf("round %d: %s", r, v.name)
			res, err := measureFlexps(o, cl, d, runDir, r, v)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r, v.name, err)
			}
			rows = append(rows, res)
		}
		if o.want("lapse") && lapseWhy == "" {
			logf("round %d: lapse", r)
			lr, err := runLapse(ctx, o, d, runDir, r)
			if err != nil {
				// Keep the flexps figures: say why Lapse has none.
				lapseWhy = err.Error()
				logf("Lapse failed: %v", err)
				continue
			}
			rows = append(rows, lapseRow(r, lr))
		}
	}
	var lat []latency
	if o.want("probe") {
		logf("Localize latency probe")
		pdir := filepath.Join(runDir, "probe")
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return err
		}
		if lat, err = runProbe(o, pdir); err != nil {
			return fmt.Errorf("latency probe: %w", err)
		}
	}
	printTable(os.Stdout, o, d, rows, lapseWhy)
	printLatency(os.Stdout, o, lat)
	return nil
}

// variant is one flexps job of a round.
type variant struct {
	name, label, kind string
	localize          bool
	oneSlave          bool
}

var variants = []variant{
	{name: "static", label: "(a) static PS", kind: "ps"},
	{name: "localize", label: "(b) Localize", kind: "ps", localize: true},
	{name: "local", label: "(c) local kind", kind: "local", oneSlave: true},
}

// row is one measured run.
type row struct {
	round               int
	name, label         string
	epochSecs           []float64
	stageSecs           float64
	localShare          float64 // of key accesses; NaN when not counted
	relocPerSec         float64
	relocated           float64
	locCalls, locSecs   float64 // over all epochs
	locCallsN, locSecsN float64 // epochs 2..N: item blocks only
	barSecsN            float64 // epochs 2..N: seconds workers waited at sub-epoch barriers, summed
	workers             int
	testRMSE            float64
	cpuSecs             float64 // CPU time of all processes over the whole job
	runQueue            float64 // seconds their threads waited for a CPU (NaN: not measured)
}

// steady is the mean epoch time without the first epoch (which includes
// reading the data), or the only epoch.
func (r row) steady() float64 {
	e := r.epochSecs
	if len(e) > 1 {
		e = e[1:]
	}
	var s float64
	for _, v := range e {
		s += v
	}
	return s / float64(len(e))
}

func jobTOML(o opts, d dataset, v variant, out string) string {
	workers := o.slaves * o.slots
	if v.oneSlave {
		workers = o.slots
	}
	return fmt.Sprintf(`# written by bench/lapse
name = "mf-blocked-%s"
kind = "mf"
output = %q

[[table]]
name = "users"
size = %d
width = %d
init = "uniform:0.1"
replicas = 1               # Lapse keeps one copy: compare like with like

[[table]]
name = "items"
size = %d
width = %d
init = "uniform:0.1"
replicas = 1

[input.train]
path = %q
format = "ratings"
block_size = %d            # ~32 blocks per worker: the workers' shares come out even (DSGD waits for the slowest)

[[stage]]
name = "dsgd"
func = "mf.blocked"
workers = %d
consistency = "asp"
worker_kind = %q

[stage.params]
rank = %d
epochs = %d
batch = %d
lr = %v
l2 = %v
localize = %v
mean = false               # Lapse's MF predicts p_u . q_i alone: compare like with like
`, v.name, out, o.users, o.rank, o.items, o.rank, d.train, d.inputBlock(workers), workers, v.kind, o.rank, o.epochs, o.batch, o.lr, o.l2, v.localize)
}

func measureFlexps(o opts, cl *benchkit.Cluster, d dataset, dir string, round int, v variant) (row, error) {
	base := filepath.Join(dir, fmt.Sprintf("r%d-%s", round, v.name))
	job, model := base+".toml", base+".model"
	if err := os.WriteFile(job, []byte(jobTOML(o, d, v, model)), 0o644); err != nil {
		return row{}, err
	}
	cpu0, err := cl.CPUSeconds()
	if err != nil {
		return row{}, err
	}
	rq0, err := cl.RunQueueSeconds()
	if err != nil {
		return row{}, err
	}
	recs, err := cl.Submit(job, base+".jsonl", base+".out")
	if err != nil {
		return row{}, err
	}
	cpu1, err := cl.CPUSeconds()
	if err != nil {
		return row{}, err
	}
	rq1, err := cl.RunQueueSeconds()
	if err != nil {
		return row{}, err
	}
	workers := o.slaves * o.slots
	if v.oneSlave {
		workers = o.slots
	}
	r := row{round: round, name: v.name, label: v.label, localShare: math.NaN(), cpuSecs: cpu1 - cpu0, runQueue: rq1 - rq0, workers: workers}
	var stage *benchkit.Record
	for i := range recs {
		switch rec := &recs[i]; rec.Type {
		case "epoch":
			r.epochSecs = append(r.epochSecs, rec.Seconds)
			c, s := rec.Metrics["localize_calls"], rec.Metrics["localize_seconds"]
			r.locCalls += c
			r.locSecs += s
			if rec.Epoch > 1 {
				r.locCallsN += c
				r.locSecsN += s
				r.barSecsN += rec.Metrics["barrier_seconds"]
			}
		case "stage":
			stage = rec
		}
	}
	if stage == nil || stage.State != "done" {
		return r, fmt.Errorf("no finished stage in %s.jsonl (see %s.out)", base, base)
	}
	if len(r.epochSecs) != o.epochs {
		return r, fmt.Errorf("%d of %d epochs in %s.jsonl", len(r.epochSecs), o.epochs, base)
	}
	r.stageSecs = stage.Seconds
	m := stage.Metrics
	if acc := m[tasks.MetricKVLocalKeys] + m[tasks.MetricKVRemoteKeys]; acc > 0 {
		r.localShare = m[tasks.MetricKVLocalKeys] / acc
	}
	r.relocated = m[tasks.MetricKVRelocated]
	if r.stageSecs > 0 {
		r.relocPerSec = r.relocated / r.stageSecs
	}
	ev, err := tasks.Evaluate(context.Background(), model, d.test, "", "mf")
	if err != nil {
		return r, fmt.Errorf("evaluate %s: %w", model, err)
	}
	r.testRMSE = ev.Metrics["rmse"]
	logf("  %s: epochs %v s, %.1f%% local, test RMSE %.4f", v.name, r.epochSecs, 100*r.localShare, r.testRMSE)
	return r, nil
}

func lapseRow(round int, l lapseResult) row {
	return row{round: round, name: "lapse", label: "(d) Lapse C++", epochSecs: l.epochSecs, localShare: math.NaN(),
		relocPerSec: math.NaN(), testRMSE: l.testRMSE, cpuSecs: l.cpuSecs, runQueue: math.NaN()}
}
