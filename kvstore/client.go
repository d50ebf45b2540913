package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flexps/flexps/kvstore/transport"
)

// ClientConfig configures a worker's KV client.
type ClientConfig struct {
	// Transport carries requests to the shard hosts (slave ids are its
	// node names).
	Transport transport.Transport
	Task      string
	Stage     int32
	Worker    int32  // rank within the stage; -1 reads without consistency (model dumps)
	Self      string // this slave's id; "" when the caller hosts no shards
	Server    *Server
	// Hosts lists every slave hosting a shard of the task; clocks go to
	// each of them because each keeps the stage's gate.
	Hosts       []string
	Consistency Consistency
	// ClockedStage names a later stage of the worker's task whose ps
	// workers count clocks (BSP, SSP, SparseSSP), "" when there is none.
	// Keys a stage moves stay where it moved them for the task's later
	// stages, whose Clocks could then overtake Adds forwarded to the keys'
	// new owners (a BSP read at clock c missing an Add of clock c-1); so
	// with one, Localize on a table not declared Relocate is refused under
	// ASP too.
	ClockedStage string
	Timeout      time.Duration // per request round trip, default 60s
	MaxPayload   int           // default: the transport's MaxPayload
	Window       int           // unacknowledged Adds/Clocks in flight, default 64
	Incarnation  uint64        // the sender's membership incarnation, checked by servers (0: none)
	Ctx          context.Context
	// Observer, when set, sees every Get and Add of a table: how long the
	// call took and whether any of its keys lived on another slave.
	Observer Observer
	// Routes, when set, is the task's membership view (Server.Routes, or
	// NewRoutes for a process hosting no shard): writes to replicated
	// tables and clocks are kept until acknowledged and re-sent to a dead
	// slave's successors (retain.go). Needed for replicated tables.
	Routes *Routes
	// RetryAfter, with Routes: unacknowledged writes are sent again (to
	// the heads of the moment; replicas skip what they applied) when no
	// answer came for this long, in case one was lost on a path through a
	// slave that died before every node heard of it. Default 2s.
	RetryAfter time.Duration
}

// Observer receives per-call measurements of a client (metrics).
type Observer interface {
	ObserveKV(table string, op Op, remote bool, d time.Duration)
}

// ErrTimeout is wrapped when a shard does not answer within the timeout.
var ErrTimeout = errors.New("kvstore: request timed out")

// Client is one worker's access to a task's tables. It is not safe for
// concurrent use: a worker is one goroutine.
type Client struct {
	cfg      ClientConfig
	inbox    string            // the reply inbox's address
	in       transport.Inbox   // where replies and acknowledgements arrive
	ackAddr  map[string]string // host -> its acknowledgement address
	ackHost  []string          // host of acknowledgement address "a<i>" or "p<i>"
	inflight int               // units (keys, or 1 per clock/finish/localize) sent and not yet acknowledged
	window   int               // most units in flight
	clock    int64
	seq      uint64
	err      error // first asynchronous error (a failed Add), sticky
	enc      []byte
	build    func([]byte) []byte // appends c.msg's encoding (transport.Appender)
	head     func([]byte) []byte // appends c.msg's encoding but its raw values (transport.TailSender)
	// lendRaw lets sendMsg lend c.msg.Raw to the transport (AddFloat32:
	// the caller's deltas, which it waits for with lent before returning).
	lendRaw  bool
	lent     sync.WaitGroup
	lentDone func()
	built    int     // the size of the message sendMsg sent last
	msg      Message // the request being built
	reply    Message // decoded replies; its Vals keep their capacity
	stats    ClientStats

	reads map[uint64]*pending // reads with replies outstanding, by sequence number
	free  []*pending          // finished reads, for reuse
	scan  *scan               // the scan under way, if any

	holders []*TableClient // tables holding Adds until the iteration ends (hold.go)
	lives   []*TableClient // tables whose keys may move (this slave hosts a shard)
	// relocates: a table declared Relocate has keys on other slaves, so
	// an Add of this worker may be forwarded from a key's home to its
	// owner (fenceMoved).
	relocates bool

	// With Routes (retain.go).
	kept    map[uint64]*retained // unacknowledged requests by id
	keptMin uint64               // the smallest id in kept, when it is there
	spare   []*retained
	reqID   uint64
	view    View          // the membership view the client routes by
	waited  time.Duration // waited for an answer since the last one (retries)
	lost    bool          // a connection broke under requests (connLost): retry, clocks and reads too
	// plainLost is the slave a broken connection took a kept-nowhere
	// write to (a table without replicas, a relocation; "p" address):
	// whether it was applied is unknown, so if that slave still lives at
	// the retry, the worker fails naming it instead of waiting out Timeout.
	plainLost string
}

