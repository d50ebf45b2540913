package kvstore

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexps/flexps/kvstore/ownership"
)

// Live ownership of a hosted table (Lapse-style dynamic allocation).
//
// Every key has a home: the shard the static Directory names, hosted by
// the task's i-th slave (the ownership NodeID is the shard index). A key
// is owned by its home until a worker localizes it; from then on the
// home's ownership.Node knows the current owner, and the owner keeps the
// value in its guest store (a store over the whole key space: a dense
// array when the table fits in denseGuestMaxBytes, else sparse). The
// relocation machine (package ownership) decides; the Server executes its
// actions on the stores and the transport.
//
// A table stays static until the first relocation message reaches its
// node: a static node serves exactly as before (no lock, no ownership
// lookups, no guest store), so tables nobody localizes pay nothing. The
// switch to dynamic (activate) happens under the move lock, which workers
// of the slave hold for reading around every in-memory batch, so no
// in-memory Add races with a key leaving the node; it also gives the node
// its ownership bitset, so a worker checks a key it owns with one bit
// test.
type live struct {
	// mu orders moves against in-memory access: the server's handler
	// holds it for writing while it steps the machine (installing or
	// extracting values); workers hold it for reading around each batch
	// they serve from memory. Nobody waits on the network or a gate while
	// holding it.
	mu    sync.RWMutex
	node  *ownership.Node
	self  int
	hosts []string
	home  Store // the home shard's store
	guest Store // keys owned here whose home is elsewhere (made by activate)
	spec  TableSpec
	whole Directory // one shard over the whole key space (the guest store's)
	dir   Directory
	// lo, hi: the home shard's keys when the partitioning is contiguous.
	lo, hi     uint64
	contiguous bool
	dynamic    atomic.Bool
	// moves counts installs and extracts here. A worker flushes its
	// in-flight Adds before its first in-memory access after a change,
	// so an Add still travelling the old route cannot land after a read
	// that should have seen it (rule 5 of the protocol).
	moves   atomic.Uint64
	waiters map[uint64][]*localizeWaiter

	stats liveStats
}

// liveStats count relocation work on one node (guarded by mu).
type liveStats struct {
	installed, extracted, forwarded, queued int64
	localizes                               int64 // worker Localize requests that had to move keys
	// latency of those requests, from arrival here to the last key
	// installed: bucket i counts [2^i, 2^(i+1)) microseconds.
	latency [LatencyBuckets]int64
}

// LatencyBuckets is the number of Localize latency buckets (bucket i
// counts requests of [2^i, 2^(i+1)) microseconds; the last one all above).
const LatencyBuckets = 32

type localizeWaiter struct {
	left  int
	reply string
	start time.Time
}

func latencyBucket(d time.Duration) int {
	us := d.Microseconds()
	b := 0
	for us > 1 && b < LatencyBuckets-1 {
		us >>= 1
		b++
	}
	return b
}

// reqCtx is what an Apply needs of the request a (possibly forwarded or
// queued) ownership message came from.
type reqCtx struct {
	op     Op // OpGet, OpAdd or OpSet
	reply  string
	stage  int32
	worker int32
	clock  int64
}

func newLive(spec TableSpec, dir Directory, shard int, hosts []string, home Store) (*live, error) {
	whole, err := NewDirectory(TableSpec{Name: spec.Name, Size: spec.Size, Partition: RangePartition, Storage: Sparse}.WithDefaults(), 1)
	if err != nil {
		return nil, err
	}
	lv := &live{self: shard, hosts: hosts, home: home, spec: spec, whole: whole, dir: dir, waiters: map[uint64][]*localizeWaiter{}}
	lv.lo, lv.hi, lv.contiguous = dir.Bounds(shard)
	lv.node = ownership.NewNode(ownership.NodeID(shard), func(k uint64) ownership.NodeID { return ownership.NodeID(dir.Owner(k)) })
	return lv, nil
}

