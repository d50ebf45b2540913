package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flexps/flexps/checkpoint"
	"github.com/flexps/flexps/datastore"
)

// A sparse (hashed) table of 2^40 keys goes to checkpoints and the output
// as the keys it holds, streamed from its shards (the master used to
// gather it whole), and a task resumed from a mid-run checkpoint trains
// on to the model of the run that was not interrupted (one worker, BSP:
// deterministic).
func TestSparseTableCheckpointResume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	ckdir, output := filepath.Join(dir, "ck"), filepath.Join(dir, "m.model")
	job := filepath.Join(dir, "sparse.toml")
	if err := os.WriteFile(job, []byte(fmt.Sprintf(`name = "sparse"
kind = "lr"
output = %q
[[table]]
name = "w"
size = 1099511627776
storage = "sparse"
partition = "hash"
[input.train]
path = %q
[checkpoint]
every = "1 epoch"
dir = %q
keep = 5
[[stage]]
name = "sgd"
func = "lr.sgd"
workers = 1
consistency = "bsp"
[stage.params]
epochs = 3
batch = 50
intercept = false
`, output, train, ckdir)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runFlexps(t, "run", job, "--log-level", "error"); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	whole := accuracy(t, output, test)
	t.Logf("accuracy %.4f", whole)
	if whole < 0.7 {
		t.Fatalf("accuracy %.4f of the uninterrupted run", whole)
	}
	// The first checkpoint holds the keys the data has, sorted once read.
	first, err := checkpoint.Load(context.Background(), datastore.NewSources(), filepath.Join(ckdir, checkpoint.Name(1)))
	if err != nil {
		t.Fatal(err)
	}
	mt := first.Tables[0]
	t.Logf("checkpoint 1: %d keys", len(mt.Keys))
	if mt.Spec.Name != "w" || mt.Dense || len(mt.Keys) == 0 || len(mt.Keys) > 300 || !slices.IsSorted(mt.Keys) || len(mt.Vals) != len(mt.Keys) {
		t.Fatalf("checkpoint 1's table: %s dense %v, %d keys, %d values", mt.Spec.Name, mt.Dense, len(mt.Keys), len(mt.Vals))
	}
	// Resume from it alone: epochs 2 and 3 again.
	later, err := filepath.Glob(filepath.Join(ckdir, "ckpt-*"))
	if err != nil || len(later) < 2 {
		t.Fatalf("checkpoints %v (%v)", later, err)
	}
	for _, p := range later {
		if filepath.Base(p) != checkpoint.Name(1) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Remove(output); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runFlexps(t, "run", "--resume", ckdir, "--log-level", "error"); code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	if resumed := accuracy(t, output, test); resumed != whole {
		t.Fatalf("accuracy %.4f resumed from checkpoint 1, %.4f uninterrupted", resumed, whole)
	}
}
