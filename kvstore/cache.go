package kvstore

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// The process cache keeps values of remote keys a worker read, so a later
// read may be served from memory as long as the stage's consistency model
// allows. Every value is cached with the stamp of the read that fetched it
// (CacheSource.GetStamped): the stage's minimum worker clock m, read by the
// shard before the values, so the value reflects every Add of every
// iteration below m. A read at worker clock c under staleness bound s must
// reflect every Add of the clocks <= c-s-1, so the cached value serves it
// iff c-s <= m (BSP: s = 0, so never across one of the worker's own clocks;
// ASP: always). Otherwise the entry is stale and is fetched again.
//
// The worker's own Adds are applied to cached entries as they are sent
// (read-your-writes without a round trip): the cached value then equals
// the fetched value plus this worker's later deltas, and the fetched value
// already held its earlier ones because a shard applies a connection's
// messages in order. Keys of the worker's own slave are served from its
// shards' memory by the TableClient and are never cached.

// CacheKind names a process-cache eviction policy.
type CacheKind string

const (
	CacheNone CacheKind = "none" // no cache: calls go straight to the table
	CacheLRU  CacheKind = "lru"  // evict the least recently read key
	CacheLFU  CacheKind = "lfu"  // evict the least frequently read key (aged; ties: least recent)
)

// ErrBadCache is wrapped by every process-cache configuration error.
var ErrBadCache = errors.New("invalid process cache")

// maxCacheKeys bounds a cache's capacity: slots are int32.
const maxCacheKeys = 1 << 30

// CacheStats count what a cache did with remote keys (local keys are not
// counted). Every remote key read is a hit or a miss; Stale counts the
// misses whose key was cached but too old for the bound.
// Bypassed counts the reads that went straight to the table because the
// cache did not pay (see cacheGovernor).
type CacheStats struct {
	Hits, Misses, Evictions, Stale, Bypassed int64
	// Refreshed counts cached keys a read fetched ahead, beside its own
	// (see CachedTable.refreshAhead).
	Refreshed int64
}

