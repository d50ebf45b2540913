package assign

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/flexps/flexps/datastore"
	"pgregory.net/rapid"
)

func blk(path string, length int64, hosts ...string) datastore.Block {
	return datastore.Block{Path: path, Length: length, FileSize: length, Hosts: hosts}
}

// halves: n blocks of 100 bytes on h1, then n on h2.
func halves(n int) []datastore.Block {
	var bs []datastore.Block
	for _, h := range []string{"h1", "h2"} {
		for i := range n {
			bs = append(bs, blk(fmt.Sprintf("/%s/%d", h, i), 100, h))
		}
	}
	return bs
}

func TestLocalPreferenceEqualRates(t *testing.T) {
	workers := []Worker{{0, "h1"}, {1, "h2"}, {2, "h1"}, {3, "h2"}}
	blocks := halves(20)
	a := New(blocks, workers)
	for done := false; !done; {
		done = true
		for _, w := range workers {
			b, local, ok := a.Next(w.Rank, 0)
			if ok {
				done = false
				if !local || !slices.Contains(b.Hosts, w.Host) {
					t.Fatalf("rank %d on %s got %v (local=%v)", w.Rank, w.Host, b, local)
				}
				a.Confirm(w.Rank, 0, b)
			}
		}
	}
	s := a.Stats(0)
	if got := s.LocalFraction(); got != 1.0 {
		t.Fatalf("local fraction %v, want 1.0", got)
	}
	local, total := Locality(Random(blocks, workers, 1), workers)
	random := float64(local) / float64(total)
	t.Logf("pull: local fraction 1.0; random: %.2f", random)
	if random >= 1.0 {
		t.Fatalf("random baseline local fraction %v, want below the assigner's 1.0", random)
	}
	if s.Remaining != 0 || s.Outstanding != 0 {
		t.Fatalf("stats after the epoch: %+v", s)
	}
	for r := range 4 {
		if st := s.PerRank[r]; st.Blocks != 10 || st.Confirmed != 10 || st.LocalBytes != 1000 {
			t.Fatalf("rank %d: %+v", r, st)
		}
	}
}

func TestSlowWorkerGetsFewer(t *testing.T) {
	// All blocks on one host, both workers there; rank 0 pulls three times
	// for each pull of rank 1.
	var blocks []datastore.Block
	for i := range 40 {
		blocks = append(blocks, blk(fmt.Sprintf("/f/%d", i), 10, "h"))
	}
	a := New(blocks, []Worker{{0, "h"}, {1, "h"}})
	for ok := true; ok; {
		for range 3 {
			_, _, ok = a.Next(0, 0)
		}
		_, _, ok2 := a.Next(1, 0)
		ok = ok || ok2
	}
	s := a.Stats(0)
	fast, slow := s.PerRank[0].Blocks, s.PerRank[1].Blocks
	if fast+slow != 40 || fast != 30 || slow != 10 {
		t.Fatalf("fast %d, slow %d blocks; want 30 and 10", fast, slow)
	}
}

func TestRemotePreference(t *testing.T) {
	workers := []Worker{{0, "h1"}, {1, "h3"}}
	a := New([]datastore.Block{
		blk("/on-h1", 500, "h1"),       // rank 0 could read it locally
		blk("/orphan-small", 10, "h4"), // nobody active on h4
		blk("/orphan-big", 20, "h4", "h5"),
	}, workers)
	var got []string
	for range 3 {
		b, local, ok := a.Next(1, 0) // h3 holds nothing
		if !ok || local {
			t.Fatalf("Next: %v local=%v ok=%v", b, local, ok)
		}
		got = append(got, b.Path)
	}
	want := []string{"/orphan-big", "/orphan-small", "/on-h1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if _, _, ok := a.Next(0, 0); ok {
		t.Fatal("epoch should be empty")
	}
}

