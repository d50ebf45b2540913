package tableops

import (
	"errors"
	"slices"
	"testing"
)

// mapTable is a table of width w in a map: Get reads (absent: 0), Add adds.
type mapTable struct {
	w    int
	vals map[uint64][]float64
	fail error // returned by Get when set
}

func (m *mapTable) Get(keys []uint64, out []float64) error {
	if m.fail != nil {
		return m.fail
	}
	for i, k := range keys {
		v := m.vals[k]
		for j := range m.w {
			out[i*m.w+j] = 0
			if v != nil {
				out[i*m.w+j] = v[j]
			}
		}
	}
	return nil
}

func (m *mapTable) Add(keys []uint64, deltas []float64) error {
	for i, k := range keys {
		if m.vals[k] == nil {
			m.vals[k] = make([]float64, m.w)
		}
		for j := range m.w {
			m.vals[k][j] += deltas[i*m.w+j]
		}
	}
	return nil
}

func TestSetAndNegate(t *testing.T) {
	tests := []struct {
		name  string
		w     int
		start map[uint64][]float64
		keys  []uint64
		vals  []float64
	}{
		{"empty table", 1, map[uint64][]float64{}, []uint64{0, 7}, []float64{1.5, -2}},
		{"overwrites what is there", 2, map[uint64][]float64{3: {4, 5}, 9: {-1, 1}}, []uint64{3, 9}, []float64{0, 1, 2, 3}},
		{"no keys", 1, map[uint64][]float64{1: {1}}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &mapTable{w: tc.w, vals: tc.start}
			if err := Set(m, tc.keys, tc.vals); err != nil {
				t.Fatal(err)
			}
			got := make([]float64, len(tc.vals))
			if err := m.Get(tc.keys, got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.vals) {
				t.Fatalf("after Set: %v, want %v", got, tc.vals)
			}
			buf := make([]float64, len(tc.vals))
			if err := Negate(m, tc.keys, buf); err != nil {
				t.Fatal(err)
			}
			if err := m.Get(tc.keys, got); err != nil {
				t.Fatal(err)
			}
			for i, v := range got {
				if v != 0 {
					t.Fatalf("after Negate: value %d is %v, want 0", i, v)
				}
			}
		})
	}
}

func TestReadErrorsWriteNothing(t *testing.T) {
	boom := errors.New("boom")
	m := &mapTable{w: 1, vals: map[uint64][]float64{1: {2}}, fail: boom}
	if err := Set(m, []uint64{1}, []float64{5}); !errors.Is(err, boom) {
		t.Fatalf("Set: %v, want %v", err, boom)
	}
	if err := Negate(m, []uint64{1}, make([]float64, 1)); !errors.Is(err, boom) {
		t.Fatalf("Negate: %v, want %v", err, boom)
	}
	if m.vals[1][0] != 2 {
		t.Fatalf("a failed read wrote: %v", m.vals[1])
	}
}
