package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flexps/flexps/checkpoint"
	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/hdfs"
	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/master/membership"
	"github.com/flexps/flexps/scheduler"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
)

// Master is a running master.
type Master struct {
	cfg      Config
	instance string // this run of the master, announced to slaves
	nc       *nats.Conn
	subj     bus.Subjects
	log      zerolog.Logger
	policy   scheduler.Policy
	sources  *datastore.Sources

	mu   sync.Mutex
	mem  *membership.Machine
	deaf bool // cut off from the bus (tick): the detector hears nobody
	// lastTick is the wall-clock (monotonic) time of the detector's last
	// tick, which also tells the slaves the master is alive: a gap of a
	// failure timeout or more is the master's own stall (tick).
	lastTick time.Time
	// reconnects: control requests across a reconnection are sent again (ctl).
	reconnects *bus.Reconnects
	viewSent   time.Time // when the membership view was last published
	slaves     map[string]*slaveInfo
	tasks      map[string]*taskRun
	order      []string // task ids in submission order
	queue      []waiting
	assigners  map[assignKey]*assignment
	seq        int
	// recovering: the tasks of the previous master are being resumed
	// (recoverTasks): an id not yet known may be one of them.
	recovering bool

	subs   []*nats.Subscription
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type slaveInfo struct {
	proto.JoinRequest
	free        int
	lingering   int // slots the slave says cancelled workers still take (proto.Heartbeat.Lingering)
	alive       bool
	left        bool      // not alive because it left cleanly (not declared dead)
	incarnation uint64    // numbered by the membership epoch that admitted it
	lastSeen    time.Time // when a dead or left slave was last heard from
}

// freeNow is how many slots the scheduler may hand out: the free ones
// less those workers of ended or cancelled stages still take.
func (s *slaveInfo) freeNow() int { return max(0, s.free-s.lingering) }

type waiting struct {
	req   scheduler.Request
	grant chan []scheduler.Assignment
	unfit bool // the cluster shrank below what it asks for (unfitQueuedLocked)
}

type assignKey struct {
	task  string
	stage int
	input string
}

// New creates a master on nc; Start makes it serve.
func New(nc *nats.Conn, cfg Config) (*Master, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	pol, err := scheduler.New(cfg.Policy, scheduler.Options{AgingPerSecond: cfg.Aging})
	if err != nil {
		return nil, fmt.Errorf("master: policy: %w", err)
	}
	return &Master{
		cfg: cfg, nc: nc, subj: bus.For(cfg.Cluster), log: cfg.Log.With().Str("node", "master").Logger(),
		policy: pol, sources: hdfs.NewSources(cfg.HDFS).Restrict(cfg.Paths),
		mem: membership.New(cfg.DeadAfter), slaves: map[string]*slaveInfo{},
		tasks: map[string]*taskRun{}, assigners: map[assignKey]*assignment{}, instance: nuid.Next(),
	}, nil
}

// Start subscribes to the master's subjects and starts the failure
// detector. The master stops when ctx ends or Close is called.
func (m *Master) Start(ctx context.Context) error {
	// The causes name why the master stopped: a caller whose context
	// ended (a start-up timeout cancelled once StartLocal returned) was
	// told only "master is shutting down", and its tasks "context
	// canceled".
	var cancel context.CancelCauseFunc
	m.ctx, cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		cancel(fmt.Errorf("the context the master was started with ended: %w", context.Cause(ctx)))
	})
	m.cancel = func() {
		stop()
		cancel(errClosed)
	}
	m.reconnects = bus.WatchReconnects(m.nc)
	handlers := map[string]nats.MsgHandler{
		m.subj.Join():      m.onJoin,
		m.subj.Heartbeat(): m.onHeartbeat,
		m.subj.Leave():     m.onLeave,
		m.subj.Submit():    m.onSubmit,
		m.subj.Status():    m.onStatus,
		m.subj.Cancel():    m.onCancel,
		m.subj.Event():     m.onEvent,
		m.subj.Block():     m.onBlock,
		m.subj.Barrier():   m.onBarrier,
	}
	for subject, h := range handlers {
		sub, err := m.nc.Subscribe(subject, h)
		if err != nil {
			m.Close()
			return fmt.Errorf("master: subscribe %s: %w", subject, err)
		}
		sub.SetPendingLimits(-1, -1)
		m.subs = append(m.subs, sub)
	}
	if err := m.nc.Flush(); err != nil {
		m.Close()
		return fmt.Errorf("master: %w", err)
	}
	m.wg.Add(1)
	go m.detect()
	if m.cfg.StateDir != "" {
		m.mu.Lock()
		m.recovering = true
		m.mu.Unlock()
		m.wg.Add(1)
		go m.recoverTasks()
	}
	m.log.Info().Str("policy", m.policy.Name()).Dur("dead_after", m.cfg.DeadAfter).Msg("master started")
	return nil
}