// HitRate is Hits / (Hits + Misses), 0 before any read.
func (s CacheStats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// CacheSource is the table a CachedTable caches: a TableClient, or any
// other access to a sharded table that can stamp its reads.
type CacheSource interface {
	Spec() TableSpec
	// Consistency is the stage's model; it sets how long a cached value
	// may serve reads.
	Consistency() Consistency
	// WorkerClock is the worker's clock: iterations finished.
	WorkerClock() int64
	// Local reports whether key is served from this process's memory
	// (such keys are never cached); AllLocal whether every key is.
	Local(key uint64) bool
	AllLocal() bool
	// GetStamped is Get returning the read's stamp (see
	// TableClient.GetStamped).
	GetStamped(keys []uint64, out []float64) (stamp int64, err error)
	Get(keys []uint64, out []float64) error
	Add(keys []uint64, deltas []float64) error
	GetChunk(chunks []uint64, out []float64) error
	AddChunk(chunks []uint64, deltas []float64) error
	// Chunk is the key range of chunk id.
	Chunk(id uint64) (first uint64, n int, err error)
	// Err is the first asynchronous error (a failed Add), sticky.
	Err() error
}

// CachedTable is a CacheSource with a process cache of remote keys. It
// has TableClient's Get/Add/GetChunk/AddChunk and, like its Client, is
// not safe for concurrent use. All of the worker's writes to the table
// must go through it (a write through the TableClient itself would not
// reach the cache).
//
// Get serves fresh cached keys from memory and fetches the rest (misses,
// stale entries and local keys) in one underlying read, caching the
// remote ones; in steady state it allocates nothing beyond what that read
// does. Add and AddChunk send the deltas and apply them to cached
// entries. GetChunk passes through without consulting or filling the
// cache: chunk reads are bulk reads whose values would churn the
// per-key cache of hot keys.
//
// The cache is used only while it pays: a governor (cacheGovernor) times
// the worker's iterations through the cache and straight to the table,
// now and then, and sends reads and writes past the cache (counted as
// Bypassed) while that is faster. Values are dropped when reads come back
// to the cache, so the way taken never changes what a read may return.
type CachedTable struct {
	t     CacheSource
	spec  TableSpec
	bound int64 // staleness bound in clocks
	asp   bool  // stamps are fetch clocks, not the stage's min clock
	w     int
	f32   bool
	core  *cacheCore // nil: CacheNone, or every key is local
	stats CacheStats
	gov   cacheGovernor
	now   func() time.Time // the governor's clock

	miss    []uint64  // keys of the current read that go to the table
	missAt  []int32   // their positions in the caller's keys
	missOut []float64 // their values

	// Refreshed along with a read's misses (see refreshAhead): the slots
	// of cached keys the read does not ask for, and a mark per slot of
	// the current read's (mark[s] == gen).
	ahead []int32
	mark  []uint32
	gen   uint32

	// The last Get's keys and the slot each ended in (-1: not cached). A
	// training step adds to the keys it just read, so Add finds their
	// slots here with one sequential comparison instead of an index probe
	// per key; a slot is trusted only while it still holds its key.
	lastKeys []uint64
	lastSlot []int32

	freeNext *cachedNext // a finished GetNext through the cache, for reuse
}

// NewCachedTable wraps t with a cache of kind holding at most capacity
// keys. Kind CacheNone (or "") passes every call through. The staleness
// bound is the client's Consistency; the cache refuses SparseSSP, whose
// controller learns a slow worker's keys from the reads it sends, which a
// cache would hide from it.
func NewCachedTable(t CacheSource, kind CacheKind, capacity int) (*CachedTable, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: no table", ErrBadCache)
	}
	spec, cons := t.Spec(), t.Consistency()
	name := spec.Name
	switch kind {
	case "", CacheNone:
		kind = CacheNone
	case CacheLRU, CacheLFU:
		if capacity <= 0 || capacity > maxCacheKeys {
			return nil, fmt.Errorf("%w: table %q: a %s cache needs a capacity in [1, %d] keys, got %d", ErrBadCache, name, kind, maxCacheKeys, capacity)
		}
		if cons.Kind == SparseSSP {
			return nil, fmt.Errorf("%w: table %q: a process cache hides reads from the sparse_ssp controller; use ssp or no cache", ErrBadCache, name)
		}
	default:
		return nil, fmt.Errorf("%w: table %q: cache kind must be none, lru or lfu, got %q", ErrBadCache, name, kind)
	}
	ct := &CachedTable{t: t, spec: spec, bound: int64(cons.Bound()), w: spec.Width, f32: spec.DType == Float32,
		gov: newCacheGovernor(cacheWindow, maxCacheRun), now: time.Now}
	if cons.Kind == ASP {
		// ASP sets no bound, but a value cached forever would hide other
		// workers' updates to hot keys for good: entries are stamped with
		// the worker's clock when fetched and refreshed after
		// ASPCacheClocks iterations.
		ct.asp, ct.bound = true, aspCacheClocks
	}
	if kind != CacheNone && !t.AllLocal() {
		ct.core = newCacheCore(kind, capacity, spec.Width)
		ct.core.track(spec.Size)
	}
	return ct, nil
}

// aspCacheClocks is how many iterations an ASP stage's cached value lives.
const aspCacheClocks = 4

// Spec is the table's declaration.
func (ct *CachedTable) Spec() TableSpec { return ct.spec }

// Stats returns the cache's counters.
func (ct *CachedTable) Stats() CacheStats {
	s := ct.stats
	if ct.core != nil {
		s.Evictions = ct.core.evictions
	}
	return s
}

// Len is how many keys are cached.
func (ct *CachedTable) Len() int {
	if ct.core == nil {
		return 0
	}
	return ct.core.n
}

// Purge drops every cached value (counters stay).
func (ct *CachedTable) Purge() {
	if ct.core != nil {
		ct.core.purge()
	}
}

// fresh reports whether a value stamped stamp may serve a read at clock.
func (ct *CachedTable) fresh(stamp, clock int64) bool {
	return ct.bound < 0 || clock-ct.bound <= stamp
}

// lastSlot values that are no slot.
const (
	slotNone  = -1 // a remote key that is not cached
	slotLocal = -2 // a key of this slave's memory, never cached
)