// ClientStats count what a client did.
type ClientStats struct {
	LocalKeys, RemoteKeys int64 // keys read or written, by where they live
	Requests              int64 // messages sent
	BytesSent             int64
	BytesLent             int64 // of BytesSent, values written from the caller's memory, not copied (AddFloat32 over TCP)
	Localized             int64 // keys asked to move here
	Flushes               int64 // waits for in-flight Adds because keys moved (relocation)
	HeldKeys              int64 // remote Add keys held and merged until the iteration ended (hold.go)
}

// NewClient opens a worker's client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.Transport == nil {
		return nil, errors.New("kvstore: client needs a transport")
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = cfg.Transport.MaxPayload()
	}
	if cfg.Window <= 0 {
		cfg.Window = 64
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 2 * time.Second
	}
	if cfg.Ctx == nil {
		cfg.Ctx = context.Background()
	}
	in, err := cfg.Transport.Listen()
	if err != nil {
		return nil, fmt.Errorf("kvstore: reply inbox: %w", err)
	}
	// One acknowledgement address per host: a no-responders status names
	// the host that is gone.
	c := &Client{cfg: cfg, in: in, inbox: in.Addr(), ackAddr: make(map[string]string, len(cfg.Hosts)), reads: map[uint64]*pending{},
		window: cfg.Window * max(MaxKeysPerMessage(cfg.MaxPayload, 1, Float32), 1)}
	for _, h := range cfg.Hosts {
		c.ackTo(h)
	}
	if cfg.Routes != nil {
		c.kept = map[uint64]*retained{}
		c.view = cfg.Routes.View()
	}
	return c, nil
}

// ErrClosed is the error of every call on a closed client's tables.
var ErrClosed = errors.New("kvstore: the table's client is closed (a worker's tables close when its stage function returns: a goroutine it started used them after that)")

// Close releases the reply inbox. Unflushed Adds may still be applied.
// Later calls on its tables return ErrClosed: an Add was applied, or
// dropped, without a word after the worker had ended.
func (c *Client) Close() {
	c.in.Close()
	if c.err == nil {
		c.err = ErrClosed
	}
}

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats { return c.stats }

func (c *Client) gated() bool { return c.cfg.Consistency.Kind != ASP && c.cfg.Worker >= 0 }

// Clock finishes an iteration: the worker's clock goes up by one on every
// shard host. Under ASP no gate counts clocks, so nothing is sent.
func (c *Client) Clock() error {
	if c.err != nil {
		return c.err
	}
	if err := c.sendHeld(); err != nil {
		return err
	}
	c.clock++
	if !c.gated() {
		return nil
	}
	if err := c.fenceMoved(); err != nil {
		return err
	}
	return c.sendAll(OpClock)
}

// fenceMoved waits for the acknowledgement of every Add in flight when
// keys of a table have moved (relocation), before a Clock or Finish goes
// out. A shard applies a worker's Adds before the Clock that follows them
// because both travel one path to it; an Add to a key that moved does
// not: it goes to the key's home (or the route last learned), which
// forwards it to the owner, while the Clock goes to the owner directly
// and may overtake it. The owner's gate would then let a read at the
// next clock pass without that Add (BSP: a read at clock c missing
// another worker's Add of clock c-1). The owner acknowledges a forwarded
// Add itself, so once every Add is acknowledged the Clock cannot
// overtake one. A worker cannot tell in time that a key it adds to has
// moved (the move may happen while its Add travels), so every worker of
// a table declared Relocate waits, whether or not it saw a move; the
// others wait once their slave's copy of a table went dynamic or they
// learned a route. Tables nobody localizes pay nothing.
func (c *Client) fenceMoved() error {
	if c.inflight == 0 {
		return nil
	}
	if c.relocates {
		return c.Flush()
	}
	for _, t := range c.lives {
		if t.dyn() {
			return c.Flush()
		}
	}
	return nil
}

