package transport

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// readBuf is a connection's read buffer; small frames are packed into
// write buffers of writeChunk bytes; answers of pooledAnswer bytes or more
// are read into pooled buffers.
const (
	readBuf      = 256 << 10
	writeChunk   = 64 << 10
	pooledAnswer = 64 << 10
)

// tcpConn is one authenticated connection: frames queued by any goroutine
// go out in batches from its writer, frames coming in are dispatched by
// its reader.
type tcpConn struct {
	t      *TCP
	nc     net.Conn
	remote string // the other endpoint's name
	node   string // the node the connection was asked for

	mu     sync.Mutex
	space  *sync.Cond // signalled when the writer took the queue
	out    []outBuf   // frames waiting for the writer, in order (see write)
	queued int        // bytes in out
	err    error      // set once broken
	wake   chan struct{}
	done   chan struct{}
	once   sync.Once

	dead bool // guarded by t.pmu: no request may be tracked on it any more
}

// outBuf is one buffer of the write queue: a pooled one (frames packed
// in it), or a lent tail (see TailSender) whose done the writer calls
// once it is written, or fail once it never will be.
type outBuf struct {
	b    []byte
	done func() // nil: a pooled buffer
}

// start runs a connection's reader and writer; false if the endpoint is
// closing. An inbound connection is registered as remote's way back
// before its reader starts: a request it carries may be answered at once,
// and an answer that found no inbound connection would dial one.
func (t *TCP) start(nc net.Conn, remote, node string, inbound bool) (*tcpConn, bool) {
	c := &tcpConn{t: t, nc: nc, remote: remote, node: node, wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.space = sync.NewCond(&c.mu)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		closeNow(nc)
		return nil, false
	}
	t.conns[c] = struct{}{}
	if inbound {
		t.inbound[remote] = c
	}
	t.wg.Add(2)
	t.mu.Unlock()
	go c.readLoop()
	go c.writeLoop()
	return c, true
}

// write queues a frame. A request (wait) waits while the queue is over
// maxQueued; an answer never does. Frames are copied into pooled buffers:
// small ones packed together into one of writeChunk bytes, a large one
// into one of its own, so a burst of large frames is never copied again
// to grow a buffer; the writer sends the buffers with one writev.
func (c *tcpConn) write(kind byte, a, b string, data []byte, wait bool) error {
	n := frameSize(a, b, data)
	return c.enqueue(n, wait, func() {
		if last := len(c.out) - 1; last >= 0 && c.out[last].done == nil && cap(c.out[last].b)-len(c.out[last].b) >= n {
			c.out[last].b = appendFrame(c.out[last].b, kind, a, b, data)
		} else {
			buf := getBuf(max(n, writeChunk))
			c.out = append(c.out, outBuf{b: appendFrame((*buf)[:0], kind, a, b, data)})
		}
	})
}

// writeBody is write of a frame whose payload bd may build: then the
// frame is built outside the lock, in a pooled buffer of its own that
// joins the queue as it is (the payload is written once, not copied). A
// body with a tail and done lends the tail: it joins the queue after the
// built part as it is, and the writer calls done once it wrote it.
func (c *tcpConn) writeBody(kind byte, a, b string, bd body, wait bool) error {
	if bd.build == nil {
		return c.write(kind, a, b, bd.data, wait)
	}
	lend := bd.done != nil && len(bd.tail) > 0
	size := bd.size
	if !lend {
		size += len(bd.tail)
	}
	buf := getBuf(frameHeader + frameFixed + len(a) + len(b) + size)
	f := bd.build(appendFrame((*buf)[:0], kind, a, b, nil))
	if !lend {
		f = append(f, bd.tail...)
	}
	n := len(f) - frameHeader
	if lend {
		n += len(bd.tail)
	}
	if n > maxFrame {
		putBuf(buf)
		return fmt.Errorf("transport: message of %d bytes is larger than a frame (%d)", n-frameFixed-len(a)-len(b), maxFrame)
	}
	binary.LittleEndian.PutUint32(f, uint32(n))
	add := func() { c.out = append(c.out, outBuf{b: f}) }
	if lend {
		add = func() {
			c.out = append(c.out, outBuf{b: f}, outBuf{b: bd.tail, done: bd.done})
			*bd.lent = true
		}
	}
	if err := c.enqueue(frameHeader+n, wait, add); err != nil {
		putBuf(buf)
		return err
	}
	return nil
}