// activate switches the table to dynamic on this node (move lock held
// for writing): the guest store and the ownership bitset are made now,
// at the first relocation message, so a table nobody localizes costs
// neither.
func (lv *live) activate() {
	if lv.dynamic.Load() {
		return
	}
	lv.guest = NewStore(guestSpec(lv.spec), lv.whole, 0)
	lv.node.EnableIndex(lv.spec.Size)
	lv.dynamic.Store(true)
}

// denseGuestMaxBytes bounds the guest store kept as a dense array over
// the whole key space: a guest read or add is then an index, not a hash
// probe (the sparse guest store's open addressing cost a worker's
// in-memory batch about as much as the dense home shard's copy). Pages
// of the array no guest ever touched are never written, so the memory a
// slave really uses grows with the keys it holds, not with the table.
const denseGuestMaxBytes = 32 << 20

// guestSpec is the spec of a table's guest store: dense (zero-initialized:
// every guest row is installed before it is read) when the whole table
// fits in denseGuestMaxBytes, else sparse.
func guestSpec(spec TableSpec) TableSpec {
	g := spec
	g.Storage, g.Init = Sparse, "zero"
	bytes := uint64(8)
	if spec.DType == Float32 {
		bytes = 4
	}
	if spec.Size <= denseGuestMaxBytes/bytes/uint64(max(spec.Width, 1)) {
		g.Storage = Dense
	}
	return g
}

// isHome reports whether k's home is this node (its value lives in the
// home store when owned here).
func (lv *live) isHome(k uint64) bool {
	if lv.contiguous {
		return k-lv.lo < lv.hi-lv.lo
	}
	return lv.dir.Owner(k) == lv.self
}

// homeOf is the shard index of k's home.
func (lv *live) homeOf(k uint64) int { return int(lv.node.Home(k)) }

// split calls fn with the keys (and their rows of vals, when vals is not
// nil) that live in each of the two stores. Scratch comes from sc.
func (lv *live) split(keys []uint64, vals []float64, w int, sc *liveScratch, fn func(st Store, keys []uint64, vals []float64, idx []int)) {
	sc.hk, sc.gk, sc.hi, sc.gi = sc.hk[:0], sc.gk[:0], sc.hi[:0], sc.gi[:0]
	sc.hv, sc.gv = sc.hv[:0], sc.gv[:0]
	for i, k := range keys {
		if lv.isHome(k) {
			sc.hk, sc.hi = append(sc.hk, k), append(sc.hi, i)
			if vals != nil {
				sc.hv = append(sc.hv, vals[i*w:(i+1)*w]...)
			}
		} else {
			sc.gk, sc.gi = append(sc.gk, k), append(sc.gi, i)
			if vals != nil {
				sc.gv = append(sc.gv, vals[i*w:(i+1)*w]...)
			}
		}
	}
	if len(sc.hk) > 0 {
		fn(lv.home, sc.hk, sc.hv, sc.hi)
	}
	if len(sc.gk) > 0 {
		fn(lv.guest, sc.gk, sc.gv, sc.gi)
	}
}

type liveScratch struct {
	hk, gk []uint64
	hi, gi []int
	hv, gv []float64
	tmp    []float64 // get's staging buffer
}

// get reads keys (all owned here) into out.
func (lv *live) get(keys []uint64, out []float64, w int, sc *liveScratch) {
	if len(keys) == 0 {
		return
	}
	sc.tmp = grow(sc.tmp, len(keys)*w)
	tmp := sc.tmp
	lv.split(keys, nil, w, sc, func(st Store, ks []uint64, _ []float64, idx []int) {
		st.Get(ks, tmp[:len(ks)*w])
		for j, i := range idx {
			copy(out[i*w:(i+1)*w], tmp[j*w:(j+1)*w])
		}
	})
}

// add adds (or with set, writes) rows of vals to keys (all owned here).
func (lv *live) add(keys []uint64, vals []float64, w int, set bool, sc *liveScratch) {
	lv.split(keys, vals, w, sc, func(st Store, ks []uint64, vs []float64, _ []int) {
		if set {
			st.Set(ks, vs)
		} else {
			st.Add(ks, vs)
		}
	})
}

