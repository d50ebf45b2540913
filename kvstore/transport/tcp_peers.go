package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Discovery and connections: an endpoint answers hello for its name and
// the nodes it serves; a sender resolves a node once (hello, dial,
// handshake) and keeps the connection until it breaks.

// helloReply is what an endpoint answers hello with: where to dial it and
// the key a dialer must prove it holds.
type helloReply struct {
	Addr string `json:"addr"`
	Key  []byte `json:"key"`
	// Cert is the SHA-256 of the endpoint's TLS certificate when it
	// encrypts (TCPConfig.TLS); empty: it takes connections in the clear.
	Cert []byte `json:"cert,omitempty"`
}

// answerHello answers discovery for name on the bus.
func (t *TCP) answerHello(name string) error {
	subj := t.cfg.Hello(name)
	sub, err := t.nc.Subscribe(subj, func(m *nats.Msg) {
		if !t.awaitReady() {
			return
		}
		hr := helloReply{Addr: t.addr, Key: t.key}
		if t.tls != nil {
			hr.Cert = t.tls.pin
		}
		data, err := json.Marshal(hr)
		if err == nil {
			err = m.Respond(data)
		}
		if err != nil {
			t.log.Warn().Err(err).Str("subject", subj).Msg("data-plane hello not answered")
		}
	})
	if err == nil {
		err = t.nc.Flush()
	}
	if err != nil {
		return fmt.Errorf("transport: subscribe %s: %w", subj, err)
	}
	t.mu.Lock()
	t.hellos[name] = sub
	t.mu.Unlock()
	return nil
}

// route is the connection requests for node go over, dialing it when
// there is none. A nil connection means NATS: the send was admitted on
// the returned route, and the caller calls its leaveBus once the request
// is published.
func (t *TCP) route(node string) (*tcpConn, *tcpPeer, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, nil, errTCPClosed
		}
		p := t.peers[node]
		if p == nil {
			p = newTCPPeer()
			t.peers[node] = p
			t.mu.Unlock()
			t.resolve(node, p)
			continue
		}
		t.mu.Unlock()
		<-p.ready
		if p.conn != nil {
			if !p.conn.broken() {
				return p.conn, nil, nil
			}
			t.mu.Lock()
			if t.peers[node] == p {
				delete(t.peers, node)
			}
			t.mu.Unlock()
			continue
		}
		ok, probe := p.enterBus(time.Now())
		if !ok {
			continue // replaced by a connection: look again
		}
		if probe {
			t.mu.Lock()
			if !t.closed {
				t.wg.Add(1)
				go t.probe(node, p)
			} else {
				p.probed(0)
			}
			t.mu.Unlock()
		}
		return nil, p, nil
	}
}

// resolve finds node's endpoint on the bus and dials it.
func (t *TCP) resolve(node string, p *tcpPeer) {
	defer close(p.ready)
	c, retry := t.connect(node)
	if c == nil {
		p.until = time.Now().Add(retry)
		return
	}
	p.conn = c
}

// connect asks hello for node and dials its endpoint. Without a
// connection it says how long to stay on NATS before trying again: a
// node no endpoint answers for (it runs the NATS transport, or is not up)
// briefly, one whose endpoint cannot be dialed longer, with a warning.
func (t *TCP) connect(node string) (*tcpConn, time.Duration) {
	msg, err := t.nc.Request(t.cfg.Hello(node), nil, t.cfg.DialTimeout)
	if errors.Is(err, nats.ErrNoResponders) {
		// No endpoint: NATS answers for it, and hello is asked again later.
		t.log.Debug().Str("peer", node).Msg("no data-plane endpoint answers for this node; using NATS")
		return nil, noHelloRetry
	}
	var hr helloReply
	if err == nil {
		if err = json.Unmarshal(msg.Data, &hr); err == nil && (hr.Addr == "" || len(hr.Key) == 0) {
			err = errors.New("hello without address or key")
		}
	}
	var c *tcpConn
	if err == nil {
		c, err = t.dial(node, hr)
	}
	if err != nil {
		if !errors.Is(err, errTCPClosed) {
			t.warnOnce(node, hr.Addr, err)
		}
		return nil, t.cfg.BusRetry
	}
	return c, 0
}

