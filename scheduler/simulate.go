package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// SimStage is one stage of a simulated task.
type SimStage struct {
	Workers  int
	Duration time.Duration
}

// SimJob is a simulated task: its stages run one after another, each
// holding its workers' slots for its Duration.
type SimJob struct {
	Task     string
	Priority int
	Submit   time.Duration // offset from the start of the simulation
	Stages   []SimStage
}

// SimSample is the number of busy slots from At until the next sample.
type SimSample struct {
	At   time.Duration
	Busy int
}

// SimResult is what Simulate measured. Times are offsets from the start.
type SimResult struct {
	Makespan time.Duration            // when the last task finished
	Wait     map[string]time.Duration // per task: total time its stages waited in the queue
	Start    map[string]time.Duration // per task: when its first stage started
	Finish   map[string]time.Duration // per task: when its last stage ended
	// Utilization is busy slot-seconds over available slot-seconds (the
	// alive slaves' Total slots times Makespan).
	Utilization float64
	Unfinished  []string    // tasks left waiting when nothing else could happen (a stage never fit)
	Timeline    []SimSample // busy slots after every event time
}

// simEpoch is the simulated clock's origin; only differences matter.
var simEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

type simTask struct {
	job     SimJob
	order   int // submission order
	stage   int
	queued  bool
	waiting time.Duration // when the current stage started waiting
	running bool
	end     time.Duration
	assign  []Assignment
	done    bool
}

// Simulate runs p over jobs on slaves in simulated time and reports what
// happened. The cluster starts idle: each alive slave's Free is set to its
// Total. Whenever a task is submitted or a stage ends, Simulate calls
// Schedule until it starts nothing more. Task names must be unique. It
// panics if the policy starts a request that is not waiting or over-commits
// a slave, both bugs in the policy.
func Simulate(p Policy, jobs []SimJob, slaves []Slave) SimResult {
	res := SimResult{
		Wait:   map[string]time.Duration{},
		Start:  map[string]time.Duration{},
		Finish: map[string]time.Duration{},
	}
	cluster := slices.Clone(slaves)
	capacity := 0
	for i := range cluster {
		cluster[i].Free = 0
		if cluster[i].Alive {
			cluster[i].Free = cluster[i].Total
			capacity += cluster[i].Total
		}
	}
	tasks := make([]*simTask, len(jobs))
	byName := map[string]*simTask{}
	for i, j := range jobs {
		if _, dup := byName[j.Task]; dup {
			panic(fmt.Sprintf("scheduler: Simulate: task %q appears twice", j.Task))
		}
		tasks[i] = &simTask{job: j}
		byName[j.Task] = tasks[i]
	}
	sorted := slices.Clone(tasks)
	slices.SortStableFunc(sorted, func(a, b *simTask) int { return cmp.Compare(a.job.Submit, b.job.Submit) })
	for i, t := range sorted {
		t.order = i
	}
	slot := func(id string) *Slave {
		for i := range cluster {
			if cluster[i].ID == id {
				return &cluster[i]
			}
		}
		return nil
	}

	var now time.Duration
	var busySlotTime float64 // slot-seconds
	busy := 0
	for {
		// Stages ending now free their slots; the task's next stage queues.
		for _, t := range sorted {
			if t.running && t.end <= now {
				for _, a := range t.assign {
					slot(a.Slave).Free += a.Workers
					busy -= a.Workers
				}
				t.running, t.assign = false, nil
				t.stage++
				if t.stage == len(t.job.Stages) {
					t.done = true
					res.Finish[t.job.Task] = now
				} else {
					t.queued, t.waiting = true, now
				}
			}
		}
		// Tasks submitted by now queue their first stage.
		for _, t := range sorted {
			if !t.done && !t.queued && !t.running && t.stage == 0 && t.job.Submit <= now {
				if len(t.job.Stages) == 0 {
					t.done = true
					res.Finish[t.job.Task] = t.job.Submit
					continue
				}
				t.queued, t.waiting = true, t.job.Submit
			}
		}
		for {
			st := State{Now: simEpoch.Add(now), Slaves: slices.Clone(cluster)}
			for _, t := range sorted {
				if t.queued {
					sg := t.job.Stages[t.stage]
					st.Queue = append(st.Queue, Request{
						Task: t.job.Task, Stage: t.stage, Workers: sg.Workers,
						Priority:  t.job.Priority,
						Submitted: simEpoch.Add(t.job.Submit), Waiting: simEpoch.Add(t.waiting),
					})
				}
				if t.running {
					st.Running = append(st.Running, t.job.Task)
				}
			}
			ds := p.Schedule(st)
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				t := byName[d.Task]
				if t == nil || !t.queued || t.stage != d.Stage {
					panic(fmt.Sprintf("scheduler: Simulate: policy %s started %s stage %d, which is not waiting", p.Name(), d.Task, d.Stage))
				}
				n := 0
				for _, a := range d.Assign {
					s := slot(a.Slave)
					if s == nil || !s.Alive || a.Workers <= 0 || a.Workers > s.Free {
						panic(fmt.Sprintf("scheduler: Simulate: policy %s over-commits slave %q with %s", p.Name(), a.Slave, d.Task))
					}
					s.Free -= a.Workers
					busy += a.Workers
					n += a.Workers
				}
				if n != t.job.Stages[t.stage].Workers {
					panic(fmt.Sprintf("scheduler: Simulate: policy %s gave %s stage %d %d workers, want %d", p.Name(), d.Task, d.Stage, n, t.job.Stages[t.stage].Workers))
				}
				if t.stage == 0 {
					res.Start[t.job.Task] = now
				}
				res.Wait[t.job.Task] += now - t.waiting
				t.queued, t.running = false, true
				t.assign = d.Assign
				t.end = now + t.job.Stages[t.stage].Duration
			}
		}
		if n := len(res.Timeline); n > 0 && res.Timeline[n-1].At == now {
			res.Timeline[n-1].Busy = busy
		} else {
			res.Timeline = append(res.Timeline, SimSample{At: now, Busy: busy})
		}

		next, ok := time.Duration(0), false
		for _, t := range sorted {
			var at time.Duration
			switch {
			case t.running:
				at = t.end
			case !t.done && !t.queued && t.stage == 0:
				at = t.job.Submit
			default:
				continue
			}
			if !ok || at < next {
				next, ok = at, true
			}
		}
		if !ok {
			break
		}
		busySlotTime += float64(busy) * (next - now).Seconds()
		now = next
	}
	for _, t := range tasks {
		if !t.done {
			res.Unfinished = append(res.Unfinished, t.job.Task)
		} else {
			res.Makespan = max(res.Makespan, res.Finish[t.job.Task])
		}
	}
	if capacity > 0 && res.Makespan > 0 {
		res.Utilization = busySlotTime / (float64(capacity) * res.Makespan.Seconds())
	}
	return res
}
