package kvstore

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func mustDir(t testing.TB, p Partition, size uint64, shards int) Directory {
	t.Helper()
	d, err := NewDirectory(TableSpec{Name: "t", Size: size, Partition: p}, shards)
	noErr(t, err)
	return d
}

func TestDirectoryTable(t *testing.T) {
	tests := []struct {
		name   string
		p      Partition
		size   uint64
		shards int
		owners []int    // owner of keys 0..len-1
		local  []uint64 // local index of keys 0..len-1
		counts []uint64 // ShardKeys
	}{
		{"range even", RangePartition, 6, 3, []int{0, 0, 1, 1, 2, 2}, []uint64{0, 1, 0, 1, 0, 1}, []uint64{2, 2, 2}},
		{"range remainder", RangePartition, 7, 3, []int{0, 0, 0, 1, 1, 2, 2}, []uint64{0, 1, 2, 0, 1, 0, 1}, []uint64{3, 2, 2}},
		{"range size<shards", RangePartition, 2, 4, []int{0, 1}, []uint64{0, 0}, []uint64{1, 1, 0, 0}},
		{"range one shard", RangePartition, 3, 1, []int{0, 0, 0}, []uint64{0, 1, 2}, []uint64{3}},
		{"hash", HashPartition, 7, 3, []int{0, 1, 2, 0, 1, 2, 0}, []uint64{0, 0, 0, 1, 1, 1, 2}, []uint64{3, 2, 2}},
		{"hash size<shards", HashPartition, 2, 4, []int{0, 1}, []uint64{0, 0}, []uint64{1, 1, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := mustDir(t, tt.p, tt.size, tt.shards)
			equal(t, tt.shards, d.NumShards())
			for k := range tt.owners {
				equal(t, tt.owners[k], d.Owner(uint64(k)), "owner of %d", k)
				equal(t, tt.local[k], d.LocalIndex(uint64(k)), "local of %d", k)
				equal(t, uint64(k), d.(keyAtter).KeyAt(tt.owners[k], tt.local[k]))
			}
			for s, c := range tt.counts {
				equal(t, c, d.ShardKeys(s), "shard %d", s)
				lo, hi, contiguous := d.Bounds(s)
				equal(t, tt.p == RangePartition, contiguous)
				if contiguous {
					equal(t, c, hi-lo)
				}
			}
		})
	}
}

func TestNewDirectoryErrors(t *testing.T) {
	_, err := NewDirectory(TableSpec{Name: "t", Size: 10}, 0)
	isErr(t, err, ErrBadSpec)
	_, err = NewDirectory(TableSpec{Name: "t"}, 2)
	isErr(t, err, ErrBadSpec)
	_, err = NewDirectory(TableSpec{Name: "t", Size: 2, Partition: "zigzag"}, 2)
	isErr(t, err, ErrBadSpec)
}

// TestDirectoryProperties checks, for random sizes and shard counts, that
// every key has one owner in range, local indexes are a bijection onto
// [0, ShardKeys(owner)), and the shard sizes add up to Size.
func TestDirectoryProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := rapid.SampledFrom([]Partition{RangePartition, HashPartition}).Draw(t, "partition")
		size := rapid.OneOf(
			rapid.Uint64Range(1, 300),
			rapid.Uint64Range(1, 1e12),
		).Draw(t, "size")
		shards := rapid.IntRange(1, 64).Draw(t, "shards")
		d, err := NewDirectory(TableSpec{Name: "t", Size: size, Partition: p}, shards)
		if err != nil {
			t.Fatal(err)
		}
		var total uint64
		for s := range shards {
			total += d.ShardKeys(s)
		}
		if total != size {
			t.Fatalf("sum of ShardKeys %d != size %d", total, size)
		}
		// Keys to probe: all when small, else random plus shard boundaries.
		var keys []uint64
		if size <= 300 {
			for k := range size {
				keys = append(keys, k)
			}
		} else {
			keys = rapid.SliceOfN(rapid.Uint64Range(0, size-1), 1, 200).Draw(t, "keys")
			keys = append(keys, 0, size-1)
			for s := range shards {
				if lo, hi, ok := d.Bounds(s); ok && hi > lo {
					keys = append(keys, lo, hi-1)
				}
			}
		}
		seen := map[[2]uint64]uint64{}
		for _, k := range keys {
			o := d.Owner(k)
			if o < 0 || o >= shards {
				t.Fatalf("owner %d of key %d out of range", o, k)
			}
			l := d.LocalIndex(k)
			if l >= d.ShardKeys(o) {
				t.Fatalf("key %d: local %d >= ShardKeys(%d) = %d", k, l, o, d.ShardKeys(o))
			}
			if lo, hi, ok := d.Bounds(o); ok && (k < lo || k >= hi) {
				t.Fatalf("key %d outside its owner's bounds [%d,%d)", k, lo, hi)
			}
			if other, dup := seen[[2]uint64{uint64(o), l}]; dup && other != k {
				t.Fatalf("keys %d and %d share shard %d local %d", other, k, o, l)
			}
			seen[[2]uint64{uint64(o), l}] = k
			if back := d.(keyAtter).KeyAt(o, l); back != k {
				t.Fatalf("KeyAt(%d,%d) = %d, want %d", o, l, back, k)
			}
			// Exactly one owner: no other shard's bounds contain k.
			for s := range shards {
				if lo, hi, ok := d.Bounds(s); ok && s != o && k >= lo && k < hi {
					t.Fatalf("key %d in bounds of shards %d and %d", k, o, s)
				}
			}
		}
	})
}

