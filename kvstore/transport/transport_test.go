package transport_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/kvstore/transport"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// each runs a conformance test on every implementation; endpoint returns
// one more endpoint of the same network (a NATS connection each, as
// separate processes would have, or the shared in-memory transport).
func each(t *testing.T, fn func(t *testing.T, endpoint func() transport.Transport)) {
	t.Run("mem", func(t *testing.T) {
		m := transport.NewMem()
		fn(t, func() transport.Transport { return m })
	})
	t.Run("nats", func(t *testing.T) {
		srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		subject := func(node string) string { return "t.node." + node }
		fn(t, func() transport.Transport {
			nc, err := srv.Connect(bus.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			return transport.NewNATS(nc, subject)
		})
	})
	t.Run("tcp", func(t *testing.T) {
		srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		n := 0
		fn(t, func() transport.Transport {
			n++
			return newTCP(t, srv, fmt.Sprintf("ep%d", n))
		})
	})
}

// newTCP is a TCP endpoint named self with a connection of its own.
func newTCP(t *testing.T, srv *bus.Embedded, self string) *transport.TCP {
	t.Helper()
	nc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	tr, err := transport.NewTCP(transport.NewNATS(nc, kvSubject), transport.TCPConfig{Self: self, Hello: helloSubject})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func kvSubject(node string) string    { return "t.node." + node }
func helloSubject(node string) string { return "t.hello." + node }

func next(t *testing.T, in transport.Inbox) transport.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := in.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func serve(t *testing.T, tr transport.Transport, node string, h transport.Handler) {
	t.Helper()
	svc, err := tr.Serve(node, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
}

// echo answers every request with its own bytes, prefixed by the node.
func echo(tr transport.Transport, node string) transport.Handler {
	return func(data []byte, reply string) {
		if reply != "" {
			tr.Reply(reply, append([]byte(node+":"), data...))
		}
	}
}

func TestRequestReply(t *testing.T) {
	each(t, func(t *testing.T, endpoint func() transport.Transport) {
		srv, cli := endpoint(), endpoint()
		serve(t, srv, "a", echo(srv, "a"))
		in, err := cli.Listen()
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		buf := []byte("hello")
		if err := cli.Send("a", in.Addr()+".x1", buf); err != nil {
			t.Fatal(err)
		}
		copy(buf, "XXXXX") // the caller may reuse data once Send returns
		m := next(t, in)
		if m.Tail != "x1" || string(m.Data) != "a:hello" || m.NoResponder {
			t.Fatalf("got %+v (%q)", m, m.Data)
		}
		if cli.MaxPayload() <= 0 {
			t.Fatalf("MaxPayload %d", cli.MaxPayload())
		}
	})
}

// One sender's requests reach the node in the order sent, none dropped,
// even when the handler is slower than the sender.
func TestPerSenderFIFO(t *testing.T) {
	const n = 5000
	each(t, func(t *testing.T, endpoint func() transport.Transport) {
		srv := endpoint()
		var mu sync.Mutex
		got := map[string][]int{}
		done := make(chan struct{})
		total := 0
		serve(t, srv, "a", func(data []byte, reply string) {
			s, i, _ := cutInt(string(data))
			mu.Lock()
			got[s] = append(got[s], i)
			total++
			if total == 2*n {
				close(done)
			}
			mu.Unlock()
			if i%500 == 0 {
				time.Sleep(time.Millisecond)
			}
		})
		var wg sync.WaitGroup
		for _, name := range []string{"p", "q"} {
			cli := endpoint()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n {
					if err := cli.Send("a", "", []byte(name+strconv.Itoa(i))); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of %d requests arrived", total, 2*n)
		}
		mu.Lock()
		defer mu.Unlock()
		for s, seq := range got {
			for i, v := range seq {
				if v != i {
					t.Fatalf("sender %s: request %d arrived as number %d", s, v, i)
				}
			}
		}
	})
}

func cutInt(s string) (string, int, error) {
	i, err := strconv.Atoi(s[1:])
	return s[:1], i, err
}

// A node that does not answer a request itself forwards it with the
// original reply address; the final node answers the requester directly.
func TestForwardKeepsReplyAddress(t *testing.T) {
	each(t, func(t *testing.T, endpoint func() transport.Transport) {
		a, b, cli := endpoint(), endpoint(), endpoint()
		serve(t, b, "b", echo(b, "b"))
		serve(t, a, "a", func(data []byte, reply string) {
			if err := a.Send("b", reply, data); err != nil {
				t.Error(err)
			}
		})
		in, err := cli.Listen()
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		if err := cli.Send("a", in.Addr()+".r7", []byte("k")); err != nil {
			t.Fatal(err)
		}
		if m := next(t, in); m.Tail != "r7" || string(m.Data) != "b:k" {
			t.Fatalf("got %+v (%q)", m, m.Data)
		}
	})
}

// A request to a node nobody serves fails naming the node: at once from
// Send, or as a NoResponder answer on its reply address.
func TestUnreachableNode(t *testing.T) {
	each(t, func(t *testing.T, endpoint func() transport.Transport) {
		srv, cli := endpoint(), endpoint()
		svc, err := srv.Serve("gone", echo(srv, "gone"))
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Close(); err != nil {
			t.Fatal(err)
		}
		in, err := cli.Listen()
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		err = cli.Send("gone", in.Addr()+".g1.0", []byte("x"))
		if err != nil {
			var ue *transport.UnreachableError
			if !errors.As(err, &ue) || ue.Node != "gone" || !errors.Is(err, transport.ErrUnreachable) {
				t.Fatalf("Send: %v", err)
			}
			return
		}
		if m := next(t, in); !m.NoResponder || m.Tail != "g1.0" {
			t.Fatalf("got %+v, want a no-responder answer to g1.0", m)
		}
	})
}

func TestInboxNextHonoursContextAndClose(t *testing.T) {
	each(t, func(t *testing.T, endpoint func() transport.Transport) {
		in, err := endpoint().Listen()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := in.Next(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Next on a cancelled context: %v", err)
		}
		in.Close()
		if _, err := in.Next(context.Background()); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Next on a closed inbox: %v", err)
		}
	})
}

// Answers are queued without bound: a reader that falls far behind loses
// nothing (NATS's slow-consumer limit would drop them).
func TestInboxKeepsEveryAnswer(t *testing.T) {
	const n = 20000
	each(t, func(t *testing.T, endpoint func() transport.Transport) {
		srv, cli := endpoint(), endpoint()
		serve(t, srv, "a", echo(srv, "a"))
		in, err := cli.Listen()
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		for i := range n {
			if err := cli.Send("a", in.Addr()+"."+strconv.Itoa(i), make([]byte, 512)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			if m := next(t, in); m.Tail != fmt.Sprint(i) {
				t.Fatalf("answer %d has tail %q", i, m.Tail)
			}
		}
	})
}

func TestMemServeTwiceFails(t *testing.T) {
	m := transport.NewMem()
	svc, err := m.Serve("a", func([]byte, string) {})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if _, err := m.Serve("a", func([]byte, string) {}); err == nil {
		t.Fatal("a node served twice")
	}
}

// A node whose bus went away (the master with its embedded NATS server
// killed) must still stop promptly: closing a service does not wait out
// a flush that cannot be answered (nats.go's default flush timeout is 10
// s, and a slave closes a service per node it serves).
func TestCloseWithTheBusGone(t *testing.T) {
	for _, kind := range []string{"nats", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Listen: "127.0.0.1:-1"})
			if err != nil {
				t.Fatal(err)
			}
			nc, err := bus.Connect(bus.Options{URL: srv.URL()})
			if err != nil {
				srv.Shutdown()
				t.Fatal(err)
			}
			defer nc.Close()
			var tr transport.Transport = transport.NewNATS(nc, kvSubject)
			if kind == "tcp" {
				tcp, err := transport.NewTCP(tr.(*transport.NATS), transport.TCPConfig{Self: "a", Hello: helloSubject})
				if err != nil {
					srv.Shutdown()
					t.Fatal(err)
				}
				defer tcp.Close()
				tr = tcp
			}
			svc, err := tr.Serve("a", echo(tr, "a"))
			if err != nil {
				srv.Shutdown()
				t.Fatal(err)
			}
			srv.Shutdown()
			for nc.IsConnected() {
				time.Sleep(10 * time.Millisecond)
			}
			start := time.Now()
			svc.Close()
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("closing a service with the bus gone took %v", d)
			}
		})
	}
}
