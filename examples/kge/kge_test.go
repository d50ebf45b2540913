package kge_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/examples/kge"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// writePlanted writes a graph whose relation 1 is the inverse of the
// permutation relation 0; a third of relation 1's triples is the test.
func writePlanted(t *testing.T, dir string, n int) (train, test string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 5))
	var tr, te strings.Builder
	for e, p := range rng.Perm(n) {
		fmt.Fprintf(&tr, "%d\t0\t%d\n", e, p)
		if rng.IntN(3) == 0 {
			fmt.Fprintf(&te, "%d 1 %d\n", p, e)
		} else {
			fmt.Fprintf(&tr, "%d\t1\t%d\n", p, e)
		}
	}
	train, test = filepath.Join(dir, "train.tsv"), filepath.Join(dir, "test.tsv")
	for p, s := range map[string]string{train: tr.String(), test: te.String()} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return train, test
}

// TestClusterComplEx trains kge.complex on 2 in-process slaves and checks
// the per-epoch test metrics against the evaluator and the random-ranking
// expectation.
func TestClusterComplEx(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on a local cluster")
	}
	for _, localize := range []bool{false, true} {
		t.Run(fmt.Sprintf("localize=%v", localize), func(t *testing.T) { clusterComplEx(t, localize) })
	}
}

func clusterComplEx(t *testing.T, localize bool) {
	const n, dim, epochs = 40, 16, 80
	dir := t.TempDir()
	trainPath, testPath := writePlanted(t, dir, n)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	local, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	out := filepath.Join(dir, "kge.model")
	task := tasks.NewTask("kge-test").
		AddTable(kvstore.TableSpec{Name: "entities", Size: n, Width: 2 * dim, Init: "uniform:0.1"}).
		AddTable(kvstore.TableSpec{Name: "relations", Size: 2, Width: 2 * dim, Init: "uniform:0.1"}).
		SetInput("train", tasks.InputSpec{Path: trainPath, Format: "ratings"}).
		SetInput("test", tasks.InputSpec{Path: testPath, Format: "ratings"}).
		SetStages(tasks.Stage{Name: "train", Func: "kge.complex", Workers: 2, Consistency: kvstore.Consistency{Kind: kvstore.BSP},
			Params: tasks.Params{"dim": dim, "epochs": epochs, "batch": 16, "neg": 8, "lr": 0.2, "filter": []any{trainPath, testPath}, "localize": localize}})
	task.Kind, task.Output = "kge", out
	var mu sync.Mutex
	mrr := make([]float64, epochs)
	st, err := local.SubmitAndWait(ctx, task, func(ev status.Event) {
		if ev.Kind != "epoch" || ev.Epoch == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		m := ev.Epoch.Metrics
		if e := ev.Epoch.Epoch; e >= 1 && e <= epochs && m[tasks.MetricTestSamples] > 0 {
			mrr[e-1] = m[kge.MetricTestRRSum] / m[tasks.MetricTestSamples]
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if moved := st.Results[0].Metrics[tasks.MetricKVRelocated]; localize != (moved > 0) {
		t.Fatalf("localize=%v: %v keys relocated", localize, moved)
	}
	// Random ranking: the true entity is equally likely at each of the
	// n - (filtered) places; at most n places gives E[1/rank] >= H_n/n.
	random := 0.0
	for k := 1; k <= n; k++ {
		random += 1 / float64(k)
	}
	random /= n
	t.Logf("per-epoch filtered test MRR %.3f; random ranking ~%.3f", mrr, random)
	if last := mrr[epochs-1]; last < 0.5 || last < 3*random {
		t.Fatalf("last epoch's test MRR %.3f does not clearly beat random ranking (%.3f)", last, random)
	}
	ev, err := tasks.Evaluate(ctx, out, testPath, "", "")
	if err != nil {
		t.Fatal(err)
	}
	// The evaluator filters only the test file's triples; relation 1's
	// candidates from train are one per head, so its MRR may be lower but
	// must still beat random ranking.
	if ev.Metrics["mrr"] < 2*random {
		t.Fatalf("evaluator mrr %.3f, random %.3f (%v)", ev.Metrics["mrr"], random, ev.Metrics)
	}
}

func TestConfigFile(t *testing.T) {
	_, task, err := tasks.LoadJob("../../configs/kge.toml")
	if err != nil {
		t.Fatal(err)
	}
	if task.Kind != "kge" || len(task.Stages) != 1 || task.Stages[0].Func != "kge.complex" {
		t.Fatalf("unexpected task %+v", task)
	}
	cfg, err := kge.ConfigFrom(task.Stages[0].Params)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Filter) != 3 || cfg.Dim*2 != task.Tables[0].Width {
		t.Fatalf("config %+v, tables %+v", cfg, task.Tables)
	}
}

func TestConfigFrom(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    tasks.Params
		want string // error substring; "" for success
	}{
		{"defaults", tasks.Params{}, ""},
		{"filter string", tasks.Params{"filter": "a.tsv"}, ""},
		{"filter list", tasks.Params{"filter": []any{"a.tsv", "b.tsv"}}, ""},
		{"filter number", tasks.Params{"filter": []any{"a.tsv", 3}}, "element 1 is int"},
		{"zero epochs", tasks.Params{"epochs": 0}, "epochs must be >= 1"},
		{"zero neg", tasks.Params{"neg": 0}, "neg must be >= 1"},
		{"negative lr", tasks.Params{"lr": -1.0}, "lr must be > 0"},
		{"text dim", tasks.Params{"dim": "big"}, "dim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kge.ConfigFrom(tc.p)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if c, _ := kge.ConfigFrom(tasks.Params{"epochs": 3}); c.Neg != 16 || math.Abs(c.LR-0.1) > 0 {
		t.Fatalf("defaults %+v", c)
	}
}
