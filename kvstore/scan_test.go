package kvstore

import (
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// scanAll pages through st with pages of page keys and returns what it saw.
func scanAll(t interface {
	Helper()
	Fatalf(string, ...any)
}, st Store, page int) (map[uint64][]float64, int) {
	t.Helper()
	seen := map[uint64][]float64{}
	w := st.Spec().Width
	var keys []uint64
	var vals []float64
	pages := 0
	for cursor, more := uint64(0), true; more; pages++ {
		var err error
		keys, vals, cursor, more, err = scanStore(st, cursor, page, keys[:0], vals[:0])
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if len(keys) > page || len(vals) != len(keys)*w {
			t.Fatalf("page of %d keys and %d values, page size %d, width %d", len(keys), len(vals), page, w)
		}
		if more && len(keys) != page {
			t.Fatalf("a short page (%d of %d keys) before the last", len(keys), page)
		}
		for i, k := range keys {
			if _, dup := seen[k]; dup {
				t.Fatalf("key %d visited twice", k)
			}
			seen[k] = slices.Clone(vals[i*w : (i+1)*w])
		}
	}
	return seen, pages
}

// Property: paging through a shard visits exactly the keys Range visits,
// each once, with the same values, whatever the page size, storage, dtype
// and partitioning.
func TestStoreScanMatchesRange(t *testing.T) {
	for _, c := range allStoreCases() {
		t.Run(c.String(), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				size := rapid.Uint64Range(1, 3000).Draw(rt, "size")
				shards := rapid.IntRange(1, 4).Draw(rt, "shards")
				shard := rapid.IntRange(0, shards-1).Draw(rt, "shard")
				width := rapid.IntRange(1, 3).Draw(rt, "width")
				page := rapid.IntRange(1, 700).Draw(rt, "page")
				st, d := newTestStore(t, c, size, width, shards, shard, "uniform:1")
				owned := ownedKeys(d, shard, size)
				// Write a random subset (a sparse shard holds only these).
				for _, k := range owned {
					if rapid.IntRange(0, 2).Draw(rt, "write") == 0 {
						st.Add([]uint64{k}, slices.Repeat([]float64{float64(k)}, width))
					}
				}
				want := map[uint64][]float64{}
				st.Range(func(k uint64, v []float64) bool { want[k] = slices.Clone(v); return true })
				got, _ := scanAll(rt, st, page)
				if !maps.EqualFunc(want, got, slices.Equal) {
					rt.Fatalf("scan saw %d keys, Range %d (or values differ)", len(got), len(want))
				}
			})
		})
	}
}

// A dense hash-partitioned shard is read in ceil(keys/page) pages: the
// bulk read costs what the shard holds, not one request per key.
func TestStoreScanPages(t *testing.T) {
	st, _ := newTestStore(t, storeCase{Dense, Float64, HashPartition}, 200_000, 1, 4, 1, "zero")
	got, pages := scanAll(t, st, 1000)
	equal(t, 50_000, len(got))
	equal(t, 50, pages)
}

// A sparse shard that grows between two pages goes on from the cursor:
// a cursor names a key's hash, not a slot, so every key held before the
// scan is visited exactly once, whatever inserts and rebuilds moved, and
// no key is visited twice.
func TestSparseScanAcrossGrowth(t *testing.T) {
	for _, part := range []Partition{RangePartition, HashPartition} {
		t.Run(string(part), func(t *testing.T) {
			st, _ := newTestStore(t, storeCase{Sparse, Float64, part}, 1<<40, 1, 1, 0, "zero")
			// Distinct keys spread over the key space: i times an odd
			// number is a bijection modulo 2^40.
			next := uint64(0)
			add := func(n int) {
				for range n {
					k := (next * 0x9e3779b97f4a7c15) & (1<<40 - 1)
					st.Add([]uint64{k}, []float64{float64(k % 97)})
					next++
				}
			}
			const held = 3000
			add(held)
			seen := map[uint64]bool{}
			var keys []uint64
			var vals []float64
			cursor, more := uint64(0), true
			for more {
				var err error
				keys, vals, cursor, more, err = scanStore(st, cursor, 200, keys[:0], vals[:0])
				noErr(t, err)
				for i, k := range keys {
					must(t, !seen[k], "key %d visited twice", k)
					seen[k] = true
					equal(t, float64(k%97), vals[i], "key %d", k)
				}
				add(100) // every stripe grows about twice during the scan
			}
			for i := range uint64(held) {
				k := (i * 0x9e3779b97f4a7c15) & (1<<40 - 1)
				must(t, seen[k], "key %d held before the scan not visited", k)
			}
			must(t, st.Len() > 3*held/2, "the shard grew during the scan (%d keys)", st.Len())
		})
	}
}
