package kvstore

import (
	"testing"

	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

// FuzzServerHandle feeds arbitrary requests to a shard server: whatever
// the bytes (bad cursors, keys beyond the table, wrong value counts), it
// answers or refuses them without panicking.
func FuzzServerHandle(f *testing.F) {
	for _, m := range []Message{
		{Op: OpScan, Task: "t", Table: "d", First: 5, N: 3},
		{Op: OpScan, Task: "t", Table: "s", First: 15<<56 | 7<<48 | 99, N: 1 << 30},
		{Op: OpAdd, Task: "t", Table: "s", Keys: []uint64{1, 1 << 50}, Width: 1, DType: Float64, Vals: []float64{1, 2}},
		{Op: OpGetRange, Task: "t", Table: "d", First: 90, N: 20},
		{Op: OpAddRange, Task: "t", Table: "d", First: 1, N: 2, DType: Float32, Vals: []float64{1, 2}},
		{Op: OpClock, Task: "t", Worker: 3, Clock: 2},
		{Op: OpLocalize, Task: "t", Table: "d", Keys: []uint64{1, 2, 3}, Node: 1},
		{Op: OpLocalize, Task: "t", Table: "s", Keys: []uint64{7}, Node: 0},
		{Op: OpTransfer, Task: "t", Table: "d", Keys: []uint64{4, 5}, Node: 0, Versions: []uint64{1, 2}},
		{Op: OpValues, Task: "t", Table: "d", Keys: []uint64{4}, Width: 1, DType: Float64, Vals: []float64{3}, Versions: []uint64{1}},
		{Op: OpGet, Task: "t", Table: "d", Keys: []uint64{4, 6}, Pos: []int{1, 0}},
	} {
		f.Add(AppendMessage(nil, &m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tr := transport.NewMem()
		s, err := NewServer(tr, "n", zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		err = s.CreateTables("t", "n", []Placement{
			{Spec: TableSpec{Name: "d", Size: 100, Partition: HashPartition}, Hosts: []string{"x", "n"}},
			{Spec: TableSpec{Name: "s", Size: 1 << 40, Storage: Sparse, Width: 1}, Hosts: []string{"n"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		in, err := tr.Listen()
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		// A fuzzed message first with a reply address (a worker's), then
		// as a peer's (none); then the table is made dynamic and the
		// message handled again, so the relocation paths see it too.
		s.handle(b, in.Addr()+".r")
		s.handle(b, "")
		s.handle(AppendMessage(nil, &Message{Op: OpLocalize, Task: "t", Table: "d", Keys: []uint64{0, 1, 2}, Node: 0}), "")
		s.handle(b, in.Addr()+".r")
	})
}
