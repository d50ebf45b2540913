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
	ReadBuffer    int64         // AsyncReader buffer per worker and input, bytes; default 64 MiB
	ReadProducers int           // AsyncReader producers per worker and input; default 2
	ProgressEvery time.Duration // progress report interval; default 250ms
	DataCache     int64         // bytes of parsed input blocks kept for later epochs; default 1 GiB, <0 disables
	HDFS          hdfs.Config
	Paths         *datastore.PathPolicy // where tasks may read (nil: anywhere)
	Log           zerolog.Logger
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
	cfg     Config
	nc      *nats.Conn
	subj    bus.Subjects
	log     zerolog.Logger
	kv      *kvstore.Server
	sources *datastore.Sources
	cache   *datastore.BlockCache
	// cacheLogged: the cache's choice (fits or re-read) was logged once.
	cacheLogged atomic.Bool

	mu    sync.Mutex
	tasks map[string]*slaveTask

	xmu      sync.Mutex
	retained map[string]*retainedModel // models kept for direct transfer, by task

	ctlSub *nats.Subscription
	subs   []*nats.Subscription
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // heartbeat and workers
}

type slaveTask struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stages map[int]context.CancelCauseFunc // guarded by Slave.mu
}

// New creates a slave on nc; Start joins the cluster.
func New(nc *nats.Conn, cfg Config) *Slave {
	cfg.defaults()
	return &Slave{cfg: cfg, nc: nc, subj: bus.For(cfg.Cluster), tasks: map[string]*slaveTask{}, retained: map[string]*retainedModel{},
		log: cfg.Log.With().Str("node", cfg.ID).Logger(), sources: hdfs.NewSources(cfg.HDFS).Restrict(cfg.Paths),
		cache: datastore.NewBlockCache(max(cfg.DataCache, 0))}
}

// ID is the slave's id.
func (s *Slave) ID() string { return s.cfg.ID }

// Start serves the slave's subjects, joins the master (waiting up to
// JoinTimeout for one to answer) and starts beating.
func (s *Slave) Start(ctx context.Context) error {
	s.ctx, s.cancel = context.WithCancel(ctx)
	kv, err := kvstore.NewServer(transport.NewNATS(s.nc, s.subj.SlaveKV), s.cfg.ID, s.log)
	if err != nil {
		return err
	}
	s.kv = kv
	s.ctlSub, err = s.nc.Subscribe(s.subj.SlaveCtl(s.cfg.ID), s.onCtl)
	if err != nil {
		s.Close()
		return fmt.Errorf("slave: subscribe: %w", err)
	}
	s.ctlSub.SetPendingLimits(-1, -1)
	for subject, h := range map[string]nats.MsgHandler{s.subj.SlaveXfer(s.cfg.ID): s.serveXfer, s.subj.SlaveModelInfo(s.cfg.ID): s.serveModelInfo} {
		sub, err := s.nc.Subscribe(subject, h)
		if err != nil {
			s.Close()
			return fmt.Errorf("slave: subscribe: %w", err)
		}
		s.subs = append(s.subs, sub)
	}
	hb, err := s.join()
	if err != nil {
		s.Close()
		return err
	}
	s.wg.Add(1)
	go s.heartbeat(hb)
	s.log.Info().Int("slots", s.cfg.Slots).Msg("slave joined the cluster")
	return nil
}

func (s *Slave) join() (time.Duration, error) {
	req, _ := json.Marshal(proto.JoinRequest{ID: s.cfg.ID, Host: s.cfg.Host, Slots: s.cfg.Slots, PID: os.Getpid()})
	deadline := time.Now().Add(s.cfg.JoinTimeout)
	for {
		ctx, cancel := context.WithTimeout(s.ctx, time.Second)
		msg, err := s.nc.RequestWithContext(ctx, s.subj.Join(), req)
		cancel()
		if err == nil {
			var rep proto.JoinReply
			if err := json.Unmarshal(msg.Data, &rep); err != nil {
				return 0, fmt.Errorf("slave %s: malformed join reply", s.cfg.ID)
			}
			if !rep.OK {
				return 0, fmt.Errorf("slave %s: the master refused to let it join: %s", s.cfg.ID, rep.Error)
			}
			return rep.Heartbeat, nil
		}
		if s.ctx.Err() != nil {
			return 0, s.ctx.Err()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("slave %s: no master of cluster %q answered within %v on %s", s.cfg.ID, s.cfg.Cluster, s.cfg.JoinTimeout, s.nc.ConnectedUrlRedacted())
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			continue
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-s.ctx.Done():
			return 0, s.ctx.Err()
		}
	}
}

