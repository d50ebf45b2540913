// Package slave is a flexps node agent. It joins the master, beats, hosts
// this node's shards of every task's tables (a kvstore.Server on the
// slave's KV subject), and runs stage functions in worker goroutines when
// the master says so: each worker gets a KV client that serves this slave's
// keys from memory and batches the rest per owner, and its share of the
// inputs through an AsyncReader that pulls blocks from the master's
// FileAssigner. A slave knows nothing of scheduling policy.
package slave

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/hdfs"
	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
)

// Config configures a slave.
type Config struct {
	Cluster       string        // default "default"
	ID            string        // unique slave id; default <hostname>-<pid>
	Host          string        // host name for data locality; default os.Hostname
	Slots         int           // worker slots; default 2
	JoinTimeout   time.Duration // how long to wait for a master; default 30s
	KVTimeout     time.Duration // data-plane round trip; default 60s
	KVWindow      int           // unacknowledged Adds per worker; default 64
	ReadBuffer    int64         // AsyncReader buffer per worker and input, bytes; default 4 MiB
	ReadProducers int           // AsyncReader producers per worker and input; default 2
	ProgressEvery time.Duration // progress report interval; default 250ms
	DataCache     int64         // bytes of parsed input blocks kept for later epochs; default 1 GiB, <0 disables
	// KVTransport carries KV requests between slaves: "nats" (default)
	// through the bus, or "tcp" over direct connections found through the
	// bus (KVListen, KVAdvertise; see kvstore/transport.TCP).
	KVTransport string
	KVListen    string // "tcp": address to accept peers on; default 127.0.0.1:0
	KVAdvertise string // "tcp": address peers dial; default the listener's
	KVTLS       bool   // "tcp": encrypt the data plane (TLS, certificates pinned through the bus)
	HDFS        hdfs.Config
	Paths       *datastore.PathPolicy // where tasks may read (nil: anywhere)
	Log         zerolog.Logger
}

func (c *Config) defaults() {
	if c.Cluster == "" {
		c.Cluster = "default"
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	if c.ID == "" {
		c.ID = fmt.Sprintf("%s-%d", c.Host, os.Getpid())
	}
	if c.Slots <= 0 {
		c.Slots = 2
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = 30 * time.Second
	}
	if c.KVTimeout <= 0 {
		c.KVTimeout = 60 * time.Second
	}
	if c.ReadBuffer <= 0 {
		c.ReadBuffer = datastore.DefaultBufferBytes
	}
	if c.ReadProducers <= 0 {
		c.ReadProducers = 2 // parse the next block while one is read
	}
	if c.DataCache == 0 {
		c.DataCache = 1 << 30
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 250 * time.Millisecond
	}
}

// Slave is a running node agent.
type Slave struct {
	linger  lingerSet // running workers, and which outlive their stage
	release releaser  // gives dropped tasks' memory back to the kernel
	// left: the first Close told the master this slave leaves.
	left sync.Once
	// leaving: it has told the master so; a view without it is then its
	// own leave, not a death.
	leaving atomic.Bool
	cfg     Config
	nc      *nats.Conn
	subj    bus.Subjects
	log     zerolog.Logger
	kv      *kvstore.Server
	tr      transport.Transport // what the KV server and clients talk through
	dpmu    sync.Mutex
	tcp     *transport.TCP // the direct data plane, when KVTransport is "tcp"; guarded by dpmu (metrics read it)
	sources *datastore.Sources
	cache   *datastore.BlockCache
	// cacheLogged: the cache's choice (fits or re-read) was logged once.
	cacheLogged atomic.Bool

	mu    sync.Mutex
	ctl   *Control // the pure control state; guarded by mu
	tasks map[string]*slaveTask

	xmu      sync.Mutex
	retained map[string]*retainedModel // models kept for direct transfer, by task

	// The master's liveness (proto.MasterAlive): which run of the master
	// this slave serves, when it last spoke, and how long a silence means
	// it is gone.
	amu             sync.Mutex
	masterInstance  string
	masterDeadAfter time.Duration
	lastAlive       atomic.Int64 // unix nanoseconds; 0 before the first
	masterGone      atomic.Bool
	// gmu orders declaring the master gone (checkMaster) against its
	// question whether a task still runs (holdsTask): the question, a
	// sign of life, either comes first, and no silence is declared, or
	// finds the tasks dropped for it in silenced. Taken before mu.
	gmu        sync.Mutex
	silenced   recent[bool]    // tasks dropped for the master's silence
	busDown    bool            // checkMaster saw the slave cut off from the bus (its goroutine only)
	reconnects *bus.Reconnects // requests to the master across a reconnection are asked again (askMaster)
	ctlDone    answered        // the latest control requests' outcomes, by ReqID (onCtl)
	outbox     outbox          // acknowledged worker events, in order (sendOutbox)

	// Membership (membership.go): this slave's incarnation, the latest
	// view of the master it serves (what the KV server fences against),
	// and whether it is rejoining.
	imu         sync.Mutex
	inc         incarnation // guarded by imu
	fence       atomic.Pointer[fenceView]
	pendingView atomic.Pointer[proto.Membership] // the latest view heard while joining
	rejoining   atomic.Bool
	joined      chan struct{} // closed once the first join is answered OK (awaitJoin)

	metrics *metrics

	ctlSub *nats.Subscription
	subs   []*nats.Subscription
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // heartbeat and workers
	closed bool           // Close began waiting for wg; guarded by mu
}

type slaveTask struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stages map[int]stageRun // guarded by Slave.mu
}

