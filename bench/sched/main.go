// Command sched reproduces FlexPS's scheduling experiment on flexps: six
// tasks of different shapes (long and narrow, short and wide, multi-stage
// with changing parallelism, one with a low priority) are submitted at
// once to an in-process cluster of 2 slaves x 2 worker slots, once per
// scheduling policy (sequential, greedy, prioritized). The stage function
// registered here does timed work (params.iters iterations of params.ms
// milliseconds, one sample each), so a stage's length does not depend on
// the machine's load. For each policy it prints the makespan, the slot
// utilization (the master's Status sampled every 100ms: slots held by
// tasks / total slots), each task's wait (Started - Submitted) and the
// longest, then scheduler.Simulate on the same shapes as a cross-check.
//
//	go run ./bench/sched                 # about 70 seconds
//	go run ./bench/sched -scale 2        # every stage twice as long
//	go run ./bench/sched -aging 10       # prioritized: 10 priority points per second waited
//
// Nothing here asserts a timing.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/scheduler"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

const (
	slaves = 2
	slots  = 2 // per slave
)

func init() {
	// bench.work does params.iters iterations of params.ms milliseconds
	// (sleeping, or burning CPU with params.spin), one sample each.
	tasks.Register("bench.work", func(info *tasks.Info) error {
		iters, ms := info.Params.Int("iters", 100), info.Params.Int("ms", 20)
		spin := info.Params.Bool("spin", false)
		d := time.Duration(ms) * time.Millisecond
		t := time.NewTimer(d)
		defer t.Stop()
		for i := 0; i < iters; i++ {
			if spin {
				for end := time.Now().Add(d); time.Now().Before(end); {
					if info.Ctx.Err() != nil {
						return info.Ctx.Err()
					}
				}
			} else {
				t.Reset(d)
				select {
				case <-info.Ctx.Done():
					return info.Ctx.Err()
				case <-t.C:
				}
			}
			info.Report(1, 0)
		}
		info.ReportEpoch(1, map[string]float64{"samples": float64(iters)})
		return nil
	})
}

// shape is one task of the workload: stages of (workers, seconds).
type shape struct {
	name     string
	priority int
	stages   []stageShape
}

type stageShape struct {
	workers int
	seconds float64
}

// workload is the six tasks, in submission order. Slot-seconds: 51 at
// scale 1, so no policy can finish in less than 12.75s on 4 slots.
func workload(scale float64) []shape {
	s := func(w int, sec float64) stageShape { return stageShape{w, sec * scale} }
	return []shape{
		{"1-long-narrow", 100, []stageShape{s(1, 8)}},
		{"2-short-wide", 100, []stageShape{s(4, 2)}},
		{"3-multi-2-4-1", 100, []stageShape{s(2, 2), s(4, 2), s(1, 2)}},
		{"4-medium", 100, []stageShape{s(2, 4)}},
		{"5-multi-1-2", 100, []stageShape{s(1, 3), s(2, 2)}},
		{"6-low-priority", 0, []stageShape{s(2, 3)}},
	}
}

type taskResult struct {
	Name     string  `json:"name"`
	Priority int     `json:"priority"`
	Wait     float64 `json:"wait_seconds"`   // Started - Submitted
	Finish   float64 `json:"finish_seconds"` // Finished - first submission
}

type policyResult struct {
	Policy      string       `json:"policy"`
	Label       string       `json:"label"`  // policy and aging
	Source      string       `json:"source"` // engine or simulate
	Makespan    float64      `json:"makespan_seconds"`
	Utilization float64      `json:"utilization"`
	LongestWait float64      `json:"longest_wait_seconds"`
	LongestTask string       `json:"longest_wait_task"`
	Tasks       []taskResult `json:"tasks"`
	Timeline    []float64    `json:"timeline,omitempty"` // busy slot fraction per 100ms sample
}

