package scheduler

import (
	"math"
	"strings"
	"testing"
	"time"
)

// Worked by hand on one slave with 4 slots:
//
//	A: submit 0, stages 2 workers x 10s then 4 workers x 5s
//	B: submit 0, 2 workers x 10s
//	C: submit 1s, 3 workers x 2s
//
// greedy: A0 and B run 0-10; A1 takes all 4 slots 10-15 (A was submitted
// before C); C runs 15-17. Busy slot-seconds 40+20+6 = 66 of 4*17 = 68.
// sequential: A0 0-10, A1 10-15, B 15-25, C 25-27. Busy 20+20+20+6 = 66 of
// 4*27 = 108.
func TestSimulateByHand(t *testing.T) {
	jobs := []SimJob{
		{Task: "A", Stages: []SimStage{{2, 10 * time.Second}, {4, 5 * time.Second}}},
		{Task: "B", Stages: []SimStage{{2, 10 * time.Second}}},
		{Task: "C", Submit: time.Second, Stages: []SimStage{{3, 2 * time.Second}}},
	}
	cluster := []Slave{{ID: "s", Total: 4, Alive: true}} // Free is reset to Total
	s := time.Second
	for _, tc := range []struct {
		policy   string
		makespan time.Duration
		wait     map[string]time.Duration
		start    map[string]time.Duration
		finish   map[string]time.Duration
		util     float64
		timeline []SimSample
	}{
		{
			policy: Greedy, makespan: 17 * s,
			wait:     map[string]time.Duration{"A": 0, "B": 0, "C": 14 * s},
			start:    map[string]time.Duration{"A": 0, "B": 0, "C": 15 * s},
			finish:   map[string]time.Duration{"A": 15 * s, "B": 10 * s, "C": 17 * s},
			util:     66.0 / 68,
			timeline: []SimSample{{0, 4}, {1 * s, 4}, {10 * s, 4}, {15 * s, 3}, {17 * s, 0}},
		},
		{
			policy: Sequential, makespan: 27 * s,
			wait:     map[string]time.Duration{"A": 0, "B": 15 * s, "C": 24 * s},
			start:    map[string]time.Duration{"A": 0, "B": 15 * s, "C": 25 * s},
			finish:   map[string]time.Duration{"A": 15 * s, "B": 25 * s, "C": 27 * s},
			util:     66.0 / 108,
			timeline: []SimSample{{0, 2}, {1 * s, 2}, {10 * s, 4}, {15 * s, 2}, {25 * s, 3}, {27 * s, 0}},
		},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			r := Simulate(policy(t, tc.policy, Options{}), jobs, cluster)
			eq(t, r.Makespan, tc.makespan, "makespan")
			eq(t, r.Wait, tc.wait, "wait")
			eq(t, r.Start, tc.start, "start")
			eq(t, r.Finish, tc.finish, "finish")
			eq(t, r.Timeline, tc.timeline, "timeline")
			eq(t, len(r.Unfinished), 0, "unfinished")
			if math.Abs(r.Utilization-tc.util) > 1e-9 {
				t.Errorf("utilization %v, want %v", r.Utilization, tc.util)
			}
		})
	}
}

func TestSimulateUnfinished(t *testing.T) {
	r := Simulate(policy(t, Greedy, Options{}), []SimJob{
		{Task: "big", Stages: []SimStage{{5, time.Second}}},
		{Task: "ok", Stages: []SimStage{{4, time.Second}}},
		{Task: "empty", Submit: 3 * time.Second},
	}, []Slave{{ID: "s", Total: 4, Alive: true}, {ID: "dead", Total: 4}})
	eq(t, r.Unfinished, []string{"big"}, "unfinished")
	eq(t, r.Makespan, 3*time.Second, "makespan")
	eq(t, r.Finish["ok"], time.Second, "ok finish")
	if math.Abs(r.Utilization-4.0/12) > 1e-9 {
		t.Errorf("utilization %v, want 1/3", r.Utilization)
	}
}

type overCommit struct{}

func (overCommit) Name() string { return "bad" }
func (overCommit) Schedule(s State) []Decision {
	var out []Decision
	for _, r := range s.Queue {
		out = append(out, Decision{Task: r.Task, Stage: r.Stage, Assign: []Assignment{{Slave: s.Slaves[0].ID, Workers: r.Workers}}})
	}
	return out
}

func TestSimulateCatchesOverCommit(t *testing.T) {
	defer func() {
		if v := recover(); v == nil || !strings.Contains(v.(string), "over-commits") {
			t.Fatalf("recover() = %v, want an over-commit panic", v)
		}
	}()
	Simulate(overCommit{}, []SimJob{
		{Task: "a", Stages: []SimStage{{3, time.Second}}},
		{Task: "b", Stages: []SimStage{{3, time.Second}}},
	}, []Slave{{ID: "s", Total: 4, Alive: true}})
}

// A FlexPS-like mix: greedy and prioritized beat sequential on makespan and
// utilization, and every policy finishes everything.
func TestSimulateMix(t *testing.T) {
	s := time.Second
	jobs := []SimJob{
		{Task: "t1", Priority: 10, Stages: []SimStage{{100, 60 * s}, {20, 30 * s}}},
		{Task: "t2", Priority: 50, Stages: []SimStage{{150, 40 * s}}},
		{Task: "t3", Priority: 20, Submit: 5 * s, Stages: []SimStage{{50, 90 * s}}},
		{Task: "t4", Priority: 80, Submit: 10 * s, Stages: []SimStage{{80, 30 * s}, {10, 20 * s}}},
		{Task: "t5", Priority: 30, Submit: 15 * s, Stages: []SimStage{{60, 50 * s}}},
		{Task: "t6", Priority: 0, Submit: 20 * s, Stages: []SimStage{{300, 20 * s}}},
	}
	cluster := []Slave{{ID: "a", Total: 100, Alive: true}, {ID: "b", Total: 100, Alive: true}, {ID: "c", Total: 100, Alive: true}}
	res := map[string]SimResult{}
	for _, name := range Names() {
		r := Simulate(policy(t, name, Options{}), jobs, cluster)
		eq(t, len(r.Unfinished), 0, name+" unfinished")
		res[name] = r
		t.Logf("%-11s makespan %v utilization %.2f wait(t6) %v", name, r.Makespan, r.Utilization, r.Wait["t6"])
	}
	for _, name := range []string{Greedy, Prioritized} {
		check(t, res[name].Makespan < res[Sequential].Makespan, name+" makespan not below sequential")
		check(t, res[name].Utilization > res[Sequential].Utilization, name+" utilization not above sequential")
	}
}