// ClockTo moves the worker's clock forward to clock (a lower value is
// ignored) and tells every shard host, as Clock does for one step. A
// worker entering a stage barrier jumps to the barrier's clock, so that
// while it waits it holds back no worker still on its way there.
func (c *Client) ClockTo(clock int64) error {
	if c.err != nil {
		return c.err
	}
	if err := c.sendHeld(); err != nil {
		return err
	}
	if clock <= c.clock {
		return nil
	}
	c.clock = clock
	if !c.gated() {
		return nil
	}
	if err := c.fenceMoved(); err != nil {
		return err
	}
	return c.sendAll(OpClock)
}

// Finish tells every shard host that this worker is done with the stage
// (it no longer holds anyone back) after all its Adds are applied.
func (c *Client) Finish() error {
	if err := c.sendHeld(); err != nil {
		return err
	}
	if c.gated() {
		if err := c.fenceMoved(); err != nil {
			return err
		}
		if err := c.sendAll(OpFinish); err != nil {
			return err
		}
	}
	return c.Flush()
}

func (c *Client) sendAll(op Op) error {
	for _, h := range c.cfg.Hosts {
		if h == c.cfg.Self && c.cfg.Server != nil && !c.retaining() {
			if g := c.cfg.Server.Gate(c.cfg.Task, c.cfg.Stage); g != nil {
				if op == OpClock {
					g.Advance(int(c.cfg.Worker), c.clock)
				} else {
					g.Finish(int(c.cfg.Worker))
				}
			}
			continue
		}
		c.msg = Message{Op: op, Task: c.cfg.Task, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: c.clock}
		if c.retaining() {
			if !c.cfg.Routes.Alive(h) {
				continue // its gate is gone with it
			}
			if err := c.publishClock(h); err != nil {
				return err
			}
			continue
		}
		if err := c.publishAcked(h, 1); err != nil {
			return err
		}
	}
	return nil
}

// Flush waits until every Add and Clock sent so far is acknowledged (an
// error answer ends the wait: the client is broken from then on).
func (c *Client) Flush() error {
	if err := c.sendHeld(); err != nil {
		return err
	}
	for c.inflight > 0 && c.err == nil {
		if err := c.receive(nil); err != nil {
			return err
		}
	}
	return c.err
}

// publishAcked sends c.msg to host with an acknowledgement of units (its
// keys, 1 for a clock), keeping at most Window messages' worth in flight.
// The units are counted, not the messages, because a node that forwards
// part of a request to the keys' owners (relocation) lets each of them
// acknowledge its own part.
func (c *Client) publishAcked(host string, units int) error {
	for c.inflight >= c.window && c.err == nil {
		if err := c.receive(nil); err != nil {
			return err
		}
	}
	if c.err != nil {
		return c.err
	}
	c.msg.From = c.cfg.Incarnation
	if err := c.sendMsg(host, c.plainAckTo(host)); err != nil {
		return err
	}
	c.inflight += units
	return nil
}

// pending tracks the outstanding replies of one read.
type pending struct {
	repl  bool // a read of a replicated table: sent again after a failover
	lost  bool // a part's connection broke (Client.connLost): sent again at the retry
	seq   uint64
	out   []float64 // the read's destination
	out32 []float32 // or this one (GetFloat32), when not nil
	width int       // its table's width
	err   error     // a failed reply of this read (when another read was waited for)
	left  int       // keys not answered yet
	parts []part
	host  []string // host of each part, for errors
	// stamp is the smallest Clock of the replies (and local gate reads)
	// so far: the read reflects every Add of the iterations below it.
	// Valid when stamped.
	stamp   int64
	stamped bool
}

