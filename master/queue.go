package master

import (
	"fmt"
	"slices"
	"sort"

	"github.com/flexps/flexps/scheduler"
)

// The slot queue: stages waiting for worker slots, handed to the
// scheduling policy (a pure function of queue and free slots) whenever
// slots or the queue change.

// requestLocked grants slots: it queues a stage and returns the channel
// on which the scheduler's placement arrives; a stage that does not fit
// the live cluster is an error.
func (m *Master) requestLocked(r scheduler.Request) (chan []scheduler.Assignment, error) {
	cluster := m.schedSlavesLocked()
	if !scheduler.Fits(r, cluster) {
		return nil, fitError(r, cluster)
	}
	w := waiting{req: r, grant: make(chan []scheduler.Assignment, 1)}
	m.queue = append(m.queue, w)
	m.scheduleLocked()
	return w.grant, nil
}

// requestOrWait is how a task's goroutine asks for slots: a stage the live
// cluster cannot run, but would with its dead slaves back (a slave it is
// pinned to died, or the cluster shrank below it), is queued all the same
// and waits for them, as a queued stage does when its slaves die
// (unfitQueuedLocked); why says so. Before, such a stage failed its task
// at once when pinned to a dead slave, while an unpinned stage that lost
// slots while queued waited. A stage that could not run even with every
// known slave back (a slave never seen, more workers than the cluster
// ever had) is still an error.
func (m *Master) requestOrWait(r scheduler.Request) (grant chan []scheduler.Assignment, why string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cluster := m.schedSlavesLocked()
	if scheduler.Fits(r, cluster) {
		grant, err = m.requestLocked(r)
		return grant, "", err
	}
	revived := slices.Clone(cluster)
	for i := range revived {
		revived[i].Alive = true
	}
	if !scheduler.Fits(r, revived) {
		return nil, "", fitError(r, cluster)
	}
	w := waiting{req: r, grant: make(chan []scheduler.Assignment, 1), unfit: true}
	m.queue = append(m.queue, w)
	m.scheduleLocked()
	return w.grant, waitNotice(r, cluster), nil
}

// waitNotice is what a stage waiting for dead slaves to come back says.
func waitNotice(r scheduler.Request, cluster []scheduler.Slave) string {
	return fmt.Sprintf("stage %d %v; it waits until enough slaves are back (flexps cancel %s stops it)", r.Stage, fitError(r, cluster), r.Task)
}

