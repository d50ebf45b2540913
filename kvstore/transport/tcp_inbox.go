package transport

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// Answers: every inbox is a NATS inbox too (answers over the fallback path
// land there directly); answers arriving over connections are pushed into
// the same queue, and every answer, whichever path it took, settles the
// request that was waiting for it.

// Listen opens an inbox for answers arriving over connections and NATS.
func (t *TCP) Listen() (Inbox, error) {
	in := &natsInbox{addr: t.nc.NewRespInbox(), q: newQueue()}
	sub, err := t.nc.Subscribe(in.addr+".>", func(m *nats.Msg) {
		t.settle(m.Subject)
		in.deliver(m)
	})
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err != nil {
		if sub != nil {
			sub.Unsubscribe()
		}
		return nil, fmt.Errorf("transport: reply inbox: %w", err)
	}
	in.sub = sub
	t.imu.Lock()
	t.inboxes[in.addr] = in
	t.imu.Unlock()
	return &tcpInbox{natsInbox: in, t: t}, nil
}

type tcpInbox struct {
	*natsInbox
	t *TCP
}

func (in *tcpInbox) Close() error {
	in.t.imu.Lock()
	delete(in.t.inboxes, in.addr)
	in.t.imu.Unlock()
	in.t.forget(in.addr + ".")
	return in.natsInbox.Close()
}

// track notes a request sent on c whose answer comes to addr; false if c
// broke already.
func (t *TCP) track(addr string, c *tcpConn) bool {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	if c.dead {
		return false
	}
	t.pending[addr] = append(t.pending[addr], c)
	return true
}

// ownsInbox reports whether addr is below one of this transport's inboxes.
func (t *TCP) ownsInbox(addr string) bool {
	t.imu.RLock()
	defer t.imu.RUnlock()
	for i := len(addr); i > 0; i-- {
		if i == len(addr) || addr[i] == '.' {
			if t.inboxes[addr[:i]] != nil {
				return true
			}
		}
	}
	return false
}

// settle notes an answer to addr, whichever path it came by.
func (t *TCP) settle(addr string) {
	t.pmu.Lock()
	if q, ok := t.pending[addr]; ok {
		if len(q) <= 1 {
			delete(t.pending, addr)
		} else {
			q[0] = nil
			t.pending[addr] = q[1:]
		}
	}
	t.pmu.Unlock()
}

// forget drops the requests answered below prefix (a closed inbox).
func (t *TCP) forget(prefix string) {
	t.pmu.Lock()
	for a := range t.pending {
		if strings.HasPrefix(a, prefix) {
			delete(t.pending, a)
		}
	}
	t.pmu.Unlock()
}

// deliver puts an answer into the inbox addr is below.
func (t *TCP) deliver(addr string, data []byte, noResponder bool, err error) {
	t.deliverPooled(addr, data, nil, noResponder, err)
}

// deliverPooled is deliver of data in pooled buffer buf (Msg.Release
// gives it back).
func (t *TCP) deliverPooled(addr string, data []byte, buf *[]byte, noResponder bool, err error) {
	if err == nil {
		t.settle(addr)
	}
	t.imu.RLock()
	var in *natsInbox
	var tail string
	for i := len(addr); i > 0; i-- {
		if i == len(addr) || addr[i] == '.' {
			if in = t.inboxes[addr[:i]]; in != nil {
				tail = addr[min(i+1, len(addr)):]
				break
			}
		}
	}
	t.imu.RUnlock()
	if in != nil {
		in.q.push(Msg{Tail: tail, Data: data, NoResponder: noResponder, Err: err, buf: buf})
		return
	}
	putBuf(buf) // no inbox: nobody will read it
}