func TestLocalPrefersBlocksOthersCannotReadLocally(t *testing.T) {
	a := New([]datastore.Block{
		blk("/shared", 100, "h1", "h2"),
		blk("/mine", 50, "h1"),
	}, []Worker{{0, "h1"}, {1, "h2"}})
	b, local, _ := a.Next(0, 0)
	if b.Path != "/mine" || !local {
		t.Fatalf("got %v local=%v, want /mine (h2's worker can still read /shared locally)", b, local)
	}
	b, local, _ = a.Next(1, 0)
	if b.Path != "/shared" || !local {
		t.Fatalf("got %v local=%v, want /shared", b, local)
	}
}

func TestEpochsIndependent(t *testing.T) {
	a := New(halves(2), []Worker{{0, "h1"}})
	for epoch := range 3 {
		n := 0
		for {
			if _, _, ok := a.Next(0, epoch); !ok {
				break
			}
			n++
		}
		if n != 4 {
			t.Fatalf("epoch %d handed %d blocks, want 4", epoch, n)
		}
	}
	if s := a.Stats(7); s.Remaining != 4 || s.RemainingBytes != 400 || len(s.PerRank) != 0 {
		t.Fatalf("unused epoch stats %+v", s)
	}
}

func TestReleaseRequeuesUnconfirmed(t *testing.T) {
	a := New(halves(2), []Worker{{0, "h1"}, {1, "h2"}})
	b1, _, _ := a.Next(0, 0)
	b2, _, _ := a.Next(0, 0)
	a.Confirm(0, 0, b1)
	if s := a.Stats(0); s.Outstanding != 1 || s.Remaining != 2 {
		t.Fatalf("stats %+v", s)
	}
	got := a.Release(0, 0) // rank 0 died
	if !reflect.DeepEqual(got, []datastore.Block{b2}) {
		t.Fatalf("released %v, want [%v]", got, b2)
	}
	if got := a.Release(0, 0); got != nil {
		t.Fatalf("second release %v", got)
	}
	if a.Release(0, 9) != nil {
		t.Fatal("release in an unused epoch")
	}
	s := a.Stats(0)
	if s.Remaining != 3 || s.Outstanding != 0 || s.PerRank[0].Blocks != 1 || s.PerRank[0].Confirmed != 1 {
		t.Fatalf("stats after release %+v", s)
	}
	seen := map[string]bool{}
	for {
		b, _, ok := a.Next(1, 0)
		if !ok {
			break
		}
		seen[b.Path] = true
	}
	if len(seen) != 3 || !seen[b2.Path] || seen[b1.Path] {
		t.Fatalf("survivor read %v", seen)
	}
}

