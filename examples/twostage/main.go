// Command twostage shows the flexps Go API: it registers its own stage
// function, builds a two-stage MultiStageTask whose stages differ in
// parallelism, and runs it with SubmitAndWait. Stage 1 (4 workers) counts
// how often each feature occurs into table "count"; stage 2 (2 workers)
// trains logistic regression (the built-in lr.sgd) into table "w".
//
//	go run ./examples/twostage                          # in-process cluster
//	go run ./examples/twostage -role slave -nats URL    # be a slave of a cluster
//	go run ./examples/twostage -role submit -nats URL   # submit to a cluster's master
//
// In a cluster, start the master with `flexps master` and the slaves with
// this program (-role slave): slaves run the stage functions, so they must
// be built from the program that registers them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/engine"
	_ "github.com/flexps/flexps/examples/lr" // registers lr.sgd
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.Register("twostage.count", countFeatures)
}

// countFeatures adds 1 to count[k] for every occurrence of feature k in
// this worker's share of the "train" input.
func countFeatures(info *tasks.Info) error {
	count, err := info.Table("count")
	if err != nil {
		return err
	}
	in, err := info.Input("train")
	if err != nil {
		return err
	}
	var ones []float64
	return tasks.EachRecords(info.Ctx, in, func(recs *datastore.Records) error {
		for len(ones) < len(recs.Keys) {
			ones = append(ones, 1)
		}
		if err := count.Add(recs.Keys, ones[:len(recs.Keys)]); err != nil {
			return err
		}
		info.Report(int64(recs.Len()), 0)
		return info.Clock()
	})
}

const dim = 5000

// buildTask is the two-stage task.
func buildTask(dir string) *tasks.MultiStageTask {
	t := tasks.NewTask("twostage").
		AddTable(kvstore.TableSpec{Name: "count", Size: dim}).
		AddTable(kvstore.TableSpec{Name: "w", Size: dim, DType: kvstore.Float32}).
		SetInput("train", tasks.InputSpec{Path: filepath.Join(dir, "train.libsvm"), BlockSize: 1 << 18}).
		SetInput("test", tasks.InputSpec{Path: filepath.Join(dir, "test.libsvm")}).
		SetStages(
			tasks.Stage{Name: "count", Func: "twostage.count", Workers: 4, Inputs: []string{"train"}},
			tasks.Stage{Name: "train", Func: "lr.sgd", Workers: 2, Consistency: kvstore.Consistency{Kind: kvstore.SSP, Staleness: 1},
				Params: tasks.Params{"epochs": 5, "lr": 5.0}},
		)
	t.Kind, t.Output = "lr", filepath.Join(dir, "twostage.model")
	return t
}

func main() {
	role := flag.String("role", "local", "local (in-process cluster), slave, or submit")
	natsURL := flag.String("nats", "nats://"+engine.DefaultListen, "the cluster's NATS URL (slave, submit)")
	dir := flag.String("data", "data/twostage", "where the generated data and the model go")
	flag.Parse()
	if err := run(*role, *natsURL, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "twostage:", err)
		os.Exit(1)
	}
}

func run(role, natsURL, dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log, _ := engine.NewLogger(os.Stderr, "warn", "auto")
	cfg := engine.ClusterConfig{NATS: engine.NATSConfig{URL: natsURL}}
	if role == "slave" {
		n, err := engine.StartSlave(ctx, cfg, log)
		if err != nil {
			return err
		}
		defer n.Close()
		<-ctx.Done()
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "train.libsvm")); err != nil {
		err := synth.Generate(filepath.Join(dir, "train.libsvm"), synth.Spec{Kind: "libsvm", Rows: 50000, Dim: dim, NNZ: 10,
			Zipf: 1.1, Noise: 0.01, Seed: 3, TestPath: filepath.Join(dir, "test.libsvm"), TestRows: 10000})
		if err != nil {
			return err
		}
	}
	var client *engine.Client
	switch role {
	case "local":
		local, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 2, Slots: 2, Log: log})
		if err != nil {
			return err
		}
		defer local.Close()
		client = local.Client
	case "submit":
		c, err := engine.Dial(cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		client = c
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	task := buildTask(dir)
	st, err := client.SubmitAndWait(ctx, task, nil)
	if err != nil {
		return err
	}
	for _, r := range st.Results {
		fmt.Printf("stage %d %-6s %d workers  %.2fs\n", r.Index, r.Name, r.Workers, r.Seconds)
	}
	model, err := tasks.LoadModel(task.Output)
	if err != nil {
		return err
	}
	counts, _ := model.Table("count")
	top := make([]int, dim)
	for i := range top {
		top[i] = i
	}
	c := counts.DenseValues()
	sort.Slice(top, func(a, b int) bool { return c[top[a]] > c[top[b]] })
	fmt.Printf("most frequent features: ")
	for _, k := range top[:5] {
		fmt.Printf("%d (%.0f)  ", k, c[k])
	}
	fmt.Println()
	last := st.Results[len(st.Results)-1].Epochs
	if len(last) > 0 {
		m := last[len(last)-1].Metrics
		fmt.Printf("test accuracy after %d epochs: %.4f\n", len(last), m[tasks.MetricTestCorrect]/m[tasks.MetricTestSamples])
	}
	return nil
}
