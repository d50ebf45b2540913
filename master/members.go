package master

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/master/membership"
	"github.com/flexps/flexps/scheduler"
	"github.com/nats-io/nats.go"
)

// This file is the thin concurrent wrapper around membership.Machine: it
// turns joins, heartbeats, leaves and the detector's ticks into the
// machine's inputs under m.mu, and carries out its actions (record or
// forget a slave, fail the tasks of a dead one, log a refusal once,
// publish the new view).

// viewEvery is how often the view is sent again though nothing changed:
// core NATS may lose a message, and a slave that was stopped must learn
// it was declared dead.
const viewEvery = time.Second

// MaxInstance bounds the length of a slave's instance name.
const MaxInstance = 128

// MaxHost bounds the length of a slave's host name (a DNS name's).
const MaxHost = 255

// hasControl reports whether s holds a control character (a newline, a
// tab, a terminal escape).
func hasControl(s string) bool { return strings.IndexFunc(s, unicode.IsControl) >= 0 }

// checkJoin refuses joins that would break subjects or scheduling: a
// slave id is one NATS subject token, and slots are bounded.
func checkJoin(req proto.JoinRequest) error {
	switch {
	case req.ID == "" || len(req.ID) > 128 || strings.ContainsAny(req.ID, ".*> ") || hasControl(req.ID):
		return fmt.Errorf("slave id %q: want 1 to 128 characters without '.', '*', '>', spaces or control characters", req.ID)
	case len(req.Host) > MaxHost || hasControl(req.Host):
		// It is printed in status tables and logs: a terminal escape
		// there was run by the terminal of whoever listed the slaves.
		return fmt.Errorf("slave %s: host %q: want at most %d characters, none of them a control character", req.ID, req.Host, MaxHost)
	case req.Slots < 1 || req.Slots > MaxSlots:
		return fmt.Errorf("slave %s: %d slots, want 1 to %d", req.ID, req.Slots, MaxSlots)
	case req.Instance == "" || len(req.Instance) > MaxInstance:
		return fmt.Errorf("slave %s: instance %q: want 1 to %d characters (is the slave's flexps older than the master's?)", req.ID, req.Instance, MaxInstance)
	}
	return nil
}

func (m *Master) onJoin(msg *nats.Msg) {
	var req proto.JoinRequest
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		m.reply(msg, proto.JoinReply{Error: "malformed join request"})
		return
	}
	if err := checkJoin(req); err != nil {
		m.log.Warn().Err(err).Msg("join refused")
		m.reply(msg, proto.JoinReply{Error: err.Error()})
		return
	}
	m.mu.Lock()
	acts := m.mem.Join(req.ID, req.Instance, m.cfg.Now())
	m.applyLocked(acts, req)
	m.mu.Unlock()
	a := acts[0]
	if a.Kind != membership.Admit {
		m.reply(msg, proto.JoinReply{Error: a.Reason, InUse: a.InUse, Heartbeat: m.cfg.Heartbeat, DeadAfter: m.cfg.DeadAfter})
		return
	}
	m.reply(msg, proto.JoinReply{OK: true, Heartbeat: m.cfg.Heartbeat, Instance: m.instance, DeadAfter: m.cfg.DeadAfter,
		Epoch: a.Epoch, Incarnation: a.Incarnation})
}

func (m *Master) onHeartbeat(msg *nats.Msg) {
	var hb proto.Heartbeat
	if json.Unmarshal(msg.Data, &hb) != nil || hb.Join.ID != hb.ID || checkJoin(hb.Join) != nil {
		return
	}
	m.mu.Lock()
	// A beat of an unknown slave admits it: the master restarted, or the
	// slave rejoins as a fresh instance. Tasks that used its earlier
	// incarnation have failed already; its slots are all free.
	m.applyLocked(m.mem.Heartbeat(hb.ID, hb.Join.Instance, m.cfg.Now()), hb.Join)
	m.lingeringLocked(hb.ID, hb.Join.Instance, hb.Lingering)
	m.mu.Unlock()
}