// TestEveryBlockOncePerEpoch drives random requests, confirmations and
// worker deaths over two epochs and checks that, per epoch, every block is
// confirmed exactly once across the workers.
func TestEveryBlockOncePerEpoch(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		hosts := []string{"h0", "h1", "h2", "h3"}
		nb := rapid.IntRange(0, 25).Draw(rt, "blocks")
		var blocks []datastore.Block
		for i := range nb {
			var hs []string
			for _, h := range hosts {
				if rapid.IntRange(0, 2).Draw(rt, "replica") == 0 {
					hs = append(hs, h)
				}
			}
			blocks = append(blocks, datastore.Block{
				Path: fmt.Sprintf("/f%d", i%3), Offset: int64(i) * 1000,
				Length: int64(rapid.IntRange(1, 1000).Draw(rt, "length")), Hosts: hs,
			})
		}
		nw := rapid.IntRange(1, 5).Draw(rt, "workers")
		var workers []Worker
		for r := range nw {
			workers = append(workers, Worker{Rank: r, Host: rapid.SampledFrom(append(hosts, "h9")).Draw(rt, "host")})
		}
		a := New(blocks, workers)
		const epochs = 2
		confirmed := make([]map[string]int, epochs)
		out := make([]map[int][]datastore.Block, epochs)
		for e := range epochs {
			confirmed[e] = map[string]int{}
			out[e] = map[int][]datastore.Block{}
		}
		confirm := func(e, r int, b datastore.Block) {
			a.Confirm(r, e, b)
			confirmed[e][b.String()]++
		}
		for range rapid.IntRange(0, 80).Draw(rt, "steps") {
			e := rapid.IntRange(0, epochs-1).Draw(rt, "epoch")
			r := rapid.IntRange(0, nw-1).Draw(rt, "rank")
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0, 1, 2:
				b, local, ok := a.Next(r, e)
				if !ok {
					if s := a.Stats(e); s.Remaining != 0 {
						rt.Fatalf("Next said empty with %d remaining", s.Remaining)
					}
					continue
				}
				if local != slices.Contains(b.Hosts, workers[r].Host) {
					rt.Fatalf("local=%v for %v on %s", local, b, workers[r].Host)
				}
				out[e][r] = append(out[e][r], b)
			case 3, 4:
				if len(out[e][r]) > 0 {
					k := rapid.IntRange(0, len(out[e][r])-1).Draw(rt, "which")
					confirm(e, r, out[e][r][k])
					out[e][r] = slices.Delete(out[e][r], k, k+1)
				}
			case 5: // r dies
				got := a.Release(r, e)
				if len(got) != len(out[e][r]) {
					rt.Fatalf("released %v, outstanding %v", got, out[e][r])
				}
				out[e][r] = nil
			}
		}
		// Drain: every rank confirms what it holds and pulls until empty.
		for e := range epochs {
			for r := range nw {
				for _, b := range out[e][r] {
					confirm(e, r, b)
				}
				for {
					b, _, ok := a.Next(r, e)
					if !ok {
						break
					}
					confirm(e, r, b)
				}
			}
			s := a.Stats(e)
			if s.Remaining != 0 || s.Outstanding != 0 || len(confirmed[e]) != nb {
				rt.Fatalf("epoch %d: stats %+v, %d distinct confirmed of %d", e, s, len(confirmed[e]), nb)
			}
			var sum int
			for _, st := range s.PerRank {
				sum += st.Blocks
				if st.Confirmed != st.Blocks {
					rt.Fatalf("epoch %d: %+v", e, st)
				}
			}
			if sum != nb {
				rt.Fatalf("epoch %d: per-rank blocks sum to %d, want %d", e, sum, nb)
			}
			for b, n := range confirmed[e] {
				if n != 1 {
					rt.Fatalf("epoch %d: %s confirmed %d times", e, b, n)
				}
			}
		}
	})
}

func TestRandomDealsEvenly(t *testing.T) {
	workers := []Worker{{2, "h2"}, {0, "h1"}, {1, "h1"}}
	blocks := halves(5)
	as := Random(blocks, workers, 7)
	n := 0
	for r, bs := range as {
		if len(bs) < 3 || len(bs) > 4 {
			t.Fatalf("rank %d got %d blocks", r, len(bs))
		}
		n += len(bs)
	}
	if n != 10 || !reflect.DeepEqual(as, Random(blocks, workers, 7)) {
		t.Fatal("Random must deal every block once and be deterministic per seed")
	}
	if len(Random(blocks, nil, 1)) != 0 {
		t.Fatal("no workers, no assignment")
	}
}

func TestNextPrefersLastEpochsBlocks(t *testing.T) {
	var blocks []datastore.Block
	for i := 0; i < 12; i++ {
		blocks = append(blocks, datastore.Block{Path: "f", Offset: int64(i) * 10, Length: 10, Hosts: []string{"h"}})
	}
	a := New(blocks, []Worker{{0, "h"}, {1, "h"}, {2, "h"}})
	got := map[int][]int64{}
	for r := 0; ; r = (r + 1) % 3 {
		b, _, ok := a.Next(r, 0)
		if !ok {
			break
		}
		got[r] = append(got[r], b.Offset)
	}
	// Epoch 1, pulled in a different order: each rank gets its epoch-0 blocks back.
	again := map[int][]int64{}
	for _, r := range []int{2, 2, 1, 0, 2, 1, 0, 1, 0, 2, 1, 0} {
		b, _, ok := a.Next(r, 1)
		if !ok {
			t.Fatal("ran out of blocks")
		}
		again[r] = append(again[r], b.Offset)
	}
	for r := 0; r < 3; r++ {
		if !sameSet(got[r], again[r]) {
			t.Fatalf("rank %d: epoch 0 %v, epoch 1 %v", r, got[r], again[r])
		}
	}
}

