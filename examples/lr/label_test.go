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

// A model of a keyed (sparse, hashed) table scores as the same weights in
// a dense table: stored keys by their weight, other keys 0. Its key space
// (2^40 here) is never made into an array (that died out of memory).
func TestEvalModelOfAKeyedTable(t *testing.T) {
	var r datastore.Records
	r.Append(1, []uint64{3, 7}, []float64{1, 2})
	r.Append(0, []uint64{5, 1 << 39}, []float64{1, 1})
	r.Append(1, []uint64{1 << 39}, []float64{-1})
	r.Append(0, []uint64{2, 3}, []float64{1, 1})
	weights := map[uint64]float64{3: 0.5, 5: -2, 1 << 39: -0.7}
	bias := tasks.ModelTable{Vals: []float64{0.1}}
	bias.Spec.Name, bias.Spec.Size, bias.Spec.Width = BiasTable("w"), 1, 1

	keyed := tasks.ModelTable{Keys: []uint64{3, 5, 1 << 39}, Vals: []float64{0.5, -2, -0.7}}
	keyed.Spec.Name, keyed.Spec.Size, keyed.Spec.Width = "w", 1<<40, 1
	got, err := EvalModel(&tasks.Model{Tables: []tasks.ModelTable{keyed, bias}}, &r)
	if err != nil {
		t.Fatal(err)
	}
	// The same sums by hand.
	var want Stats
	for i := range r.Len() {
		label, keys, vals := r.Row(i)
		z := 0.1
		for j, k := range keys {
			z += weights[k] * vals[j]
		}
		want.N++
		want.LossSum += LogLoss(z, label)
		if (z > 0) == (label == 1) {
			want.Correct++
		}
	}
	if got["accuracy"] != float64(want.Correct)/4 || got["logloss"] != want.LossSum/4 {
		t.Fatalf("keyed model: %v, want accuracy %v logloss %v", got, float64(want.Correct)/4, want.LossSum/4)
	}
}
