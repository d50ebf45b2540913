package transport_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind byte
		a, b string
		data []byte
	}{
		{"request", transport.FrameRequest, "slave-1", "_INBOX.slave.x.g1.0", []byte{1, 2, 3}},
		{"request without reply", transport.FrameRequest, "n", "", nil},
		{"reply", transport.FrameReply, "", "_INBOX.slave.x.a0", bytes.Repeat([]byte{7}, 70000)},
		{"no responder", transport.FrameNoResponder, "", "_INBOX.x.g2.1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := transport.AppendFrame([]byte("junk"), tc.kind, tc.a, tc.b, tc.data)[4:]
			n, err := transport.FrameLen(f)
			if err != nil || n != len(f)-4 {
				t.Fatalf("length %d, %v; frame has %d", n, err, len(f)-4)
			}
			kind, a, b, data, err := transport.DecodeFrame(f[4:])
			if err != nil {
				t.Fatal(err)
			}
			if kind != tc.kind || string(a) != tc.a || string(b) != tc.b || !bytes.Equal(data, tc.data) {
				t.Fatalf("got %d %q %q %d bytes", kind, a, b, len(data))
			}
		})
	}
}

func TestFrameDecodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"unknown kind", []byte{9, 0, 0, 0, 0}},
		{"name past the end", []byte{1, 5, 0, 'a'}},
		{"request for no node", []byte{1, 0, 0, 0, 0}},
		{"reply to no address", []byte{2, 0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, _, _, err := transport.DecodeFrame(tc.body); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	for _, n := range []uint32{0, 4, 64<<20 + 1, 1<<32 - 1} {
		hdr := []byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)}
		if _, err := transport.FrameLen(hdr); err == nil {
			t.Fatalf("length %d accepted", n)
		}
	}
}

// FuzzDecodeFrame: any bytes decode or fail cleanly, and what decodes
// encodes back to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(transport.AppendFrame(nil, transport.FrameRequest, "a", "r.1", []byte("x"))[4:])
	f.Add(transport.AppendFrame(nil, transport.FrameReply, "", "r.1", nil)[4:])
	f.Add([]byte{3, 0, 0, 1, 0, 'z'})
	f.Fuzz(func(t *testing.T, body []byte) {
		kind, a, b, data, err := transport.DecodeFrame(body)
		if err != nil {
			return
		}
		again := transport.AppendFrame(nil, kind, string(a), string(b), data)[4:]
		if !bytes.Equal(again, body) {
			t.Fatalf("re-encoded %x as %x", body, again)
		}
	})
}

func tcpBus(t *testing.T) *bus.Embedded {
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// echoPair starts TCP endpoint "a" echoing requests (echo) and a client
// endpoint with an open inbox, on a bus of their own.
func echoPair(t *testing.T) (*transport.TCP, transport.Inbox) {
	t.Helper()
	srv := tcpBus(t)
	a, cli := newTCP(t, srv, "a"), newTCP(t, srv, "cli")
	serve(t, a, "a", echo(a, "a"))
	in, err := cli.Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return cli, in
}

// Between TCP endpoints requests go over connections, not the bus.
func TestTCPRequestsGoDirect(t *testing.T) {
	cli, in := echoPair(t)
	for i := range 3 {
		if err := cli.Send("a", in.Addr()+".x", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if m := next(t, in); string(m.Data) != "a:"+string([]byte{byte(i)}) {
			t.Fatalf("got %q", m.Data)
		}
	}
	if st := cli.Stats(); st.DirectSends != 3 || st.BusSends != 0 || st.Dials != 1 || st.Conns != 1 {
		t.Fatalf("client stats %+v", st)
	}
}

// Large answers arrive in pooled buffers: after Release the next answers
// (which may reuse the buffer) still carry exactly their own bytes, and a
// held, unreleased answer is never overwritten.
func TestTCPLargeAnswersPooled(t *testing.T) {
	cli, in := echoPair(t)
	payload := func(i, n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*7 + j)
		}
		return b
	}
	var held transport.Msg
	for i, n := range []int{100 << 10, 100 << 10, 1 << 20, 70 << 10, 100 << 10, 10, 100 << 10} {
		if err := cli.Send("a", in.Addr()+".x", payload(i, n)); err != nil {
			t.Fatal(err)
		}
		m := next(t, in)
		if want := append([]byte("a:"), payload(i, n)...); !bytes.Equal(m.Data, want) {
			t.Fatalf("answer %d (%d bytes) corrupted", i, n)
		}
		if i == 1 {
			held = m // kept, not released
			continue
		}
		m.Release()
	}
	if want := append([]byte("a:"), payload(1, 100<<10)...); !bytes.Equal(held.Data, want) {
		t.Fatal("an answer not released was overwritten by later ones")
	}
	held.Release()
}

