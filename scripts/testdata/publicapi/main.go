// Command publicapi names, from outside the flexps module, every type the
// README's Go API section tells a user to write: scripts/check-public-api.sh
// builds it in a separate module, so an API whose callback or result type
// lives in internal/ fails the check (it is compiled, never run).
package main

import (
	"context"
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.Register("publicapi.stage", stage)
	// A function that moves keys declares its tables (TableSpec.Relocate).
	tasks.RegisterRelocates("publicapi.stage", func(s tasks.Stage) []string { return []string{s.Params.String("table", "w")} })
}

func stage(info *tasks.Info) error {
	w, err := info.Table("w")
	if err != nil {
		return err
	}
	in, err := info.Input("train")
	if err != nil {
		return err
	}
	_, _ = info.Share()
	tc, ok := w.(*kvstore.TableClient)
	err = tasks.EachBatchAhead(info.Ctx, in, 100, func(cur, next tasks.Batch) error {
		keys := cur.R.Keys[cur.R.Offsets[cur.Lo]:cur.R.Offsets[cur.Hi]]
		var p kvstore.Pending
		if ok && next.R != nil {
			nk := next.R.Keys[next.R.Offsets[next.Lo]:next.R.Offsets[next.Hi]]
			if p, err = tc.GetNext(nk, make([]float64, len(nk))); err != nil {
				return err
			}
			if err := tc.AddFloat32(keys, make([]float32, len(keys))); err != nil {
				return err
			}
			if err := tc.GetFloat32(keys, make([]float32, len(keys))); err != nil {
				return err
			}
		}
		info.Report(int64(cur.Hi-cur.Lo), 0)
		if err := info.Clock(); err != nil {
			return err
		}
		if p != nil {
			return p.Wait()
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = tasks.EachRecords(info.Ctx, in, func(r *datastore.Records) error {
		return w.Add(r.Keys, make([]float64, len(r.Keys)))
	})
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := info.Barrier(); err != nil {
		return err
	}
	info.ReportEpoch(1, map[string]float64{tasks.MetricLossSum: 0, tasks.MetricTestCorrect: 0})
	return nil
}

func main() {
	ctx := context.Background()
	c, err := engine.Dial(engine.ClusterConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	stop, err := c.WatchMembership(func(m engine.Membership) { fmt.Println(m.Epoch, len(m.Members)) })
	if err == nil {
		defer stop()
	}
	task := tasks.NewTask("publicapi").AddTable(kvstore.TableSpec{Name: "w", Size: 10, Relocate: true}).
		SetStages(tasks.Stage{Name: "s", Func: "publicapi.stage", Workers: 1})
	id, err := c.Submit(ctx, task)
	if err != nil {
		return
	}
	var st status.Task
	st, _ = c.Follow(ctx, id, func(e status.Event) { _ = e.Status.Progress })
	_ = st.State == status.Done
	page, _ := c.StatusPage(ctx, 10, "")
	_ = page.Omitted
	_ = c.Cancel(ctx, id)
}
