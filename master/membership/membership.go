// Package membership is the master's failure detector and the cluster's
// membership epoch, written as a pure state machine in the style of etcd's
// raft: the master's loop feeds it Join, Heartbeat, Leave and Tick with
// the time passed in, and carries out the Actions it returns (admit a
// slave, declare one dead, refuse a message). There are no goroutines,
// clocks or I/O here; the Machine is not safe for concurrent use.
//
// A slave process is an incarnation: its id (the name the operator gave
// it) plus an instance string it draws at start (and again whenever it
// must rejoin). Every change of the live set (an admission, a death, a
// clean leave) increments the membership epoch, and an admitted
// incarnation is numbered by the epoch that admitted it, so incarnation
// numbers are unique and grow with time. A member silent for longer than
// the failure timeout (now - last seen > timeout; exactly the timeout is
// still alive) is declared dead once. Its incarnation is then retired for
// good: its heartbeats, worker events and control answers are refused (the
// first refusal says so, later ones are quiet), and it must come back as a
// fresh incarnation with a new instance, because its work was given up
// and its writes must not reach the live shards. The View (epoch and live
// incarnations) is what the master broadcasts; View.Fenced is the cheap
// check a shard server applies to the incarnation a request carries.
package membership

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Defaults of the failure detector: slaves beat every 300ms and a slave
// that misses three beats is declared dead.
const (
	DefaultHeartbeat = 300 * time.Millisecond
	DefaultTimeout   = 3 * DefaultHeartbeat
)

// ActionKind names what the master must do.
type ActionKind int

// Kinds of Action.
const (
	Admit       ActionKind = iota + 1 // Slave's Instance is a live member as of Epoch, numbered Incarnation
	DeclareDead                       // Slave's Instance is dead as of Epoch (silent for Silent)
	Left                              // Slave's Instance left cleanly as of Epoch
	Refuse                            // the message from Slave's Instance is refused (Reason)
	// SuspectSelf: every live member (two or more) went silent at once,
	// for Silent at most: more likely the detector's own delay (a starved
	// host, a lagging bus) than that many deaths in one tick, so each got
	// one more timeout (see Tick).
	SuspectSelf
)

func (k ActionKind) String() string {
	switch k {
	case Admit:
		return "admit"
	case DeclareDead:
		return "declare_dead"
	case Left:
		return "left"
	case Refuse:
		return "refuse"
	case SuspectSelf:
		return "suspect_self"
	}
	return fmt.Sprintf("ActionKind(%d)", int(k))
}

// Action is one output of the Machine.
type Action struct {
	Kind     ActionKind
	Slave    string
	Instance string
	// Epoch is the membership epoch after the change (the current one
	// for Refuse and for a repeated Admit).
	Epoch uint64
	// Incarnation numbers the admitted (or dead, or left) incarnation: the
	// epoch that admitted it.
	Incarnation uint64
	// Rejoined (Admit): the id had an earlier incarnation, whose tasks and
	// shards are lost.
	Rejoined bool
	// Silent (DeclareDead): how long the member was not heard from.
	Silent time.Duration
	// Reason (Refuse) says why, naming the slave and its instance.
	Reason string
	// First (Refuse): the first refusal of this incarnation; the master
	// logs that one and stays quiet about the rest.
	First bool
	// InUse (Refuse): another live instance holds the id. A slave
	// restarted before its old process was declared dead waits for that
	// verdict instead of giving up; a live duplicate is still refused
	// once the timeout has passed.
	InUse bool
}

// Member is a live incarnation.
type Member struct {
	ID          string `json:"id"`
	Instance    string `json:"instance"`
	Incarnation uint64 `json:"incarnation"`
}

// View is the live membership as of an epoch, sorted by id.
type View struct {
	Epoch   uint64   `json:"epoch"`
	Members []Member `json:"members"`
}

// Has reports whether incarnation inc is live in v.
func (v View) Has(inc uint64) bool {
	for _, m := range v.Members {
		if m.Incarnation == inc {
			return true
		}
	}
	return false
}

// Fenced reports whether a request carrying incarnation inc must be
// refused by a holder of v: inc was admitted at or before v's epoch (so v
// would list it if it were alive) and is not live. 0 is "no incarnation"
// (in-process callers) and is never fenced; an incarnation newer than v is
// accepted, because the holder has not learned of its admission yet.
func (v View) Fenced(inc uint64) bool {
	return inc != 0 && inc <= v.Epoch && !v.Has(inc)
}

