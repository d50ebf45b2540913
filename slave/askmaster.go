package slave

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/nats-io/nats.go"
)

// The bus can lose the master for a moment: an external NATS server that
// restarts, or the reconnect window after it, when this slave is back on
// the bus before the master has subscribed again. A request nobody
// answered ("no responders") reached nobody, so asking again is safe;
// askMaster does so with a growing pause until the context ends, which the
// master watchdog does once the master has been silent (while this slave
// hears the bus) for its dead_after.
const (
	askFirstPause = 20 * time.Millisecond
	askMaxPause   = 500 * time.Millisecond
)

// reconnectCh is closed when the slave next reconnects to the bus.
func (s *Slave) reconnectCh() <-chan struct{} {
	s.rcmu.Lock()
	defer s.rcmu.Unlock()
	if s.rc == nil {
		s.rc = make(chan struct{})
	}
	return s.rc
}

// errReconnected ends a request whose asker reconnected to the bus while
// it waited: the request or its answer may be lost.
var errReconnected = errors.New("reconnected to the bus while waiting for the answer")

// askMaster sends a request to a master subject, waiting up to timeout for
// each answer (0: until ctx ends). It asks again while no one answers on
// that subject, and when the slave reconnects to the bus while it waits
// (the request or its answer may have been lost with the connection): the
// master's handlers answer a repeated request as the first (blocks by
// BlockRequest.Seq, barriers by their Seq, worker ends once).
func (s *Slave) askMaster(ctx context.Context, subject string, data []byte, timeout time.Duration) (*nats.Msg, error) {
	pause := askFirstPause
	for {
		msg, resend, err := s.askOnce(ctx, subject, data, timeout)
		if resend {
			continue
		}
		if err == nil || !errors.Is(err, nats.ErrNoResponders) || s.masterGone.Load() {
			return msg, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
		pause = min(2*pause, askMaxPause)
	}
}

// askOnce is one try of askMaster; resend says the slave reconnected to
// the bus while it waited.
func (s *Slave) askOnce(ctx context.Context, subject string, data []byte, timeout time.Duration) (msg *nats.Msg, resend bool, err error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if timeout > 0 {
		var stop context.CancelFunc
		rctx, stop = context.WithTimeout(rctx, timeout)
		defer stop()
	}
	rc := s.reconnectCh()
	go func() {
		select {
		case <-rc:
			cancel(errReconnected)
		case <-rctx.Done():
		}
	}()
	msg, err = s.nc.RequestWithContext(rctx, subject, data)
	return msg, err != nil && ctx.Err() == nil && errors.Is(context.Cause(rctx), errReconnected), err
}

// eventAckTimeout is how long a terminal worker event waits for the
// master's acknowledgement before it is sent again.
const eventAckTimeout = 5 * time.Second

// terminal reports whether a worker event ends something the master waits
// for (a worker's end, a lost shard): such an event lost on the bus would
// stall its stage for good, so it is delivered until acknowledged.
func terminal(kind string) bool {
	return kind == proto.WorkerDone || kind == proto.WorkerError || kind == proto.ShardLost
}

// deliver sends a terminal worker event until the master acknowledges it
// (a repeat of one that arrived is ignored there), the master is declared
// gone, or the slave shuts down. Another error (the master refused the
// sender) is logged.
func (s *Slave) deliver(ev proto.WorkerEvent, data []byte) {
	pause := askFirstPause
	// The first try outlives the slave's context: an event of a slave
	// that shuts down (its workers stopped) still reaches the master.
	ctx := context.WithoutCancel(s.ctx)
	for {
		msg, err := s.askMaster(ctx, s.subj.Event(), data, eventAckTimeout)
		ctx = s.ctx
		if err == nil {
			var rep proto.CtlReply
			if jerr := json.Unmarshal(msg.Data, &rep); jerr == nil && !rep.OK && rep.Error != "" {
				s.log.Warn().Str("task", ev.Task).Int("stage", ev.Stage).Int("worker", ev.Rank).Str("kind", ev.Kind).Str("error", rep.Error).Msg("the master refused the worker event")
			}
			return
		}
		if s.ctx.Err() != nil || s.masterGone.Load() {
			s.log.Warn().Err(err).Str("task", ev.Task).Int("stage", ev.Stage).Int("worker", ev.Rank).Str("kind", ev.Kind).Msg("worker event not delivered: the master is gone or this slave is shutting down")
			return
		}
		if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			s.log.Error().Err(err).Str("task", ev.Task).Int("stage", ev.Stage).Int("worker", ev.Rank).Str("kind", ev.Kind).Msg("cannot send the worker event to the master")
			return
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, askMaxPause)
	}
}