// stageRun is one start of a stage's workers on this slave.
type stageRun struct {
	gen    int
	cancel context.CancelCauseFunc
}

// New creates a slave on nc; Start joins the cluster.
func New(nc *nats.Conn, cfg Config) *Slave {
	cfg.defaults()
	s := &Slave{cfg: cfg, nc: nc, subj: bus.For(cfg.Cluster), ctl: NewControl(cfg.Slots), tasks: map[string]*slaveTask{}, retained: map[string]*retainedModel{},
		release: releaser{pending: map[string]bool{}, kick: make(chan struct{}, 1)},
		log:     cfg.Log.With().Str("node", cfg.ID).Logger(), sources: hdfs.NewSources(cfg.HDFS).Restrict(cfg.Paths),
		cache: datastore.NewBlockCache(max(cfg.DataCache, 0)), inc: incarnation{instance: nuid.Next()},
		joined: make(chan struct{})}
	s.metrics = newMetrics(cfg.ID, func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.tasks)
	})
	s.metrics.dataplane = s.DataPlane
	return s
}

// DataPlane returns the direct data plane's counters; false when KV
// requests go through the bus only.
func (s *Slave) DataPlane() (transport.TCPStats, bool) {
	s.dpmu.Lock()
	tcp := s.tcp
	s.dpmu.Unlock()
	if tcp == nil {
		return transport.TCPStats{}, false
	}
	return tcp.Stats(), true
}

// ID is the slave's id.
func (s *Slave) ID() string { return s.cfg.ID }

