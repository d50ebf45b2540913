package master

import (
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/flexps/flexps/tasks"
)

// dumpChunk is how many keys one dump read asks for.
const dumpChunk = 1 << 18

// maxDenseDump bounds the values read from a sparse table by key range.
const maxDenseDump = 1 << 28

// writeOutput reads every table from its shards and writes the model to
// the task's output path (local or hdfs://), atomically.
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
		return err
	}
	defer c.Close()
	model := &tasks.Model{Kind: t.spec.Kind, Task: t.spec.ID, Name: t.spec.Name, Meta: t.spec.Meta}
	for _, p := range t.placements() {
		tc, err := c.Table(p)
		if err != nil {
			return err
		}
		spec := tc.Spec()
		total := spec.Size * uint64(spec.Width)
		if total > maxDenseDump {
			return fmt.Errorf("output: table %q has %d values, more than the %d a model file holds", spec.Name, total, maxDenseDump)
		}
		vals := make([]float64, total)
		for first := uint64(0); first < spec.Size; first += dumpChunk {
			n := int(min(dumpChunk, spec.Size-first))
			w := spec.Width
			if err := tc.GetRange(first, n, vals[int(first)*w:(int(first)+n)*w]); err != nil {
				return fmt.Errorf("output: reading table %q: %w", spec.Name, err)
			}
		}
		model.Tables = append(model.Tables, tasks.ModelTable{Spec: spec, Vals: vals})
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
