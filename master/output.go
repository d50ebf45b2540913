package master

import (
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/flexps/flexps/tasks"
)

// maxModelVals bounds the values of one table the master gathers into a
// model file.
const maxModelVals = 1 << 28

// writeOutput reads every table from its shards and writes the model to
// the task's output path (local or hdfs://), atomically. Each shard is
// read in bulk by its own key set, a page at a time (kvstore's Scan), so
// a table of any partitioning and size reaches the file without flooding
// the master's inbox.
func (t *taskRun) writeOutput() error {
	if t.spec.Output == "" || len(t.spec.Tables) == 0 {
		return nil
	}
	m := t.m
	c, err := kvstore.NewClient(kvstore.ClientConfig{
		Transport: transport.NewNATS(m.nc, m.subj.SlaveKV), Task: t.spec.ID, Stage: -1, Worker: -1,
		Hosts: t.hosts, Consistency: kvstore.Consistency{Kind: kvstore.ASP}, Timeout: m.cfg.KVTimeout, Ctx: t.ctx,
	})
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	defer c.Close()
	model := &tasks.Model{Kind: t.spec.Kind, Task: t.spec.ID, Name: t.spec.Name, Meta: t.spec.Meta}
	for _, p := range t.placements() {
		tc, err := c.Table(p)
		if err != nil {
			return fmt.Errorf("output: table %q: %w", p.Spec.Name, err)
		}
		keys, vals, err := tc.ReadAll(maxModelVals)
		if err != nil {
			return fmt.Errorf("output %s: %w", t.spec.Output, err)
		}
		model.Tables = append(model.Tables, tasks.ModelTable{Spec: tc.Spec(), Keys: keys, Vals: vals})
	}
	w, err := m.sources.Create(t.ctx, t.spec.Output)
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	if _, err := model.WriteTo(w); err != nil {
		datastore.Abort(w)
		return fmt.Errorf("output %s: %w", t.spec.Output, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	m.log.Info().Str("task", t.spec.ID).Str("path", t.spec.Output).Msg("model written")
	return nil
}