// errClosed is why a master stopped by Close stopped.
var errClosed = errors.New("the master was closed")

// Close stops the master: running tasks are failed and their slaves told
// to abort.
func (m *Master) Close() {
	for _, s := range m.subs {
		s.Unsubscribe()
	}
	m.subs = nil
	if m.cancel != nil {
		m.cancel()
	}
	m.wg.Wait()
	m.sources.Close()
}

func (m *Master) detect() {
	defer m.wg.Done()
	// The detector's tick adds up to one period to the detection latency:
	// a quarter heartbeat keeps that small next to the failure timeout.
	t := time.NewTicker(m.cfg.Heartbeat / 4)
	defer t.Stop()
	alive, err := json.Marshal(proto.MasterAlive{Instance: m.instance})
	if err != nil {
		m.log.Error().Err(err).Msg("cannot encode the master's sign of life; slaves will drop their tasks")
	}
	failing := false
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
			if alive != nil {
				if err := m.nc.Publish(m.subj.MasterAlive(), alive); err != nil && !failing {
					m.log.Warn().Err(err).Msg("cannot tell the slaves the master is alive")
					failing = true
				} else if err == nil {
					failing = false
				}
			}
			m.tick(m.cfg.Now())
		}
	}
}

// reply answers a request; an answer that cannot be encoded or sent is
// logged, never dropped silently.
func (m *Master) reply(msg *nats.Msg, v any) {
	if msg.Reply == "" {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		m.log.Error().Err(err).Str("subject", msg.Subject).Msg("cannot encode the answer")
		data, _ = json.Marshal(proto.CtlReply{Error: "master: cannot encode the answer: " + err.Error()})
	}
	if err := msg.Respond(data); err != nil {
		m.log.Warn().Err(err).Str("subject", msg.Subject).Msg("cannot send the answer")
	}
}

// MaxSlots bounds the worker slots one slave may offer.
const MaxSlots = 1024

// Slaves lists the slaves the master knows.
func (m *Master) Slaves() []status.Slave {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.slavesLocked()
}

func (m *Master) slavesLocked() []status.Slave {
	out := make([]status.Slave, 0, len(m.slaves))
	for id, s := range m.slaves {
		seen := s.lastSeen
		if s.alive {
			seen, _ = m.mem.LastSeen(id)
		}
		free := 0 // a dead slave's slots are nobody's to take
		if s.alive {
			free = s.freeNow()
		}
		out = append(out, status.Slave{ID: id, Host: s.Host, PID: s.PID, Slots: s.Slots, Free: free, Lingering: s.lingering, Alive: s.alive, Left: s.left, LastSeen: seen,
			Instance: s.Instance, Incarnation: s.incarnation})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (m *Master) onSubmit(msg *nats.Msg) {
	var req proto.SubmitRequest
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		m.reply(msg, proto.SubmitReply{Error: "malformed submission: " + err.Error()})
		return
	}
	// Listing inputs may take a while (HDFS); do not hold up the handler.
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if req.Resume != "" {
			id, warnings, err := m.Resume(m.ctx, req.Resume, req.Task.ID)
			if err != nil {
				m.reply(msg, proto.SubmitReply{Error: err.Error(), Warnings: warnings})
				return
			}
			m.reply(msg, proto.SubmitReply{ID: id, Warnings: warnings, ExternalBus: m.cfg.ExternalBus})
			return
		}
		id, err := m.Submit(m.ctx, &req.Task)
		if err != nil {
			m.reply(msg, proto.SubmitReply{Error: err.Error()})
			return
		}
		m.reply(msg, proto.SubmitReply{ID: id, ExternalBus: m.cfg.ExternalBus})
	}()
}