// lingeringLocked notes how many slots slave id (instance) says workers
// of stopped or cancelled stages still take (a heartbeat's or a control
// answer's count); the scheduler hands out only the others.
func (m *Master) lingeringLocked(id, instance string, n int) {
	s := m.slaves[id]
	if s == nil || !s.alive || s.Instance != instance || s.lingering == max(0, n) {
		return
	}
	freed := n < s.lingering
	if n > s.lingering {
		m.log.Info().Str("slave", id).Int("lingering", n).Msg("workers of a stopped or cancelled stage still run on this slave; their slots are not handed out until they return")
	}
	s.lingering = max(0, n)
	if freed {
		m.scheduleLocked()
	}
}

func (m *Master) onLeave(msg *nats.Msg) {
	var l proto.Leave
	if err := json.Unmarshal(msg.Data, &l); err != nil {
		m.log.Warn().Err(err).Msg("malformed leave message; ignored")
		return
	}
	m.mu.Lock()
	fails := m.applyLocked(m.mem.Leave(l.ID, l.Instance), proto.JoinRequest{})
	m.mu.Unlock()
	// A slave that leaves mid-stage is lost to its tasks as a dead one is.
	for _, f := range fails {
		f.tr.slaveDead(f.slave, f.err, f.left)
	}
}

// tick runs the failure detector at now. The tasks of dead slaves fail
// outside the lock (their goroutines take it).
func (m *Master) tick(now time.Time) {
	m.mu.Lock()
	wall := time.Now()
	gap, timeout := wall.Sub(m.lastTick), m.mem.Timeout()
	stalled := !m.lastTick.IsZero() && gap >= timeout
	m.lastTick = wall
	var lost []*taskRun
	if stalled {
		// The master did not run (its process stopped, swapped out or
		// starved) as long as its slaves wait for a sign of life, which
		// the detector's tick sends: they may have stopped its tasks. Its
		// own silence is not theirs: every slave gets a full timeout to
		// beat again (their heartbeats of the stall may not be read yet);
		// and each running task asks its slaves whether they still run
		// it (reconcileStall): it fails, naming the stall, unless all
		// do (a host starved as a whole may have starved the slaves'
		// clocks too). Before, a slave whose heartbeat was read late was
		// declared dead and named as the cause, and one read in time left
		// its dropped stage waiting.
		if !m.deaf { // deaf, it gives them a full timeout once it hears
			m.mem.Deaf()
			m.mem.Hearing(now)
		}
		for _, tr := range m.tasks {
			if !tr.isEnded() && tr.started() {
				lost = append(lost, tr)
			}
		}
		m.log.Warn().Dur("stalled", gap.Round(time.Millisecond)).Dur("failure_timeout", timeout).Int("tasks", len(lost)).
			Msg("the master did not run for longer than failure_timeout: asking the slaves of its running tasks whether they stopped them")
	}
	defer func() {
		for _, tr := range lost {
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.reconcileStall(tr, gap, timeout)
			}()
		}
	}()
	// Cut off from the bus the master hears no heartbeat: the silence is
	// its own, not the slaves'. Once it hears again every slave gets a
	// full timeout to beat (a slave dead meanwhile is declared then).
	if !m.nc.IsConnected() {
		if !m.deaf {
			m.deaf = true
			m.mem.Deaf()
			m.log.Warn().Msg("the master lost the bus: no slave is declared dead while it hears nobody")
		}
		m.mu.Unlock()
		return
	}
	if m.deaf {
		m.deaf = false
		m.mem.Hearing(now)
		m.log.Info().Dur("timeout", m.mem.Timeout()).Msg("the master hears the bus again: every slave has a full failure timeout to beat")
	}
	acts := m.mem.Tick(now)
	fails := m.applyLocked(acts, proto.JoinRequest{})
	if len(acts) == 0 && now.Sub(m.viewSent) >= viewEvery {
		m.publishViewLocked(now)
	}
	waits := m.unfitQueuedLocked()
	m.mu.Unlock()
	for _, f := range fails {
		f.tr.slaveDead(f.slave, f.err, f.left)
	}
	for _, w := range waits {
		w.tr.waitsFor(w.why)
	}
}

