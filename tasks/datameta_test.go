package tasks

import (
	"testing"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
)

// TestEvalOptionsTakeTheRecordedFormat: a model records how its training
// input was read; eval reads data in that format with the same options,
// however the format is spelled, and flags override them.
func TestEvalOptionsTakeTheRecordedFormat(t *testing.T) {
	one := 1
	m := &Model{Meta: map[string]string{MetaFormat: "libsvm", MetaIndexBase: "0"}}
	def := datastore.DefaultFormatOptions()
	cases := []struct {
		name       string
		o          EvalOptions
		wantFormat string
		wantBase   int
	}{
		{"the model's format", EvalOptions{}, "libsvm", 0},
		{"named as recorded", EvalOptions{Format: "libsvm"}, "libsvm", 0},
		{"svmlight, its other name", EvalOptions{Format: "svmlight"}, "svmlight", 0},
		{"upper case", EvalOptions{Format: "LIBSVM"}, "LIBSVM", 0},
		{"flag overrides", EvalOptions{Format: "svmlight", IndexBase: &one}, "svmlight", 1},
		{"another format: its defaults", EvalOptions{Format: "csv"}, "csv", def.IndexBase},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, opt, err := tc.o.dataFormat(m, "libsvm")
			if err != nil {
				t.Fatal(err)
			}
			if f != tc.wantFormat || opt.IndexBase != tc.wantBase {
				t.Fatalf("format %q index_base %d, want %q %d", f, opt.IndexBase, tc.wantFormat, tc.wantBase)
			}
		})
	}
}

// A model records the tables its stages' params named, so an evaluator
// finds a renamed table: lr.sgd with table = "weights" wrote a model that
// flexps eval refused ("lr model has no table "w""), and an mf model
// whose bias tables were renamed was scored without them.
func TestModelMetaRecordsTheTablesParamsName(t *testing.T) {
	task := NewTask("t").
		AddTable(kvstore.TableSpec{Name: "weights", Size: 3}).
		AddTable(kvstore.TableSpec{Name: "mu", Size: 1}).
		SetInput("train", InputSpec{Path: "x"}).
		SetStages(
			Stage{Name: "a", Func: "f", Params: Params{"table": "weights", "train": "train", "epochs": 3, "bias": "mu"}},
			Stage{Name: "b", Func: "f", Params: Params{"table": "mu"}})
	m := &Model{Meta: ModelMeta(task)}
	for _, tc := range []struct{ param, def, want string }{
		{"table", "w", "mu"}, // the last stage naming it
		{"bias", "bias", "mu"},
		{"train", "train", "train"}, // an input, not a table: the default
		{"epochs", "e", "e"},
		{"users", "users", "users"},
	} {
		t.Run(tc.param, func(t *testing.T) {
			if got := m.TableName(tc.param, tc.def); got != tc.want {
				t.Fatalf("TableName(%q, %q) = %q, want %q (meta %v)", tc.param, tc.def, got, tc.want, m.Meta)
			}
		})
	}
}
