package mf_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/engine"
	_ "github.com/flexps/flexps/examples/mf"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// itemMeanRMSE is the baseline: predict each item's mean training rating
// (the global mean for an item without training ratings) and return the
// RMSE on test.
func itemMeanRMSE(t *testing.T, trainPath, testPath string) float64 {
	t.Helper()
	ctx := context.Background()
	tr, err := datastore.ReadAll(ctx, trainPath, "ratings")
	if err != nil {
		t.Fatal(err)
	}
	te, err := datastore.ReadAll(ctx, testPath, "ratings")
	if err != nil {
		t.Fatal(err)
	}
	sum, cnt := map[uint64]float64{}, map[uint64]float64{}
	total := 0.0
	for i := 0; i < tr.Len(); i++ {
		r, keys, _ := tr.Row(i)
		sum[keys[1]] += r
		cnt[keys[1]]++
		total += r
	}
	global := total / float64(tr.Len())
	sq := 0.0
	for i := 0; i < te.Len(); i++ {
		r, keys, _ := te.Row(i)
		p := global
		if n := cnt[keys[1]]; n > 0 {
			p = sum[keys[1]] / n
		}
		sq += (r - p) * (r - p)
	}
	return math.Sqrt(sq / float64(te.Len()))
}

type mfRun struct {
	rmse      float64   // evaluator on the test file
	testRMSE  []float64 // per epoch, as the stage reported it
	trainRMSE []float64
}

// train runs mf.sgd with biases on an in-process cluster of 2 slaves.
func train(t *testing.T, trainPath, testPath string, users, items, rank, workers int, cons kvstore.Consistency, params tasks.Params) mfRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	local, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	out := filepath.Join(t.TempDir(), "mf.model")
	params["rank"] = rank
	task := tasks.NewTask("mf-test").
		AddTable(kvstore.TableSpec{Name: "users", Size: uint64(users), Width: rank, Init: "uniform:0.1"}).
		AddTable(kvstore.TableSpec{Name: "items", Size: uint64(items), Width: rank, Init: "uniform:0.1"}).
		AddTable(kvstore.TableSpec{Name: "bias", Size: 1}).
		AddTable(kvstore.TableSpec{Name: "user_bias", Size: uint64(users)}).
		AddTable(kvstore.TableSpec{Name: "item_bias", Size: uint64(items)}).
		SetInput("train", tasks.InputSpec{Path: trainPath, Format: "ratings", BlockSize: 1 << 16}).
		SetInput("test", tasks.InputSpec{Path: testPath, Format: "ratings"}).
		SetStages(tasks.Stage{Name: "sgd", Func: "mf.sgd", Workers: workers, Consistency: cons, Params: params})
	task.Kind, task.Output = "mf", out
	epochs := params["epochs"].(int)
	r := mfRun{testRMSE: make([]float64, epochs), trainRMSE: make([]float64, epochs)}
	var mu sync.Mutex
	_, err = local.SubmitAndWait(ctx, task, func(ev status.Event) {
		if ev.Kind != "epoch" || ev.Epoch == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		m := ev.Epoch.Metrics
		if e := ev.Epoch.Epoch; e >= 1 && e <= epochs {
			r.testRMSE[e-1] = math.Sqrt(m["test_sq_err_sum"] / m["test_samples"])
			r.trainRMSE[e-1] = math.Sqrt(m["sq_err_sum"] / m["samples"])
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := tasks.Evaluate(ctx, out, testPath, "", "")
	if err != nil {
		t.Fatal(err)
	}
	v, ok := ev.Metrics["rmse"]
	if !ok {
		t.Fatalf("no rmse in %v", ev)
	}
	r.rmse = v
	return r
}

func TestGeneratedLowRankBeatsItemMean(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a while")
	}
	dir := t.TempDir()
	trainPath, testPath := filepath.Join(dir, "train"), filepath.Join(dir, "test")
	const users, items, rank = 600, 400, 4
	if err := synth.Generate(trainPath, synth.Spec{Kind: "ratings", Users: users, Items: items, Rank: rank, Rows: 80000, Noise: 0.1, Seed: 3,
		TestPath: testPath, TestRows: 10000}); err != nil {
		t.Fatal(err)
	}
	base := itemMeanRMSE(t, trainPath, testPath)
	r := train(t, trainPath, testPath, users, items, rank, 4, kvstore.Consistency{Kind: kvstore.SSP, Staleness: 2},
		tasks.Params{"epochs": 12, "batch": 500, "lr": 0.04, "l2": 0.02})
	t.Logf("test RMSE per epoch %.4f", r.testRMSE)
	t.Logf("test RMSE: mf %.4f (evaluator), item-mean baseline %.4f", r.rmse, base)
	if r.rmse > 0.5*base {
		t.Fatalf("mf test RMSE %.4f is not well below (half) the item-mean baseline %.4f", r.rmse, base)
	}
	if last := r.testRMSE[len(r.testRMSE)-1]; math.Abs(last-r.rmse) > 0.02 {
		t.Errorf("last epoch's reported test RMSE %.4f differs from the evaluator's %.4f", last, r.rmse)
	}
}

// insteval returns data/insteval's train and test files, which
// scripts/setup.sh exports in CI (scripts/insteval.sh by hand).
func insteval(t *testing.T) (string, string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "data", "insteval")
	trainPath, testPath := filepath.Join(dir, "train.tsv"), filepath.Join(dir, "test.tsv")
	if _, err := os.Stat(testPath); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("%s absent: run scripts/insteval.sh (installs Debian's r-cran-lme4 and exports InstEval) to enable this test", dir)
		}
		t.Fatalf("%s absent in CI: scripts/setup.sh should have run scripts/insteval.sh: %v", dir, err)
	}
	return trainPath, testPath
}

func TestInstEvalBeatsItemMean(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a while")
	}
	trainPath, testPath := insteval(t)
	base := itemMeanRMSE(t, trainPath, testPath)
	r := train(t, trainPath, testPath, 2972, 1128, 8, 4, kvstore.Consistency{Kind: kvstore.SSP, Staleness: 2},
		tasks.Params{"epochs": 20, "batch": 200, "lr": 0.005, "l2": 0.5, "l2_bias": 0.1})
	t.Logf("test RMSE per epoch %.4f", r.testRMSE)
	t.Logf("InstEval test RMSE: mf %.4f (evaluator), item-mean baseline %.4f", r.rmse, base)
	if r.rmse >= base {
		t.Fatalf("mf test RMSE %.4f is not below the item-mean baseline %.4f", r.rmse, base)
	}
}