// Get reads keys into out (len(keys)*Width values): fresh cached keys from
// the cache, the others in one read of the table. While the governor
// bypasses the cache the read goes straight to the table.
func (ct *CachedTable) Get(keys []uint64, out []float64) error {
	if !ct.through(keys) {
		return ct.t.Get(keys, out)
	}
	return ct.get(keys, out)
}

// through reports whether a read of keys goes through the cache (else
// straight to the table), asking the governor.
func (ct *CachedTable) through(keys []uint64) bool {
	cc := ct.core
	if cc == nil {
		return false
	}
	cached, invalidate := ct.gov.next(ct.now(), len(keys))
	if !cached {
		ct.stats.Bypassed++
		ct.lastKeys = ct.lastKeys[:0]
		return false
	}
	if invalidate {
		cc.invalidate()
	}
	return true
}

// get is a read through the cache.
func (ct *CachedTable) get(keys []uint64, out []float64) error {
	cc := ct.core
	if err := ct.t.Err(); err != nil {
		return err
	}
	if err := checkKeys(ct.spec, keys, out, "get"); err != nil {
		return err
	}
	clock, w := ct.t.WorkerClock(), ct.w
	ct.miss, ct.missAt = ct.miss[:0], ct.missAt[:0]
	ct.lastKeys = append(ct.lastKeys[:0], keys...)
	ct.lastSlot = slices.Grow(ct.lastSlot[:0], len(keys))[:len(keys)]
	remote, hits := 0, 0
	for i, k := range keys {
		if ct.t.Local(k) {
			ct.lastSlot[i] = slotLocal
		} else {
			remote++
			ct.lastSlot[i] = slotNone
			if s := cc.lookup(k); s >= 0 {
				ct.lastSlot[i] = int32(s)
				if ct.fresh(cc.stamp[s], clock) {
					copy(out[i*w:(i+1)*w], cc.row(s))
					cc.touch(s)
					hits++
					continue
				}
				ct.stats.Stale++
			}
		}
		ct.miss = append(ct.miss, k)
		ct.missAt = append(ct.missAt, int32(i))
	}
	ct.stats.Hits += int64(hits)
	ct.stats.Misses += int64(remote - hits)
	if len(ct.miss) == 0 {
		return nil
	}
	return ct.fetch(out, clock, remote)
}

// refreshAhead adds to the current read's misses (ct.miss) every cached
// key it does not ask for whose value could not serve the worker's next
// clock, and returns how many it added (their slots: ct.ahead). It does
// so only when every remote key the read missed was cached (stale), and
// while the cache has never been full, i.e. while every remote key the
// worker has read fits in it: then a read that goes to the shards
// anyway (one stale or new key is enough) brings the whole cached working
// set up to date in the same message, and the reads of the next clocks,
// up to the staleness bound, find every remote key fresh and send none.
// Before, each read refreshed only its own keys, so the next read nearly
// always found one of its keys stale (fetched clocks ago by another
// batch) and paid a round trip: LR on 1,000 features across 3 processes,
// 30.7% hits, 252,109 of 254,110 misses stale. A full cache (it evicts,
// or its doorkeeper turns keys away) holds a part of a larger working set
// (a Zipf tail of cold keys): its reads go to the shards for the keys it
// lacks whatever it holds, and refreshing it would only add keys to each
// read. Nor is a cached set
// more than maxAheadPerKey times the read's remote keys (a large cache
// still filling, whose next reads will likely bring new keys again): one
// read would carry all of it for little. Under BSP a value never serves
// the next clock, so nothing is refreshed.
func (ct *CachedTable) refreshAhead(clock int64, remote int) int {
	cc := ct.core
	ct.ahead = ct.ahead[:0]
	if ct.bound == 0 || cc.evictions > 0 || cc.n == 0 || cc.n == cc.cap {
		return 0
	}
	if len(ct.mark) < cc.cap {
		ct.mark = make([]uint32, cc.cap)
	}
	if ct.gen++; ct.gen == 0 {
		clear(ct.mark)
		ct.gen = 1
	}
	for _, i := range ct.missAt {
		switch s := ct.lastSlot[i]; {
		case s >= 0:
			ct.mark[s] = ct.gen // a stale key of the read: fetched already
		case s == slotNone:
			// A key the cache never held: the worker's working set is
			// still growing past what is cached (a cold tail), so its
			// next reads will go to the shards for new keys whatever is
			// refreshed now.
			return 0
		}
	}
	own := len(ct.miss)
	for s := range cc.n {
		if ct.mark[s] != ct.gen && !ct.fresh(cc.stamp[s], clock+1) {
			if len(ct.ahead) == maxAheadPerKey*remote {
				ct.ahead, ct.miss = ct.ahead[:0], ct.miss[:own]
				return 0
			}
			ct.ahead = append(ct.ahead, int32(s))
			ct.miss = append(ct.miss, cc.keys[s])
		}
	}
	return len(ct.ahead)
}

