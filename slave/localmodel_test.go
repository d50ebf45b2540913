package slave

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// localFixture is one worker's handle on an in-memory table of a local
// stage, with the stage's gate when the consistency model has one.
func localFixture(t *testing.T, spec kvstore.TableSpec, c kvstore.Consistency, workers int) (*localTable, *worker, *localModel) {
	t.Helper()
	st := tasks.Stage{Name: "s", WorkerKind: tasks.KindLocal, Consistency: c}
	m := newLocalModel(&Slave{}, proto.SlaveCtl{Task: "t"}, st, workers)
	lt, err := kvstore.NewLocalTable(spec, m.mode, m.chunk)
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{local: m, ctx: context.Background(), rank: 0}
	return &localTable{w: w, e: &localEntry{table: lt}}, w, m
}

func TestLocalTableChecks(t *testing.T) {
	tab, _, _ := localFixture(t, kvstore.TableSpec{Name: "w", Size: 10, Width: 2, ChunkSize: 4}, kvstore.Consistency{Kind: kvstore.ASP}, 1)
	for _, tc := range []struct {
		name string
		op   func() error
		want string
	}{
		{"get: values for keys", func() error { return tab.Get([]uint64{1}, make([]float64, 1)) }, "1 values for 1 keys of width 2"},
		{"add: values for keys", func() error { return tab.Add([]uint64{1, 2}, make([]float64, 3)) }, "3 values for 2 keys"},
		{"get: key out of range", func() error { return tab.Get([]uint64{10}, make([]float64, 2)) }, "key 10 out of range [0, 10)"},
		{"add: key out of range", func() error { return tab.Add([]uint64{99}, make([]float64, 2)) }, "key 99 out of range"},
		{"chunk out of range", func() error { return tab.GetChunk([]uint64{3}, make([]float64, 8)) }, "chunk 3 out of range"},
		{"chunks hold more", func() error { return tab.AddChunk([]uint64{0, 1}, make([]float64, 10)) }, "hold more values than the 10 given"},
		{"chunks hold fewer", func() error { return tab.GetChunk([]uint64{2}, make([]float64, 8)) }, "chunks hold 4 values, got 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"w"`) {
				t.Fatalf("err = %v, want one naming table \"w\" and %q", err, tc.want)
			}
		})
	}
}

func TestLocalTableGetAddChunks(t *testing.T) {
	for _, kind := range []string{tasks.KindLocal, tasks.KindHogwild} {
		t.Run(kind, func(t *testing.T) {
			tab, _, m := localFixture(t, kvstore.TableSpec{Name: "w", Size: 10, Width: 2, ChunkSize: 4}, kvstore.Consistency{Kind: kvstore.ASP}, 1)
			if kind == tasks.KindLocal && m.mode != kvstore.ChunkLocks {
				t.Fatalf("local kind without chunk locks: %v", m.mode)
			}
			if err := tab.Add([]uint64{9, 0}, []float64{1, 2, 3, 4}); err != nil {
				t.Fatal(err)
			}
			// Chunk 2 is the short last one (keys 8, 9).
			if err := tab.AddChunk([]uint64{2}, []float64{10, 20, 30, 40}); err != nil {
				t.Fatal(err)
			}
			got := make([]float64, 4)
			if err := tab.Get([]uint64{0, 9}, got); err != nil {
				t.Fatal(err)
			}
			if want := []float64{3, 4, 31, 42}; !equalFloats(got, want) {
				t.Fatalf("Get = %v, want %v", got, want)
			}
			all := make([]float64, 12)
			if err := tab.GetChunk([]uint64{0, 2}, all); err != nil {
				t.Fatal(err)
			}
			if want := []float64{3, 4, 0, 0, 0, 0, 0, 0, 10, 20, 31, 42}; !equalFloats(all, want) {
				t.Fatalf("GetChunk = %v, want %v", all, want)
			}
			if tab.Spec().Name != "w" {
				t.Fatal(tab.Spec())
			}
		})
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Under BSP a local worker's read waits for the slowest worker's clock;
// cancelling the worker's context ends the wait with its cause.
func TestLocalTableWaitsForTheGate(t *testing.T) {
	tab, w, m := localFixture(t, kvstore.TableSpec{Name: "w", Size: 4}, kvstore.Consistency{Kind: kvstore.BSP}, 2)
	if m.gate == nil {
		t.Fatal("a BSP stage has no gate")
	}
	w.localClock = 1
	m.gate.Advance(0, 1)
	done := make(chan error, 1)
	go func() { done <- tab.Get([]uint64{0}, make([]float64, 1)) }()
	select {
	case err := <-done:
		t.Fatalf("read at clock 1 passed while worker 1 is at 0: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	m.gate.Advance(1, 1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	w.ctx = ctx
	w.localClock = 2
	m.gate.Advance(0, 2)
	go func() { done <- tab.GetChunk([]uint64{0}, make([]float64, 4)) }()
	stop := errors.New("stage stopped")
	cancel(stop)
	if err := <-done; err == nil {
		t.Fatal("a cancelled wait returned no error")
	}
	// ASP stages have no gate at all.
	_, _, asp := localFixture(t, kvstore.TableSpec{Name: "w", Size: 4}, kvstore.Consistency{Kind: kvstore.ASP}, 2)
	if asp.gate != nil {
		t.Fatal("an ASP stage has a gate")
	}
}

func TestNewLocalModelDefaults(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		chunk int
		mode  kvstore.LockMode
		want  int
	}{
		{tasks.KindLocal, 0, kvstore.ChunkLocks, DefaultChunkSize},
		{tasks.KindLocal, 16, kvstore.ChunkLocks, 16},
		{tasks.KindHogwild, 0, kvstore.NoLocks, DefaultChunkSize},
		{tasks.KindSingle, 0, kvstore.NoLocks, DefaultChunkSize},
	} {
		m := newLocalModel(&Slave{}, proto.SlaveCtl{Task: "t", Retain: true, TransferFrom: "s2"},
			tasks.Stage{WorkerKind: tc.kind, ChunkSize: tc.chunk, Consistency: kvstore.Consistency{Kind: kvstore.ASP}}, 3)
		if m.mode != tc.mode || m.chunk != tc.want || m.left != 3 || !m.retain || m.from != "s2" {
			t.Errorf("%s chunk %d: mode %v chunk %d left %d retain %v from %q", tc.kind, tc.chunk, m.mode, m.chunk, m.left, m.retain, m.from)
		}
	}
}
