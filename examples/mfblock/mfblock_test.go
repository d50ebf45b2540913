package mfblock_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/engine"
	_ "github.com/flexps/flexps/examples/mf" // the "mf" model evaluator
	"github.com/flexps/flexps/examples/mfblock"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sortByUser rewrites a ratings file grouped by user, as rating exports
// usually are (and as parameter blocking wants).
func sortByUser(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	user := func(l string) int {
		u, _ := strconv.Atoi(l[:strings.IndexByte(l, '\t')])
		return u
	}
	slices.SortStableFunc(lines, func(a, b string) int { return user(a) - user(b) })
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// meanRMSE is the test RMSE of predicting the training mean.
func meanRMSE(t *testing.T, train, test string) float64 {
	t.Helper()
	read := func(p string) []float64 {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var out []float64
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			v, _ := strconv.ParseFloat(fs[2], 64)
			out = append(out, v)
		}
		return out
	}
	var mu float64
	tr := read(train)
	for _, v := range tr {
		mu += v
	}
	mu /= float64(len(tr))
	var sq float64
	te := read(test)
	for _, v := range te {
		sq += (v - mu) * (v - mu)
	}
	return math.Sqrt(sq / float64(len(te)))
}

type run struct {
	rmse       float64 // of the written model, by the evaluator
	localShare float64
	relocated  float64
}

func train(t *testing.T, local *engine.Local, trainPath, testPath string, localize bool) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const users, items, rank = 800, 400, 4
	out := filepath.Join(t.TempDir(), "mf.model")
	task := tasks.NewTask("mfblock").
		AddTable(kvstore.TableSpec{Name: "users", Size: users, Width: rank, Init: "uniform:0.3"}).
		AddTable(kvstore.TableSpec{Name: "items", Size: items, Width: rank, Init: "uniform:0.3"}).
		SetInput("train", tasks.InputSpec{Path: trainPath, Format: "ratings", BlockSize: 1 << 15}).
		SetInput("test", tasks.InputSpec{Path: testPath, Format: "ratings"}).
		SetStages(tasks.Stage{Name: "dsgd", Func: mfblock.Func, Workers: 4, Consistency: kvstore.Consistency{Kind: kvstore.ASP},
			Params: tasks.Params{"rank": rank, "epochs": 12, "batch": 200, "lr": 0.03, "l2": 0.01, "localize": localize}})
	task.Kind, task.Output = "mf", out
	st, err := local.SubmitAndWait(ctx, task, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != status.Done {
		t.Fatalf("task %s: %s", st.State, st.Reason)
	}
	m := st.Results[0].Metrics
	ev, err := tasks.Evaluate(ctx, out, testPath, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return run{rmse: ev.Metrics["rmse"], localShare: m[tasks.MetricKVLocalKeys] / (m[tasks.MetricKVLocalKeys] + m[tasks.MetricKVRemoteKeys]),
		relocated: m[tasks.MetricKVRelocated]}
}

// Parameter blocking keeps almost every access in the worker's slave
// memory, and the model is as good as without it.
func TestBlockingLocalizesAndLearns(t *testing.T) {
	dir := t.TempDir()
	trainPath, testPath := filepath.Join(dir, "train"), filepath.Join(dir, "test")
	if err := synth.Generate(trainPath, synth.Spec{Kind: "ratings", Users: 800, Items: 400, Rank: 4, Rows: 60000, Noise: 0.1, Seed: 5,
		TestPath: testPath, TestRows: 6000}); err != nil {
		t.Fatal(err)
	}
	sortByUser(t, trainPath)
	base := meanRMSE(t, trainPath, testPath)
	local, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	blocked := train(t, local, trainPath, testPath, true)
	static := train(t, local, trainPath, testPath, false)
	t.Logf("mean baseline RMSE %.4f; blocked: RMSE %.4f, %.1f%% local, %.0f keys relocated; static: RMSE %.4f, %.1f%% local",
		base, blocked.rmse, 100*blocked.localShare, blocked.relocated, static.rmse, 100*static.localShare)
	// Training alone is ~99% local; the per-epoch test evaluation reads
	// item factors of every block, most of them elsewhere.
	if blocked.localShare < 0.9 {
		t.Errorf("with blocking %.1f%% of accesses were local, want >= 90%%", 100*blocked.localShare)
	}
	if static.localShare > 0.7 || blocked.relocated == 0 || static.relocated != 0 {
		t.Errorf("static run %.1f%% local with %.0f relocations, blocked %.0f relocations: localize had no effect", 100*static.localShare, static.relocated, blocked.relocated)
	}
	if blocked.rmse > 0.6*base || static.rmse > 0.6*base {
		t.Errorf("test RMSE blocked %.4f / static %.4f not well below the mean baseline %.4f", blocked.rmse, static.rmse, base)
	}
}

// A rating beyond the tables, in the training or the test input, failed
// the stage with "rating (259, 46) is beyond the tables' sizes", naming
// neither the file nor the line. Now both are named.
func TestRatingBeyondTheTablesNamesFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, train, test string
		want              string // after the path; "": trains
	}{
		{"within", "0\t0\t3\n1\t1\t4\n2\t0\t5\n", "1\t0\t2\n", ""},
		{"training user beyond", "0\t0\t3\n1\t1\t4\n3\t0\t5\n", "1\t0\t2\n", "train.tsv line 3: rating (3, 0) is beyond the tables' sizes (3 users, 2 items; ids are 0-based keys)"},
		{"test item beyond", "0\t0\t3\n1\t1\t4\n2\t0\t5\n", "1\t0\t2\n# c\n0\t2\t1\n", "test.tsv line 3: rating (0, 2) is beyond the tables' sizes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			trainPath, testPath := filepath.Join(dir, "train.tsv"), filepath.Join(dir, "test.tsv")
			if err := os.WriteFile(trainPath, []byte(tc.train), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(testPath, []byte(tc.test), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			local, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 1, Slots: 1, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			defer local.Close()
			task := tasks.NewTask("mfblock-ids").
				AddTable(kvstore.TableSpec{Name: "users", Size: 3, Width: 2, Init: "uniform:0.1"}).
				AddTable(kvstore.TableSpec{Name: "items", Size: 2, Width: 2}).
				SetInput("train", tasks.InputSpec{Path: trainPath, Format: "ratings"}).
				SetInput("test", tasks.InputSpec{Path: testPath, Format: "ratings"}).
				SetStages(tasks.Stage{Name: "dsgd", Func: mfblock.Func, Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.ASP},
					Params: tasks.Params{"rank": 2, "epochs": 1}})
			_, err = local.SubmitAndWait(ctx, task, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), filepath.Join(dir, tc.want))):
				t.Fatalf("error %v, want it to say %q", err, filepath.Join(dir, tc.want))
			}
		})
	}
}