// Submit queues a task and returns its id. The task's inputs are listed
// now, so a missing file fails the submission, not the run.
func (m *Master) Submit(ctx context.Context, spec *tasks.MultiStageTask) (string, error) {
	return m.submit(ctx, spec, nil, "")
}

func (m *Master) submit(ctx context.Context, spec *tasks.MultiStageTask, resume *checkpoint.Checkpoint, resumePath string) (string, error) {
	spec.Normalize()
	if err := spec.ValidateShape(); err != nil {
		return "", err
	}
	ckpt, err := newCheckpointer(spec.Checkpoint, m.cfg.Now())
	if err != nil {
		return "", fmt.Errorf("task %q: %w", spec.Name, err)
	}
	if ckpt != nil {
		// A directory the policy refuses or nobody can write fails now,
		// not at the first checkpoint.
		w, err := m.sources.Create(ctx, strings.TrimRight(ckpt.dir, "/")+"/.flexps-probe")
		if err != nil {
			return "", fmt.Errorf("task %q: checkpoint dir %s: %w", spec.Name, ckpt.dir, err)
		}
		datastore.Abort(w)
		if resume == nil { // a resume's are named with its warnings
			m.tempsWarning(ctx, ckpt.dir)
		}
	}
	if spec.Output != "" {
		// Refused or unwritable outputs fail now, not after training: a
		// probe file is created where the model will go and discarded.
		w, err := m.sources.Create(ctx, spec.Output)
		if err != nil {
			return "", fmt.Errorf("task %q: output %s: %w", spec.Name, spec.Output, err)
		}
		datastore.Abort(w)
	}
	blocks := map[string][]datastore.Block{}
	for name, in := range spec.Inputs {
		bs := in.BlockSize
		if bs <= 0 {
			bs = m.cfg.BlockSize
		}
		b, err := m.sources.Blocks(ctx, in.Path, bs)
		if err != nil {
			return "", fmt.Errorf("task %q: input %q: %w", spec.Name, name, err)
		}
		if in.BlockSize <= 0 {
			// Pulling balances load only if every worker gets several
			// blocks: split small inputs finer (not below 256 KiB).
			var total int64
			for _, blk := range b {
				total += blk.Length
			}
			want := int64(8 * maxWorkers(spec))
			if int64(len(b)) < want {
				if finer := max(total/want, 256<<10); finer < bs {
					if b2, err := m.sources.Blocks(ctx, in.Path, finer); err == nil {
						b = b2
					}
				}
			}
		}
		if in.BlockSize > 0 && in.BlockSize < smallBlock && len(b) > manySmallBlocks {
			// Each block is a round trip to the master (and a
			// confirmation): a million blocks of a byte read for hours.
			m.log.Warn().Str("task", spec.Name).Str("input", name).Int64("block_size", in.BlockSize).Int("blocks", len(b)).
				Msgf("input %q: block_size = %d bytes splits it into %d blocks, each a round trip to the master: reading will be slow; blocks of %d KiB or more (unset: the cluster's, %d MiB) read at full speed",
					name, in.BlockSize, len(b), smallBlock>>10, m.cfg.BlockSize>>20)
		}
		if n, err := m.sources.SkippedSubdirs(ctx, in.Path); err == nil && n > 0 {
			// Their files are not read: say so, or the data in them is
			// left out of training without a word.
			m.log.Warn().Str("task", spec.Name).Str("input", name).Str("path", in.Path).Int("subdirectories", n).
				Msgf("input %q: the files in %s of %s are not read: a directory input reads only the files directly in it (the glob %s/*/* reads theirs)",
					name, subdirs(n), in.Path, strings.TrimRight(in.Path, "/"))
		}
		blocks[name] = b
	}
	if name := overwritesInput(spec.Output, blocks, m.sources.Canonical); name != "" {
		// The model was written over the data at the task's end.
		return "", fmt.Errorf("task %q: output %s is a file of its input %q: the model would be written over it; name another output", spec.Name, spec.Output, name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return "", fmt.Errorf("master is shutting down: %w", context.Cause(m.ctx))
	}
	m.seq++
	if spec.ID == "" {
		spec.ID = fmt.Sprintf("t%d-%d", m.cfg.Now().Unix()%100000, m.seq)
	} else if _, dup := m.tasks[spec.ID]; dup {
		return "", fmt.Errorf("a task with id %q exists (Submit and SubmitAndWait set a task's ID: to submit the same task again, set its ID to \"\")", spec.ID)
	}
	if ckpt != nil {
		// Two tasks checkpointing into one directory interleave their
		// numbering and delete each other's files (keep): a resume of a
		// directory whose task still runs did just that.
		for _, id := range m.order {
			if o := m.tasks[id]; o.ckpt != nil && !o.isEnded() && m.sameCheckpointDir(o.ckpt.dir, ckpt.dir) {
				return "", fmt.Errorf("task %q: checkpoint dir %s: task %s (%s), still running, writes its checkpoints there: wait for it to end or cancel it (flexps cancel %s), or give this task another dir", spec.Name, ckpt.dir, id, o.spec.Name, id)
			}
		}
		// The same across processes (two flexps run, two masters): a
		// local dir is locked until the task ends or the process does.
		lock, err := checkpoint.LockDir(ckpt.dir)
		if errors.Is(err, checkpoint.ErrLockUnsupported) {
			m.log.Warn().Err(err).Str("task", spec.ID).Msg("checkpoint dir not locked: another process writing checkpoints there is not detected")
			err = nil
		}
		if err != nil {
			return "", fmt.Errorf("task %q: %w", spec.Name, err)
		}
		ckpt.lock = lock
		if lock != nil {
			// Held, the lock says nothing writes there: a temporary
			// checkpoint file is one a writer left when it died (a master
			// killed mid-write), there for good until now.
			removed, err := checkpoint.RemoveStaleTemps(ckpt.dir)
			for _, p := range removed {
				m.log.Info().Str("task", spec.ID).Str("path", p).Msg("removed a temporary checkpoint file a dead writer left")
			}
			if err != nil {
				m.log.Warn().Err(err).Str("task", spec.ID).Msg("temporary checkpoint files of a dead writer not removed")
			}
		}
	}
	m.pruneLocked()
	tr := newTaskRun(m, spec, blocks)
	tr.seq = m.seq
	tr.ckpt, tr.resume = ckpt, resume
	if ckpt != nil && resume != nil {
		ckpt.lineage = resume.Continue(spec.ID)
	}
	tr.status.Resumed = resumePath
	if resume != nil && resume.Progress.Stage > 0 {
		tr.first = nil // the first stage to run is not stage 0
	}
	m.tasks[spec.ID] = tr
	m.order = append(m.order, spec.ID)
	if st := &spec.Stages[0]; !st.Auto && (resume == nil || resume.Progress.Stage == 0) {
		// Queue the first stage now, under the same lock that ordered the
		// submission: the scheduler sees tasks in submission order however
		// their goroutines are scheduled. A request that cannot fit is left
		// to the task's goroutine, which fails the task with the reason.
		if grant, err := m.requestLocked(tr.slotRequest(0, st, st.Workers, st.Slaves)); err == nil {
			tr.first = grant
		}
	}
	m.wg.Add(1)
	go tr.run()
	m.log.Info().Str("task", spec.ID).Str("name", spec.Name).Int("stages", len(spec.Stages)).Msg("task submitted")
	return spec.ID, nil
}

// subdirs is "1 subdirectory", "n subdirectories".
func subdirs(n int) string {
	if n == 1 {
		return "1 subdirectory"
	}
	return fmt.Sprintf("%d subdirectories", n)
}

// An input split by its own block_size into more than manySmallBlocks
// blocks of under smallBlock bytes is warned about at submission.
const (
	smallBlock      = 64 << 10
	manySmallBlocks = 10000
)

// overwritesInput is the name of the input one of whose files is output
// (tasks.OverwrittenInput), or "". URLs are compared as canon spells them:
// an output hdfs://nn:8020/d/train.libsvm over the input hdfs:///d (the
// configured namenode) was written over the data.
func overwritesInput(output string, blocks map[string][]datastore.Block, canon func(string) string) string {
	files := make(map[string][]string, len(blocks))
	for name, bs := range blocks {
		for _, b := range bs {
			if n := len(files[name]); n == 0 || files[name][n-1] != canon(b.Path) {
				files[name] = append(files[name], canon(b.Path))
			}
		}
	}
	return tasks.OverwrittenInput(canon(output), files)
}

// sameCheckpointDir is sameDir of two checkpoint dirs as the master's
// sources spell them: hdfs:///ck and hdfs://nn:8020/ck are one dir when
// nn:8020 is the configured namenode (two tasks so spelled wrote into
// one dir, each pruning the other's checkpoints).
func (m *Master) sameCheckpointDir(a, b string) bool {
	return sameDir(m.sources.Canonical(a), m.sources.Canonical(b))
}

// sameDir reports whether two checkpoint dirs are one (local paths
// cleaned, URLs without their trailing slashes).
func sameDir(a, b string) bool {
	clean := func(d string) string {
		if strings.Contains(d, "://") {
			return strings.TrimRight(d, "/")
		}
		return filepath.Clean(d)
	}
	return clean(a) == clean(b)
}

// maxWorkers is the largest parallelism of a task's stages (auto: 8).
func maxWorkers(t *tasks.MultiStageTask) int {
	n := 1
	for _, s := range t.Stages {
		w := s.Workers
		if s.Auto && w == 0 {
			w = 8
		}
		n = max(n, w)
	}
	return n
}

// pruneLocked drops the oldest ended tasks beyond KeepTasks, and those
// that ended more than KeepTasksFor ago, so a master that runs for months
// keeps bounded memory.
func (m *Master) pruneLocked() {
	ended := 0
	for _, id := range m.order {
		if m.tasks[id].isEnded() {
			ended++
		}
	}
	drop := max(ended-m.cfg.KeepTasks, 0)
	var cutoff time.Time
	if m.cfg.KeepTasksFor > 0 {
		cutoff = m.cfg.Now().Add(-m.cfg.KeepTasksFor)
	}
	if drop == 0 && cutoff.IsZero() {
		return
	}
	kept := m.order[:0]
	for _, id := range m.order {
		tr := m.tasks[id]
		if tr.isEnded() && (drop > 0 || !cutoff.IsZero() && tr.finishedBefore(cutoff)) {
			delete(m.tasks, id)
			drop = max(drop-1, 0)
			continue
		}
		kept = append(kept, id)
	}
	clear(m.order[len(kept):])
	m.order = kept
}

func (m *Master) onStatus(msg *nats.Msg) {
	var req proto.StatusRequest
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		m.reply(msg, proto.StatusReply{Error: "malformed status request"})
		return
	}
	cl, err := m.Status(req.ID)
	rep := proto.StatusReply{Cluster: cl}
	if err != nil {
		rep.Error = err.Error()
		m.mu.Lock()
		rep.Unknown = req.ID != "" && !m.recovering
		m.mu.Unlock()
	}
	if req.ID == "" {
		var err error
		if rep.Tasks, rep.Omitted, err = statusPage(rep.Tasks, req.Before, req.Limit); err != nil {
			rep.Error = err.Error()
		}
	}
	// The answer must fit one NATS message: a task of thousands of
	// stages leaves out its oldest stage results (one such task filled
	// the answer, which then listed no task at all: flexps status ID
	// printed none, and its follower never saw it end), then the oldest
	// tasks are left out (the reply says how many; each stays readable
	// by its id).
	limit := m.messageLimit()
	for i := range rep.Tasks {
		rep.Tasks[i] = fitTask(rep.Tasks[i], limit/2)
	}
	for len(rep.Tasks) > 0 {
		data, err := json.Marshal(rep)
		if err != nil || len(data) <= limit {
			break
		}
		cut := max(1, len(rep.Tasks)/4)
		rep.Tasks = rep.Tasks[cut:]
		rep.Omitted += cut
	}
	m.reply(msg, rep)
}

