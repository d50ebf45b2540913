package tasks_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// roundTrip writes m and reads it back.
func roundTrip(t *testing.T, m *tasks.Model) (*tasks.Model, error) {
	t.Helper()
	var buf bytes.Buffer
	if _, err := m.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return tasks.ReadModel(&buf)
}

// A keyed (sparse) table is read by key: stored rows, the init values of
// keys it never stored, in a key space far beyond what an array holds
// (`flexps eval` of an LR model on a hashed table of 2^40 keys died out of
// memory making a dense array of it).
func TestKeyedModelTableLookup(t *testing.T) {
	const huge = 1 << 40
	for _, tc := range []struct {
		name string
		spec kvstore.TableSpec
	}{
		{"zero init, huge", kvstore.TableSpec{Name: "w", Size: huge, Width: 2, Storage: kvstore.Sparse}},
		{"uniform init, float32", kvstore.TableSpec{Name: "w", Size: 100, Width: 2, Storage: kvstore.Sparse, DType: kvstore.Float32, Init: "uniform:0.5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Written out of order: a file from another writer.
			m := &tasks.Model{Kind: "x", Tables: []tasks.ModelTable{{Spec: tc.spec,
				Keys: []uint64{90, 3, 42}, Vals: []float64{9, 9.5, 3, 3.5, 4, 4.5}}}}
			got, err := roundTrip(t, m)
			if err != nil {
				t.Fatal(err)
			}
			mt, _ := got.Table("w")
			buf := make([]float64, 2)
			for k, want := range map[uint64][]float64{3: {3, 3.5}, 42: {4, 4.5}, 90: {9, 9.5}} {
				if row := mt.Lookup(k, buf); row[0] != want[0] || row[1] != want[1] {
					t.Fatalf("key %d: %v, want %v", k, row, want)
				}
			}
			init := make([]float64, 2)
			tc.spec.WithDefaults().InitRows()(7, init)
			if row := mt.Lookup(7, buf); row[0] != init[0] || row[1] != init[1] {
				t.Fatalf("key 7 (not stored): %v, want its init %v", row, init)
			}
			if tc.spec.Init != "" && init[0] == 0 {
				t.Fatalf("uniform init gave 0")
			}
			if tc.spec.Size == huge {
				if err := got.FitsDense(); err == nil || !strings.Contains(err.Error(), `table "w"`) {
					t.Fatalf("FitsDense of a 2^40-key table: %v, want an error naming it", err)
				}
				return
			}
			dense, err := mt.Values()
			if err != nil {
				t.Fatal(err)
			}
			if dense[2*7] != init[0] || dense[2*42+1] != 4.5 {
				t.Fatalf("dense values: key 7 %v (init %v), key 42 %v", dense[14:16], init, dense[84:86])
			}
		})
	}
}

func TestKeyedModelTableRejectsBadKeys(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 10, Width: 1, Storage: kvstore.Sparse}
	for name, keys := range map[string][]uint64{"outside": {1, 10}, "twice": {4, 2, 4}} {
		t.Run(name, func(t *testing.T) {
			m := &tasks.Model{Kind: "x", Tables: []tasks.ModelTable{{Spec: spec, Keys: keys, Vals: make([]float64, len(keys))}}}
			if _, err := roundTrip(t, m); !errors.Is(err, tasks.ErrModelFormat) || !strings.Contains(err.Error(), `table "w"`) {
				t.Fatalf("got %v, want a model format error naming the table", err)
			}
		})
	}
}

// A table handed to WriteTo by Scan is written keyed as its passes read
// it, the same file as from Keys and Vals; passes that do not visit the
// same keys in the same order fail the write, naming the table.
func TestWriteScannedTable(t *testing.T) {
	spec := kvstore.TableSpec{Name: "s", Size: 1 << 40, Width: 2, Storage: kvstore.Sparse}
	pages := [][]uint64{{7, 1 << 39}, {3}}
	scan := func(order func(pass int) [][]uint64) func(func([]uint64, []float64) error) error {
		pass := 0
		return func(emit func([]uint64, []float64) error) error {
			for _, ks := range order(pass) {
				vs := make([]float64, 0, 2*len(ks))
				for _, k := range ks {
					vs = append(vs, float64(k%1000), -float64(k%1000))
				}
				if err := emit(ks, vs); err != nil {
					return err
				}
			}
			pass++
			return nil
		}
	}
	same := func(int) [][]uint64 { return pages }
	got, err := roundTrip(t, &tasks.Model{Kind: "x", Tables: []tasks.ModelTable{{Spec: spec, Count: 3, Scan: scan(same)}}})
	if err != nil {
		t.Fatal(err)
	}
	mt, _ := got.Table("s")
	if mt.Count != 3 || len(mt.Keys) != 3 || mt.Keys[0] != 3 || mt.Keys[2] != 1<<39 {
		t.Fatalf("read back %+v", mt)
	}
	for _, k := range []uint64{3, 7, 1 << 39} {
		if row := mt.Lookup(k, nil); row[0] != float64(k%1000) || row[1] != -float64(k%1000) {
			t.Fatalf("key %d: %v", k, row)
		}
	}
	for name, tc := range map[string]struct {
		count int
		order func(int) [][]uint64
	}{
		"reordered":   {3, func(p int) [][]uint64 { return [][]uint64{pages[p], pages[1-p]} }},
		"a key less":  {3, func(p int) [][]uint64 { return pages[:1+p] }},
		"a key more":  {2, same},
		"another key": {3, func(p int) [][]uint64 { return [][]uint64{pages[0], {3 + uint64(p)}} }},
	} {
		t.Run(name, func(t *testing.T) {
			m := &tasks.Model{Kind: "x", Tables: []tasks.ModelTable{{Spec: spec, Count: tc.count, Scan: scan(tc.order)}}}
			var buf bytes.Buffer
			if _, err := m.WriteTo(&buf); err == nil || !strings.Contains(err.Error(), `model table "s"`) {
				t.Fatalf("got %v, want the write to fail naming the table", err)
			}
		})
	}
}
