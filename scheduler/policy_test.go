package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func policy(t tb, name string, opt Options) Policy {
	t.Helper()
	p, err := New(name, opt)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func req(task string, workers, prio int, waited time.Duration) Request {
	return Request{Task: task, Workers: workers, Priority: prio, Submitted: t0.Add(-waited), Waiting: t0.Add(-waited)}
}

// started lists "task/stage" of the decisions, in order.
func started(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s/%d", d.Task, d.Stage))
	}
	return out
}

func TestSequential(t *testing.T) {
	p := policy(t, Sequential, Options{})
	for _, tc := range []struct {
		name    string
		queue   []Request
		running []string
		free    []int
		want    []string
	}{
		{"only the head starts", []Request{req("A", 5, 0, 0), req("B", 2, 0, 0)}, nil, []int{10}, []string{"A/0"}},
		{"nothing while another task runs", []Request{req("B", 2, 0, 0)}, []string{"A"}, []int{10}, nil},
		{"own next stage may start", []Request{{Task: "A", Stage: 1, Workers: 2}}, []string{"A"}, []int{10}, []string{"A/1"}},
		{"head waits for slots, no overtaking", []Request{req("A", 15, 0, 0), req("B", 2, 0, 0)}, nil, []int{10, 4}, nil},
		{"head that can never fit is skipped", []Request{req("A", 25, 0, 0), req("B", 2, 0, 0)}, nil, []int{10, 10}, []string{"B/0"}},
		{"empty queue", nil, nil, []int{10}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := p.Schedule(State{Now: t0, Queue: tc.queue, Slaves: slaves(tc.free...), Running: tc.running})
			eq(t, started(ds), tc.want, "started")
		})
	}
}

func TestGreedy(t *testing.T) {
	p := policy(t, Greedy, Options{})
	// B (5) is blocked after A (8) takes most of the 10 slots; C (2) overtakes it.
	ds := p.Schedule(State{Now: t0, Slaves: slaves(10), Queue: []Request{
		req("A", 8, 0, 0), req("B", 5, 0, 0), req("C", 2, 0, 0),
	}})
	eq(t, started(ds), []string{"A/0", "C/0"}, "started")
	eq(t, ds[0].Assign, []Assignment{{"a", 8}}, "A placement")
	eq(t, ds[1].Assign, []Assignment{{"a", 2}}, "C placement")

	// Parallelism beyond the free slots queues instead of failing.
	ds = p.Schedule(State{Now: t0, Slaves: slaves(6, 4), Queue: []Request{req("A", 15, 0, 0)}})
	eq(t, len(ds), 0, "decisions for a request larger than the free slots")

	// Running tasks do not block greedy.
	ds = p.Schedule(State{Now: t0, Slaves: slaves(6, 4), Queue: []Request{req("B", 10, 0, 0)}, Running: []string{"A"}})
	eq(t, ds, []Decision{{Task: "B", Assign: []Assignment{{"a", 6}, {"b", 4}}}}, "uses all free slots")
}

func TestPrioritizedOrder(t *testing.T) {
	p := policy(t, Prioritized, Options{})
	ds := p.Schedule(State{Now: t0, Slaves: slaves(10), Queue: []Request{
		req("A", 5, 10, 0), req("B", 5, 50, 0), req("C", 5, 50, 0),
	}})
	eq(t, started(ds), []string{"B/0", "C/0"}, "higher priority first, ties in submission order")

	// Aging: A (10) has waited 100s, so 110 beats B's fresh 50.
	ds = p.Schedule(State{Now: t0, Slaves: slaves(5), Queue: []Request{
		req("B", 5, 50, 0), req("A", 5, 10, 100*time.Second),
	}})
	eq(t, started(ds), []string{"A/0"}, "aged request first")

	// Faster aging moves A ahead sooner.
	q := policy(t, Prioritized, Options{AgingPerSecond: 10})
	ds = q.Schedule(State{Now: t0, Slaves: slaves(5), Queue: []Request{
		req("B", 5, 50, 0), req("A", 5, 10, 5*time.Second),
	}})
	eq(t, started(ds), []string{"A/0"}, "aged request first at 10/s")

	// Out-of-range priorities are clamped: 1000 counts as 100.
	ds = p.Schedule(State{Now: t0, Slaves: slaves(5), Queue: []Request{
		req("B", 5, 1000, 0), req("A", 5, 90, 11*time.Second),
	}})
	eq(t, started(ds), []string{"A/0"}, "priority clamped to 100")
}

