// Package membership is the master's failure detector: a state machine over
// heartbeats with the time passed in. A slave Joins, then Beats; Tick
// declares dead every member not heard from for longer than the timeout
// (now - last seen > timeout; exactly the timeout is still alive). A dead
// member's beats are refused until it Joins again, because the master has
// already recovered its work elsewhere and it must come back as a fresh
// member. Leave removes a member that shuts down cleanly, which is never
// reported dead. The Detector is not safe for concurrent use; the master's
// loop owns it and calls Tick on its own timer.
package membership

import (
	"slices"
	"time"
)

// DefaultTimeout is used when NewDetector gets a timeout that is not positive.
const DefaultTimeout = 10 * time.Second

// Detector tracks members by id. Create it with NewDetector.
type Detector struct {
	timeout time.Duration
	members map[string]*member
}

type member struct {
	last time.Time
	dead bool // declared dead by Tick
}

// NewDetector returns a Detector that declares a member dead after timeout
// without a heartbeat.
func NewDetector(timeout time.Duration) *Detector {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Detector{timeout: timeout, members: map[string]*member{}}
}

// Timeout is the silence after which a member is declared dead.
func (d *Detector) Timeout() time.Duration { return d.timeout }

// Join adds id as alive, seen at now. rejoined is true if id was already
// known, alive or declared dead (and not Left): a restarted slave whose old
// state the master must treat as lost.
func (d *Detector) Join(id string, now time.Time) (rejoined bool) {
	_, rejoined = d.members[id]
	d.members[id] = &member{last: now}
	return rejoined
}

// Beat records a heartbeat from id at now. It returns false if id is unknown
// or already declared dead: such a member must Join again. A beat older than
// the last one seen does not move last seen back.
func (d *Detector) Beat(id string, now time.Time) bool {
	m := d.members[id]
	if m == nil || m.dead {
		return false
	}
	if now.After(m.last) {
		m.last = now
	}
	return true
}

// Leave forgets id; it is not reported dead.
func (d *Detector) Leave(id string) { delete(d.members, id) }

// Tick declares dead every alive member silent for longer than the timeout
// at now and returns them, sorted. Each death is reported once.
func (d *Detector) Tick(now time.Time) (dead []string) {
	for id, m := range d.members {
		if !m.dead && now.Sub(m.last) > d.timeout {
			m.dead = true
			dead = append(dead, id)
		}
	}
	slices.Sort(dead)
	return dead
}

// Alive returns the members not declared dead, sorted.
func (d *Detector) Alive() []string {
	var out []string
	for id, m := range d.members {
		if !m.dead {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Dead returns the members declared dead that have not re-joined or left,
// sorted.
func (d *Detector) Dead() []string {
	var out []string
	for id, m := range d.members {
		if m.dead {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// LastSeen returns when id was last heard from (its Join or latest Beat);
// ok is false if id is unknown. Dead members keep their last sighting.
func (d *Detector) LastSeen(id string) (time.Time, bool) {
	m := d.members[id]
	if m == nil {
		return time.Time{}, false
	}
	return m.last, true
}
