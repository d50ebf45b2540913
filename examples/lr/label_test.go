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

// Labels 1, 0 and -1 in one data set are three classes: training, the
// stage's test figures and flexps eval refuse them, naming the lines of
// both negative labels (until now 0 and -1 were both read as negative and
// a 1-against-the-rest model was trained and scored, exit 0). Either
// negative label alone, and a train set of 0/1 with a test set of -1/1,
// are binary.
func TestThreeClassLabelsRefused(t *testing.T) {
	for _, tc := range []struct {
		name        string
		train, test []float64
		trainErr    string // "" none
		testErr     string
	}{
		{"0 and 1", []float64{1, 0, 1, 0}, []float64{0, 1}, "", ""},
		{"-1 and 1", []float64{-1, 1, -1}, []float64{1, -1}, "", ""},
		{"0/1 train, -1/1 test", []float64{0, 1}, []float64{-1, 1}, "", ""},
		{"only 0", []float64{0, 0}, []float64{0}, "", ""},
		{"-1, 0, 1 in train", []float64{1, -1, 1, 0}, []float64{1}, "record 4: label 0, and record 2 has label -1: labels 1, 0 and -1 are three classes", ""},
		{"0 then -1", []float64{0, -1}, []float64{1}, "record 2: label -1, and record 1 has label 0", ""},
		{"-1, 0, 1 in test", []float64{1, 0}, []float64{-1, 1, 0}, "", "record 3: label 0, and record 1 has label -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			records := func(labels []float64) *datastore.Records {
				var r datastore.Records
				for i, l := range labels {
					r.Append(l, []uint64{uint64(i % 2)}, []float64{1})
				}
				return &r
			}
			check := func(what string, err error, want string) {
				t.Helper()
				if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
					t.Errorf("%s: %v, want %q", what, err, want)
				}
			}
			train, test := records(tc.train), records(tc.test)
			m := NewMiniBatch(memTable{})
			_, err := m.Step(train, 0, train.Len(), 0.1, 0)
			check("Step", err, tc.trainErr)
			// A worker's batches: the labels of earlier batches count.
			m = NewMiniBatch(memTable{})
			for i := range train.Len() {
				if _, err = m.Step(train, i, i+1, 0.1, 0); err != nil {
					break
				}
			}
			check("Step by record", err, tc.trainErr)
			_, err = m.Eval(test, 0, test.Len())
			check("Eval", err, tc.testErr)
			model := &tasks.Model{Tables: []tasks.ModelTable{{Vals: []float64{0, 0}}}}
			model.Tables[0].Spec.Name, model.Tables[0].Spec.Size, model.Tables[0].Spec.Width = "w", 2, 1
			_, err = EvalModel(model, train)
			check("EvalModel train", err, tc.trainErr)
			_, err = EvalModel(model, test)
			check("EvalModel test", err, tc.testErr)
		})
	}
}
