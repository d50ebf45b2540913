package transport

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// TCP carries requests over direct TCP connections between endpoints (one
// per slave process), with NATS as the control plane and the fallback.
//
// Discovery: every endpoint listens on a TCP address and answers, on the
// bus, a hello request for its own name and for every node it serves with
// that address and a random key of its own. A sender that first needs node
// n asks hello(n), dials the address and proves it holds the key (an
// HMAC challenge both ways, see tcp_auth.go); the key only reaches those
// the bus lets request hello subjects (slaves and the master when the bus
// is authenticated), so the data plane is exactly as closed as the bus and
// a connection from anyone else is refused.
//
// One connection per (sender endpoint, node) carries all of that sender's
// requests to the node, so one sender's requests stay in order. Requests
// are pipelined: a writer goroutine per connection sends whatever frames
// queued up since its last write in one system call, and a reader
// goroutine per connection reads each request into a pooled buffer queued
// for the node's handler goroutine (so reading the next request overlaps
// handling this one; the buffer is reused once handled) and each answer
// into the waiting inbox. A request's reply
// address is rewritten on arrival to name the endpoint it came from
// ("_DP|<endpoint>|<address>"), so whoever finally answers it, the node or
// one it forwarded the request to, sends the answer straight back to that
// endpoint (over a connection, or over NATS to the plain address when no
// connection can be made).
//
// A node whose endpoint does not answer hello (it runs the NATS transport,
// or is not up) is sent to over NATS, and hello is asked again after 5s;
// one whose endpoint answers but cannot be dialed falls back to NATS, with
// a warning naming it, and is dialed again after BusRetry. Both retries
// run in the background while requests keep going over NATS; once a
// connection is up, the requests already sent over NATS are drained
// (drainBus) before any takes the connection, so none is overtaken. A
// connection that breaks fails every request it carried that is still
// unanswered (an answer with Err set) and is dialed again on the next
// request. The node's handler also serves requests arriving over NATS (the
// master's model reads, peers on the fallback path), one at a time with
// the TCP ones.
type TCP struct {
	cfg  TCPConfig
	fb   *NATS
	nc   *nats.Conn
	log  zerolog.Logger
	key  []byte
	tls  *tlsIdentity // nil: connections in the clear
	ln   net.Listener
	addr string        // what hello answers: where peers dial
	done chan struct{} // closed by Close: releases handlers waiting for cfg.Ready

	mu      sync.Mutex
	peers   map[string]*tcpPeer // route of requests, by node
	inbound map[string]*tcpConn // latest connection from each endpoint, by its name
	conns   map[*tcpConn]struct{}
	hellos  map[string]*nats.Subscription // by name answered
	warned  map[string]bool
	closed  bool

	smu    sync.RWMutex
	served map[string]*tcpServed

	imu     sync.RWMutex
	inboxes map[string]*natsInbox

	pmu     sync.Mutex
	pending map[string][]*tcpConn // unanswered requests sent over connections, by reply address

	direct, bus, self, dials, refused atomic.Uint64

	hsmu       sync.Mutex
	handshakes []net.Conn // connections whose handshake is under way, oldest first

	rmu       sync.Mutex
	refLogged time.Time // when a refusal was last logged
	refQuiet  int       // refusals not logged since

	wg sync.WaitGroup
}

// TCPStats count what an endpoint did.
type TCPStats struct {
	DirectSends uint64 // requests sent over connections
	BusSends    uint64 // requests sent over NATS (no reachable endpoint)
	SelfSends   uint64 // requests for the endpoint's own node, handed to its handler in memory
	Dials       uint64 // connections opened (reconnections included)
	Conns       int    // connections open now, both directions
	Refused     uint64 // incoming connections closed before or during the handshake
}

// Stats returns the endpoint's counters.
func (t *TCP) Stats() TCPStats {
	t.mu.Lock()
	n := len(t.conns)
	t.mu.Unlock()
	return TCPStats{DirectSends: t.direct.Load(), BusSends: t.bus.Load(), SelfSends: t.self.Load(), Dials: t.dials.Load(), Conns: n, Refused: t.refused.Load()}
}