// maxAheadPerKey bounds the keys a read refreshes ahead, per remote key
// it reads (refreshAhead).
const maxAheadPerKey = 16

// fetch reads the current Get's misses (ct.miss) from the table into the
// caller's out and caches the remote ones, refreshing cached keys ahead
// along with them (refreshAhead); remote is how many of the read's keys
// are remote.
func (ct *CachedTable) fetch(out []float64, clock int64, remote int) error {
	cc, w := ct.core, ct.w
	own := len(ct.miss)
	ahead := ct.refreshAhead(clock, remote)
	ct.missOut = grow(ct.missOut, len(ct.miss)*w)
	stamp, err := ct.t.GetStamped(ct.miss, ct.missOut)
	if ct.asp {
		stamp = clock
	}
	ct.miss = ct.miss[:own]
	if err != nil {
		return err
	}
	ct.stats.Refreshed += int64(ahead)
	// The keys refreshed ahead first: a key of the read inserted below
	// may fill the cache and evict one of theirs, which must not then be
	// overwritten with their values.
	for j, s := range ct.ahead {
		copy(cc.row(int(s)), ct.missOut[(own+j)*w:(own+j+1)*w])
		cc.stamp[s] = stamp
	}
	inserted := false // slots found by Get still hold their keys until an insert
	for j, k := range ct.miss {
		v := ct.missOut[j*w : (j+1)*w]
		i := int(ct.missAt[j])
		copy(out[i*w:(i+1)*w], v)
		s := int(ct.lastSlot[i])
		if s == slotLocal {
			continue
		}
		if inserted && (s < 0 || !cc.holds(s, k)) {
			s = cc.lookup(k) // inserted by a repeat of k, or evicted
		}
		if s < 0 {
			if !cc.admit(k) {
				ct.lastSlot[i] = slotNone
				continue
			}
			s, inserted = cc.insert(k), true
		} else {
			cc.touch(s)
		}
		ct.lastSlot[i] = int32(s)
		copy(cc.row(s), v)
		cc.stamp[s] = stamp
	}
	return nil
}

// Add adds deltas (len(keys)*Width values) to keys and to their cached
// values. If sending fails the cache is purged: what reached the shards is
// unknown.
func (ct *CachedTable) Add(keys []uint64, deltas []float64) error {
	if err := ct.t.Add(keys, deltas); err != nil {
		ct.Purge()
		return err
	}
	cc := ct.core
	if cc == nil || cc.n == 0 || !ct.gov.cached {
		return nil
	}
	w := ct.w
	if slices.Equal(keys, ct.lastKeys) {
		for i, k := range keys {
			if s := int(ct.lastSlot[i]); s >= 0 && cc.holds(s, k) {
				ct.apply(cc.row(s), deltas[i*w:(i+1)*w])
			} else if s < 0 {
				continue // not cached when read, and nothing was inserted since
			} else if s = cc.lookup(k); s >= 0 { // evicted by a later key of that read
				ct.apply(cc.row(s), deltas[i*w:(i+1)*w])
			}
		}
		return nil
	}
	for i, k := range keys {
		if s := cc.lookup(k); s >= 0 {
			ct.apply(cc.row(s), deltas[i*w:(i+1)*w])
		}
	}
	return nil
}

// apply adds d to a cached row as the shard's store does, rounding to
// float32 for float32 tables so the cache stays equal to the shard.
func (ct *CachedTable) apply(row, d []float64) {
	for c := range row {
		if ct.f32 {
			row[c] = float64(float32(row[c] + d[c]))
		} else {
			row[c] += d[c]
		}
	}
}