// note lowers the read's stamp to clock.
func (p *pending) note(clock int64) {
	if !p.stamped || clock < p.stamp {
		p.stamp, p.stamped = clock, true
	}
}

// part is where one reply's values go: out[pos[i]] for keyed reads, or
// out[off:] for range reads (n values).
type part struct {
	pos []int32
	off int
	n   int
	// keys and lc, on a dynamic table's read: the keys asked for, and
	// the location cache that learns who answered them.
	keys []uint64
	lc   *locCache
}

// size is the number of keys the part reads.
func (pt part) size(width int) int {
	if pt.pos != nil {
		return len(pt.pos)
	}
	return pt.n / max(width, 1)
}

// receive handles one message on the inbox: an acknowledgement or a reply
// to the read p (nil when only acknowledgements are expected). With
// Routes, a change of the membership view while it waits re-sends what a
// dead slave left unacknowledged; a read p that waited for a dead slave
// then fails with errViewChanged, and its caller sends it again.
func (c *Client) receive(p *pending) error {
	err := c.receiveOne(p)
	if !errors.Is(err, errViewChanged) {
		return err
	}
	// After a broken connection (connLost) the clocks it carried go
	// again too, and so do its reads: no view change re-sends them when
	// the slave at the other end lives on.
	lost := c.lost
	c.lost = false
	if err := c.resend(lost); err != nil {
		if c.err == nil {
			c.err = err
		}
		return err
	}
	// Reads started earlier and not waited for yet (GetAsync) learn it
	// at their Wait. A read a broken connection lost is sent again
	// whatever its table: its slave lives on as far as the view knows
	// (if not, the send fails, and the read with it).
	for _, r := range c.reads {
		if r != p && r.err == nil && (r.lost || c.readAffected(r)) {
			r.err = errViewChanged
			if !r.repl && !r.lost {
				r.err = c.gone(c.deadHost(r))
			}
		}
	}
	if p != nil && (p.lost || c.readAffected(p)) {
		if !p.repl && !p.lost {
			return c.gone(c.deadHost(p))
		}
		return errViewChanged
	}
	return nil
}

