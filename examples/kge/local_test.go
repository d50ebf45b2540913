package kge

import (
	"testing"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// localTable is a kvstore.LocalTable behind the tasks.Table interface,
// for training without a cluster.
type localTable struct{ *kvstore.LocalTable }

func (t localTable) Get(keys []uint64, out []float64) error { t.LocalTable.Get(keys, out); return nil }
func (t localTable) Add(keys []uint64, deltas []float64) error {
	t.LocalTable.Add(keys, deltas)
	return nil
}
func (t localTable) GetChunk([]uint64, []float64) error { panic("unused") }
func (t localTable) AddChunk([]uint64, []float64) error { panic("unused") }
func (t localTable) Localize([]uint64) error            { return nil }
func (t localTable) LocalizeChunks([]uint64) error      { return nil }
func (t localTable) Flush() error                       { return nil }
func (t localTable) LocalizeAsync([]uint64) (kvstore.Pending, error) {
	return kvstore.Done{}, nil
}
func (t localTable) GetAsync(keys []uint64, out []float64) (kvstore.Pending, error) {
	return kvstore.Done{}, t.Get(keys, out)
}

var _ tasks.Table = localTable{}

func newLocal(t *testing.T, name string, size uint64, width int) localTable {
	t.Helper()
	lt, err := kvstore.NewLocalTable(kvstore.TableSpec{Name: name, Size: size, Width: width, Init: "uniform:0.1"}, kvstore.GlobalLock, 64)
	if err != nil {
		t.Fatal(err)
	}
	return localTable{lt}
}
