package tasks

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
)

// An evaluator's figure that overflowed (an mf model scored on a rating
// of 1e308: rmse=+Inf; a k-means model on a value of 1e160: mse=+Inf) was
// printed as a score and eval exited 0. Now it is an error naming the
// figure.
func TestEvaluateRefusesNonFiniteFigures(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.model")
	f, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	m := &Model{Kind: "test.figures", Tables: []ModelTable{{Spec: kvstore.TableSpec{Name: "w", Size: 1, Width: 1}.WithDefaults(), Count: 1, Dense: true, Vals: []float64{1}}}}
	if _, err := m.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "d.libsvm")
	if err := os.WriteFile(data, []byte("1 1:1\n0 1:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var figures map[string]float64
	RegisterEvaluator("test.figures", Evaluator{Format: "libsvm", Eval: func(*Model, *datastore.Records) (map[string]float64, error) {
		return figures, nil
	}})
	for _, tc := range []struct {
		name    string
		figures map[string]float64
		want    string // "": scored
	}{
		{"finite", map[string]float64{"rmse": 0.5, "mae": 0.25}, ""},
		{"large but finite", map[string]float64{"rmse": 1e300}, ""},
		{"infinite", map[string]float64{"mae": 1e300, "rmse": math.Inf(1)}, "rmse is +Inf: the data or the model holds values too large to score (2 records)"},
		{"NaN", map[string]float64{"logloss": math.NaN(), "accuracy": 1}, "logloss is NaN"},
		{"negative infinity", map[string]float64{"objective": math.Inf(-1)}, "objective is -Inf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			figures = tc.figures
			ev, err := EvaluateWith(context.Background(), model, data, EvalOptions{})
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "" && ev.Records != 2:
				t.Fatalf("%d records scored, want 2", ev.Records)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A model scored against labels (lr) on csv data read with label column
// -1 saw every label 0: its accuracy was the share it predicted negative,
// exit 0. Refused now, for a kind that says it needs labels.
func TestEvaluateRefusesUnlabeledDataForALabeledKind(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.model")
	m := &Model{Tables: []ModelTable{{Spec: kvstore.TableSpec{Name: "w", Size: 1, Width: 1}.WithDefaults(), Count: 1, Dense: true, Vals: []float64{1}}}}
	data := filepath.Join(dir, "d.csv")
	if err := os.WriteFile(data, []byte("1,0.5\n0,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	score := func(*Model, *datastore.Records) (map[string]float64, error) {
		return map[string]float64{"accuracy": 1}, nil
	}
	RegisterEvaluator("test.labeled", Evaluator{Format: "libsvm", Labeled: true, Eval: score})
	RegisterEvaluator("test.unlabeled", Evaluator{Format: "libsvm", Eval: score})
	none, first := -1, 0
	for _, tc := range []struct {
		name, kind string
		label      *int
		want       string // "": scored
	}{
		{"labeled kind, label column 0", "test.labeled", &first, ""},
		{"labeled kind, no label column", "test.labeled", &none, "a test.labeled model is scored against the data's labels, and label column -1 reads none"},
		{"unlabeled kind, no label column", "test.unlabeled", &none, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.Kind = tc.kind
			writeModelFile(t, model, m)
			_, err := EvaluateWith(context.Background(), model, data, EvalOptions{Format: "csv", LabelColumn: tc.label})
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A model records that its training input had a header line; eval
// applied that to whatever file it was given, so a headerless test file
// lost its first record (records=2 for a file of 3). The recorded header
// now applies to the job's inputs read with header = true only; --header
// wins either way.
func TestEvaluateAppliesTheRecordedHeaderToItsFileOnly(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	train := write("train.csv", "label,x\n1,0.5\n0,2\n1,3\n")
	valid := write("valid.csv", "label,x\n1,0.5\n0,2\n1,3\n")
	plain := write("plain.csv", "1,0.5\n0,2\n1,3\n")
	task := NewTask("t").
		AddTable(kvstore.TableSpec{Name: "w", Size: 1}).
		SetInput("train", InputSpec{Path: train, Format: "csv", Header: true}).
		SetInput("valid", InputSpec{Path: valid, Format: "csv", Header: true})
	model := filepath.Join(dir, "m.model")
	m := &Model{Kind: "test.header", Meta: ModelMeta(task), Tables: []ModelTable{{Spec: kvstore.TableSpec{Name: "w", Size: 1, Width: 1}.WithDefaults(), Count: 1, Dense: true, Vals: []float64{1}}}}
	writeModelFile(t, model, m)
	RegisterEvaluator("test.header", Evaluator{Format: "csv", Eval: func(*Model, *datastore.Records) (map[string]float64, error) {
		return map[string]float64{"accuracy": 1}, nil
	}})
	yes, no := true, false
	rel, err := filepath.Rel(must(os.Getwd()), train)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		data   string
		header *bool
		want   int    // records scored
		err    string // "": scored
	}{
		{"the training file", train, nil, 3, ""},
		{"the training file, relative", rel, nil, 3, ""},
		{"another input read with a header", valid, nil, 3, ""},
		{"a headerless file", plain, nil, 3, ""},
		{"a headerless file, --header", plain, &yes, 2, ""},
		{"the training file, --header=false", train, &no, 0, "set header = true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := EvaluateWith(context.Background(), model, tc.data, EvalOptions{Header: tc.header})
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			case tc.err == "" && ev.Records != tc.want:
				t.Fatalf("records=%d, want %d", ev.Records, tc.want)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// writeModelFile writes m to path.
func writeModelFile(t *testing.T, path string, m *Model) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// Metrics print with 4 decimals unless that hides them: k-means on raw
// features in the billions printed a 300-digit objective (and broke the
// per-epoch table's columns), and a tiny non-zero figure printed 0.0000.
func TestEvaluationPrintsMetricsReadably(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0.0000"},
		{78.851441426146, "78.8514"},
		{1165188.96229, "1165188.9623"},
		{-0.5, "-0.5000"},
		{2.370689686782969e+306, "2.37069e+306"},
		{-1.5e12, "-1.5e+12"},
		{2.3706896873e-314, "2.371e-314"},
		{3.12345e-5, "3.123e-05"},
		{math.NaN(), "NaN"},
		{math.Inf(1), "+Inf"},
	} {
		e := &Evaluation{Model: "m", Kind: "kmeans", Records: 3, Metrics: map[string]float64{"objective": tc.v}}
		if got, want := e.String(), "model=m kind=kmeans records=3 objective="+tc.want; got != want {
			t.Errorf("%v: %q, want %q", tc.v, got, want)
		}
	}
}