// Start serves the slave's subjects, joins the master (waiting up to
// JoinTimeout for one to answer) and starts beating.
func (s *Slave) Start(ctx context.Context) error {
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.outbox.wake = make(chan struct{}, 1)
	// Requests to the master in flight when the bus drops are asked
	// again once it is back (askMaster).
	s.reconnects = bus.WatchReconnects(s.nc)
	s.tr = transport.NewNATS(s.nc, s.subj.SlaveKV).Gated(s.awaitJoin)
	switch s.cfg.KVTransport {
	case "", "nats":
	case "tcp":
		tcp, err := transport.NewTCP(transport.NewNATS(s.nc, s.subj.SlaveKV), transport.TCPConfig{Self: s.cfg.ID,
			Listen: s.cfg.KVListen, Advertise: s.cfg.KVAdvertise, Hello: s.subj.SlaveDP, TLS: s.cfg.KVTLS, Log: s.log,
			Ready: s.joined})
		if err != nil {
			// Name the settings: several slaves on one host each need
			// their own port.
			return fmt.Errorf("slave %s: %w (set another address with [kv] listen, e.g. \"127.0.0.1:0\" for any free port, or [kv] transport = \"nats\")", s.cfg.ID, err)
		}
		s.dpmu.Lock()
		s.tr, s.tcp = tcp, tcp
		s.dpmu.Unlock()
		s.log.Info().Str("addr", tcp.Addr()).Bool("tls", s.cfg.KVTLS).Msg("direct data plane listening")
	default:
		return fmt.Errorf("slave %s: unknown KV transport %q (want nats or tcp)", s.cfg.ID, s.cfg.KVTransport)
	}
	kv, err := kvstore.NewServer(s.tr, s.cfg.ID, s.log)
	if err != nil {
		s.Close()
		return err
	}
	s.kv = kv
	kv.SetFence(s.fenced)
	kv.SetShardLost(func(task string, err error) {
		s.publish(proto.WorkerEvent{Task: task, Rank: -1, Kind: proto.ShardLost, Error: err.Error(), Slave: s.cfg.ID, Instance: s.self().instance})
	})
	s.ctlSub, err = s.nc.Subscribe(s.subj.SlaveCtl(s.cfg.ID), s.onCtl)
	if err != nil {
		s.Close()
		return fmt.Errorf("slave: subscribe: %w", err)
	}
	s.ctlSub.SetPendingLimits(-1, -1)
	for subject, h := range map[string]nats.MsgHandler{s.subj.SlaveXfer(s.cfg.ID): s.serveXfer, s.subj.SlaveModelInfo(s.cfg.ID): s.serveModelInfo,
		s.subj.MasterAlive(): s.onMasterAlive, s.subj.Membership(): s.onMembership} {
		sub, err := s.nc.Subscribe(subject, h)
		if err != nil {
			s.Close()
			return fmt.Errorf("slave: subscribe: %w", err)
		}
		s.subs = append(s.subs, sub)
	}
	// The server answers a refused subscription asynchronously: a round
	// trip makes sure its answer has arrived before the join.
	_ = s.nc.FlushTimeout(5 * time.Second)
	if err := s.refused(); err != nil {
		s.Close()
		return err
	}
	rep, err := s.join()
	if err != nil {
		s.Close()
		return err
	}
	s.lastAlive.Store(time.Now().UnixNano()) // the join's answer is a sign of life
	s.amu.Lock()
	s.masterInstance, s.masterDeadAfter = rep.Instance, rep.DeadAfter
	if s.masterDeadAfter <= 0 {
		s.masterDeadAfter = max(6*rep.Heartbeat, 3*time.Second)
	}
	s.amu.Unlock()
	s.admitted(rep)
	close(s.joined)
	s.wg.Add(3)
	go s.heartbeat(rep.Heartbeat)
	go s.releaseLoop()
	go s.sendOutbox() // started last: a Start that fails leaves no goroutine behind
	s.log.Info().Int("slots", s.cfg.Slots).Str("instance", s.self().instance).Uint64("incarnation", rep.Incarnation).Uint64("epoch", rep.Epoch).Msg("slave joined the cluster")
	return nil
}