// GetChunk reads whole chunks from the table; it neither consults nor
// fills the cache.
func (ct *CachedTable) GetChunk(chunks []uint64, out []float64) error {
	return ct.t.GetChunk(chunks, out)
}

// Scan is the table's Scan (TableClient.Scan), past the cache: it
// neither consults nor fills it. A source that cannot scan is an error.
func (ct *CachedTable) Scan(fn func(keys []uint64, vals []float64) error) error {
	sc, ok := ct.t.(interface {
		Scan(func(keys []uint64, vals []float64) error) error
	})
	if !ok {
		return fmt.Errorf("kvstore: table %q: its cache's source (%T) cannot scan", ct.spec.Name, ct.t)
	}
	return sc.Scan(fn)
}

// AddChunk adds to whole chunks (deltas laid out as GetChunk's out) and
// applies the deltas to the chunks' cached keys: one cache lookup per key
// of the chunks.
func (ct *CachedTable) AddChunk(chunks []uint64, deltas []float64) error {
	if err := ct.t.AddChunk(chunks, deltas); err != nil {
		ct.Purge()
		return err
	}
	cc := ct.core
	if cc == nil || cc.n == 0 || !ct.gov.cached {
		return nil
	}
	w, off := ct.w, 0
	for _, id := range chunks {
		first, n, err := ct.t.Chunk(id)
		if err != nil {
			return err // AddChunk checked the ids
		}
		for j := range n {
			if s := cc.lookup(first + uint64(j)); s >= 0 {
				ct.apply(cc.row(s), deltas[(off+j)*w:(off+j+1)*w])
			}
		}
		off += n
	}
	return nil
}

// cacheCore is the cache's state machine, no I/O: a fixed array of slots
// (key, stamp, Width values), an open-addressing index from key to slot,
// and eviction lists threaded through the slots by int32 links. It
// allocates only when built.
//
// The lists are circular with sentinels at indexes cap+l of prev/next.
// LRU keeps one list (l = 0), most recent first, and evicts its back.
// LFU keeps one list per frequency l in 1..lfuMaxFreq, most recent first,
// tracks the lowest non-empty one and evicts its back, all O(1); every
// lfuAgeEvery*cap accesses it halves every frequency (amortized O(1)) so
// keys that were hot long ago make way for keys hot now.
type cacheCore struct {
	kind  CacheKind
	cap   int
	width int
	n     int // slots in use: 0..n-1
	index slotIndex
	keys  []uint64
	stamp []int64
	vals  []float64
	freq  []uint16 // LFU only
	order []int32  // LFU aging scratch
	prev  []int32
	next  []int32

	minFreq   int
	accesses  int
	evictions int64

	// in has a bit per key of the table telling whether it is cached, when
	// the table is small enough (see track): most keys a worker reads are
	// not cached (a Zipf tail), and one bit test in a dense bitmap is far
	// cheaper than probing the index, which is sized for the capacity
	// and rarely in the CPU's cache.
	in []uint64

	// seen is the doorkeeper of a full cache: a hashed bit per recently
	// missed key. A full cache admits a key only on its second miss within
	// the window (seenN marks; cleared at a quarter of the bits), so the
	// long tail of keys read once in a while does not evict the hot keys
	// and does not cost an insert and an eviction per read.
	seen  []uint64
	seenN int
}

// admit reports whether a missed key may be inserted: always while the
// cache has free slots, else only if it missed recently already.
func (c *cacheCore) admit(key uint64) bool {
	if c.n < c.cap {
		return true
	}
	if c.seen == nil {
		bits := 1 << 12
		for bits < 4*c.cap && bits < 1<<24 {
			bits <<= 1
		}
		c.seen = make([]uint64, bits/64)
	}
	h := (key * 0xbf58476d1ce4e5b9) >> 40 & uint64(len(c.seen)*64-1)
	w, b := h>>6, uint64(1)<<(h&63)
	if c.seen[w]&b != 0 {
		return true
	}
	c.seen[w] |= b
	if c.seenN++; c.seenN > len(c.seen)*16 {
		clear(c.seen)
		c.seenN = 0
	}
	return false
}

// maxTrackedKeys bounds the tables whose keys get a presence bit (16 MiB).
const maxTrackedKeys = 1 << 27