func (s *Slave) heartbeat(every time.Duration) {
	defer s.wg.Done()
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	data, _ := json.Marshal(proto.Heartbeat{ID: s.cfg.ID,
		Join: proto.JoinRequest{ID: s.cfg.ID, Host: s.cfg.Host, Slots: s.cfg.Slots, PID: os.Getpid()}})
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.nc.Publish(s.subj.Heartbeat(), data)
		}
	}
}

// Close stops the slave: running workers are cancelled and waited for.
func (s *Slave) Close() {
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
	}
	s.mu.Unlock()
	s.wg.Wait()
	if s.kv != nil {
		s.kv.Close()
	}
	s.sources.Close()
}

func (s *Slave) onCtl(msg *nats.Msg) {
	var req proto.SlaveCtl
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		respond(msg, fmt.Errorf("malformed control request: %w", err))
		return
	}
	respond(msg, s.control(req))
}

func respond(msg *nats.Msg, err error) {
	rep := proto.CtlReply{OK: err == nil}
	if err != nil {
		rep.Error = err.Error()
	}
	data, _ := json.Marshal(rep)
	msg.Respond(data)
}

func (s *Slave) task(id string) *slaveTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[id]
	if t == nil {
		ctx, cancel := context.WithCancelCause(s.ctx)
		t = &slaveTask{ctx: ctx, cancel: cancel, stages: map[int]context.CancelCauseFunc{}}
		s.tasks[id] = t
	}
	return t
}

func (s *Slave) control(req proto.SlaveCtl) error {
	switch req.Op {
	case proto.OpCreateTables:
		s.task(req.Task)
		return s.kv.CreateTables(req.Task, s.cfg.ID, req.Tables)
	case proto.OpPrepareStage:
		return s.kv.PrepareStage(req.Task, int32(req.Stage), req.Consistency, req.Workers)
	case proto.OpStartWorkers:
		return s.startWorkers(req)
	case proto.OpEndStage:
		s.kv.EndStage(req.Task, int32(req.Stage))
		s.mu.Lock()
		if t := s.tasks[req.Task]; t != nil {
			if cancel := t.stages[req.Stage]; cancel != nil {
				cancel(nil)
				delete(t.stages, req.Stage)
			}
		}
		s.mu.Unlock()
		return nil
	case proto.OpStopStage:
		s.mu.Lock()
		if t := s.tasks[req.Task]; t != nil {
			if cancel := t.stages[req.Stage]; cancel != nil {
				cancel(errors.New("stage stopped by the master"))
			}
		}
		s.mu.Unlock()
		return nil
	case proto.OpAbort, proto.OpDropTask:
		s.mu.Lock()
		t := s.tasks[req.Task]
		delete(s.tasks, req.Task)
		s.mu.Unlock()
		reason := errors.New(req.Reason)
		if req.Reason == "" {
			reason = errors.New("task dropped by the master")
		}
		if t != nil {
			t.cancel(reason)
		}
		s.kv.DropTask(req.Task, reason)
		s.cache.Drop(req.Task)
		s.dropRetained(req.Task)
		return nil
	}
	return fmt.Errorf("unknown control op %q", req.Op)
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
	if len(req.Ranks) > s.cfg.Slots {
		return fmt.Errorf("asked for %d workers but the slave has %d slots", len(req.Ranks), s.cfg.Slots)
	}
	t := s.task(req.Task)
	var local *localModel
	if st.OneSlave() {
		if len(req.Ranks) != req.Workers {
			return fmt.Errorf("a %s stage runs all its %d workers on one slave, got %d here", st.WorkerKind, req.Workers, len(req.Ranks))
		}
		local = newLocalModel(s, req, st, req.Workers)
	}
	s.mu.Lock()
	ctx, cancel := context.WithCancelCause(t.ctx)
	if old := t.stages[req.Stage]; old != nil {
		old(errors.New("stage restarted"))
	}
	t.stages[req.Stage] = cancel
	s.mu.Unlock()
	for i, rank := range req.Ranks {
		w := &worker{s: s, req: req, stage: st, fn: fn, rank: rank, localRank: i, localCount: len(req.Ranks), ctx: ctx, local: local}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			w.run()
		}()
	}
	return nil
}

func (s *Slave) publishEvent(ev proto.WorkerEvent) {
	ev.Slave = s.cfg.ID
	data, _ := json.Marshal(ev)
	s.nc.Publish(s.subj.Event(), data)
}