// messageLimit is the most bytes of a status answer or task event: the
// bus's max_payload less room for the envelope.
func (m *Master) messageLimit() int { return int(m.nc.MaxPayload()) - 1024 }

// taskSize is the length of t in JSON.
func taskSize(t status.Task) int {
	data, err := json.Marshal(t)
	if err != nil {
		return 0
	}
	return len(data)
}

// fitTask leaves out t's oldest stage results, counted in ResultsOmitted,
// until t takes at most limit bytes of JSON (or has no results left).
func fitTask(t status.Task, limit int) status.Task {
	for len(t.Results) > 0 {
		size := taskSize(t)
		if size <= limit {
			break
		}
		// Results take about the same room each: cut the share that is
		// over, and an eighth more, so that one cut nearly always fits.
		n := len(t.Results)
		cut := min(n, max(1, int(float64(n)*float64(size-limit)/float64(size))+n/8))
		t.Results = t.Results[cut:]
		t.ResultsOmitted += cut
	}
	return t
}

// statusPage is the page of tasks (in submission order) submitted before
// task before ("": all), at most limit of them (0: no limit), the newest
// kept; omitted counts the older ones left out. A before that is not
// among tasks is an error.
func statusPage(tasks []status.Task, before string, limit int) (page []status.Task, omitted int, err error) {
	if before != "" {
		end := -1
		for i, t := range tasks {
			if t.ID == before {
				end = i
				break
			}
		}
		if end < 0 {
			// Not the newest page instead: it reads as the next one.
			return nil, 0, fmt.Errorf("no task %q to list the tasks before (never submitted, or pruned since; flexps status lists the newest)", before)
		}
		tasks = tasks[:end]
	}
	if limit > 0 && len(tasks) > limit {
		omitted = len(tasks) - limit
		tasks = tasks[omitted:]
	}
	return tasks, omitted, nil
}

