package master

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/master/assign"
	"github.com/nats-io/nats.go"
)

// This file serves the FileAssigner on the bus: block requests,
// confirmations and abandoned passes. In a stage that survives a slave's
// death, a worker is told an epoch is empty only once every block of it is
// finished and none can come back (assign.Settled); in other stages of
// several workers, once nothing of it is queued and the epoch before is
// finished (assignment.next). Until then its request is held, without
// blocking the handler, and answered when a confirmation or a death
// changes the epoch, or with Retry after blockHold so the worker's own
// request timeout never fires.

// blockHold is the longest a block request is held before the worker is
// told to ask again.
const blockHold = time.Second

// assignment is one input of a running stage: its FileAssigner and the
// block requests waiting for the epoch to settle.
type assignment struct {
	a *assign.Assigner
	// settles: the workers confirm the blocks they finish, and a request
	// for a block of an epoch that is not settled is held: in a stage
	// that survives its workers' deaths (survivable) always, elsewhere
	// while the epoch before is not settled either (see next).
	settles, survivable bool
	// atBarrier are the ranks waiting at a barrier: an epoch is settled
	// without their unconfirmed blocks, which they finish only after the
	// others arrive there (a function that stops mid-pass for a Barrier,
	// svrg.sgd's last steps: held, the others never arrived).
	atBarrier map[int]bool
	held      []heldBlock
	// asked is each rank's recent numbered requests for a block (Seq) and
	// their answers (nil: held), so a request asked again gets the same
	// answer.
	asked map[int]map[int64]*proto.BlockReply
}

// askedWindow is how many of a rank's latest numbered requests are
// remembered (a rank's producers have a few in flight at once).
const askedWindow = 64

type heldBlock struct {
	msg   *nats.Msg
	rank  int
	epoch int
	seq   int64
	since time.Time
}

// repeat answers a request asked again (same rank and Seq): with the
// answer it got, or, while it is held, by holding the new asker in its
// place. False if the request is not a repeat.
func (as *assignment) repeat(msg *nats.Msg, rank int, seq int64) (blockAnswer, bool, bool) {
	if seq <= 0 {
		return blockAnswer{}, false, false
	}
	rep, ok := as.asked[rank][seq]
	if !ok {
		return blockAnswer{}, false, false
	}
	if rep != nil {
		return blockAnswer{msg, *rep}, true, true
	}
	for i := range as.held {
		if as.held[i].rank == rank && as.held[i].seq == seq {
			as.held[i].msg = msg
		}
	}
	return blockAnswer{}, false, true
}

// record remembers the answer (nil: held) to rank's numbered request seq.
func (as *assignment) record(rank int, seq int64, rep *proto.BlockReply) {
	if seq <= 0 {
		return
	}
	if as.asked == nil {
		as.asked = map[int]map[int64]*proto.BlockReply{}
	}
	m := as.asked[rank]
	if m == nil {
		m = map[int64]*proto.BlockReply{}
		as.asked[rank] = m
	}
	m[seq] = rep
	for s := range m {
		if s <= seq-askedWindow {
			delete(m, s)
		}
	}
}

// reply answers held request h with rep, remembering the answer.
func (as *assignment) reply(h heldBlock, rep proto.BlockReply) blockAnswer {
	as.record(h.rank, h.seq, &rep)
	return blockAnswer{h.msg, rep}
}

type blockAnswer struct {
	msg *nats.Msg
	rep proto.BlockReply
}

func (m *Master) onBlock(msg *nats.Msg) {
	var req proto.BlockRequest
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		m.reply(msg, proto.BlockReply{Error: "malformed block request"})
		return
	}
	if req.Instance != "" {
		if err := m.fenced(req.Slave, req.Instance); err != nil {
			m.reply(msg, proto.BlockReply{Error: err.Error()})
			return
		}
	}
	m.mu.Lock()
	as := m.assigners[assignKey{req.Task, req.Stage, req.Input}]
	if as == nil {
		running := false
		for k := range m.assigners {
			running = running || k.task == req.Task && k.stage == req.Stage
		}
		m.mu.Unlock()
		rep := proto.BlockReply{Error: fmt.Sprintf("task %s stage %d reads no input %q", req.Task, req.Stage, req.Input)}
		if !running {
			// A worker that asks as its stage is being stopped or ended.
			rep = proto.BlockReply{Error: fmt.Sprintf("task %s stage %d is not running (it ended or was stopped)", req.Task, req.Stage), Stopped: true}
		}
		m.reply(msg, rep)
		return
	}
	var out []blockAnswer
	switch {
	case req.Confirm != nil:
		as.a.Confirm(req.Rank, req.Epoch, *req.Confirm)
		out = append(out, blockAnswer{msg, proto.BlockReply{}})
		out = append(out, as.serveHeld()...)
	case req.Abandon:
		if as.a.Abandon(req.Rank, req.Epoch) > 0 {
			out = as.serveHeld()
		}
		out = append(out, blockAnswer{msg, proto.BlockReply{}})
	default:
		if a, answered, ok := as.repeat(msg, req.Rank, req.Seq); ok {
			if answered {
				out = append(out, a)
			}
			break
		}
		if rep, ok := as.next(req.Rank, req.Epoch); ok {
			as.record(req.Rank, req.Seq, &rep)
			out = append(out, blockAnswer{msg, rep})
		} else {
			as.record(req.Rank, req.Seq, nil)
			as.held = append(as.held, heldBlock{msg: msg, rank: req.Rank, epoch: req.Epoch, seq: req.Seq, since: m.cfg.Now()})
		}
	}
	m.mu.Unlock()
	m.answer(out)
}