// busyNotice says why r, queued and able to run on cluster once enough
// slots are free, has not started: the slots it needs are in use, or the
// policy starts requests queued before it first. The caller names the
// tasks holding slots.
func busyNotice(r scheduler.Request, cluster []scheduler.Slave, policy string) string {
	free := 0
	for _, s := range cluster {
		if s.Alive && (len(r.Pinned) == 0 || slices.Contains(r.Pinned, s.ID)) {
			free += max(s.Free, 0)
		}
	}
	ask := fmt.Sprintf("%d %s", r.Workers, plural(r.Workers, "worker"))
	switch {
	case r.OneSlave:
		ask += " on one slave"
	case r.MaxSlaves > 0:
		ask += fmt.Sprintf(" on at most %d %s", r.MaxSlaves, plural(r.MaxSlaves, "slave"))
	}
	if len(r.Pinned) > 0 {
		ask += fmt.Sprintf(" of %v", r.Pinned)
	}
	if _, ok := scheduler.Place(r, cluster); ok {
		why := "starts other stages first"
		switch policy {
		case scheduler.Sequential:
			why = "runs one task at a time"
		case scheduler.Prioritized:
			why = "starts stages of higher priority (with aging) first, and keeps slots free for one that waited long"
		}
		return fmt.Sprintf("stage %d asks for %s and they are free, but the %s policy %s", r.Stage, ask, policy, why)
	}
	return fmt.Sprintf("stage %d asks for %s; %d %s free now", r.Stage, ask, free, plural(free, "slot"))
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// fitError says why r cannot run on cluster even when every slot is
// free: too few slots, a one-slave stage larger than every slave, or
// slaves it is pinned to that are unknown or dead; and what to do. It
// starts at the verb ("asks for ..."): the caller names the stage (a
// task's error "stage 0 (sgd): asks for ...", a wait notice "stage 0 asks
// for ..."); it named the stage itself, and the task's error read "stage
// 0 (sgd): stage 0 asks for ...".
func fitError(r scheduler.Request, cluster []scheduler.Slave) error {
	total, live, largest := 0, 0, 0
	byID := map[string]scheduler.Slave{}
	for _, s := range cluster {
		byID[s.ID] = s
		if s.Alive {
			total += s.Total
			live++
			largest = max(largest, s.Total)
		}
	}
	// Enough slots, but not on max_slaves slaves: say so (before, the
	// message below counted every slot of the cluster and asked for more
	// slaves, which could not help).
	if r.MaxSlaves > 0 && !r.OneSlave {
		var totals []int
		for _, s := range cluster {
			if s.Alive && (len(r.Pinned) == 0 || slices.Contains(r.Pinned, s.ID)) {
				totals = append(totals, s.Total)
			}
		}
		slices.SortFunc(totals, func(a, b int) int { return b - a })
		if all := sumInts(totals); all >= r.Workers && len(totals) > r.MaxSlaves {
			slaves := "slaves"
			if r.MaxSlaves == 1 {
				slaves = "slave"
			}
			return fmt.Errorf("asks for %d workers on at most %d %s (max_slaves) but the %d largest of its live slaves have %d worker slots: lower workers or raise max_slaves",
				r.Workers, r.MaxSlaves, slaves, r.MaxSlaves, sumInts(totals[:r.MaxSlaves]))
		}
	}
	if len(r.Pinned) > 0 {
		var missing, dead []string
		pinned := 0
		for _, id := range r.Pinned {
			switch s, ok := byID[id]; {
			case !ok:
				missing = append(missing, id)
			case !s.Alive:
				dead = append(dead, id)
			default:
				pinned += s.Total
			}
		}
		where := fmt.Sprintf("its slaves %v have %d worker slots", r.Pinned, pinned)
		if len(missing) > 0 {
			where += fmt.Sprintf("; no slave is called %v (the cluster's: %v)", missing, slaveIDs(cluster))
		}
		if len(dead) > 0 {
			where += fmt.Sprintf("; %v not alive", dead)
		}
		return fmt.Errorf("asks for %d workers but %s: lower workers or name live slaves", r.Workers, where)
	}
	if r.OneSlave {
		return fmt.Errorf("asks for %d workers on one slave (its worker kind keeps the model in one slave's memory) but the largest live slave has %d worker slots: lower workers or start a slave with more slots (flexps run: --slots)", r.Workers, largest)
	}
	slaves := "live slaves"
	if live == 1 {
		slaves = "live slave"
	}
	return fmt.Errorf("asks for %d workers but the cluster has %d worker slots on %d %s: lower workers or start more slaves (flexps run: --slaves, --slots)", r.Workers, total, live, slaves)
}

func sumInts(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}

func slaveIDs(cluster []scheduler.Slave) []string {
	ids := make([]string, 0, len(cluster))
	for _, s := range cluster {
		ids = append(ids, s.ID)
	}
	return ids
}

// withdraw removes a stage's request if it is still queued.
func (m *Master) withdraw(task string, stage int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, w := range m.queue {
		if w.req.Task == task && w.req.Stage == stage {
			m.queue = append(m.queue[:i], m.queue[i+1:]...)
			return
		}
	}
}

// release returns slots and lets the scheduler use them.
func (m *Master) release(assign []scheduler.Assignment) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseLocked(assign)
}

func (m *Master) releaseLocked(assign []scheduler.Assignment) {
	for _, a := range assign {
		if s := m.slaves[a.Slave]; s != nil {
			s.free += a.Workers
			if s.free > s.Slots {
				s.free = s.Slots
			}
		}
	}
	m.scheduleLocked()
}

func (m *Master) schedSlavesLocked() []scheduler.Slave {
	out := make([]scheduler.Slave, 0, len(m.slaves))
	for id, s := range m.slaves {
		out = append(out, scheduler.Slave{ID: id, Free: s.freeNow(), Total: s.Slots, Alive: s.alive})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (m *Master) scheduleLocked() {
	if len(m.queue) == 0 {
		return
	}
	// Policies see the queue in submission order (then stage order), not
	// in the order the tasks' goroutines happened to ask.
	sort.SliceStable(m.queue, func(i, j int) bool {
		a, b := m.queue[i].req, m.queue[j].req
		if sa, sb := m.tasks[a.Task].seq, m.tasks[b.Task].seq; sa != sb {
			return sa < sb
		}
		return a.Stage < b.Stage
	})
	st := scheduler.State{Now: m.cfg.Now(), Slaves: m.schedSlavesLocked()}
	for _, w := range m.queue {
		st.Queue = append(st.Queue, w.req)
	}
	// A task is running from its first grant to its end, including the
	// moments between its stages and while its model is written.
	for _, id := range m.order {
		if tr := m.tasks[id]; tr.active.Load() && !tr.isEnded() {
			st.Running = append(st.Running, id)
		}
	}
	for _, d := range m.policy.Schedule(st) {
		for i, w := range m.queue {
			if w.req.Task != d.Task || w.req.Stage != d.Stage {
				continue
			}
			for _, a := range d.Assign {
				m.slaves[a.Slave].free -= a.Workers
			}
			m.queue = append(m.queue[:i], m.queue[i+1:]...)
			m.tasks[d.Task].active.Store(true)
			w.grant <- d.Assign
			break
		}
	}
}

// slotsOf is a live slave's total worker slots (0 if dead or unknown).
func (m *Master) slotsOf(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.slaves[id]; s != nil && s.alive {
		return s.Slots
	}
	return 0
}
