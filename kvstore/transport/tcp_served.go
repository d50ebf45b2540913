package transport

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// maxServedQueue bounds the request bytes a served node holds from its
// connections: past it their readers wait (the senders feel it as TCP
// backpressure). Requests from NATS are never held back (NATS would drop
// what its client does not take).
const maxServedQueue = 64 << 20

// tcpServed is a node served by an endpoint: connection readers and the
// NATS subscription queue its requests, and one goroutine hands them to
// the handler in arrival order. Reading the next request off a connection
// thus overlaps handling the current one, as the NATS client's reader and
// subscription goroutines do.
type tcpServed struct {
	h       Handler
	mu      sync.Mutex
	cond    *sync.Cond // items arrived, room freed, or closed
	items   []servedReq
	head    int
	bytes   int // of the queued requests that came from connections
	stopped bool
	done    chan struct{}

	sub   *nats.Subscription
	hello *nats.Subscription // when the node is not the endpoint itself
}

type servedReq struct {
	data  []byte
	reply string
	buf   *[]byte // pooled buffer holding data (nil: NATS's)
}

func newServed(h Handler) *tcpServed {
	s := &tcpServed{h: h, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	return s
}

// push queues a request; wait (a connection's reader) waits while the
// queue is full. False once the node is stopped.
func (s *tcpServed) push(data []byte, reply string, buf *[]byte, wait bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for wait && s.bytes >= maxServedQueue && !s.stopped {
		s.cond.Wait()
	}
	if s.stopped {
		return false
	}
	s.items = append(s.items, servedReq{data: data, reply: reply, buf: buf})
	if buf != nil {
		s.bytes += len(data)
	}
	s.cond.Broadcast()
	return true
}

func (s *tcpServed) run() {
	defer close(s.done)
	var last int // bytes of the request handled last, freed at the next pop
	for {
		s.mu.Lock()
		if last > 0 {
			s.bytes -= last
			s.cond.Broadcast()
		}
		for s.head == len(s.items) && !s.stopped {
			s.cond.Wait()
		}
		if s.stopped {
			s.mu.Unlock()
			return
		}
		r := s.items[s.head]
		s.items[s.head] = servedReq{}
		s.head++
		if s.head == len(s.items) {
			s.items, s.head = s.items[:0], 0
		}
		s.mu.Unlock()
		s.h(r.data, r.reply)
		last = 0
		if r.buf != nil {
			last = len(r.data)
			putBuf(r.buf)
		}
	}
}

// stop unsubscribes, drops what is queued and waits out a handler call
// under way: the handler is not called once it returns.
func (s *tcpServed) stop(t *TCP) error {
	var err error
	if s.sub != nil {
		err = s.sub.Unsubscribe()
		if ferr := flushUnsubscribe(t.nc); err == nil && ferr != nil {
			err = ferr
		}
	}
	if s.hello != nil {
		s.hello.Unsubscribe()
	}
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		for _, r := range s.items[s.head:] {
			putBuf(r.buf)
		}
		s.items = nil
		s.cond.Broadcast()
	}
	s.mu.Unlock()
	<-s.done
	return err
}

// Request frames are read into pooled buffers of a few size classes, so a
// steady stream of requests allocates nothing.
var bufClasses = [...]int{4 << 10, 64 << 10, bulkSize}

var bufPools [len(bufClasses)]sync.Pool

// getBuf returns a buffer of at least n bytes.
func getBuf(n int) *[]byte {
	for i, c := range bufClasses {
		if n <= c {
			if i == bulkClass {
				if b := bulk.get(); b != nil {
					return b
				}
			}
			if b, ok := bufPools[i].Get().(*[]byte); ok {
				return b
			}
			b := make([]byte, c)
			return &b
		}
	}
	b := make([]byte, n)
	return &b
}

func putBuf(b *[]byte) {
	if b == nil {
		return
	}
	for i, c := range bufClasses {
		if cap(*b) == c {
			if i == bulkClass && bulk.put(b) {
				return
			}
			bufPools[i].Put(b)
			return
		}
	}
}
