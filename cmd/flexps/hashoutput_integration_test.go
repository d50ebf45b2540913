package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/tasks"
)

// A hash-partitioned table of 200k keys with an output path, trained on a
// cluster of separate processes: the model is written whole. It used to
// fail at the end with "kvstore: reply inbox: nats: slow consumer,
// messages dropped" after hundreds of "no shards on this slave" warnings,
// and the trained model was lost.
func TestClusterWritesLargeHashPartitionedModel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const dim = 200_000
	dir := t.TempDir()
	train, test := lrData(t, dir, 6000, dim)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2})
	model := filepath.Join(dir, "hash.model")
	job := filepath.Join(dir, "hash.toml")
	err := os.WriteFile(job, []byte(fmt.Sprintf(`name = "hash"
kind = "lr"
output = %q
[[table]]
name = "w"
size = %d
partition = "hash"
[input.train]
path = %q
[input.test]
path = %q
[[stage]]
name = "sgd"
func = "lr.sgd"
workers = 4
consistency = "ssp"
staleness = 1
[stage.params]
epochs = 1
batch = 50
lr = 0.5
`, model, dim, train, test)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Run(3*time.Minute, "submit", job)
	if r.Exit != 0 {
		t.Fatalf("flexps submit failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	m, err := tasks.LoadModel(model)
	if err != nil {
		t.Fatal(err)
	}
	w, ok := m.Table("w")
	if !ok || len(w.DenseValues()) != dim {
		t.Fatalf("model table w: found %v, want %d values", ok, dim)
	}
	nonzero := 0
	for _, v := range w.DenseValues() {
		if v != 0 {
			nonzero++
		}
	}
	if nonzero == 0 {
		t.Fatal("the written model is all zeros: training did not reach the file")
	}
	if acc := accuracy(t, model, test); acc < 0.6 {
		t.Fatalf("accuracy of the written model %.3f", acc)
	}
}