// Status reports one task (id != "") or all, and the slaves.
func (m *Master) Status(id string) (status.Cluster, error) {
	m.mu.Lock()
	m.pruneLocked()
	runs := make([]*taskRun, 0, len(m.order))
	for _, tid := range m.order {
		if id == "" || tid == id {
			runs = append(runs, m.tasks[tid])
		}
	}
	out := status.Cluster{Slaves: m.slavesLocked(), Policy: m.policy.Name(), Epoch: m.mem.Epoch(), ExternalBus: m.cfg.ExternalBus}
	// Why each queued stage that fits the cluster has not started (one
	// that does not fit says so in Waiting), and who holds slots.
	busy := map[string]string{}
	cluster := m.schedSlavesLocked()
	for _, w := range m.queue {
		if !w.unfit {
			busy[w.req.Task] = busyNotice(w.req, cluster, m.policy.Name())
		}
	}
	var all []*taskRun
	if len(busy) > 0 {
		for _, tid := range m.order {
			all = append(all, m.tasks[tid])
		}
	}
	m.mu.Unlock()
	var holders []string
	for _, tr := range all {
		if n := tr.slotsHeld(); n > 0 {
			holders = append(holders, fmt.Sprintf("%s (%s) holds %d", tr.spec.ID, tr.spec.Name, n))
		}
	}
	for _, tr := range runs {
		st := tr.snapshot()
		if why, ok := busy[st.ID]; ok && st.State == status.Queued {
			if len(holders) > 0 {
				why += "; " + strings.Join(holders, ", ")
			}
			st.Queued = why
		}
		out.Tasks = append(out.Tasks, st)
	}
	if id != "" && len(runs) == 0 {
		return out, fmt.Errorf("no task %q", id)
	}
	return out, nil
}

