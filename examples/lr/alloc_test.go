package lr

import (
	"testing"

	"github.com/flexps/flexps/datastore"
)

// sliceTable is a dense in-memory Table.
type sliceTable []float64

func (s sliceTable) Get(keys []uint64, out []float64) error {
	for i, k := range keys {
		out[i] = s[k]
	}
	return nil
}

func (s sliceTable) Add(keys []uint64, d []float64) error {
	for i, k := range keys {
		s[k] += d[i]
	}
	return nil
}

// TestStepAllocatesNothing: once its buffers have grown, a training step
// (with an intercept and l2) allocates nothing, so a worker's batches
// cost the garbage collector nothing.
func TestStepAllocatesNothing(t *testing.T) {
	r := &datastore.Records{}
	for i := range 200 {
		r.Append(float64(i%2), []uint64{uint64(i % 7), uint64(10 + i%13), uint64(40 + i%5)}, []float64{1, 0.5, 0.25})
	}
	m := NewMiniBatch(make(sliceTable, 64))
	m.bias = make(sliceTable, 1)
	step := 0
	run := func() {
		lo := (step % 4) * 50
		step++
		if _, err := m.Step(r, lo, lo+50, 0.1, 1e-3); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if a := testing.AllocsPerRun(50, run); a != 0 {
		t.Fatalf("Step allocates %v times per batch", a)
	}
}
