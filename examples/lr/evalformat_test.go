package lr_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// The written model is scored as the task read its training input: a
// 0-based LIBSVM file whose feature 0 never occurs parses without error
// as 1-based, every feature shifted by one, so before the model recorded
// its input's format `flexps eval` scored it silently wrong (digits in
// 0-based LIBSVM, whose first pixel is always 0: accuracy 0.78 for a model
// at 1.00). A CSV file with a header and its label last failed to parse.
func TestEvalReadsDataAsTrainingDid(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	var svm, csv strings.Builder
	csv.WriteString("a,b,c,label\n")
	for range 400 {
		x1, x2, x3 := rng.Float64(), rng.Float64(), rng.Float64()
		y := 0
		if 3*x1-x2-x3 > 0.5 {
			y = 1
		}
		fmt.Fprintf(&svm, "%d 1:%.6f 2:%.6f 3:%.6f\n", y, x1, x2, x3) // 0-based ids, id 0 absent
		fmt.Fprintf(&csv, "%.6f,%.6f,%.6f,%d\n", x1, x2, x3, y)
	}
	zero := 0
	for _, c := range []struct {
		name, body string
		in         tasks.InputSpec
		dim        uint64
	}{
		{"libsvm index_base 0", svm.String(), tasks.InputSpec{Format: "libsvm", IndexBase: &zero}, 4},
		{"csv header label last", csv.String(), tasks.InputSpec{Format: "csv", Header: true, Label: 3, Delimiter: ","}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
			writeText(t, path, c.body)
			ctx, local := clustertest.Local(t, 1, 1, 2*time.Minute)
			out := path + ".model"
			in := c.in
			in.Path = path
			task := tasks.NewTask("evalformat").
				AddTable(kvstore.TableSpec{Name: "w", Size: c.dim}).
				SetInput("train", in).SetInput("test", in).
				SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP},
					Params: tasks.Params{"epochs": 30, "batch": 20, "lr": 1.0}})
			task.Kind, task.Output = "lr", out
			st, err := local.SubmitAndWait(ctx, task, nil)
			if err != nil {
				t.Fatal(err)
			}
			eps := st.Results[0].Epochs
			last := eps[len(eps)-1].Metrics
			printed := last[tasks.MetricTestCorrect] / last[tasks.MetricTestSamples]
			if printed < 0.9 {
				t.Fatalf("test accuracy %.4f: the task did not learn the rule", printed)
			}
			ev, err := tasks.Evaluate(ctx, out, path, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if got := ev.Metrics["accuracy"]; got != printed {
				t.Errorf("eval of the written model on its training file: accuracy %.4f, the task's last epoch %.4f", got, printed)
			}
		})
	}
}

// A test file may hold features the training data never had, beyond the
// table sized for the training data (LIBSVM's a1a.t has ids up to 123,
// a1a up to 119). The model gives them weight 0, as flexps eval and
// liblinear's predict do; the stage's test pass failed the task instead
// ("key 5 out of range"), after its first epoch.
func TestTestFeaturesBeyondTheTableWeighZero(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	var train, test strings.Builder
	for i := range 600 {
		x1, x2 := rng.Float64(), rng.Float64()
		y := 0
		if x1 > x2 {
			y = 1
		}
		if i < 400 {
			fmt.Fprintf(&train, "%d 1:%.6f 2:%.6f\n", y, x1, x2)
		} else {
			fmt.Fprintf(&test, "%d 1:%.6f 2:%.6f 6:%.6f\n", y, x1, x2, rng.Float64())
		}
	}
	trainPath, testPath := filepath.Join(dir, "train"), filepath.Join(dir, "test")
	for p, body := range map[string]string{trainPath: train.String(), testPath: test.String()} {
		writeText(t, p, body)
	}
	for _, kind := range []string{tasks.KindPS, tasks.KindLocal} {
		t.Run(kind, func(t *testing.T) {
			ctx, local := clustertest.Local(t, 1, 2, 2*time.Minute)
			out := filepath.Join(dir, kind+".model")
			task := tasks.NewTask("beyond").
				AddTable(kvstore.TableSpec{Name: "w", Size: 2}).
				SetInput("train", tasks.InputSpec{Path: trainPath}).SetInput("test", tasks.InputSpec{Path: testPath}).
				SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 2, WorkerKind: kind, Consistency: kvstore.Consistency{Kind: kvstore.BSP},
					Params: tasks.Params{"epochs": 20, "batch": 20, "lr": 1.0}})
			task.Kind, task.Output = "lr", out
			st, err := local.SubmitAndWait(ctx, task, nil)
			if err != nil {
				t.Fatal(err)
			}
			eps := st.Results[0].Epochs
			last := eps[len(eps)-1].Metrics
			printed := last[tasks.MetricTestCorrect] / last[tasks.MetricTestSamples]
			ev, err := tasks.Evaluate(ctx, out, testPath, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if got := ev.Metrics["accuracy"]; got != printed || printed < 0.9 || last[tasks.MetricTestSamples] != 200 {
				t.Errorf("test accuracy: last epoch %.4f of %v records, flexps eval %.4f; want equal and >= 0.9 on 200", printed, last[tasks.MetricTestSamples], got)
			}
		})
	}
}