// TCPConfig configures an endpoint.
type TCPConfig struct {
	// Self names the endpoint (the slave id): answers to requests it sends
	// come back to it by this name, so it must be unique in the cluster.
	Self string
	// Listen is the address to accept connections on; default
	// "127.0.0.1:0" (loopback, any free port).
	Listen string
	// Advertise is the host:port peers dial; default the listener's
	// address (the host name when listening on every interface).
	Advertise string
	// Hello is the subject where the endpoint of node answers discovery.
	Hello func(node string) string
	// DialTimeout bounds discovery, dialing and the handshake; default 5s.
	DialTimeout time.Duration
	// BusRetry is how long a peer whose endpoint answered hello but could
	// not be dialed is sent to over NATS before a dial is tried again, in
	// the background; default 30s.
	BusRetry time.Duration
	// TLS encrypts the endpoint's connections (see tcp_tls.go): it
	// listens for TLS only, and dials only peers that encrypt too (the
	// others are reached over the bus). Connections to a peer that
	// encrypts are encrypted whatever this is.
	TLS bool
	// Ready, when set, holds discovery and the requests that come over
	// NATS until it is closed (those received meanwhile are answered
	// then; once the endpoint closes first, never). A slave sets it to
	// its admission: a second process started with the id of a live slave
	// listens under that id while it asks to join, and must draw none of
	// the live one's peers (its hello answer, when it came first, sent
	// them to an endpoint that then answered "task ... has no shards on
	// this slave").
	Ready <-chan struct{}
	Log   zerolog.Logger
}

// DefaultTCPListen is where an endpoint listens unless told otherwise.
const DefaultTCPListen = "127.0.0.1:0"

// ErrConnLost is wrapped by the Err of an answer that will never come: the
// connection that carried its request broke first.
var ErrConnLost = errors.New("transport: data-plane connection lost")

var errTCPClosed = errors.New("transport: TCP endpoint closed")

// maxQueued is how many bytes of requests a connection queues before Send
// waits for its writer: a bound on memory, far above what keeps the
// connection busy. Answers are never held back (they are what lets the
// other end make progress).
const maxQueued = 32 << 20

// maxHandshakes bounds the connections an endpoint authenticates at once:
// past it the oldest under way is closed to make room, so connections
// that never finish their handshake (a stranger's, a slow-loris) cannot
// keep a peer that completes it in a round trip from getting in.
const maxHandshakes = 64

// refuseLogEvery is how often at most a refused connection is logged; the
// ones in between are counted in the next line (a stranger hammering the
// port must not fill the disk).
const refuseLogEvery = 10 * time.Second

// noHelloRetry is how long a node whose endpoint did not answer hello is
// sent to over NATS before hello is asked again.
const noHelloRetry = 5 * time.Second

// dpPrefix marks a reply address rewritten to name the requester's
// endpoint: "_DP|<endpoint>|<address>". NATS inbox addresses hold no '|'.
const dpPrefix = "_DP|"

// defaultBusRetry is TCPConfig.BusRetry's default.
const defaultBusRetry = 30 * time.Second

// drainHeader marks a request over NATS that the served node's
// subscription answers at once instead of queueing it: its answer means
// every request this connection published to the node before it is in the
// node's queue (see TCP.drainBus).
const drainHeader = "Flexps-Drain"

type tcpPeer struct {
	ready chan struct{} // closed once resolved
	conn  *tcpConn      // nil: over NATS

	// Over NATS (conn nil): sends admitted on this route (busy), whether
	// any went out (used), and when to try the data plane again (until;
	// probing while a background attempt runs). A route replaced by a
	// connection is retired first: no more sends over NATS on it, and
	// those under way are waited for, so that the node's bus queue can be
	// drained before requests take the connection (one sender's requests
	// must not overtake each other across the switch).
	bmu     sync.Mutex
	bcond   *sync.Cond
	busy    int
	used    bool
	retired bool
	probing bool
	until   time.Time
}

func newTCPPeer() *tcpPeer {
	p := &tcpPeer{ready: make(chan struct{})}
	p.bcond = sync.NewCond(&p.bmu)
	return p
}

// enterBus admits a send over NATS on this route while it is not retired
// and its retry time has not come, or a probe runs: false means the
// caller should look for the route again. probe reports that the caller
// should start a background attempt at the data plane.
func (p *tcpPeer) enterBus(now time.Time) (ok, probe bool) {
	p.bmu.Lock()
	defer p.bmu.Unlock()
	if p.retired {
		return false, false
	}
	if !p.until.IsZero() && !now.Before(p.until) && !p.probing {
		p.probing, probe = true, true
	}
	p.busy++
	p.used = true
	return true, probe
}

