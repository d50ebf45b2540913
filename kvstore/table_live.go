package kvstore

import (
	"errors"
	"fmt"
	"slices"
)

// dyn reports whether keys of this table have moved through this slave,
// or the worker learned where moved keys live: then every access consults
// the slave's ownership state and the location cache.
func (t *TableClient) dyn() bool {
	return t.lv != nil && (t.lv.dynamic.Load() || len(t.lc.route) > 0 || len(t.lc.pending) > 0)
}

// locCache is a worker's location cache of one table: keys that live away
// from their home, and the node that last answered for them, so requests
// go straight there instead of through the home. A stale entry costs a
// forward (the node passes the request to the home), never an error. A
// learned location is applied only when the worker has no Add in flight
// (rule 5: a request on the new route must not overtake one still
// travelling the old route); until then it waits in pending.
type locCache struct {
	home    func(uint64) int
	route   map[uint64]int
	pending map[uint64]int
	max     int
	learned int64
}

const locCacheMax = 1 << 16

func newLocCache(home func(uint64) int) *locCache {
	return &locCache{home: home, route: map[uint64]int{}, pending: map[uint64]int{}, max: locCacheMax}
}

// learn notes that node answered for k.
func (lc *locCache) learn(k uint64, node int) {
	if cur, ok := lc.route[k]; ok && cur == node || !ok && node == lc.home(k) {
		delete(lc.pending, k)
		return
	}
	lc.pending[k] = node
}

// apply installs the pending locations (only with nothing in flight).
func (lc *locCache) apply() {
	for k, n := range lc.pending {
		if n == lc.home(k) {
			delete(lc.route, k)
			continue
		}
		if len(lc.route) >= lc.max {
			clear(lc.route) // falling back to the homes is always correct
		}
		lc.route[k] = n
		lc.learned++
	}
	clear(lc.pending)
}

// to is the node a request for k goes to now.
func (lc *locCache) to(k uint64) int {
	if n, ok := lc.route[k]; ok {
		return n
	}
	return lc.home(k)
}

// Localize moves keys to this worker's slave and returns when they are
// there: from then on the slave's workers read and write them in memory
// (until another slave localizes them). Keys already here cost nothing.
// Adds this worker sent before are applied first, wherever the keys were.
func (t *TableClient) Localize(keys []uint64) error {
	if err := t.localizeAsync(keys); err != nil {
		return err
	}
	return t.c.Flush()
}

// Pending is a relocation under way: Wait returns when its keys are on
// the worker's slave (and every Add the worker sent before is applied).
type Pending interface{ Wait() error }

type flushWait struct{ c *Client }

func (f flushWait) Wait() error { return f.c.Flush() }

// Done is a Pending with nothing to wait for.
type Done struct{}

// Wait implements Pending.
func (Done) Wait() error { return nil }

// LocalizeAsync starts moving keys to this worker's slave and returns at
// once; Wait on the result (or Flush, the next Localize, the end of the
// stage) waits for them. Accesses in between are correct wherever the
// keys are: a request for a key in flight waits at its new owner, in order.
func (t *TableClient) LocalizeAsync(keys []uint64) (Pending, error) {
	if err := t.localizeAsync(keys); err != nil {
		return nil, err
	}
	return flushWait{t.c}, nil
}

