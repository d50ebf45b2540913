package bus

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Reconnects tells a connection's requesters when it reconnected to the
// bus: a request in flight across a reconnection (the server restarted,
// the network dropped) may have been lost, or its answer, and nothing
// says so but a timeout. Request asks once and reports it; the caller
// asks again, and the answering side must answer a repeat as the first.
type Reconnects struct {
	nc   *nats.Conn
	mu   sync.Mutex
	ch   chan struct{} // closed at the next reconnection
	last time.Time     // of the last reconnection
}

// WatchReconnects starts watching nc's reconnections; the handler it had
// (the bus log's) still runs first.
func WatchReconnects(nc *nats.Conn) *Reconnects {
	r := &Reconnects{nc: nc}
	prev := nc.Opts.ReconnectedCB
	nc.SetReconnectHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		r.mu.Lock()
		if r.ch != nil {
			close(r.ch)
			r.ch = nil
		}
		r.last = time.Now()
		r.mu.Unlock()
	})
	return r
}

// Within reports whether the connection reconnected within the last d:
// its peers may not have subscribed again yet ("no responders").
func (r *Reconnects) Within(d time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.last.IsZero() && time.Since(r.last) < d
}

// Next is closed when the connection next reconnects.
func (r *Reconnects) Next() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

// errReconnected ends a request whose connection reconnected while it
// waited.
var errReconnected = errors.New("reconnected to the bus while waiting for the answer")

// Request sends a request on subject and waits for its answer, up to
// timeout (0: until ctx ends). resend reports that the connection
// reconnected while it waited (and ctx is still live): the request or its
// answer may be lost, and the caller should ask again.
func (r *Reconnects) Request(ctx context.Context, subject string, data []byte, timeout time.Duration) (msg *nats.Msg, resend bool, err error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if timeout > 0 {
		var stop context.CancelFunc
		rctx, stop = context.WithTimeout(rctx, timeout)
		defer stop()
	}
	next := r.Next()
	go func() {
		select {
		case <-next:
			cancel(errReconnected)
		case <-rctx.Done():
		}
	}()
	msg, err = r.nc.RequestWithContext(rctx, subject, data)
	return msg, err != nil && ctx.Err() == nil && errors.Is(context.Cause(rctx), errReconnected), err
}