func sameSet(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[int64]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// TestExactlyOnceUnderDeaths plays the master's protocol against random
// deaths: a worker asks Next; an empty answer is given only once the epoch
// is Settled (until then the worker waits and asks again); a worker
// processes a block and confirms it; a dead worker is Removed, and what it
// processed without confirming does not count. The model is the multiset
// of (epoch, block) processed by live workers plus those confirmed by
// workers before they died: whenever a worker is told an epoch is over,
// every block of it is in the multiset exactly once.
func TestExactlyOnceUnderDeaths(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		nb := rapid.IntRange(0, 20).Draw(rt, "blocks")
		var blocks []datastore.Block
		for i := range nb {
			blocks = append(blocks, datastore.Block{Path: "/f", Offset: int64(i) * 100, Length: 100, Hosts: []string{fmt.Sprintf("h%d", i%3)}})
		}
		nw := rapid.IntRange(1, 5).Draw(rt, "workers")
		var workers []Worker
		for r := range nw {
			workers = append(workers, Worker{Rank: r, Host: fmt.Sprintf("h%d", r%3)})
		}
		a := New(blocks, workers)
		const epochs = 2
		counted := make([]map[int64]int, epochs)             // the model
		held := make([]map[int][]datastore.Block, epochs)    // handed, not yet processed
		partial := make([]map[int][]datastore.Block, epochs) // processed, not confirmed
		over := make([]map[int]bool, epochs)                 // told the epoch is over
		for e := range epochs {
			counted[e], held[e], partial[e], over[e] = map[int64]int{}, map[int][]datastore.Block{}, map[int][]datastore.Block{}, map[int]bool{}
		}
		dead := map[int]bool{}
		check := func(e int) {
			for _, b := range blocks {
				if n := counted[e][b.Offset]; n != 1 {
					rt.Fatalf("epoch %d is over for a worker but block %d was processed %d times", e, b.Offset, n)
				}
			}
		}
		ask := func(e, r int) bool {
			b, _, ok := a.Next(r, e)
			if ok {
				if over[e][r] {
					rt.Fatalf("rank %d got block %d of epoch %d after being told it was over", r, b.Offset, e)
				}
				held[e][r] = append(held[e][r], b)
				return true
			}
			if a.Settled(e) {
				over[e][r] = true
				check(e)
			}
			return false
		}
		process := func(e, r int) {
			if len(held[e][r]) == 0 {
				return
			}
			b := held[e][r][0]
			held[e][r] = held[e][r][1:]
			partial[e][r] = append(partial[e][r], b)
		}
		confirm := func(e, r int) {
			if len(partial[e][r]) == 0 {
				return
			}
			b := partial[e][r][0]
			partial[e][r] = partial[e][r][1:]
			if !a.Confirm(r, e, b) {
				rt.Fatalf("rank %d's confirmation of block %d refused", r, b.Offset)
			}
			counted[e][b.Offset]++
		}
		for range rapid.IntRange(0, 100).Draw(rt, "steps") {
			e := rapid.IntRange(0, epochs-1).Draw(rt, "epoch")
			r := rapid.IntRange(0, nw-1).Draw(rt, "rank")
			if dead[r] {
				// A fenced worker that still runs is refused.
				if _, _, ok := a.Next(r, e); ok {
					rt.Fatalf("removed rank %d got a block", r)
				}
				continue
			}
			switch rapid.IntRange(0, 6).Draw(rt, "action") {
			case 0, 1:
				ask(e, r)
			case 2, 3:
				process(e, r)
			case 4, 5:
				confirm(e, r)
			case 6:
				if r == 0 {
					continue // one worker survives
				}
				dead[r] = true
				released := a.Remove(r)
				for n := range epochs {
					if len(released[n]) != len(held[n][r])+len(partial[n][r]) {
						rt.Fatalf("rank %d died holding %d+%d blocks of epoch %d, %d released", r, len(held[n][r]), len(partial[n][r]), n, len(released[n]))
					}
					held[n][r], partial[n][r] = nil, nil
				}
				for _, b := range released[0] {
					if a.Confirm(r, 0, b) {
						rt.Fatalf("removed rank %d confirmed block %d", r, b.Offset)
					}
				}
			}
		}
		// Drain: the living work until each is told every epoch is over.
		for e := range epochs {
			for progress := true; progress; {
				progress = false
				for r := range nw {
					if dead[r] || over[e][r] {
						continue
					}
					for len(held[e][r]) > 0 || len(partial[e][r]) > 0 {
						process(e, r)
						confirm(e, r)
					}
					if ask(e, r) || over[e][r] {
						progress = true
					}
				}
			}
			for r := range nw {
				if !dead[r] && !over[e][r] {
					rt.Fatalf("rank %d never told epoch %d is over", r, e)
				}
			}
		}
	})
}

