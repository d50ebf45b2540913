package engine_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

func init() {
	// test.partial_barrier: rank 0 takes one record of its pass and, the
	// pass still open (its block unfinished), waits at a Barrier; the
	// others read their passes to the end first, then meet it there.
	tasks.Register("test.partial_barrier", func(info *tasks.Info) error {
		in, err := info.Input("train")
		if err != nil {
			return err
		}
		pass, err := in.Pass(info.Ctx)
		if err != nil {
			return err
		}
		defer pass.Close()
		for {
			_, err := pass.Next(info.Ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if info.Rank == 0 {
				break
			}
		}
		if err := info.Barrier(); err != nil {
			return err
		}
		info.ReportEpoch(1, map[string]float64{"samples": 1})
		return nil
	})
}

// TestEpochEndDoesNotWaitForAWorkerAtABarrier: the master tells a worker
// an epoch is over only once every block of it is finished, but not
// counting the blocks of workers waiting at a barrier, which finish
// nothing before the others arrive. Before, the others waited for rank
// 0's block while rank 0 waited for them at the barrier, for good.
func TestEpochEndDoesNotWaitForAWorkerAtABarrier(t *testing.T) {
	l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 2, Slots: 3, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir, _ := writeUneven(t)
	for _, c := range []struct {
		name     string
		kind     string
		replicas int
	}{
		{"ps", tasks.KindPS, 1},
		{"ps-replicated", tasks.KindPS, 2},
		{"local", tasks.KindLocal, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			task := tasks.NewTask("partial-"+c.name).
				AddTable(kvstore.TableSpec{Name: "t", Size: 8, Replicas: c.replicas}).
				SetInput("train", tasks.InputSpec{Path: dir}).
				SetStages(tasks.Stage{Name: "s", Func: "test.partial_barrier", Workers: 3, WorkerKind: c.kind,
					Consistency: kvstore.Consistency{Kind: kvstore.BSP}})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := l.SubmitAndWait(ctx, task, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
