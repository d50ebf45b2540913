package tasks_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// TestLoadModelAllocatesTheModelOnce: loading a model file allocates its
// values once, in their final form: `flexps eval` of a 1.6 GB model
// (200M values) peaked at 4.6 GB when the values were read as grown
// []uint64 and then copied into []float64.
func TestLoadModelAllocatesTheModelOnce(t *testing.T) {
	const n = 1 << 21 // 16 MiB of values
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = float64(i)
	}
	keys := make([]uint64, n/4)
	for i := range keys {
		keys[i] = uint64(i * 4)
	}
	m := &tasks.Model{Kind: "lr", Task: "t", Tables: []tasks.ModelTable{
		{Spec: kvstore.TableSpec{Name: "w", Size: n, Width: 1}, Vals: vals},
		{Spec: kvstore.TableSpec{Name: "s", Size: n, Width: 1, Storage: kvstore.Sparse}, Keys: keys, Vals: vals[:len(keys)]},
	}}
	path := filepath.Join(t.TempDir(), "m.model")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	model := float64(8 * (n + 2*len(keys)))
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	got, err := tasks.LoadModel(path)
	runtime.ReadMemStats(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Tables) != 2 || got.Tables[0].Vals[n-1] != n-1 || got.Tables[1].Keys[len(keys)-1] != keys[len(keys)-1] {
		t.Fatalf("model read back wrong")
	}
	alloc := float64(b.TotalAlloc - a.TotalAlloc)
	t.Logf("allocated %.2fx the model's %d bytes", alloc/model, int(model))
	if alloc > 1.1*model {
		t.Fatalf("LoadModel allocated %.0f bytes for a model of %.0f (%.2fx; bound 1.1x)", alloc, model, alloc/model)
	}
}
