package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
)

// TestCheckpointLogCountsTheReadOfDenseTables: the master writes a dense
// table to a checkpoint as it reads it, a window at a time; the
// "checkpoint written" log line still reports that reading as
// read_seconds, not as writing (it said read_seconds=0.00007 and folded
// the read into write_seconds and write_mb_per_sec once the dense tables
// were no longer gathered before the write).
func TestCheckpointLogCountsTheReadOfDenseTables(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	// 500k keys (the data's features are below 300): reading the table
	// and its scales from the shards takes far longer than 10ms.
	job := ckJob(t, dir, "cklog", train, test, filepath.Join(dir, "m.model"), 2, "1 epoch", filepath.Join(dir, "ck"))
	b, err := os.ReadFile(job)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Replace(string(b), "size = 500\n", "size = 500000\n", 1)
	if big == string(b) {
		t.Fatalf("%s: no table size to grow", job)
	}
	if err := os.WriteFile(job, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	command, env := cli()
	r := clustertest.RunCLI(t, command, env, 3*time.Minute, "run", "--log-level", "info", "--log-format", "json", job)
	if r.Exit != 0 {
		t.Fatalf("flexps run failed (%d):\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	n := 0
	for _, line := range strings.Split(r.Stdout+"\n"+r.Stderr, "\n") {
		if !strings.Contains(line, `"checkpoint written"`) {
			continue
		}
		var l struct {
			Read  float64 `json:"read_seconds"`
			Write float64 `json:"write_seconds"`
			Stall float64 `json:"stall_seconds"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		n++
		t.Logf("checkpoint read %.3fs, write %.3fs, stall %.3fs", l.Read, l.Write, l.Stall)
		if l.Read < 0.01 {
			t.Errorf("read_seconds %.6f for a 500k-key dense table: its windowed read is not counted: %s", l.Read, line)
		}
		if l.Read+l.Write > l.Stall+0.001 {
			t.Errorf("read_seconds + write_seconds > stall_seconds (counted twice): %s", line)
		}
	}
	if n == 0 {
		t.Fatalf("no \"checkpoint written\" log line:\n%s", r.Stderr)
	}
}
