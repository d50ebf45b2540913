package slave

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// transferPair is two slaves on one embedded bus, serving their retained
// models as Start would (the xfer and modelinfo subjects), with a small
// max_payload so that tables travel in many chunks.
func transferPair(t *testing.T) (a, b *Slave) {
	t.Helper()
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{MaxPayload: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	mk := func(id string) *Slave {
		nc, err := srv.Connect(bus.Options{Name: id})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		s := New(nc, Config{Cluster: "x", ID: id, Slots: 1, Log: zerolog.Nop()})
		close(s.joined) // serves as an admitted slave, without a master
		for subject, h := range map[string]nats.MsgHandler{s.subj.SlaveXfer(id): s.serveXfer, s.subj.SlaveModelInfo(id): s.serveModelInfo} {
			sub, err := nc.Subscribe(subject, h)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sub.Unsubscribe() })
		}
		nc.Flush()
		return s
	}
	return mk("a"), mk("b")
}

// retainOn leaves a finished stage's tables in a's memory for task.
func retainOn(t *testing.T, a *Slave, task string, specs ...kvstore.TableSpec) map[string]*localEntry {
	t.Helper()
	tables := map[string]*localEntry{}
	for _, spec := range specs {
		lt, err := kvstore.NewLocalTable(spec, kvstore.NoLocks, 8)
		if err != nil {
			t.Fatal(err)
		}
		vals := lt.Values()
		for i := range vals {
			vals[i] = float64(i)*0.25 + 1
		}
		lt.SetRange(0, int(lt.Spec().Size), vals)
		tables[spec.Name] = &localEntry{table: lt, place: kvstore.Placement{Spec: spec}}
	}
	a.retain(task, tables)
	return tables
}

func nextStage(s *Slave, task, from string, specs ...kvstore.TableSpec) *localModel {
	req := proto.SlaveCtl{Task: task, TransferFrom: from}
	for _, spec := range specs {
		req.Tables = append(req.Tables, kvstore.Placement{Spec: spec})
	}
	return newLocalModel(s, req, tasks.Stage{WorkerKind: tasks.KindSingle}, 1)
}

func TestDirectTransferAcrossSlaves(t *testing.T) {
	a, b := transferPair(t)
	w := kvstore.TableSpec{Name: "w", Size: 3000, Width: 3}.WithDefaults()
	f := kvstore.TableSpec{Name: "f", Size: 500, DType: kvstore.Float32}.WithDefaults()
	held := retainOn(t, a, "t1", w, f)

	m := nextStage(b, "t1", "a", w, f)
	if err := m.prepareFrom(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	for name, e := range held {
		got := m.tables[name]
		if got == nil {
			t.Fatalf("table %s not transferred", name)
		}
		want := e.table.Values()
		if name == "f" { // float32 tables travel as float32
			want = append([]float64(nil), want...)
			for i := range want {
				want[i] = float64(float32(want[i]))
			}
		}
		if !equalFloats(got.table.Values(), want) {
			t.Fatalf("table %s differs after the transfer", name)
		}
	}
	if m.loadSeconds <= 0 {
		t.Error("the transfer's time is not accounted")
	}

	// A corrupted value is caught by the checksum computed at the holder.
	held["w"].table.Add([]uint64{411}, []float64{0, 1, 0}) // value 1234: key 411, column 1
	if err := nextStage(b, "t1", "a", w, f).prepareFrom(context.Background(), "a"); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("corrupted transfer: %v", err)
	}
}

func TestDirectTransferErrors(t *testing.T) {
	a, b := transferPair(t)
	w := kvstore.TableSpec{Name: "w", Size: 100}.WithDefaults()
	retainOn(t, a, "t1", w)
	for _, tc := range []struct {
		name  string
		m     *localModel
		from  string
		wants string
	}{
		{"unknown task", nextStage(b, "t2", "a", w), "a", "retains no model of task t2"},
		{"silent holder", nextStage(b, "t1", "zz", w), "zz", "slave zz does not answer"},
		{"table the task does not declare", nextStage(b, "t1", "a", kvstore.TableSpec{Name: "other", Size: 100}.WithDefaults()), "a", `table "w" does not match`},
		{"width mismatch", nextStage(b, "t1", "a", kvstore.TableSpec{Name: "w", Size: 30, Width: 3}.WithDefaults()), "a", `table "w" does not match`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.from == "zz" {
				tc.m.s.cfg.KVTimeout = 200 * time.Millisecond
			}
			err := tc.m.prepareFrom(context.Background(), tc.from)
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("err = %v, want %q", err, tc.wants)
			}
		})
	}
	// A chunk request out of bounds, for another table, or larger than
	// one message carries is refused.
	retainOn(t, a, "t3", kvstore.TableSpec{Name: "big", Size: 200000}.WithDefaults())
	for _, req := range []kvstore.Message{
		{Op: kvstore.OpGetRange, Task: "t1", Table: "w", First: 90, N: 20},
		{Op: kvstore.OpGetRange, Task: "t1", Table: "nope", First: 0, N: 1},
		{Op: kvstore.OpGet, Task: "t1", Table: "w"},
		{Op: kvstore.OpGetRange, Task: "t3", Table: "big", First: 0, N: 200000},
	} {
		msg, err := b.nc.Request(a.subj.SlaveXfer("a"), kvstore.AppendMessage(nil, &req), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep kvstore.Message
		if err := kvstore.DecodeMessage(msg.Data, &rep); err != nil || rep.Op != kvstore.OpError {
			t.Errorf("request %+v: answer %+v %v, want an error", req, rep, err)
		}
	}
}

// On the same slave the model is handed over in memory, once.
func TestDirectTransferSameSlave(t *testing.T) {
	a, _ := transferPair(t)
	w := kvstore.TableSpec{Name: "w", Size: 64, Width: 2}.WithDefaults()
	held := retainOn(t, a, "t1", w)
	m := nextStage(a, "t1", "a", w)
	if err := m.prepareFrom(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if !equalFloats(m.tables["w"].table.Values(), held["w"].table.Values()) {
		t.Fatal("handed-over model differs")
	}
	if m.tables["w"].table == held["w"].table {
		t.Fatal("the next stage shares the retained table instead of owning a copy")
	}
	if err := nextStage(a, "t1", "a", w).prepareFrom(context.Background(), "a"); err == nil {
		t.Fatal("a model was handed over twice")
	}
	a.retain("t2", held)
	a.dropRetained("t2")
	if _, _, ok := a.retainedTable("t2", "w"); ok {
		t.Fatal("a dropped model is still retained")
	}
}