// track keeps presence bits for keys [0, size) when size allows.
func (c *cacheCore) track(size uint64) {
	if size <= maxTrackedKeys {
		c.in = make([]uint64, (size+63)/64)
		for s := range c.n {
			c.setIn(c.keys[s], true)
		}
	}
}

func (c *cacheCore) setIn(key uint64, on bool) {
	if c.in == nil {
		return
	}
	if on {
		c.in[key>>6] |= 1 << (key & 63)
	} else {
		c.in[key>>6] &^= 1 << (key & 63)
	}
}

const (
	lfuMaxFreq  = 255
	lfuAgeEvery = 8
)

func newCacheCore(kind CacheKind, capacity, width int) *cacheCore {
	lists := 1
	if kind == CacheLFU {
		lists = lfuMaxFreq + 1
	}
	c := &cacheCore{kind: kind, cap: capacity, width: width, index: newSlotIndex(capacity),
		keys: make([]uint64, capacity), stamp: make([]int64, capacity), vals: make([]float64, capacity*width),
		prev: make([]int32, capacity+lists), next: make([]int32, capacity+lists)}
	if kind == CacheLFU {
		c.freq = make([]uint16, capacity)
		c.order = make([]int32, 0, capacity)
	}
	c.purge()
	return c
}

// purge empties the cache.
func (c *cacheCore) purge() {
	c.index.clear()
	clear(c.in)
	clear(c.seen)
	c.seenN = 0
	c.n, c.minFreq, c.accesses = 0, 1, 0
	for s := c.cap; s < len(c.next); s++ {
		c.prev[s], c.next[s] = int32(s), int32(s)
	}
}

// invalidate makes every cached value too old to serve a read, keeping
// the keys: the next read of each fetches it again into its slot.
func (c *cacheCore) invalidate() {
	for s := range c.n {
		c.stamp[s] = math.MinInt64
	}
}

// holds reports whether slot s is in use and caches key.
func (c *cacheCore) holds(s int, key uint64) bool { return s < c.n && c.keys[s] == key }

func (c *cacheCore) row(s int) []float64 { return c.vals[s*c.width : (s+1)*c.width] }

// lookup is key's slot, -1 when not cached.
func (c *cacheCore) lookup(key uint64) int {
	if c.n == 0 {
		return -1
	}
	if c.in != nil && (key>>6 >= uint64(len(c.in)) || c.in[key>>6]&(1<<(key&63)) == 0) {
		return -1
	}
	return int(c.index.get(key))
}

func (c *cacheCore) unlink(i int32) {
	p, n := c.prev[i], c.next[i]
	c.next[p], c.prev[n] = n, p
}

func (c *cacheCore) pushFront(l int, i int32) {
	s := int32(c.cap + l)
	n := c.next[s]
	c.prev[i], c.next[i] = s, n
	c.prev[n], c.next[s] = i, i
}

func (c *cacheCore) pushBack(l int, i int32) {
	s := int32(c.cap + l)
	p := c.prev[s]
	c.prev[i], c.next[i] = p, s
	c.next[p], c.prev[s] = i, i
}

func (c *cacheCore) empty(l int) bool { return c.next[c.cap+l] == int32(c.cap+l) }

// touch records a read of slot s.
func (c *cacheCore) touch(s int) {
	i := int32(s)
	c.unlink(i)
	if c.kind == CacheLRU {
		c.pushFront(0, i)
		return
	}
	f := int(c.freq[s])
	if f < lfuMaxFreq {
		c.freq[s]++
		c.pushFront(f+1, i)
		if f == c.minFreq && c.empty(f) {
			c.minFreq = f + 1
		}
	} else {
		c.pushFront(f, i)
	}
	c.access()
}

// insert caches key, which must not be cached, evicting a victim when
// full, and returns its slot for the caller to fill.
func (c *cacheCore) insert(key uint64) int {
	var i int32
	if c.n < c.cap {
		i = int32(c.n)
		c.n++
	} else {
		if c.kind == CacheLRU {
			i = c.prev[c.cap]
		} else {
			i = c.prev[c.cap+c.minFreq]
		}
		c.unlink(i)
		c.index.del(c.keys[i])
		c.setIn(c.keys[i], false)
		c.evictions++
	}
	c.keys[i] = key
	c.index.put(key, i)
	c.setIn(key, true)
	if c.kind == CacheLRU {
		c.pushFront(0, i)
		return int(i)
	}
	c.freq[i] = 1
	c.minFreq = 1
	c.pushFront(1, i)
	c.access()
	return int(i)
}

