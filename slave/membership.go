package slave

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/master/membership"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// A slave's side of membership. The slave is an incarnation: its id plus
// an instance drawn at start. The master broadcasts the membership view at
// every change of its epoch (and every second); the slave keeps the latest
// one of the master it serves, and:
//   - its KV server refuses requests whose sender incarnation the view
//     fences (a slave declared dead must not write to live shards);
//   - a member that vanished from the view died or left: stages with
//     shards there fail at once, naming it, instead of waiting on it;
//   - a view that no longer lists this slave's own incarnation (it was
//     declared dead, say while stopped or cut off) fences the slave
//     itself: it drops every task, shard and retained model, logs it, and
//     rejoins as a fresh instance with a new incarnation number.

// incarnation is who this slave is in the membership.
type incarnation struct {
	instance string
	number   uint64 // the epoch that admitted it; 0 before the join
	admitted uint64 // views older than this epoch are ignored
}

// fenceView is the view the KV server checks requests against.
type fenceView struct {
	view membership.View
	live map[uint64]bool
}

func newFenceView(v membership.View) *fenceView {
	f := &fenceView{view: v, live: make(map[uint64]bool, len(v.Members))}
	for _, m := range v.Members {
		f.live[m.Incarnation] = true
	}
	return f
}

// fenced is the KV server's check; it answers in a map lookup.
func (s *Slave) fenced(from uint64) error {
	f := s.fence.Load()
	if f == nil || from > f.view.Epoch || f.live[from] {
		return nil
	}
	return fmt.Errorf("kvstore: slave %s refuses the request of incarnation %d: that sender was declared dead or left (membership epoch %d) and is fenced", s.cfg.ID, from, f.view.Epoch)
}

// self returns this slave's incarnation.
func (s *Slave) self() incarnation {
	s.imu.Lock()
	defer s.imu.Unlock()
	return s.inc
}

// Incarnation is the slave's membership incarnation number (0 before it
// joined or while it rejoins).
func (s *Slave) Incarnation() uint64 { return s.self().number }

// Epoch is the membership epoch of the latest view the slave accepted.
func (s *Slave) Epoch() uint64 {
	if f := s.fence.Load(); f != nil {
		return f.view.Epoch
	}
	return 0
}

func (s *Slave) joinRequest() proto.JoinRequest {
	return proto.JoinRequest{ID: s.cfg.ID, Host: s.cfg.Host, Slots: s.cfg.Slots, PID: os.Getpid(), Instance: s.self().instance}
}

// admitted records the master's answer to a join, then takes the view
// that arrived while the slave waited for it (the master broadcasts the
// view of the admission before its answer arrives).
func (s *Slave) admitted(rep proto.JoinReply) {
	// Under imu with takeView's test for a join in progress, so that a
	// view heard meanwhile is either pending here or taken by takeView.
	s.imu.Lock()
	s.inc.number, s.inc.admitted = rep.Incarnation, rep.Epoch
	v := s.pendingView.Swap(nil)
	s.imu.Unlock()
	if v != nil {
		s.takeView(*v)
	}
}

// onMembership takes the master's view.
func (s *Slave) onMembership(msg *nats.Msg) {
	var v proto.Membership
	if err := json.Unmarshal(msg.Data, &v); err != nil {
		s.log.Warn().Err(err).Msg("malformed membership view; ignored")
		return
	}
	s.takeView(v)
}

func (s *Slave) takeView(v proto.Membership) {
	s.amu.Lock()
	master := s.masterInstance
	s.amu.Unlock()
	s.imu.Lock()
	me := s.inc
	if me.number == 0 {
		s.pendingView.Store(&v) // joining: admitted takes it
		s.imu.Unlock()
		return
	}
	s.imu.Unlock()
	if v.Master != master || v.Epoch < me.admitted {
		return // another master's, or older than our admission
	}
	prev := s.fence.Load()
	if prev != nil && prev.view.Epoch >= v.Epoch {
		return // already known (views are sent again every second)
	}
	s.fence.Store(newFenceView(v.View))
	if !v.Has(me.number) && s.leaving.Load() {
		// The view of this slave's own clean leave: nothing to drop or
		// rejoin (before, every clean shutdown logged, at error level,
		// that the master had declared it dead and that it would rejoin).
		return
	}
	if !v.Has(me.number) {
		s.log.Error().Str("instance", me.instance).Uint64("incarnation", me.number).Uint64("epoch", v.Epoch).
			Msg("this slave was declared dead by the master and is fenced: dropping all its tasks, shards and retained models, then rejoining as a fresh instance")
		s.rejoin(fmt.Sprintf("slave %s was declared dead at membership epoch %d", s.cfg.ID, v.Epoch), true)
		return
	}
	if prev == nil {
		return
	}
	for _, m := range prev.view.Members {
		if !v.Has(m.Incarnation) && m.ID != s.cfg.ID {
			s.PeerDead(m.ID, fmt.Sprintf("no longer a member at membership epoch %d", v.Epoch))
		}
	}
}

// rejoin drops everything this incarnation holds and joins again as a
// fresh instance: after it was declared dead (the master failed or
// re-placed its work, so all of it is stale), or after the master
// restarted (whose membership starts anew; fresh is false, because the
// new master may have taken this instance in by its heartbeats already).
func (s *Slave) rejoin(reason string, fresh bool) {
	if !s.rejoining.CompareAndSwap(false, true) {
		return
	}
	// Drop first, then change the instance: a worker report that slips
	// out before the drop still carries the old, fenced instance.
	s.step(Event{Kind: EvFenced, Reason: reason})
	s.imu.Lock()
	inst := s.inc.instance
	if fresh {
		inst = nuid.Next()
	}
	s.inc = incarnation{instance: inst}
	s.imu.Unlock()
	s.fence.Store(nil)
	// Not on the bus's callback goroutine: the join waits for an answer.
	// A view that arrives while the slave shuts down starts no rejoin.
	started := s.background(func() {
		for s.ctx.Err() == nil {
			rep, err := s.join()
			if err == nil {
				s.log.Info().Str("instance", s.self().instance).Uint64("incarnation", rep.Incarnation).Uint64("epoch", rep.Epoch).Msg("slave rejoined the cluster as a fresh instance")
				// Done before the new incarnation is taken: a view that
				// fences it too (declared dead again while it joined;
				// admitted may hold that view, or the subscription may
				// bring it at once) must start the next rejoin, not find
				// this one still running and be dropped (the slave then
				// kept a retired incarnation, a member of no view).
				s.rejoining.Store(false)
				s.admitted(rep)
				return
			}
			if errors.Is(err, s.ctx.Err()) {
				s.rejoining.Store(false)
				return
			}
			s.log.Error().Err(err).Msg("rejoin failed; trying again")
			select {
			case <-time.After(time.Second):
			case <-s.ctx.Done():
			}
		}
		s.rejoining.Store(false)
	})
	if !started {
		s.rejoining.Store(false)
	}
}

// leave tells the master this slave shuts down cleanly, so it is not
// reported dead after the failure timeout.
func (s *Slave) leave() {
	s.leaving.Store(true)
	me := s.self()
	if me.number == 0 {
		return
	}
	data, err := json.Marshal(proto.Leave{ID: s.cfg.ID, Instance: me.instance})
	if err == nil {
		err = s.nc.Publish(s.subj.Leave(), data)
	}
	if err == nil {
		err = s.nc.FlushTimeout(time.Second)
	}
	if err != nil {
		s.log.Warn().Err(err).Msg("cannot tell the master this slave leaves; it will be declared dead after the failure timeout")
	}
}
