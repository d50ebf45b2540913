package lifecycle

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/scheduler"
	"pgregory.net/rapid"
)

// genConfig draws a placement of 1-3 slaves with 1-3 workers each.
func genConfig(t *rapid.T) Config {
	n := rapid.IntRange(1, 3).Draw(t, "slaves")
	cfg := Config{Task: "t", Stage: 0, Name: "s", Epochs: rapid.IntRange(0, 3).Draw(t, "epochs")}
	for i := range n {
		w := rapid.IntRange(1, 3).Draw(t, fmt.Sprintf("workers%d", i))
		cfg.Placement = append(cfg.Placement, scheduler.Assignment{Slave: fmt.Sprintf("s%d", i), Workers: w})
		cfg.Hosts = append(cfg.Hosts, fmt.Sprintf("s%d", i))
		cfg.Workers += w
	}
	if rapid.Bool().Draw(t, "trial") {
		cfg.Trial = time.Duration(rapid.IntRange(1, 5).Draw(t, "trialSeconds")) * time.Second
	}
	return cfg
}

// genEvent draws any event, well-formed or not, for a stage of cfg at
// clock now.
func genEvent(t *rapid.T, cfg Config, now time.Time, waiter int) Event {
	slave := fmt.Sprintf("s%d", rapid.IntRange(0, len(cfg.Placement)).Draw(t, "slave")) // one past: a bystander
	rank := rapid.IntRange(0, cfg.Workers-1).Draw(t, "rank")
	stage := rapid.SampledFrom([]int{0, 0, 0, 1}).Draw(t, "stage")
	loss := rapid.SampledFrom([]float64{0.5, 1, 2, math.NaN(), math.Inf(1)}).Draw(t, "loss")
	var err error
	if rapid.IntRange(0, 4).Draw(t, "ackFails") == 0 {
		err = errors.New("refused")
	}
	switch rapid.IntRange(0, 10).Draw(t, "kind") {
	case 0:
		return Begin{Now: now}
	case 1:
		return Acked{Slave: slave, Op: rapid.SampledFrom([]string{proto.OpStartWorkers, proto.OpStopStage}).Draw(t, "op"), Err: err, Now: now}
	case 2:
		return WorkerProgress{Stage: stage, Rank: rank, Slave: slave, Samples: 10, LossSum: loss}
	case 3:
		return WorkerEpoch{Stage: stage, Rank: rank, Slave: slave, Epoch: rapid.IntRange(1, 3).Draw(t, "epoch"), Metrics: map[string]float64{"loss": loss}}
	case 4, 5:
		return WorkerDone{Stage: stage, Rank: rank, Slave: slave, Now: now}
	case 6:
		return WorkerFailed{Stage: stage, Rank: rank, Slave: slave, Err: "boom"}
	case 7:
		return BarrierArrived{Stage: stage, Rank: rank, Seq: rapid.IntRange(0, 1).Draw(t, "seq"), Waiter: waiter}
	case 8:
		return Tick{Now: now, Handed: rapid.Float64Range(0, 1.5).Draw(t, "handed")}
	case 9:
		return Cancel{Err: errors.New("cancelled")}
	default:
		return SlaveDead{Slave: slave, Err: errors.New("dead")}
	}
}