// A burst of frames of every size, queued faster than they leave (small
// ones packed into shared write buffers, large ones in their own), arrives
// whole and in order.
func TestTCPBurstOfMixedFrames(t *testing.T) {
	cli, in := echoPair(t)
	sizes := []int{1, 70 << 10, 3, 64<<10 - 40, 1 << 20, 200, 2 << 20, 5, 130 << 10, 0, 64 << 10}
	payload := func(i int) []byte {
		b := make([]byte, sizes[i%len(sizes)])
		for j := range b {
			b[j] = byte(i + j*31)
		}
		return b
	}
	const n = 60
	for i := range n {
		if err := cli.Send("a", fmt.Sprintf("%s.%d", in.Addr(), i), payload(i)); err != nil {
			t.Fatal(err)
		}
	}
	expectInOrder(t, in, "a", n, func(i int) []byte { return append([]byte("a:"), payload(i)...) })
}

// expectInOrder reads n answers from in: answer i must come to address
// tail i carrying want(i); label names the requests' node in failures.
func expectInOrder(t *testing.T, in transport.Inbox, label string, n int, want func(i int) []byte) {
	t.Helper()
	for i := range n {
		m := next(t, in)
		if m.Tail != fmt.Sprint(i) {
			t.Fatalf("%s: answer %d arrived as %q: out of order", label, i, m.Tail)
		}
		if w := want(i); !bytes.Equal(m.Data, w) {
			t.Fatalf("%s: answer %d (%d bytes) corrupted", label, i, len(w))
		}
		m.Release()
	}
}

