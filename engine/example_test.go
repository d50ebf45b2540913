package engine_test

import (
	"context"
	"fmt"
	"log"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// sumRanks is a stage function: every worker adds its rank+1 to key 0 of
// table "sum", waits at a barrier until every worker's Add is applied, then
// reads the total and reports it as an epoch metric (the master sums epoch
// metrics over workers, so each worker reports its share of the mean).
func sumRanks(info *tasks.Info) error {
	t, err := info.Table("sum")
	if err != nil {
		return err
	}
	if err := t.Add([]uint64{0}, []float64{float64(info.Rank + 1)}); err != nil {
		return err
	}
	if err := info.Barrier(); err != nil {
		return err
	}
	total := make([]float64, 1)
	if err := t.Get([]uint64{0}, total); err != nil {
		return err
	}
	info.ReportEpoch(1, map[string]float64{"total": total[0] / float64(info.Workers)})
	return nil
}

func init() { tasks.Register("example.sum", sumRanks) }

// An in-process cluster of two slaves runs a one-stage task of four
// workers; the stage's epoch metrics come back in the task's results.
func ExampleStartLocal() {
	ctx := context.Background()
	l, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	task := tasks.NewTask("sum").
		AddTable(kvstore.TableSpec{Name: "sum", Size: 1}).
		SetStages(tasks.Stage{Func: "example.sum", Workers: 4})
	st, err := l.SubmitAndWait(ctx, task, nil)
	if err != nil {
		log.Fatal(err)
	}
	ep := st.Results[0].Epochs[0]
	fmt.Printf("%s: %d workers, total %.0f\n", st.State, ep.Workers, ep.Metrics["total"])
	// Output: done: 4 workers, total 10
}