func (t *TableClient) localizeAsync(keys []uint64) error {
	c := t.c
	if c.err != nil {
		return c.err
	}
	if err := t.sendHeld(); err != nil { // they are applied before the keys move
		return err
	}
	if t.allHere || len(keys) == 0 {
		return nil // one slave holds the whole table: nothing can move
	}
	if t.lv == nil {
		return fmt.Errorf("kvstore: localize on %q: slave %q hosts no shard of the table", t.spec.Name, c.cfg.Self)
	}
	if t.spec.Replicas > 1 {
		return fmt.Errorf("kvstore: localize on %q: the table has replicas = %d; relocation moves keys of unreplicated tables only (declare tables a stage localizes with relocate = true, which makes their replicas 1)", t.spec.Name, t.spec.Replicas)
	}
	if c.gated() && !t.spec.Relocate {
		// Every worker's Clock must wait for its Adds to keys that may
		// have moved, which only a declared table makes them do.
		return fmt.Errorf("kvstore: localize on %q: under %s, which counts clocks, keys move only in tables declared relocate = true ([[table]] relocate = true; TableSpec.Relocate), so that every worker's Clock waits for its Adds to keys that moved", t.spec.Name, c.cfg.Consistency.Kind)
	}
	if !t.spec.Relocate && c.cfg.ClockedStage != "" {
		// No Clock of this stage to overtake, but the keys stay moved for
		// a later stage of the task that counts clocks.
		return fmt.Errorf("kvstore: localize on %q: keys stay where they moved for the task's later stages, and stage %s counts clocks, so keys move only in tables declared relocate = true ([[table]] relocate = true; TableSpec.Relocate), so that every worker's Clock there waits for its Adds to keys that moved", t.spec.Name, c.cfg.ClockedStage)
	}
	for _, k := range keys {
		if k >= t.spec.Size {
			return fmt.Errorf("kvstore: localize on %q: key %d out of range [0, %d)", t.spec.Name, k, t.spec.Size)
		}
	}
	self := t.hosts[t.lv.self]
	per := max(t.maxKeys, 1)
	for i := 0; i < len(keys); i += per {
		j := min(i+per, len(keys))
		c.msg = Message{Op: OpLocalize, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Keys: keys[i:j], Node: int32(t.lv.self)}
		if err := c.publishAcked(self, 1); err != nil {
			return err
		}
		c.stats.Localized += int64(j - i)
	}
	return nil
}

// LocalizeChunks is Localize of every key of the chunks.
func (t *TableClient) LocalizeChunks(chunks []uint64) error {
	if err := t.expandChunks(chunks); err != nil {
		return err
	}
	return t.Localize(t.rk)
}

// syncRoutes is called with the move lock held for reading. When keys
// moved into or out of this slave since the worker last looked, and it
// has Adds in flight, it must wait for them before it serves anything
// from memory (an Add on the old route could otherwise land after a read
// that should see it): syncRoutes then reports false and the caller
// releases the lock, flushes and tries again.
func (t *TableClient) syncRoutes() bool {
	m := t.lv.moves.Load()
	if m == t.synced {
		return true
	}
	if t.c.inflight > 0 {
		return false
	}
	t.synced = m
	return true
}

// lockRoutes takes the move lock for reading with routes in sync.
func (t *TableClient) lockRoutes() error {
	for {
		if t.c.inflight == 0 && len(t.lc.pending) > 0 {
			t.lc.apply()
		}
		t.lv.mu.RLock()
		if t.syncRoutes() {
			return nil
		}
		t.lv.mu.RUnlock()
		t.c.stats.Flushes++
		if err := t.c.Flush(); err != nil {
			return err
		}
	}
}

// byRoute groups positions idx of keys by the node their requests go
// to: the last owner the worker learned, else the home.
func (t *TableClient) byRoute(keys []uint64, idx []int) map[int][]int {
	g := map[int][]int{}
	for _, i := range idx {
		h := t.lc.to(keys[i])
		g[h] = append(g[h], i)
	}
	return g
}

// classScratch holds a batch's keys split by where they are, reused from
// call to call.
type classScratch struct {
	hIdx, gIdx, rIdx []int    // positions: in the home shard here, guests here, elsewhere
	hKeys, gKeys     []uint64 // their keys, for the two local stores
	hBuf, gBuf       []float64
	wKeys, sub       []uint64 // a gated read: the keys it waits for; those classified again
	again            []int
	second           *classScratch // a gated read's second classification
}

// classify splits keys by where they live now (move lock held for
// reading): this slave's home shard, its guests, or another slave. With
// the node's ownership bitset a key costs one bit test and a bounds check.
func (t *TableClient) classify(keys []uint64, sc *classScratch) {
	lv := t.lv
	sc.hIdx, sc.gIdx, sc.rIdx = sc.hIdx[:0], sc.gIdx[:0], sc.rIdx[:0]
	sc.hKeys, sc.gKeys = sc.hKeys[:0], sc.gKeys[:0]
	for i, k := range keys {
		switch {
		case !lv.node.Owns(k):
			sc.rIdx = append(sc.rIdx, i)
		case lv.isHome(k):
			sc.hIdx, sc.hKeys = append(sc.hIdx, i), append(sc.hKeys, k)
		default:
			sc.gIdx, sc.gKeys = append(sc.gIdx, i), append(sc.gKeys, k)
		}
	}
}