// TestFewRatingsPerUserNoWorseThanTheMean: on 1-5 stars with 1-3
// training ratings per user, mf.blocked predicts mu + p_u . q_i and does
// as well as predicting the mean (the factors have little to learn from);
// without mu (mean = false, Lapse's model) p_u . q_i starts at 0 stars
// and, with so few ratings to pull each user there, ends far worse than
// the mean, as it did until now by default (found by the models QA).
func TestFewRatingsPerUserNoWorseThanTheMean(t *testing.T) {
	dir := t.TempDir()
	trainPath, testPath := filepath.Join(dir, "train"), filepath.Join(dir, "test")
	const users, items = 3000, 150
	rng := rand.New(rand.NewPCG(7, 11))
	itemBias := make([]float64, items)
	for i := range itemBias {
		itemBias[i] = rng.NormFloat64() * 0.8
	}
	stars := func(u, i int, ub float64) float64 {
		return math.Max(1, math.Min(5, math.Round(3.6+ub+itemBias[i]+0.5*rng.NormFloat64())))
	}
	var tr, te strings.Builder
	for u := range users {
		ub := rng.NormFloat64() * 0.4
		for range 1 + rng.IntN(3) {
			i := rng.IntN(items)
			fmt.Fprintf(&tr, "%d\t%d\t%g\n", u, i, stars(u, i, ub))
		}
		i := rng.IntN(items)
		fmt.Fprintf(&te, "%d\t%d\t%g\n", u, i, stars(u, i, ub))
	}
	for p, b := range map[string]string{trainPath: tr.String(), testPath: te.String()} {
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := meanRMSE(t, trainPath, testPath)
	local, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	rmse := func(mean bool) float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out := filepath.Join(t.TempDir(), "mf.model")
		task := tasks.NewTask("few").
			AddTable(kvstore.TableSpec{Name: "users", Size: users, Width: 4, Init: "uniform:0.1"}).
			AddTable(kvstore.TableSpec{Name: "items", Size: items, Width: 4, Init: "uniform:0.1"}).
			SetInput("train", tasks.InputSpec{Path: trainPath, Format: "ratings"}).
			SetInput("test", tasks.InputSpec{Path: testPath, Format: "ratings"}).
			SetStages(tasks.Stage{Name: "dsgd", Func: mfblock.Func, Workers: 2, Consistency: kvstore.Consistency{Kind: kvstore.ASP},
				Params: tasks.Params{"epochs": 10, "batch": 100, "mean": mean}})
		task.Kind, task.Output = "mf", out
		if _, err := local.SubmitAndWait(ctx, task, nil); err != nil {
			t.Fatal(err)
		}
		ev, err := tasks.Evaluate(ctx, out, testPath, "", "")
		if err != nil {
			t.Fatal(err)
		}
		return ev.Metrics["rmse"]
	}
	with, without := rmse(true), rmse(false)
	t.Logf("test RMSE: mean %.4f, mf.blocked %.4f, without mu %.4f", base, with, without)
	if with > 1.01*base {
		t.Errorf("mf.blocked test RMSE %.4f is worse than predicting the mean (%.4f)", with, base)
	}
	if without <= 1.5*base {
		t.Errorf("without mu, test RMSE %.4f beats the mean (%.4f): the data does not show what mu is for", without, base)
	}
}