// A stage with intercept = false after one that fitted an intercept keeps
// that intercept (it stays in the model written): its last test figures
// are what flexps eval reports. Before, it trained and measured as if the
// intercept were 0 while the model file held the first stage's, and eval
// disagreed with the figures printed (logloss 0.4429 against 0.4372).
func TestStageWithoutInterceptKeepsAnEarlierOne(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	var train, test strings.Builder
	for i := range 800 {
		x1, x2 := rng.Float64(), rng.Float64()
		y := 0
		if x1+x2 > 1.4 { // an offset only an intercept fits
			y = 1
		}
		b := &train
		if i >= 600 {
			b = &test
		}
		fmt.Fprintf(b, "%d 1:%.6f 2:%.6f\n", y, x1, x2)
	}
	trainPath, testPath := filepath.Join(dir, "train"), filepath.Join(dir, "test")
	for p, body := range map[string]string{trainPath: train.String(), testPath: test.String()} {
		writeText(t, p, body)
	}
	for _, kind := range []string{tasks.KindPS, tasks.KindLocal, tasks.KindSingle} {
		t.Run(kind, func(t *testing.T) {
			ctx, local := clustertest.Local(t, 1, 2, 2*time.Minute)
			workers := 2
			if kind == tasks.KindSingle {
				workers = 1
			}
			bsp := kvstore.Consistency{Kind: kvstore.BSP}
			out := filepath.Join(dir, kind+".model")
			task := tasks.NewTask("intercept-then-none").
				AddTable(kvstore.TableSpec{Name: "w", Size: 2}).
				SetInput("train", tasks.InputSpec{Path: trainPath}).SetInput("test", tasks.InputSpec{Path: testPath}).
				SetStages(
					tasks.Stage{Name: "with", Func: "lr.sgd", Workers: workers, WorkerKind: kind, Consistency: bsp,
						Params: tasks.Params{"epochs": 10, "batch": 20, "lr": 1.0}},
					tasks.Stage{Name: "without", Func: "lr.sgd", Workers: workers, WorkerKind: kind, Consistency: bsp,
						Params: tasks.Params{"epochs": 2, "batch": 20, "lr": 1.0, "intercept": false}})
			task.Kind, task.Output = "lr", out
			st, err := local.SubmitAndWait(ctx, task, nil)
			if err != nil {
				t.Fatal(err)
			}
			eps := st.Results[1].Epochs
			last := eps[len(eps)-1].Metrics
			printed := last[tasks.MetricTestLossSum] / last[tasks.MetricTestSamples]
			ev, err := tasks.Evaluate(ctx, out, testPath, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if got := ev.Metrics["logloss"]; math.Abs(got-printed) > 1e-9*printed {
				t.Errorf("test logloss: last epoch %.6f, flexps eval %.6f; want equal", printed, got)
			}
			if printed > 0.45 {
				t.Errorf("test logloss %.4f after the stage without an intercept, want < 0.45 (the first stage's intercept kept)", printed)
			}
		})
	}
}

// lr.sgd trains the table its table param names, but flexps eval looked
// for "w" only: a model trained with table = "weights" was written and
// could not be scored ("lr model has no table "w""). The model now
// records the name, and eval scores it as the task's last epoch did.
func TestEvalFindsARenamedWeightTable(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	for range 300 {
		x1, x2 := rng.Float64(), rng.Float64()
		y := 0
		if x1 > x2 {
			y = 1
		}
		fmt.Fprintf(&b, "%d 1:%.6f 2:%.6f\n", y, x1, x2)
	}
	path := filepath.Join(dir, "train.libsvm")
	writeText(t, path, b.String())
	for _, table := range []string{"w", "weights"} {
		t.Run(table, func(t *testing.T) {
			ctx, local := clustertest.Local(t, 1, 1, 2*time.Minute)
			out := filepath.Join(dir, table+".model")
			task := tasks.NewTask("renamed").
				AddTable(kvstore.TableSpec{Name: table, Size: 2}).
				SetInput("train", tasks.InputSpec{Path: path}).SetInput("test", tasks.InputSpec{Path: path}).
				SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP},
					Params: tasks.Params{"epochs": 5, "batch": 20, "lr": 1.0, "table": table}})
			task.Kind, task.Output = "lr", out
			st, err := local.SubmitAndWait(ctx, task, nil)
			if err != nil {
				t.Fatal(err)
			}
			eps := st.Results[0].Epochs
			last := eps[len(eps)-1].Metrics
			printed := last[tasks.MetricTestCorrect] / last[tasks.MetricTestSamples]
			ev, err := tasks.Evaluate(ctx, out, path, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if got := ev.Metrics["accuracy"]; got != printed || got < 0.8 {
				t.Errorf("eval: accuracy %.4f, the task's last epoch %.4f", got, printed)
			}
		})
	}
}