func (m *Master) onCancel(msg *nats.Msg) {
	var req proto.CancelRequest
	json.Unmarshal(msg.Data, &req)
	m.mu.Lock()
	tr, recovering := m.tasks[req.ID], m.recovering
	m.mu.Unlock()
	if tr == nil {
		m.reply(msg, proto.CtlReply{Error: fmt.Sprintf("no task %q", req.ID), Unknown: !recovering})
		return
	}
	if req.Checkpoint {
		tr.stopAtCheckpoint()
	} else {
		tr.cancelRun(errCancelled)
	}
	m.reply(msg, proto.CtlReply{OK: true})
}

// onEvent takes a worker's event. Slaves ask for an acknowledgement of
// the events that end something (a worker's end, a lost shard) and send
// them again until they get it: a repeat is ignored by the stage.
func (m *Master) onEvent(msg *nats.Msg) {
	var ev proto.WorkerEvent
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		m.reply(msg, proto.CtlReply{Error: "malformed worker event"})
		return
	}
	if err := m.fenced(ev.Slave, ev.Instance); err != nil {
		m.reply(msg, proto.CtlReply{Error: err.Error()}) // logged once by fenced
		return
	}
	m.mu.Lock()
	tr := m.tasks[ev.Task]
	m.mu.Unlock()
	if tr != nil {
		tr.event(ev)
	}
	m.reply(msg, proto.CtlReply{OK: true})
}

