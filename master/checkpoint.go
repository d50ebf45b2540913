package master

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/flexps/flexps/checkpoint"
	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
)

// errStopped is why a task ends after the final checkpoint a user asked
// for (Ctrl-C in flexps run); it is a cancellation.
var errStopped = fmt.Errorf("%w after writing a checkpoint", errCancelled)

// checkpointer is a task's checkpoint schedule and state. Checkpoints are
// taken at consistent points only: the end of an epoch of a ps stage
// (every worker waits at its epoch barrier, all Adds applied) and between
// stages; the tables are read with the paged shard scan of the output
// writer and written by package checkpoint.
type checkpointer struct {
	dir   string
	keep  int
	sched checkpoint.Schedule
	// lineage are the tasks whose checkpoints this one continues (it was
	// resumed from them): their files in dir are pruned with its own,
	// any other task's are left (checkpoint.Record.Lineage).
	lineage []string
	// lock is dir's, held from submission until the task ends (nil: not
	// a local dir).
	lock *checkpoint.DirLock

	mu          sync.Mutex
	last        time.Time // last checkpoint, or the task's start
	epochsSince int       // epochs finished since then
	stop        bool      // checkpoint at the next consistent point, then stop
	path        string    // newest checkpoint written
	writing     sync.Mutex
}

func newCheckpointer(spec tasks.Checkpoint, now time.Time) (*checkpointer, error) {
	if !spec.Enabled() {
		return nil, nil
	}
	epochs, period, err := spec.Schedule()
	if err != nil {
		return nil, err
	}
	return &checkpointer{dir: spec.Dir, keep: spec.KeepOrDefault(), sched: checkpoint.Schedule{Epochs: epochs, Period: period}, last: now}, nil
}

// epochDone counts a finished epoch (or stage) and reports whether a
// checkpoint is due at this consistent point; stop reports a pending
// stop request.
func (c *checkpointer) epochDone(now time.Time) (due, stop bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epochsSince++
	return c.stop || c.sched.Due(c.epochsSince, now.Sub(c.last)), c.stop
}

func (c *checkpointer) written(path string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last, c.epochsSince, c.path = now, 0, path
}

// requestStop asks for a checkpoint at the next consistent point.
func (c *checkpointer) requestStop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stop = true
}

// epochBarriers reports whether stage st's workers stop at each epoch's
// end so the master can checkpoint there: ps stages of known length (a
// one-slave stage keeps its model in the slave's memory, which the shard
// scan cannot read mid-stage), never during auto trials.
func (t *taskRun) epochBarriers(st *tasks.Stage, trial time.Duration) bool {
	return t.ckpt != nil && st.WorkerKind == tasks.KindPS && trial == 0 && tasks.PlannedEpochs(st) > 0
}

// epochWaiter is a worker waiting at the barrier that ends its epoch; the
// lifecycle machine holds it as an opaque waiter.
type epochWaiter struct {
	msg          *nats.Msg
	stage, epoch int
}

// firstEpochWaiter reports whether a released barrier ends an epoch.
func firstEpochWaiter(ws []any) (epochWaiter, bool) {
	if len(ws) == 0 {
		return epochWaiter{}, false
	}
	e, ok := ws[0].(epochWaiter)
	return e, ok
}

// waiterMsg is the request message behind a barrier waiter.
func waiterMsg(w any) *nats.Msg {
	if e, ok := w.(epochWaiter); ok {
		return e.msg
	}
	return w.(*nats.Msg)
}

// epochEnd runs when every worker of stage k reached the end of epoch:
// it takes a checkpoint if one is due, then releases the workers. It runs
// on its own goroutine so the NATS handler that completed the barrier is
// not held while the tables are read.
func (t *taskRun) epochEnd(k int, st *tasks.Stage, epoch int, waiters []any, live []int) {
	reply := proto.CtlReply{OK: true, Live: live}
	// The last epoch counts, and is checkpointed, at the stage's end: the
	// stage may still change its tables after it (lr writes its weights
	// back to raw scale).
	due, stop := false, false
	if epoch < tasks.PlannedEpochs(st) {
		due, stop = t.ckpt.epochDone(t.m.cfg.Now())
	}
	if due {
		path, err := t.takeCheckpoint(checkpoint.Progress{Stage: k, Epoch: epoch}, st)
		switch {
		case err != nil && t.ctx.Err() != nil:
			// The task is ending anyway; its end says why.
		case err != nil && stop:
			reply = proto.CtlReply{Error: "the final checkpoint failed: " + err.Error()}
			defer t.cancel(t.finalFailed(err))
		case err != nil:
			t.m.log.Error().Err(err).Str("task", t.spec.ID).Int("stage", k).Int("epoch", epoch).Msg("checkpoint failed; training goes on")
		case stop:
			reply = proto.CtlReply{Error: fmt.Sprintf("task stopped after checkpoint %s", path)}
			defer t.cancel(fmt.Errorf("%w %s", errStopped, path))
		}
	}
	for _, w := range waiters {
		t.m.reply(waiterMsg(w), reply)
	}
}