// A checkpoint can be scored with flexps eval, but one taken within a
// standardizing lr.sgd stage holds the weights of the scaled features,
// which the stage turns back into raw ones only after its last epoch: it
// was scored as raw (accuracy 0.35, log-loss 1514, where the epoch's test
// figures were 0.97 and 0.12). Now each checkpoint scores as the epoch it
// ends (one worker: the epoch's test pass reads the checkpointed model).
func TestEvalScoresACheckpointAsItsEpoch(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 8))
	var b strings.Builder
	for range 400 {
		// Features of very different magnitudes, one dense with a large
		// offset (centered), one sparse.
		x1, x2 := 100+20*rng.Float64(), rng.Float64()
		y := 0
		if (x1-110)/10+x2 > 0.5 {
			y = 1
		}
		if rng.IntN(3) == 0 {
			fmt.Fprintf(&b, "%d 1:%.4f 2:%.4f 3:1\n", y, x1, x2)
		} else {
			fmt.Fprintf(&b, "%d 1:%.4f 2:%.4f\n", y, x1, x2)
		}
	}
	path := filepath.Join(dir, "train.libsvm")
	writeText(t, path, b.String())
	for _, tc := range []struct {
		name   string
		params tasks.Params
	}{
		{"standardized with intercept", nil},
		{"standardized without intercept", tasks.Params{"intercept": false}},
		{"standardized with l2", tasks.Params{"l2": 0.01}},
		{"raw", tasks.Params{"standardize": false, "lr": 0.001}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, local := clustertest.Local(t, 1, 1, 2*time.Minute)
			ck := filepath.Join(t.TempDir(), "ck")
			params := tasks.Params{"epochs": 3, "batch": 20, "lr": 0.5}
			for k, v := range tc.params {
				params[k] = v
			}
			task := tasks.NewTask("ckeval").
				AddTable(kvstore.TableSpec{Name: "w", Size: 3}).
				SetInput("train", tasks.InputSpec{Path: path}).SetInput("test", tasks.InputSpec{Path: path}).
				SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: params})
			task.Kind, task.Checkpoint = "lr", tasks.Checkpoint{Dir: ck, Every: "1 epochs", Keep: 10}
			st, err := local.SubmitAndWait(ctx, task, nil)
			if err != nil {
				t.Fatal(err)
			}
			eps := st.Results[0].Epochs
			for i, ep := range eps {
				file := filepath.Join(ck, fmt.Sprintf("ckpt-%06d.flexps", i+1))
				ev, err := tasks.Evaluate(ctx, file, path, "", "")
				if err != nil {
					t.Fatal(err)
				}
				printed := ep.Metrics[tasks.MetricTestLossSum] / ep.Metrics[tasks.MetricTestSamples]
				if got := ev.Metrics["logloss"]; math.Abs(got-printed) > 1e-9*printed {
					t.Errorf("checkpoint of epoch %d: eval logloss %.6f, the epoch's test logloss %.6f", ep.Epoch, got, printed)
				}
			}
		})
	}
}

