package kvstore

import (
	"fmt"
	"strconv"
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
	_, _, contiguous := dir.Bounds(0)
	t.keyed = !contiguous
	t.allHere = true
	for i, h := range p.Hosts {
		if h == c.cfg.Self && c.cfg.Server != nil {
			st, ok := c.cfg.Server.Local(c.cfg.Task, spec.Name)
			if !ok {
				return nil, fmt.Errorf("kvstore: slave %s should host table %q of task %s but does not", h, spec.Name, c.cfg.Task)
			}
			t.local[i] = st
		} else {
			t.allHere = false
		}
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

// Err is the client's first asynchronous error (a failed Add), sticky.
func (t *TableClient) Err() error { return t.c.err }

func (t *TableClient) checkKeys(keys []uint64, vals []float64, what string) error {
	return checkKeys(t.spec, keys, vals, what)
}

func checkKeys(spec TableSpec, keys []uint64, vals []float64, what string) error {
	if len(vals) != len(keys)*spec.Width {
		return fmt.Errorf("kvstore: %s on %q: %d values for %d keys of width %d", what, spec.Name, len(vals), len(keys), spec.Width)
	}
	for _, k := range keys {
		if k >= spec.Size {
			return fmt.Errorf("kvstore: %s on %q: key %d out of range [0, %d)", what, spec.Name, k, spec.Size)
		}
	}
	return nil
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

// Get reads keys into out (len(keys)*Width values).
func (t *TableClient) Get(keys []uint64, out []float64) error {
	_, err := t.get(keys, out, false)
	return err
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
	if c.err != nil {
		return -1, c.err
	}
	if err := t.checkKeys(keys, out, "get"); err != nil {
		return -1, err
	}
	if t.allHere && len(t.local) == 1 {
		if err := t.waitLocal(keys); err != nil {
			return -1, err
		}
		stamp := int64(-1)
		if stamped && len(keys) > 0 {
			stamp = t.localStamp()
		}
		t.local[0].Get(keys, out)
		c.stats.LocalKeys += int64(len(keys))
		return stamp, nil
	}
	w := t.spec.Width
	t.g.Group(t.dir, keys)
	p := t.begin(out)
	for s := range t.hosts {
		ks := t.g.Keys(s)
		if len(ks) == 0 || t.local[s] != nil {
			continue
		}
		pos := t.g.Pos(s)
		for i := 0; i < len(ks); i += t.maxKeys {
			j := min(i+t.maxKeys, len(ks))
			c.msg = Message{Op: OpGet, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: c.clock, Keys: ks[i:j]}
			if err := t.request(p, s, part{pos: pos[i:j]}); err != nil {
				return -1, err
			}
		}
		c.stats.RemoteKeys += int64(len(ks))
	}
	// Serve local keys while remote replies travel.
	for s, st := range t.local {
		ks := t.g.Keys(s)
		if st == nil || len(ks) == 0 {
			continue
		}
		if err := t.waitLocal(ks); err != nil {
			return -1, err
		}
		if stamped {
			p.note(t.localStamp())
		}
		t.buf = grow(t.buf, len(ks)*w)
		st.Get(ks, t.buf)
		for i, ps := range t.g.Pos(s) {
			copy(out[int(ps)*w:int(ps+1)*w], t.buf[i*w:(i+1)*w])
		}
		c.stats.LocalKeys += int64(len(ks))
	}
	if err := t.wait(p); err != nil {
		return -1, err
	}
	if !p.stamped {
		return -1, nil
	}
	return p.stamp, nil
}

// Add adds deltas (len(keys)*Width values) to keys. Remote Adds are
// acknowledged asynchronously; Flush (or the end of the stage) waits.
func (t *TableClient) Add(keys []uint64, deltas []float64) error {
	c := t.c
	if c.err != nil {
		return c.err
	}
	if err := t.checkKeys(keys, deltas, "add"); err != nil {
		return err
	}
	if t.allHere && len(t.local) == 1 {
		t.local[0].Add(keys, deltas)
		c.stats.LocalKeys += int64(len(keys))
		return nil
	}
	w := t.spec.Width
	t.g.Group(t.dir, keys)
	for s := range t.hosts {
		ks := t.g.Keys(s)
		if len(ks) == 0 {
			continue
		}
		t.buf = grow(t.buf, len(ks)*w)
		for i, ps := range t.g.Pos(s) {
			copy(t.buf[i*w:(i+1)*w], deltas[int(ps)*w:int(ps+1)*w])
		}
		if st := t.local[s]; st != nil {
			st.Add(ks, t.buf)
			c.stats.LocalKeys += int64(len(ks))
			continue
		}
		for i := 0; i < len(ks); i += t.maxKeys {
			j := min(i+t.maxKeys, len(ks))
			c.msg = Message{Op: OpAdd, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: c.clock,
				Keys: ks[i:j], Width: uint16(w), DType: t.spec.DType, Vals: t.buf[i*w : j*w]}
			if err := c.publishAcked(t.hosts[s]); err != nil {
				return err
			}
		}
		c.stats.RemoteKeys += int64(len(ks))
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
	w := t.spec.Width
	t.g.Group(t.dir, keys)
	for s := range t.hosts {
		ks := t.g.Keys(s)
		if len(ks) == 0 {
			continue
		}
		t.buf = grow(t.buf, len(ks)*w)
		for i, ps := range t.g.Pos(s) {
			copy(t.buf[i*w:(i+1)*w], vals[int(ps)*w:int(ps+1)*w])
		}
		if st := t.local[s]; st != nil {
			st.Set(ks, t.buf)
			continue
		}
		for i := 0; i < len(ks); i += t.maxKeys {
			j := min(i+t.maxKeys, len(ks))
			c.msg = Message{Op: OpSet, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker,
				Keys: ks[i:j], Width: uint16(w), DType: t.spec.DType, Vals: t.buf[i*w : j*w]}
			if err := c.publishAcked(t.hosts[s]); err != nil {
				return err
			}
		}
	}
	return nil
}

// begin starts a read into out.
func (t *TableClient) begin(out []float64) *pending {
	c := t.c
	c.seq++
	c.out, c.width = out, t.spec.Width
	p := &c.p
	p.seq, p.left, p.parts, p.host = c.seq, 0, p.parts[:0], p.host[:0]
	p.stamp, p.stamped = -1, false
	return p
}

// request sends c.msg to the owner of shard as part of read p.
func (t *TableClient) request(p *pending, shard int, pt part) error {
	c := t.c
	host := t.hosts[shard]
	reply := c.inbox + ".g" + strconv.FormatUint(p.seq, 10) + "." + strconv.Itoa(len(p.parts))
	c.msg.From = c.cfg.Incarnation
	c.enc = AppendMessage(c.enc[:0], &c.msg)
	if err := c.send(host, reply, c.enc); err != nil {
		return err
	}
	c.stats.Requests++
	c.stats.BytesSent += int64(len(c.enc))
	p.parts = append(p.parts, pt)
	p.host = append(p.host, host)
	p.left++
	return nil
}

func (t *TableClient) wait(p *pending) error {
	for p.left > 0 {
		if err := t.c.receive(p); err != nil {
			return err
		}
	}
	return t.c.err
}
