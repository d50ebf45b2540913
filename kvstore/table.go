package kvstore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// TableClient is a worker's handle on one table: it routes each key to its
// owner through the Directory, serves keys of this slave's shards from
// memory, and batches the rest into one message per owner (split below the
// bus's max payload).
type TableClient struct {
	c       *Client
	spec    TableSpec
	dir     Directory
	hosts   []string
	local   []Store // local[shard] != nil when this slave hosts the shard
	allHere bool    // every shard is local: no routing needed
	// keyed: the partitioning is not contiguous (hash), so a key range
	// would split into single-key spans, one message each; range and
	// chunk operations expand their keys and go by owner instead.
	keyed   bool
	rk      []uint64 // the keys of a range or chunk operation when keyed
	maxKeys int
	g       grouper
	buf     []float64
	spans   []span
	// spareAhead holds a finished GetNext's buffers for the next one.
	spareAhead *aheadRead
	buf32      []float32 // AddFloat32's values of one shard
	wide       []float64 // AddFloat32's values converted for Add

	// repl: the table is replicated and the client routes by the
	// membership view: writes go to each shard's chain head, kept until
	// acknowledged (retain.go); reads go to the head.
	repl    bool
	unacked []int // per shard: this client's writes not acknowledged yet (repl)

	// Adds held until the iteration ends (hold.go): per shard, merged by
	// key; holds is set while any is held; adds counts the Add calls of
	// iteration addClock.
	held     []heldAdds
	holds    bool
	adds     int
	addClock int64

	lv     *live        // this slave's ownership state of the table (nil: hosts no shard)
	lc     *locCache    // where moved keys were last found
	synced uint64       // lv.moves when the worker last had no Add in flight across a move
	csc    classScratch // a dynamic batch's keys by where they live
}

type span struct {
	shard int
	first uint64
	n     int
	off   int // position in the caller's values, in keys
}

// Table opens a table placed as p.
func (c *Client) Table(p Placement) (*TableClient, error) {
	spec := p.Spec.WithDefaults()
	dir, err := NewDirectory(spec, len(p.Hosts))
	if err != nil {
		return nil, err
	}
	t := &TableClient{c: c, spec: spec, dir: dir, hosts: p.Hosts, local: make([]Store, len(p.Hosts)),
		maxKeys: MaxKeysPerMessage(c.cfg.MaxPayload, spec.Width, spec.DType)}
	t.repl = spec.Replicas > 1 && c.cfg.Routes != nil
	t.unacked = make([]int, len(p.Hosts))
	if t.repl && !slices.Equal(c.cfg.Routes.Hosts(), p.Hosts) {
		return nil, fmt.Errorf("kvstore: table %q is placed on other slaves than the task's routes name", spec.Name)
	}
	t.lc = newLocCache(dir.Owner)
	_, _, contiguous := dir.Bounds(0)
	t.keyed = !contiguous
	t.allHere = true
	for i, h := range p.Hosts {
		// A host that died is not this node's to serve from, even when
		// this node took its id again as a fresh instance.
		if h == c.cfg.Self && c.cfg.Server != nil && (c.cfg.Routes == nil || c.cfg.Routes.Alive(h)) {
			ht := c.cfg.Server.hosted(c.cfg.Task, spec.Name)
			if ht == nil {
				return nil, fmt.Errorf("kvstore: slave %s should host table %q of task %s but does not", h, spec.Name, c.cfg.Task)
			}
			t.local[i], t.lv = ht.store, ht.live
			if t.lv != nil {
				c.lives = append(c.lives, t)
			}
		} else {
			t.allHere = false
		}
	}
	if spec.Relocate && !t.allHere {
		c.relocates = true
	}
	return t, nil
}

// Spec is the table's declaration.
func (t *TableClient) Spec() TableSpec { return t.spec }

// Consistency is the stage's consistency model.
func (t *TableClient) Consistency() Consistency { return t.c.cfg.Consistency }

// WorkerClock is the worker's clock: iterations finished.
func (t *TableClient) WorkerClock() int64 { return t.c.clock }

// Local reports whether key lives in a shard of this worker's slave (read
// and written in memory, without a message).
func (t *TableClient) Local(key uint64) bool { return t.local[t.dir.Owner(key)] != nil }