// ownershipKind maps a data op to the machine's message kind.
func ownershipKind(op Op) ownership.Kind {
	switch op {
	case OpGet, OpGetRange:
		return ownership.Get
	case OpSet, OpSetRange:
		return ownership.Set
	}
	return ownership.Add
}

// keyedOp is the keyed form of a (range) data op.
func keyedOp(op Op) Op {
	switch op {
	case OpGetRange:
		return OpGet
	case OpAddRange:
		return OpAdd
	case OpSetRange:
		return OpSet
	}
	return op
}

// routed serves a data request on a dynamic table: the machine splits it
// into the keys owned here (applied now), keys on their way here (queued)
// and keys owned elsewhere (forwarded with the original reply address).
func (s *Server) routed(reply string, t *hostedTask, ht *hostedTable, m *Message) {
	w := ht.spec.Width
	keys := m.Keys
	if m.Op == OpGetRange || m.Op == OpAddRange || m.Op == OpSetRange {
		if m.First+uint64(m.N) > ht.spec.Size {
			s.fail(reply, fmt.Errorf("kvstore: %s on %q beyond size %d", m.Op, m.Table, ht.spec.Size))
			return
		}
		keys = make([]uint64, m.N)
		for i := range keys {
			keys[i] = m.First + uint64(i)
		}
	} else {
		keys = slices.Clone(keys)
	}
	pos := slices.Clone(m.Pos)
	if len(pos) == 0 {
		pos = make([]int, len(keys))
		for i := range pos {
			pos[i] = i
		}
	}
	if len(pos) != len(keys) {
		s.fail(reply, fmt.Errorf("kvstore: %s on %q: %d positions for %d keys", m.Op, m.Table, len(pos), len(keys)))
		return
	}
	for _, k := range keys {
		if k >= ht.spec.Size {
			s.fail(reply, fmt.Errorf("kvstore: %s on %q: key %d out of range [0, %d)", m.Op, m.Table, k, ht.spec.Size))
			return
		}
	}
	op := keyedOp(m.Op)
	om := ownership.Msg{Kind: ownershipKind(op), Keys: keys, Positions: pos,
		Ctx: &reqCtx{op: op, reply: reply, stage: m.Stage, worker: m.Worker, clock: m.Clock}}
	if op != OpGet {
		s.vals(m)
		if len(m.Vals) != len(keys)*w {
			s.fail(reply, fmt.Errorf("kvstore: %s on %q: %d values for %d keys of width %d", m.Op, m.Table, len(m.Vals), len(keys), w))
			return
		}
		vals := slices.Clone(m.Vals)
		om.Vals = make([][]float64, len(keys))
		for i := range keys {
			om.Vals[i] = vals[i*w : (i+1)*w]
		}
	}
	lv := ht.live
	lv.mu.Lock()
	s.run(t, ht, lv.node.Step(om))
	lv.mu.Unlock()
	s.runLater()
}

// runLater parks the gated reads the last step produced (handler only,
// move lock released).
func (s *Server) runLater() {
	for _, fn := range s.later {
		fn()
	}
	clear(s.later)
	s.later = s.later[:0]
}

