package transport

import (
	"runtime"
	"testing"
	"time"
)

func TestBulkBufs(t *testing.T) {
	bufs := func(n int) []*[]byte {
		out := make([]*[]byte, n)
		for i := range out {
			b := make([]byte, bulkSize)
			out[i] = &b
		}
		return out
	}
	tests := []struct {
		name     string
		keep     int
		put      int
		gcs      []bool // per collection: whether the list was used before it
		wantKept int
	}{
		{name: "keeps what it may", keep: 4, put: 3, wantKept: 3},
		{name: "refuses past its bound", keep: 4, put: 6, wantKept: 4},
		{name: "used lists keep all", keep: 4, put: 4, gcs: []bool{true, true, true}, wantKept: 4},
		{name: "an unused list halves per collection", keep: 8, put: 8, gcs: []bool{false, false}, wantKept: 2},
		{name: "the last buffer goes too", keep: 8, put: 1, gcs: []bool{false}, wantKept: 0},
		{name: "a collection after use spares it once", keep: 8, put: 8, gcs: []bool{true, false}, wantKept: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &bulkBufs{keep: tc.keep}
			in := bufs(tc.put)
			for i, b := range in {
				if got, want := p.put(b), i < tc.keep; got != want {
					t.Fatalf("put %d = %v, want %v", i, got, want)
				}
			}
			p.used = false // the puts happened before the first collection below
			for _, used := range tc.gcs {
				if used {
					p.put(p.get())
				}
				p.collected()
			}
			if got := p.kept(); got != tc.wantKept {
				t.Fatalf("kept %d, want %d", got, tc.wantKept)
			}
			// get hands out what put kept, each once, then nil.
			seen := map[*[]byte]bool{}
			for range tc.wantKept {
				b := p.get()
				if b == nil || seen[b] || len(*b) != bulkSize {
					t.Fatalf("get returned %p (seen %v)", b, seen[b])
				}
				seen[b] = true
			}
			if b := p.get(); b != nil {
				t.Fatalf("get of an empty list returned %p", b)
			}
		})
	}
}

// An idle process gives its kept buffers back as the runtime collects.
func TestBulkBufsShrinkAfterCollections(t *testing.T) {
	p := newBulkBufs(4)
	defer func() { // stop watching
		p.mu.Lock()
		p.keep = 0
		p.mu.Unlock()
		runtime.GC()
	}()
	for range 4 {
		b := make([]byte, bulkSize)
		p.put(&b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.kept() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d buffers still kept after collections", p.kept())
		}
		runtime.GC()
		time.Sleep(time.Millisecond) // the cleanup runs on its own goroutine
	}
}

// The transport's buffers of the largest class come back from the list.
func TestGetBufReusesBulkBuffers(t *testing.T) {
	b := getBuf(bulkSize - 10)
	if cap(*b) != bulkSize {
		t.Fatalf("cap %d, want the bulk class %d", cap(*b), bulkSize)
	}
	putBuf(b)
	// Other tests share the list: look for b among what it holds.
	var got []*[]byte
	defer func() {
		for _, g := range got {
			putBuf(g)
		}
	}()
	for range bulkKeep {
		g := getBuf(bulkSize)
		got = append(got, g)
		if g == b {
			return
		}
	}
	t.Fatal("a bulk buffer given back was not reused")
}