// A connection that breaks while a request is unanswered fails that
// request with ErrConnLost; the next request dials again.
func TestTCPConnectionDropFailsRequestAndReconnects(t *testing.T) {
	srv := tcpBus(t)
	a, cli := newTCP(t, srv, "a"), newTCP(t, srv, "cli")
	held := make(chan struct{}, 1)
	serve(t, a, "a", func(data []byte, reply string) {
		if string(data) == "hold" {
			held <- struct{}{} // never answered
			return
		}
		a.Reply(reply, []byte("pong"))
	})
	in, err := cli.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := cli.Send("a", in.Addr()+".h1", []byte("hold")); err != nil {
		t.Fatal(err)
	}
	<-held
	transport.DropConns(cli)
	m := next(t, in)
	if m.Tail != "h1" || !errors.Is(m.Err, transport.ErrConnLost) || !strings.Contains(m.Err.Error(), "a") {
		t.Fatalf("got %+v, want the held request failed with ErrConnLost", m)
	}
	if err := cli.Send("a", in.Addr()+".p1", []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if m := next(t, in); m.Tail != "p1" || string(m.Data) != "pong" || m.Err != nil {
		t.Fatalf("after reconnecting got %+v", m)
	}
	if st := cli.Stats(); st.Dials != 2 {
		t.Fatalf("stats %+v, want a second dial", st)
	}
}

// Only a dialer holding the endpoint's key gets a connection: a wrong key,
// a stranger's bytes, or frames without a handshake are refused before any
// request reaches a handler.
func TestTCPRefusesUnauthenticatedConnections(t *testing.T) {
	srv := tcpBus(t)
	a := newTCP(t, srv, "a")
	var calls atomic.Int64
	serve(t, a, "a", func([]byte, string) { calls.Add(1) })
	for _, tc := range []struct {
		name string
		talk func(c net.Conn) error
	}{
		{"wrong key", func(c net.Conn) error {
			return transport.DialHandshake(c, bytes.Repeat([]byte{1}, 32), "a", "mallory")
		}},
		{"http", func(c net.Conn) error {
			_, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
			return err
		}},
		{"frames without handshake", func(c net.Conn) error {
			_, err := c.Write(transport.AppendFrame(nil, transport.FrameRequest, "a", "", []byte("x")))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", a.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			herr := tc.talk(c)
			if tc.name == "wrong key" && !errors.Is(herr, transport.ErrAuth) {
				t.Fatalf("handshake with a wrong key: %v", herr)
			}
			// The listener hangs up without serving anything (a foreign
			// protocol at its first bytes, which may reset the connection
			// when more were sent; else once it has read everything: it
			// waits for no more).
			c.(*net.TCPConn).CloseWrite()
			if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("reading until the listener hangs up: %v", err)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("handler called %d times by unauthenticated connections", n)
	}
	if st := a.Stats(); st.Conns != 0 {
		t.Fatalf("stats %+v: a refused connection was kept", st)
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A peer whose endpoint answers hello but cannot be dialed is served over
// NATS, with one warning naming it.
func TestTCPFallsBackToNATSWithOneWarning(t *testing.T) {
	srv := tcpBus(t)
	// A port nothing listens on: bind one, then free it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	nc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	a, err := transport.NewTCP(transport.NewNATS(nc, kvSubject), transport.TCPConfig{Self: "far", Advertise: dead, Hello: helloSubject})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	serve(t, a, "far", echo(a, "far"))
	var logs syncBuffer
	cnc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cnc.Close()
	cli, err := transport.NewTCP(transport.NewNATS(cnc, kvSubject), transport.TCPConfig{Self: "cli", Hello: helloSubject, Log: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	in, err := cli.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	for i := range 3 {
		if err := cli.Send("far", in.Addr()+".f", []byte{'0' + byte(i)}); err != nil {
			t.Fatal(err)
		}
		if m := next(t, in); string(m.Data) != "far:"+string([]byte{'0' + byte(i)}) {
			t.Fatalf("got %+v", m)
		}
	}
	if st := cli.Stats(); st.BusSends != 3 || st.DirectSends != 0 {
		t.Fatalf("stats %+v", st)
	}
	if n := strings.Count(logs.String(), "cannot reach this peer's data plane"); n != 1 || !strings.Contains(logs.String(), `"peer":"far"`) {
		t.Fatalf("%d warnings, want one naming the peer:\n%s", n, logs.String())
	}
}

// A node served by the plain NATS transport (no endpoint answers its
// hello) is reached over NATS, and answers come back.
func TestTCPTalksToNATSOnlyNode(t *testing.T) {
	srv := tcpBus(t)
	nc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	plain := transport.NewNATS(nc, kvSubject)
	serve(t, plain, "old", echo(plain, "old"))
	cli := newTCP(t, srv, "cli")
	in, err := cli.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := cli.Send("old", in.Addr()+".o", []byte("k")); err != nil {
		t.Fatal(err)
	}
	if m := next(t, in); string(m.Data) != "old:k" {
		t.Fatalf("got %+v", m)
	}
	if st := cli.Stats(); st.BusSends != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Closing an endpoint fails the requests its connections carried, and a
// closed endpoint refuses to send.
func TestTCPCloseFailsPendingRequests(t *testing.T) {
	srv := tcpBus(t)
	a, cli := newTCP(t, srv, "a"), newTCP(t, srv, "cli")
	serve(t, a, "a", func([]byte, string) {})
	in, err := cli.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := cli.Send("a", in.Addr()+".w", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := in.Next(ctx)
	if err != nil || !errors.Is(m.Err, transport.ErrConnLost) {
		t.Fatalf("got %+v, %v", m, err)
	}
	if err := cli.Send("a", "", []byte("x")); err == nil {
		t.Fatal("a closed endpoint sent")
	}
}

// A request forwarded to another node is answered straight to the
// requester, over a connection or over NATS; either way the answer settles
// it, so the first connection dropping later fails nothing.
func TestTCPForwardedAnswerSettlesTheRequest(t *testing.T) {
	for _, final := range []string{"tcp", "nats"} {
		t.Run(final, func(t *testing.T) {
			srv := tcpBus(t)
			a, cli := newTCP(t, srv, "a"), newTCP(t, srv, "cli")
			var b transport.Transport
			if final == "tcp" {
				b = newTCP(t, srv, "b")
			} else {
				nc, err := srv.Connect(bus.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				b = transport.NewNATS(nc, kvSubject)
			}
			serve(t, b, "b", echo(b, "b"))
			serve(t, a, "a", func(data []byte, reply string) {
				if string(data) == "fwd" {
					if err := a.Send("b", reply, data); err != nil {
						t.Error(err)
					}
					return
				}
				a.Reply(reply, []byte("pong"))
			})
			in, err := cli.Listen()
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			if err := cli.Send("a", in.Addr()+".f1", []byte("fwd")); err != nil {
				t.Fatal(err)
			}
			if m := next(t, in); m.Tail != "f1" || string(m.Data) != "b:fwd" {
				t.Fatalf("got %+v (%q)", m, m.Data)
			}
			transport.DropConns(cli)
			for deadline := time.Now().Add(10 * time.Second); cli.Stats().Conns > 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the dropped connections never closed")
				}
			}
			if err := cli.Send("a", in.Addr()+".p1", []byte("ping")); err != nil {
				t.Fatal(err)
			}
			if m := next(t, in); m.Tail != "p1" || m.Err != nil {
				t.Fatalf("after the drop got %+v, want the ping's answer and no failure of the forwarded request", m)
			}
		})
	}
}

// rw reads from r and throws writes away: one side of a handshake.
type rw struct{ io.Reader }

func (rw) Write(p []byte) (int, error) { return len(p), nil }

// FuzzAcceptHandshake: whatever a stranger sends, the listener fails
// cleanly (no panic, no huge allocation) and never admits it without the
// key; a dialer holding the key always gets in.
func FuzzAcceptHandshake(f *testing.F) {
	key := bytes.Repeat([]byte{42}, 32)
	f.Add([]byte("FXDP\x01" + strings.Repeat("n", 32) + "\x01\x00a\x03\x00cli" + strings.Repeat("m", 32)))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		if _, _, err := transport.AcceptHandshake(rw{bytes.NewReader(in)}, key); err == nil {
			t.Fatalf("admitted %x without the key", in)
		}
	})
}

func TestHandshakeAdmitsKeyHolder(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	type res struct {
		node, dialer string
		err          error
	}
	done := make(chan res, 1)
	go func() {
		n, d, err := transport.AcceptHandshake(b, key)
		done <- res{n, d, err}
	}()
	if err := transport.DialHandshake(a, key, "slave-1", "slave-0"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.node != "slave-1" || r.dialer != "slave-0" {
		t.Fatalf("listener: %+v", r)
	}
}

// tcpAndBusOnly starts, on a bus of their own, TCP endpoints "a" and "cli"
// and a transport on the bus only (a node without a TCP endpoint).
func tcpAndBusOnly(t *testing.T) (a, cli *transport.TCP, plain *transport.NATS) {
	t.Helper()
	srv := tcpBus(t)
	a, cli = newTCP(t, srv, "a"), newTCP(t, srv, "cli")
	nc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return a, cli, transport.NewNATS(nc, kvSubject)
}

// Messages built in the send buffer (SendAppend, ReplyAppend) interleave
// with copied ones (Send, Reply) in order and intact, whatever the size
// hint (exact, too small: a copy, zero), to a TCP peer, to a node on NATS
// only, and to the endpoint's own node.
func TestTCPAppendedMessages(t *testing.T) {
	a, cli, plain := tcpAndBusOnly(t)
	// Odd requests are answered with ReplyAppend (TCP endpoints).
	appendEcho := func(tr transport.Transport, node string) transport.Handler {
		n := 0
		return func(data []byte, reply string) {
			n++
			ap, ok := tr.(transport.Appender)
			if !ok || n%2 == 0 {
				tr.Reply(reply, append([]byte(node+":"), data...))
				return
			}
			if err := ap.ReplyAppend(reply, len(data)/2, func(b []byte) []byte { return append(append(b, node+":"...), data...) }); err != nil {
				t.Errorf("ReplyAppend: %v", err)
			}
		}
	}
	serve(t, a, "a", appendEcho(a, "a"))
	serve(t, plain, "old", appendEcho(plain, "old"))
	serve(t, cli, "self", appendEcho(cli, "self"))
	in, err := cli.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	sizes := []int{0, 5, 70 << 10, 1<<20 - 64, 40 << 10, 300} // within NATS's payload limit
	payload := func(i int) []byte {
		b := make([]byte, sizes[i%len(sizes)])
		for j := range b {
			b[j] = byte(i*13 + j*7)
		}
		return b
	}
	for _, node := range []string{"a", "old", "self"} {
		const n = 24
		for i := range n {
			p, reply := payload(i), fmt.Sprintf("%s.%d", in.Addr(), i)
			switch i % 3 {
			case 0:
				err = cli.Send(node, reply, p)
			case 1:
				err = cli.SendAppend(node, reply, len(p), func(b []byte) []byte { return append(b, p...) })
			case 2:
				err = cli.SendAppend(node, reply, len(p)/3, func(b []byte) []byte { return append(b, p...) })
			}
			if err != nil {
				t.Fatalf("%s: send %d: %v", node, i, err)
			}
		}
		expectInOrder(t, in, node, n, func(i int) []byte { return append([]byte(node+":"), payload(i)...) })
	}
	if st := cli.Stats(); st.BusSends != 24 {
		t.Fatalf("stats %+v: want the NATS-only node's 24 requests on the bus", st)
	}
}

// SendTail: a request's lent tail arrives whole after its built head, in
// order with other frames; each done runs exactly once, after its tail
// was written (or, to a node on the bus only, at once: copied); frames
// queued after a lent tail never go into its spare capacity (the
// caller's memory beyond it stays as it was).
func TestTCPSendTail(t *testing.T) {
	a, cli, plain := tcpAndBusOnly(t)
	serve(t, a, "a", echo(a, "a"))
	serve(t, plain, "old", echo(plain, "old"))
	in, err := cli.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	sizes := []int{200 << 10, 3, 5, 70 << 10, 1<<20 - 64, 0} // within NATS's payload limit; small frames after lent tails
	for _, node := range []string{"a", "old"} {
		const n = 18
		var calls [n]atomic.Int32
		backing := make([][]byte, n)
		want := make([][]byte, n)
		for i := range n {
			head := []byte(fmt.Sprintf("head %d|", i))
			size := sizes[i%len(sizes)]
			backing[i] = make([]byte, size+64) // spare capacity after the tail
			for j := range backing[i] {
				backing[i][j] = byte(i*11 + j*3)
			}
			tail := backing[i][:size]
			want[i] = append(append([]byte(node+":"), head...), tail...)
			reply := fmt.Sprintf("%s.%d", in.Addr(), i)
			if i%3 == 2 { // a plain frame between lent ones
				err = cli.Send(node, reply, want[i][len(node)+1:])
				calls[i].Add(1)
			} else {
				err = cli.SendTail(node, reply, len(head), func(b []byte) []byte { return append(b, head...) }, tail, func() { calls[i].Add(1) })
			}
			if err != nil {
				t.Fatalf("%s: send %d: %v", node, i, err)
			}
		}
		expectInOrder(t, in, node, n, func(i int) []byte { return want[i] })
		for i := range n {
			if got := calls[i].Load(); got != 1 {
				t.Fatalf("%s: request %d: done ran %d times", node, i, got)
			}
			size := sizes[i%len(sizes)]
			for j := size; j < len(backing[i]); j++ {
				if backing[i][j] != byte(i*11+j*3) {
					t.Fatalf("%s: request %d: the caller's memory after its tail was written to", node, i)
				}
			}
		}
	}
}

// A lent tail still queued when its connection breaks is given back
// (done runs once) and its request fails with ErrConnLost.
func TestTCPSendTailConnectionLost(t *testing.T) {
	srv := tcpBus(t)
	a, cli := newTCP(t, srv, "a"), newTCP(t, srv, "cli")
	var stop sync.Once
	release := make(chan struct{})
	serve(t, a, "a", func(data []byte, reply string) {
		stop.Do(func() { <-release }) // the first request stalls the reader: the queue backs up
	})
	in, err := cli.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var done atomic.Int32
	tail := make([]byte, 4<<20)
	const n = 12 // 48 MiB: more than the socket buffers and the queue's bound
	sent := make(chan error, 1)
	go func() {
		for i := range n {
			if err := cli.SendTail("a", fmt.Sprintf("%s.%d", in.Addr(), i), 0, func(b []byte) []byte { return b }, tail, func() { done.Add(1) }); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	time.Sleep(200 * time.Millisecond)
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }() // the connection breaks with tails unwritten
	time.Sleep(100 * time.Millisecond)
	close(release) // (Close waits for the stalled handler)
	<-closed
	if err := <-sent; err != nil && !errors.Is(err, transport.ErrConnLost) {
		t.Logf("send after the break: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for done.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("done ran %d times for %d lent tails", done.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if got := done.Load(); got != n {
		t.Fatalf("done ran %d times for %d lent tails", got, n)
	}
	lost := 0
	for lost < 1 {
		m := next(t, in)
		if errors.Is(m.Err, transport.ErrConnLost) {
			lost++
		}
	}
}

// A request for the endpoint's own node is handed to its handler in
// memory (no connection, no dial): answers come back in order and whole,
// also for bytes the caller overwrites right after sending and for
// appended and tailed messages, and once the node stops serving, a
// request gets a no-responder answer.
func TestTCPRequestsToSelfStayInMemory(t *testing.T) {
	srv := tcpBus(t)
	a := newTCP(t, srv, "a")
	svc, err := a.Serve("a", echo(a, "a"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := a.Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	buf := make([]byte, 64)
	for i := range 50 {
		for j := range buf {
			buf[j] = byte(i)
		}
		if err := a.Send("a", in.Addr()+".x", buf[:1+i%64]); err != nil {
			t.Fatal(err)
		}
		clear(buf) // the caller's bytes, reused at once
	}
	for i := range 50 {
		m := next(t, in)
		if want := append([]byte("a:"), bytes.Repeat([]byte{byte(i)}, 1+i%64)...); !bytes.Equal(m.Data, want) {
			t.Fatalf("answer %d: %q, want %q", i, m.Data, want)
		}
		m.Release()
	}
	big := bytes.Repeat([]byte{7}, 100<<10)
	if err := a.SendAppend("a", in.Addr()+".y", 10, func(b []byte) []byte { return append(b, "head"...) }); err != nil {
		t.Fatal(err)
	}
	done := false
	if err := a.SendTail("a", in.Addr()+".z", 4, func(b []byte) []byte { return append(b, "tail"...) }, big, func() { done = true }); err != nil {
		t.Fatal(err)
	}
	if m := next(t, in); string(m.Data) != "a:head" {
		t.Fatalf("appended: %q", m.Data)
	}
	if m := next(t, in); !bytes.Equal(m.Data, append([]byte("a:tail"), big...)) || !done {
		t.Fatalf("tailed: %d bytes, done %v", len(m.Data), done)
	}
	if st := a.Stats(); st.SelfSends != 52 || st.DirectSends != 0 || st.Dials != 0 {
		t.Fatalf("stats %+v: want 52 requests in memory, none over a connection", st)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Send("a", in.Addr()+".w", []byte("late")); err != nil {
		t.Fatal(err)
	}
	if m := next(t, in); !m.NoResponder {
		t.Fatalf("after the node stopped: %+v, want no responder", m)
	}
}

// Connections that never finish their handshake (a stranger holding many
// open, a slow-loris) neither lock a peer out of the direct data plane nor
// fill the log: the oldest handshake under way makes room for a new one,
// and refusals are logged once per interval with a count.
func TestTCPHandshakeFloodDoesNotLockOutPeers(t *testing.T) {
	srv := tcpBus(t)
	nc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var logs syncBuffer
	a, err := transport.NewTCP(transport.NewNATS(nc, kvSubject), transport.TCPConfig{Self: "a", Hello: helloSubject, Log: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	serve(t, a, "a", echo(a, "a"))
	const idle = 3 * transport.MaxHandshakes
	for range idle {
		c, err := net.Dial("tcp", a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("FX")) // a hello that never ends
	}
	cli := newTCP(t, srv, "cli")
	in, err := cli.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := cli.Send("a", in.Addr()+".x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if m := next(t, in); string(m.Data) != "a:1" {
		t.Fatalf("got %+v", m)
	}
	if st := cli.Stats(); st.DirectSends != 1 || st.BusSends != 0 {
		t.Fatalf("client stats %+v: the peer was kept off the direct data plane", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().Refused < idle-transport.MaxHandshakes && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := a.Stats(); st.Refused < idle-transport.MaxHandshakes {
		t.Fatalf("stats %+v: want at least %d refused", st, idle-transport.MaxHandshakes)
	}
	if n := strings.Count(logs.String(), "refused a data-plane connection"); n != 1 {
		t.Fatalf("%d log lines for %d refused connections, want 1:\n%s", n, a.Stats().Refused, logs.String())
	}
}

// A foreign protocol is refused as soon as its first bytes arrive.
func TestTCPRefusesForeignProtocolAtOnce(t *testing.T) {
	srv := tcpBus(t)
	a := newTCP(t, srv, "a")
	c, err := net.Dial("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("GET /"))
	start := time.Now()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("hung up after %v, want at once", d)
	}
}

// A peer whose data plane cannot be dialed is sent to over NATS, and its
// endpoint is dialed again after BusRetry in the background: once it is
// reachable the requests take the connection, the node's handler sees
// every request in the order it was sent across the switch, and the
// warning is followed by a line saying the peer is reachable again.
func TestTCPBackToTheDataPlaneWhenThePeerIsReachable(t *testing.T) {
	srv := tcpBus(t)
	free := func() string { // a port nothing listens on
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	listen, adv := free(), free()
	nc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	far, err := transport.NewTCP(transport.NewNATS(nc, kvSubject), transport.TCPConfig{Self: "far", Listen: listen, Advertise: adv, Hello: helloSubject})
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	var mu sync.Mutex
	var seen []int
	serve(t, far, "far", func(data []byte, reply string) {
		mu.Lock()
		seen = append(seen, int(binary.LittleEndian.Uint32(data)))
		mu.Unlock()
		if reply != "" {
			far.Reply(reply, data)
		}
	})
	var logs syncBuffer
	cnc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cnc.Close()
	cli, err := transport.NewTCP(transport.NewNATS(cnc, kvSubject), transport.TCPConfig{Self: "cli", Hello: helloSubject,
		BusRetry: 100 * time.Millisecond, Log: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	in, err := cli.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	send := func(i int) {
		if err := cli.Send("far", in.Addr()+".f", binary.LittleEndian.AppendUint32(nil, uint32(i))); err != nil {
			t.Fatal(err)
		}
	}
	send(0)
	next(t, in)
	if st := cli.Stats(); st.BusSends != 1 || st.DirectSends != 0 {
		t.Fatalf("before the peer is reachable: %+v", st)
	}
	// The advertised address now leads to the peer (a port forward).
	fwd, err := net.Listen("tcp", adv)
	if err != nil {
		t.Fatal(err)
	}
	relayOn(t, fwd, listen)
	// Requests in a stream, without waiting for answers, until some
	// went over the connection.
	n := 1
	deadline := time.Now().Add(10 * time.Second)
	for cli.Stats().DirectSends < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("still not on the data plane: %+v\n%s", cli.Stats(), logs.String())
		}
		send(n)
		n++
		if n%64 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	for range n - 1 {
		next(t, in)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, v := range seen {
		if v != i {
			t.Fatalf("the handler saw request %d at position %d: %v", v, i, seen)
		}
	}
	if len(seen) != n {
		t.Fatalf("handler saw %d requests, %d sent", len(seen), n)
	}
	st := cli.Stats()
	if st.BusSends < 2 || st.Dials != 1 {
		t.Fatalf("stats %+v: want requests over NATS before the switch and one dial", st)
	}
	if !strings.Contains(logs.String(), "reachable again") {
		t.Fatalf("no line saying the peer is reachable again:\n%s", logs.String())
	}
}