// testHookOwned, set only by tests, runs while a worker holds the move
// lock between finding which keys of its batch are here and using them:
// a test moves a key away at that moment and checks the move waits.
var testHookOwned func(op Op)

// wholeStore returns the store holding every key of the batch when all of
// them are owned here and in the same store (move lock held for reading),
// else nil. Blocked training's batches nearly always are (a block's items
// share a home; so do a worker's users): those skip classify's lists.
func (t *TableClient) wholeStore(keys []uint64) Store {
	lv := t.lv
	if len(keys) == 0 {
		return nil
	}
	home := lv.isHome(keys[0])
	for _, k := range keys {
		if !lv.node.Owns(k) || lv.isHome(k) != home {
			return nil
		}
	}
	if home {
		return lv.home
	}
	return lv.guest
}

// readOwned reads the keys classify found here into their rows of out
// (move lock held for reading). A batch wholly in one store is read
// straight into out.
func (t *TableClient) readOwned(keys []uint64, out []float64, sc *classScratch) {
	lv := t.lv
	w := t.spec.Width
	switch nh, ng := len(sc.hIdx), len(sc.gIdx); {
	case nh+ng == 0:
		return
	case nh == len(keys):
		getHeld(lv.home, keys, out)
		return
	case ng == len(keys):
		getHeld(lv.guest, keys, out)
		return
	}
	sc.hBuf = grow(sc.hBuf, len(sc.hKeys)*w)
	sc.gBuf = grow(sc.gBuf, len(sc.gKeys)*w)
	if len(sc.hKeys) > 0 {
		getHeld(lv.home, sc.hKeys, sc.hBuf)
	}
	if len(sc.gKeys) > 0 {
		getHeld(lv.guest, sc.gKeys, sc.gBuf)
	}
	for j, i := range sc.hIdx {
		copy(out[i*w:(i+1)*w], sc.hBuf[j*w:(j+1)*w])
	}
	for j, i := range sc.gIdx {
		copy(out[i*w:(i+1)*w], sc.gBuf[j*w:(j+1)*w])
	}
}

// writeOwned adds (or sets) the rows of vals of the keys classify found
// here (move lock held for reading). A batch wholly in one store goes
// straight from vals.
func (t *TableClient) writeOwned(keys []uint64, vals []float64, op Op, sc *classScratch) {
	lv := t.lv
	w := t.spec.Width
	write := func(st Store, ks []uint64, vs []float64) {
		if op == OpSet {
			st.Set(ks, vs)
		} else {
			addHeld(st, ks, vs)
		}
	}
	switch nh, ng := len(sc.hIdx), len(sc.gIdx); {
	case nh+ng == 0:
		return
	case nh == len(keys):
		write(lv.home, keys, vals)
		return
	case ng == len(keys):
		write(lv.guest, keys, vals)
		return
	}
	gather := func(buf []float64, idx []int) []float64 {
		buf = grow(buf, len(idx)*w)
		for j, i := range idx {
			copy(buf[j*w:(j+1)*w], vals[i*w:(i+1)*w])
		}
		return buf
	}
	if len(sc.hKeys) > 0 {
		sc.hBuf = gather(sc.hBuf, sc.hIdx)
		write(lv.home, sc.hKeys, sc.hBuf)
	}
	if len(sc.gKeys) > 0 {
		sc.gBuf = gather(sc.gBuf, sc.gIdx)
		write(lv.guest, sc.gKeys, sc.gBuf)
	}
}

