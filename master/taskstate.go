package master

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/flexps/flexps/checkpoint"
	"github.com/flexps/flexps/tasks"
)

// taskRecord is what the master keeps on disk about a task with a
// checkpoint dir while it is queued or running: enough for a restarted
// master to resume it (Config.StateDir). A task that ends, whatever its
// state, has its record removed; a master that dies or shuts down leaves
// its running tasks' records behind, and resumes them when it starts.
type taskRecord struct {
	Task      tasks.MultiStageTask `json:"task"`
	Submitted time.Time            `json:"submitted"`
	// Resumed is the checkpoint the task was resumed from ("": it was
	// submitted from its job): only such a task goes on from checkpoints
	// of another task id in its dir.
	Resumed string `json:"resumed,omitempty"`
}

func (m *Master) recordPath(id string) string {
	return filepath.Join(m.cfg.StateDir, "tasks", id+".json")
}

// persist records the task (nothing without a state dir or checkpoints).
func (t *taskRun) persist() error {
	m := t.m
	if m.cfg.StateDir == "" || t.ckpt == nil {
		return nil
	}
	data, err := json.Marshal(taskRecord{Task: *t.spec, Submitted: t.status.Submitted, Resumed: t.status.Resumed})
	if err != nil {
		return err
	}
	return writeFileAtomic(m.recordPath(t.spec.ID), data)
}

// unpersist removes the task's record.
func (t *taskRun) unpersist() {
	m := t.m
	if m.cfg.StateDir == "" || t.ckpt == nil {
		return
	}
	if err := os.Remove(m.recordPath(t.spec.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn().Err(err).Str("task", t.spec.ID).Msg("task record not removed")
	}
}

// writeFileAtomic writes data to path through a temporary file that is
// fsynced and renamed into place.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// readRecords reads the task records in the state dir, oldest submission
// first; unreadable ones are returned as errors naming the file.
func (m *Master) readRecords() ([]taskRecord, []error) {
	dir := filepath.Join(m.cfg.StateDir, "tasks")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{err}
	}
	var recs []taskRecord
	var errs []error
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(p)
		var r taskRecord
		if err == nil {
			err = json.Unmarshal(data, &r)
		}
		if err == nil && (r.Task.ID+".json" != e.Name() || !r.Task.Checkpoint.Enabled()) {
			err = errors.New("not a task record of this master")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("task record %s: %w", p, err))
			continue
		}
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Submitted.Before(recs[j].Submitted) })
	return recs, errs
}

// recoverTasks resumes the tasks a previous master left running, each
// from the newest valid checkpoint in its dir (from the start when it
// had none yet), under its old id so followers find it again. It first
// waits DeadAfter so the slaves, which rejoin on their next heartbeat,
// are back. The checkpoints of an earlier task in the dir of a task
// submitted from its job are not its own: it starts from the beginning
// (it was resumed from them, an earlier task's spec and progress under
// its id: from the final checkpoint of a finished task, "done" at once
// with that task's model and none of its own).
func (m *Master) recoverTasks() {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		m.recovering = false
		m.mu.Unlock()
	}()
	recs, errs := m.readRecords()
	for _, err := range errs {
		m.log.Error().Err(err).Msg("task record not resumed")
	}
	if len(recs) == 0 {
		return
	}
	m.log.Info().Int("tasks", len(recs)).Dur("after", m.cfg.DeadAfter).Msg("resuming the tasks the previous master ran")
	select {
	case <-m.ctx.Done():
		return
	case <-time.After(m.cfg.DeadAfter):
	}
	for _, r := range recs {
		id, dir := r.Task.ID, r.Task.Checkpoint.Dir
		if r.Task.Output != "" {
			// The previous master may have died writing the model: its
			// temporary file would stay beside the output for ever.
			removed, err := m.sources.RemoveStaleTemps(m.ctx, r.Task.Output)
			for _, p := range removed {
				m.log.Info().Str("task", id).Str("path", p).Msg("removed the temporary output file of the previous master")
			}
			if err != nil {
				m.log.Warn().Err(err).Str("task", id).Msg("temporary output files of the previous master not removed")
			}
		}
		paths, err := checkpoint.List(m.ctx, m.sources, dir)
		fresh := err == nil
		if err == nil && len(checkpoint.Newest(paths)) > 0 {
			ck, path, warnings, lerr := m.resumeFrom(m.ctx, dir)
			for _, w := range warnings {
				m.log.Warn().Str("task", id).Msg(w)
			}
			err = lerr
			fresh = err == nil && ck.Task.ID != id && r.Resumed == ""
			if err == nil && ck.Task.ID != id && r.Resumed != "" && r.Resumed != path {
				// A resumed task that wrote no checkpoint of its own yet
				// goes on from the one it was resumed from, which need not
				// be the newest in the dir (flexps run --resume DIR/ckpt-N).
				ck, path, _, err = m.resumeFrom(m.ctx, r.Resumed)
			}
			if err == nil && !fresh {
				_, err = m.resumeLoaded(m.ctx, ck, path, dir, id)
			} else if fresh {
				m.log.Info().Str("task", id).Str("checkpoint", path).Str("of", ck.Task.ID).
					Msg("the checkpoints in the task's dir are an earlier task's and it wrote none yet: it starts from the beginning")
			}
		}
		if fresh {
			spec := r.Task
			_, err = m.Submit(m.ctx, &spec)
		}
		if err != nil {
			m.log.Error().Err(err).Str("task", id).Str("record", m.recordPath(id)).Msg("task of the previous master not resumed; its record is removed")
			if rerr := os.Remove(m.recordPath(id)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				m.log.Warn().Err(rerr).Str("task", id).Msg("task record not removed")
			}
			continue
		}
		m.log.Info().Str("task", id).Str("checkpoints", dir).Msg("task of the previous master resumed")
	}
}
