package kvstore

import "fmt"

// Directory answers which shard owns a key and where the key sits inside
// that shard's initial key set. Call sites never do partition arithmetic
// themselves: they ask the Directory, so that keys can move later.
//
// Relocation hook: a future MovableDirectory (Lapse-style Localize, NuPS
// relocation, PSLD elastic moves) will wrap one of these static directories
// and overlay the keys that moved (a small map key -> current owner checked
// before the static answer). LocalIndex and ShardKeys keep describing the
// initial placement (they size dense arrays); moved keys are held by their
// new owner in a sparse side store. Bounds of an overlaid directory reports
// contiguous=false once any key moved, so Spans-style range splitting is
// only used while the static layout holds.
type Directory interface {
	NumShards() int
	Owner(key uint64) int                              // shard index in [0, NumShards)
	ShardKeys(shard int) uint64                        // how many keys that shard holds initially
	LocalIndex(key uint64) uint64                      // position of key within its owner's initial key set
	Bounds(shard int) (lo, hi uint64, contiguous bool) // [lo, hi) for range partitioning; contiguous=false for hash
}

// keyAtter is implemented by directories that can invert LocalIndex: the
// key at position local of shard's initial key set. Dense stores use it to
// visit their keys in Range.
type keyAtter interface {
	KeyAt(shard int, local uint64) uint64
}

// NewDirectory returns the static directory of spec's partitioning over
// shards shards. Size < shards is allowed: some shards then hold no keys.
func NewDirectory(spec TableSpec, shards int) (Directory, error) {
	spec = spec.WithDefaults()
	if shards < 1 {
		return nil, fmt.Errorf("%w: table %q: need at least one shard, got %d", ErrBadSpec, spec.Name, shards)
	}
	if spec.Size == 0 {
		return nil, fmt.Errorf("%w: table %q: size: must be > 0", ErrBadSpec, spec.Name)
	}
	n := uint64(shards)
	switch spec.Partition {
	case RangePartition:
		d := &rangeDirectory{size: spec.Size, n: n, base: spec.Size / n, rem: spec.Size % n}
		d.split = d.rem * (d.base + 1)
		return d, nil
	case HashPartition:
		return &hashDirectory{size: spec.Size, n: n}, nil
	default:
		return nil, fmt.Errorf("%w: table %q: partition: must be range or hash, got %q", ErrBadSpec, spec.Name, spec.Partition)
	}
}

// rangeDirectory: shard i holds [lo(i), lo(i+1)); the first rem shards
// hold base+1 keys, the others base.
type rangeDirectory struct {
	size, n, base, rem uint64
	split              uint64 // rem*(base+1): first key held by a short shard
}

func (d *rangeDirectory) NumShards() int { return int(d.n) }

// Owner of a key >= Size (a caller error) is the last shard.
func (d *rangeDirectory) Owner(key uint64) int {
	if key < d.split {
		return int(key / (d.base + 1))
	}
	if d.base == 0 || key >= d.size {
		return int(d.n - 1)
	}
	return int(d.rem + (key-d.split)/d.base)
}

func (d *rangeDirectory) lo(shard uint64) uint64 {
	return shard*d.base + min(shard, d.rem)
}

func (d *rangeDirectory) ShardKeys(shard int) uint64 {
	if shard < 0 || uint64(shard) >= d.n {
		return 0
	}
	if uint64(shard) < d.rem {
		return d.base + 1
	}
	return d.base
}

func (d *rangeDirectory) LocalIndex(key uint64) uint64 {
	return key - d.lo(uint64(d.Owner(key)))
}

func (d *rangeDirectory) Bounds(shard int) (lo, hi uint64, contiguous bool) {
	if shard < 0 || uint64(shard) >= d.n {
		return 0, 0, true
	}
	lo = d.lo(uint64(shard))
	return lo, lo + d.ShardKeys(shard), true
}

func (d *rangeDirectory) KeyAt(shard int, local uint64) uint64 {
	return d.lo(uint64(shard)) + local
}

// hashDirectory: key k lives on shard k mod n at local index k / n.
type hashDirectory struct {
	size, n uint64
}

func (d *hashDirectory) NumShards() int               { return int(d.n) }
func (d *hashDirectory) Owner(key uint64) int         { return int(key % d.n) }
func (d *hashDirectory) LocalIndex(key uint64) uint64 { return key / d.n }

func (d *hashDirectory) ShardKeys(shard int) uint64 {
	if shard < 0 || uint64(shard) >= d.n {
		return 0
	}
	k := d.size / d.n
	if uint64(shard) < d.size%d.n {
		k++
	}
	return k
}

