package transport

import (
	"context"
	"io"
	"strconv"
	"strings"
	"sync"
)

// DefaultMemPayload is Mem's MaxPayload: NATS's default, so messages are
// split the same way on both transports.
const DefaultMemPayload = 1 << 20

// Mem connects the nodes and inboxes of one process. Each served node has
// one unbounded queue drained by one goroutine, so requests are handled
// one at a time in the order they were sent (a total order, stronger than
// the per-sender FIFO the interface promises). Send and Reply copy data.
type Mem struct {
	mu      sync.Mutex
	nodes   map[string]*memNode
	inboxes map[string]*queue
	next    uint64
	payload int
}

// NewMem returns an empty in-process transport.
func NewMem() *Mem {
	return &Mem{nodes: map[string]*memNode{}, inboxes: map[string]*queue{}, payload: DefaultMemPayload}
}

type memNode struct {
	m    *Mem
	name string
	q    *queue
	done chan struct{}
	once sync.Once
}

func (t *Mem) Serve(node string, h Handler) (io.Closer, error) {
	n := &memNode{m: t, name: node, q: newQueue(), done: make(chan struct{})}
	t.mu.Lock()
	if old := t.nodes[node]; old != nil {
		t.mu.Unlock()
		return nil, &servedError{node: node}
	}
	t.nodes[node] = n
	t.mu.Unlock()
	go func() {
		defer close(n.done)
		for {
			m, err := n.q.pop(context.Background())
			if err != nil {
				return
			}
			h(m.Data, m.Tail)
		}
	}()
	return n, nil
}

type servedError struct{ node string }

func (e *servedError) Error() string { return "transport: node " + e.node + " is already served" }

// Close stops the node: later requests fail as unreachable, queued ones
// are dropped, and the handler is not called any more once Close returns.
func (n *memNode) Close() error {
	n.once.Do(func() {
		n.m.mu.Lock()
		if n.m.nodes[n.name] == n {
			delete(n.m.nodes, n.name)
		}
		n.m.mu.Unlock()
		n.q.close()
		<-n.done
	})
	return nil
}

// Send queues a copy of data for node (the reply address travels in the
// message's Tail field); an unserved node is an *UnreachableError.
func (t *Mem) Send(node, reply string, data []byte) error {
	t.mu.Lock()
	n := t.nodes[node]
	t.mu.Unlock()
	if n == nil || !n.q.push(Msg{Data: append([]byte(nil), data...), Tail: reply}) {
		return &UnreachableError{Node: node}
	}
	return nil
}

func (t *Mem) Reply(addr string, data []byte) error {
	base, tail, _ := strings.Cut(addr, ".")
	t.mu.Lock()
	q := t.inboxes[base]
	t.mu.Unlock()
	if q != nil {
		q.push(Msg{Tail: tail, Data: append([]byte(nil), data...)})
	}
	return nil
}

func (t *Mem) MaxPayload() int { return t.payload }

func (t *Mem) Listen() (Inbox, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	addr := "_MEMINBOX" + strconv.FormatUint(t.next, 10)
	q := newQueue()
	t.inboxes[addr] = q
	return &memInbox{m: t, addr: addr, q: q}, nil
}

type memInbox struct {
	m    *Mem
	addr string
	q    *queue
}

func (in *memInbox) Addr() string { return in.addr }

func (in *memInbox) Next(ctx context.Context) (Msg, error) { return in.q.pop(ctx) }

func (in *memInbox) Close() error {
	in.m.mu.Lock()
	delete(in.m.inboxes, in.addr)
	in.m.mu.Unlock()
	in.q.close()
	return nil
}