// AllLocal reports whether every shard of the table is on this slave.
func (t *TableClient) AllLocal() bool { return t.allHere }

// Flush waits until every Add of the worker's client is acknowledged.
func (t *TableClient) Flush() error { return t.c.Flush() }

// Err is the client's first asynchronous error (a failed Add), sticky.
func (t *TableClient) Err() error { return t.c.err }

func (t *TableClient) checkKeys(keys []uint64, vals []float64, what string) error {
	return checkKeys(t.spec, keys, vals, what)
}

func checkKeys(spec TableSpec, keys []uint64, vals []float64, what string) error {
	return CheckKeys(spec, keys, len(vals), what)
}

// CheckKeys reports keys out of spec's range, or n values that are not
// Width per key, as an error naming what (the op) and the table (nil when
// all is well). The range check is one branchless pass (maxKey); the
// offending key is looked for only when there is one.
func CheckKeys(spec TableSpec, keys []uint64, n int, what string) error {
	if n != len(keys)*spec.Width {
		return fmt.Errorf("kvstore: %s on %q: %d values for %d keys of width %d", what, spec.Name, n, len(keys), spec.Width)
	}
	if maxKey(keys) < spec.Size {
		return nil
	}
	for _, k := range keys {
		if k >= spec.Size {
			return fmt.Errorf("kvstore: %s on %q: key %d out of range [0, %d)", what, spec.Name, k, spec.Size)
		}
	}
	return nil
}

// maxKey is the largest of keys (0 for none): four running maxima
// without branches, so a bulk call's range check costs a fraction of a
// compare-and-branch per key.
func maxKey(keys []uint64) uint64 {
	var m0, m1, m2, m3 uint64
	for len(keys) >= 4 {
		k := keys[:4:4]
		m0, m1, m2, m3 = max(m0, k[0]), max(m1, k[1]), max(m2, k[2]), max(m3, k[3])
		keys = keys[4:]
	}
	for _, k := range keys {
		m0 = max(m0, k)
	}
	return max(m0, m1, m2, m3)
}

// waitLocal applies the consistency gate to a read of local keys.
func (t *TableClient) waitLocal(keys []uint64) error {
	c := t.c
	if !c.gated() {
		return nil
	}
	if g := c.cfg.Server.Gate(c.cfg.Task, c.cfg.Stage); g != nil {
		return g.Wait(c.cfg.Ctx, int(c.cfg.Worker), c.clock, keys)
	}
	return nil
}

// localReady reports whether a read of this slave's shards at the
// worker's clock would pass the gate now (false when unsure).
func (t *TableClient) localReady() bool {
	c := t.c
	if !c.gated() || c.cfg.Server == nil {
		return true
	}
	g := c.cfg.Server.Gate(c.cfg.Task, c.cfg.Stage)
	return g == nil || g.ready(int(c.cfg.Worker), c.clock)
}

// Get reads keys into out (len(keys)*Width values).
func (t *TableClient) Get(keys []uint64, out []float64) error {
	_, err := t.get(keys, out, false)
	return err
}

// observe reports a call to the client's Observer: remote when the call
// sent messages (requests grew since before).
func (t *TableClient) observe(op Op, start time.Time, requestsBefore int64) {
	if o := t.c.cfg.Observer; o != nil {
		o.ObserveKV(t.spec.Name, op, t.c.stats.Requests > requestsBefore, time.Since(start))
	}
}

// GetStamped is Get that also returns the read's stamp: the smallest of
// the stage's minimum worker clocks that the shards read (each before the
// values). The values reflect every Add of every iteration below the
// stamp, which tells a cache how long it may serve them. The stamp is -1
// when no gate counts clocks (ASP, a read by worker -1) or no key was
// read, and math.MaxInt64 once every worker of the stage has finished.
func (t *TableClient) GetStamped(keys []uint64, out []float64) (stamp int64, err error) {
	return t.get(keys, out, true)
}

// localStamp is the stamp of a read of this slave's shards, taken after
// the gate let it through and before the values are read.
func (t *TableClient) localStamp() int64 {
	c := t.c
	if !c.gated() {
		return -1
	}
	if g := c.cfg.Server.Gate(c.cfg.Task, c.cfg.Stage); g != nil {
		return g.MinClock()
	}
	return -1
}