// relocate handles a relocation message. An OpLocalize with a reply
// address comes from a worker of this slave (move these keys here, answer
// when they are installed); without one it comes from a requester node to
// this home.
func (s *Server) relocate(reply string, t *hostedTask, ht *hostedTable, m *Message) {
	lv := ht.live
	for _, k := range m.Keys {
		if k >= ht.spec.Size {
			s.fail(reply, fmt.Errorf("kvstore: %s on %q: key %d out of range [0, %d)", m.Op, m.Table, k, ht.spec.Size))
			return
		}
	}
	if int(m.Node) >= len(lv.hosts) {
		s.fail(reply, fmt.Errorf("kvstore: %s on %q: node %d of %d", m.Op, m.Table, m.Node, len(lv.hosts)))
		return
	}
	lv.mu.Lock()
	defer s.runLater()
	defer lv.mu.Unlock()
	lv.activate()
	keys := slices.Clone(m.Keys)
	switch {
	case m.Op == OpLocalize && reply != "":
		wt := &localizeWaiter{reply: reply, start: time.Now()}
		for _, k := range keys {
			if !lv.node.Owns(k) {
				wt.left++
				lv.waiters[k] = append(lv.waiters[k], wt)
			}
		}
		if wt.left > 0 {
			lv.stats.localizes++
		}
		s.run(t, ht, lv.node.StartLocalize(keys))
		if wt.left == 0 {
			s.send(reply, ackUnits(1))
		}
	case m.Op == OpLocalize:
		s.run(t, ht, lv.node.Step(ownership.Msg{Kind: ownership.Localize, Keys: keys, Node: ownership.NodeID(m.Node)}))
	case m.Op == OpTransfer:
		if len(m.Versions) != len(keys) {
			s.log.Warn().Str("table", m.Table).Msg("kv transfer without versions ignored")
			return
		}
		s.run(t, ht, lv.node.Step(ownership.Msg{Kind: ownership.Transfer, Keys: keys, Node: ownership.NodeID(m.Node), Versions: slices.Clone(m.Versions)}))
	case m.Op == OpValues:
		w := ht.spec.Width
		s.vals(m)
		if len(m.Vals) != len(keys)*w || len(m.Versions) != len(keys) {
			s.log.Error().Str("table", m.Table).Int("keys", len(keys)).Msg("kv values message malformed: keys lost in relocation")
			return
		}
		vals := slices.Clone(m.Vals)
		rows := make([][]float64, len(keys))
		for i := range keys {
			rows[i] = vals[i*w : (i+1)*w]
		}
		s.run(t, ht, lv.node.Step(ownership.Msg{Kind: ownership.Values, Keys: keys, Vals: rows, Versions: slices.Clone(m.Versions)}))
	}
}

// ackUnits is an acknowledgement of n units (keys applied, or 1 for a
// clock, finish or completed localize).
func ackUnits(n int) []byte {
	return AppendMessage(nil, &Message{Op: OpReply, N: uint32(n)})
}

// run carries out the machine's actions (lv.mu held for writing).
func (s *Server) run(t *hostedTask, ht *hostedTable, acts []ownership.Action) {
	lv := ht.live
	w := ht.spec.Width
	for _, a := range acts {
		switch a.Kind {
		case ownership.Apply:
			s.apply(t, ht, a.Msg)
		case ownership.Send:
			s.forward(ht, a)
		case ownership.Extract:
			out := make([]float64, len(a.Msg.Keys)*w)
			lv.get(a.Msg.Keys, out, w, &s.lsc)
			lv.moves.Add(1)
			lv.stats.extracted += int64(len(a.Msg.Keys))
			s.sendNode(ht, int(a.To), &Message{Op: OpValues, Table: ht.spec.Name, Task: ht.task, Keys: a.Msg.Keys,
				Versions: a.Msg.Versions, Width: uint16(w), DType: ht.spec.DType, Vals: out})
		case ownership.Install:
			vals := make([]float64, 0, len(a.Msg.Keys)*w)
			for _, r := range a.Msg.Vals {
				vals = append(vals, r...)
			}
			lv.add(a.Msg.Keys, vals, w, true, &s.lsc)
			lv.moves.Add(1)
			lv.stats.installed += int64(len(a.Msg.Keys))
		case ownership.LocalizeDone:
			for _, k := range a.Msg.Keys {
				for _, wt := range lv.waiters[k] {
					if wt.left--; wt.left == 0 {
						lv.stats.latency[latencyBucket(time.Since(wt.start))]++
						s.send(wt.reply, ackUnits(1))
					}
				}
				delete(lv.waiters, k)
			}
		}
	}
}