// probe tries the data plane to node again in the background while its
// requests go over NATS (route p). With a connection it puts a new route
// in p's place (senders wait for it), retires p, drains what went over
// NATS and opens the connection to them.
func (t *TCP) probe(node string, p *tcpPeer) {
	defer t.wg.Done()
	c, retry := t.connect(node)
	if c == nil {
		p.probed(retry)
		return
	}
	np := newTCPPeer()
	t.mu.Lock()
	if t.closed || t.peers[node] != p {
		t.mu.Unlock()
		c.fail(errTCPClosed)
		p.probed(retry)
		return
	}
	t.peers[node] = np
	t.mu.Unlock()
	defer close(np.ready)
	if p.retire() {
		if err := t.drainBus(node); err != nil {
			// The connection waits: requests stay on NATS, in order.
			t.log.Debug().Err(err).Str("peer", node).Msg("data plane reachable again, but the bus queue did not drain; staying on NATS")
			c.fail(err)
			np.until = time.Now().Add(noHelloRetry)
			return
		}
	}
	t.mu.Lock()
	warned := t.warned[node]
	delete(t.warned, node)
	t.mu.Unlock()
	if warned {
		t.log.Info().Str("peer", node).Msg("this peer's data plane is reachable again; its KV traffic goes over the direct connection")
	}
	np.conn = c
}

// drainBus returns once every request this endpoint published to node
// over NATS is in the node's queue: NATS delivers one connection's
// messages to a subscription in order, and the node's subscription
// answers a drain request at once, behind them. Requests sent over a
// connection afterwards queue behind them too, so none overtakes one sent
// over NATS before.
func (t *TCP) drainBus(node string) error {
	m := nats.NewMsg(t.fb.subject(node))
	m.Header.Set(drainHeader, "1")
	if _, err := t.nc.RequestMsg(m, t.cfg.DialTimeout); err != nil {
		return fmt.Errorf("transport: drain the bus queue of node %s: %w", node, err)
	}
	return nil
}

func (t *TCP) warnOnce(node, addr string, err error) {
	t.mu.Lock()
	first := !t.warned[node]
	t.warned[node] = true
	t.mu.Unlock()
	if first {
		t.log.Warn().Err(err).Str("peer", node).Str("addr", addr).
			Msg("cannot reach this peer's data plane directly; its KV traffic goes over NATS (that slave must listen where its peers can reach it, [kv] listen, and advertise an address they can dial, [kv] advertise)")
	}
}

func (t *TCP) dial(node string, hr helloReply) (*tcpConn, error) {
	if t.tls != nil && len(hr.Cert) == 0 {
		// Never in the clear from an endpoint that encrypts.
		return nil, errors.New("its data plane does not encrypt, and this one does (TLS on the bus)")
	}
	nc, err := net.DialTimeout("tcp", hr.Addr, t.cfg.DialTimeout)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(t.cfg.DialTimeout))
	if len(hr.Cert) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.DialTimeout)
		tc, err := tlsDial(ctx, nc, hr.Cert)
		cancel()
		if err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	if err := dialHandshake(nc, hr.Key, node, t.cfg.Self); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	t.dials.Add(1)
	c, ok := t.start(nc, node, node, false)
	if !ok {
		return nil, errTCPClosed
	}
	return c, nil
}

func (t *TCP) acceptLoop() {
	defer t.wg.Done()
	for {
		nc, err := t.ln.Accept()
		if err != nil {
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn().Err(err).Msg("data plane: accept failed")
			time.Sleep(50 * time.Millisecond)
			continue
		}
		// Unauthenticated connections cost a goroutine each until their
		// handshake deadline: bound how many may wait at once.
		t.admit(nc)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.accept(nc)
		}()
	}
}

// admit registers a connection whose handshake starts, closing the oldest
// under way when maxHandshakes are.
func (t *TCP) admit(nc net.Conn) {
	t.hsmu.Lock()
	var evict net.Conn
	if len(t.handshakes) >= maxHandshakes {
		evict = t.handshakes[0]
		n := copy(t.handshakes, t.handshakes[1:])
		t.handshakes[n] = nil
		t.handshakes = t.handshakes[:n]
	}
	t.handshakes = append(t.handshakes, nc)
	t.hsmu.Unlock()
	if evict != nil {
		evict.Close() // its handshake fails; accept logs it as evicted
	}
}

