package master

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// maxModelVals bounds the values of one table the master gathers into a
// model file.
const maxModelVals = tasks.MaxModelValues

// writeOutput reads every table from its shards and writes the model to
// the task's output path (local or hdfs://), atomically. A dense table
// goes to the file as it is read, a window of keys at a time in key order
// (GetRange), so the master never holds it whole; a sparse one is read in
// bulk by each shard's own key set, a page at a time (kvstore's Scan),
// then written. Either way a table of any partitioning and size reaches
// the file without flooding the master's inbox.
func (t *taskRun) writeOutput() error {
	if t.spec.Output == "" || len(t.spec.Tables) == 0 {
		return nil
	}
	if t.ctx.Err() != nil {
		// Stopped before its output (a slave it cannot lose died while
		// its final checkpoint was written): no read would succeed.
		return t.outputStopped()
	}
	m := t.m
	c, err := t.kvClient()
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	defer c.Close()
	tables, err := t.readTables(c, nil)
	if err != nil {
		return fmt.Errorf("output %s: %w", t.spec.Output, err)
	}
	model := &tasks.Model{Kind: t.spec.Kind, Task: t.spec.ID, Name: t.spec.Name, Meta: tasks.ModelMeta(t.spec), Tables: tables}
	if err := t.saveModel(model); err != nil {
		if t.stoppedBy(err) {
			// The task was stopped while the model was written: the
			// failed read ("context canceled") is not why, and no
			// fallback copy could be read either.
			return t.outputStopped()
		}
		if re := (*readError)(nil); errors.As(err, &re) {
			// The shards could not be read: no copy would fare better.
			return err
		}
		// Training succeeded and the shards are about to be dropped: keep
		// the model on the master rather than lose it.
		saved, ferr := saveFallback(model, t.spec.ID)
		if ferr != nil {
			return fmt.Errorf("%w (no fallback copy either: %v)", err, ferr)
		}
		m.log.Error().Err(err).Str("task", t.spec.ID).Str("saved", saved).Msg("model not written to the output; saved on the master instead")
		return fmt.Errorf("%w; the trained model was saved on the master at %s instead", err, saved)
	}
	m.log.Info().Str("task", t.spec.ID).Str("path", t.spec.Output).Msg("model written")
	return nil
}

// outputStopped is the error of a task whose output was not written
// because the task was stopped: why it was (t.cause: "slave s2 died ...;
// table w has replicas = 1 ...", a cancel), not the read it cut short.
func (t *taskRun) outputStopped() error {
	return fmt.Errorf("%w (the output %s was not written)", t.cause(), t.spec.Output)
}

// stoppedBy reports whether the failed write of the output (err) was cut
// short by the task's stop. A shard host's death marks it dead in the
// routes of the master's KV clients (a read then fails naming it) a moment
// before it cancels the task when the task cannot go on without it: such
// a failure waits a second for that cancel.
func (t *taskRun) stoppedBy(err error) bool {
	if t.ctx.Err() != nil {
		return true
	}
	if lost := (*kvstore.SlaveLostError)(nil); !errors.As(err, &lost) {
		return false
	}
	select {
	case <-t.ctx.Done():
		return true
	case <-time.After(time.Second):
		return false
	}
}

// saveModel writes the model to the task's output path, atomically,
// starting again when the write may succeed then (datastore.RetryWrite).
func (t *taskRun) saveModel(model *tasks.Model) error {
	for attempt := 1; ; attempt++ {
		err := t.saveModelOnce(model)
		wait, again := datastore.RetryWrite(err, attempt)
		if !again {
			return err
		}
		t.m.log.Warn().Err(err).Str("task", t.spec.ID).Int("attempt", attempt).Msg("writing the model again")
		select {
		case <-time.After(wait):
		case <-t.ctx.Done():
			return err
		}
	}
}

func (t *taskRun) saveModelOnce(model *tasks.Model) error {
	w, err := t.m.sources.Create(t.ctx, t.spec.Output)
	if err != nil {
		return fmt.Errorf("output %s: %w", t.spec.Output, err)
	}
	if _, err := model.WriteTo(w); err != nil {
		datastore.Abort(w)
		return fmt.Errorf("output %s: %w", t.spec.Output, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("output %s: %w", t.spec.Output, err)
	}
	return nil
}

// readError is a failed read of a table's shards while its values
// streamed to the output.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// saveFallback writes the model to a new file in the master's temporary
// directory and returns its path.
func saveFallback(model *tasks.Model, task string) (string, error) {
	f, err := os.CreateTemp("", "flexps-"+task+"-*.model")
	if err != nil {
		return "", err
	}
	if _, err := model.WriteTo(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