// afterStage takes a checkpoint after stage k finished when one is due and
// the tables hold the whole model (not while a one-slave stage's model
// waits in a slave's memory for a direct transfer). It returns errStopped
// when a stop was requested and the checkpoint is written. After the last
// stage the checkpoint records the finished training (its last epoch is
// counted here, not at its epoch barrier), so that resuming the task from
// it only writes the output again instead of training its last epochs
// once more; the task then goes on to write its output, stop or not.
func (t *taskRun) afterStage(k int) error {
	if t.ckpt == nil || t.modelAt != "" {
		return nil
	}
	due, stop := t.ckpt.epochDone(t.m.cfg.Now())
	if !due {
		return nil
	}
	path, err := t.takeCheckpoint(checkpoint.Progress{Stage: k + 1}, nil)
	if k+1 == len(t.spec.Stages) {
		if err != nil && t.ctx.Err() == nil {
			t.m.log.Error().Err(err).Str("task", t.spec.ID).Int("stage", k).Msg("final checkpoint failed; writing the output")
		}
		return nil
	}
	if err != nil && stop {
		return t.finalFailed(err)
	}
	if err != nil {
		t.m.log.Error().Err(err).Str("task", t.spec.ID).Int("stage", k).Msg("checkpoint failed; training goes on")
		return nil
	}
	if stop {
		return fmt.Errorf("%w %s", errStopped, path)
	}
	return nil
}

// finalFailed is why a task stops whose final checkpoint failed.
func (t *taskRun) finalFailed(err error) error {
	t.ckpt.mu.Lock()
	last := t.ckpt.path
	t.ckpt.mu.Unlock()
	if last == "" {
		return fmt.Errorf("%w; the final checkpoint failed: %v", errCancelled, err)
	}
	return fmt.Errorf("%w; the final checkpoint failed (%v), the last good one is %s", errCancelled, err, last)
}

// takeCheckpoint reads every table and writes a checkpoint with progress
// p (the stage and epochs done; st is the running stage, nil between
// stages). It returns the file written.
func (t *taskRun) takeCheckpoint(p checkpoint.Progress, st *tasks.Stage) (string, error) {
	c := t.ckpt
	c.writing.Lock()
	defer c.writing.Unlock()
	start := time.Now()
	t.mu.Lock()
	p.Samples = t.status.Progress.Samples
	p.Results = append(p.Results, t.status.Results...)
	t.mu.Unlock()
	if st != nil {
		inputs := st.Inputs
		if len(inputs) == 0 {
			for name := range t.spec.Inputs {
				inputs = append(inputs, name)
			}
		}
		for _, in := range inputs {
			p.Blocks += len(t.blocks[in]) * p.Epoch
		}
	}
	kc, err := t.kvClient()
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	defer kc.Close()
	var filling time.Duration // reading dense tables during the write
	tables, err := t.readTables(kc, &filling)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	gathered := time.Since(start)
	ck := &checkpoint.Checkpoint{Record: checkpoint.Record{Progress: p, Task: *t.spec, Lineage: c.lineage}, Tables: tables}
	w, err := checkpoint.Write(t.ctx, t.m.sources, c.dir, ck, c.keep, t.m.cfg.Now())
	if err != nil {
		return "", err
	}
	// The dense tables were read as the file was written: their reads
	// count as reading, not writing.
	read := gathered + filling
	w.Seconds = max(w.Seconds-filling.Seconds(), 0)
	for _, err := range w.RemoveErrs {
		t.m.log.Warn().Err(err).Str("task", t.spec.ID).Msg("old checkpoint not deleted")
	}
	c.written(w.Path, t.m.cfg.Now())
	t.mu.Lock()
	t.status.Checkpoint = w.Path
	t.mu.Unlock()
	stall := time.Since(start)
	t.m.log.Info().Str("task", t.spec.ID).Int("stage", p.Stage).Int("epoch", p.Epoch).Str("path", w.Path).
		Int64("bytes", w.Bytes).Float64("read_seconds", read.Seconds()).Float64("write_seconds", w.Seconds).
		Float64("write_mb_per_sec", float64(w.Bytes)/1e6/max(w.Seconds, 1e-9)).Float64("stall_seconds", stall.Seconds()).
		Msg("checkpoint written")
	return w.Path, nil
}

