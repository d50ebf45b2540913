package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	// test.keys sets every key k of the dense table "w" to k/4 (each
	// worker its share of the keys, in batches) and writes sparseKeys of
	// the sparse table "s".
	tasks.Register("test.keys", func(info *tasks.Info) error {
		w, err := info.Table("w")
		if err != nil {
			return err
		}
		const batch = 4096
		keys := make([]uint64, 0, batch)
		vals := make([]float64, 0, batch)
		flush := func() error {
			err := w.Add(keys, vals)
			keys, vals = keys[:0], vals[:0]
			return err
		}
		for k := uint64(info.Rank); k < w.Spec().Size; k += uint64(info.Workers) {
			keys, vals = append(keys, k), append(vals, float64(k)/4)
			if len(keys) == batch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
		s, err := info.Table("s")
		if err != nil {
			return err
		}
		if info.Rank == 0 {
			if err := s.Add(sparseKeys, sparseVals); err != nil {
				return err
			}
			// break_output simulates the output's directory vanishing
			// during training (it passed the check at submit): it becomes
			// a file.
			if dir := info.Params.String("break_output", ""); dir != "" {
				if err := os.RemoveAll(dir); err != nil {
					return err
				}
				if err := os.WriteFile(dir, []byte("x"), 0o644); err != nil {
					return err
				}
			}
		}
		return info.Clock()
	})
}

var (
	sparseKeys = []uint64{1 << 35, 3, 1<<36 - 1, 99}
	sparseVals = []float64{1, 2, 3, 4}
)

// A hash-partitioned table of 200k keys with an output path is written
// whole (it used to fail at the end with "slow consumer, messages
// dropped" and lose the model), next to a sparse table far larger than a
// dense model could hold, written as its stored keys.
func TestOutputOfLargeHashPartitionedTable(t *testing.T) {
	l := startLocal(t, 2, 2)
	out := filepath.Join(t.TempDir(), "model.bin")
	const size = 200_000
	task := tasks.NewTask("hashout").
		AddTable(kvstore.TableSpec{Name: "w", Size: size, Partition: kvstore.HashPartition}).
		AddTable(kvstore.TableSpec{Name: "s", Size: 1 << 36, Storage: kvstore.Sparse, Partition: kvstore.HashPartition}).
		SetStages(tasks.Stage{Name: "fill", Func: "test.keys", Workers: 4, Consistency: kvstore.Consistency{Kind: kvstore.ASP}})
	task.Output, task.Kind = out, "test"
	if _, err := l.SubmitAndWait(context.Background(), task, nil); err != nil {
		t.Fatal(err)
	}
	m := readModel(t, out)
	w, ok := m.Table("w")
	if !ok || !w.Dense || len(w.Vals) != size {
		t.Fatalf("table w: found %v, dense %v, %d values", ok, ok && w.Dense, len(w.Vals))
	}
	for k, v := range w.Vals {
		if v != float64(k)/4 {
			t.Fatalf("key %d = %v, want %v", k, v, float64(k)/4)
		}
	}
	s, ok := m.Table("s")
	if !ok || s.Dense {
		t.Fatalf("table s: found %v, want it keyed", ok)
	}
	if !slices.Equal(s.Keys, []uint64{3, 99, 1 << 35, 1<<36 - 1}) || !slices.Equal(s.Vals, []float64{2, 4, 1, 3}) {
		t.Fatalf("table s: keys %v vals %v", s.Keys, s.Vals)
	}
}

// When the output cannot be written after training succeeded, the task
// fails naming the output, and the model is kept in a file it names.
func TestOutputFailureKeepsTheModel(t *testing.T) {
	l := startLocal(t, 2, 2)
	dir := t.TempDir()
	blocker := filepath.Join(dir, "out")
	out := filepath.Join(blocker, "model.bin") // writable at submit; its parent becomes a file during training
	task := tasks.NewTask("lost").
		AddTable(kvstore.TableSpec{Name: "w", Size: 1000, Partition: kvstore.HashPartition}).
		AddTable(kvstore.TableSpec{Name: "s", Size: 1 << 36, Storage: kvstore.Sparse, Partition: kvstore.HashPartition}).
		SetStages(tasks.Stage{Name: "fill", Func: "test.keys", Workers: 2, Consistency: kvstore.Consistency{Kind: kvstore.ASP},
			Params: tasks.Params{"break_output": blocker}})
	task.Output, task.Kind = out, "test"
	_, err := l.SubmitAndWait(context.Background(), task, nil)
	if err == nil || !strings.Contains(err.Error(), out) {
		t.Fatalf("err = %v, want one naming the output %s", err, out)
	}
	_, saved, ok := strings.Cut(err.Error(), "saved on the master at ")
	if !ok {
		t.Fatalf("err = %v, want the path of the kept model", err)
	}
	saved, _, _ = strings.Cut(saved, " instead")
	t.Cleanup(func() { os.Remove(saved) })
	m := readModel(t, saved)
	w, ok := m.Table("w")
	if !ok || len(w.Vals) != 1000 || w.Vals[999] != 999.0/4 {
		t.Fatalf("kept model: table w found %v", ok)
	}
}
