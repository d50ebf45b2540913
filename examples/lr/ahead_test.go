package lr_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/kvstore"
)

// nextTable is an in-memory lr.Table with GetNext that logs its calls;
// a read ahead copies the values at Wait.
type nextTable struct {
	w   map[uint64]float64
	log []string
}

func (t *nextTable) Get(keys []uint64, out []float64) error {
	t.log = append(t.log, fmt.Sprintf("get %d", len(keys)))
	for i, k := range keys {
		out[i] = t.w[k]
	}
	return nil
}

func (t *nextTable) Add(keys []uint64, d []float64) error {
	t.log = append(t.log, fmt.Sprintf("add %d", len(keys)))
	for i, k := range keys {
		t.w[k] += d[i]
	}
	return nil
}

type readLater func() error

func (f readLater) Wait() error { return f() }

func (t *nextTable) GetNext(keys []uint64, out []float64) (kvstore.Pending, error) {
	t.log = append(t.log, fmt.Sprintf("next %d", len(keys)))
	keys = slices.Clone(keys)
	return readLater(func() error {
		for i, k := range keys {
			out[i] = t.w[k]
		}
		return nil
	}), nil
}

// TestStepReadsAhead: with SetNext, a Step starts the next batch's read
// before it adds its own update, the next Step uses that read, and the
// model is the one Steps without read ahead train (the table here
// answers at Wait, like a shard under BSP). A Step on a batch other than
// the one read ahead is an error.
func TestStepReadsAhead(t *testing.T) {
	var r datastore.Records
	for i := range 6 { // three batches of two rows, three distinct keys each
		r.Append(float64(i%2), []uint64{uint64(i), uint64(i + 1), 9}, []float64{1, 0.5, 1})
	}
	train := func(ahead bool) (*nextTable, error) {
		tab := &nextTable{w: map[uint64]float64{}}
		m := lr.NewMiniBatch(tab)
		for lo := 0; lo < 6; lo += 2 {
			if ahead && lo+2 < 6 {
				m.SetNext(&r, lo+2, lo+4)
			}
			if _, err := m.Step(&r, lo, lo+2, 0.5, 0); err != nil {
				return tab, err
			}
		}
		return tab, nil
	}
	plain, err := train(false)
	if err != nil {
		t.Fatal(err)
	}
	ahead, err := train(true)
	if err != nil {
		t.Fatal(err)
	}
	want := "get 4,next 4,add 4,next 4,add 4,add 4"
	if got := strings.Join(ahead.log, ","); got != want {
		t.Fatalf("calls %s, want %s", got, want)
	}
	for k, v := range plain.w {
		if ahead.w[k] != v {
			t.Fatalf("key %d: %v read ahead, %v without", k, ahead.w[k], v)
		}
	}
	m := lr.NewMiniBatch(&nextTable{w: map[uint64]float64{}})
	m.SetNext(&r, 2, 4)
	if _, err := m.Step(&r, 0, 2, 0.5, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Step(&r, 4, 6, 0.5, 0); err == nil || !strings.Contains(err.Error(), "read 2..4 ahead") {
		t.Fatalf("Step on another batch than the one read ahead: %v", err)
	}
}
