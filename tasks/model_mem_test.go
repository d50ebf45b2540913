package tasks_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/flexps/flexps/datastore"
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
	// A model on a source of another scheme (HDFS) is read through it;
	// its size comes from the source's block list (several blocks for a
	// file larger than the source's block size).
	datastore.RegisterScheme("modeltest", func() (datastore.Source, error) { return fileAsURL{blocks: 3}, nil })
	for _, p := range []string{path, "modeltest://" + path} {
		t.Run(p[:min(len(p), 12)], func(t *testing.T) {
			var a, b runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&a)
			got, err := tasks.LoadModel(p)
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
		})
	}
}

// fileAsURL serves scheme://PATH as the local file PATH, listed as
// blocks equal parts.
type fileAsURL struct{ blocks int64 }

func (f fileAsURL) local(url string) string { return url[strings.Index(url, "://")+3:] }

func (f fileAsURL) Blocks(_ context.Context, pattern string, _ int64) ([]datastore.Block, error) {
	st, err := os.Stat(f.local(pattern))
	if err != nil {
		return nil, err
	}
	var out []datastore.Block
	step := (st.Size() + f.blocks - 1) / f.blocks
	for off := int64(0); off < st.Size(); off += step {
		out = append(out, datastore.Block{Path: pattern, Offset: off, Length: min(step, st.Size()-off), FileSize: st.Size()})
	}
	return out, nil
}

func (f fileAsURL) Open(_ context.Context, path string, offset int64) (io.ReadCloser, error) {
	file, err := os.Open(f.local(path))
	if err != nil {
		return nil, err
	}
	if _, err := file.Seek(offset, io.SeekStart); err != nil {
		file.Close()
		return nil, err
	}
	return struct{ io.ReadCloser }{file}, nil // not an *os.File: the size must come from Blocks
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
