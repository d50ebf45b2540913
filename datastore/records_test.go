package datastore

import (
	"reflect"
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

func TestCompactTrimsSpareCapacity(t *testing.T) {
	grown := newBatch(4, nil, false) // room for 64 non-zeros
	for i := range 4 {
		grown.Append(float64(i), []uint64{uint64(i), uint64(i + 10)}, []float64{1, 0.5})
	}
	tight := &Records{}
	tight.Append(1, []uint64{3}, []float64{2})
	tight = tight.Compact()
	for _, tc := range []struct {
		name string
		r    *Records
		same bool // no copy is worth it
	}{{"slack", grown, false}, {"tight", tight, true}, {"empty", &Records{}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.r.Compact()
			if (c == tc.r) != tc.same {
				t.Fatalf("Compact copied = %v, want %v", c != tc.r, !tc.same)
			}
			if !reflect.DeepEqual(c, tc.r) {
				t.Fatalf("content changed: %+v, want %+v", c, tc.r)
			}
			if !tc.same && c.Bytes() >= tc.r.Bytes() {
				t.Fatalf("Bytes %d, not below %d", c.Bytes(), tc.r.Bytes())
			}
			if cap(c.Keys) != len(c.Keys) && !tc.same {
				t.Fatalf("keys cap %d, len %d", cap(c.Keys), len(c.Keys))
			}
		})
	}
}

func TestBlockCachePutKeepsCompactCopies(t *testing.T) {
	r := newBatch(4, nil, false)
	r.Append(1, []uint64{1, 2}, []float64{1, 1})
	before := r.Bytes()
	c := NewBlockCache(1 << 20)
	b := Block{Path: "f", Offset: 0, Length: 10}
	if !c.Put("s", b, []*Records{r}) {
		t.Fatal("not admitted")
	}
	got, ok := c.Get("s", b)
	if !ok || len(got) != 1 || !reflect.DeepEqual(got[0], r) {
		t.Fatalf("got %+v, %v", got, ok)
	}
	if r.Bytes() != before {
		t.Fatal("Put changed the caller's records")
	}
	if st := c.Stats(); st.Used != got[0].Bytes() || st.Used >= before {
		t.Fatalf("cache accounts %d bytes for a %d-byte copy (original %d)", st.Used, got[0].Bytes(), before)
	}
}
