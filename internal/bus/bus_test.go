package bus_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestEmbeddedInProcessAndTCP(t *testing.T) {
	for _, listen := range []string{"", fmt.Sprintf("127.0.0.1:%d", closedPort(t))} {
		srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Listen: listen})
		if err != nil {
			t.Fatal(err)
		}
		var nc *nats.Conn
		if listen == "" {
			if srv.URL() != "" {
				t.Fatalf("in-process server has a URL %q", srv.URL())
			}
			nc, err = srv.Connect(bus.Options{Name: "t"})
		} else {
			nc, err = bus.Connect(bus.Options{URL: srv.URL()})
		}
		if err != nil {
			t.Fatal(err)
		}
		sub, _ := nc.Subscribe("x", func(m *nats.Msg) { m.Respond(append([]byte("re:"), m.Data...)) })
		msg, err := nc.Request("x", []byte("hi"), time.Second)
		if err != nil || string(msg.Data) != "re:hi" {
			t.Fatalf("request: %v %v", err, msg)
		}
		sub.Unsubscribe()
		nc.Close()
		srv.Shutdown()
	}
}

func TestConnectUnreachableNamesURL(t *testing.T) {
	url := fmt.Sprintf("nats://127.0.0.1:%d", closedPort(t))
	_, err := bus.Connect(bus.Options{URL: url})
	if !errors.Is(err, bus.ErrUnreachable) || !strings.Contains(err.Error(), url) {
		t.Fatalf("err = %v", err)
	}
}

func TestAuthRequired(t *testing.T) {
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Listen: fmt.Sprintf("127.0.0.1:%d", closedPort(t)), User: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if _, err := bus.Connect(bus.Options{URL: srv.URL()}); err == nil {
		t.Fatal("connected without credentials")
	}
	nc, err := bus.Connect(bus.Options{URL: srv.URL(), User: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

func TestSubjects(t *testing.T) {
	s := bus.For("c1")
	if s.SlaveKV("s") != "flexps.c1.slave.s.kv" || s.Join() != "flexps.c1.master.join" || bus.For("").Prefix != "flexps.default" {
		t.Fatal(s)
	}
}

// A process logs at once when it loses the bus, and when it is back.
func TestConnectionLossIsLogged(t *testing.T) {
	b := startRestartable(t, "slave-x")
	b.srv.Shutdown()
	waitFor(t, &b.log, "connection to NATS lost")
	b.start()
	waitFor(t, &b.log, "reconnected to NATS")
	if !strings.Contains(b.log.String(), "slave-x") {
		t.Errorf("the log does not name the connection: %s", b.log.String())
	}
}

// restartable is an embedded server on a fixed loopback port, which a
// test may shut down and start again there, and a connection to it
// named name that logs into log.
type restartable struct {
	t      *testing.T
	listen string
	srv    *bus.Embedded
	nc     *nats.Conn
	log    syncBuffer
}

func startRestartable(t *testing.T, name string) *restartable {
	b := &restartable{t: t, listen: fmt.Sprintf("127.0.0.1:%d", closedPort(t))}
	b.start()
	log := zerolog.New(&b.log)
	nc, err := bus.Connect(bus.Options{URL: b.srv.URL(), Name: name, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b.nc = nc
	return b
}

// start starts the server (again) on the same port.
func (b *restartable) start() {
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Listen: b.listen})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(srv.Shutdown)
	b.srv = srv
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

func waitFor(t *testing.T, buf *syncBuffer, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(buf.String(), what) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log: %s", what, buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Port 0 is any free port, as for [kv] listen and [metrics] listen: NATS
// itself reads 0 as 4222, so two masters given "127.0.0.1:0" collided, and
// one shared 4222 with whatever else ran there.
func TestEmbeddedListenPortZeroIsAnyFreePort(t *testing.T) {
	for _, tc := range []struct{ name, listen string }{
		{"loopback v4", "127.0.0.1:0"},
		{"loopback name", "localhost:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var urls []string
			for range 2 {
				srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Listen: tc.listen})
				if err != nil {
					t.Fatalf("a second server on %s: %v", tc.listen, err)
				}
				defer srv.Shutdown()
				u := srv.URL()
				if strings.HasSuffix(u, ":4222") || strings.HasSuffix(u, ":0") {
					t.Fatalf("listen %s: URL %s, want a free port", tc.listen, u)
				}
				nc, err := bus.Connect(bus.Options{URL: u})
				if err != nil {
					t.Fatal(err)
				}
				nc.Close()
				urls = append(urls, u)
			}
			if urls[0] == urls[1] {
				t.Fatalf("both servers at %s", urls[0])
			}
		})
	}
}