func main() {
	var (
		scale    float64
		ms       int
		aging    float64
		policies string
		spin     bool
		jsonOut  bool
	)
	flag.Float64Var(&scale, "scale", 1, "multiply every stage's length")
	flag.IntVar(&ms, "ms", 20, "milliseconds per iteration of bench.work")
	flag.Float64Var(&aging, "aging", 0, "prioritized: priority points per second waited (0: the master's default, 1)")
	flag.StringVar(&policies, "policies", "sequential,greedy,prioritized,prioritized:50", "policies to run; policy:A sets the aging (priority points per second waited) of that run")
	flag.BoolVar(&spin, "spin", false, "burn CPU in bench.work instead of sleeping (4 slots on a 2-core machine then stretch stages)")
	flag.BoolVar(&jsonOut, "json", false, "also write one JSON line per policy result to stdout")
	flag.Parse()
	ctx := context.Background()
	shapes := workload(scale)
	fmt.Printf("# flexps sched bench: %d slaves x %d slots, %d tasks submitted at once, stages of %dms iterations (%s), scale %v\n",
		slaves, slots, len(shapes), ms, map[bool]string{true: "spinning", false: "sleeping"}[spin], scale)
	for _, s := range shapes {
		var parts []string
		for _, st := range s.stages {
			parts = append(parts, fmt.Sprintf("%dw x %.1fs", st.workers, st.seconds))
		}
		fmt.Printf("#   %-15s priority %3d: %s\n", s.name, s.priority, strings.Join(parts, " -> "))
	}
	type run struct {
		label, policy string
		aging         float64
	}
	var runs []run
	for _, p := range strings.Split(policies, ",") {
		r := run{label: strings.TrimSpace(p), aging: aging}
		r.policy = r.label
		if name, a, ok := strings.Cut(r.label, ":"); ok {
			if _, err := fmt.Sscan(a, &r.aging); err != nil || r.aging <= 0 {
				fmt.Fprintf(os.Stderr, "bench/sched: bad aging in %q\n", r.label)
				os.Exit(2)
			}
			r.policy, r.label = name, fmt.Sprintf("%s,aging %g", name, r.aging)
		}
		runs = append(runs, r)
	}
	var all []policyResult
	for _, r := range runs {
		fmt.Fprintf(os.Stderr, "  running %s...\n", r.label)
		res, err := runPolicy(ctx, r.policy, r.aging, shapes, ms, spin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/sched:", err)
			os.Exit(1)
		}
		res.Label = r.label
		all = append(all, res)
	}
	for _, r := range runs {
		res, err := simulate(r.policy, r.aging, shapes)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/sched:", err)
			os.Exit(1)
		}
		res.Label = r.label
		all = append(all, res)
	}
	report(all, shapes)
	if jsonOut {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range all {
			enc.Encode(r)
		}
	}
}

// runPolicy starts a fresh cluster with the policy, submits every task,
// samples Status every 100ms until all ended, and reads the final times.
func runPolicy(ctx context.Context, policy string, aging float64, shapes []shape, ms int, spin bool) (policyResult, error) {
	res := policyResult{Policy: policy, Source: "engine"}
	cfg := engine.ClusterConfig{}
	cfg.Master.Policy, cfg.Master.Aging = policy, aging
	l, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: slaves, Slots: slots, Config: cfg, Log: zerolog.Nop()})
	if err != nil {
		return res, err
	}
	defer l.Close()
	ids := make([]string, len(shapes))
	for i, s := range shapes {
		t := tasks.NewTask(s.name)
		t.Priority = s.priority
		var stages []tasks.Stage
		for k, st := range s.stages {
			iters := max(int(st.seconds*1000)/ms, 1)
			stages = append(stages, tasks.Stage{Name: fmt.Sprintf("s%d", k), Func: "bench.work", Workers: st.workers,
				Params: tasks.Params{"iters": iters, "ms": ms, "spin": spin}})
		}
		t.SetStages(stages...)
		id, err := l.Submit(ctx, t)
		if err != nil {
			return res, err
		}
		ids[i] = id
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Minute)
	var final map[string]status.Task
	for {
		<-tick.C
		rep, err := l.Status(ctx, "")
		if err != nil {
			return res, err
		}
		held, total, ended := 0, 0, 0
		mine := map[string]status.Task{}
		for _, t := range rep.Tasks {
			mine[t.ID] = t
		}
		for _, id := range ids {
			t := mine[id]
			for _, n := range t.Slots {
				held += n
			}
			switch t.State {
			case status.Done:
				ended++
			case status.Failed, status.Cancelled:
				return res, fmt.Errorf("%s: task %s %s: %s", policy, t.Name, t.State, t.Reason)
			}
		}
		for _, s := range rep.Slaves {
			if s.Alive {
				total += s.Slots
			}
		}
		if ended == len(ids) {
			final = mine
			break
		}
		res.Timeline = append(res.Timeline, float64(held)/float64(max(total, 1)))
		if time.Now().After(deadline) {
			return res, fmt.Errorf("%s: tasks still running after 30 minutes", policy)
		}
	}
	var first, last time.Time
	for _, id := range ids {
		t := final[id]
		if first.IsZero() || t.Submitted.Before(first) {
			first = t.Submitted
		}
		if t.Finished.After(last) {
			last = t.Finished
		}
	}
	for i, id := range ids {
		t := final[id]
		tr := taskResult{Name: shapes[i].name, Priority: t.Priority, Wait: t.Started.Sub(t.Submitted).Seconds(), Finish: t.Finished.Sub(first).Seconds()}
		res.Tasks = append(res.Tasks, tr)
		if tr.Wait > res.LongestWait || res.LongestTask == "" {
			res.LongestWait, res.LongestTask = tr.Wait, tr.Name
		}
	}
	res.Makespan = last.Sub(first).Seconds()
	var sum float64
	for _, v := range res.Timeline {
		sum += v
	}
	if len(res.Timeline) > 0 {
		res.Utilization = sum / float64(len(res.Timeline))
	}
	return res, nil
}

