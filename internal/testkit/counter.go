package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// AckedCounter is the stage of the failover drill's exact-sum check: every
// worker reads its share of input "train" for params.epochs passes; after
// every params.batch records it Adds the batch's record count to key 0 of
// table params.table ("counter") and waits for the acknowledgement
// (Flush), then appends the running total of its acknowledged Adds as a
// line to <params.log_dir>/<rank>-<pid>.acked (written before the next
// Add, so a kill -9 cannot lose a line whose Add was acknowledged). A test
// kills a slave mid-stage and checks that the table holds at least the sum
// of every file's last line, and at most that plus one batch per killed
// worker (its Add in flight may or may not have been applied).
const AckedCounter = "testkit.acked_counter"

func init() { tasks.Register(AckedCounter, ackedCounter) }

func ackedCounter(info *tasks.Info) error {
	t, err := info.Table(info.Params.String("table", "counter"))
	if err != nil {
		return err
	}
	in, err := info.Input("train")
	if err != nil {
		return err
	}
	dir := info.Params.String("log_dir", "")
	if dir == "" {
		return fmt.Errorf("%s: params.log_dir is required", AckedCounter)
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d-%d.acked", info.Rank, os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	batch := info.Params.Int("batch", 20)
	epochs := info.Params.Int("epochs", 1)
	acked := 0.0
	add := func(n int) error {
		if n == 0 {
			return nil
		}
		if err := t.Add([]uint64{0}, []float64{float64(n)}); err != nil {
			return err
		}
		if err := t.Flush(); err != nil {
			return err
		}
		acked += float64(n)
		if _, err := f.WriteString(strconv.FormatFloat(acked, 'f', -1, 64) + "\n"); err != nil {
			return err
		}
		info.Report(int64(n), 0)
		return info.Clock()
	}
	for e := 1; e <= epochs; e++ {
		err := tasks.EachBatch(info.Ctx, in, batch, func(_ *datastore.Records, lo, hi int) error {
			return add(hi - lo)
		})
		if err != nil {
			return fmt.Errorf("%s epoch %d: %w", AckedCounter, e, err)
		}
		info.ReportEpoch(e, map[string]float64{tasks.MetricSamples: acked})
	}
	return nil
}
