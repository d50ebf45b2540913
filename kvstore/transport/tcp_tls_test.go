package transport_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/kvstore/transport"
)

// tap is a TCP relay to target that keeps every byte it carried.
type tap struct {
	ln    net.Listener
	mu    sync.Mutex
	got   bytes.Buffer
	conns []net.Conn
}

func newTap(t *testing.T, target string) *tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return relayOn(t, ln, target)
}

// relayOn relays every connection ln accepts to target until the test
// ends (a port forward), keeping what it carried.
func relayOn(t *testing.T, ln net.Listener, target string) *tap {
	tp := &tap{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		tp.mu.Lock()
		for _, c := range tp.conns {
			c.Close()
		}
		tp.mu.Unlock()
		wg.Wait()
	})
	copyOne := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				tp.mu.Lock()
				tp.got.Write(buf[:n])
				tp.mu.Unlock()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
			if err != nil {
				dst.Close()
				src.Close()
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			tp.mu.Lock()
			tp.conns = append(tp.conns, c, d)
			tp.mu.Unlock()
			wg.Add(2)
			go copyOne(d, c)
			go copyOne(c, d)
		}
	}()
	return tp
}

func (tp *tap) saw(b []byte) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return bytes.Contains(tp.got.Bytes(), b)
}

// tlsEndpoint starts endpoint self with TLS on or off; with relay, peers
// dial it through a tap (returned).
func tlsEndpoint(t *testing.T, srv *bus.Embedded, self string, tls, relay bool) (*transport.TCP, *tap) {
	t.Helper()
	nc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cfg := transport.TCPConfig{Self: self, Hello: helloSubject, TLS: tls}
	var tp *tap
	if relay {
		// The listener's port first, then the tap in front of it.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listen = l.Addr().String()
		l.Close()
		tp = newTap(t, cfg.Listen)
		cfg.Advertise = tp.ln.Addr().String()
	}
	tr, err := transport.NewTCP(transport.NewNATS(nc, kvSubject), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, tp
}

// With TLS (on the bus, so on the data plane), what crosses a connection
// is encrypted: a tap between the peers sees none of a request's or an
// answer's bytes, where without TLS it sees both. An endpoint that
// encrypts never talks in the clear: to a peer that does not, its
// requests go over the bus; a peer that does not encrypt dials one that
// does with TLS.
func TestTCPWithTLS(t *testing.T) {
	secret := []byte("weights-of-a-secret-model-0123456789")
	for _, tc := range []struct {
		name              string
		serverTLS, cliTLS bool
		direct, visible   bool // requests go over the connection; the tap sees them
	}{
		{"both in the clear", false, false, true, true},
		{"both encrypt", true, true, true, false},
		{"only the listener encrypts", true, false, true, false},
		{"only the dialer encrypts", false, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tcpBus(t)
			a, tp := tlsEndpoint(t, srv, "a", tc.serverTLS, true)
			serve(t, a, "a", echo(a, "a"))
			cli, _ := tlsEndpoint(t, srv, "cli", tc.cliTLS, false)
			in, err := cli.Listen()
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			for i := range 3 {
				msg := append([]byte{byte('0' + i)}, secret...)
				if err := cli.Send("a", in.Addr()+".s", msg); err != nil {
					t.Fatal(err)
				}
				if m := next(t, in); string(m.Data) != "a:"+string(msg) {
					t.Fatalf("answer %q", m.Data)
				}
			}
			st := cli.Stats()
			if tc.direct && (st.DirectSends != 3 || st.BusSends != 0) || !tc.direct && (st.BusSends != 3 || st.DirectSends != 0) {
				t.Fatalf("stats %+v, want direct %v", st, tc.direct)
			}
			if got := tp.saw(secret); got != tc.visible {
				t.Fatalf("tap saw the payload: %v, want %v", got, tc.visible)
			}
		})
	}
}

// A listener that encrypts refuses a dialer in the clear (even one holding
// the key), and a dialer refuses a certificate other than the one pinned.
func TestTCPTLSRefusals(t *testing.T) {
	srv := tcpBus(t)
	a, _ := tlsEndpoint(t, srv, "a", true, false)
	var calls atomic.Int64
	serve(t, a, "a", func([]byte, string) { calls.Add(1) })
	nc, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg, err := nc.Request(helloSubject("a"), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hello := string(msg.Data)
	if !strings.Contains(hello, `"cert":`) {
		t.Fatalf("hello of an endpoint that encrypts: %s", hello)
	}
	for _, tc := range []struct {
		name string
		talk func(c net.Conn) error
	}{
		{"in the clear", func(c net.Conn) error {
			return transport.DialHandshake(c, bytes.Repeat([]byte{1}, 32), "a", "mallory")
		}},
		{"another certificate pinned", func(c net.Conn) error {
			_, err := transport.TLSDial(c, bytes.Repeat([]byte{7}, 32))
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
			err = tc.talk(c)
			if err == nil {
				t.Fatal("the dial succeeded")
			}
			if tc.name == "another certificate pinned" && !errors.Is(err, transport.ErrAuth) {
				t.Fatalf("got %v, want ErrAuth", err)
			}
			io.Copy(io.Discard, c)
		})
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("handler called %d times", n)
	}
	if st := a.Stats(); st.Conns != 0 {
		t.Fatalf("stats %+v: a refused connection was kept", st)
	}
}