// getLive issues a read of a dynamic table: keys this slave owns from
// memory now, the others from their homes (which forward to the owner)
// or the owners the worker learned; the caller waits for the read (nil:
// every key was read from memory).
//
// Without a gate to wait at (ASP) the owned keys are found and read
// under one hold of the move lock: no key can leave between the two.
// Under SSP/BSP the read first waits at the gate with the lock released
// (the server must be able to move keys meanwhile), then takes it again
// and reads what is still here; keys that left go to their homes.
func (t *TableClient) getLive(keys []uint64, out []float64, stamped bool) (*pending, error) {
	c := t.c
	lv := t.lv
	if err := t.lockRoutes(); err != nil {
		return nil, err
	}
	sc := &t.csc
	if !c.gated() {
		if st := t.wholeStore(keys); st != nil {
			if testHookOwned != nil {
				testHookOwned(OpGet)
			}
			getHeld(st, keys, out)
			lv.mu.RUnlock()
			c.stats.LocalKeys += int64(len(keys))
			return nil, nil
		}
		t.classify(keys, sc)
		if testHookOwned != nil {
			testHookOwned(OpGet)
		}
		t.readOwned(keys, out, sc)
		lv.mu.RUnlock()
		c.stats.LocalKeys += int64(len(sc.hKeys) + len(sc.gKeys))
		if len(sc.rIdx) == 0 {
			return nil, nil
		}
		p := t.begin(out)
		if err := t.sendGets(p, keys, sc.rIdx); err != nil {
			c.release(p)
			return nil, err
		}
		return p, nil
	}
	t.classify(keys, sc)
	moves := lv.moves.Load()
	lv.mu.RUnlock()
	p := t.begin(out)
	fail := func(err error) (*pending, error) {
		c.release(p)
		return nil, err
	}
	if err := t.sendGets(p, keys, sc.rIdx); err != nil {
		return fail(err)
	}
	if len(sc.hIdx)+len(sc.gIdx) == 0 {
		return p, nil
	}
	sc.wKeys = append(append(sc.wKeys[:0], sc.hKeys...), sc.gKeys...)
	if err := t.waitLocal(sc.wKeys); err != nil {
		return fail(err)
	}
	if stamped {
		p.note(t.localStamp())
	}
	lv.mu.RLock()
	if lv.moves.Load() != moves {
		// Keys moved while the read waited at the gate: classify the
		// local ones again; those that left go to their homes.
		again := append(append(sc.again[:0], sc.hIdx...), sc.gIdx...)
		sc.again = again
		sub := sc.sub[:0]
		for _, i := range again {
			sub = append(sub, keys[i])
		}
		sc.sub = sub
		if sc.second == nil {
			sc.second = &classScratch{}
		}
		sc2 := sc.second
		t.classify(sub, sc2)
		remap := func(idx []int) []int {
			for j := range idx {
				idx[j] = again[idx[j]]
			}
			return idx
		}
		sc.hIdx, sc.hKeys = append(sc.hIdx[:0], remap(sc2.hIdx)...), append(sc.hKeys[:0], sc2.hKeys...)
		sc.gIdx, sc.gKeys = append(sc.gIdx[:0], remap(sc2.gIdx)...), append(sc.gKeys[:0], sc2.gKeys...)
		sc.rIdx = append(sc.rIdx[:0], remap(sc2.rIdx)...)
	} else {
		sc.rIdx = sc.rIdx[:0]
	}
	t.readOwned(keys, out, sc)
	lv.mu.RUnlock()
	c.stats.LocalKeys += int64(len(sc.hKeys) + len(sc.gKeys))
	if err := t.sendGets(p, keys, sc.rIdx); err != nil {
		return fail(err)
	}
	return p, nil
}

// sendGets asks the homes of keys[idx] for them, as parts of read p.
func (t *TableClient) sendGets(p *pending, keys []uint64, idx []int) error {
	c := t.c
	if len(idx) == 0 {
		return nil
	}
	for h, is := range t.byRoute(keys, idx) {
		for a := 0; a < len(is); a += t.maxKeys {
			b := min(a+t.maxKeys, len(is))
			ks := make([]uint64, b-a)
			pos := make([]int32, b-a)
			for j, i := range is[a:b] {
				ks[j], pos[j] = keys[i], int32(i)
			}
			c.msg = Message{Op: OpGet, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: c.clock, Keys: ks}
			if err := t.request(p, h, part{pos: pos, keys: ks, lc: t.lc}); err != nil {
				return err
			}
		}
		c.stats.RemoteKeys += int64(len(is))
	}
	return nil
}

