package lr

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

func TestBinaryLabel(t *testing.T) {
	for _, tc := range []struct {
		label float64
		y     float64
		ok    bool
	}{{1, 1, true}, {0, 0, true}, {-1, 0, true}, {7, 0, false}, {0.5, 0, false}, {2, 0, false}} {
		y, err := binaryLabel(tc.label)
		if (err == nil) != tc.ok || y != tc.y {
			t.Errorf("binaryLabel(%v) = %v, %v", tc.label, y, err)
		}
	}
}

// memTable is a table in a map, for Step and EvalModel without a cluster.
type memTable map[uint64]float64

func (m memTable) Get(keys []uint64, out []float64) error {
	for i, k := range keys {
		out[i] = m[k]
	}
	return nil
}

func (m memTable) Add(keys []uint64, d []float64) error {
	for i, k := range keys {
		m[k] += d[i]
	}
	return nil
}

// A multi-class label in the training data stops training with an error.
func TestStepRefusesNonBinaryLabels(t *testing.T) {
	var r datastore.Records
	r.Append(1, []uint64{0}, []float64{1})
	r.Append(7, []uint64{1}, []float64{1})
	m := NewMiniBatch(memTable{})
	if _, err := m.Step(&r, 0, 2, 0.1, 0); err == nil || !strings.Contains(err.Error(), "label 7") {
		t.Fatalf("Step: %v", err)
	}
	model := &tasks.Model{Tables: []tasks.ModelTable{{Vals: []float64{0, 0}}}}
	model.Tables[0].Spec.Name, model.Tables[0].Spec.Size, model.Tables[0].Spec.Width = "w", 2, 1
	if _, err := EvalModel(model, &r); err == nil || !strings.Contains(err.Error(), "record 2") {
		t.Fatalf("EvalModel: %v", err)
	}
}