func (t *TableClient) get(keys []uint64, out []float64, stamped bool) (int64, error) {
	c := t.c
	if c.cfg.Observer != nil {
		defer t.observe(OpGet, time.Now(), c.stats.Requests)
	}
	for {
		p, stamp, err := t.startGet(keys, out, stamped, false, nil, nil)
		if err != nil || p == nil {
			return stamp, err
		}
		err = t.wait(p)
		st, ok := p.stamp, p.stamped
		c.release(p)
		if errors.Is(err, errViewChanged) {
			continue // a slave died: read again from the new heads
		}
		if err != nil {
			return -1, err
		}
		if !ok {
			return -1, nil
		}
		return st, nil
	}
}

// startGet issues a read: requests for remote keys are sent, keys in this
// slave's memory are read into out now. It returns the read to wait for
// (nil when every key was local, with the read's stamp). With keep, the
// read's bookkeeping does not borrow the client's scratch buffers, so the
// caller may run other operations before it waits (GetAsync). With later
// (GetNext, which keeps its bookkeeping too) the requests are gated at the
// worker's next clock and the keys in this slave's memory are left to
// later, to read at its Wait. With out32 (GetFloat32: out is nil, and
// the table is static, not wholly in this slave's memory) the values go
// to out32 instead, the answers copied in as they came off the wire.
func (t *TableClient) startGet(keys []uint64, out []float64, stamped, keep bool, later *aheadRead, out32 []float32) (*pending, int64, error) {
	c := t.c
	if c.err != nil {
		return nil, -1, c.err
	}
	if err := t.sendHeld(); err != nil { // the read sees them
		return nil, -1, err
	}
	if err := CheckKeys(t.spec, keys, len(out)+len(out32), "get"); err != nil {
		return nil, -1, err
	}
	if t.dyn() {
		p, err := t.getLive(keys, out, stamped)
		return p, -1, err
	}
	clock := c.clock
	if later != nil {
		clock = later.clock
		keep = true
	}
	if t.allHere && len(t.local) == 1 {
		if later != nil {
			later.whole(keys)
			return nil, -1, nil
		}
		if err := t.waitLocal(keys); err != nil {
			return nil, -1, err
		}
		stamp := int64(-1)
		if stamped && len(keys) > 0 {
			stamp = t.localStamp()
		}
		t.local[0].Get(keys, out)
		c.stats.LocalKeys += int64(len(keys))
		return nil, stamp, nil
	}
	w := t.spec.Width
	t.g.Group(t.dir, keys)
	p := t.begin(out)
	p.out32 = out32
	fail := func(err error) (*pending, int64, error) {
		c.release(p)
		return nil, -1, err
	}
	partOf := func(s, i, j int) part {
		if t.g.Whole() { // the answers fill out in order
			return part{off: i * w, n: (j - i) * w}
		}
		if keep {
			return part{pos: append([]int32(nil), t.g.Pos(s)[i:j]...)}
		}
		return part{pos: t.g.Pos(s)[i:j]}
	}
	// ask sends the reads of shard s's keys ks, a message's worth at a time.
	ask := func(s int, ks []uint64, clock int64) error {
		for i := 0; i < len(ks); i += t.maxKeys {
			j := min(i+t.maxKeys, len(ks))
			c.msg = Message{Op: OpGet, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: clock, Keys: ks[i:j]}
			if err := t.request(p, s, partOf(s, i, j)); err != nil {
				return err
			}
		}
		return nil
	}
	for s := range t.hosts {
		ks := t.g.Keys(s)
		if len(ks) == 0 || t.inMemory(s) {
			continue
		}
		if err := ask(s, ks, clock); err != nil {
			return fail(err)
		}
		c.stats.RemoteKeys += int64(len(ks))
	}
	// Serve local keys while remote replies travel.
	for s, st := range t.local {
		ks := t.g.Keys(s)
		if !t.inMemory(s) || len(ks) == 0 {
			continue
		}
		if later != nil {
			later.local(ks, t.g.Pos(s), t.g.Whole())
			continue
		}
		if err := t.waitLocal(ks); err != nil {
			return fail(err)
		}
		if stamped {
			p.note(t.localStamp())
		}
		dst := out // the keys in order, straight into out
		if !t.g.Whole() || out32 != nil {
			t.buf = grow(t.buf, len(ks)*w)
			dst = t.buf
		}
		if !t.readStatic(func() { st.Get(ks, dst) }) {
			// Keys started moving meanwhile: the home knows where they are.
			if err := ask(s, ks, c.clock); err != nil {
				return fail(err)
			}
			continue
		}
		if out32 != nil {
			narrowInto(out32, dst[:len(ks)*w], t.g.Pos(s), w) // exact: the table is float32
		} else {
			for i, ps := range t.g.Pos(s) {
				copy(out[int(ps)*w:int(ps+1)*w], dst[i*w:(i+1)*w])
			}
		}
		c.stats.LocalKeys += int64(len(ks))
	}
	return p, -1, nil
}

