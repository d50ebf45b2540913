package kvstore

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

// Dense tables are checked against the host's memory together, not one
// shard at a time: Go maps a new array without touching it, so the
// kernel's MemAvailable does not yet count a table created a moment ago,
// and two tables that fit only one by one were both accepted, to be
// killed by the kernel once trained on. Ended tasks' tables stop counting
// once collected.
func TestDenseTablesCheckedTogether(t *testing.T) {
	defer func(f func() (uint64, bool)) { memAvailableFunc = f }(memAvailableFunc)
	// A host with 1 GiB available when the test starts; what this process
	// makes resident is no longer available, as the kernel counts it.
	runtime.GC()
	base, ok := residentBytes()
	if !ok {
		t.Skip("no /proc/self/status")
	}
	memAvailableFunc = func() (uint64, bool) {
		rss, _ := residentBytes()
		return 1<<30 - (max(rss, base) - base), true
	}
	s, err := NewServer(transport.NewMem(), "s0", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const keys = 192 << 20 // 768 MiB of float32 each, never touched
	place := func(names ...string) []Placement {
		var ps []Placement
		for _, n := range names {
			ps = append(ps, Placement{Spec: TableSpec{Name: n, Size: keys, DType: Float32}, Hosts: []string{"s0"}})
		}
		return ps
	}
	err = s.CreateTables("t1", "s0", place("a", "b"))
	if !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), `table "b"`) || !strings.Contains(err.Error(), "768.0 MiB") {
		t.Fatalf("two 768 MiB tables on 1 GiB: err = %v, want ErrBadSpec naming table b and its size", err)
	}
	// A second task while the first holds its table, as another slave of
	// the same process would: refused too.
	if err := s.CreateTables("t1", "s0", place("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTables("t2", "s0", place("c")); !errors.Is(err, ErrBadSpec) {
		t.Fatalf("second task's table while the first's is held: err = %v", err)
	}
	if _, err := NewLocalTable(TableSpec{Name: "l", Size: keys, DType: Float32}, ChunkLocks, 1); !errors.Is(err, ErrBadSpec) {
		t.Fatalf("local table while a shard is held: err = %v", err)
	}
	// Once the first task ends, its table's memory is free again.
	s.DropTask("t1", nil)
	if err := s.CreateTables("t2", "s0", place("c")); err != nil {
		t.Fatalf("after the first task ended: %v", err)
	}
}