// kvClient is a master-side client of the task's tables (no clock, no
// consistency waits).
func (t *taskRun) kvClient() (*kvstore.Client, error) {
	m := t.m
	return kvstore.NewClient(kvstore.ClientConfig{
		Transport: transport.NewNATS(m.nc, m.subj.SlaveKV), Task: t.spec.ID, Stage: -1, Worker: -1,
		Hosts: t.hosts, Consistency: kvstore.Consistency{Kind: kvstore.ASP}, Timeout: m.cfg.KVTimeout, Ctx: t.ctx,
		Routes: t.routes,
	})
}

// readTables reads every table of the task from its shards through c,
// for a checkpoint or the output. A dense table is read as the file is
// written, a window of keys at a time (GetRange), so the master never
// holds it whole: the file is written at a consistent point (the workers
// wait at their barrier, or have ended), so every window is read at that
// point (also when a write is retried); a failed window read is a
// readError. A sparse table is written keyed, also as it is read
// (scannedTable). The time the reads during the write take is added to
// *filling (when not nil).
func (t *taskRun) readTables(c *kvstore.Client, filling *time.Duration) ([]tasks.ModelTable, error) {
	if len(t.hosts) == 0 {
		return nil, errors.New("the task's tables are not created yet")
	}
	var out []tasks.ModelTable
	for _, p := range t.placements() {
		tc, err := c.Table(p)
		if err != nil {
			return nil, fmt.Errorf("table %q: %w", p.Spec.Name, err)
		}
		if spec := tc.Spec(); spec.Storage == kvstore.Dense && spec.Size*uint64(spec.Width) <= maxModelVals {
			out = append(out, tasks.ModelTable{Spec: spec, Fill: func(first uint64, vals []float64) error {
				if filling != nil {
					began := time.Now()
					defer func() { *filling += time.Since(began) }()
				}
				if err := tc.GetRange(first, len(vals)/spec.Width, vals); err != nil {
					return &readError{fmt.Errorf("table %q: %w", spec.Name, err)}
				}
				return nil
			}})
			continue
		}
		if spec := tc.Spec(); spec.Storage == kvstore.Sparse {
			mt, err := scannedTable(tc, filling)
			if err != nil {
				return nil, err
			}
			out = append(out, mt)
			continue
		}
		keys, vals, err := tc.ReadAll(maxModelVals)
		if err != nil {
			return nil, fmt.Errorf("table %q: %w", p.Spec.Name, err)
		}
		out = append(out, tasks.ModelTable{Spec: tc.Spec(), Keys: keys, Vals: vals})
	}
	return out, nil
}

// scannedTable is a sparse table, keyed, to be written as it is read: a
// first pass counts its keys, the writer's two passes read the keys, then
// their values, shard after shard in the same order (ScanInOrder; the
// writer checks that they match), so the master holds a page at a time,
// not the table. Time spent reading is added to *filling.
func scannedTable(tc *kvstore.TableClient, filling *time.Duration) (tasks.ModelTable, error) {
	spec := tc.Spec()
	read := func(fn func(keys []uint64, vals []float64) error) error {
		if err := tc.ScanInOrder(fn); err != nil {
			return &readError{fmt.Errorf("table %q: %w", spec.Name, err)}
		}
		return nil
	}
	// The writer's passes run during the write: their time is reading.
	// (The count pass runs before it, with the other reads.)
	scan := func(fn func(keys []uint64, vals []float64) error) error {
		if filling != nil {
			began := time.Now()
			defer func() { *filling += time.Since(began) }()
		}
		return read(fn)
	}
	n := 0
	w := uint64(max(spec.Width, 1))
	err := read(func(keys []uint64, _ []float64) error {
		n += len(keys)
		if uint64(n)*w > maxModelVals {
			return fmt.Errorf("it holds more than the %d values a model holds", uint64(maxModelVals))
		}
		return nil
	})
	if err != nil {
		return tasks.ModelTable{}, err
	}
	return tasks.ModelTable{Spec: spec, Count: n, Scan: scan}, nil
}

// restoreChunk is the keys one Set of a restore carries.
const restoreChunk = 1 << 14