// Add adds deltas (len(keys)*Width values) to keys. Remote Adds are
// acknowledged asynchronously; Flush (or the end of the stage) waits.
func (t *TableClient) Add(keys []uint64, deltas []float64) error {
	c := t.c
	if c.cfg.Observer != nil {
		defer t.observe(OpAdd, time.Now(), c.stats.Requests)
	}
	if c.err != nil {
		return c.err
	}
	if err := t.checkKeys(keys, deltas, "add"); err != nil {
		return err
	}
	if t.dyn() {
		return t.writeLive(keys, deltas, OpAdd)
	}
	if t.allHere && len(t.local) == 1 {
		t.local[0].Add(keys, deltas)
		c.stats.LocalKeys += int64(len(keys))
		return nil
	}
	hold := t.holding()
	t.g.Group(t.dir, keys)
	for s := range t.hosts {
		ks := t.g.Keys(s)
		if len(ks) == 0 {
			continue
		}
		vals := t.gatherVals(ks, s, keys, deltas)
		if st := t.local[s]; st != nil && !t.repl && t.readStatic(func() { st.Add(ks, vals) }) {
			c.stats.LocalKeys += int64(len(ks))
			continue
		}
		c.stats.RemoteKeys += int64(len(ks))
		if hold {
			if err := t.hold(s, ks, vals); err != nil {
				return err
			}
			continue
		}
		if err := t.sendAdd(s, ks, vals); err != nil {
			return err
		}
	}
	return nil
}

// gatherVals returns the values of shard's keys ks (grouped from keys,
// whose values are vals, Width each) in ks's order: vals itself when the
// shard has every key (grouping keeps input order), else a copy in t.buf.
func (t *TableClient) gatherVals(ks []uint64, shard int, keys []uint64, vals []float64) []float64 {
	w := t.spec.Width
	if len(ks) == len(keys) {
		return vals[:len(keys)*w]
	}
	t.buf = grow(t.buf, len(ks)*w)
	for i, ps := range t.g.Pos(shard) {
		copy(t.buf[i*w:(i+1)*w], vals[int(ps)*w:int(ps+1)*w])
	}
	return t.buf
}

// sendAdd sends the Adds of ks (deltas: Width values each) to shard, in
// messages of at most maxKeys keys.
func (t *TableClient) sendAdd(shard int, ks []uint64, deltas []float64) error {
	return t.sendAdds(shard, ks, deltas, nil)
}

// sendAdds is sendAdd of deltas, or with raw of float32 deltas encoded
// already (AddFloat32).
func (t *TableClient) sendAdds(shard int, ks []uint64, deltas []float64, raw []byte) error {
	c, w := t.c, t.spec.Width
	for i := 0; i < len(ks); i += t.maxKeys {
		j := min(i+t.maxKeys, len(ks))
		c.msg = Message{Op: OpAdd, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: c.clock,
			Keys: ks[i:j], Width: uint16(w), DType: t.spec.DType}
		if raw != nil {
			c.msg.DType, c.msg.Raw = Float32, raw[i*w*4:j*w*4]
		} else {
			c.msg.Vals = deltas[i*w : j*w]
		}
		if err := t.publish(shard, j-i); err != nil {
			return err
		}
	}
	return nil
}

// Set overwrites keys (model load and direct transfer).
func (t *TableClient) Set(keys []uint64, vals []float64) error {
	if err := t.set(keys, vals); err != nil {
		return err
	}
	return t.c.Flush()
}