func (c *Client) receiveOne(p *pending) error {
	wait := c.cfg.Timeout
	retry := c.retaining() && (len(c.kept) > 0 || c.lost) && c.cfg.RetryAfter < wait
	if retry {
		wait = c.cfg.RetryAfter
	}
	ctx, cancel := context.WithTimeout(c.cfg.Ctx, wait)
	if c.cfg.Routes != nil {
		if c.view.Changed.Err() != nil {
			cancel()
			return errViewChanged
		}
		stop := context.AfterFunc(c.view.Changed, cancel)
		defer stop()
	}
	msg, err := c.in.Next(ctx)
	cancel()
	if err != nil {
		if cerr := c.cfg.Ctx.Err(); cerr != nil {
			return cerr
		}
		if c.cfg.Routes != nil && c.view.Changed.Err() != nil {
			return errViewChanged
		}
		if retry && errors.Is(err, context.DeadlineExceeded) {
			if h := c.plainLost; h != "" && c.cfg.Routes.Alive(h) {
				c.err = &SlaveLostError{Slave: h, Err: fmt.Errorf("kvstore: the data-plane connection to slave %s broke under a write to a table without replicas (or a relocation), and slave %s lives on: whether the write was applied is unknown, so the worker stops (writes to tables with replicas >= 2 are sent again after such a break)", h, h)}
				return c.err
			}
			if c.waited += wait; c.waited < c.cfg.Timeout {
				return errViewChanged // send what is unacknowledged again
			}
			c.waited = 0
		}
		if errors.Is(err, context.DeadlineExceeded) {
			who := "a shard"
			if p != nil && len(p.host) > 0 {
				who = "slave " + strings.Join(uniq(p.host), ", slave ")
			}
			return fmt.Errorf("%w: no answer from %s within %v", ErrTimeout, who, c.cfg.Timeout)
		}
		return fmt.Errorf("kvstore: reply inbox: %w", err)
	}
	c.waited = 0
	tail := msg.Tail
	if !strings.HasPrefix(tail, "s") { // a scan keeps its pages
		defer msg.Release() // decoded and copied out below
	}
	if (msg.NoResponder || msg.Err != nil) && c.cfg.Routes != nil {
		if msg.Err != nil && errors.Is(msg.Err, transport.ErrConnLost) {
			c.connLost(tail)
		}
		// A slave died: the membership view will say so (within the
		// failure timeout), and receive re-sends then.
		return nil
	}
	if msg.NoResponder {
		return c.gone(c.hostOf(tail, p))
	}
	if msg.Err != nil {
		host := c.hostOf(tail, p)
		return &SlaveLostError{Slave: host, Err: fmt.Errorf("kvstore: slave %s died or became unreachable: %w", host, msg.Err)}
	}
	if strings.HasPrefix(tail, "a") || strings.HasPrefix(tail, "p") {
		if err := decodeRaw(msg.Data, &c.reply); err != nil {
			if c.err == nil {
				c.err = fmt.Errorf("kvstore: acknowledgement from slave %s: %w", c.hostOf(tail, p), err)
			}
			return nil
		}
		if c.reply.Op == OpError {
			host := c.hostOf(tail, p)
			if c.staleError(host) {
				return nil
			}
			if c.err == nil {
				who := "slave " + host
				if table, shard, ok := strings.Cut(host, "#"); ok {
					// A replicated write's address is its shard's chain.
					who = fmt.Sprintf("the chain of table %q shard %s", table, shard)
				}
				c.err = fmt.Errorf("kvstore: %s: %s", who, c.reply.Err)
			}
			return nil
		}
		if c.reply.Repl {
			c.acked(c.reply.ReqID)
			return nil
		}
		c.inflight -= int(c.reply.N)
		return nil
	}
	if strings.HasPrefix(tail, "s") {
		if c.scan != nil {
			return c.scan.deliver(tail, msg.Data)
		}
		return nil // a late page of an abandoned scan
	}
	if !strings.HasPrefix(tail, "g") {
		return nil
	}
	dot := strings.IndexByte(tail, '.')
	if dot < 0 {
		return nil
	}
	seq, err1 := strconv.ParseUint(tail[1:dot], 10, 64)
	idx, err2 := strconv.Atoi(tail[dot+1:])
	r := c.reads[seq]
	if err1 != nil || err2 != nil || r == nil || idx >= len(r.parts) {
		return nil // a late reply to an abandoned read
	}
	err = c.deliver(r, idx, msg.Data)
	if err != nil && r != p {
		// A read nobody waits for right now keeps its error for its Wait.
		if r.err == nil {
			r.err = err
		}
		return nil
	}
	return err
}

// connLost notes the answer to a request whose data-plane connection
// broke (transport.ErrConnLost), in a stage with Routes. If the slave at
// the other end died, the view will say so and the re-sends go to the new
// heads, as for any death. But it may live on (a reset connection, a
// proxy or firewall that dropped it): then no view change comes, and the
// worker waited out Timeout for answers that never come. So the client
// retries after RetryAfter as it does for unacknowledged writes, and then
// also sends the clocks again (a clock names the value it moves the
// worker's clock to, so a second one is harmless) and the reads the
// connection carried (their callers send them again). Shards skip the
// writes they already applied. A write to a table without replicas that
// the connection carried is not kept and its fate is unknown: if its
// slave still lives at the retry, the worker fails with a SlaveLostError
// naming it (plainLost) rather than waiting out Timeout.
func (c *Client) connLost(tail string) {
	c.lost = true
	if strings.HasPrefix(tail, "p") && c.plainLost == "" {
		c.plainLost = c.hostOf(tail, nil)
	}
	if !strings.HasPrefix(tail, "g") {
		return
	}
	seq, _, ok := strings.Cut(tail[1:], ".")
	id, err := strconv.ParseUint(seq, 10, 64)
	if r := c.reads[id]; ok && err == nil && r != nil {
		r.lost = true
	}
}