// queueNotice is a queued stage that no longer fits the cluster even
// with every slot free (why), or fits again (why "").
type queueNotice struct {
	tr  *taskRun
	why string
}

// unfitQueuedLocked finds the queued stages that the cluster, shrunk by
// slaves that died or left, can no longer run even with every slot free,
// and those that fit again. They wait (a slave may come back) but say so:
// before, such a stage waited without a word and `flexps submit` with it.
func (m *Master) unfitQueuedLocked() []queueNotice {
	if len(m.queue) == 0 {
		return nil // every tick: no slave list to build
	}
	var out []queueNotice
	cluster := m.schedSlavesLocked()
	for i := range m.queue {
		w := &m.queue[i]
		tr := m.tasks[w.req.Task]
		switch fits := scheduler.Fits(w.req, cluster); {
		case !fits && !w.unfit:
			w.unfit = true
			out = append(out, queueNotice{tr, waitNotice(w.req, cluster)})
		case fits && w.unfit:
			w.unfit = false
			out = append(out, queueNotice{tr, ""})
		}
	}
	return out
}

type taskFailure struct {
	tr    *taskRun
	slave string
	err   error
	left  bool // the slave left (shut down cleanly), not died
}

// applyLocked carries out the machine's actions; req is the join or
// heartbeat that caused them (for an admission). It returns the tasks to
// fail, because a slave they used died or left.
func (m *Master) applyLocked(acts []membership.Action, req proto.JoinRequest) []taskFailure {
	var fails []taskFailure
	changed := false
	for _, a := range acts {
		log := m.log.With().Str("slave", a.Slave).Str("instance", a.Instance).Uint64("epoch", a.Epoch).Logger()
		switch a.Kind {
		case membership.Admit:
			if s := m.slaves[a.Slave]; s != nil && s.alive && s.Instance == a.Instance {
				continue // a retried join
			}
			changed = true
			m.slaves[a.Slave] = &slaveInfo{JoinRequest: req, free: req.Slots, alive: true, incarnation: a.Incarnation}
			ev := log.Info().Str("host", req.Host).Int("slots", req.Slots).Uint64("incarnation", a.Incarnation)
			if a.Rejoined {
				ev.Msg("slave rejoined as a fresh instance; its earlier incarnation's work is lost")
				m.dropStaleLocked(a.Slave)
			} else {
				ev.Msg("slave joined")
			}
		case membership.DeclareDead, membership.Left:
			changed = true
			s := m.slaves[a.Slave]
			s.alive, s.left = false, a.Kind == membership.Left
			s.lastSeen = m.cfg.Now().Add(-a.Silent)
			var err error
			if a.Kind == membership.DeclareDead {
				err = fmt.Errorf("slave %s (host %s, pid %d) died: no heartbeat for %v", a.Slave, s.Host, s.PID, a.Silent.Round(time.Millisecond))
				log.Error().Uint64("incarnation", a.Incarnation).Dur("silent", a.Silent).Msg(err.Error() + "; it is fenced")
			} else {
				err = fmt.Errorf("slave %s (host %s, pid %d) left the cluster", a.Slave, s.Host, s.PID)
				log.Info().Msg("slave left")
			}
			for _, tr := range m.tasks {
				tr.hostDied(a.Slave)
				tr.slotsLost(a.Slave)
				if tr.uses(a.Slave) {
					fails = append(fails, taskFailure{tr, a.Slave, err, a.Kind == membership.Left})
				}
			}
		case membership.Refuse:
			if a.First {
				log.Warn().Msg("refused: " + a.Reason)
				// Tell the fenced slave now, not at the next periodic view.
				m.publishViewLocked(m.cfg.Now())
			}
		case membership.SuspectSelf:
			m.log.Warn().Dur("silent", a.Silent.Round(time.Millisecond)).Int("slaves", len(m.mem.View().Members)).Dur("failure_timeout", m.mem.Timeout()).
				Msg("every slave went silent at once: more likely this master's own delay (a starved host, a slow bus) than all of them dead; each gets one more failure timeout")
		}
	}
	if changed {
		m.scheduleLocked()
		m.publishViewLocked(m.cfg.Now())
	}
	return fails
}

