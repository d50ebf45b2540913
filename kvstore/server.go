package kvstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"io"

	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

// Server hosts the shards a slave owns and answers the data plane
// addressed to the slave's node on a transport. The transport hands it
// every request in arrival order, which is what makes a worker's Adds land
// before its later Clock and Get (per-sender FIFO). Reads that the stage's consistency model holds back are parked in
// the stage's Gate and answered when the slowest worker catches up; the
// handler never blocks.
type Server struct {
	tr   transport.Transport
	node string
	log  zerolog.Logger

	mu    sync.RWMutex
	tasks map[string]*hostedTask
	// guests are the routes of tasks whose shards live elsewhere, for this
	// node's workers (GuestRoutes).
	guests map[string]*Routes

	svc   io.Closer
	msg   Message     // reused by the handler goroutine
	out   []byte      // reused by the handler goroutine
	tmp   []float64   // reused by the handler goroutine for reads answered at once
	raw   []byte      // reused by answer for values encoded from storage
	conv  []float64   // reused for decoded request values
	keys  []uint64    // reused by scan
	fwd   []byte      // reused by the handler to pass writes down a replica chain
	lsc   liveScratch // reused by the handler for dynamic tables
	later []func()    // gated reads of dynamic tables, parked after the move lock is released

	fence atomic.Pointer[func(from uint64) error] // refuses requests of fenced senders (SetFence)
	// shardLost hears of a shard this node should now serve whose every
	// complete copy died (SetShardLost).
	shardLost atomic.Pointer[func(task string, err error)]
	spawn     func(func()) // runs background sends (snapshots); go f()
}

type hostedTask struct {
	mu     sync.RWMutex
	tables map[string]*hostedTable
	gates  map[int32]*Gate
	err    error

	// Replication (replica.go); the handler goroutine owns these after
	// CreateTables.
	hosts       []string
	self        int     // this node's index in hosts
	routes      *Routes // the task's membership view, shared with its clients
	seen        []bool  // the dead hosts the handler has failed over from
	seenEpoch   uint64  // the routes' epoch seen
	parked      []heldReq
	parkedBytes int
}

type hostedTable struct {
	task  string
	spec  TableSpec
	dir   Directory
	shard int
	store Store
	live  *live    // ownership of the table's keys (Localize)
	repl  *replSet // copies held here, when the table is replicated
}

// Placement says where a table's shards live: shard i on slave Hosts[i].
type Placement struct {
	Spec  TableSpec `json:"spec"`
	Hosts []string  `json:"hosts"`
}

// NewServer serves node's requests on tr.
func NewServer(tr transport.Transport, node string, log zerolog.Logger) (*Server, error) {
	s := &Server{tr: tr, node: node, log: log, tasks: map[string]*hostedTask{}, spawn: func(f func()) { go f() }}
	svc, err := tr.Serve(node, s.handle)
	if err != nil {
		return nil, fmt.Errorf("kvstore: serve slave %s: %w", node, err)
	}
	s.svc = svc
	return s, nil
}

// SetFence makes the server refuse every request whose sender
// incarnation (Message.From, when set) f refuses: the slave wires its
// membership view here, so a slave declared dead cannot write to live
// shards. f runs on the handler goroutine for each request: keep it cheap.
func (s *Server) SetFence(f func(from uint64) error) { s.fence.Store(&f) }

// SetShardLost makes f hear of every shard of a replicated table that
// this node became the head of under a membership view while its copy
// was not complete (its replicas died before a new copy was), with an
// error wrapping ErrShardLost naming table and shard: the task cannot go
// on, and requests that reach the shard fail with that error, but a
// stage whose workers do not touch the shard would otherwise train on.
// The slave reports it to the master. f runs on the handler goroutine.
func (s *Server) SetShardLost(f func(task string, err error)) { s.shardLost.Store(&f) }

// Close stops serving and fails every pending read.
func (s *Server) Close() error {
	err := s.svc.Close()
	s.mu.Lock()
	for id, t := range s.tasks {
		t.closeGates(errors.New("kvstore: server closed"))
		delete(s.tasks, id)
	}
	s.mu.Unlock()
	return err
}