func TestRemoveAndAbandon(t *testing.T) {
	a := New(halves(2), []Worker{{0, "h1"}, {1, "h2"}})
	b0, _, _ := a.Next(0, 0)
	b1, _, _ := a.Next(0, 1)
	c, _, _ := a.Next(1, 0)
	if a.Settled(0) {
		t.Fatal("settled with blocks queued")
	}
	got := a.Remove(0)
	if !reflect.DeepEqual(got, map[int][]datastore.Block{0: {b0}, 1: {b1}}) {
		t.Fatalf("Remove: %v", got)
	}
	if _, _, ok := a.Next(0, 0); ok {
		t.Fatal("a removed rank got a block")
	}
	if a.Confirm(0, 0, b0) || a.Abandon(0, 0) != 0 {
		t.Fatal("a removed rank confirmed")
	}
	for {
		b, _, ok := a.Next(1, 0)
		if !ok {
			break
		}
		if !a.Confirm(1, 0, b) {
			t.Fatalf("confirm of %v refused", b)
		}
	}
	if a.Settled(0) {
		t.Fatal("settled with a block unconfirmed")
	}
	if n := a.Abandon(1, 0); n != 1 || !a.Settled(0) {
		t.Fatalf("abandon: %d, settled %v", n, a.Settled(0))
	}
	if a.Confirm(1, 0, c) {
		t.Fatal("an abandoned block confirmed again")
	}
	d, _, _ := a.Next(1, 5)
	if n := a.AbandonAll(1); n != 1 || !a.Settled(0) || a.Confirm(1, 5, d) {
		t.Fatalf("AbandonAll: %d", n)
	}
	if New(nil, nil).Settled(3) != true {
		t.Fatal("no input: every epoch is settled")
	}
}

// TestSettledBut: an epoch whose only unconfirmed blocks are with skipped
// ranks (waiting at a barrier) is settled but for them, and not otherwise;
// Began says whether an epoch began.
func TestSettledBut(t *testing.T) {
	a := New(halves(1), []Worker{{0, "h1"}, {1, "h2"}})
	b0, _, _ := a.Next(0, 0)
	b1, _, _ := a.Next(1, 0)
	for _, c := range []struct {
		name string
		skip map[int]bool
		want bool
	}{
		{"none skipped", nil, false},
		{"one of two skipped", map[int]bool{0: true}, false},
		{"both skipped", map[int]bool{0: true, 1: true}, true},
		{"a rank without blocks skipped", map[int]bool{5: true}, false},
	} {
		if got := a.SettledBut(0, c.skip); got != c.want {
			t.Errorf("%s: SettledBut = %v, want %v", c.name, got, c.want)
		}
	}
	if !a.Began(0) || a.Began(1) {
		t.Fatal("Began: want epoch 0 begun, epoch 1 not")
	}
	a.Confirm(1, 0, b1)
	if !a.SettledBut(0, map[int]bool{0: true}) || a.Settled(0) {
		t.Fatal("rank 1 confirmed: want settled but for rank 0, not settled")
	}
	a.Confirm(0, 0, b0)
	if !a.Settled(0) {
		t.Fatal("every block confirmed: want settled")
	}
}
