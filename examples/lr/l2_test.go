package lr_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// readLibsvm reads a LIBSVM file as flexps does (1-based ids).
func readLibsvm(t *testing.T, path string) *datastore.Records {
	t.Helper()
	r, err := datastore.ReadAll(context.Background(), path, "libsvm")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// trainModel runs one lr.sgd stage and returns the saved weights and
// intercept (0 without).
func trainModel(t *testing.T, path string, dim uint64, workers int, kind string, params tasks.Params) ([]float64, float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	local, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	out := filepath.Join(t.TempDir(), "lr.model")
	task := tasks.NewTask("l2").
		AddTable(kvstore.TableSpec{Name: "w", Size: dim}).
		SetInput("train", tasks.InputSpec{Path: path, BlockSize: 1 << 30}).
		SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: workers, WorkerKind: kind, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: params})
	task.Kind, task.Output = "lr", out
	if _, err := local.SubmitAndWait(ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	m, err := tasks.LoadModel(out)
	if err != nil {
		t.Fatal(err)
	}
	wt, _ := m.Table("w")
	b := 0.0
	if bt, ok := m.Table(lr.BiasTable("w")); ok {
		b = bt.DenseValues()[0]
	}
	return wt.DenseValues(), b
}

func label01(l float64) float64 {
	if l == 1 {
		return 1
	}
	return 0
}

// objective is (1/n) sum log-loss + l2/2 ||w||^2 (the intercept free).
func objective(r *datastore.Records, w []float64, b, l2 float64) float64 {
	loss := 0.0
	for i := 0; i < r.Len(); i++ {
		label, keys, vals := r.Row(i)
		z := b
		for j, k := range keys {
			z += w[k] * vals[j]
		}
		loss += lr.LogLoss(z, label01(label))
	}
	sq := 0.0
	for _, v := range w {
		sq += v * v
	}
	return loss/float64(r.Len()) + l2/2*sq
}

// TestL2MatchesDenseSGD: one worker, one block (the file's order), raw
// sparse features: lr.sgd's lazy l2 leaves exactly the weights of plain
// dense SGD, w <- (1 - lr l2) w - lr grad_B, every key decayed at every
// step, over several epochs with a decaying learning rate. The old rule
// (decay only the batch's keys) ends far from it.
func TestL2MatchesDenseSGD(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparse.libsvm")
	if err := synth.Generate(path, synth.Spec{Kind: "libsvm", Rows: 2000, Dim: 300, NNZ: 5, Zipf: 1.1, Noise: 0.02, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	data := readLibsvm(t, path)
	const dim, batch, rate, l2, decay, epochs = 300, 10, 0.5, 0.01, 0.5, 4
	for _, kind := range []string{tasks.KindSingle, tasks.KindPS} {
		got, gotB := trainModel(t, path, dim, 1, kind, tasks.Params{"epochs": epochs, "batch": batch, "lr": rate, "l2": l2, "decay": decay, "standardize": false})
		w, b := make([]float64, dim), 0.0
		old := make([]float64, dim) // the old rule: decay only the batch's keys
		oldB := 0.0
		g := make([]float64, dim)
		// The reader hands records over in batches of 1024
		// (datastore.ReadOptions.BatchRecords); mini-batches do not span
		// them.
		var batches [][2]int
		for c := 0; c < data.Len(); c += 1024 {
			end := min(c+1024, data.Len())
			for lo := c; lo < end; lo += batch {
				batches = append(batches, [2]int{lo, min(lo+batch, end)})
			}
		}
		for e := range epochs {
			lrE := rate / (1 + decay*float64(e))
			for _, bt := range batches {
				lo, hi := bt[0], bt[1]
				clear(g)
				gb, ogb := 0.0, 0.0
				og := make([]float64, dim)
				touched := map[uint64]bool{}
				for i := lo; i < hi; i++ {
					label, keys, vals := data.Row(i)
					z := oldB
					for j, k := range keys {
						z += old[k] * vals[j]
					}
					d := lr.Sigmoid(z) - label01(label)
					ogb += d
					for j, k := range keys {
						og[k] += d * vals[j]
						touched[k] = true
					}
				}
				for k := range touched {
					old[k] = (1-lrE*l2)*old[k] - lrE*og[k]/float64(hi-lo)
				}
				oldB -= lrE * ogb / float64(hi-lo)
				for i := lo; i < hi; i++ {
					label, keys, vals := data.Row(i)
					z := b
					for j, k := range keys {
						z += w[k] * vals[j]
					}
					d := lr.Sigmoid(z) - label01(label)
					gb += d
					for j, k := range keys {
						g[k] += d * vals[j]
					}
				}
				for k := range w {
					w[k] = (1-lrE*l2)*w[k] - lrE*g[k]/float64(hi-lo)
				}
				b -= lrE * gb / float64(hi-lo)
			}
		}
		worst := 0.0
		for k := range w {
			worst = max(worst, math.Abs(got[k]-w[k]))
		}
		t.Logf("%s: largest weight difference to dense SGD %.3g, intercept %.6f vs %.6f", kind, worst, gotB, b)
		oldDiff := 0.0
		for k := range w {
			oldDiff = max(oldDiff, math.Abs(old[k]-w[k]))
		}
		if oldDiff < 1e-3 {
			t.Fatalf("the batch-keys-only rule ends within %.3g of dense SGD: the data does not tell them apart", oldDiff)
		}
		if worst > 1e-9 || math.Abs(gotB-b) > 1e-9 {
			t.Fatalf("%s: lazy l2 differs from dense SGD: weights by %.3g, intercept %.9f vs %.9f", kind, worst, gotB, b)
		}
	}
}

// TestL2ReachesLiblinearObjective: on heart_scale with l2 = 1/(C n), C =
// 1, no intercept and raw features (the objective liblinear -s 0
// minimizes, divided by C n), lr.sgd ends within 1% of liblinear's
// minimum at 1, 2 and 4 workers.
func TestL2ReachesLiblinearObjective(t *testing.T) {
	path := heartScaleFile(t)
	data := readLibsvm(t, path)
	const dim = 13
	l2 := 1 / float64(data.Len())
	refW := liblinearWeights(t, path, 1, dim)
	ref := objective(data, refW, 0, l2)
	for _, workers := range []int{1, 2, 4} {
		w, b := trainModel(t, path, dim, workers, tasks.KindPS, tasks.Params{"epochs": 60, "batch": 5, "lr": 0.5, "l2": l2, "decay": 0.2,
			"standardize": false, "intercept": false})
		got := objective(data, w, b, l2)
		t.Logf("%d workers: objective %.6f, liblinear -s 0 %.6f (%+.3f%%)", workers, got, ref, 100*(got-ref)/ref)
		if got > ref*1.01 {
			t.Errorf("%d workers: objective %.6f more than 1%% above liblinear's %.6f", workers, got, ref)
		}
	}
}