// set sends the overwrites of keys, acknowledged asynchronously.
func (t *TableClient) set(keys []uint64, vals []float64) error {
	c := t.c
	if err := t.checkKeys(keys, vals, "set"); err != nil {
		return err
	}
	if err := t.sendHeld(); err != nil { // an overwrite comes after them
		return err
	}
	if t.dyn() {
		return t.writeLive(keys, vals, OpSet)
	}
	w := t.spec.Width
	t.g.Group(t.dir, keys)
	for s := range t.hosts {
		ks := t.g.Keys(s)
		if len(ks) == 0 {
			continue
		}
		sv := t.gatherVals(ks, s, keys, vals)
		if st := t.local[s]; st != nil && !t.repl && t.readStatic(func() { st.Set(ks, sv) }) {
			continue
		}
		for i := 0; i < len(ks); i += t.maxKeys {
			j := min(i+t.maxKeys, len(ks))
			c.msg = Message{Op: OpSet, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker,
				Keys: ks[i:j], Width: uint16(w), DType: t.spec.DType, Vals: sv[i*w : j*w]}
			if err := t.publish(s, j-i); err != nil {
				return err
			}
		}
	}
	return nil
}

// readStatic runs fn (an in-memory access to this slave's home shard)
// under the move lock if the table is still static here, and reports
// whether it ran. When keys started moving through this slave, the caller
// sends the request to the home instead (always correct).
func (t *TableClient) readStatic(fn func()) bool {
	if t.lv == nil {
		fn()
		return true
	}
	t.lv.mu.RLock()
	defer t.lv.mu.RUnlock()
	if t.lv.dynamic.Load() {
		return false
	}
	fn()
	return true
}

// begin starts a read into out; the caller releases it (c.release) when
// done, whatever happened.
func (t *TableClient) begin(out []float64) *pending {
	c := t.c
	c.seq++
	var p *pending
	if n := len(c.free); n > 0 {
		p, c.free = c.free[n-1], c.free[:n-1]
	} else {
		p = &pending{}
	}
	p.seq, p.left, p.parts, p.host = c.seq, 0, p.parts[:0], p.host[:0]
	p.out, p.width, p.err, p.repl = out, t.spec.Width, nil, t.repl
	p.stamp, p.stamped, p.lost = -1, false, false
	c.reads[p.seq] = p
	return p
}

// inMemory reports whether a read of shard is served from this slave's
// memory: the shard is here, and (replicated tables) none of this
// client's writes to it is still on its way through the server, which a
// read in memory could overtake.
func (t *TableClient) inMemory(shard int) bool {
	return t.local[shard] != nil && (!t.repl || t.unacked[shard] == 0)
}

// publish sends c.msg, a write of units keys to shard, acknowledged
// asynchronously: to the shard's host, or its chain's head when the
// table is replicated.
func (t *TableClient) publish(shard, units int) error {
	if t.repl {
		return t.c.publishRepl(t, shard, units)
	}
	return t.c.publishAcked(t.hosts[shard], units)
}

// hostFor is the host serving shard's reads now.
func (t *TableClient) hostFor(shard int) (string, error) {
	if !t.repl {
		return t.hosts[shard], nil
	}
	h, ok := t.c.cfg.Routes.Head(shard, t.spec.Replicas)
	if !ok {
		return "", fmt.Errorf("%w: table %q shard %d: no live slave left", ErrShardLost, t.spec.Name, shard)
	}
	t.c.msg.Repl, t.c.msg.Shard, t.c.msg.Epoch = true, int32(shard), t.c.view.Epoch
	return h, nil
}

// request sends c.msg to the owner of shard as part of read p.
func (t *TableClient) request(p *pending, shard int, pt part) error {
	c := t.c
	host, err := t.hostFor(shard)
	if err != nil {
		return err
	}
	reply := c.inbox + ".g" + strconv.FormatUint(p.seq, 10) + "." + strconv.Itoa(len(p.parts))
	c.msg.From = c.cfg.Incarnation
	if err := c.sendMsg(host, reply); err != nil {
		if !t.repl {
			return err
		}
		// Read again after the failover (errViewChanged).
	}
	p.parts = append(p.parts, pt)
	p.host = append(p.host, host)
	p.left += pt.size(t.spec.Width)
	return nil
}

func (t *TableClient) wait(p *pending) error {
	for p.left > 0 && p.err == nil {
		if err := t.c.receive(p); err != nil {
			return err
		}
	}
	if p.err != nil {
		return p.err
	}
	return t.c.err
}