// restoreTables loads the checkpoint's tables into the task's freshly
// created shards.
func (t *taskRun) restoreTables(ck *checkpoint.Checkpoint) error {
	c, err := t.kvClient()
	if err != nil {
		return err
	}
	defer c.Close()
	for i, p := range t.placements() {
		mt := ck.Tables[i]
		tc, err := c.Table(p)
		if err != nil {
			return fmt.Errorf("table %q: %w", p.Spec.Name, err)
		}
		w := mt.Spec.Width
		n := len(mt.Vals) / max(w, 1)
		keys := make([]uint64, 0, min(n, restoreChunk))
		for lo := 0; lo < n; lo += restoreChunk {
			hi := min(lo+restoreChunk, n)
			keys = keys[:0]
			for j := lo; j < hi; j++ {
				if mt.Keys != nil {
					keys = append(keys, mt.Keys[j])
				} else {
					keys = append(keys, uint64(j))
				}
			}
			if err := tc.Set(keys, mt.Vals[lo*w:hi*w]); err != nil {
				return fmt.Errorf("table %q: %w", p.Spec.Name, err)
			}
		}
	}
	return nil
}

// stopAtCheckpoint stops the task at its next consistent point, after a
// checkpoint there; a task without checkpoints, or not started yet, stops
// at once.
func (t *taskRun) stopAtCheckpoint() {
	t.mu.Lock()
	started := t.hosts != nil
	t.mu.Unlock()
	if t.ckpt == nil || !started {
		t.cancelRun(errCancelled)
		return
	}
	t.ckpt.requestStop()
	t.m.log.Info().Str("task", t.spec.ID).Msg("stop requested: writing a checkpoint at the next epoch or stage end")
}

// Resume resumes the task of the newest valid checkpoint in dir under the
// id given ("" : a new one); its checkpoints go on in dir. dir may also
// name one checkpoint file in it (DIR/ckpt-NNNNNN.flexps: an older one
// than the newest, or one of another task's left in the dir), which is
// resumed as it is. The warnings name the newer checkpoint files that
// were skipped as torn or corrupt.
func (m *Master) Resume(ctx context.Context, dir, id string) (string, []string, error) {
	ck, path, warnings, err := m.resumeFrom(ctx, dir)
	if err != nil {
		return "", warnings, err
	}
	if d, ok := checkpoint.FileDir(dir); ok {
		dir = d
	}
	tid, err := m.resumeLoaded(ctx, ck, path, dir, id)
	return tid, warnings, err
}

// resumeLoaded submits the task of checkpoint ck, loaded from path in
// dir, under id.
func (m *Master) resumeLoaded(ctx context.Context, ck *checkpoint.Checkpoint, path, dir, id string) (string, error) {
	spec := ck.Task
	spec.ID = id
	spec.Checkpoint.Dir = dir
	return m.submit(ctx, &spec, ck, path)
}

// resumeFrom loads the newest valid checkpoint in dir for a resumed task,
// or the checkpoint file dir names. Newer files that are torn or corrupt
// are skipped; warnings names each.
func (m *Master) resumeFrom(ctx context.Context, dir string) (ck *checkpoint.Checkpoint, path string, warnings []string, err error) {
	if _, ok := checkpoint.FileDir(dir); ok {
		ck, err := checkpoint.LoadFile(ctx, m.sources, dir)
		if err != nil {
			return nil, "", nil, err
		}
		return ck, dir, nil, nil
	}
	ck, path, skipped, err := checkpoint.Latest(ctx, m.sources, dir)
	for _, s := range skipped {
		msg := fmt.Sprintf("skipping checkpoint %s: %v", s.Path, s.Err)
		m.log.Warn().Str("file", s.Path).Err(s.Err).Msg("checkpoint skipped")
		warnings = append(warnings, msg)
	}
	if err != nil {
		return nil, "", warnings, err
	}
	if len(skipped) > 0 {
		warnings = append(warnings, "resuming from the older checkpoint "+path)
	}
	if w := m.tempsWarning(ctx, dir); w != "" {
		warnings = append(warnings, w)
	}
	return ck, path, warnings, nil
}

// tempsWarning names the temporary checkpoint files in an hdfs:// (any
// non-local) checkpoint dir, and logs it: such a dir is not locked, so a
// temporary file a writer killed mid-write left (a master or flexps run
// killed while it wrote a checkpoint) cannot be told from one another run
// writes there now, and is not removed; until now it stayed, hidden, for
// good. A local dir's are removed under its lock (submit).
func (m *Master) tempsWarning(ctx context.Context, dir string) string {
	if sc := datastore.Scheme(dir); sc == "" || sc == "file" {
		return ""
	}
	temps, err := checkpoint.Temps(ctx, m.sources, dir)
	if err != nil || len(temps) == 0 {
		return ""
	}
	msg := fmt.Sprintf("checkpoint dir %s holds %d temporary checkpoint file(s), left by a writer killed mid-write or being written by another run writing there now (%s dirs are not locked, so they are not removed): %s; once no other run writes there, delete them",
		dir, len(temps), datastore.Scheme(dir)+"://", strings.Join(temps, ", "))
	m.log.Warn().Str("dir", dir).Strs("files", temps).Msg(msg)
	return msg
}