// admitted forgets a connection whose handshake ended, reporting whether
// it was still under way (false: admit evicted it).
func (t *TCP) admitted(nc net.Conn) bool {
	t.hsmu.Lock()
	defer t.hsmu.Unlock()
	for i, c := range t.handshakes {
		if c == nc {
			n := copy(t.handshakes[i:], t.handshakes[i+1:])
			t.handshakes[i+n] = nil
			t.handshakes = t.handshakes[:i+n]
			return true
		}
	}
	return false
}

func (t *TCP) accept(raw net.Conn) {
	raw.SetDeadline(time.Now().Add(t.cfg.DialTimeout))
	nc := raw
	if t.tls != nil {
		nc = t.tls.server(raw) // its handshake runs on the first read
	}
	node, dialer, err := acceptHandshake(nc, t.key)
	if !t.admitted(raw) {
		// Closed by admit: its handshake failed on the closed socket, or
		// succeeded too late to be used.
		err = fmt.Errorf("%w: handshake not done when %d newer ones were under way; closed to make room", ErrAuth, maxHandshakes)
	}
	if err != nil {
		nc.Close()
		t.refuse(nc.RemoteAddr().String(), err)
		return
	}
	nc.SetDeadline(time.Time{})
	t.start(nc, dialer, node, true)
}

// refuse counts a refused connection and logs it, at most once every
// refuseLogEvery, with how many went unlogged since.
func (t *TCP) refuse(remote string, err error) {
	t.refused.Add(1)
	now := time.Now()
	t.rmu.Lock()
	if !t.refLogged.IsZero() && now.Sub(t.refLogged) < refuseLogEvery {
		t.refQuiet++
		t.rmu.Unlock()
		return
	}
	quiet := t.refQuiet
	t.refLogged, t.refQuiet = now, 0
	t.rmu.Unlock()
	ev := t.log.Warn().Err(err).Str("remote", remote)
	if quiet > 0 {
		ev = ev.Int("refused_unlogged", quiet)
	}
	ev.Msg("refused a data-plane connection (one line every 10s at most; refused_unlogged counts the others since the last)")
}

// replyConn is a connection to endpoint name for answers: the one its
// requests came in on, else one this endpoint dials.
func (t *TCP) replyConn(name string) *tcpConn {
	t.mu.Lock()
	c := t.inbound[name]
	t.mu.Unlock()
	if c != nil && !c.broken() {
		return c
	}
	c, p, _ := t.route(name)
	if p != nil {
		p.leaveBus() // the caller answers over NATS itself
	}
	return c
}

// request queues a request that came in on c for its node's handler, with
// the reply address rewritten to name c's endpoint; buf (pooled) holds
// data and goes back to the pool once handled.
func (t *TCP) request(c *tcpConn, node, reply, data []byte, buf *[]byte) {
	t.smu.RLock()
	s := t.served[string(node)]
	t.smu.RUnlock()
	var addr string
	switch {
	case len(reply) == 0:
	case strings.HasPrefix(string(reply), dpPrefix): // forwarded: already names its requester
		addr = string(reply)
	default:
		addr = dpPrefix + c.remote + "|" + string(reply)
	}
	if s != nil && s.push(data, addr, buf, true) {
		return
	}
	putBuf(buf)
	t.noResponder(addr, c)
}

// noResponder tells the requester at rewritten reply address addr (""
// for none) that nothing serves its request's node here, as NATS would;
// c is the connection the request came in on (nil: from this endpoint).
func (t *TCP) noResponder(addr string, c *tcpConn) {
	if addr == "" {
		return
	}
	name, plain, _ := cutDP(addr)
	switch {
	case name == "":
		// A requester on the bus only: it times out (the bus has no
		// way to say "no responder" to an address).
	case c != nil && name == c.remote:
		c.write(frameNoResponder, "", plain, nil, false)
	case name == t.cfg.Self:
		t.deliver(plain, nil, true, nil)
	default: // a forwarded request: its requester is elsewhere
		if rc := t.replyConn(name); rc != nil {
			rc.write(frameNoResponder, "", plain, nil, false)
		}
	}
}

// cutDP splits a rewritten reply address into the requester's endpoint
// and its plain address.
func cutDP(addr string) (name, plain string, ok bool) {
	rest, ok := strings.CutPrefix(addr, dpPrefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '|')
	if i < 0 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}
