package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Slave is one slave's worker slots as the scheduler sees them.
type Slave struct {
	ID    string
	Free  int // worker slots not in use now
	Total int // worker slots the slave has
	Alive bool
}

// Request is one stage of one task waiting for worker slots.
type Request struct {
	Task      string
	Stage     int
	Workers   int       // workers wanted
	MaxSlaves int       // spread over at most this many slaves (0 = any)
	OneSlave  bool      // all workers on one slave (local/hogwild/single worker kinds)
	Pinned    []string  // if non-empty, only these slaves
	Priority  int       // 0..100, higher first (prioritized policy)
	Submitted time.Time // when the task was submitted
	Waiting   time.Time // when this stage started waiting
}

// Assignment is how many of a stage's workers run on one slave.
type Assignment struct {
	Slave   string
	Workers int
}

// Decision starts one waiting request on the given slaves.
type Decision struct {
	Task   string
	Stage  int
	Assign []Assignment
}

// State is what a policy decides on.
type State struct {
	Now     time.Time
	Queue   []Request // in submission order
	Slaves  []Slave
	Running []string // tasks holding slots now
}

// Policy decides which waiting requests start now and where.
type Policy interface {
	Name() string
	// Schedule returns the requests to start now, in the order decided. It
	// does not modify s.
	Schedule(s State) []Decision
}

// Options tune the policies; the zero value means the defaults.
type Options struct {
	// AgingPerSecond is the priority points a waiting request gains per
	// second of waiting (prioritized). 0 means DefaultAgingPerSecond.
	AgingPerSecond float64
	// ReserveAfter is how long a request that does not fit may wait before
	// the prioritized policy stops starting requests ordered after it, so
	// that the slots it needs drain. 0 means DefaultReserveAfter.
	ReserveAfter time.Duration
}

// Defaults for Options.
const (
	DefaultAgingPerSecond = 1.0
	DefaultReserveAfter   = 30 * time.Second
)

// Policy names New accepts.
const (
	Sequential  = "sequential"
	Greedy      = "greedy"
	Prioritized = "prioritized"
)

// Names lists the policy names New accepts.
func Names() []string { return []string{Sequential, Greedy, Prioritized} }

// New returns the named policy.
func New(name string, opt Options) (Policy, error) {
	if opt.AgingPerSecond < 0 {
		return nil, fmt.Errorf("scheduler: aging per second %v is negative", opt.AgingPerSecond)
	}
	if opt.ReserveAfter < 0 {
		return nil, fmt.Errorf("scheduler: reserve after %v is negative", opt.ReserveAfter)
	}
	if opt.AgingPerSecond == 0 {
		opt.AgingPerSecond = DefaultAgingPerSecond
	}
	if opt.ReserveAfter == 0 {
		opt.ReserveAfter = DefaultReserveAfter
	}
	switch name {
	case Sequential:
		return sequential{}, nil
	case Greedy:
		return greedy{}, nil
	case Prioritized:
		return prioritized{opt: opt}, nil
	}
	return nil, fmt.Errorf("scheduler: unknown policy %q (valid: %s)", name, strings.Join(Names(), ", "))
}

// pool is a policy's private copy of the slaves; start commits a placement.
type pool struct {
	all    []Slave // as given, for Fits
	slaves []Slave // Free shrinks as decisions are made
}

func newPool(slaves []Slave) *pool {
	return &pool{all: slaves, slaves: slices.Clone(slaves)}
}

// start places r on the remaining free slots and commits it; ok is false if
// it does not fit now.
func (p *pool) start(r Request) (Decision, bool) {
	as, ok := Place(r, p.slaves)
	if !ok {
		return Decision{}, false
	}
	for _, a := range as {
		for i := range p.slaves {
			if p.slaves[i].ID == a.Slave {
				p.slaves[i].Free -= a.Workers
				break
			}
		}
	}
	return Decision{Task: r.Task, Stage: r.Stage, Assign: as}, true
}

type sequential struct{}

func (sequential) Name() string { return Sequential }

func (sequential) Schedule(s State) []Decision {
	p := newPool(s.Slaves)
	for _, r := range s.Queue {
		if !Fits(r, s.Slaves) {
			continue // can never run; the master rejects it
		}
		for _, t := range s.Running {
			if t != r.Task {
				return nil
			}
		}
		if d, ok := p.start(r); ok {
			return []Decision{d}
		}
		return nil
	}
	return nil
}

type greedy struct{}

func (greedy) Name() string { return Greedy }

func (greedy) Schedule(s State) []Decision {
	p := newPool(s.Slaves)
	var out []Decision
	for _, r := range s.Queue {
		if d, ok := p.start(r); ok {
			out = append(out, d)
		}
	}
	return out
}

type prioritized struct{ opt Options }

func (prioritized) Name() string { return Prioritized }

// Effective returns r's effective priority at now under the prioritized
// policy: Priority clamped to 0..100 plus aging for the time waited.
func Effective(r Request, now time.Time, agingPerSecond float64) float64 {
	pr := min(max(r.Priority, 0), 100)
	waited := max(now.Sub(r.Waiting), 0)
	return float64(pr) + agingPerSecond*waited.Seconds()
}

func (q prioritized) Schedule(s State) []Decision {
	order := q.ranked(s)
	p := newPool(s.Slaves)
	var out []Decision
	for _, i := range order {
		r := s.Queue[i]
		if d, ok := p.start(r); ok {
			out = append(out, d)
			continue
		}
		if s.Now.Sub(r.Waiting) >= q.opt.ReserveAfter && Fits(r, s.Slaves) {
			break // reserve: let the slots drain for the starved request
		}
	}
	return out
}

// ranked returns the queue indices by descending effective priority, ties in
// submission (queue) order.
func (q prioritized) ranked(s State) []int {
	eff := make([]float64, len(s.Queue))
	order := make([]int, len(s.Queue))
	for i, r := range s.Queue {
		eff[i] = Effective(r, s.Now, q.opt.AgingPerSecond)
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case eff[a] > eff[b]:
			return -1
		case eff[a] < eff[b]:
			return 1
		}
		return 0
	})
	return order
}