func TestPrioritizedReservation(t *testing.T) {
	p := policy(t, Prioritized, Options{ReserveAfter: 30 * time.Second})
	for _, tc := range []struct {
		name   string
		waited time.Duration
		big    int
		want   []string
	}{
		{"before the threshold others backfill", 29 * time.Second, 15, []string{"B/0"}},
		{"starved head reserves the cluster", 30 * time.Second, 15, nil},
		{"a request that can never fit reserves nothing", time.Hour, 25, []string{"B/0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A is at the top (90 plus aging) but needs more than the 10 free slots.
			ds := p.Schedule(State{Now: t0, Slaves: slaves(6, 4), Queue: []Request{
				req("A", tc.big, 90, tc.waited), req("B", 2, 10, 0),
			}})
			eq(t, started(ds), tc.want, "started")
		})
	}
	// A starved request reserves only against requests ordered after it.
	ds := p.Schedule(State{Now: t0, Slaves: slaves(6, 4), Queue: []Request{
		req("A", 15, 0, time.Minute), req("H", 4, 100, 0), req("L", 2, 0, 0),
	}})
	eq(t, started(ds), []string{"H/0"}, "higher one starts, lower one held back")
}

// starvation runs a cluster of 2x10 slots for up to limit seconds: a
// low-priority task wanting all 20 slots is submitted at 1s, and every second
// a high-priority 5-worker task lasting 3s arrives. It returns when the low
// task started, or -1.
func starvation(t *testing.T, p Policy, limit int) time.Duration {
	cluster := []Slave{{ID: "s1", Free: 10, Total: 10, Alive: true}, {ID: "s2", Free: 10, Total: 10, Alive: true}}
	type run struct {
		end    time.Duration
		assign []Assignment
	}
	running := map[string]run{}
	var queue []Request
	for sec := 0; sec <= limit; sec++ {
		now := time.Duration(sec) * time.Second
		for task, r := range running {
			if r.end <= now {
				for _, a := range r.assign {
					for i := range cluster {
						if cluster[i].ID == a.Slave {
							cluster[i].Free += a.Workers
						}
					}
				}
				delete(running, task)
			}
		}
		if sec == 1 {
			queue = append(queue, Request{Task: "low", Workers: 20, Priority: 0, Submitted: t0.Add(now), Waiting: t0.Add(now)})
		}
		hi := fmt.Sprintf("high%03d", sec)
		queue = append(queue, Request{Task: hi, Workers: 5, Priority: 100, Submitted: t0.Add(now), Waiting: t0.Add(now)})
		var names []string
		for task := range running {
			names = append(names, task)
		}
		slices.Sort(names)
		ds := p.Schedule(State{Now: t0.Add(now), Queue: slices.Clone(queue), Slaves: slices.Clone(cluster), Running: names})
		for _, d := range ds {
			if d.Task == "low" {
				return now
			}
			for _, a := range d.Assign {
				for i := range cluster {
					if cluster[i].ID == a.Slave {
						cluster[i].Free -= a.Workers
						if cluster[i].Free < 0 {
							t.Fatalf("%s over-committed %s at %v", p.Name(), a.Slave, now)
						}
					}
				}
			}
			running[d.Task] = run{end: now + 3*time.Second, assign: d.Assign}
			queue = slices.DeleteFunc(queue, func(r Request) bool { return r.Task == d.Task })
		}
	}
	return -1
}

func TestPrioritizedNoStarvation(t *testing.T) {
	// Aging lifts the low task (0, submitted at 1s) to the fresh high tasks'
	// 100 after 100s; it has waited past ReserveAfter, so the scan reserves
	// for it and the 3s high stages drain: it must start by 101s + 3s + a tick.
	got := starvation(t, policy(t, Prioritized, Options{}), 300)
	if got < 0 || got > 105*time.Second {
		t.Fatalf("prioritized: low-priority task started at %v, want within 105s", got)
	}
	t.Logf("prioritized (aging 1/s) starts the starved task at %v", got)
	// Faster aging tops the high tasks after 10s; then ReserveAfter (30s) rules.
	got = starvation(t, policy(t, Prioritized, Options{AgingPerSecond: 10}), 300)
	if got < 0 || got > 35*time.Second {
		t.Fatalf("prioritized (aging 10/s): low-priority task started at %v, want within 35s", got)
	}
	t.Logf("prioritized (aging 10/s) starts the starved task at %v", got)
	// The workload does starve the big task without aging and reservation.
	if got := starvation(t, policy(t, Greedy, Options{}), 300); got >= 0 {
		t.Fatalf("greedy: low-priority task started at %v; the workload should starve it", got)
	}
}

