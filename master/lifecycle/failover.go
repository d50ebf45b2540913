package lifecycle

import (
	"fmt"
	"maps"
	"slices"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// Survival is what a stage can lose and still go on.
type Survival struct {
	// Shards: every table of the task has a backup of each shard
	// (replicas >= 2), so a dead slave that only hosts shards is failed
	// over by the KV-store and the stage goes on.
	Shards bool
	// Workers: Shards, and the stage keeps its model in the KV-store
	// (kind ps), so a dead slave's workers are counted out and their
	// unfinished input blocks re-run by the survivors.
	Workers bool
	// Why says what the stage cannot survive and what to set ("" when
	// Workers).
	Why string
}

// UnreplicatedWhy is why the death of a slave holding a shard of table
// (of replicas copies, 0 read as 1) ends its task, and what to change.
// The two remedies are separate sentences: run together, a task without
// a [checkpoint] table read as told to resume from one.
func UnreplicatedWhy(table string, replicas int) string {
	return fmt.Sprintf("table %s has replicas = %d: set replicas = 2 to survive a slave's death. A table a stage localizes must keep replicas = 1; such a task survives through its checkpoints instead ([checkpoint] dir, then flexps submit --resume DIR)", table, max(replicas, 1))
}

// Survivability is the Survival of a stage of kind (tasks.KindPS, ...)
// named stage over tables, whose Replicas are resolved (never 0).
func Survivability(stage, kind string, tables []kvstore.TableSpec) Survival {
	for _, t := range tables {
		if t.Replicas < 2 {
			return Survival{Why: UnreplicatedWhy(t.Name, t.Replicas)}
		}
	}
	if kind != tasks.KindPS {
		return Survival{Shards: true, Why: fmt.Sprintf("stage %s runs %s workers, which keep the model in their slave's memory: only ps stages survive the death of a slave running their workers", stage, kind)}
	}
	return Survival{Shards: true, Workers: true}
}

// lossFatal is why the stage cannot go on without slave (as slaveDead
// decides), or "" when it could or slave is not one of the stage's.
func (s *Stage) lossFatal(slave string) string {
	if slave == "" {
		return ""
	}
	sv := s.cfg.Survival
	switch {
	case !sv.Shards && slices.Contains(s.cfg.Hosts, slave):
		return sv.Why
	case !sv.Workers && len(s.ranks[slave]) > 0:
		return sv.Why
	}
	return ""
}

// slaveDead handles the death of a slave: nothing if the stage does not
// use it; otherwise either the stage fails, saying why it cannot go on,
// or the slave's ranks are counted out and the survivors take over.
func (s *Stage) slaveDead(ev SlaveDead) []Action {
	if s.dead[ev.Slave] {
		return nil
	}
	workers := s.ranks[ev.Slave]
	hosts := slices.Contains(s.cfg.Hosts, ev.Slave)
	if len(workers) == 0 && !hosts {
		return nil
	}
	fo := status.Failover{Slave: ev.Slave, Left: ev.Left}
	err := ev.Err
	if err == nil {
		err = fmt.Errorf("slave %s %s", ev.Slave, fo.Went())
	}
	sv := s.cfg.Survival
	switch {
	case len(workers) == 0 && !sv.Shards:
		return s.finish(fmt.Errorf("%w; the stage cannot go on without its shards: %s", err, sv.Why))
	case len(workers) > 0 && !sv.Workers:
		return s.finish(fmt.Errorf("%w; stage %d (%s) cannot go on without its %d %s there: %s", err, s.cfg.Stage, s.cfg.Name, len(workers), plural(len(workers), "worker"), sv.Why))
	case len(workers) >= s.live:
		return s.finish(fmt.Errorf("%w; no worker of stage %d (%s) is left alive", err, s.cfg.Stage, s.cfg.Name))
	}
	s.dead[ev.Slave] = true
	if len(workers) == 0 && ev.Known {
		return nil
	}
	if len(workers) == 0 {
		fo.Survivors = s.live
		s.res.Failovers = append(s.res.Failovers, fo)
		return []Action{Publish{Kind: status.EventFailover, Progress: s.progress,
			Message: fmt.Sprintf("stage %d (%s): slave %s, which held only shards, %s; their backups serve them", s.cfg.Stage, s.cfg.Name, ev.Slave, fo.Went())}}
	}
	for _, r := range workers {
		s.deadRank[r] = true
		delete(s.out, r)
	}
	s.live -= len(workers)
	fo.Ranks, fo.Survivors = slices.Clone(workers), s.live
	s.res.Failovers = append(s.res.Failovers, fo)
	out := []Action{ReleaseBlocks{Slave: ev.Slave, Ranks: slices.Clone(workers)}}
	if peers := s.peers(); len(peers) > 0 {
		out = append(out, FinishRanks{Stage: s.cfg.Stage, Slaves: peers, Ranks: slices.Clone(workers)})
	}
	// The dead workers' waiters at barriers are answered (nobody listens),
	// then barriers the living all reached open.
	var gone []any
	seqs := slices.Sorted(maps.Keys(s.barriers))
	for _, q := range seqs {
		for _, r := range workers {
			if w, ok := s.barriers[q][r]; ok {
				gone = append(gone, w)
				delete(s.barriers[q], r)
			}
		}
	}
	if len(gone) > 0 {
		out = append(out, ReleaseBarrier{Waiters: gone, Err: s.deadErr(workers[0])})
	}
	for _, q := range seqs {
		if len(s.barriers[q]) > 0 {
			out = append(out, s.releaseBarrier(q)...)
		}
	}
	for _, e := range slices.Sorted(maps.Keys(s.epochs)) {
		out = append(out, s.epochDone(e)...)
	}
	switch s.phase {
	case Starting:
		if !s.acks[ev.Slave] {
			s.acks[ev.Slave] = true // its answer will never come
			out = append(out, s.startedAll()...)
		}
	case Running, Stopping:
		out = append(out, s.maybeComplete()...)
	}
	return out
}

// blocksReleased records how many blocks a dead slave's workers left
// unfinished and tells the followers.
func (s *Stage) blocksReleased(ev BlocksReleased) []Action {
	for i := range s.res.Failovers {
		f := &s.res.Failovers[i]
		if f.Slave != ev.Slave || len(f.Ranks) == 0 {
			continue
		}
		f.Blocks += ev.Blocks
		return []Action{Publish{Kind: status.EventFailover, Progress: s.progress,
			Message: fmt.Sprintf("stage %d (%s): slave %s %s; %s %d unfinished %s %s to the %d %s",
				s.cfg.Stage, s.cfg.Name, ev.Slave, f.Went(), whose(len(f.Ranks)), ev.Blocks, plural(ev.Blocks, "block"), verb(ev.Blocks, "go"),
				f.Survivors, plural(f.Survivors, "survivor"))}}
	}
	return nil
}

// whose names the dead workers as owners: "its worker's", "its 2 workers'".
func whose(n int) string {
	if n == 1 {
		return "its worker's"
	}
	return fmt.Sprintf("its %d workers'", n)
}

// verb agrees a verb with n things: "1 block goes", "3 blocks go".
func verb(n int, v string) string {
	if n == 1 {
		return v + "es"
	}
	return v
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// peers are the live slaves whose consistency gates count the stage's
// workers: its shard hosts and its workers' slaves.
func (s *Stage) peers() []string {
	var out []string
	for _, h := range s.cfg.Hosts {
		if !s.dead[h] {
			out = append(out, h)
		}
	}
	for _, a := range s.cfg.Placement {
		if !s.dead[a.Slave] {
			out = append(out, a.Slave)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// liveRanks lists the live ranks in order once a worker died; nil while
// every worker lives (the common case costs nothing on the wire).
func (s *Stage) liveRanks() []int {
	if len(s.deadRank) == 0 {
		return nil
	}
	out := make([]int, 0, s.live)
	for r := range s.cfg.Workers {
		if !s.deadRank[r] {
			out = append(out, r)
		}
	}
	return out
}

func (s *Stage) deadErr(rank int) string {
	return fmt.Sprintf("stage %d (%s): worker %d is counted out: its slave was declared dead", s.cfg.Stage, s.cfg.Name, rank)
}

// Live lists the stage's live ranks (all of them while nobody died).
func (s *Stage) Live() []int {
	if r := s.liveRanks(); r != nil {
		return r
	}
	out := make([]int, s.cfg.Workers)
	for i := range out {
		out[i] = i
	}
	return out
}

// Slaves lists the slaves of the placement, in placement order.
func (s *Stage) Slaves() []string {
	out := make([]string, 0, len(s.cfg.Placement))
	for _, a := range s.cfg.Placement {
		out = append(out, a.Slave)
	}
	return out
}

// Dead lists the slaves that died during the run, sorted.
func (s *Stage) Dead() []string {
	return slices.Sorted(maps.Keys(s.dead))
}