// simulate runs scheduler.Simulate on the same shapes.
func simulate(policy string, aging float64, shapes []shape) (policyResult, error) {
	res := policyResult{Policy: policy, Source: "simulate"}
	p, err := scheduler.New(policy, scheduler.Options{AgingPerSecond: aging})
	if err != nil {
		return res, err
	}
	var jobs []scheduler.SimJob
	for _, s := range shapes {
		j := scheduler.SimJob{Task: s.name, Priority: s.priority}
		for _, st := range s.stages {
			j.Stages = append(j.Stages, scheduler.SimStage{Workers: st.workers, Duration: time.Duration(st.seconds * float64(time.Second))})
		}
		jobs = append(jobs, j)
	}
	var sl []scheduler.Slave
	for i := range slaves {
		sl = append(sl, scheduler.Slave{ID: fmt.Sprintf("slave-%d", i), Total: slots, Alive: true})
	}
	r := scheduler.Simulate(p, jobs, sl)
	if len(r.Unfinished) > 0 {
		return res, fmt.Errorf("simulate %s: unfinished %v", policy, r.Unfinished)
	}
	res.Makespan, res.Utilization = r.Makespan.Seconds(), r.Utilization
	for _, s := range shapes {
		tr := taskResult{Name: s.name, Priority: s.priority, Wait: r.Start[s.name].Seconds(), Finish: r.Finish[s.name].Seconds()}
		res.Tasks = append(res.Tasks, tr)
		if tr.Wait > res.LongestWait || res.LongestTask == "" {
			res.LongestWait, res.LongestTask = tr.Wait, tr.Name
		}
	}
	return res, nil
}

func report(all []policyResult, shapes []shape) {
	var slotSeconds float64
	for _, s := range shapes {
		for _, st := range s.stages {
			slotSeconds += float64(st.workers) * st.seconds
		}
	}
	lower := slotSeconds / (slaves * slots)
	fmt.Println()
	fmt.Printf("%-20s %-9s %10s %9s %12s %12s  %-16s %s\n", "policy", "source", "makespan s", "vs seq", "utilization", "longest wait", "(task)", "low-priority task: wait / finish s")
	seq := map[string]float64{}
	for _, r := range all {
		if r.Policy == scheduler.Sequential {
			seq[r.Source] = r.Makespan
		}
	}
	for _, r := range all {
		vs := "-"
		if b := seq[r.Source]; b > 0 {
			vs = fmt.Sprintf("%.2fx", b/r.Makespan)
		}
		low := r.Tasks[len(r.Tasks)-1]
		fmt.Printf("%-20s %-9s %10.2f %9s %12.3f %12.2f  %-16s %.2f / %.2f\n", r.Label, r.Source, r.Makespan, vs, r.Utilization, r.LongestWait, r.LongestTask, low.Wait, low.Finish)
	}
	fmt.Printf("\nlower bound on the makespan: %.1f slot-seconds / %d slots = %.2fs. 'vs seq' = sequential makespan / this one (same source).\n",
		slotSeconds, slaves*slots, lower)
	fmt.Println("engine utilization = mean over 100ms Status samples of slots held by the tasks / total slots (stage start-up and")
	fmt.Println("hand-over gaps count as idle); simulate utilization = busy slot-seconds / (slots x makespan).")
	fmt.Println("\nper-task wait (Started - Submitted) / finish time, seconds:")
	fmt.Printf("%-16s", "task")
	for _, r := range all {
		label := strings.ReplaceAll(strings.ReplaceAll(r.Label, "prioritized", "prio"), ",aging ", "+a")
		fmt.Printf(" %17s", label[:min(len(label), 12)]+"/"+r.Source[:3])
	}
	fmt.Println()
	for i, s := range shapes {
		fmt.Printf("%-16s", s.name)
		for _, r := range all {
			fmt.Printf(" %8.2f / %6.2f", r.Tasks[i].Wait, r.Tasks[i].Finish)
		}
		fmt.Println()
	}
	fmt.Println("\nslot utilization over time (engine; one character per 500ms: busy slots of 4, '.' = none):")
	for _, r := range all {
		if r.Source != "engine" {
			continue
		}
		var b strings.Builder
		for i := 0; i < len(r.Timeline); i += 5 {
			j := min(i+5, len(r.Timeline))
			s := 0.0
			for _, v := range r.Timeline[i:j] {
				s += v
			}
			busy := int(s/float64(j-i)*float64(slaves*slots) + 0.5)
			if busy == 0 {
				b.WriteByte('.')
			} else {
				b.WriteByte(byte('0' + busy))
			}
		}
		fmt.Printf("  %-20s %s\n", r.Label, b.String())
	}
}