func (s *Slave) join() (proto.JoinReply, error) {
	req, err := json.Marshal(s.joinRequest())
	if err != nil {
		return proto.JoinReply{}, fmt.Errorf("slave %s: encoding the join request: %w", s.cfg.ID, err)
	}
	deadline := time.Now().Add(s.cfg.JoinTimeout)
	var inUseUntil time.Time // while a live instance holds the id
	for {
		ctx, cancel := context.WithTimeout(s.ctx, time.Second)
		msg, err := s.nc.RequestWithContext(ctx, s.subj.Join(), req)
		cancel()
		if err == nil {
			var rep proto.JoinReply
			if err := json.Unmarshal(msg.Data, &rep); err != nil {
				return proto.JoinReply{}, fmt.Errorf("slave %s: malformed join reply", s.cfg.ID)
			}
			if rep.OK {
				return rep, nil
			}
			refused := fmt.Errorf("slave %s: the master refused to let it join: %s", s.cfg.ID, rep.Error)
			// The id is held by a live instance: this slave's own earlier
			// process (killed, restarted at once by hand or by a
			// supervisor) until the master declares it dead, or another
			// process started with the same id, which stays live. Ask
			// again until the old one would have been declared dead
			// (two failure timeouts, within join_timeout), then give up.
			if !rep.InUse || rep.DeadAfter <= 0 {
				return proto.JoinReply{}, refused
			}
			now := time.Now()
			if inUseUntil.IsZero() {
				inUseUntil = now.Add(2*rep.DeadAfter + rep.Heartbeat)
				if inUseUntil.After(deadline) {
					inUseUntil = deadline
				}
				s.log.Warn().Str("reason", rep.Error).Dur("wait", inUseUntil.Sub(now).Round(time.Millisecond)).
					Msg("the id is held by a live instance (a restart before the old process was declared dead, or another process with this id); asking again until the master would have declared it dead")
			}
			if now.After(inUseUntil) {
				return proto.JoinReply{}, refused
			}
			select {
			case <-time.After(200 * time.Millisecond):
			case <-s.ctx.Done():
				return proto.JoinReply{}, s.ctx.Err()
			}
			continue
		}
		if s.ctx.Err() != nil {
			return proto.JoinReply{}, s.ctx.Err()
		}
		if err := s.refused(); err != nil {
			return proto.JoinReply{}, err
		}
		if time.Now().After(deadline) {
			return proto.JoinReply{}, fmt.Errorf("slave %s: no master of cluster %q answered within %v on %s", s.cfg.ID, s.cfg.Cluster, s.cfg.JoinTimeout, s.nc.ConnectedUrlRedacted())
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			continue
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-s.ctx.Done():
			return proto.JoinReply{}, s.ctx.Err()
		}
	}
}

// refused reports a permissions violation the server sent this
// connection. Credentials that are not a slave's of this cluster (another
// role's key, another cluster's) are let onto the bus but refused on the
// slave's subjects; the join then looked like a master that never
// answered, and the slave said so only after join_timeout (30 s).
func (s *Slave) refused() error {
	err := s.nc.LastError()
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	return fmt.Errorf("slave %s: the NATS server at %s refused this connection the subjects a slave of cluster %q uses: %w",
		s.cfg.ID, s.nc.ConnectedUrlRedacted(), s.cfg.Cluster, err)
}

func (s *Slave) heartbeat(every time.Duration) {
	defer s.wg.Done()
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	failing := false
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			s.checkMaster(now)
			// The instance changes when the slave rejoins: encode each beat.
			data, err := json.Marshal(proto.Heartbeat{ID: s.cfg.ID, Join: s.joinRequest(), Lingering: s.lingering(now)})
			if err == nil {
				err = s.nc.Publish(s.subj.Heartbeat(), data)
			}
			// Log the first failure of a run, not every beat.
			if err == nil {
				s.metrics.heartbeats.Add(1)
			}
			if err != nil && !failing {
				s.log.Warn().Err(err).Msg("cannot send heartbeats")
				failing = true
			} else if err == nil {
				failing = false
			}
		}
	}
}

// Close stops the slave: running workers are cancelled and waited for.
func (s *Slave) Close() {
	// Also when the context Start was given ended first: that is how
	// `flexps slave` stops on Ctrl-C or SIGTERM, a clean leave, not a
	// death to report after the failure timeout.
	if s.ctx != nil {
		s.left.Do(s.leave)
	}
	if s.ctlSub != nil {
		s.ctlSub.Unsubscribe()
	}
	for _, sub := range s.subs {
		sub.Unsubscribe()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Lock()
	for id, t := range s.tasks {
		t.cancel(errors.New("slave shutting down"))
		delete(s.tasks, id)
		s.ctl.Step(Event{Kind: EvDropTask, Task: id})
	}
	s.closed = true // no goroutine joins wg from now on (rejoin)
	s.mu.Unlock()
	s.closeWait()
	if s.kv != nil {
		s.kv.Close()
	}
	if st, ok := s.DataPlane(); ok {
		s.tcp.Close()
		s.log.Info().Uint64("direct_sends", st.DirectSends).Uint64("bus_sends", st.BusSends).Uint64("self_sends", st.SelfSends).Uint64("dials", st.Dials).
			Msg("direct data plane closed")
	}
	s.sources.Close()
}

// onCtl runs a control request. Requests arrive one at a time (one
// subscription), so a repeat (the same ReqID) comes after the first was
// answered: it gets the same answer and is not done again.
func (s *Slave) onCtl(msg *nats.Msg) {
	if !s.awaitJoin() {
		return
	}
	var req proto.SlaveCtl
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		s.respond(msg, fmt.Errorf("malformed control request: %w", err))
		return
	}
	if ok, err := s.ctlDone.answer(req.ReqID); ok {
		s.log.Info().Str("op", req.Op).Str("task", req.Task).Msg("a control request asked again (the master's answer was lost on the bus): answered as before")
		s.respond(msg, err)
		return
	}
	err := s.control(req)
	s.ctlDone.add(req.ReqID, err)
	s.respond(msg, err)
}