func (p *tcpPeer) leaveBus() {
	p.bmu.Lock()
	if p.busy--; p.busy == 0 {
		p.bcond.Broadcast()
	}
	p.bmu.Unlock()
}

// retire stops sends over NATS on this route and waits for those under
// way; it reports whether any request went over NATS on it.
func (p *tcpPeer) retire() bool {
	p.bmu.Lock()
	defer p.bmu.Unlock()
	p.retired = true
	for p.busy > 0 {
		p.bcond.Wait()
	}
	return p.used
}

// probed ends a background attempt that kept the route on NATS.
func (p *tcpPeer) probed(retry time.Duration) {
	p.bmu.Lock()
	p.probing = false
	p.until = time.Now().Add(retry)
	p.bmu.Unlock()
}

// NewTCP starts an endpoint: it listens, and answers hello for cfg.Self
// on the bus of fallback. Close stops it.
func NewTCP(fallback *NATS, cfg TCPConfig) (*TCP, error) {
	if cfg.Self == "" || cfg.Hello == nil {
		return nil, errors.New("transport: a TCP endpoint needs a name and a hello subject")
	}
	if strings.Contains(cfg.Self, "|") {
		return nil, fmt.Errorf("transport: endpoint name %q may not contain '|'", cfg.Self)
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultTCPListen
	}
	if cfg.BusRetry <= 0 {
		cfg.BusRetry = defaultBusRetry
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	t := &TCP{cfg: cfg, fb: fallback, nc: fallback.nc, log: cfg.Log.With().Str("component", "dataplane").Logger(),
		key: make([]byte, 32), peers: map[string]*tcpPeer{}, inbound: map[string]*tcpConn{}, conns: map[*tcpConn]struct{}{},
		hellos: map[string]*nats.Subscription{}, warned: map[string]bool{}, served: map[string]*tcpServed{},
		inboxes: map[string]*natsInbox{}, pending: map[string][]*tcpConn{}, done: make(chan struct{})}
	if _, err := rand.Read(t.key); err != nil {
		return nil, fmt.Errorf("transport: data-plane key: %w", err)
	}
	if cfg.TLS {
		id, err := newTLSIdentity(cfg.Self)
		if err != nil {
			return nil, err
		}
		t.tls = id
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("transport: data plane listen on %s: %w", cfg.Listen, err)
	}
	t.ln = ln
	if t.addr, err = advertise(cfg.Advertise, ln.Addr()); err != nil {
		ln.Close()
		return nil, err
	}
	if err := t.answerHello(cfg.Self); err != nil {
		ln.Close()
		return nil, err
	}
	t.wg.Add(1)
	go t.acceptLoop()
	return t, nil
}

func advertise(adv string, ln net.Addr) (string, error) {
	if adv != "" {
		if _, _, err := net.SplitHostPort(adv); err != nil {
			return "", fmt.Errorf("transport: data plane advertise address %q: %w", adv, err)
		}
		return adv, nil
	}
	a := ln.(*net.TCPAddr)
	if a.IP.IsUnspecified() {
		host, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("transport: listening on every interface and no host name to advertise: %w", err)
		}
		return net.JoinHostPort(host, fmt.Sprint(a.Port)), nil
	}
	return a.String(), nil
}

// Addr is the address peers dial.
func (t *TCP) Addr() string { return t.addr }

// Close stops the endpoint: its listener, hello answers and connections
// (requests they carried that are unanswered fail). Served nodes stop
// too; inboxes stay open until their owners close them.
func (t *TCP) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.done)
	var conns []*tcpConn
	for c := range t.conns {
		conns = append(conns, c)
	}
	hellos := t.hellos
	t.hellos = map[string]*nats.Subscription{}
	t.mu.Unlock()
	err := t.ln.Close()
	for _, s := range hellos {
		s.Unsubscribe()
	}
	// Connections first: a handler waiting to forward on one is released.
	for _, c := range conns {
		c.fail(errTCPClosed)
	}
	t.smu.RLock()
	var served []*tcpServed
	for _, s := range t.served {
		served = append(served, s)
	}
	t.smu.RUnlock()
	for _, s := range served {
		s.stop(t)
	}
	t.wg.Wait()
	return err
}