// next answers rank's request for a block of epoch; false when the answer
// must wait. In a stage that survives its workers' deaths an epoch is
// over for a worker once it is settled: every block finished, none can
// come back. Elsewhere a worker may start the next epoch once nothing of
// this one is queued and the one before it is finished, while the others
// finish this one's last blocks: never two epochs ahead of the slowest
// (before, with more workers than blocks, idle workers ran through every
// epoch at once).
func (as *assignment) next(rank, epoch int) (proto.BlockReply, bool) {
	b, local, ok := as.a.Next(rank, epoch)
	switch {
	case ok:
		return proto.BlockReply{Block: b, Local: local}, true
	case !as.settles:
		return proto.BlockReply{Done: true}, true
	case !as.survivable && epoch > 0 && as.a.Began(epoch-1) && !as.a.SettledBut(epoch-1, as.atBarrier):
		return proto.BlockReply{}, false
	case as.a.SettledBut(epoch, as.atBarrier), !as.survivable:
		return proto.BlockReply{Done: true}, true
	}
	return proto.BlockReply{}, false
}

// serveHeld answers the held requests the epoch's change lets go.
func (as *assignment) serveHeld() []blockAnswer {
	var out []blockAnswer
	kept := as.held[:0]
	for _, h := range as.held {
		if rep, ok := as.next(h.rank, h.epoch); ok {
			out = append(out, as.reply(h, rep))
			continue
		}
		kept = append(kept, h)
	}
	clear(as.held[len(kept):])
	as.held = kept
	return out
}

// expire tells the requests held since before cutoff to ask again.
func (as *assignment) expire(cutoff time.Time) []blockAnswer {
	var out []blockAnswer
	kept := as.held[:0]
	for _, h := range as.held {
		if h.since.Before(cutoff) {
			out = append(out, as.reply(h, proto.BlockReply{Retry: true}))
			continue
		}
		kept = append(kept, h)
	}
	clear(as.held[len(kept):])
	as.held = kept
	return out
}

func (m *Master) answer(out []blockAnswer) {
	for _, a := range out {
		m.reply(a.msg, a.rep)
	}
}

// expireHeld answers the block requests of inputs held longer than
// blockHold with Retry.
func (m *Master) expireHeld(inputs []assignKey, now time.Time) {
	var out []blockAnswer
	m.mu.Lock()
	for _, k := range inputs {
		if as := m.assigners[k]; as != nil {
			out = append(out, as.expire(now.Add(-blockHold))...)
		}
	}
	m.mu.Unlock()
	m.answer(out)
}

// removeRanks puts the unconfirmed blocks of dead ranks back in the
// queues of inputs (every epoch) and refuses the ranks from then on; it
// returns how many blocks went back.
func (m *Master) removeRanks(inputs []assignKey, ranks []int) int {
	var out []blockAnswer
	n := 0
	m.mu.Lock()
	for _, k := range inputs {
		as := m.assigners[k]
		if as == nil {
			continue
		}
		for _, r := range ranks {
			for _, bs := range as.a.Remove(r) {
				n += len(bs)
			}
		}
		// Held requests of the dead ranks are answered too: nobody
		// listens, and they must not take the released blocks.
		kept := as.held[:0]
		for _, h := range as.held {
			if slices.Contains(ranks, h.rank) {
				out = append(out, as.reply(h, proto.BlockReply{Error: fmt.Sprintf("worker %d is counted out of the stage: its slave was declared dead", h.rank)}))
				continue
			}
			kept = append(kept, h)
		}
		clear(as.held[len(kept):])
		as.held = kept
		out = append(out, as.serveHeld()...)
	}
	m.mu.Unlock()
	m.answer(out)
	return n
}

// atBarrier notes, in the assignments of the stage's inputs, that rank
// waits at a barrier, and answers the held requests that lets go.
func (m *Master) atBarrier(inputs []assignKey, rank int) {
	var out []blockAnswer
	m.mu.Lock()
	for _, k := range inputs {
		if as := m.assigners[k]; as != nil && as.settles {
			if as.atBarrier == nil {
				as.atBarrier = make(map[int]bool)
			}
			as.atBarrier[rank] = true
			out = append(out, as.serveHeld()...)
		}
	}
	m.mu.Unlock()
	m.answer(out)
}

// barrierReleased notes that the stage's barrier released its workers:
// none waits at one any more.
func (m *Master) barrierReleased(inputs []assignKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range inputs {
		if as := m.assigners[k]; as != nil {
			clear(as.atBarrier)
		}
	}
}

// rankEnded gives up what a worker that returned from its stage function
// still held: a pass it never closed must not keep the others' epoch end
// waiting.
func (m *Master) rankEnded(inputs []assignKey, rank int) {
	var out []blockAnswer
	m.mu.Lock()
	for _, k := range inputs {
		if as := m.assigners[k]; as != nil && as.a.AbandonAll(rank) > 0 {
			out = append(out, as.serveHeld()...)
		}
	}
	m.mu.Unlock()
	m.answer(out)
}

// setAssigner installs the assigner of an input of a running stage (nil:
// the stage ended; requests still held are answered with an error).
func (m *Master) setAssigner(k assignKey, a *assign.Assigner, settles, survivable bool) {
	var out []blockAnswer
	m.mu.Lock()
	if old := m.assigners[k]; old != nil {
		for _, h := range old.held {
			out = append(out, blockAnswer{h.msg, proto.BlockReply{Error: fmt.Sprintf("task %s stage %d ended", k.task, k.stage)}})
		}
	}
	if a == nil {
		delete(m.assigners, k)
	} else {
		m.assigners[k] = &assignment{a: a, settles: settles, survivable: survivable}
	}
	m.mu.Unlock()
	m.answer(out)
}