// A stage that leaves epochs at lr.sgd's default (5) is checkpointed at
// every epoch's end as [checkpoint] every asks: the master counts the
// epochs the function says it runs (tasks.RegisterEpochs). Before, it
// read only an explicit epochs param, and such a stage was checkpointed
// at its end alone.
func TestDefaultEpochsAreCheckpointedEachEpoch(t *testing.T) {
	for _, tc := range []struct {
		params tasks.Params
		epochs int
	}{
		{tasks.Params{}, 5},
		{tasks.Params{"epochs": 2}, 2},
	} {
		if got := tasks.PlannedEpochs(&tasks.Stage{Func: "lr.sgd", Params: tc.params}); got != tc.epochs {
			t.Errorf("PlannedEpochs(lr.sgd %v) = %d, want %d", tc.params, got, tc.epochs)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "train.libsvm")
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "%d 1:%d 2:1\n", i%2, i%2)
	}
	writeText(t, path, b.String())
	ctx, local := clustertest.Local(t, 1, 1, 2*time.Minute)
	ck := filepath.Join(dir, "ck")
	task := tasks.NewTask("ckdefault").
		AddTable(kvstore.TableSpec{Name: "w", Size: 3}).
		SetInput("train", tasks.InputSpec{Path: path}).
		SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: tasks.Params{"batch": 20}})
	task.Kind, task.Checkpoint = "lr", tasks.Checkpoint{Dir: ck, Every: "1 epochs", Keep: 10}
	if _, err := local.SubmitAndWait(ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(ck, "ckpt-*.flexps"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 5 {
		t.Fatalf("%d checkpoints %v, want 5: one per epoch of the default 5", len(files), files)
	}
}

// A csv test file holds every feature of its columns: one with more
// feature columns than the table (an id column, a label column read as a
// feature) is another file's shape, not unseen features. The stage's test
// pass and flexps eval refuse it naming its line; before, the extra
// features weighed 0 and the others were misaligned (breast cancer with an
// id column: accuracy 0.35 for a model at 0.99, exit 0). A LIBSVM test
// feature beyond the table still weighs 0.
func TestCSVTestRowsWiderThanTheTableRefused(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	var train, same, wider, svm strings.Builder
	for i := range 300 {
		x1, x2 := rng.Float64(), rng.Float64()
		y := 0
		if x1 > x2 {
			y = 1
		}
		fmt.Fprintf(&train, "%d,%.6f,%.6f\n", y, x1, x2)
		if i < 100 {
			fmt.Fprintf(&same, "%d,%.6f,%.6f\n", y, x1, x2)
			fmt.Fprintf(&wider, "%d,%d,%.6f,%.6f\n", y, i, x1, x2)
			fmt.Fprintf(&svm, "%d 1:%.6f 2:%.6f 3:%d\n", y, x1, x2, i)
		}
	}
	trainPath := filepath.Join(dir, "train.csv")
	writeText(t, trainPath, train.String())
	for _, tc := range []struct {
		name, body string
		in         tasks.InputSpec
		want       string // "": scored
	}{
		{"csv of the training's columns", same.String(), tasks.InputSpec{Format: "csv"}, ""},
		{"csv with an id column", wider.String(), tasks.InputSpec{Format: "csv"},
			`wider.csv line 1: the row has 3 features (its csv columns less the label column), table "w" has 2 keys`},
		{"libsvm feature beyond the table", svm.String(), tasks.InputSpec{Format: "libsvm"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testPath := filepath.Join(t.TempDir(), "wider.csv")
			writeText(t, testPath, tc.body)
			tc.in.Path = testPath
			ctx, local := clustertest.Local(t, 1, 1, 2*time.Minute)
			out := filepath.Join(t.TempDir(), "m")
			task := tasks.NewTask("csv-test").
				AddTable(kvstore.TableSpec{Name: "w", Size: 2}).
				SetInput("train", tasks.InputSpec{Path: trainPath, Format: "csv"}).SetInput("test", tc.in).
				SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP},
					Params: tasks.Params{"epochs": 2, "batch": 20, "lr": 1.0}})
			task.Kind, task.Output = "lr", out
			_, err := local.SubmitAndWait(ctx, task, nil)
			check := func(what string, err error) {
				t.Helper()
				if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
					t.Errorf("%s: %v, want %q", what, err, tc.want)
				}
			}
			check("stage", err)
			if tc.want != "" {
				// The model of the same training without the test input.
				task.Inputs = map[string]tasks.InputSpec{"train": task.Inputs["train"]}
				task.ID = ""
				if _, err := local.SubmitAndWait(ctx, task, nil); err != nil {
					t.Fatal(err)
				}
			}
			_, err = tasks.Evaluate(ctx, out, testPath, tc.in.Format, "")
			check("flexps eval", err)
		})
	}
}