// access counts an LFU access and ages the frequencies when due.
func (c *cacheCore) access() {
	c.accesses++
	if c.accesses < lfuAgeEvery*c.cap {
		return
	}
	c.accesses = 0
	// Collect slots by old frequency, high to low, recent first; relink
	// each at the back of its halved frequency's list, which keeps that
	// order within the new lists.
	c.order = c.order[:0]
	for f := lfuMaxFreq; f >= 1; f-- {
		s := int32(c.cap + f)
		for i := c.next[s]; i != s; i = c.next[i] {
			c.order = append(c.order, i)
		}
		c.prev[s], c.next[s] = s, s
	}
	c.minFreq = lfuMaxFreq
	for _, i := range c.order {
		f := max(int(c.freq[i])/2, 1)
		c.freq[i] = uint16(f)
		c.pushBack(f, i)
		c.minFreq = min(c.minFreq, f)
	}
}

// slotIndex maps keys to slots: linear probing over a power-of-two table
// at most half full, deletion by backward shift (no tombstones), so it
// never allocates after it is built. A key and its slot share one entry,
// so a probe touches one cache line.
type slotIndex struct {
	e     []indexEntry
	mask  uint64
	shift uint
}

type indexEntry struct {
	key  uint64
	slot int32 // slot+1; 0 is empty
}

func newSlotIndex(n int) slotIndex {
	size, bits := 8, uint(3)
	for size < 2*n {
		size, bits = size*2, bits+1
	}
	return slotIndex{e: make([]indexEntry, size), mask: uint64(size - 1), shift: 64 - bits}
}

func (x *slotIndex) home(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> x.shift }

func (x *slotIndex) clear() { clear(x.e) }

func (x *slotIndex) get(k uint64) int32 {
	for i := x.home(k); ; i = (i + 1) & x.mask {
		e := &x.e[i]
		if e.slot == 0 {
			return -1
		}
		if e.key == k {
			return e.slot - 1
		}
	}
}

func (x *slotIndex) put(k uint64, slot int32) {
	i := x.home(k)
	for x.e[i].slot != 0 && x.e[i].key != k {
		i = (i + 1) & x.mask
	}
	x.e[i] = indexEntry{key: k, slot: slot + 1}
}

func (x *slotIndex) del(k uint64) {
	i := x.home(k)
	for {
		if x.e[i].slot == 0 {
			return
		}
		if x.e[i].key == k {
			break
		}
		i = (i + 1) & x.mask
	}
	x.e[i].slot = 0
	// Move back every later entry of the run whose probe path crosses the
	// hole, so lookups never stop early.
	for j := (i + 1) & x.mask; x.e[j].slot != 0; j = (j + 1) & x.mask {
		h := x.home(x.e[j].key)
		if (i-h)&x.mask < (j-h)&x.mask {
			x.e[i] = x.e[j]
			x.e[j].slot = 0
			i = j
		}
	}
}

// Localize moves keys to the worker's slave (see TableClient.Localize).
// Cached copies stay valid: they are bounded by the stage's staleness,
// wherever the keys live.
func (ct *CachedTable) Localize(keys []uint64) error {
	if l, ok := ct.t.(localizer); ok {
		return l.Localize(keys)
	}
	return nil
}

// LocalizeAsync starts moving keys (see TableClient.LocalizeAsync).
func (ct *CachedTable) LocalizeAsync(keys []uint64) (Pending, error) {
	if l, ok := ct.t.(localizer); ok {
		return l.LocalizeAsync(keys)
	}
	return Done{}, nil
}

// LocalizeChunks moves whole chunks (see TableClient.LocalizeChunks).
func (ct *CachedTable) LocalizeChunks(chunks []uint64) error {
	if l, ok := ct.t.(localizer); ok {
		return l.LocalizeChunks(chunks)
	}
	return nil
}