// TestPoliciesNeverOverCommit checks every policy on random states: each
// decision starts a waiting request once, with exactly its workers, on
// alive permitted slaves, within their free slots, and the policy-specific
// rules hold.
func TestPoliciesNeverOverCommit(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(rt, "slaves")
		var ss []Slave
		for i := range n {
			total := rapid.IntRange(0, 8).Draw(rt, "total")
			ss = append(ss, Slave{
				ID: fmt.Sprintf("s%d", i), Total: total,
				Free:  rapid.IntRange(0, total).Draw(rt, "free"),
				Alive: rapid.IntRange(0, 4).Draw(rt, "alive") > 0,
			})
		}
		var queue []Request
		for i := range rapid.IntRange(0, 8).Draw(rt, "requests") {
			r := Request{
				Task:      fmt.Sprintf("t%d", i),
				Workers:   rapid.IntRange(1, 12).Draw(rt, "workers"),
				MaxSlaves: rapid.IntRange(0, 3).Draw(rt, "maxSlaves"),
				OneSlave:  rapid.IntRange(0, 3).Draw(rt, "oneSlave") == 0,
				Priority:  rapid.IntRange(0, 100).Draw(rt, "priority"),
				Waiting:   t0.Add(-time.Duration(rapid.IntRange(0, 60).Draw(rt, "waited")) * time.Second),
			}
			if rapid.IntRange(0, 3).Draw(rt, "pin") == 0 {
				r.Pinned = []string{fmt.Sprintf("s%d", rapid.IntRange(0, n-1).Draw(rt, "pinned"))}
			}
			queue = append(queue, r)
		}
		var running []string
		if rapid.Bool().Draw(rt, "running") {
			running = []string{"other"}
		}
		st := State{Now: t0, Queue: queue, Slaves: ss, Running: running}
		before := slices.Clone(ss)
		for _, name := range Names() {
			ds := policy(rt, name, Options{}).Schedule(st)
			eq(rt, ss, before, name+": slaves modified")
			left := map[string]int{}
			for _, s := range ss {
				left[s.ID] = s.Free
			}
			seen := map[string]bool{}
			for _, d := range ds {
				i := slices.IndexFunc(queue, func(r Request) bool { return r.Task == d.Task })
				if i < 0 || seen[d.Task] {
					rt.Fatalf("%s: decision for %s not waiting or repeated", name, d.Task)
				}
				seen[d.Task] = true
				r := queue[i]
				sum := 0
				for _, a := range d.Assign {
					j := slices.IndexFunc(ss, func(s Slave) bool { return s.ID == a.Slave })
					if j < 0 || !ss[j].Alive || a.Workers <= 0 {
						rt.Fatalf("%s: bad assignment %+v", name, a)
					}
					if len(r.Pinned) > 0 && !slices.Contains(r.Pinned, a.Slave) {
						rt.Fatalf("%s: %s placed off its pinned slaves", name, r.Task)
					}
					left[a.Slave] -= a.Workers
					if left[a.Slave] < 0 {
						rt.Fatalf("%s: over-commits %s", name, a.Slave)
					}
					sum += a.Workers
				}
				if sum != r.Workers || (r.OneSlave && len(d.Assign) != 1) || (r.MaxSlaves > 0 && len(d.Assign) > r.MaxSlaves) {
					rt.Fatalf("%s: %+v placed as %+v", name, r, d.Assign)
				}
			}
			leftover := slices.Clone(ss)
			for i := range leftover {
				leftover[i].Free = left[leftover[i].ID]
			}
			switch name {
			case Sequential:
				if len(ds) > 1 || (len(ds) == 1 && len(running) > 0) {
					rt.Fatalf("sequential started %v with %v running", started(ds), running)
				}
				if len(ds) == 1 {
					first := slices.IndexFunc(queue, func(r Request) bool { return Fits(r, ss) })
					eq(rt, ds[0].Task, queue[first].Task, "sequential starts the head")
				}
			case Greedy:
				// Maximal: placement only gets easier with more free slots,
				// so nothing left over could have started.
				for _, r := range queue {
					if _, ok := Place(r, leftover); ok && !seen[r.Task] {
						rt.Fatalf("greedy left %+v waiting though it fits %+v", r, leftover)
					}
				}
			}
		}
	})
}