// enqueue runs add, which puts n bytes of frames on c.out, under the
// lock, and wakes the writer. A request (wait) waits while the queue is
// over maxQueued; an answer never does.
func (c *tcpConn) enqueue(n int, wait bool, add func()) error {
	c.mu.Lock()
	for wait && c.queued >= maxQueued && c.err == nil {
		c.space.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	add()
	c.queued += n
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

func (c *tcpConn) broken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

func (c *tcpConn) cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// writeLoop sends everything queued since its last write in one call
// (writev): while the connection is busy, frames pile up and leave
// together. Pooled buffers go back to the pool once written, lent tails
// to their owners (done).
func (c *tcpConn) writeLoop() {
	defer c.t.wg.Done()
	var spare []outBuf
	var nb [][]byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.mu.Lock()
		bufs := c.out
		c.out, c.queued = spare[:0], 0
		c.space.Broadcast()
		c.mu.Unlock()
		if len(bufs) == 0 {
			spare = bufs
			continue
		}
		nb = nb[:0]
		for _, o := range bufs {
			nb = append(nb, o.b)
		}
		w := net.Buffers(nb) // WriteTo consumes w, not nb's array
		_, err := w.WriteTo(c.nc)
		clear(nb)
		release(bufs)
		if err != nil {
			c.fail(err)
			return
		}
		spare = bufs
	}
}

// release gives bufs back: pooled ones to the pool, lent ones to their
// owners; and forgets them.
func release(bufs []outBuf) {
	for i, o := range bufs {
		if o.done != nil {
			o.done()
		} else {
			putBuf(&o.b)
		}
		bufs[i] = outBuf{}
	}
}

// readLoop dispatches incoming frames until the connection breaks.
func (c *tcpConn) readLoop() {
	defer c.t.wg.Done()
	br := bufio.NewReaderSize(c.nc, readBuf)
	var hdr [frameHeader]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			c.fail(err)
			return
		}
		n, err := frameLen(hdr[:])
		if err != nil {
			c.fail(err)
			return
		}
		// A request goes into a pooled buffer the handler gives back; a
		// large answer into one its reader gives back (Msg.Release), a
		// small one into a slice of its own.
		k, err := br.Peek(1)
		if err != nil {
			c.fail(err)
			return
		}
		var pooled *[]byte
		var body []byte
		if k[0] == frameRequest || n >= pooledAnswer {
			pooled = getBuf(n)
			body = (*pooled)[:n]
		} else {
			body = make([]byte, n)
		}
		if _, err := io.ReadFull(br, body); err != nil {
			putBuf(pooled)
			c.fail(err)
			return
		}
		kind, a, b, data, err := decodeFrame(body)
		if err != nil {
			putBuf(pooled)
			c.fail(err)
			return
		}
		switch kind {
		case frameRequest:
			c.t.request(c, a, b, data, pooled)
		case frameReply:
			c.t.deliverPooled(string(b), data, pooled, false, nil)
		case frameNoResponder:
			putBuf(pooled)
			c.t.deliver(string(b), nil, true, nil)
		default:
			putBuf(pooled)
		}
	}
}

// closeNow closes nc at once: a TLS connection's socket without the
// close_notify alert, whose write may wait 5 s for a peer that does not
// read (stopped, or gone).
func closeNow(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		tc.NetConn().Close()
		return
	}
	nc.Close()
}

// fail breaks the connection once: its socket closes, the endpoint
// forgets it (the next request dials again), and every request it carried
// that is still unanswered gets an answer with the error.
func (c *tcpConn) fail(cause error) {
	c.once.Do(func() {
		t := c.t
		err := fmt.Errorf("%w: to %s (%s): %v", ErrConnLost, c.remote, c.nc.RemoteAddr(), cause)
		c.mu.Lock()
		c.err = err
		c.space.Broadcast()
		unsent := c.out
		c.out, c.queued = nil, 0
		c.mu.Unlock()
		release(unsent) // lent tails go back; nothing is queued any more (err)
		close(c.done)
		closeNow(c.nc)
		t.mu.Lock()
		delete(t.conns, c)
		if p := t.peers[c.node]; p != nil {
			select {
			case <-p.ready:
				if p.conn == c {
					delete(t.peers, c.node)
				}
			default:
			}
		}
		if t.inbound[c.remote] == c {
			delete(t.inbound, c.remote)
		}
		t.mu.Unlock()
		t.pmu.Lock()
		c.dead = true
		var lost []string
		for a, q := range t.pending {
			kept := q[:0]
			for _, x := range q {
				if x == c {
					lost = append(lost, a)
				} else {
					kept = append(kept, x)
				}
			}
			if len(kept) == 0 {
				delete(t.pending, a)
			} else {
				clear(q[len(kept):])
				t.pending[a] = kept
			}
		}
		t.pmu.Unlock()
		for _, a := range lost {
			t.deliver(a, nil, false, err)
		}
		ev := t.log.Warn()
		if errors.Is(cause, errTCPClosed) || errors.Is(cause, io.EOF) {
			ev = t.log.Debug()
		}
		ev.Err(cause).Str("peer", c.remote).Int("unanswered", len(lost)).Msg("data-plane connection closed")
	})
}