// dropStaleLocked tells a slave that came back to drop what it may still
// run for tasks that ended without it.
func (m *Master) dropStaleLocked(slave string) {
	var stale []string
	for id, tr := range m.tasks {
		if tr.touched(slave) && tr.isEnded() {
			stale = append(stale, id)
		}
	}
	if len(stale) == 0 {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for _, id := range stale {
			if err := m.ctl(m.ctx, slave, proto.SlaveCtl{Op: proto.OpDropTask, Task: id, Reason: "task ended while the slave was unreachable"}); err != nil {
				m.log.Debug().Err(err).Str("slave", slave).Str("task", id).Msg("stale task not dropped")
			}
		}
	}()
}

func (m *Master) publishViewLocked(now time.Time) {
	m.viewSent = now
	data, err := json.Marshal(proto.Membership{Master: m.instance, View: m.mem.View()})
	if err != nil {
		m.log.Error().Err(err).Msg("cannot encode the membership view")
		return
	}
	if err := m.nc.Publish(m.subj.Membership(), data); err != nil {
		m.log.Warn().Err(err).Msg("cannot publish the membership view")
	}
}

// fenced refuses a message (worker event, control answer) of a slave
// incarnation that is not the live one; the first refusal of each is
// logged.
func (m *Master) fenced(slave, instance string) error {
	m.mu.Lock()
	acts := m.mem.Check(slave, instance)
	m.applyLocked(acts, proto.JoinRequest{})
	m.mu.Unlock()
	if len(acts) > 0 {
		return fmt.Errorf("%s", acts[0].Reason)
	}
	return nil
}

// Epoch is the current membership epoch.
func (m *Master) Epoch() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mem.Epoch()
}

// liveInstance is the instance of slave's live incarnation ("" if none).
func (m *Master) liveInstance(slave string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mem, ok := m.mem.Live(slave); ok {
		return mem.Instance
	}
	return ""
}

// reconcileStall asks every live slave task tr used whether it still runs
// the task after the master did not run for gap, longer than timeout
// (proto.OpHoldsTask, itself a sign of life): the task fails, naming the
// stall and the answers, unless every one does.
func (m *Master) reconcileStall(tr *taskRun, gap, timeout time.Duration) {
	var slaves []string
	for _, s := range m.aliveSlaves() {
		if tr.touched(s) {
			slaves = append(slaves, s)
		}
	}
	// A slave that died meanwhile does not answer: its death reaches the
	// task through the membership, which says whether it survives it.
	err := eachSlave(slaves, func(s string) error {
		return m.ctlOrDead(tr.ctx, s, proto.SlaveCtl{Op: proto.OpHoldsTask, Task: tr.spec.ID})
	})
	if tr.ctx.Err() != nil {
		return // ended meanwhile
	}
	if err != nil {
		m.log.Error().Err(err).Str("task", tr.spec.ID).Msg("the master's stall stopped the task on a slave: it fails")
		tr.cancelRun(fmt.Errorf("%w (%v)", tr.stallErr(gap, timeout), err))
		return
	}
	m.log.Warn().Str("task", tr.spec.ID).Dur("stalled", gap.Round(time.Millisecond)).Strs("slaves", slaves).
		Msg("the master did not run for longer than failure_timeout, but every slave of the task still runs it: it goes on")
}
