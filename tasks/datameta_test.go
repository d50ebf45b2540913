package tasks

import (
	"strings"
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
			f, opt, err := tc.o.dataFormat(m, "x", "libsvm")
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

// A flag of another format than the data's was ignored: --label-column 3
// on data read as libsvm, --index-base 0 on csv, --header on libsvm
// scored the data without a word, where a job file's input refuses such
// an option. Now an error naming the flag.
func TestEvalOptionsRefuseAnotherFormatsFlag(t *testing.T) {
	zero, three, yes, no := 0, 3, true, false
	libsvm := &Model{Meta: map[string]string{MetaFormat: "libsvm"}}
	csv := &Model{Meta: map[string]string{MetaFormat: "csv"}}
	for _, tc := range []struct {
		name string
		m    *Model
		o    EvalOptions
		want string // "": accepted
	}{
		{"index base on libsvm", libsvm, EvalOptions{IndexBase: &zero}, ""},
		{"label column on csv", csv, EvalOptions{LabelColumn: &three, Delimiter: ";", Header: &yes}, ""},
		{"header false on libsvm", libsvm, EvalOptions{Header: &no}, ""},
		{"header on ratings", libsvm, EvalOptions{Format: "ratings", Header: &yes}, ""},
		{"label column on libsvm", libsvm, EvalOptions{LabelColumn: &three}, "--label-column applies only to csv data; the data is read as libsvm (set --format)"},
		{"index base on csv", csv, EvalOptions{IndexBase: &zero}, "--index-base applies only to libsvm data; the data is read as csv"},
		{"index base on csv by --format", libsvm, EvalOptions{Format: "csv", IndexBase: &zero}, "--index-base applies only to libsvm data"},
		{"delimiter on svmlight", csv, EvalOptions{Format: "svmlight", Delimiter: ";"}, "--delimiter applies only to csv data; the data is read as svmlight"},
		{"header on libsvm", libsvm, EvalOptions{Header: &yes}, "--header applies only to csv or ratings data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tc.o.dataFormat(tc.m, "x", "libsvm")
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