// deliver puts a reply to part idx of read r in place.
func (c *Client) deliver(r *pending, idx int, data []byte) error {
	if err := decodeRaw(data, &c.reply); err != nil {
		return err
	}
	if c.reply.Op == OpError {
		if r.repl && c.staleError(r.host[idx]) {
			return errViewChanged // sent again to the shard's head of the moment
		}
		return fmt.Errorf("kvstore: slave %s: %s", r.host[idx], c.reply.Err)
	}
	r.note(c.reply.Clock)
	pt := r.parts[idx]
	if len(c.reply.Pos) > 0 {
		// A part answered piecewise by the keys' owners of the moment.
		r.left -= len(c.reply.Pos)
		if pt.lc != nil && c.reply.Node > 0 {
			for _, q := range c.reply.Pos {
				if q >= 0 && q < len(pt.keys) {
					pt.lc.learn(pt.keys[q], int(c.reply.Node-1))
				}
			}
		}
		return r.scatterPos(pt, c.reply.Pos, c.reply.Raw, c.reply.DType)
	}
	r.left -= pt.size(r.width)
	return r.scatter(pt, c.reply.Raw, c.reply.DType)
}

// staleError reports whether an error answer from host is one to drop:
// with Routes, host is dead in the view. A slave declared dead that comes
// back (a stopped process resumed, a healed partition) answers the
// requests it still had, after it dropped the task ("has no shards on
// this slave"); the writes among them were sent again to the shards' new
// heads when the view changed and its reads are sent again, so the
// answer is stale, not the worker's failure.
func (c *Client) staleError(host string) bool {
	return c.cfg.Routes != nil && host != "" && !c.cfg.Routes.Alive(host)
}

// release forgets a finished (or abandoned) read: replies still on their
// way are dropped, never written into a buffer its caller got back.
func (c *Client) release(p *pending) {
	delete(c.reads, p.seq)
	p.out, p.out32, p.err = nil, nil, nil
	if len(c.free) < 8 {
		c.free = append(c.free, p)
	}
}

var errShortReply = errors.New("kvstore: reply has the wrong number of values")

// ackTo is host's acknowledgement address.
func (c *Client) ackTo(host string) string { return c.ackAddrOf(host, host, "a") }

// plainAckTo is host's acknowledgement address for writes nobody keeps
// (publishAcked): a broken connection's answer to one says a write of
// unknown fate was lost (connLost).
func (c *Client) plainAckTo(host string) string {
	return c.ackAddrOf("\x00"+host, host, "p") // no host name holds a NUL
}

// ackAddrOf is the acknowledgement address kept under key for host,
// "<inbox>.<prefix><i>" with i its index in ackHost, made on first use.
func (c *Client) ackAddrOf(key, host, prefix string) string {
	a, ok := c.ackAddr[key]
	if !ok {
		a = c.inbox + "." + prefix + strconv.Itoa(len(c.ackHost))
		c.ackAddr[key] = a
		c.ackHost = append(c.ackHost, host)
	}
	return a
}

// hostOf names the host a reply address was given to ("" if unknown).
func (c *Client) hostOf(tail string, p *pending) string {
	if strings.HasPrefix(tail, "a") || strings.HasPrefix(tail, "p") {
		if i, err := strconv.Atoi(tail[1:]); err == nil && i >= 0 && i < len(c.ackHost) {
			return c.ackHost[i]
		}
		return ""
	}
	if c.scan != nil && strings.HasPrefix(tail, "s") {
		if sh, ok := c.scan.shardOf(tail); ok {
			return c.scan.t.hosts[sh]
		}
	}
	if p != nil && strings.HasPrefix(tail, "g") {
		if seq, idx, ok := strings.Cut(tail[1:], "."); ok && seq == strconv.FormatUint(p.seq, 10) {
			if i, err := strconv.Atoi(idx); err == nil && i >= 0 && i < len(p.host) {
				return p.host[i]
			}
		}
	}
	return ""
}

// gone is the error for a request no server received.
func (c *Client) gone(host string) error {
	if host == "" {
		return errors.New("kvstore: a shard host is not serving its KV requests (slave gone?)")
	}
	return &SlaveLostError{Slave: host, Err: fmt.Errorf("kvstore: slave %s died or left: nothing serves its KV requests any more", host)}
}