func (m *Master) onBarrier(msg *nats.Msg) {
	var req proto.BarrierRequest
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		m.reply(msg, proto.CtlReply{Error: "malformed barrier request"})
		return
	}
	m.mu.Lock()
	tr := m.tasks[req.Task]
	m.mu.Unlock()
	if tr == nil {
		m.reply(msg, proto.CtlReply{Error: fmt.Sprintf("no task %q", req.Task)})
		return
	}
	tr.barrier(msg, req)
}

// aliveSlaves lists live slave ids, sorted.
func (m *Master) aliveSlaves() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, s := range m.slaves {
		if s.alive {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func (m *Master) slaveHost(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.slaves[id]; s != nil {
		return s.Host
	}
	return ""
}

// ctl sends a control request to a slave and waits for its answer.
//
// A request in flight when the master reconnects to the bus (the request
// or its answer may be lost) is sent again with the same ReqID, which the
// slave answers as the first without doing it twice; so is one nobody
// answered just after a reconnection (the slave not subscribed again
// yet), until the slave is declared dead or a failure timeout passed.
func (m *Master) ctl(ctx context.Context, slave string, req proto.SlaveCtl) error {
	req.Instance = m.liveInstance(slave)
	req.ReqID = nuid.Next()
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var msg *nats.Msg
	for {
		var resend bool
		msg, resend, err = m.reconnects.Request(ctx, m.subj.SlaveCtl(slave), data, m.cfg.RequestTimeout)
		if resend {
			continue
		}
		if err != nil && errors.Is(err, nats.ErrNoResponders) && m.reconnects.Within(m.cfg.DeadAfter+m.cfg.Heartbeat) && m.isAlive(slave) && ctx.Err() == nil {
			time.Sleep(m.cfg.Heartbeat / 4)
			continue
		}
		break
	}
	if err != nil {
		return fmt.Errorf("slave %s did not answer %s: %w", slave, req.Op, err)
	}
	var rep proto.CtlReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return fmt.Errorf("slave %s: malformed answer to %s", slave, req.Op)
	}
	if err := m.fenced(slave, rep.Instance); err != nil {
		return fmt.Errorf("answer to %s refused: %w", req.Op, err)
	}
	m.mu.Lock()
	m.lingeringLocked(slave, rep.Instance, rep.Lingering)
	m.mu.Unlock()
	if !rep.OK {
		return fmt.Errorf("slave %s: %s", slave, rep.Error)
	}
	return nil
}

// ctlOrDead is ctl for the requests that set up a stage (create_tables,
// prepare_stage, start_workers): a slave that is no longer a member when
// its request fails (it died or left while it was asked: its answer is
// fenced) is skipped (nil), and one that nothing answers for (killed a
// moment ago, not yet declared dead) gets the failure detector's verdict
// first; if it is declared dead within two failure timeouts the request
// is skipped too. A skipped slave's death reaches the task through the
// membership, which says whether the task survives it and, if not, why.
// Otherwise the error stands.
func (m *Master) ctlOrDead(ctx context.Context, slave string, req proto.SlaveCtl) error {
	err := m.ctl(ctx, slave, req)
	if err == nil {
		return nil
	}
	if !m.isAlive(slave) && ctx.Err() == nil {
		m.log.Warn().Err(err).Str("slave", slave).Str("task", req.Task).Str("op", req.Op).Msg("slave gone while it was asked; its death decides")
		return nil
	}
	if !errors.Is(err, nats.ErrNoResponders) {
		return err
	}
	deadline := time.Now().Add(2*m.cfg.DeadAfter + m.cfg.Heartbeat)
	for m.isAlive(slave) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(m.cfg.Heartbeat / 4)
	}
	m.log.Warn().Err(err).Str("slave", slave).Str("task", req.Task).Str("op", req.Op).Msg("slave died before the request; its death decides")
	return nil
}