// CreateTables creates this slave's shards of the task's tables: shard i of
// a placement is hosted here when Hosts[i] == self.
func (s *Server) CreateTables(task, self string, tables []Placement) error {
	ht := &hostedTask{tables: map[string]*hostedTable{}, gates: map[int32]*Gate{}, self: -1}
	replicated := false
	for _, p := range tables {
		if ht.hosts == nil {
			ht.hosts = slices.Clone(p.Hosts)
		} else if p.Spec.Replicas > 1 && !slices.Equal(ht.hosts, p.Hosts) {
			return fmt.Errorf("kvstore: task %s: replicated table %q is placed on other slaves than the task's first table", task, p.Spec.Name)
		}
		spec := p.Spec.WithDefaults()
		if err := spec.Validate(); err != nil {
			return err
		}
		dir, err := NewDirectory(spec, len(p.Hosts))
		if err != nil {
			return err
		}
		for i, h := range p.Hosts {
			if h != self {
				continue
			}
			if spec.Storage == Dense {
				what := fmt.Sprintf("table %q shard %d (%d keys x %d)", spec.Name, i, dir.ShardKeys(i), spec.Width)
				if err := checkAlloc(what, dir.ShardKeys(i), spec.Width, spec.elemBytes()); err != nil {
					return err
				}
			}
			store := NewStore(spec, dir, i)
			lv, err := newLive(spec, dir, i, p.Hosts, store)
			if err != nil {
				return err
			}
			h := &hostedTable{task: task, spec: spec, dir: dir, shard: i, store: store, live: lv}
			if spec.Replicas > 1 {
				if spec.Replicas > len(p.Hosts) {
					return fmt.Errorf("%w: table %q: replicas = %d on %d slaves", ErrBadSpec, spec.Name, spec.Replicas, len(p.Hosts))
				}
				if h.repl, err = newReplSet(spec, dir, i, len(p.Hosts), store); err != nil {
					return err
				}
				replicated = true
				ht.self = i
			}
			ht.tables[spec.Name] = h
		}
	}
	ht.routes = NewRoutes(ht.hosts)
	ht.seen = make([]bool, len(ht.hosts))
	if replicated {
		note := AppendMessage(nil, &Message{Op: OpFailover, Task: task})
		ht.routes.Subscribe(func() {
			// Handled in line with the requests, on the handler.
			if err := s.tr.Send(s.node, "", note); err != nil {
				s.log.Error().Err(err).Str("task", task).Msg("failover note not delivered")
			}
		})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.tasks[task]; ok {
		old.closeGates(errors.New("kvstore: task recreated"))
	}
	s.tasks[task] = ht
	return nil
}

// PrepareStage installs the consistency gate of a stage before any of its
// workers start.
func (s *Server) PrepareStage(task string, stage int32, c Consistency, workers int) error {
	t := s.task(task)
	if t == nil {
		return fmt.Errorf("kvstore: no tables for task %s on this slave", task)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.Kind != ASP {
		t.gates[stage] = NewGate(c, workers)
	}
	return nil
}

// Routes is the membership view of a task hosted here with replicated
// tables (nil otherwise): the slave marks deaths on it (PeerDead), and its
// workers' clients route by it.
func (s *Server) Routes(task string) *Routes {
	if s == nil {
		return nil
	}
	t := s.task(task)
	if t == nil {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, ht := range t.tables {
		if ht.repl != nil {
			return t.routes
		}
	}
	return nil
}

// GuestRoutes is the view of a task none of whose shards live here, for
// this node's workers: its shard hosts, those in dead dead (they died
// before, as the master says), and every death PeerDead hears from now on,
// until DropTask. Without it such workers (of a slave that joined, or
// rejoined as a fresh instance, after the tables were placed) sent
// requests to dead hosts, or to the node itself when it had been one.
func (s *Server) GuestRoutes(task string, hosts, dead []string) *Routes {
	s.mu.Lock()
	r := s.guests[task]
	if r == nil {
		if s.guests == nil {
			s.guests = map[string]*Routes{}
		}
		r = NewRoutes(hosts)
		s.guests[task] = r
	}
	s.mu.Unlock()
	for _, h := range dead {
		r.MarkDead(h)
	}
	return r
}

// Hosts reports whether shards of task live here.
func (s *Server) Hosts(task string) bool { return s.task(task) != nil }

// PeerDead marks node dead in the view of every task hosted here: the
// shards it headed fail over to their backups.
func (s *Server) PeerDead(node string) {
	s.mu.RLock()
	ts := make([]*Routes, 0, len(s.tasks)+len(s.guests))
	for _, t := range s.tasks {
		ts = append(ts, t.routes)
	}
	for _, r := range s.guests {
		ts = append(ts, r)
	}
	s.mu.RUnlock()
	for _, r := range ts {
		r.MarkDead(node)
	}
}

// FinishRanks counts the given workers of a stage out of its gate, as if
// each had finished: the master calls it for the workers of a slave that
// died, so the survivors are not held back waiting for their clocks.
func (s *Server) FinishRanks(task string, stage int32, ranks []int) {
	if g := s.Gate(task, stage); g != nil {
		for _, r := range ranks {
			g.Finish(r)
		}
	}
}

// EndStage drops a stage's gate.
func (s *Server) EndStage(task string, stage int32) {
	if t := s.task(task); t != nil {
		t.mu.Lock()
		if g := t.gates[stage]; g != nil {
			g.Close(fmt.Errorf("kvstore: stage %d of task %s ended", stage, task))
			delete(t.gates, stage)
		}
		t.mu.Unlock()
	}
}

// DropTask frees a task's shards; pending reads fail with err.
func (s *Server) DropTask(task string, err error) {
	s.mu.Lock()
	t := s.tasks[task]
	delete(s.tasks, task)
	delete(s.guests, task)
	s.mu.Unlock()
	if t != nil {
		if err == nil {
			err = fmt.Errorf("kvstore: task %s finished", task)
		}
		t.closeGates(err)
	}
}

// Local returns the store and shard index of a table hosted here, for
// workers of this slave (no NATS, no copy).
func (s *Server) Local(task, table string) (Store, bool) {
	t := s.task(task)
	if t == nil {
		return nil, false
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	ht, ok := t.tables[table]
	if !ok {
		return nil, false
	}
	return ht.store, true
}

// hosted is a table hosted here (nil if not).
func (s *Server) hosted(task, table string) *hostedTable {
	t := s.task(task)
	if t == nil {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.tables[table]
}

// Gate returns a stage's gate (nil under ASP).
func (s *Server) Gate(task string, stage int32) *Gate {
	t := s.task(task)
	if t == nil {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.gates[stage]
}

func (s *Server) task(id string) *hostedTask {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tasks[id]
}

func (t *hostedTask) closeGates(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.err = err
	for id, g := range t.gates {
		g.Close(err)
		delete(t.gates, id)
	}
}

func (s *Server) handle(data []byte, reply string) {
	m := &s.msg
	// Values stay encoded until an op needs them (range adds apply them
	// straight from the bytes).
	if err := decodeRaw(data, m); err != nil {
		s.fail(reply, err)
		return
	}
	if f := s.fence.Load(); f != nil && m.From != 0 {
		if err := (*f)(m.From); err != nil {
			s.fail(reply, err)
			return
		}
	}
	t := s.task(m.Task)
	if t == nil {
		if m.Repl {
			// A request of a replicated stage (a chained write, a
			// clock) for a task this slave dropped: it was declared dead
			// and fenced while the request waited for it (a stopped
			// process that resumed, a healed partition), or the task
			// ended. Stay silent as a dead slave does: the sender's view
			// has this slave dead and sends it again to the shard's head
			// of the moment. An error answer (its chain's address names
			// no slave) failed a survivor's worker, and the task.
			s.log.Debug().Str("task", m.Task).Msg("request of a replicated stage for a task not held here; not answered")
			return
		}
		s.fail(reply, fmt.Errorf("kvstore: task %s has no shards on this slave", m.Task))
		return
	}
	if m.Op == OpFailover {
		s.failover(t)
		return
	}
	var ht *hostedTable
	if m.Op != OpClock && m.Op != OpFinish {
		t.mu.RLock()
		ht = t.tables[m.Table]
		t.mu.RUnlock()
		if ht == nil {
			s.fail(reply, fmt.Errorf("kvstore: table %q of task %s is not hosted here", m.Table, m.Task))
			return
		}
	}
	if ht != nil && ht.repl != nil {
		if !m.Repl {
			// A sender that does not know the table is replicated (it
			// gave no shard): its keys are this node's own shard.
			m.Repl, m.Shard, m.Hop = true, int32(ht.shard), 0
		}
		s.replicated(data, reply, t, ht, m)
		return
	}
	switch m.Op {
	case OpLocalize, OpTransfer, OpValues:
		s.relocate(reply, t, ht, m)
		return
	case OpGet, OpAdd, OpSet, OpGetRange, OpAddRange, OpSetRange:
		if ht.live.dynamic.Load() {
			s.routed(reply, t, ht, m)
			return
		}
	}
	switch m.Op {
	case OpAdd:
		if n := rawLen(m); n != len(m.Keys)*ht.spec.Width {
			s.fail(reply, fmt.Errorf("kvstore: add to %q: %d values for %d keys of width %d", m.Table, n, len(m.Keys), ht.spec.Width))
			return
		}
		if ra, ok := ht.store.(rawAdder); !ok || !ra.AddRaw(m.Keys, m.Raw, m.DType) {
			s.vals(m)
			ht.store.Add(m.Keys, m.Vals)
		}
		s.ackID(reply, len(m.Keys), m.ReqID)
	case OpAddRange:
		if rawLen(m) != int(m.N)*ht.spec.Width || m.First+uint64(m.N) > ht.spec.Size {
			s.fail(reply, fmt.Errorf("kvstore: add_range to %q: bad range or values", m.Table))
			return
		}
		if ra, ok := ht.store.(rawAdder); !ok || !ra.AddRangeRaw(m.First, int(m.N), m.Raw, m.DType) {
			s.vals(m)
			ht.store.AddRange(m.First, int(m.N), m.Vals)
		}
		s.ack(reply, int(m.N))
	case OpSet:
		s.vals(m)
		if len(m.Vals) != len(m.Keys)*ht.spec.Width {
			s.fail(reply, fmt.Errorf("kvstore: set on %q: %d values for %d keys", m.Table, len(m.Vals), len(m.Keys)))
			return
		}
		ht.store.Set(m.Keys, m.Vals)
		s.ack(reply, len(m.Keys))
	case OpSetRange:
		s.vals(m)
		if len(m.Vals) != int(m.N)*ht.spec.Width || m.First+uint64(m.N) > ht.spec.Size {
			s.fail(reply, fmt.Errorf("kvstore: set_range on %q: bad range or values", m.Table))
			return
		}
		ht.store.SetRange(m.First, int(m.N), m.Vals)
		s.ack(reply, int(m.N))
	case OpGet, OpGetRange:
		s.get(reply, t, ht, m)
	case OpScan:
		s.scan(reply, ht, m)
	case OpClock:
		if g := s.gateOf(t, m.Stage); g != nil {
			g.Advance(int(m.Worker), m.Clock)
		}
		s.ackID(reply, 1, m.ReqID)
	case OpFinish:
		if g := s.gateOf(t, m.Stage); g != nil {
			g.Finish(int(m.Worker))
		}
		s.ackID(reply, 1, m.ReqID)
	default:
		s.fail(reply, fmt.Errorf("kvstore: unexpected op %s", m.Op))
	}
}

// vals converts m's raw values into m.Vals (handler goroutine only).
func (s *Server) vals(m *Message) {
	n := rawLen(m)
	s.conv = grow(s.conv, n)
	rawInto(s.conv, m.Raw, m.DType)
	m.Vals = s.conv
}

// rawLen is the number of values m.Raw holds.
func rawLen(m *Message) int {
	if m.DType == Float32 {
		return len(m.Raw) / 4
	}
	return len(m.Raw) / 8
}

func (s *Server) gateOf(t *hostedTask, stage int32) *Gate {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.gates[stage]
}

func (s *Server) get(reply string, t *hostedTask, ht *hostedTable, m *Message) {
	if reply == "" {
		return
	}
	if m.Op == OpGetRange && m.First+uint64(m.N) > ht.spec.Size {
		s.fail(reply, fmt.Errorf("kvstore: get_range on %q beyond size %d", m.Table, ht.spec.Size))
		return
	}
	var g *Gate
	if m.Worker >= 0 {
		g = s.gateOf(t, m.Stage)
	}
	if g == nil || g.fastRead(int(m.Worker), m.Clock) {
		// Answered now (no gate, or one the read may pass at once: the
		// common case), from the handler's scratch buffers.
		minClock := int64(-1)
		if g != nil {
			minClock = g.MinClock()
		}
		if s.answerRaw(reply, ht, m.Op, m.Keys, minClock) {
			return
		}
		var a Message
		a, s.tmp, s.raw = s.answer(s.tmp, s.raw, ht, m.Op, m.Keys, m.First, int(m.N), minClock)
		s.out = s.sendMsg(reply, &a, s.out[:0])
		return
	}
	// The gate may hold the read; keep what the answer needs.
	op, first, n := m.Op, m.First, int(m.N)
	keys := append([]uint64(nil), m.Keys...)
	g.park(int(m.Worker), m.Clock, keys, func(err error) {
		if err != nil {
			s.send(reply, AppendMessage(nil, &Message{Op: OpError, Err: err.Error()}))
			return
		}
		// Another goroutine may run this: no shared scratch buffers.
		minClock := g.MinClock()
		if s.answerRaw(reply, ht, op, keys, minClock) {
			return
		}
		a, _, _ := s.answer(nil, nil, ht, op, keys, first, n, minClock)
		s.sendMsg(reply, &a, nil)
	})
}

// answer reads the values of a reply (into raw, or vals, which it
// returns grown). The reply's Clock is the stage's minimum clock read
// before the values (-1 without a gate): the values reflect every Add of
// the iterations below it, which is what a worker-side cache needs to
// know how long it may serve them.
func (s *Server) answer(vals []float64, raw []byte, ht *hostedTable, op Op, keys []uint64, first uint64, n int, minClock int64) (Message, []float64, []byte) {
	if ra, ok := ht.store.(rawAppender); ok {
		// Encode straight from the shard's storage.
		raw = raw[:0]
		done := true
		if op == OpGetRange {
			raw, done = ra.AppendRangeRaw(raw, first, n)
		} else {
			raw = ra.AppendRaw(raw, keys)
		}
		if done {
			a := replyHead(ht, minClock)
			a.Raw = raw
			return a, vals, raw
		}
	}
	count := len(keys)
	if op == OpGetRange {
		count = n
	}
	if need := count * ht.spec.Width; cap(vals) < need {
		vals = make([]float64, need)
	} else {
		vals = vals[:need]
	}
	if op == OpGetRange {
		ht.store.GetRange(first, n, vals)
	} else {
		ht.store.Get(keys, vals)
	}
	a := replyHead(ht, minClock)
	a.Vals = vals
	return a, vals, raw
}

// replyHead is the head of a read's answer from ht: its values follow.
func replyHead(ht *hostedTable, minClock int64) Message {
	return Message{Op: OpReply, Clock: minClock, Width: uint16(ht.spec.Width), DType: ht.spec.DType}
}

// answerRaw answers a Get of keys from a shard that encodes its own rows
// (rawAppender) straight into the transport's send buffer when the answer
// is large enough to be built there (appendMin): the values are copied
// once, store to frame, where answer and sendMsg copied them into scratch
// and then into the frame (a 62.5k x 64 float32 pull: 16 MB copied twice
// by the server). It reports whether it answered (false: the caller
// answers through answer).
func (s *Server) answerRaw(reply string, ht *hostedTable, op Op, keys []uint64, minClock int64) bool {
	if op != OpGet {
		return false
	}
	head := replyHead(ht, minClock)
	rawLen := len(keys) * ht.spec.Width * valSize(ht.spec.DType)
	size := encodedSize(&head) + binary.MaxVarintLen64 + rawLen
	if size < appendMin { // the common small answer: no more checks
		return false
	}
	ra, ok := ht.store.(rawAppender)
	if !ok {
		return false
	}
	ap, ok := s.tr.(transport.Appender)
	if !ok {
		return false
	}
	if err := ap.ReplyAppend(reply, size, func(b []byte) []byte {
		return ra.AppendRaw(appendHeadRaw(b, &head, rawLen), keys)
	}); err != nil {
		s.log.Warn().Err(err).Str("node", s.node).Msg("kv answer not sent")
	}
	return true
}

// ack acknowledges n units of a request: the keys it applied (a request
// forwarded in parts is acknowledged by each node for its part), or 1 for
// a clock or finish. The client counts units, not messages.
func (s *Server) ack(reply string, n int) { s.ackID(reply, n, 0) }

// ackID acknowledges n units of request id (0: a request without one);
// the client matches a replicated write's acknowledgement by its id.
func (s *Server) ackID(reply string, n int, id uint64) {
	if reply != "" {
		s.out = AppendMessage(s.out[:0], &Message{Op: OpReply, N: uint32(n), Repl: id != 0, ReqID: id})
		s.send(reply, s.out)
	}
}

func (s *Server) fail(reply string, err error) {
	s.log.Warn().Err(err).Msg("kv request failed")
	if reply != "" {
		s.send(reply, AppendMessage(nil, &Message{Op: OpError, Err: err.Error()}))
	}
}

// sendMsg answers m to reply: a large answer encoded straight into the
// transport's send buffer (transport.Appender), else encoded into dst,
// which it returns.
func (s *Server) sendMsg(reply string, m *Message, dst []byte) []byte {
	if a, ok := s.tr.(transport.Appender); ok {
		if size := encodedSize(m); size >= appendMin {
			if err := a.ReplyAppend(reply, size, func(b []byte) []byte { return AppendMessage(b, m) }); err != nil {
				s.log.Warn().Err(err).Str("node", s.node).Msg("kv answer not sent")
			}
			return dst
		}
	}
	dst = AppendMessage(dst, m)
	s.send(reply, dst)
	return dst
}

// appendMin is the size from which a message is built in the transport's
// send buffer: smaller ones are copied there, packed with others.
const appendMin = 32 << 10

// lendMin is the size of raw values from which AddFloat32 lends them to a
// transport that writes them from where they are (transport.TailSender)
// instead of copying them: the call then waits until they are written,
// which pays for large values only.
const lendMin = 64 << 10

// send answers a request; a failure (the connection is gone) leaves the
// requester to time out, and is logged here.
func (s *Server) send(reply string, data []byte) {
	if err := s.tr.Reply(reply, data); err != nil {
		s.log.Warn().Err(err).Str("node", s.node).Msg("kv answer not sent")
	}
}

// scan answers a page of a shard (no consistency gate: a bulk read of the
// whole shard, as for writing the model).
func (s *Server) scan(reply string, ht *hostedTable, m *Message) {
	if reply == "" {
		return
	}
	if m.N == 0 {
		s.fail(reply, fmt.Errorf("kvstore: scan of %q: page of 0 keys", m.Table))
		return
	}
	// The reader sized the page for its payload limit; a server with a
	// smaller one answers less.
	page := min(int(m.N), max(MaxKeysPerMessage(s.tr.MaxPayload(), ht.spec.Width, ht.spec.DType), 1))
	var next uint64
	var more bool
	var err error
	if ht.live.dynamic.Load() {
		s.keys, s.tmp, next, more, err = s.scanLive(ht, m.First, page)
	} else {
		s.keys, s.tmp, next, more, err = scanStore(ht.store, m.First, page, s.keys[:0], s.tmp[:0])
	}
	if err != nil {
		s.fail(reply, fmt.Errorf("kvstore: scan of %q shard %d: %w", m.Table, ht.shard, err))
		return
	}
	r := Message{Op: OpReply, Keys: s.keys, Vals: s.tmp, Width: uint16(ht.spec.Width), DType: ht.spec.DType, First: next}
	if more {
		r.N = 1
	}
	s.out = AppendMessage(s.out[:0], &r)
	s.send(reply, s.out)
}