type localizer interface {
	Localize(keys []uint64) error
	LocalizeAsync(keys []uint64) (Pending, error)
	LocalizeChunks(chunks []uint64) error
}

// GetAsync starts a read (see TableClient.GetAsync) and returns at once,
// unless the cache holds every remote key fresh: then the read is done
// from it (and this slave's memory) before it returns. Otherwise the read
// is the table's own and travels while the worker goes on; its values
// do not fill the cache (they carry no stamp). Before, a read through the
// cache with a miss was a Get done before GetAsync returned: a round trip
// of its own, in series with the worker's next read (lr.sgd's
// intercept, read beside the weights).
func (ct *CachedTable) GetAsync(keys []uint64, out []float64) (Pending, error) {
	a, async := ct.t.(asyncGetter)
	if !ct.through(keys) {
		if async {
			return a.GetAsync(keys, out)
		}
		return Done{}, ct.t.Get(keys, out)
	}
	if async && !ct.allFresh(keys) {
		// Counted as a read past the cache; the governor still counts it
		// as one through it: both ways cost the same here.
		ct.stats.Bypassed++
		return a.GetAsync(keys, out)
	}
	if err := ct.get(keys, out); err != nil {
		return nil, err
	}
	return Done{}, nil
}

// allFresh reports whether every remote key of keys is cached fresh
// for a read at the worker's clock.
func (ct *CachedTable) allFresh(keys []uint64) bool {
	cc, clock := ct.core, ct.t.WorkerClock()
	for _, k := range keys {
		if ct.t.Local(k) {
			continue
		}
		if s := cc.lookup(k); s < 0 || !ct.fresh(cc.stamp[s], clock) {
			return false
		}
	}
	return true
}

type asyncGetter interface {
	GetAsync(keys []uint64, out []float64) (Pending, error)
}

// GetNext starts the read of the worker's next iteration (see
// TableClient.GetNext: Wait after the Clock that ends this one). The
// governor chooses as it does for Get: past the cache the read ahead is
// the table's own (it travels while the worker computes, which is what
// pays when reads wait on round trips); through the cache the read is a
// Get made at Wait, after that Clock, so hits and stamps are judged at
// the iteration that uses the values, as without a read ahead. Either
// way the values may miss none of the worker's own Adds made before
// GetNext; past the cache they may miss those made after it (as the
// table's GetNext may).
func (ct *CachedTable) GetNext(keys []uint64, out []float64) (Pending, error) {
	past := !ct.through(keys)
	if n, ok := ct.t.(nextGetter); ok && past {
		return n.GetNext(keys, out)
	}
	if err := ct.t.Err(); err != nil {
		return nil, err
	}
	if err := checkKeys(ct.spec, keys, out, "get"); err != nil {
		return nil, err
	}
	r := ct.freeNext
	if r == nil {
		r = &cachedNext{ct: ct}
	}
	ct.freeNext = nil
	r.keys, r.out, r.clock, r.past, r.done, r.err = append(r.keys[:0], keys...), out, ct.t.WorkerClock()+1, past, false, nil
	return r, nil
}

type nextGetter interface {
	GetNext(keys []uint64, out []float64) (Pending, error)
}

// cachedNext is a GetNext through the cache: the read is made at Wait.
type cachedNext struct {
	ct    *CachedTable
	keys  []uint64
	out   []float64
	clock int64 // the worker clock Wait must see
	past  bool  // the governor sent it past the cache
	done  bool
	err   error
}

func (r *cachedNext) Wait() error {
	if r.done {
		return r.err
	}
	ct := r.ct
	if c := ct.t.WorkerClock(); c < r.clock {
		return fmt.Errorf("%w (table %q, worker clock %d)", errWaitBeforeClock, ct.spec.Name, c)
	}
	r.done = true
	if r.past {
		r.err = ct.t.Get(r.keys, r.out)
	} else {
		r.err = ct.get(r.keys, r.out)
	}
	r.out = nil
	if ct.freeNext == nil {
		ct.freeNext = r // reused by the next GetNext, as the table's own are
	}
	return r.err
}

// Flush waits for the worker's Adds (see TableClient.Flush).
func (ct *CachedTable) Flush() error {
	if f, ok := ct.t.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}