// Machine is the failure detector and membership state. Create it with New.
type Machine struct {
	timeout time.Duration
	epoch   uint64
	live    map[string]*member       // by slave id
	retired map[incarnation]*retired // dead or left incarnations
	known   map[string]bool          // ids that ever had an incarnation
	deaf    bool                     // the detector's own link is down (Deaf)
	// suspect: Tick gave every member one more timeout (SuspectSelf)
	// and no member was heard from since.
	suspect bool
}

type member struct {
	instance string
	inc      uint64
	last     time.Time
	// refused is the last other instance refused the id (its first
	// refusal is logged, not each repeat while it waits).
	refused string
}

// incarnation is a slave id and one instance of it.
type incarnation struct{ slave, instance string }

type retired struct {
	slave   string
	inc     uint64
	dead    bool // declared dead (else left)
	refused bool // a refusal was reported already
}

// New returns a Machine that declares a member dead after timeout without
// a heartbeat (DefaultTimeout if timeout is not positive).
func New(timeout time.Duration) *Machine {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Machine{timeout: timeout, live: map[string]*member{}, retired: map[incarnation]*retired{}, known: map[string]bool{}}
}

// Timeout is the silence after which a member is declared dead.
func (m *Machine) Timeout() time.Duration { return m.timeout }

// Epoch is the current membership epoch (0 before the first admission).
func (m *Machine) Epoch() uint64 { return m.epoch }

// Join asks to admit slave's instance at now. It returns one action: Admit
// (a new incarnation, or the same live one again when a join is retried)
// or Refuse (the instance was retired, or another live instance holds the
// id: two processes started with the same id, or a restart before the old
// process was declared dead).
func (m *Machine) Join(slave, instance string, now time.Time) []Action {
	if r := m.retired[incarnation{slave, instance}]; r != nil {
		return []Action{m.refuseRetired(instance, r)}
	}
	if cur := m.live[slave]; cur != nil {
		if cur.instance == instance {
			if now.After(cur.last) {
				cur.last = now
			}
			m.suspect = false
			return []Action{{Kind: Admit, Slave: slave, Instance: instance, Epoch: m.epoch, Incarnation: cur.inc}}
		}
		first := cur.refused != instance
		cur.refused = instance
		return []Action{{Kind: Refuse, Slave: slave, Instance: instance, Epoch: m.epoch, First: first, InUse: true,
			Reason: fmt.Sprintf("slave %s: id in use by live instance %s (incarnation %d); a restarted slave may rejoin once the old one is declared dead", slave, cur.instance, cur.inc)}}
	}
	m.epoch++
	m.suspect = false
	rejoined := m.known[slave]
	m.known[slave] = true
	m.live[slave] = &member{instance: instance, inc: m.epoch, last: now}
	return []Action{{Kind: Admit, Slave: slave, Instance: instance, Epoch: m.epoch, Incarnation: m.epoch, Rejoined: rejoined}}
}

// Heartbeat records a beat of slave's instance at now. The live incarnation
// gets no action (a beat older than the last one does not move last seen
// back). A beat of a retired instance, or of an instance other than the
// live one, is refused. A beat from an id with no live incarnation and an
// instance never seen is an admission: heartbeats repeat the join, so a
// master that restarted takes its slaves back without a new join.
func (m *Machine) Heartbeat(slave, instance string, now time.Time) []Action {
	if cur := m.live[slave]; cur != nil && cur.instance == instance {
		if now.After(cur.last) {
			cur.last = now
		}
		m.suspect = false
		return nil
	}
	return m.Join(slave, instance, now)
}

// Check is for any other message from slave's instance (a worker event, a
// control answer): nil if it is the live incarnation, else one Refuse.
func (m *Machine) Check(slave, instance string) []Action {
	if cur := m.live[slave]; cur != nil && cur.instance == instance {
		return nil
	}
	if r := m.retired[incarnation{slave, instance}]; r != nil {
		return []Action{m.refuseRetired(instance, r)}
	}
	return []Action{{Kind: Refuse, Slave: slave, Instance: instance, Epoch: m.epoch, First: true,
		Reason: fmt.Sprintf("slave %s instance %s is not a member", slave, instance)}}
}