// awaitJoin holds a request to this slave's own subjects (control,
// transfers) until its first join is answered: true once it is admitted,
// false when it stops instead, and the request is left unanswered. The
// slave subscribes to its id's subjects before it asks to join, so a
// second process started with the id of a live slave, asking to join
// until it is refused for good, would otherwise answer requests the
// master or a peer meant for the live one: its answer to a stage's
// create_tables came first and was refused, "slave s2 instance ... is not
// a member", failing a task on a healthy cluster.
func (s *Slave) awaitJoin() bool {
	select {
	case <-s.joined:
		return true
	default:
	}
	select {
	case <-s.joined:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// answered remembers the outcome of the latest control requests by ReqID.
type answered struct {
	mu   sync.Mutex
	errs recent[error]
}

// answeredKept is how many control requests a slave remembers.
const answeredKept = 256

func (a *answered) answer(id string) (ok bool, err error) {
	if id == "" {
		return false, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	err, ok = a.errs.get(id)
	return ok, err
}

func (a *answered) add(id string, err error) {
	if id == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs.add(id, err, answeredKept)
}

// recent maps the keys added last, at most keep of them, to their values.
type recent[V any] struct {
	m     map[string]V
	order []string
}

// add maps key to v (a key added again keeps its place), dropping the
// oldest key past keep.
func (r *recent[V]) add(key string, v V, keep int) {
	if r.m == nil {
		r.m = map[string]V{}
	}
	if _, ok := r.m[key]; !ok {
		r.order = append(r.order, key)
	}
	r.m[key] = v
	if len(r.order) > keep {
		delete(r.m, r.order[0])
		r.order = r.order[1:]
	}
}

func (r *recent[V]) get(key string) (v V, ok bool) {
	v, ok = r.m[key]
	return v, ok
}

// respond answers a control request; an answer that cannot be sent is
// logged (the master then times out and says so).
func (s *Slave) respond(msg *nats.Msg, err error) {
	rep := proto.CtlReply{OK: err == nil, Instance: s.self().instance, Lingering: s.linger.count("", time.Now(), nil)}
	if err != nil {
		rep.Error = err.Error()
	}
	data, merr := json.Marshal(rep)
	if merr != nil {
		s.log.Error().Err(merr).Str("subject", msg.Subject).Msg("cannot encode the control answer")
		return
	}
	if err := msg.Respond(data); err != nil {
		s.log.Warn().Err(err).Str("subject", msg.Subject).Msg("cannot send the control answer")
	}
}

func (s *Slave) task(id string) *slaveTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[id]
	if t == nil {
		ctx, cancel := context.WithCancelCause(s.ctx)
		t = &slaveTask{ctx: ctx, cancel: cancel, stages: map[int]stageRun{}}
		s.tasks[id] = t
	}
	return t
}

func (s *Slave) control(req proto.SlaveCtl) error {
	if me := s.self().instance; req.Instance != "" && req.Instance != me {
		return fmt.Errorf("slave %s: the request was meant for instance %s, this is instance %s (the slave rejoined)", s.cfg.ID, req.Instance, me)
	}
	if (req.Op == proto.OpCreateTables || req.Op == proto.OpStartWorkers) && s.Incarnation() == 0 {
		return fmt.Errorf("slave %s is rejoining the cluster after being fenced; try another slave", s.cfg.ID)
	}
	switch req.Op {
	case proto.OpCreateTables:
		s.task(req.Task)
		s.step(Event{Kind: EvCreateTask, Task: req.Task})
		return s.kv.CreateTables(req.Task, s.cfg.ID, req.Tables)
	case proto.OpPrepareStage:
		return s.kv.PrepareStage(req.Task, int32(req.Stage), req.Consistency, req.Workers)
	case proto.OpStartWorkers:
		return s.startWorkers(req)
	case proto.OpEndStage:
		s.kv.EndStage(req.Task, int32(req.Stage))
		s.step(Event{Kind: EvEndStage, Task: req.Task, Stage: req.Stage})
		return nil
	case proto.OpStopStage:
		s.step(Event{Kind: EvStopStage, Task: req.Task, Stage: req.Stage})
		s.linger.settle(req.Task, settleWait) // the answer says which still run
		return nil
	case proto.OpFinishRanks:
		// A slave of the stage died: its workers never tick again, so the
		// gates here stop waiting for them.
		s.kv.FinishRanks(req.Task, int32(req.Stage), req.Ranks)
		s.log.Info().Str("task", req.Task).Int("stage", req.Stage).Ints("ranks", req.Ranks).Msg("workers of a dead slave counted out of the stage's consistency gates")
		return nil
	case proto.OpHoldsTask:
		return s.holdsTask(req.Task)
	case proto.OpAbort, proto.OpDropTask:
		s.step(Event{Kind: EvDropTask, Task: req.Task, Reason: req.Reason})
		s.linger.settle(req.Task, settleWait)
		return nil
	}
	return fmt.Errorf("unknown control op %q", req.Op)
}

// step runs one event through the control machine and carries out its
// actions. Ending or stopping a stage this slave never ran is not an error
// to the master (it tells every host), so those refusals are only logged.
func (s *Slave) step(ev Event) {
	s.mu.Lock()
	acts, err := s.ctl.Step(ev)
	s.mu.Unlock()
	if err != nil {
		lvl := s.log.Warn()
		if errors.Is(err, ErrUnknownTask) || errors.Is(err, ErrUnknownStage) {
			lvl = s.log.Debug()
		}
		lvl.Err(err).Str("task", ev.Task).Int("stage", ev.Stage).Msg("control event refused")
	}
	s.apply(acts)
}

// routes is the membership view of req's task for this slave's clients:
// its server's when the slave hosts the task's shards; when it hosts none
// (it joined, or rejoined as a fresh instance, after the tables were
// placed) and a table is replicated, one that starts from the hosts the
// master says died. Its workers went to the dead hosts, or to this slave
// itself when it had been one ("should host table ... but does not").
func (s *Slave) routes(req proto.SlaveCtl) *kvstore.Routes {
	if s.kv == nil || s.kv.Hosts(req.Task) {
		return s.kv.Routes(req.Task)
	}
	for _, p := range req.Tables {
		if p.Spec.Replicas > 1 {
			return s.kv.GuestRoutes(req.Task, req.Hosts, req.DeadHosts)
		}
	}
	return nil
}

// PeerDead tells the slave that node died: workers of stages whose shards
// live there fail with an error naming it instead of waiting on it.
func (s *Slave) PeerDead(node, reason string) {
	if s.kv != nil {
		s.kv.PeerDead(node) // replicated shards fail over
	}
	s.step(Event{Kind: EvPeerDead, Node: node, Reason: reason})
}

// onMasterAlive notes the master's sign of life. Another instance than
// the one this slave joined means the master restarted: the tasks of the
// old one are dropped (their workers stop, their shards are freed).
func (s *Slave) onMasterAlive(msg *nats.Msg) {
	var a proto.MasterAlive
	if err := json.Unmarshal(msg.Data, &a); err != nil || a.Instance == "" {
		s.log.Warn().Msg("malformed sign of life from the master; ignored")
		return
	}
	s.lastAlive.Store(time.Now().UnixNano())
	s.amu.Lock()
	prev := s.masterInstance
	s.masterInstance = a.Instance
	s.amu.Unlock()
	if s.masterGone.Swap(false) {
		s.log.Info().Msg("the master is back")
	}
	if prev != "" && prev != a.Instance {
		s.log.Warn().Str("was", prev).Str("now", a.Instance).Msg("the master restarted; dropping the tasks of the old one")
		s.background(func() { // not on the bus's callback goroutine
			s.MasterGone("the master restarted")
			// Its membership starts anew: join it (same instance).
			s.rejoin("the master restarted", false)
		})
	}
}

// background runs f on a goroutine Close waits for, unless Close already
// began waiting (then f does not run: the slave is going away).
func (s *Slave) background(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// checkMaster drops every task once the master has been silent longer
// than its dead_after: no one will collect their results, and their
// shards would otherwise stay in memory for good.
func (s *Slave) checkMaster(now time.Time) {
	// Cut off from the bus the slave hears nobody: the master's silence
	// is the slave's own. Once it hears again the master gets a full
	// dead_after to speak (it may reconnect a moment after the slave).
	if !s.nc.IsConnected() {
		if !s.busDown {
			s.busDown = true
			s.log.Warn().Msg("this slave lost the bus: its tasks wait for it (no master is declared gone while it hears nobody)")
		}
		return
	}
	if s.busDown {
		s.busDown = false
		if s.lastAlive.Load() != 0 {
			s.lastAlive.Store(now.UnixNano())
		}
		s.log.Info().Msg("this slave hears the bus again")
	}
	s.amu.Lock()
	deadAfter := s.masterDeadAfter
	s.amu.Unlock()
	s.gmu.Lock()
	last := s.lastAlive.Load()
	fire := last != 0 && deadAfter > 0 && now.Sub(time.Unix(0, last)) > deadAfter && s.masterGone.CompareAndSwap(false, true)
	if fire {
		s.mu.Lock()
		for id := range s.tasks {
			s.silenced.add(id, true, silencedKept)
		}
		s.mu.Unlock()
	}
	s.gmu.Unlock()
	if fire {
		silent := now.Sub(time.Unix(0, last)).Round(time.Millisecond)
		s.log.Error().Dur("silent", silent).Msg("no word from the master; stopping its tasks and freeing their shards")
		s.MasterGone(fmt.Sprintf("no word from the master for %v", silent))
	}
}

// holdsTask answers OpHoldsTask: nil while the slave runs task and has
// not stopped it for the master's silence.
func (s *Slave) holdsTask(task string) error {
	s.gmu.Lock()
	s.lastAlive.Store(time.Now().UnixNano())
	_, dropped := s.silenced.get(task)
	stopped := s.masterGone.Load() || dropped
	s.gmu.Unlock()
	if stopped {
		return fmt.Errorf("slave %s stopped task %s: it heard no word from the master for longer than failure_timeout", s.cfg.ID, task)
	}
	return nil
}

// silencedKept is how many tasks dropped for the master's silence a
// slave remembers.
const silencedKept = 1024

// MasterGone tells the slave the master is unreachable: every task's
// workers stop, since no one will collect their results.
func (s *Slave) MasterGone(reason string) {
	s.step(Event{Kind: EvMasterGone, Reason: reason})
}

// apply carries out the machine's actions (all but ActLaunch, which
// startWorkers does itself).
func (s *Slave) apply(acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case ActCancelStage:
			s.mu.Lock()
			if t := s.tasks[a.Task]; t != nil {
				if run, ok := t.stages[a.Stage]; ok && run.gen == a.Gen {
					run.cancel(a.Err)
					if a.Err == nil { // ended normally
						delete(t.stages, a.Stage)
					}
				}
			}
			s.mu.Unlock()
		case ActCancelTask:
			s.mu.Lock()
			t := s.tasks[a.Task]
			delete(s.tasks, a.Task)
			s.mu.Unlock()
			if t != nil {
				t.cancel(a.Err)
			}
			if s.kv != nil {
				s.kv.DropTask(a.Task, a.Err)
			}
			s.cache.Drop(a.Task)
			s.dropRetained(a.Task)
			if t != nil {
				s.release.dropped(a.Task)
			}
		case ActPublish:
			s.publish(a.Event)
		case ActLog:
			s.log.Warn().Err(a.Err).Str("task", a.Task).Int("stage", a.Stage).Msg("slave control")
		}
	}
}

func (s *Slave) startWorkers(req proto.SlaveCtl) error {
	if req.Spec == nil || req.Stage < 0 || req.Stage >= len(req.Spec.Stages) {
		return errors.New("start_workers without a task or with a bad stage")
	}
	st := req.Spec.Stages[req.Stage]
	fn, ok := tasks.Lookup(st.Func)
	if !ok {
		return fmt.Errorf("stage function %q is not registered in this slave's binary (registered: %v)", st.Func, tasks.Registered())
	}
	t := s.task(req.Task)
	s.mu.Lock()
	acts, err := s.ctl.Step(Event{Kind: EvStartStage, Task: req.Task, Stage: req.Stage, StageName: st.Name,
		Ranks: req.Ranks, Workers: req.Workers, OneSlave: st.OneSlave(), Hosts: req.Hosts, Survivable: req.Survivable})
	if err != nil {
		s.mu.Unlock()
		return err
	}
	gen := acts[0].Gen
	ctx, cancel := context.WithCancelCause(t.ctx)
	if old, ok := t.stages[req.Stage]; ok {
		old.cancel(errors.New("stage restarted"))
	}
	t.stages[req.Stage] = stageRun{gen: gen, cancel: cancel}
	s.mu.Unlock()
	var local *localModel
	if st.OneSlave() {
		local = newLocalModel(s, req, st, req.Workers)
	}
	for i, rank := range req.Ranks {
		w := &worker{s: s, req: req, stage: st, fn: fn, rank: rank, gen: gen, localRank: i, localCount: len(req.Ranks), ctx: ctx, local: local, inc: s.Incarnation()}
		s.linger.add(w, req.Task, ctx)
		if !s.background(func() { defer s.linger.done(w); w.run() }) {
			s.linger.done(w)
			return errors.New("slave shutting down")
		}
	}
	return nil
}

// report passes a worker's report through the control machine, which
// turns non-finite numbers into the worker's error and cancels its stage.
func (s *Slave) report(gen int, ev proto.WorkerEvent) {
	ev.Slave, ev.Instance = s.cfg.ID, s.self().instance
	s.mu.Lock()
	acts, err := s.ctl.Step(Event{Kind: EvWorkerReport, Task: ev.Task, Stage: ev.Stage, Gen: gen, Report: ev})
	s.mu.Unlock()
	if err != nil {
		// The task or stage ended first (the master stopped listening).
		s.log.Debug().Err(err).Str("task", ev.Task).Int("stage", ev.Stage).Int("worker", ev.Rank).Msg("worker report not sent")
	}
	s.apply(acts)
}

// publish sends a worker event to the master; what cannot be encoded or
// sent is logged with the event's identity, never dropped without a word.
func (s *Slave) publish(ev proto.WorkerEvent) {
	data, err := json.Marshal(ev)
	if err != nil {
		s.log.Error().Err(err).Str("task", ev.Task).Int("stage", ev.Stage).Int("worker", ev.Rank).Str("kind", ev.Kind).Msg("cannot encode the worker event")
		ev = proto.WorkerEvent{Task: ev.Task, Stage: ev.Stage, Rank: ev.Rank, Slave: ev.Slave, Instance: ev.Instance, Kind: proto.WorkerError,
			Error: fmt.Sprintf("slave %s: cannot encode the worker's %s event: %v", ev.Slave, ev.Kind, err)}
		if data, err = json.Marshal(ev); err != nil {
			return // unreachable: the error event holds only strings and ints
		}
	}
	if acknowledged(ev.Kind) && s.ctx != nil {
		s.outbox.push(ev, data) // not lost in a bus outage
		return
	}
	if err := s.nc.Publish(s.subj.Event(), data); err != nil {
		s.log.Error().Err(err).Str("task", ev.Task).Int("stage", ev.Stage).Int("worker", ev.Rank).Str("kind", ev.Kind).Msg("cannot send the worker event to the master")
	}
}