func TestGrouper(t *testing.T) {
	d := mustDir(t, HashPartition, 100, 3)
	keys := []uint64{5, 3, 9, 4, 0, 2, 7}
	var g grouper
	g.Group(d, keys)
	equal(t, []uint64{3, 9, 0}, g.Keys(0))
	equal(t, []int32{1, 2, 4}, g.Pos(0))
	equal(t, []uint64{4, 7}, g.Keys(1))
	equal(t, []int32{3, 6}, g.Pos(1))
	equal(t, []uint64{5, 2}, g.Keys(2))
	equal(t, []int32{0, 5}, g.Pos(2))
	check(t, g.Keys(3) == nil)

	// Keys of one shard only: the input as it is, positions the identity.
	one := []uint64{9, 0, 3}
	g.Group(d, one)
	check(t, g.Whole())
	equal(t, one, g.Keys(0))
	check(t, g.Pos(0) == nil && g.Keys(1) == nil && g.Keys(2) == nil)
	g.Group(d, keys) // spread again
	check(t, !g.Whole())
	equal(t, []uint64{4, 7}, g.Keys(1))
	equal(t, []int32{3, 6}, g.Pos(1))
	equal(t, []uint64{9, 0, 3}, one, "the input is left as it was")

	g.Group(d, nil)
	for s := range 3 {
		check(t, len(g.Keys(s)) == 0)
	}

	allocs := testing.AllocsPerRun(100, func() { g.Group(d, keys) })
	equal(t, 0.0, allocs, "Group allocates after warm-up")
}

func TestGrouperProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := rapid.SampledFrom([]Partition{RangePartition, HashPartition}).Draw(t, "partition")
		size := rapid.Uint64Range(1, 1000).Draw(t, "size")
		shards := rapid.IntRange(1, 10).Draw(t, "shards")
		d, _ := NewDirectory(TableSpec{Name: "t", Size: size, Partition: p}, shards)
		keys := rapid.SliceOf(rapid.Uint64Range(0, size-1)).Draw(t, "keys")
		var g grouper
		g.Group(d, keys)
		n := 0
		for s := range shards {
			ks, pos := g.Keys(s), g.Pos(s)
			if g.Whole() {
				// One shard owns every key: Keys is the input, Pos nil
				// (the identity).
				if pos != nil || (len(ks) > 0 && len(ks) != len(keys)) {
					t.Fatalf("whole: %d keys, pos %v", len(ks), pos)
				}
				for i := range ks {
					pos = append(pos, int32(i))
				}
			}
			if len(ks) != len(pos) {
				t.Fatalf("len mismatch")
			}
			for i, k := range ks {
				if keys[pos[i]] != k || d.Owner(k) != s {
					t.Fatalf("shard %d: key %d at pos %d wrong", s, k, pos[i])
				}
				if i > 0 && pos[i] <= pos[i-1] {
					t.Fatalf("not stable")
				}
			}
			n += len(ks)
		}
		if n != len(keys) {
			t.Fatalf("grouped %d of %d keys", n, len(keys))
		}
	})
}

func TestSpans(t *testing.T) {
	type span struct {
		shard int
		first uint64
		n     int
	}
	collect := func(d Directory, first uint64, n int) []span {
		var out []span
		Spans(d, first, n, func(s int, f uint64, m int) { out = append(out, span{s, f, m}) })
		return out
	}
	r := mustDir(t, RangePartition, 10, 3) // [0,4) [4,7) [7,10)
	equal(t, []span{{0, 2, 2}, {1, 4, 3}, {2, 7, 1}}, collect(r, 2, 6))
	equal(t, []span{{1, 5, 1}}, collect(r, 5, 1))
	check(t, collect(r, 5, 0) == nil)
	e := mustDir(t, RangePartition, 2, 4) // empty shards 2, 3
	equal(t, []span{{0, 0, 1}, {1, 1, 1}}, collect(e, 0, 2))
	h := mustDir(t, HashPartition, 10, 3)
	equal(t, []span{{2, 2, 1}, {0, 3, 1}, {1, 4, 1}}, collect(h, 2, 3))
}

// TestGrouperAgain: a grouper called again with the same keys (the same
// slice, a copy, or the slice changed in place at one key) or other keys,
// by the same directory or another, groups every call as a fresh grouper
// does.
func TestGrouperAgain(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.Uint64Range(2, 500).Draw(t, "size")
		dirs := []Directory{}
		for _, p := range []Partition{RangePartition, HashPartition} {
			d, _ := NewDirectory(TableSpec{Name: "t", Size: size, Partition: p}, rapid.IntRange(2, 5).Draw(t, "shards"))
			dirs = append(dirs, d)
		}
		var g grouper
		keys := rapid.SliceOfN(rapid.Uint64Range(0, size-1), 1, 50).Draw(t, "keys")
		for call := range rapid.IntRange(1, 8).Draw(t, "calls") {
			switch rapid.IntRange(0, 3).Draw(t, "how") {
			case 1:
				keys = append([]uint64(nil), keys...)
			case 2: // in place
				keys[rapid.IntRange(0, len(keys)-1).Draw(t, "at")] = rapid.Uint64Range(0, size-1).Draw(t, "to")
			case 3:
				keys = rapid.SliceOfN(rapid.Uint64Range(0, size-1), 1, 50).Draw(t, "other")
			}
			d := dirs[rapid.IntRange(0, 1).Draw(t, "dir")]
			g.Group(d, keys)
			var fresh grouper
			fresh.Group(d, keys)
			for s := range d.NumShards() {
				if !slices.Equal(g.Keys(s), fresh.Keys(s)) || !slices.Equal(g.Pos(s), fresh.Pos(s)) {
					t.Fatalf("call %d shard %d: keys %v pos %v, fresh %v %v", call, s, g.Keys(s), g.Pos(s), fresh.Keys(s), fresh.Pos(s))
				}
			}
		}
	})
}