// Leave removes slave's live instance, which shut down cleanly: it is not
// reported dead. Anything else is refused.
func (m *Machine) Leave(slave, instance string) []Action {
	cur := m.live[slave]
	if cur == nil || cur.instance != instance {
		return m.Check(slave, instance)
	}
	m.epoch++
	delete(m.live, slave)
	m.retired[incarnation{slave, instance}] = &retired{slave: slave, inc: cur.inc}
	return []Action{{Kind: Left, Slave: slave, Instance: instance, Epoch: m.epoch, Incarnation: cur.inc}}
}

// Tick declares dead every member silent for longer than the timeout at
// now, in id order, each death its own epoch; nobody while Deaf. When
// every member, two or more, is silent at once, Tick suspects the
// detector itself the first time: it gives each one more timeout and
// reports SuspectSelf; they are declared dead at the next such tick
// unless one of them is heard from meanwhile. A master whose intake of
// heartbeats lagged (its host starved, its bus slow) declared every slave
// dead in one tick, each silent just past the timeout, before it noticed
// its own stall; a real death of them all is declared one timeout later.
func (m *Machine) Tick(now time.Time) []Action {
	if m.deaf {
		return nil
	}
	silent, longest := 0, time.Duration(0)
	for _, cur := range m.live {
		if d := now.Sub(cur.last); d > m.timeout {
			silent, longest = silent+1, max(longest, d)
		}
	}
	if silent >= 2 && silent == len(m.live) && !m.suspect {
		m.suspect = true
		for _, cur := range m.live {
			cur.last = now
		}
		return []Action{{Kind: SuspectSelf, Epoch: m.epoch, Silent: longest}}
	}
	var out []Action
	for _, id := range slices.Sorted(maps.Keys(m.live)) {
		cur := m.live[id]
		silent := now.Sub(cur.last)
		if silent <= m.timeout {
			continue
		}
		m.epoch++
		delete(m.live, id)
		m.retired[incarnation{id, cur.instance}] = &retired{slave: id, inc: cur.inc, dead: true}
		out = append(out, Action{Kind: DeclareDead, Slave: id, Instance: cur.instance, Epoch: m.epoch, Incarnation: cur.inc, Silent: silent})
	}
	return out
}

// Deaf tells the Machine that the detector itself can hear nobody (the
// master lost its connection to the bus): until Hearing, Tick declares no
// member dead, since their silence says nothing about them.
func (m *Machine) Deaf() { m.deaf = true }

// Hearing tells the Machine that the detector's link is back at now: every
// live member counts as heard from at now, so each gets a full timeout to
// beat again (it may reconnect a moment after the master) before its
// silence counts. A no-op unless Deaf was called.
func (m *Machine) Hearing(now time.Time) {
	if !m.deaf {
		return
	}
	m.deaf = false
	for _, cur := range m.live {
		if now.After(cur.last) {
			cur.last = now
		}
	}
}

func (m *Machine) refuseRetired(instance string, r *retired) Action {
	first := !r.refused
	r.refused = true
	why := "was declared dead"
	if !r.dead {
		why = "left the cluster"
	}
	return Action{Kind: Refuse, Slave: r.slave, Instance: instance, Epoch: m.epoch, Incarnation: r.inc, First: first,
		Reason: fmt.Sprintf("slave %s instance %s (incarnation %d) %s and is fenced: it must rejoin as a fresh instance", r.slave, instance, r.inc, why)}
}

// View is the live membership now.
func (m *Machine) View() View {
	v := View{Epoch: m.epoch, Members: make([]Member, 0, len(m.live))}
	for _, id := range slices.Sorted(maps.Keys(m.live)) {
		cur := m.live[id]
		v.Members = append(v.Members, Member{ID: id, Instance: cur.instance, Incarnation: cur.inc})
	}
	return v
}

// Live returns slave's live incarnation; ok is false if it has none.
func (m *Machine) Live(slave string) (Member, bool) {
	cur := m.live[slave]
	if cur == nil {
		return Member{}, false
	}
	return Member{ID: slave, Instance: cur.instance, Incarnation: cur.inc}, true
}

// LastSeen returns when slave's live incarnation was last heard from (its
// join or latest beat); ok is false if it has none.
func (m *Machine) LastSeen(slave string) (time.Time, bool) {
	cur := m.live[slave]
	if cur == nil {
		return time.Time{}, false
	}
	return cur.last, true
}
