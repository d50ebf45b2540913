package datastore

import (
	"slices"
	"testing"
)

func TestRecords(t *testing.T) {
	var r Records
	if r.Len() != 0 {
		t.Fatalf("Len of zero Records = %d", r.Len())
	}
	r.Append(1, []uint64{3, 7}, []float64{0.5, 2})
	r.Append(-1, nil, nil)
	r.Append(0, []uint64{9}, nil)
	if r.Len() != 3 || len(r.Offsets) != 4 {
		t.Fatalf("Len = %d, Offsets = %v", r.Len(), r.Offsets)
	}
	tests := []struct {
		label float64
		keys  []uint64
		vals  []float64
	}{
		{1, []uint64{3, 7}, []float64{0.5, 2}},
		{-1, []uint64{}, []float64{}},
		{0, []uint64{9}, []float64{1}},
	}
	for i, tt := range tests {
		l, k, v := r.Row(i)
		if l != tt.label || !slices.Equal(k, tt.keys) || !slices.Equal(v, tt.vals) {
			t.Errorf("Row(%d) = %v %v %v, want %v %v %v", i, l, k, v, tt.label, tt.keys, tt.vals)
		}
	}
	// Row's slices must not let an append clobber the next record.
	_, k, _ := r.Row(0)
	_ = append(k, 99)
	if _, k1, _ := r.Row(2); k1[0] != 9 {
		t.Fatalf("append to Row slice overwrote the next record")
	}
	b := r.Bytes()
	if b <= 0 {
		t.Fatalf("Bytes = %d", b)
	}
	c := cap(r.Keys)
	r.Reset()
	if r.Len() != 0 || len(r.Keys) != 0 || cap(r.Keys) != c {
		t.Fatalf("Reset: len %d keys %d cap %d (want cap %d)", r.Len(), len(r.Keys), cap(r.Keys), c)
	}
	r.AppendLine("hello")
	r.AppendLine("world")
	if r.Len() != 2 || r.Lines[1] != "world" || len(r.Offsets) != 3 {
		t.Fatalf("AppendLine: %+v", r)
	}
	if r.Bytes() < 10 {
		t.Fatalf("Bytes ignores lines")
	}
}

func TestRecordsAppendMismatchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	var r Records
	r.Append(0, []uint64{1, 2}, []float64{1})
}
