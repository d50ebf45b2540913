package checkpoint

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// sample is a checkpoint of a two-table task: a dense table and a sparse
// one stored by its keys.
func sample() *Checkpoint {
	task := tasks.NewTask("ck")
	task.ID = "t1"
	task.Kind = "lr"
	task.AddTable(kvstore.TableSpec{Name: "w", Size: 4, Width: 2})
	task.AddTable(kvstore.TableSpec{Name: "emb", Size: 100, Width: 1, Storage: kvstore.Sparse})
	task.SetStages(tasks.Stage{Name: "sgd", Func: "x.sgd", Workers: 2, Params: tasks.Params{"epochs": 5}})
	task.Checkpoint = tasks.Checkpoint{Dir: "/tmp/ck", Every: "1 epoch"}
	task.Normalize()
	return &Checkpoint{
		Record: Record{Seq: 3, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Task: *task,
			Progress: Progress{Stage: 0, Epoch: 2, Samples: 1234, Blocks: 8,
				Results: []status.StageResult{{Index: 0, Name: "warm", Samples: 10}}}},
		Tables: []tasks.ModelTable{
			{Spec: task.Tables[0], Vals: []float64{1, 2, 3, 4, 5, 6, 7, 8}},
			{Spec: task.Tables[1], Keys: []uint64{3, 50, 99}, Vals: []float64{-1, 0.5, 1e-9}},
		},
	}
}

func encode(t testing.TB, c *Checkpoint) []byte {
	t.Helper()
	var b bytes.Buffer
	n, err := Encode(&b, c)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(b.Len()) {
		t.Fatalf("Encode reported %d bytes, wrote %d", n, b.Len())
	}
	return b.Bytes()
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	in := sample()
	got, err := Decode(bytes.NewReader(encode(t, in)))
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != Version || got.Seq != 3 || !got.Created.Equal(in.Created) || got.Task.Name != "ck" || got.Task.ID != "t1" {
		t.Fatalf("record %+v", got.Record)
	}
	if got.Progress.Epoch != 2 || got.Progress.Samples != 1234 || got.Progress.Blocks != 8 || len(got.Progress.Results) != 1 {
		t.Fatalf("progress %+v", got.Progress)
	}
	if got.Task.Checkpoint.Every != "1 epoch" || got.Task.Stages[0].Params.Int("epochs", 0) != 5 {
		t.Fatalf("task spec not kept: %+v", got.Task)
	}
	for i, want := range in.Tables {
		g := got.Tables[i]
		if g.Spec.Name != want.Spec.Name || !slices.Equal(g.Keys, want.Keys) || !slices.Equal(g.Vals, want.Vals) {
			t.Fatalf("table %d: got %+v, want %+v", i, g, want)
		}
	}
}

// The checkpoint is a model file: a model reader (flexps eval) reads it.
func TestCheckpointIsAModel(t *testing.T) {
	m, err := tasks.ReadModel(bytes.NewReader(encode(t, sample())))
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != "lr" || len(m.Tables) != 2 || m.Tables[0].Vals[7] != 8 {
		t.Fatalf("model %+v", m)
	}
}

// Every truncation, and a flipped bit in every byte, is refused.
func TestDecodeRefusesEveryTornOrFlippedFile(t *testing.T) {
	data := encode(t, sample())
	for n := 0; n < len(data); n++ {
		if _, err := Decode(bytes.NewReader(data[:n])); !errors.Is(err, ErrFormat) {
			t.Fatalf("truncated to %d of %d bytes: err %v, want ErrFormat", n, len(data), err)
		}
	}
	for i := range data {
		bit := i % 8
		b := slices.Clone(data)
		b[i] ^= 1 << bit
		if _, err := Decode(bytes.NewReader(b)); !errors.Is(err, ErrFormat) {
			t.Fatalf("bit %d of byte %d flipped: err %v, want ErrFormat", bit, i, err)
		}
	}
	if _, err := Decode(bytes.NewReader(append(slices.Clone(data), 'x'))); !errors.Is(err, ErrFormat) {
		t.Fatalf("trailing byte: %v", err)
	}
}

