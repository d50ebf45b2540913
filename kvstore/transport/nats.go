package transport

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
)

// NATS carries requests over a NATS connection: node n serves the subject
// subject(n), inboxes are NATS reply inboxes. NATS keeps one connection's
// messages to one subject in order, which is the per-sender FIFO the store
// needs; a request to a subject nobody subscribes comes back as a
// no-responders status on its reply address.
type NATS struct {
	nc      *nats.Conn
	subject func(node string) string
	gate    func() bool // see Gated
}

// NewNATS returns the transport over nc addressing node n at subject(n).
func NewNATS(nc *nats.Conn, subject func(node string) string) *NATS {
	return &NATS{nc: nc, subject: subject}
}

// Gated makes Serve hold each request until gate returns: true to deliver
// it, false to leave it unanswered. A slave gates on its admission (see
// TCPConfig.Ready).
func (t *NATS) Gated(gate func() bool) *NATS {
	t.gate = gate
	return t
}

func (t *NATS) Serve(node string, h Handler) (io.Closer, error) {
	subj := t.subject(node)
	gate := t.gate
	sub, err := t.nc.Subscribe(subj, func(m *nats.Msg) {
		if gate != nil && !gate() {
			return
		}
		h(m.Data, m.Reply)
	})
	if err != nil {
		return nil, fmt.Errorf("transport: subscribe %s: %w", subj, err)
	}
	// Never drop a message: an Add dropped by a slow-consumer limit would
	// be a lost update.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("transport: subscribe %s: %w", subj, err)
	}
	// Make sure the server knows the subscription before anyone is told
	// this node serves.
	if err := t.nc.Flush(); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("transport: subscribe %s: %w", subj, err)
	}
	return &natsService{nc: t.nc, sub: sub}, nil
}

type natsService struct {
	nc  *nats.Conn
	sub *nats.Subscription
}

func (s *natsService) Close() error {
	err := s.sub.Unsubscribe()
	// From now on requests get "no responders", not silence.
	if ferr := flushUnsubscribe(s.nc); err == nil && ferr != nil {
		err = ferr
	}
	return err
}

// closeFlushTimeout bounds the wait for the server to confirm an
// unsubscribe when a service closes.
const closeFlushTimeout = 2 * time.Second

// flushUnsubscribe waits until the server has processed an unsubscribe,
// when there is a server to tell: on a connection that is down (the bus
// went away, reconnecting) the server holds no subscription of ours, and
// a reconnect does not restore an unsubscribed one, so there is nothing
// to wait for (a plain Flush waited nats' 10 s there, and so did every
// slave's shutdown after its master was gone).
func flushUnsubscribe(nc *nats.Conn) error {
	if !nc.IsConnected() {
		return nil
	}
	if err := nc.FlushTimeout(closeFlushTimeout); err != nil && nc.IsConnected() {
		return err
	}
	return nil
}

func (t *NATS) Send(node, reply string, data []byte) error {
	subj := t.subject(node)
	var err error
	if reply == "" {
		err = t.nc.Publish(subj, data)
	} else {
		err = t.nc.PublishRequest(subj, reply, data)
	}
	if err != nil {
		return fmt.Errorf("transport: send to node %s: %w", node, err)
	}
	return nil
}

func (t *NATS) Reply(addr string, data []byte) error {
	if err := t.nc.Publish(addr, data); err != nil {
		return fmt.Errorf("transport: reply: %w", err)
	}
	return nil
}

func (t *NATS) MaxPayload() int { return int(t.nc.MaxPayload()) }

// Listen subscribes a fresh inbox. Answers are queued without bound as
// they arrive, so a reader that pauses never makes NATS drop them.
func (t *NATS) Listen() (Inbox, error) {
	in := &natsInbox{addr: t.nc.NewRespInbox(), q: newQueue()}
	sub, err := t.nc.Subscribe(in.addr+".>", in.deliver)
	if err != nil {
		return nil, fmt.Errorf("transport: reply inbox: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("transport: reply inbox: %w", err)
	}
	in.sub = sub
	return in, nil
}

type natsInbox struct {
	addr string
	sub  *nats.Subscription
	q    *queue
}

// noResponders is the status NATS sends to a request's reply subject when
// no subscriber got it.
const noResponders = "503"

func (in *natsInbox) deliver(m *nats.Msg) {
	msg := Msg{Tail: m.Subject[min(len(in.addr)+1, len(m.Subject)):], Data: m.Data}
	if len(m.Data) == 0 && m.Header.Get("Status") == noResponders {
		msg.NoResponder = true
	}
	in.q.push(msg)
}

func (in *natsInbox) Addr() string { return in.addr }

func (in *natsInbox) Next(ctx context.Context) (Msg, error) { return in.q.pop(ctx) }

func (in *natsInbox) Close() error {
	err := in.sub.Unsubscribe()
	in.q.close()
	return err
}