// awaitReady waits for cfg.Ready: false when the endpoint closed first.
func (t *TCP) awaitReady() bool {
	if t.cfg.Ready == nil {
		return true
	}
	select {
	case <-t.cfg.Ready:
		return true
	default:
	}
	select {
	case <-t.cfg.Ready:
		return true
	case <-t.done:
		return false
	}
}

// Serve delivers node's requests, from connections and from NATS, to h
// one at a time.
func (t *TCP) Serve(node string, h Handler) (io.Closer, error) {
	s := newServed(h)
	t.smu.Lock()
	if t.served[node] != nil {
		t.smu.Unlock()
		return nil, &servedError{node: node}
	}
	t.served[node] = s
	t.smu.Unlock()
	subj := t.fb.subject(node)
	sub, err := t.nc.Subscribe(subj, func(m *nats.Msg) {
		if !t.awaitReady() {
			return
		}
		if m.Header != nil && m.Header.Get(drainHeader) != "" {
			// Every request published before it by its sender is queued.
			m.Respond(nil)
			return
		}
		s.push(m.Data, m.Reply, nil, false)
	})
	if err == nil {
		// Never drop a request (see NATS.Serve).
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = t.nc.Flush()
	}
	s.sub = sub
	if err == nil && node != t.cfg.Self {
		t.mu.Lock()
		_, answered := t.hellos[node]
		t.mu.Unlock()
		if !answered {
			err = t.answerHello(node)
			t.mu.Lock()
			s.hello = t.hellos[node]
			t.mu.Unlock()
		}
	}
	if err != nil {
		s.stop(t)
		return nil, fmt.Errorf("transport: serve %s: %w", node, err)
	}
	return &tcpService{t: t, node: node, s: s}, nil
}

type tcpService struct {
	t    *TCP
	node string
	s    *tcpServed
	once sync.Once
}

// Close stops serving: later requests get a no-responder answer, and the
// handler is not called once Close returns.
func (c *tcpService) Close() error {
	var err error
	c.once.Do(func() {
		c.t.smu.Lock()
		if c.t.served[c.node] == c.s {
			delete(c.t.served, c.node)
		}
		c.t.smu.Unlock()
		if c.s.hello != nil {
			c.t.mu.Lock()
			delete(c.t.hellos, c.node)
			c.t.mu.Unlock()
		}
		err = c.s.stop(c.t)
	})
	return err
}

// Send sends a request to node over its connection, dialing it first if
// need be, or over NATS when node has no reachable endpoint.
func (t *TCP) Send(node, reply string, data []byte) error {
	if err := checkFrame(node, reply, data); err != nil {
		return err
	}
	return t.send(node, reply, body{data: data})
}

// SendAppend is Send of the request build appends, built in the
// connection's send buffer (see Appender).
func (t *TCP) SendAppend(node, reply string, size int, build func([]byte) []byte) error {
	if err := checkFrame(node, reply, nil); err != nil {
		return err
	}
	return t.send(node, reply, body{build: build, size: size})
}

// SendTail is SendAppend of a request whose payload ends with tail, which
// a connection writes from where it is (see TailSender). Over the bus,
// tail is copied.
func (t *TCP) SendTail(node, reply string, size int, build func([]byte) []byte, tail []byte, done func()) error {
	lent := false
	var err error
	if err = checkFrame(node, reply, nil); err == nil {
		err = t.send(node, reply, body{build: build, size: size, tail: tail, done: done, lent: &lent})
	}
	if !lent {
		done() // copied whole (bytes), or never sent
	}
	return err
}