func (d *hashDirectory) Bounds(int) (lo, hi uint64, contiguous bool) { return 0, 0, false }

func (d *hashDirectory) KeyAt(shard int, local uint64) uint64 {
	return local*d.n + uint64(shard)
}

// grouper groups keys by owner, stably, reusing its buffers: after the
// first calls with the largest batch and shard count it allocates nothing.
// A Grouper is not goroutine-safe; keep one per worker.
type grouper struct {
	owner []int32  // owner of keys[i]
	off   []int32  // off[s]..off[s+1]: shard s's slice of keys/pos
	keys  []uint64 // keys grouped by owner
	pos   []int32  // their positions in the input
	// whole is the shard owning every key of the last Group, -1 when
	// they are spread; then in is the input, which Keys returns as it is
	// and Pos (the identity) as nil.
	whole int
	in    []uint64
	dir   Directory // of the last spread Group
}

// Group groups keys by d.Owner, keeping input order within a shard.
func (g *grouper) Group(d Directory, keys []uint64) {
	n := d.NumShards()
	if n == 1 && len(keys) > 0 {
		g.whole, g.in = 0, keys
		return
	}
	if g.again(d, keys) {
		return
	}
	g.dir = d
	g.off = grow(g.off, n+1)
	clear(g.off)
	g.owner = grow(g.owner, len(keys))
	for i, k := range keys {
		o := d.Owner(k)
		g.owner[i] = int32(o)
		g.off[o+1]++
	}
	g.whole, g.in = -1, nil
	for s := 1; s <= n; s++ {
		if int(g.off[s]) == len(keys) && len(keys) > 0 {
			g.whole, g.in = s-1, keys // one owner: nothing to move
		}
		g.off[s] += g.off[s-1]
	}
	if g.whole >= 0 {
		return
	}
	g.keys = grow(g.keys, len(keys))
	g.pos = grow(g.pos, len(keys))
	// Fill using off[s] as a cursor, then shift back.
	for i, k := range keys {
		o := g.owner[i]
		c := g.off[o]
		g.keys[c] = k
		g.pos[c] = int32(i)
		g.off[o] = c + 1
	}
	copy(g.off[1:], g.off[:n])
	g.off[0] = 0
}

// again reports whether keys are the last Group's input once more, when
// that one was spread over shards (a batch's Add after its Get): its
// grouping then stands. It checks every key against the grouped copy
// (keys[pos[c]] == keys[c]'s copy for the permutation pos), which costs a
// fraction of grouping again (an owner lookup and two scattered stores per
// key). Directories are pointers (NewDirectory's), so comparing them is
// safe.
func (g *grouper) again(d Directory, keys []uint64) bool {
	if g.whole >= 0 || d != g.dir || len(keys) == 0 || len(keys) != len(g.keys) || len(g.pos) != len(keys) {
		return false
	}
	for c, p := range g.pos {
		if keys[p] != g.keys[c] {
			return false
		}
	}
	return true
}

// Keys returns the keys owned by shard, in input order. The slice is valid
// until the next Group.
func (g *grouper) Keys(shard int) []uint64 {
	if g.whole >= 0 {
		if shard == g.whole {
			return g.in
		}
		return nil
	}
	if shard < 0 || shard+1 >= len(g.off) {
		return nil
	}
	return g.keys[g.off[shard]:g.off[shard+1]]
}

// Pos returns the input positions of Keys(shard); nil when one shard
// owns every key (Whole), whose positions are 0, 1, ...
func (g *grouper) Pos(shard int) []int32 {
	if g.whole >= 0 || shard < 0 || shard+1 >= len(g.off) {
		return nil
	}
	return g.pos[g.off[shard]:g.off[shard+1]]
}

// Whole reports whether one shard owns every key of the last Group.
func (g *grouper) Whole() bool { return g.whole >= 0 }

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// Spans splits the keys [first, first+n) by owner. For a contiguous
// (range) directory it calls fn once per owner with the owner's
// contiguous part, in key order; otherwise it calls fn once per key
// (n = 1), so the caller decides whether span-wise access pays.
func Spans(d Directory, first uint64, n int, fn func(shard int, first uint64, n int)) {
	for n > 0 {
		s := d.Owner(first)
		_, hi, contiguous := d.Bounds(s)
		m := 1
		if contiguous {
			if hi <= first { // beyond Size: a caller error, hand the rest over as is
				m = n
			} else if hi-first < uint64(n) {
				m = int(hi - first)
			} else {
				m = n
			}
		}
		fn(s, first, m)
		first += uint64(m)
		n -= m
	}
}
