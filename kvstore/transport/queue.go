package transport

import (
	"context"
	"sync"
)

// queue is an unbounded FIFO of messages with a blocking pop: inboxes and
// served nodes never drop what they were sent.
type queue struct {
	mu     sync.Mutex
	items  []Msg
	head   int
	ready  chan struct{} // holds a token while items may be waiting
	done   chan struct{}
	closed bool
}

func newQueue() *queue {
	return &queue{ready: make(chan struct{}, 1), done: make(chan struct{})}
}

// push appends m; it reports false once the queue is closed.
func (q *queue) push(m Msg) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, m)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// pop takes the oldest message, waiting for one until ctx is done or the
// queue is closed.
func (q *queue) pop(ctx context.Context) (Msg, error) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return Msg{}, ErrClosed
		}
		if q.head < len(q.items) {
			m := q.items[q.head]
			q.items[q.head] = Msg{}
			q.head++
			if q.head == len(q.items) {
				q.items, q.head = q.items[:0], 0
			} else {
				// Others are waiting: pass the token on.
				select {
				case q.ready <- struct{}{}:
				default:
				}
			}
			q.mu.Unlock()
			return m, nil
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-q.done:
		case <-ctx.Done():
			return Msg{}, ctx.Err()
		}
	}
}

func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		q.items = nil
		close(q.done)
	}
}
