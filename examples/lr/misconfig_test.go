package lr_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// misconfigRig is a one-slave cluster and a small 1-based LIBSVM file of
// two features, for tasks that set lr.sgd up wrong.
func misconfigRig(t *testing.T) (context.Context, *engine.Local, string) {
	t.Helper()
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, "%d 1:%d 2:1\n", i%2, i%5)
	}
	path := filepath.Join(t.TempDir(), "train.libsvm")
	writeText(t, path, b.String())
	ctx, local := clustertest.Local(t, 1, 1, 2*time.Minute)
	return ctx, local, path
}

// writeText writes body to path.
func writeText(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// lr.sgd keeps one weight per feature. A table declared with a larger
// width failed the task on its first read, deep in the store ("kvstore:
// get on "w": 17 values for 17 keys of width 2"), naming neither the
// setting nor the stage's need; now the stage says so before it reads.
func TestSGDRefusesATableWiderThanOne(t *testing.T) {
	ctx, local, path := misconfigRig(t)
	for _, tc := range []struct {
		width  int
		params tasks.Params
		want   string // "" : trains
	}{
		{1, nil, ""},
		{2, nil, `table "w": width must be 1 (one weight per feature), got 2`},
		{3, tasks.Params{"standardize": false, "intercept": false}, `table "w": width must be 1 (one weight per feature), got 3`},
	} {
		t.Run(fmt.Sprintf("width %d", tc.width), func(t *testing.T) {
			params := tasks.Params{"epochs": 1, "batch": 10}
			for k, v := range tc.params {
				params[k] = v
			}
			task := tasks.NewTask("width").
				AddTable(kvstore.TableSpec{Name: "w", Size: 3, Width: tc.width}).
				SetInput("train", tasks.InputSpec{Path: path}).
				SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: params})
			_, err := local.SubmitAndWait(ctx, task, nil)
			checkErr(t, err, tc.want)
		})
	}
}