func TestDecodeRefusesInconsistentRecords(t *testing.T) {
	cases := []struct {
		name  string
		spoil func(c *Checkpoint)
	}{
		{"table missing", func(c *Checkpoint) { c.Tables = c.Tables[:1] }},
		{"table renamed", func(c *Checkpoint) { c.Tables[0].Spec.Name = "v" }},
		{"width changed", func(c *Checkpoint) { c.Task.Tables[0].Width = 3 }},
		{"stage out of range", func(c *Checkpoint) { c.Progress.Stage = 2 }},
		{"negative epoch", func(c *Checkpoint) { c.Progress.Epoch = -1 }},
		{"key twice", func(c *Checkpoint) { c.Tables[1].Keys = []uint64{50, 3, 50} }}, // keys in any order are fine (a sparse table is written in its shards order): sorted when read
		{"key out of range", func(c *Checkpoint) { c.Tables[1].Keys = []uint64{3, 50, 100} }},
		{"no task name", func(c *Checkpoint) { c.Task.Name = "" }},
		{"bad checkpoint setting", func(c *Checkpoint) { c.Task.Checkpoint.Every = "often" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := sample()
			tc.spoil(c)
			var b bytes.Buffer
			if _, err := Encode(&b, c); err != nil {
				return // refused at encoding already
			}
			if _, err := Decode(&b); !errors.Is(err, ErrFormat) {
				t.Fatalf("err %v, want ErrFormat", err)
			}
		})
	}
}

func TestDecodeRefusesPlainModelsAndOtherVersions(t *testing.T) {
	var b bytes.Buffer
	m := &tasks.Model{Kind: "lr", Tables: sample().Tables}
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(&b); !errors.Is(err, ErrFormat) {
		t.Fatalf("plain model: %v", err)
	}
	b.Reset()
	m.Checkpoint = []byte(`{"version":99,"seq":1}`)
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(&b); !errors.Is(err, ErrFormat) {
		t.Fatalf("version 99: %v", err)
	}
}

// FuzzDecode: no input panics the decoder or makes it allocate what a
// header claims; whatever decodes encodes again to a file that decodes
// to the same record and tables.
func FuzzDecode(f *testing.F) {
	data := encode(f, sample())
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Add([]byte(`{"magic":"flexps-model/2","tables":[],"checkpoint":{"version":1}}` + "\n"))
	f.Add([]byte("not a checkpoint"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error not wrapping ErrFormat: %v", err)
			}
			return
		}
		again, err := Decode(bytes.NewReader(encode(t, c)))
		if err != nil {
			t.Fatalf("re-encoded checkpoint does not decode: %v", err)
		}
		if again.Seq != c.Seq || again.Progress.Epoch != c.Progress.Epoch || len(again.Tables) != len(c.Tables) {
			t.Fatalf("round trip changed the checkpoint: %+v vs %+v", again.Record, c.Record)
		}
		for i := range c.Tables {
			if !slices.Equal(again.Tables[i].Keys, c.Tables[i].Keys) || len(again.Tables[i].Vals) != len(c.Tables[i].Vals) {
				t.Fatalf("table %d changed", i)
			}
		}
	})
}

// A task resumed from a checkpoint continues the task that wrote it and
// that task's own lineage; its own id is never in it.
func TestContinueIsTheLineageOfAResumedTask(t *testing.T) {
	for _, tc := range []struct {
		name    string
		writer  string
		lineage []string
		id      string
		want    []string
	}{
		{"a first resume", "t0", nil, "t1", []string{"t0"}},
		{"a second", "t1", []string{"t0"}, "t2", []string{"t0", "t1"}},
		{"under the same id (a master restart)", "t1", []string{"t0"}, "t1", []string{"t0"}},
		{"of its own first task", "t0", []string{"t0"}, "t3", []string{"t0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Record{Lineage: tc.lineage}
			r.Task.ID = tc.writer
			if got := r.Continue(tc.id); !slices.Equal(got, tc.want) {
				t.Fatalf("Continue(%s) = %v, want %v", tc.id, got, tc.want)
			}
			next := Record{Lineage: r.Continue(tc.id)}
			next.Task.ID = tc.id
			for _, id := range append(tc.want, tc.id) {
				if !next.Owns(id) {
					t.Fatalf("the resumed task does not own %s's checkpoints", id)
				}
			}
			if next.Owns("stranger") {
				t.Fatal("it owns a stranger's checkpoints")
			}
		})
	}
}