// sendSelf hands a request for this endpoint's own node straight to the
// node's handler queue, in memory. A worker beside the head of a
// replicated shard sends its reads and writes to its own slave; over a
// loopback connection each cost a socket write and read and their
// wakeups. Requests from one sender stay in order (they are queued as
// sent); the answer comes back in memory as every answer to this node
// does. It reports false when this endpoint serves no such node (the
// caller routes the request as any other).
func (t *TCP) sendSelf(reply string, bd body) (bool, error) {
	t.smu.RLock()
	s := t.served[t.cfg.Self]
	t.smu.RUnlock()
	if s == nil {
		return false, nil
	}
	data, buf := bd.bytes()
	if buf == nil { // the caller's bytes: the handler reads them later
		buf = getBuf(len(data))
		data = append((*buf)[:0], data...)
	}
	addr := reply
	if reply != "" && !strings.HasPrefix(reply, dpPrefix) {
		addr = dpPrefix + t.cfg.Self + "|" + reply
	}
	// Not held back by a full queue (a connection's reader is): the
	// handler itself may send to its own node.
	if !s.push(data, addr, buf, false) { // stopped
		putBuf(buf)
		t.noResponder(addr, nil)
		return true, nil
	}
	t.self.Add(1)
	return true, nil
}

// body is a message's payload: data, or what build appends (at most
// size bytes, else it costs a copy) followed by tail. A connection that
// queues a body with done writes its tail from where it is and calls done
// once written or dropped; it sets *lent when it takes that on.
type body struct {
	data  []byte
	build func([]byte) []byte
	size  int
	tail  []byte
	done  func()
	lent  *bool
}

// bytes is the payload as one slice, built in a pooled buffer the
// caller gives back with putBuf (nil for data).
func (b body) bytes() ([]byte, *[]byte) {
	if b.build == nil {
		return b.data, nil
	}
	buf := getBuf(b.size + len(b.tail))
	out := append(b.build((*buf)[:0]), b.tail...)
	return out, buf
}

func (t *TCP) send(node, reply string, bd body) error {
	if reply != "" && !strings.HasPrefix(reply, dpPrefix) && !t.ownsInbox(reply) {
		// A request forwarded for a requester on the bus only (the
		// master's model reads, say): mark its address so the answer
		// goes back over the bus, not to this node.
		reply = dpPrefix + "|" + reply
	}
	if node == t.cfg.Self {
		if sent, err := t.sendSelf(reply, bd); sent {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		c, p, err := t.route(node)
		if err != nil {
			return err
		}
		if c == nil {
			if _, addr, ok := cutDP(reply); ok {
				reply = addr // the NATS path answers the plain address
			}
			t.bus.Add(1)
			data, buf := bd.bytes()
			err := t.fb.Send(node, reply, data)
			putBuf(buf)
			p.leaveBus()
			return err
		}
		// Track the request before it leaves, so its answer cannot
		// overtake the bookkeeping. Forwarded requests are answered to
		// their requester's endpoint, not here: not tracked.
		own := reply != "" && !strings.HasPrefix(reply, dpPrefix)
		if own && !t.track(reply, c) {
			if attempt == 0 {
				continue // the connection broke before this request: dial again
			}
			return fmt.Errorf("transport: send to node %s: %w", node, c.cause())
		}
		err = c.writeBody(frameRequest, node, reply, bd, true)
		t.direct.Add(1)
		if err != nil && !own {
			return fmt.Errorf("transport: send to node %s: %w", node, err)
		}
		// A tracked request on a connection that broke is answered with
		// its Err by the connection's failure.
		return nil
	}
}

// Reply answers a request: over a connection to the requester's endpoint
// when the address names one, else over NATS.
func (t *TCP) Reply(addr string, data []byte) error {
	return t.reply(addr, body{data: data})
}

// ReplyAppend is Reply of the answer build appends, built in the
// connection's send buffer (see Appender).
func (t *TCP) ReplyAppend(addr string, size int, build func([]byte) []byte) error {
	return t.reply(addr, body{build: build, size: size})
}

func (t *TCP) reply(addr string, bd body) error {
	name, plain, ok := cutDP(addr)
	if ok && name != "" && name != t.cfg.Self {
		if c := t.replyConn(name); c != nil && c.writeBody(frameReply, "", plain, bd, false) == nil {
			return nil
		}
	}
	data, buf := bd.bytes()
	defer putBuf(buf)
	switch {
	case !ok:
		return t.fb.Reply(addr, data)
	case name == "":
		return t.fb.Reply(plain, data) // a requester on the bus only
	case name == t.cfg.Self:
		t.deliver(plain, append([]byte(nil), data...), false, nil)
		return nil
	}
	return t.fb.Reply(plain, data)
}

// MaxPayload is the bus's: a message may have to take the NATS path.
func (t *TCP) MaxPayload() int { return t.fb.MaxPayload() }
