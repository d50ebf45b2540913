package tasks

import (
	"testing"

	"github.com/flexps/flexps/datastore"
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