// Whatever arrives in whatever order: at most one StageFinished, nothing
// but error answers to late barrier arrivals after it, every barrier
// waiter answered at most once (and exactly once once the stage ended),
// and the done fraction stays in [0, 1].
func TestPropertyTerminalIsFinal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		s := New(cfg)
		now := t0
		finishedAt := -1
		answered := map[int]int{}
		waiters := 0
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for i := range steps {
			now = now.Add(time.Duration(rapid.IntRange(0, 1500).Draw(t, "ms")) * time.Millisecond)
			ev := genEvent(t, cfg, now, waiters)
			if _, ok := ev.(BarrierArrived); ok {
				waiters++
			}
			for _, a := range s.Step(ev) {
				switch a := a.(type) {
				case StageFinished:
					if finishedAt >= 0 {
						t.Fatalf("step %d: second StageFinished (first at step %d)", i, finishedAt)
					}
					finishedAt = i
				case ReleaseBarrier:
					for _, w := range a.Waiters {
						answered[w.(int)]++
						if answered[w.(int)] > 1 {
							t.Fatalf("step %d: waiter %d answered twice", i, w)
						}
					}
					if finishedAt >= 0 && finishedAt < i && a.Err == "" {
						t.Fatalf("step %d: barrier released OK after the stage finished", i)
					}
				default:
					if finishedAt >= 0 && finishedAt < i {
						t.Fatalf("step %d: %#v after the stage finished at step %d", i, a, finishedAt)
					}
				}
			}
			if f := s.Progress().Fraction; f < 0 || f > 1 {
				t.Fatalf("fraction %v", f)
			}
			if (finishedAt >= 0) != (s.Phase() == Ended) {
				t.Fatalf("step %d: phase %v, finished at %d", i, s.Phase(), finishedAt)
			}
		}
		if finishedAt >= 0 && len(answered) != waiters {
			t.Fatalf("%d of %d barrier waiters answered after the stage ended", len(answered), waiters)
		}
	})
}

// Every worker done once, in any order and among harmless noise, after
// every start was acknowledged ⇒ exactly one completion, with no error,
// at the last worker's report and not before; the result counts every
// accepted sample.
func TestPropertyAllDoneCompletesOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		cfg.Trial = 0
		s := New(cfg)
		s.Step(Begin{Now: t0})
		for _, a := range cfg.Placement {
			s.Step(Acked{Slave: a.Slave, Op: proto.OpStartWorkers})
		}
		order := rapid.Permutation(func() []int {
			r := make([]int, cfg.Workers)
			for i := range r {
				r[i] = i
			}
			return r
		}()).Draw(t, "order")
		now := t0
		var samples int64
		completions := 0
		for i, rank := range order {
			for range rapid.IntRange(0, 3).Draw(t, "noise") {
				now = now.Add(300 * time.Millisecond)
				var ev Event = Tick{Now: now}
				if rapid.Bool().Draw(t, "progress") {
					n := int64(rapid.IntRange(1, 100).Draw(t, "samples"))
					samples += n
					ev = WorkerProgress{Stage: 0, Rank: rank, Samples: n, LossSum: float64(n)}
				}
				for _, a := range s.Step(ev) {
					if _, ok := a.(StageFinished); ok {
						t.Fatalf("finished on noise before every worker was done")
					}
				}
			}
			for _, a := range s.Step(WorkerDone{Stage: 0, Rank: rank, Now: now}) {
				if f, ok := a.(StageFinished); ok {
					completions++
					if i != len(order)-1 {
						t.Fatalf("finished after %d of %d workers", i+1, cfg.Workers)
					}
					if f.Err != nil || f.Stopped || f.Result.Samples != samples || len(f.Result.WorkerStats) != cfg.Workers {
						t.Fatalf("finished %+v, want success with %d samples", f, samples)
					}
				}
			}
		}
		if completions != 1 {
			t.Fatalf("%d completions, want 1", completions)
		}
	})
}

