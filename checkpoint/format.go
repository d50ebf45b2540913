package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// Version is the checkpoint format this package writes and reads.
const Version = 1

// ErrFormat is wrapped by every error about a file that is not a whole,
// valid checkpoint (truncated, corrupt, another format).
var ErrFormat = errors.New("not a valid checkpoint")

// Progress is where the task was when the checkpoint was taken.
type Progress struct {
	// Stage is the stage to run on resume: the one running when the
	// checkpoint was taken, or the next one when taken between stages.
	Stage int `json:"stage"`
	// Epoch is how many epochs of Stage were done (0 between stages).
	Epoch int `json:"epoch"`
	// Samples is how many samples the task had trained on.
	Samples int64 `json:"samples"`
	// Blocks is how many input blocks the finished epochs of Stage read.
	Blocks int `json:"blocks,omitempty"`
	// Results are the finished stages' results, shown again on resume.
	Results []status.StageResult `json:"results,omitempty"`
}

// Record is the checkpoint's own header, next to the tables.
type Record struct {
	Version  int                  `json:"version"`
	Seq      int                  `json:"seq"`
	Created  time.Time            `json:"created"`
	Progress Progress             `json:"progress"`
	Task     tasks.MultiStageTask `json:"task"`
	// Lineage are the ids of the tasks whose checkpoints Task continues
	// (it was resumed from one of theirs), oldest first: their files in
	// the dir are its own as much as those recording Task.ID, and Write
	// prunes them with its own. Any other task's files are left alone.
	Lineage []string `json:"lineage,omitempty"`
}

// Owns reports whether a checkpoint written by task id is one of r's
// task's own: its id or one of its lineage.
func (r *Record) Owns(id string) bool {
	return id == r.Task.ID || slices.Contains(r.Lineage, id)
}

// Continue is the lineage of a task resumed from c: c's lineage and the
// task that wrote c (each once, without id, the resumed task's own).
func (r *Record) Continue(id string) []string {
	var out []string
	for _, l := range append(slices.Clip(r.Lineage), r.Task.ID) {
		if l != id && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// Checkpoint is one checkpoint: its record and every table of the task.
type Checkpoint struct {
	Record
	Tables []tasks.ModelTable
}

// Encode writes c to w (a model file of format 2 with the record in its
// header) and returns the bytes written.
func Encode(w io.Writer, c *Checkpoint) (int64, error) {
	c.Version = Version
	rec, err := json.Marshal(c.Record)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	m := &tasks.Model{Kind: c.Task.Kind, Task: c.Task.ID, Name: c.Task.Name, Meta: tasks.ModelMeta(&c.Task),
		Tables: c.Tables, Checkpoint: rec}
	return m.WriteTo(w)
}

// Decode reads a checkpoint written by Encode. A file that is truncated,
// fails its checksum, is of another version, or whose record does not fit
// its tables is an error wrapping ErrFormat.
func Decode(r io.Reader) (*Checkpoint, error) {
	m, err := tasks.ReadModel(r)
	if errors.Is(err, tasks.ErrModelRead) {
		return nil, err // not the file's fault: not ErrFormat
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if len(m.Checkpoint) == 0 {
		return nil, fmt.Errorf("%w: a model file without a checkpoint record", ErrFormat)
	}
	var rec Record
	if err := json.Unmarshal(m.Checkpoint, &rec); err != nil {
		return nil, fmt.Errorf("%w: checkpoint record: %v", ErrFormat, err)
	}
	if rec.Version != Version {
		return nil, fmt.Errorf("%w: format version %d, this program reads %d", ErrFormat, rec.Version, Version)
	}
	c := &Checkpoint{Record: rec, Tables: m.Tables}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	return c, nil
}

// check verifies that the record and the tables agree: a file that passed
// its checksum but was written by a buggy or foreign program is refused
// rather than loaded into a cluster.
func (c *Checkpoint) check() error {
	t := &c.Task
	if err := t.ValidateShape(); err != nil {
		return err
	}
	p := c.Progress
	if p.Stage < 0 || p.Stage > len(t.Stages) || p.Epoch < 0 || p.Samples < 0 || p.Blocks < 0 {
		return fmt.Errorf("progress out of range (stage %d of %d, epoch %d)", p.Stage, len(t.Stages), p.Epoch)
	}
	if c.Seq < 1 {
		return fmt.Errorf("sequence number %d", c.Seq)
	}
	if len(c.Tables) != len(t.Tables) {
		return fmt.Errorf("%d tables, the task declares %d", len(c.Tables), len(t.Tables))
	}
	for i, mt := range c.Tables {
		want := t.Tables[i]
		if mt.Spec.Name != want.Name || mt.Spec.Width != want.Width || mt.Spec.Size != want.Size {
			return fmt.Errorf("table %d is %q (%d x %d), the task declares %q (%d x %d)", i,
				mt.Spec.Name, mt.Spec.Size, mt.Spec.Width, want.Name, want.Size, want.Width)
		}
		if mt.Dense && uint64(mt.Count) != mt.Spec.Size {
			return fmt.Errorf("table %q: dense with %d of %d keys", mt.Spec.Name, mt.Count, mt.Spec.Size)
		}
		for j, k := range mt.Keys {
			if k >= mt.Spec.Size || (j > 0 && k <= mt.Keys[j-1]) {
				return fmt.Errorf("table %q: keys not ascending within [0, %d)", mt.Spec.Name, mt.Spec.Size)
			}
		}
	}
	return nil
}