// ctlAll sends req to every slave in parallel; the first error wins.
func (m *Master) ctlAll(ctx context.Context, slaves []string, req proto.SlaveCtl) error {
	return eachSlave(slaves, func(s string) error { return m.ctl(ctx, s, req) })
}

// ctlCleanup is ctlAll for clean-up requests (end_stage): a slave that
// died or left meanwhile (no longer alive, or nothing answers on its
// control subject) is skipped with a warning, since its death reaches
// the task through the membership, which fails the task if it cannot
// survive it.
func (m *Master) ctlCleanup(ctx context.Context, slaves []string, req proto.SlaveCtl) error {
	return eachSlave(slaves, func(s string) error {
		err := m.ctl(ctx, s, req)
		if err != nil && (!m.isAlive(s) || errors.Is(err, nats.ErrNoResponders)) {
			m.log.Warn().Err(err).Str("slave", s).Str("task", req.Task).Str("op", req.Op).Msg("slave gone before the clean-up request; skipped")
			return nil
		}
		return err
	})
}

// eachSlave runs fn for every slave in parallel and joins the errors.
func eachSlave(slaves []string, fn func(slave string) error) error {
	errs := make([]error, len(slaves))
	var wg sync.WaitGroup
	for i, s := range slaves {
		wg.Go(func() { errs[i] = fn(s) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (m *Master) publishTask(id string, ev status.Event) {
	data, err := json.Marshal(ev)
	if err != nil {
		m.log.Error().Err(err).Str("task", id).Str("kind", ev.Kind).Msg("cannot encode the task event")
		return
	}
	if limit := m.messageLimit(); len(data) > limit {
		ev.Status = fitTask(ev.Status, limit-(len(data)-taskSize(ev.Status)))
		if data, err = json.Marshal(ev); err != nil {
			m.log.Error().Err(err).Str("task", id).Str("kind", ev.Kind).Msg("cannot encode the task event")
			return
		}
	}
	if err := m.nc.Publish(m.subj.TaskEvents(id), data); err != nil {
		m.log.Warn().Err(err).Str("task", id).Str("kind", ev.Kind).Msg("cannot publish the task event")
	}
}