// Deaths in a survivable stage against a sequential model: workers arrive
// at barriers in order, finish, and whole slaves die at random. A barrier
// opens exactly when every live rank has reached it, telling the living
// who they are; the stage completes, without error, exactly when every
// live rank is done; it fails only when the last worker's slave dies; and
// every dead slave's ranks are released once.
func TestPropertyDeathsAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		cfg.Trial = 0
		cfg.Survival = survives
		s := New(cfg)
		s.Step(Begin{Now: t0})
		for _, a := range cfg.Placement {
			s.Step(Acked{Slave: a.Slave, Op: proto.OpStartWorkers})
		}
		slaveOf := map[int]string{}
		for _, a := range cfg.Placement {
			for _, r := range s.Ranks(a.Slave) {
				slaveOf[r] = a.Slave
			}
		}
		// The model.
		live := map[int]bool{}
		for r := range cfg.Workers {
			live[r] = true
		}
		deadSlave := map[string]bool{}
		passed := map[int]int{}           // rank -> barriers passed
		waiting := map[int]map[int]bool{} // seq -> live ranks waiting
		done := map[int]bool{}
		released := map[string]bool{}
		ended := false
		for i := range rapid.IntRange(1, 80).Draw(t, "steps") {
			if ended {
				break
			}
			rank := rapid.IntRange(0, cfg.Workers-1).Draw(t, "rank")
			var ev Event
			switch k := rapid.IntRange(0, 5).Draw(t, "kind"); {
			case k == 0:
				ev = SlaveDead{Slave: cfg.Placement[rapid.IntRange(0, len(cfg.Placement)-1).Draw(t, "victim")].Slave}
			case k <= 2:
				if done[rank] || waitingAny(waiting, rank) {
					continue
				}
				ev = BarrierArrived{Stage: 0, Rank: rank, Seq: passed[rank] + 1, Waiter: rank}
			default:
				if done[rank] || waitingAny(waiting, rank) {
					continue
				}
				ev = WorkerDone{Stage: 0, Rank: rank, Slave: slaveOf[rank], Now: t0}
			}
			// Step the model.
			var wantRelease []int // seq released OK
			wantEnd, wantErr := false, false
			switch ev := ev.(type) {
			case SlaveDead:
				if deadSlave[ev.Slave] {
					break
				}
				left := 0
				for r := range live {
					if slaveOf[r] != ev.Slave {
						left++
					}
				}
				if left == 0 {
					wantEnd, wantErr = true, true
					break
				}
				deadSlave[ev.Slave] = true
				for r := range live {
					if slaveOf[r] == ev.Slave {
						delete(live, r)
						for _, w := range waiting {
							delete(w, r)
						}
					}
				}
			case BarrierArrived:
				if live[ev.Rank] {
					if waiting[ev.Seq] == nil {
						waiting[ev.Seq] = map[int]bool{}
					}
					waiting[ev.Seq][ev.Rank] = true
				}
			case WorkerDone:
				if live[ev.Rank] {
					done[ev.Rank] = true
				}
			}
			if !wantEnd {
				for seq, w := range waiting {
					if len(w) > 0 && len(w) == len(live) {
						wantRelease = append(wantRelease, seq)
						for r := range w {
							passed[r] = seq
						}
						delete(waiting, seq)
					}
				}
				if len(done) > 0 && countLive(done, live) == len(live) {
					wantEnd = true
				}
				// A live worker waits at a barrier that a live worker
				// which returned never called (done ranks wait nowhere).
				for _, w := range waiting {
					if len(w) > 0 && countLive(done, live) > 0 {
						wantEnd, wantErr = true, true
					}
				}
			}
			// Compare.
			gotRelease := 0
			for _, a := range s.Step(ev) {
				switch a := a.(type) {
				case ReleaseBarrier:
					if a.Err != "" {
						continue
					}
					gotRelease++
					if len(deadSlave) > 0 && len(a.Live) != len(live) {
						t.Fatalf("step %d: released with live %v, model %v", i, a.Live, live)
					}
					for _, r := range a.Live {
						if !live[r] {
							t.Fatalf("step %d: live %v lists dead rank %d", i, a.Live, r)
						}
					}
				case ReleaseBlocks:
					if released[a.Slave] || !deadSlave[a.Slave] {
						t.Fatalf("step %d: ReleaseBlocks %+v (released before: %v, dead: %v)", i, a, released[a.Slave], deadSlave[a.Slave])
					}
					released[a.Slave] = true
				case StageFinished:
					ended = true
					if !wantEnd || (a.Err != nil) != wantErr {
						t.Fatalf("step %d: finished (err %v), model: end %v err %v", i, a.Err, wantEnd, wantErr)
					}
				}
			}
			if gotRelease != len(wantRelease) {
				t.Fatalf("step %d (%#v): %d barriers released, model %v", i, ev, gotRelease, wantRelease)
			}
			if wantEnd && !ended {
				t.Fatalf("step %d: the model ended, the stage did not", i)
			}
		}
		for d := range deadSlave {
			if !released[d] {
				t.Fatalf("dead slave %s's blocks never released", d)
			}
		}
	})
}

func waitingAny(waiting map[int]map[int]bool, rank int) bool {
	for _, w := range waiting {
		if w[rank] {
			return true
		}
	}
	return false
}

func countLive(set, live map[int]bool) int {
	n := 0
	for r := range set {
		if live[r] {
			n++
		}
	}
	return n
}
