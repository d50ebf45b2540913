package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/tasks"
)

func init() {
	// test.lag: every iteration a worker reads everyone's iteration count
	// (table "clk", key = rank), measures how far it is ahead of the
	// slowest count it sees, adds 1 to its own count and clocks. Rank 1
	// sleeps each iteration. The slaves are this test binary re-executed,
	// so they have this function too.
	tasks.Register("test.lag", func(info *tasks.Info) error {
		clk, err := info.Table("clk")
		if err != nil {
			return err
		}
		n := info.Workers
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = uint64(i)
		}
		counts := make([]float64, n)
		one := []float64{1}
		lead := 0.0
		sleep := time.Duration(info.Params.Int("sleep_ms", 20)) * time.Millisecond
		for it := 0; it < info.Params.Int("iters", 30); it++ {
			if err := clk.Get(keys, counts); err != nil {
				return err
			}
			for _, c := range counts {
				lead = max(lead, float64(it)-c)
			}
			if info.Rank == 1 {
				time.Sleep(sleep)
			}
			if err := clk.Add([]uint64{uint64(info.Rank)}, one); err != nil {
				return err
			}
			if err := info.Clock(); err != nil {
				return err
			}
		}
		info.ReportEpoch(1, map[string]float64{fmt.Sprintf("max_lead_%d", info.Rank): lead})
		return nil
	})
}

func TestSSPHoldsBackFastWorkerAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 1})
	dir := t.TempDir()
	cases := []struct {
		consistency string
		staleness   int
		maxLead     float64 // the fast worker's lead must stay <= this
		minLead     float64 // ... and reach at least this
	}{
		{"ssp", 2, 2, 0},
		{"bsp", 0, 0, 0},
		{"ssp", 5, 5, 0},
		{"asp", 0, 1e9, 10},
		// Every read touches both keys, so they always conflict: SparseSSP
		// may not use its speculation and must hold the bound s.
		{"sparse_ssp", 1, 1, 0},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s-%d", tc.consistency, tc.staleness), func(t *testing.T) {
			job := fmt.Sprintf(`name = "lag"
[[table]]
name = "clk"
size = 2
[[stage]]
name = "lag"
func = "test.lag"
workers = 2
max_slaves = 2
consistency = %q
%s
[stage.params]
iters = 30
sleep_ms = 20
`, tc.consistency, extra(tc.consistency, tc.staleness))
			path := filepath.Join(dir, tc.consistency+".toml")
			os.WriteFile(path, []byte(job), 0o644)
			cl := c.Client()
			_, task, err := tasks.LoadJob(path)
			if err != nil {
				t.Fatal(err)
			}
			st, err := cl.SubmitAndWait(context.Background(), task, nil)
			if err != nil {
				t.Fatal(err)
			}
			res := st.Results[0]
			if len(res.Placement) != 2 {
				t.Fatalf("want one worker per slave process, got %v", res.Placement)
			}
			fast := res.Epochs[0].Metrics["max_lead_0"]
			t.Logf("%s(%d): fast worker's max lead over the slow one: %v", tc.consistency, tc.staleness, fast)
			if fast > tc.maxLead {
				t.Fatalf("fast worker ran %v iterations ahead, bound %v", fast, tc.maxLead)
			}
			if fast < tc.minLead {
				t.Fatalf("fast worker only %v ahead under %s: it was held back", fast, tc.consistency)
			}
		})
	}
}

func extra(consistency string, staleness int) string {
	switch consistency {
	case "ssp":
		return fmt.Sprintf("staleness = %d", staleness)
	case "sparse_ssp":
		return fmt.Sprintf("staleness = %d\nspeculation = 3", staleness)
	}
	return ""
}