// SlaveLostError is a request that failed because the slave serving it
// died, left or cannot be reached: the master, which knows whether the
// stage could have survived that, tells the user what to change.
type SlaveLostError struct {
	Slave string
	Err   error
}

func (e *SlaveLostError) Error() string { return e.Err.Error() }
func (e *SlaveLostError) Unwrap() error { return e.Err }

// sendMsg sends c.msg to host and counts it. A transport that can
// (transport.Appender) gets it encoded straight into its send buffer.
func (c *Client) sendMsg(host, reply string) error {
	var err error
	size := encodedSize(&c.msg)
	if ts, ok := c.cfg.Transport.(transport.TailSender); ok && c.lendRaw && len(c.msg.Raw) >= lendMin {
		if c.head == nil {
			c.head = func(dst []byte) []byte {
				out, tail := appendHead(dst, &c.msg)
				c.built = len(out) - len(dst) + len(tail)
				return out
			}
			c.lentDone = c.lent.Done
		}
		tail := rawTail(&c.msg)
		c.lent.Add(1)
		if err = ts.SendTail(host, reply, size-len(tail), c.head, tail, c.lentDone); err == nil {
			c.stats.BytesLent += int64(len(tail))
		}
	} else if a, ok := c.cfg.Transport.(transport.Appender); ok && size >= appendMin {
		if c.build == nil {
			c.build = func(dst []byte) []byte {
				out := AppendMessage(dst, &c.msg)
				c.built = len(out) - len(dst)
				return out
			}
		}
		err = a.SendAppend(host, reply, size, c.build)
	} else {
		c.enc = AppendMessage(c.enc[:0], &c.msg)
		c.built = len(c.enc)
		err = c.cfg.Transport.Send(host, reply, c.enc)
	}
	if err != nil {
		if errors.Is(err, transport.ErrUnreachable) {
			return c.gone(host)
		}
		return fmt.Errorf("kvstore: send to slave %s: %w", host, err)
	}
	c.stats.Requests++
	c.stats.BytesSent += int64(c.built)
	return nil
}

// scatter converts a reply's raw values straight into their place in the
// read's destination: one pass over the bytes, no intermediate slice.
func (c *pending) scatter(pt part, raw []byte, dtype DType) error {
	size := 8
	if dtype == Float32 {
		size = 4
	}
	n := len(raw) / size
	if pt.pos == nil {
		if n != pt.n {
			return errShortReply
		}
		if c.out32 != nil {
			raw32Into(c.out32[pt.off:pt.off+pt.n], raw, dtype)
			return nil
		}
		rawInto(c.out[pt.off:pt.off+pt.n], raw, dtype)
		return nil
	}
	w := c.width
	if n != len(pt.pos)*w {
		return errShortReply
	}
	for i, p := range pt.pos {
		if c.out32 != nil {
			raw32Into(c.out32[int(p)*w:int(p+1)*w], raw[i*w*size:], dtype)
			continue
		}
		rawInto(c.out[int(p)*w:int(p+1)*w], raw[i*w*size:], dtype)
	}
	return nil
}

// scatterPos converts a partial reply: value row i answers the part's key
// at position pos[i].
func (c *pending) scatterPos(pt part, pos []int, raw []byte, dtype DType) error {
	size := 8
	if dtype == Float32 {
		size = 4
	}
	w := c.width
	if len(raw)/size != len(pos)*w {
		return errShortReply
	}
	n := pt.size(w)
	for i, q := range pos {
		if q < 0 || q >= n {
			return fmt.Errorf("kvstore: reply position %d outside a part of %d keys", q, n)
		}
		if c.out32 != nil {
			at := pt.off + q*w
			if pt.pos != nil {
				at = int(pt.pos[q]) * w
			}
			raw32Into(c.out32[at:at+w], raw[i*w*size:], dtype)
			continue
		}
		var dst []float64
		if pt.pos != nil {
			dst = c.out[int(pt.pos[q])*w : int(pt.pos[q]+1)*w]
		} else {
			dst = c.out[pt.off+q*w : pt.off+(q+1)*w]
		}
		rawInto(dst, raw[i*w*size:], dtype)
	}
	return nil
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
