// Package testkit registers stage functions that tests of several packages
// share. Importing it (blank import in a test file) registers them in the
// test binary; tests that start real slave processes re-execute that
// binary, so the slaves know them too.
package testkit

import (
	"errors"
	"io"
	"time"

	"github.com/flexps/flexps/tasks"
)

// Stage function names.
const (
	// Count reads its share of input "train" for params.epochs passes and
	// reports per epoch the records it saw (Records, and tasks.MetricSamples)
	// and the sum of their labels (LabelSum). Rank 0 also reports its own
	// count as StragglerRecords and sleeps params.sleep_ms after every batch,
	// so it is the slow worker.
	Count = "testkit.count"
)

// Metric names Count reports besides tasks.MetricSamples.
const (
	Records          = "records"
	LabelSum         = "label_sum"
	StragglerRecords = "straggler_records"
)

func init() {
	tasks.Register(Count, count)
}

func count(info *tasks.Info) error {
	in, err := info.Input("train")
	if err != nil {
		return err
	}
	sleep := time.Duration(info.Params.Int("sleep_ms", 0)) * time.Millisecond
	for epoch := 1; epoch <= info.Params.Int("epochs", 1); epoch++ {
		pass, err := in.Pass(info.Ctx)
		if err != nil {
			return err
		}
		var n, sum float64
		for {
			r, err := pass.Next(info.Ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				pass.Close()
				return err
			}
			for i := 0; i < r.Len(); i++ {
				n++
				sum += r.Labels[i]
			}
			info.Report(int64(r.Len()), 0)
			if sleep > 0 && info.Rank == 0 {
				select {
				case <-time.After(sleep):
				case <-info.Ctx.Done():
					pass.Close()
					return info.Ctx.Err()
				}
			}
		}
		pass.Close()
		m := map[string]float64{tasks.MetricSamples: n, Records: n, LabelSum: sum}
		if info.Rank == 0 {
			m[StragglerRecords] = n
		}
		info.ReportEpoch(epoch, m)
	}
	return nil
}
