package slave

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
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

// askMaster sends a request to a master subject, waiting up to timeout for
// each answer (0: until ctx ends). It asks again while no one answers on
// that subject, and when the slave reconnects to the bus while it waits
// (the request or its answer may have been lost with the connection): the
// master's handlers answer a repeated request as the first (blocks by
// BlockRequest.Seq, barriers by their Seq, worker ends once).
func (s *Slave) askMaster(ctx context.Context, subject string, data []byte, timeout time.Duration) (*nats.Msg, error) {
	pause := askFirstPause
	for {
		msg, resend, err := s.reconnects.Request(ctx, subject, data, timeout)
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

// eventAckTimeout is how long a worker event waits for the master's
// acknowledgement before it is sent again.
const eventAckTimeout = 5 * time.Second

// acknowledged reports whether a worker event goes through the outbox: the
// events the master counts on (an epoch's report, a worker's end, a lost
// shard), which a bus outage must not lose (a lost end would stall its
// stage for good). Progress reports are published and may be lost.
func acknowledged(kind string) bool {
	return kind == proto.WorkerEpoch || kind == proto.WorkerDone || kind == proto.WorkerError || kind == proto.ShardLost
}

// outbox sends the acknowledged worker events one at a time, in the order
// they were queued (a worker's last epoch before its end), each until the
// master acknowledges it (a repeat is ignored there).
type outbox struct {
	mu   sync.Mutex
	q    []queuedEvent
	wake chan struct{}
}

type queuedEvent struct {
	ev   proto.WorkerEvent
	data []byte
}

func (o *outbox) push(ev proto.WorkerEvent, data []byte) {
	o.mu.Lock()
	o.q = append(o.q, queuedEvent{ev, data})
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *outbox) front() (queuedEvent, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.q) == 0 {
		return queuedEvent{}, false
	}
	return o.q[0], true
}

func (o *outbox) pop() {
	o.mu.Lock()
	o.q[0] = queuedEvent{}
	o.q = o.q[1:]
	o.mu.Unlock()
}

// sendOutbox is the outbox's goroutine. Once the slave shuts down, what is
// still queued gets one try each (the workers' ends of a slave that stops).
func (s *Slave) sendOutbox() {
	defer s.wg.Done()
	for {
		e, ok := s.outbox.front()
		if !ok {
			select {
			case <-s.outbox.wake:
				continue
			case <-s.ctx.Done():
			}
			if _, ok := s.outbox.front(); !ok {
				return
			}
			continue
		}
		s.deliver(e.ev, e.data)
		s.outbox.pop()
	}
}

// deliver sends a worker event until the master acknowledges it, the
// master is declared gone, or the slave shuts down. An event of a slave
// that shuts down (its workers stopped) gets one try, as a plain publish
// would. Another error (the master refused the sender) is logged.
func (s *Slave) deliver(ev proto.WorkerEvent, data []byte) {
	log := func(l *zerolog.Event) *zerolog.Event {
		return l.Str("task", ev.Task).Int("stage", ev.Stage).Int("worker", ev.Rank).Str("kind", ev.Kind)
	}
	if s.ctx.Err() != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, _, err := s.reconnects.Request(ctx, s.subj.Event(), data, 0); err != nil {
			log(s.log.Debug()).Err(err).Msg("worker event of a slave shutting down not delivered")
		}
		return
	}
	pause := askFirstPause
	for {
		msg, err := s.askMaster(s.ctx, s.subj.Event(), data, eventAckTimeout)
		if err == nil {
			var rep proto.CtlReply
			if jerr := json.Unmarshal(msg.Data, &rep); jerr == nil && !rep.OK && rep.Error != "" {
				log(s.log.Warn()).Str("error", rep.Error).Msg("the master refused the worker event")
			}
			return
		}
		if s.ctx.Err() != nil || s.masterGone.Load() {
			log(s.log.Warn()).Err(err).Msg("worker event not delivered: the master is gone or this slave is shutting down")
			return
		}
		if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			log(s.log.Error()).Err(err).Msg("cannot send the worker event to the master")
			return
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, askMaxPause)
	}
}