// apply serves a Get/Add/Set on keys this node owns and answers the
// requester for exactly those positions.
func (s *Server) apply(t *hostedTask, ht *hostedTable, m ownership.Msg) {
	rc, _ := m.Ctx.(*reqCtx)
	if rc == nil || len(m.Keys) == 0 {
		return
	}
	lv := ht.live
	w := ht.spec.Width
	if rc.op != OpGet {
		vals := make([]float64, 0, len(m.Keys)*w)
		for _, r := range m.Vals {
			vals = append(vals, r...)
		}
		lv.add(m.Keys, vals, w, rc.op == OpSet, &s.lsc)
		if rc.reply != "" {
			s.send(rc.reply, ackUnits(len(m.Keys)))
		}
		return
	}
	if rc.reply == "" {
		return
	}
	var g *Gate
	if rc.worker >= 0 {
		g = s.gateOf(t, rc.stage)
	}
	if g == nil {
		out := make([]float64, len(m.Keys)*w)
		lv.get(m.Keys, out, w, &s.lsc)
		s.send(rc.reply, AppendMessage(nil, &Message{Op: OpReply, Clock: -1, Width: uint16(w), DType: ht.spec.DType, Vals: out, Pos: m.Positions, Node: int32(lv.self) + 1}))
		return
	}
	// The gate may hold the read (and may answer it at once, on this
	// goroutine: so it is parked after the move lock is released). By the
	// time it runs some keys may have left this node: those go to their
	// home, which knows where they are.
	s.later = append(s.later, func() { s.parkLive(ht, g, rc, m) })
}

func (s *Server) parkLive(ht *hostedTable, g *Gate, rc *reqCtx, m ownership.Msg) {
	lv := ht.live
	w := ht.spec.Width
	g.park(int(rc.worker), rc.clock, m.Keys, func(err error) {
		if err != nil {
			s.send(rc.reply, AppendMessage(nil, &Message{Op: OpError, Err: err.Error()}))
			return
		}
		var sc liveScratch
		lv.mu.RLock()
		var own []int
		away := map[int][]int{}
		for i, k := range m.Keys {
			if lv.node.Owns(k) {
				own = append(own, i)
			} else {
				h := lv.homeOf(k)
				away[h] = append(away[h], i)
			}
		}
		keys := make([]uint64, len(own))
		pos := make([]int, len(own))
		for j, i := range own {
			keys[j], pos[j] = m.Keys[i], m.Positions[i]
		}
		out := make([]float64, len(keys)*w)
		stamp := g.MinClock()
		lv.get(keys, out, w, &sc)
		lv.mu.RUnlock()
		if len(keys) > 0 {
			s.send(rc.reply, AppendMessage(nil, &Message{Op: OpReply, Clock: stamp, Width: uint16(w), DType: ht.spec.DType, Vals: out, Pos: pos, Node: int32(lv.self) + 1}))
		}
		for h, idx := range away {
			fm := &Message{Op: OpGet, Task: ht.task, Table: ht.spec.Name, Stage: rc.stage, Worker: rc.worker, Clock: rc.clock}
			for _, i := range idx {
				fm.Keys = append(fm.Keys, m.Keys[i])
				fm.Pos = append(fm.Pos, m.Positions[i])
			}
			if err := s.tr.Send(lv.hosts[h], rc.reply, AppendMessage(nil, fm)); err != nil {
				s.send(rc.reply, AppendMessage(nil, &Message{Op: OpError, Err: fmt.Sprintf("kvstore: forward to slave %s: %v", lv.hosts[h], err)}))
			}
		}
	})
}

// forward sends a machine message to another node: a data request keeps
// the requester's reply address; protocol messages want no answer.
func (s *Server) forward(ht *hostedTable, a ownership.Action) {
	lv := ht.live
	w := ht.spec.Width
	m := a.Msg
	switch m.Kind {
	case ownership.Localize:
		s.sendNode(ht, int(a.To), &Message{Op: OpLocalize, Task: ht.task, Table: ht.spec.Name, Keys: m.Keys, Node: int32(m.Node)})
	case ownership.Transfer:
		s.sendNode(ht, int(a.To), &Message{Op: OpTransfer, Task: ht.task, Table: ht.spec.Name, Keys: m.Keys, Versions: m.Versions, Node: int32(m.Node)})
	default:
		rc, _ := m.Ctx.(*reqCtx)
		if rc == nil {
			return
		}
		lv.stats.forwarded++
		fm := &Message{Op: rc.op, Task: ht.task, Table: ht.spec.Name, Stage: rc.stage, Worker: rc.worker, Clock: rc.clock, Keys: m.Keys, Pos: m.Positions}
		if rc.op != OpGet {
			fm.Width, fm.DType = uint16(w), ht.spec.DType
			for _, r := range m.Vals {
				fm.Vals = append(fm.Vals, r...)
			}
		}
		if err := s.tr.Send(lv.hosts[a.To], rc.reply, AppendMessage(nil, fm)); err != nil && rc.reply != "" {
			s.send(rc.reply, AppendMessage(nil, &Message{Op: OpError, Err: fmt.Sprintf("kvstore: forward to slave %s: %v", lv.hosts[a.To], err)}))
		}
	}
}

