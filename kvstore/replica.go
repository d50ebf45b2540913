package kvstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Replication of a table with Replicas = R > 1 (chain replication, as in
// the OSDI'14 parameter server): every shard is held by a chain of R
// slaves (Routes.Chain). A client sends a write to the chain's head with
// its request id (ReqID) and its acknowledgement address; each member
// applies it and passes it on with the same reply address; the tail
// acknowledges. So an acknowledged write is on every live replica, and a
// death can lose only writes nobody acknowledged, which their clients
// still hold and send again to the new head. Members deduplicate by
// (reply address, ReqID): each keeps the ids it applied per client,
// forgetting those below the client's floor (Message.Floor: every id
// below it is acknowledged, so never sent again), and skips a write it
// applied (one the dead head had passed on before dying, or a retry). Ids
// travel out of order across a failover (a retry may overtake a copy the
// dead head passed on), so a highest-id mark would not do.
//
// Everything here runs on the server's handler goroutine: writes to a
// replicated table never take the in-memory path (clients send them to the
// head even when it is their own slave), so the handler is the only writer
// of every copy, and a snapshot taken on it is a consistent cut.
//
// On a membership change (OpFailover, sent by the node to itself so it is
// handled in line with its requests) each node recomputes its chains: a
// backup that became head serves the shard; a head whose chain gained a
// member (the next live slave in the ring) sends it a snapshot (pages of
// values, then the applied ids) and passes later writes on to it; the new
// member queues the writes that reach it before the snapshot ends.
// Requests a node is not the right one for under its view (a client that
// learned of the death first) wait for the node's view to catch up.

// replSet is a replicated table's copies on this node, by shard.
type replSet struct {
	replicas int
	shards   map[int]*replica
}

// replica is one copy of a shard.
type replica struct {
	store   Store
	ready   bool                   // holds the shard's data (false: waiting for a snapshot)
	epoch   uint64                 // the membership epoch of the snapshot it holds or awaits (0: a first copy)
	applied map[string]*appliedIDs // request ids applied, by reply address
	queue   []heldReq              // chain writes that came before the snapshot ended
}

// heldReq is a request kept to be handled again.
type heldReq struct {
	data  []byte
	reply string
}

// newReplSet creates the copies of table ht this node is in the chain of
// when every host is alive: its own shard (the store it serves) and the
// R-1 shards before it in the ring.
func newReplSet(spec TableSpec, dir Directory, self int, n int, own Store) (*replSet, error) {
	rs := &replSet{replicas: spec.Replicas, shards: map[int]*replica{}}
	dead := make([]bool, n)
	for i := range n {
		if !slices.Contains(Chain(n, dead, i, spec.Replicas), self) {
			continue
		}
		st := own
		if i != self {
			if spec.Storage == Dense {
				what := fmt.Sprintf("table %q replica of shard %d (%d keys x %d)", spec.Name, i, dir.ShardKeys(i), spec.Width)
				if err := checkAlloc(what, dir.ShardKeys(i), spec.Width, spec.elemBytes()); err != nil {
					return nil, err
				}
			}
			st = NewStore(spec, dir, i)
		}
		rs.shards[i] = &replica{store: st, ready: true, applied: map[string]*appliedIDs{}}
	}
	return rs, nil
}

// replicated handles a request for a replicated table (m.Repl set).
func (s *Server) replicated(data []byte, reply string, t *hostedTask, ht *hostedTable, m *Message) {
	if t.routes.Epoch() != t.seenEpoch {
		// The view changed and the note saying so is still queued: act
		// on it now, so this request is routed by the view the slave has.
		s.failover(t)
	}
	shard := int(m.Shard)
	if shard < 0 || shard >= len(t.hosts) {
		s.fail(reply, fmt.Errorf("kvstore: table %q has no shard %d", m.Table, shard))
		return
	}
	if m.Epoch > t.seenEpoch && m.Op != OpSnapshot {
		// The sender knows of a death this slave has not heard of yet:
		// routed by this slave's view the request could end at a tail
		// that is no longer one. It waits for the view.
		s.wrongNode(data, reply, t, ht, m, nil)
		return
	}
	chain := Chain(len(t.hosts), t.seen, shard, ht.repl.replicas)
	pos := slices.Index(chain, t.self)
	rep := ht.repl.shards[shard]
	switch m.Op {
	case OpSnapshot:
		s.snapshotIn(t, ht, shard, m)
		return
	case OpAdd, OpSet, OpAddRange, OpSetRange:
	case OpGet, OpGetRange, OpScan:
		if pos != 0 {
			s.wrongNode(data, reply, t, ht, m, chain)
			return
		}
		if rep == nil || !rep.ready {
			s.fail(reply, s.lost(t, ht, shard))
			return
		}
		view := ht
		if rep.store != ht.store {
			cp := *ht
			cp.store, cp.shard = rep.store, shard // live stays: static (replicated tables never move keys)
			view = &cp
		}
		if m.Op == OpScan {
			s.scan(reply, view, m)
		} else {
			s.get(reply, t, view, m)
		}
		return
	default:
		s.fail(reply, fmt.Errorf("kvstore: unexpected op %s on replicated table %q", m.Op, m.Table))
		return
	}
	// A write: from the client to the head (Hop 0), or down the chain.
	if (m.Hop == 0) != (pos == 0) || pos < 0 {
		if m.Hop > 0 && pos == 0 {
			// From a former head this node replaced: it is dead in this
			// node's view; the client sends the write again to us.
			s.log.Warn().Str("table", m.Table).Int("shard", shard).Msg("chain write from a replaced head dropped")
			return
		}
		s.wrongNode(data, reply, t, ht, m, chain)
		return
	}
	if rep == nil {
		if m.Hop == 0 {
			s.fail(reply, s.lost(t, ht, shard))
			return
		}
		// A new member whose snapshot has not started arriving.
		rep = &replica{store: NewStore(ht.spec, ht.dir, shard), applied: map[string]*appliedIDs{}}
		ht.repl.shards[shard] = rep
	}
	if !rep.ready {
		if m.Hop == 0 {
			s.fail(reply, s.lost(t, ht, shard))
			return
		}
		rep.queue = append(rep.queue, heldReq{data: slices.Clone(data), reply: reply})
		return
	}
	s.chainWrite(t, ht, rep, shard, chain, pos, m, reply)
}

// chainWrite applies a write to rep (once per request id) and passes it on
// to the next member, or acknowledges it at the tail.
func (s *Server) chainWrite(t *hostedTask, ht *hostedTable, rep *replica, shard int, chain []int, pos int, m *Message, reply string) {
	units := len(m.Keys)
	if m.Op == OpAddRange || m.Op == OpSetRange {
		units = int(m.N)
	}
	a := rep.applied[reply]
	if m.ReqID != 0 && a == nil {
		a = &appliedIDs{ids: map[uint64]struct{}{}}
		rep.applied[reply] = a
	}
	if m.ReqID == 0 || !a.seen(m.ReqID, m.Floor) {
		if err := s.applyWrite(ht, rep.store, m); err != nil {
			s.fail(reply, err)
			return
		}
		if m.ReqID != 0 {
			a.ids[m.ReqID] = struct{}{}
		}
	}
	if pos == len(chain)-1 {
		s.ackID(reply, units, m.ReqID)
		return
	}
	next := t.hosts[chain[pos+1]]
	m.Hop++
	m.Epoch = t.seenEpoch
	s.fwd = AppendMessage(s.fwd[:0], m)
	if err := s.tr.Send(next, reply, s.fwd); err != nil {
		// The client re-sends the write once the membership says next
		// is gone; the members dedupe it.
		s.log.Warn().Err(err).Str("table", m.Table).Int("shard", shard).Str("next", next).Msg("chain write not passed on")
	}
}

// applyWrite applies one write message to store.
func (s *Server) applyWrite(ht *hostedTable, st Store, m *Message) error {
	w := ht.spec.Width
	switch m.Op {
	case OpAdd, OpSet:
		if n := rawLen(m); n != len(m.Keys)*w {
			return fmt.Errorf("kvstore: %s on %q: %d values for %d keys of width %d", m.Op, m.Table, n, len(m.Keys), w)
		}
		for _, k := range m.Keys {
			if k >= ht.spec.Size {
				return fmt.Errorf("kvstore: %s on %q: key %d out of range", m.Op, m.Table, k)
			}
		}
		if ra, ok := st.(rawAdder); m.Op == OpAdd && ok && ra.AddRaw(m.Keys, m.Raw, m.DType) {
			return nil
		}
		s.vals(m)
		if m.Op == OpAdd {
			st.Add(m.Keys, m.Vals)
		} else {
			st.Set(m.Keys, m.Vals)
		}
	case OpAddRange, OpSetRange:
		if rawLen(m) != int(m.N)*w || m.First+uint64(m.N) > ht.spec.Size {
			return fmt.Errorf("kvstore: %s on %q: bad range or values", m.Op, m.Table)
		}
		if ra, ok := st.(rawAdder); m.Op == OpAddRange && ok && ra.AddRangeRaw(m.First, int(m.N), m.Raw, m.DType) {
			return nil
		}
		s.vals(m)
		if m.Op == OpAddRange {
			st.AddRange(m.First, int(m.N), m.Vals)
		} else {
			st.SetRange(m.First, int(m.N), m.Vals)
		}
	}
	return nil
}

// wrongNode parks a request this node is not the right one for under its
// view when the view may still change (the right node is one it still
// thinks alive and the sender knows better); otherwise it fails it.
func (s *Server) wrongNode(data []byte, reply string, t *hostedTask, ht *hostedTable, m *Message, chain []int) {
	if len(t.parked) < maxParked && t.parkedBytes+len(data) <= maxParkedBytes {
		t.parked = append(t.parked, heldReq{data: slices.Clone(data), reply: reply})
		t.parkedBytes += len(data)
		return
	}
	who := "none"
	if len(chain) > 0 {
		who = t.hosts[chain[0]]
	}
	s.fail(reply, fmt.Errorf("kvstore: %s of table %q shard %d sent to slave %s, whose view has slave %s serving it", m.Op, m.Table, m.Shard, s.node, who))
}

// maxParked and maxParkedBytes bound the requests a node keeps while its
// view lags (normally for well under a heartbeat).
const (
	maxParked      = 1 << 16
	maxParkedBytes = 256 << 20
)

func (s *Server) lost(t *hostedTask, ht *hostedTable, shard int) error {
	return fmt.Errorf("%w: table %q shard %d (first on slave %s): its replicas died before a new copy was complete", ErrShardLost, ht.spec.Name, shard, t.hosts[shard])
}

// failover applies the task's current membership view: new heads serve,
// heads send snapshots to new members, parked requests are handled again.
func (s *Server) failover(t *hostedTask) {
	v := t.routes.View()
	t.seenEpoch = v.Epoch
	if slices.Equal(v.Dead, t.seen) {
		return
	}
	old := t.seen
	t.seen = v.Dead
	n := len(t.hosts)
	t.mu.RLock()
	tables := make([]*hostedTable, 0, len(t.tables))
	for _, ht := range t.tables {
		if ht.repl != nil {
			tables = append(tables, ht)
		}
	}
	t.mu.RUnlock()
	sort.Slice(tables, func(i, j int) bool { return tables[i].spec.Name < tables[j].spec.Name })
	for _, ht := range tables {
		for shard := range n {
			was := Chain(n, old, shard, ht.repl.replicas)
			now := Chain(n, v.Dead, shard, ht.repl.replicas)
			pos := slices.Index(now, t.self)
			if pos < 0 {
				// Not in the chain (a copy here came with a snapshot sent
				// under a view this slave has not reached yet: kept).
				continue
			}
			rep := ht.repl.shards[shard]
			if pos > 0 {
				if rep == nil {
					ht.repl.shards[shard] = &replica{store: NewStore(ht.spec, ht.dir, shard), applied: map[string]*appliedIDs{}}
				}
				continue
			}
			if rep == nil || !rep.ready {
				err := s.lost(t, ht, shard)
				s.log.Error().Err(err).Msg("shard lost")
				if f := s.shardLost.Load(); f != nil {
					(*f)(ht.task, err)
				}
				continue
			}
			// A head that kept its place sends a copy to each member that
			// joined; a new head cannot know whether its predecessor's
			// copies to the members that joined after the shard was
			// created arrived whole, so it sends them its own (a newer
			// snapshot supersedes an older one at the member).
			first := Chain(n, make([]bool, n), shard, ht.repl.replicas)
			if was[0] != t.self {
				s.log.Info().Str("table", ht.spec.Name).Int("shard", shard).Str("dead", t.hosts[was[0]]).Msg("serving the shard of a dead slave")
			}
			for _, h := range now[1:] {
				if !slices.Contains(was, h) || (was[0] != t.self && !slices.Contains(first, h)) {
					s.sendSnapshot(t, ht, rep, shard, t.hosts[h], v.Epoch)
				}
			}
		}
	}
	// Requests that waited for this view, now, in their order and before
	// anything that came after them.
	p := t.parked
	t.parked, t.parkedBytes = nil, 0
	for _, q := range p {
		var pm Message
		if err := decodeRaw(q.data, &pm); err != nil {
			continue
		}
		t.mu.RLock()
		ht := t.tables[pm.Table]
		t.mu.RUnlock()
		if ht == nil || ht.repl == nil {
			continue
		}
		s.replicated(q.data, q.reply, t, ht, &pm)
	}
}

// sendSnapshot copies rep to a new member: the cut is taken here, on the
// handler goroutine; the pages travel from another goroutine so the
// handler goes on serving. Writes after the cut reach the member down the
// chain and wait there for the snapshot's end.
func (s *Server) sendSnapshot(t *hostedTask, ht *hostedTable, rep *replica, shard int, to string, epoch uint64) {
	page := max(MaxKeysPerMessage(s.tr.MaxPayload(), ht.spec.Width, ht.spec.DType), 1)
	type pg struct {
		keys []uint64
		vals []float64
	}
	var pages []pg
	var cursor uint64
	for {
		keys, vals, next, more, err := scanStore(rep.store, cursor, page, nil, nil)
		if err != nil {
			s.log.Error().Err(err).Str("table", ht.spec.Name).Int("shard", shard).Msg("snapshot for a new replica failed")
			return
		}
		if len(keys) > 0 {
			pages = append(pages, pg{keys, vals})
		}
		if !more {
			break
		}
		cursor = next
	}
	ids := encodeApplied(rep.applied)
	task, table, dtype, width := ht.task, ht.spec.Name, ht.spec.DType, uint16(ht.spec.Width)
	log := s.log.With().Str("table", table).Int("shard", shard).Str("to", to).Logger()
	log.Info().Int("pages", len(pages)).Msg("re-replicating a shard to a new backup")
	s.spawn(func() {
		var buf []byte
		for _, p := range pages {
			buf = AppendMessage(buf[:0], &Message{Op: OpSnapshot, Task: task, Table: table, Keys: p.keys, Vals: p.vals, Width: width, DType: dtype, Repl: true, Shard: int32(shard), Hop: 1, Clock: int64(epoch)})
			if err := s.tr.Send(to, "", buf); err != nil {
				log.Warn().Err(err).Msg("snapshot page not sent")
				return
			}
		}
		buf = AppendMessage(buf[:0], &Message{Op: OpSnapshot, Task: task, Table: table, N: 1, First: 1, Repl: true, Shard: int32(shard), Hop: 1, Blob: ids, Clock: int64(epoch)})
		if err := s.tr.Send(to, "", buf); err != nil {
			log.Warn().Err(err).Msg("snapshot end not sent")
		}
	})
}

// snapshotIn installs a snapshot page or, at its end, the applied ids,
// and then the writes that waited for it. A snapshot taken at a later
// membership epoch (by a new head) replaces the copy; pages of an earlier
// one (a dead head's, still in flight) are ignored.
func (s *Server) snapshotIn(t *hostedTask, ht *hostedTable, shard int, m *Message) {
	epoch := uint64(max(m.Clock, 0))
	rep := ht.repl.shards[shard]
	if rep == nil {
		rep = &replica{store: NewStore(ht.spec, ht.dir, shard), applied: map[string]*appliedIDs{}, epoch: epoch}
		ht.repl.shards[shard] = rep
	}
	switch {
	case epoch < rep.epoch || (epoch == rep.epoch && rep.ready):
		return
	case epoch > rep.epoch:
		rep.store, rep.ready, rep.epoch, rep.applied = NewStore(ht.spec, ht.dir, shard), false, epoch, map[string]*appliedIDs{}
	}
	if len(m.Keys) > 0 {
		s.vals(m)
		if len(m.Vals) == len(m.Keys)*ht.spec.Width {
			rep.store.Set(m.Keys, m.Vals)
		}
		return
	}
	applied, err := decodeApplied(m.Blob)
	if err != nil {
		s.log.Error().Err(err).Str("table", ht.spec.Name).Int("shard", shard).Msg("bad snapshot end")
		return
	}
	rep.applied, rep.ready = applied, true
	q := rep.queue
	rep.queue = nil
	s.log.Info().Str("table", ht.spec.Name).Int("shard", shard).Int("queued", len(q)).Msg("new replica complete")
	var mm Message
	for _, w := range q {
		if err := decodeRaw(w.data, &mm); err != nil {
			continue
		}
		chain := Chain(len(t.hosts), t.seen, shard, ht.repl.replicas)
		pos := slices.Index(chain, t.self)
		if pos <= 0 {
			continue
		}
		s.chainWrite(t, ht, rep, shard, chain, pos, &mm, w.reply)
	}
}

// appliedIDs are the request ids of one client a copy applied: ids below
// floor all were (the client has their acknowledgements), the others are
// listed.
type appliedIDs struct {
	floor uint64
	ids   map[uint64]struct{}
}

// seen reports whether id was applied, after raising the floor to the
// client's (and forgetting the ids below it).
func (a *appliedIDs) seen(id, floor uint64) bool {
	if floor > a.floor {
		a.floor = floor
		for x := range a.ids {
			if x < floor {
				delete(a.ids, x)
			}
		}
	}
	if id < a.floor {
		return true
	}
	_, ok := a.ids[id]
	return ok
}

func encodeApplied(a map[string]*appliedIDs) []byte {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := binary.AppendUvarint(nil, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, a[k].floor)
		ids := make([]uint64, 0, len(a[k].ids))
		for id := range a[k].ids {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		b = binary.AppendUvarint(b, uint64(len(ids)))
		for _, id := range ids {
			b = binary.AppendUvarint(b, id)
		}
	}
	return b
}

var errBadApplied = errors.New("kvstore: malformed applied ids")

func decodeApplied(b []byte) (map[string]*appliedIDs, error) {
	d := decoder{b: b}
	n := d.count("applied", 3)
	out := make(map[string]*appliedIDs, n)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.str("client", "")
		a := &appliedIDs{floor: d.uvarint("floor"), ids: map[uint64]struct{}{}}
		c := d.count("ids", 1)
		for j := 0; j < c && d.err == nil; j++ {
			a.ids[d.uvarint("id")] = struct{}{}
		}
		out[k] = a
	}
	if d.err != nil || d.i != len(b) {
		return nil, errBadApplied
	}
	return out, nil
}