// The test input is optional, but a test param that names an input the
// stage cannot read is a mistake: test = "vaild" trained without a single
// test figure and reported success, as if no test set had been asked for.
// Refused when the stage starts (Info.OptionalInput), and since stop 35
// already at submission (tasks.RegisterInputs).
func TestSGDRefusesATestParamNamingNoInput(t *testing.T) {
	ctx, local, path := misconfigRig(t)
	for _, tc := range []struct {
		name     string
		param    any      // the test param; nil: not set
		inputs   []string // the stage's inputs; nil: all
		declared bool     // the task declares an input "test"
		want     string   // "" : trains; "test": trains and reports test figures
	}{
		{"no test param, no test input", nil, nil, false, ""},
		{"no test param, a test input", nil, nil, true, "test"},
		{"no test param, the stage reads only train", nil, []string{"train"}, true, ""},
		{"test param names the test input", "test", nil, true, "test"},
		{"test param names no input", "vaild", nil, true, `lr.sgd reads input "vaild" (param "test") but the task declares no such input`},
		{"test param names an input the stage does not read", "test", []string{"train"}, true, `lr.sgd reads input "test" (param "test") but the stage's inputs are ["train"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := tasks.Params{"epochs": 1, "batch": 10}
			if tc.param != nil {
				params["test"] = tc.param
			}
			task := tasks.NewTask("misconfig").
				AddTable(kvstore.TableSpec{Name: "w", Size: 3}).
				SetInput("train", tasks.InputSpec{Path: path}).
				SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Inputs: tc.inputs, Params: params})
			if tc.declared {
				task.SetInput("test", tasks.InputSpec{Path: path})
			}
			st, err := local.SubmitAndWait(ctx, task, nil)
			switch {
			case (tc.want == "" || tc.want == "test") && err != nil:
				t.Fatal(err)
			case tc.want != "" && tc.want != "test" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			case err != nil:
				return
			}
			eps := st.Results[0].Epochs
			tested := eps[len(eps)-1].Metrics[tasks.MetricTestSamples] > 0
			if tested != (tc.want == "test") {
				t.Fatalf("test samples %v, want test figures: %v", eps[len(eps)-1].Metrics[tasks.MetricTestSamples], tc.want == "test")
			}
		})
	}
}

// lr.sgd reads numeric records. An input read as text gives every record
// label 0 and no features: the stage trained a bias on nothing, reported
// test accuracy 1.0, and wrote the model. Now a train or test input in a
// format lr does not read stops the stage when it starts.
func TestSGDRefusesAnInputItCannotRead(t *testing.T) {
	ctx, local, path := misconfigRig(t)
	for _, tc := range []struct {
		name        string
		train, test string // formats; test "": no test input
		want        string // "" : trains
	}{
		{"libsvm", "libsvm", "libsvm", ""},
		{"train as text", "text", "", `lr.sgd: input "train" is read as text; lr.sgd reads libsvm or csv`},
		{"test as text", "libsvm", "text", `lr.sgd: input "test" is read as text; lr.sgd reads libsvm or csv`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := tasks.NewTask("formats").
				AddTable(kvstore.TableSpec{Name: "w", Size: 3}).
				SetInput("train", tasks.InputSpec{Path: path, Format: tc.train}).
				SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: tasks.Params{"epochs": 1, "batch": 10}})
			if tc.test != "" {
				task.SetInput("test", tasks.InputSpec{Path: path, Format: tc.test})
			}
			_, err := local.SubmitAndWait(ctx, task, nil)
			checkErr(t, err, tc.want)
		})
	}
}

// flexps eval --format text read the data as records without features or
// labels and scored them: accuracy 0.0000 and a logloss for an lr model,
// mse 0 for k-means, exit 0. An lr model scores libsvm or csv data; any
// other format is refused before the data is read.
func TestEvalRefusesAFormatItCannotScore(t *testing.T) {
	ctx, local, path := misconfigRig(t)
	model := filepath.Join(t.TempDir(), "lr.model")
	task := tasks.NewTask("evalformats").
		AddTable(kvstore.TableSpec{Name: "w", Size: 3}).
		SetInput("train", tasks.InputSpec{Path: path}).
		SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: tasks.Params{"epochs": 1, "batch": 10}})
	task.Kind, task.Output = "lr", model
	if _, err := local.SubmitAndWait(ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		format string
		want   string // "" : scored
	}{
		{"", ""},
		{"libsvm", ""},
		{"svmlight", ""},
		{"text", "a lr model scores libsvm or csv data, not text"},
		{"Text", "a lr model scores libsvm or csv data, not Text"},
		{"ratings", "a lr model scores libsvm or csv data, not ratings"},
	} {
		t.Run("format "+tc.format, func(t *testing.T) {
			ev, err := tasks.EvaluateWith(ctx, model, path, tasks.EvalOptions{Format: tc.format})
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "" && ev.Records != 40:
				t.Fatalf("scored %d records, want 40", ev.Records)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A step whose loss is no longer finite stops the stage with one error
// naming the stage and epoch once: the message said "lr.sgd: stage "sgd"
// epoch 1: " twice, the step's own text wrapped in the epoch's.
func TestNonFiniteLossNamesTheStageOnce(t *testing.T) {
	ctx, local, _ := misconfigRig(t)
	path := filepath.Join(t.TempDir(), "huge.libsvm")
	if err := os.WriteFile(path, []byte("1 1:1e200\n0 1:1e200\n1 1:1e200\n0 1:1e200\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	task := tasks.NewTask("huge").
		AddTable(kvstore.TableSpec{Name: "w", Size: 1}).
		SetInput("train", tasks.InputSpec{Path: path}).
		SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP},
			Params: tasks.Params{"epochs": 1, "batch": 1, "lr": 5, "standardize": false, "intercept": false}})
	_, err := local.SubmitAndWait(ctx, task, nil)
	const prefix = `lr.sgd: stage "sgd" epoch 1: `
	if err == nil || !strings.Contains(err.Error(), prefix+"the training loss became") || strings.Count(err.Error(), prefix) != 1 {
		t.Fatalf("error %v, want %q once, then the loss", err, prefix)
	}
}

// Scaling sums each feature's squares: a value beyond 1.3e154 made the
// sum infinite, the feature's scale NaN, and training stopped with a NaN
// loss blamed on the learning rate. The record and feature are named now,
// with how a key maps to the file's id: "feature key 0" for the id 1 on the
// named line sent the user looking for an id 0.
func TestAFeatureWhoseSquareOverflowsIsNamed(t *testing.T) {
	ctx, local, _ := misconfigRig(t)
	path := filepath.Join(t.TempDir(), "huge.libsvm")
	for _, tc := range []struct {
		name string
		file string
		want string // "" : trains
	}{
		{"1e150 squares to a float64", "1 1:1 2:3\n0 1:2 2:1e150\n1 1:1 2:-2\n0 1:3\n", ""},
		{"-2e200 does not", "1 1:1 2:3\n0 1:2 2:1e150\n1 1:1 2:-2e200\n0 1:3\n", "line 3: feature key 1 (a LIBSVM feature id is its key + index_base, 1 by default) is -2e+200, whose square overflows a float64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			task := tasks.NewTask("huge").
				AddTable(kvstore.TableSpec{Name: "w", Size: 2}).
				SetInput("train", tasks.InputSpec{Path: path}).
				SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: tasks.Params{"epochs": 1, "batch": 2, "lr": 0.1}})
			_, err := local.SubmitAndWait(ctx, task, nil)
			checkErr(t, err, tc.want)
		})
	}
}

// checkErr fails t unless err is nil (want "") or says want.
func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatal(err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

// read_ahead starts reading the next batch's weights from the KV-store
// early; the local, hogwild and single kinds hold the model in memory, so
// it was accepted there and did nothing. Refused at submission, naming
// the param's line.
func TestReadAheadOnlyOnPSStages(t *testing.T) {
	const job = `name = "ra"
[[table]]
name = "w"
size = 10
[input.train]
path = "x.libsvm"
[[stage]]
name = "sgd"
func = "lr.sgd"
KIND
[stage.params]
read_ahead = true
`
	for _, tc := range []struct{ kind, want string }{
		{"", ""},
		{`worker_kind = "ps"`, ""},
		{`worker_kind = "local"`, "a local stage holds the model in memory"},
		{`worker_kind = "hogwild"`, "a hogwild stage holds the model in memory"},
		{"worker_kind = \"single\"\nworkers = 1", "a single stage holds the model in memory"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			_, _, err := tasks.ParseJob("job.toml", []byte(strings.Replace(job, "KIND", tc.kind, 1)))
			checkErr(t, err, tc.want)
			if tc.want != "" && !strings.Contains(err.Error(), "job.toml line ") {
				t.Fatalf("%v: no line named", err)
			}
		})
	}
}