// sendNode sends a protocol message to the node of shard to. A lost
// protocol message would strand keys in flight: it is logged as an error
// (the stage then fails on the requester's timeout, naming the slave).
func (s *Server) sendNode(ht *hostedTable, to int, m *Message) {
	if m.Task == "" {
		m.Task = ht.task
	}
	if err := s.tr.Send(ht.live.hosts[to], "", AppendMessage(nil, m)); err != nil {
		s.log.Error().Err(err).Str("table", ht.spec.Name).Str("to", ht.live.hosts[to]).Stringer("op", m.Op).Msg("relocation message not sent")
	}
}

// scanLive answers a page of a dynamic table: the home keys still owned
// here, then (cursor with the top bit set) the guests.
func (s *Server) scanLive(ht *hostedTable, cursor uint64, page int) ([]uint64, []float64, uint64, bool, error) {
	const guestPhase = 1 << 63
	lv := ht.live
	w := ht.spec.Width
	st, c := lv.home, cursor
	if cursor&guestPhase != 0 {
		st, c = lv.guest, cursor&^guestPhase
	}
	keys, vals, next, more, err := scanStore(st, c, page, s.keys[:0], s.tmp[:0])
	if err != nil {
		return nil, nil, 0, false, err
	}
	guests := st == lv.guest
	lv.mu.RLock()
	n := 0
	for i, k := range keys {
		// A dense guest store spans every key: its rows of home keys
		// are never used (the home store has those).
		if lv.node.Owns(k) && !(guests && lv.isHome(k)) {
			keys[n] = k
			copy(vals[n*w:(n+1)*w], vals[i*w:(i+1)*w])
			n++
		}
	}
	lv.mu.RUnlock()
	keys, vals = keys[:n], vals[:n*w]
	if st == lv.home {
		if !more {
			next, more = guestPhase, true
		}
	} else {
		next |= guestPhase
	}
	return keys, vals, next, more, nil
}

// OwnershipStats is what relocation did on one slave for one table.
type OwnershipStats struct {
	Table                                 string
	Owned                                 int   // keys whose value is in this slave's memory now
	Guests                                int   // of which not home here
	Away                                  int   // home keys owned by other slaves
	Relocations                           int64 // moves this slave ordered as home
	Installed, Extracted, Forwarded, Sent int64 // keys in and out, requests forwarded, protocol messages sent
	Localizes                             int64 // worker Localize requests here that moved keys
	Latency                               [LatencyBuckets]int64
}

// OwnershipStats reports the task's tables on this slave.
func (s *Server) OwnershipStats(task string) []OwnershipStats {
	t := s.task(task)
	if t == nil {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []OwnershipStats
	for name, ht := range t.tables {
		lv := ht.live
		if lv == nil {
			continue
		}
		lv.mu.RLock()
		g, away := lv.node.Counts()
		out = append(out, OwnershipStats{Table: name, Owned: ht.store.Len() - away + g, Guests: g, Away: away,
			Relocations: int64(lv.node.Stats.Relocations), Installed: lv.stats.installed, Extracted: lv.stats.extracted,
			Forwarded: lv.stats.forwarded, Sent: int64(lv.node.Stats.RelocationMsgs), Localizes: lv.stats.localizes, Latency: lv.stats.latency})
		lv.mu.RUnlock()
	}
	slices.SortFunc(out, func(a, b OwnershipStats) int {
		if a.Table < b.Table {
			return -1
		}
		return 1
	})
	return out
}
