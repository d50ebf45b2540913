package lr

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
)

// located returns records read from train.libsvm: record i on line i+1.
func located(rows ...struct {
	label float64
	keys  []uint64
}) *datastore.Records {
	var r datastore.Records
	for i, row := range rows {
		r.Append(row.label, row.keys, make([]float64, len(row.keys)))
		r.LineNo = append(r.LineNo, int64(i+1))
	}
	r.Origins = []datastore.Origin{{Path: "train.libsvm"}}
	return &r
}

type row = struct {
	label float64
	keys  []uint64
}

// Errors about one record of the data (a label lr cannot take, a feature
// outside the table) name its file and line.
func TestRecordErrorsNameFileAndLine(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 10}
	for _, tc := range []struct {
		name  string
		r     *datastore.Records
		err   func(r *datastore.Records) error
		wants []string
	}{
		{"label in Step", located(row{1, []uint64{0}}, row{2, []uint64{1}}),
			func(r *datastore.Records) error { _, err := NewMiniBatch(memTable{}).Step(r, 0, 2, 0.1, 0); return err },
			[]string{"train.libsvm line 2", "label 2"}},
		{"label in Eval", located(row{1, []uint64{0}}, row{0, []uint64{1}}, row{-2, []uint64{1}}),
			func(r *datastore.Records) error { _, err := NewMiniBatch(memTable{}).Eval(r, 0, 3); return err },
			[]string{"train.libsvm line 3", "label -2"}},
		{"feature outside the table", located(row{1, []uint64{0, 3}}, row{0, []uint64{2, 10}}),
			func(r *datastore.Records) error { return KeyOutside(r, 0, r.Len(), spec) },
			[]string{"train.libsvm line 2", "feature key 10", `table "w" (size 10`, "index_base"}},
		{"feature outside the table, later batch", located(row{1, []uint64{12}}, row{0, []uint64{2}}, row{0, []uint64{11}}),
			func(r *datastore.Records) error { return KeyOutside(r, 1, 3, spec) },
			[]string{"train.libsvm line 3", "feature key 11"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err(tc.r)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if err := KeyOutside(located(row{1, []uint64{0, 9}}), 0, 1, spec); err != nil {
		t.Errorf("keys inside the table: %v", err)
	}
}
