package tasks_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// A dense table too large for the model file or checkpoints the task
// writes is refused at submission, naming the table and its size: it was
// found only when training ended, failing the task and losing the model.
func TestTooLargeForModelRefusedUpFront(t *testing.T) {
	for _, tc := range []struct {
		name       string
		out, ckpt  string
		spec       kvstore.TableSpec
		wantErr    bool
		wantInText string
	}{
		{"dense 2^32 with output", "m.model", "", kvstore.TableSpec{Name: "w", Size: 1 << 32, DType: kvstore.Float32}, true, `table "w": 4294967296 keys x 1 = 4294967296 values`},
		{"dense 2^62 x 65535 with output", "m.model", "", kvstore.TableSpec{Name: "w", Size: 1 << 62, Width: 65535}, true, `302226843217638866288640 values`},
		{"width pushes it over", "m.model", "", kvstore.TableSpec{Name: "w", Size: 1 << 27, Width: 3}, true, "402653184 values"},
		{"dense with a checkpoint", "", "ck", kvstore.TableSpec{Name: "w", Size: 1 << 30}, true, "a checkpoint"},
		{"at the limit", "m.model", "", kvstore.TableSpec{Name: "w", Size: 1 << 28}, false, ""},
		{"no output, no checkpoint", "", "", kvstore.TableSpec{Name: "w", Size: 1 << 32}, false, ""},
		{"sparse", "m.model", "", kvstore.TableSpec{Name: "w", Size: 1 << 40, Storage: kvstore.Sparse}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := tasks.NewTask("big").AddTable(tc.spec).SetStages(tasks.Stage{Name: "s", Func: "t.noop", Workers: 1})
			task.Output = tc.out
			task.Checkpoint.Dir = tc.ckpt
			task.Normalize()
			err := task.Validate()
			if (err != nil) != tc.wantErr || (err != nil && !strings.Contains(err.Error(), tc.wantInText)) {
				t.Fatalf("err = %v, want error %v containing %q", err, tc.wantErr, tc.wantInText)
			}
		})
	}
}