// writeLive adds (or sets) keys of a dynamic table: owned keys in memory
// under the move lock, the others through their homes, acknowledged.
func (t *TableClient) writeLive(keys []uint64, vals []float64, op Op) error {
	c := t.c
	lv := t.lv
	w := t.spec.Width
	if err := t.lockRoutes(); err != nil {
		return err
	}
	if st := t.wholeStore(keys); st != nil {
		if testHookOwned != nil {
			testHookOwned(op)
		}
		if op == OpSet {
			st.Set(keys, vals)
		} else {
			addHeld(st, keys, vals)
		}
		lv.mu.RUnlock()
		c.stats.LocalKeys += int64(len(keys))
		return nil
	}
	sc := &t.csc
	t.classify(keys, sc)
	if testHookOwned != nil {
		testHookOwned(op)
	}
	t.writeOwned(keys, vals, op, sc)
	lv.mu.RUnlock()
	c.stats.LocalKeys += int64(len(sc.hKeys) + len(sc.gKeys))
	if len(sc.rIdx) == 0 {
		return nil
	}
	for h, is := range t.byRoute(keys, sc.rIdx) {
		for a := 0; a < len(is); a += t.maxKeys {
			b := min(a+t.maxKeys, len(is))
			ks := make([]uint64, b-a)
			vs := make([]float64, (b-a)*w)
			for j, i := range is[a:b] {
				ks[j] = keys[i]
				copy(vs[j*w:(j+1)*w], vals[i*w:(i+1)*w])
			}
			c.msg = Message{Op: op, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: c.clock,
				Keys: ks, Width: uint16(w), DType: t.spec.DType, Vals: vs}
			if err := c.publishAcked(t.hosts[h], b-a); err != nil {
				return err
			}
		}
		c.stats.RemoteKeys += int64(len(is))
	}
	return nil
}

// Owned reports whether key's value is in this slave's memory now (its
// home shard is here and it did not move away, or it moved here).
func (t *TableClient) Owned(key uint64) bool {
	if t.lv == nil {
		return false
	}
	if !t.lv.dynamic.Load() {
		return t.Local(key)
	}
	t.lv.mu.RLock()
	defer t.lv.mu.RUnlock()
	return t.lv.node.Owns(key)
}

// GetAsync starts reading keys into out and returns at once: requests for
// remote keys are on their way, keys in this slave's memory are read now.
// out holds the values when Wait on the result returns (do not read it
// before). Other operations may run in between (the worker trains on the
// previous batch while this one's parameters travel: latency hiding). The
// read is gated at the worker's clock when it is issued, so a read issued
// before Clock may be one iteration staler than a Get issued after it.
//
// When the gate holds this slave's shards for now (the worker is at the
// staleness bound), their keys are read at Wait instead, gated then: the
// call returns at once, so the worker's next request (another table's
// read) is not held up behind the wait.
func (t *TableClient) GetAsync(keys []uint64, out []float64) (Pending, error) {
	if t.c.err == nil && !t.dyn() && t.c.cfg.Consistency.Kind != SparseSSP && !t.localReady() {
		return t.startAhead(keys, out, t.c.clock) // this clock, not the next
	}
	p, _, err := t.startGet(keys, out, false, true, nil, nil)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return Done{}, nil
	}
	r := &asyncRead{t: t, p: p}
	if t.repl {
		// A slave's death while the read travels sends it again (to
		// the shards' new heads), which needs its keys.
		r.keys, r.out = slices.Clone(keys), out
	}
	return r, nil
}

type asyncRead struct {
	t    *TableClient
	p    *pending
	keys []uint64  // a replicated table's read: kept to read again after a failover
	out  []float64 // with keys
	done bool
	err  error
}

// Wait returns when every value of the read is in place.
func (r *asyncRead) Wait() error {
	if r.done {
		return r.err
	}
	r.done = true
	r.err = r.t.wait(r.p)
	r.t.c.release(r.p)
	if errors.Is(r.err, errViewChanged) && r.keys != nil {
		r.err = r.t.Get(r.keys, r.out) // from the new heads
	}
	return r.err
}
