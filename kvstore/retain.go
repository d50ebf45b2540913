package kvstore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// A client of a task with replicated tables keeps every write to them,
// and every clock, until it is acknowledged (by the tail of the shard's
// chain, or by the clocked host), with a request id the acknowledgement
// echoes. When the membership view changes (a slave died) it sends the
// unacknowledged writes again to their shards' new heads, which skip the
// ones a replica already applied, and forgets clocks to dead hosts. So a
// death costs no acknowledged write and applies none twice. The window
// (ClientConfig.Window) bounds what is kept.

// retained is a request kept until acknowledged.
type retained struct {
	data  []byte
	reply string
	host  string // where it was last sent
	units int
	shard int          // a write's shard
	table *TableClient // a write's table; nil for a clock or finish to host
}

// errViewChanged is returned by receiveOne when the membership view
// changed while it waited; receive handles it.
var errViewChanged = errors.New("kvstore: membership view changed")

// retaining reports whether the client keeps requests for re-sending.
func (c *Client) retaining() bool { return c.cfg.Routes != nil }

// publishRepl sends c.msg, a write to shard of a replicated table, to the
// shard's head and keeps it until the chain's tail acknowledges it.
func (c *Client) publishRepl(t *TableClient, shard, units int) error {
	for c.inflight >= c.window && c.err == nil {
		if err := c.receive(nil); err != nil {
			return err
		}
	}
	if c.err != nil {
		return c.err
	}
	host, ok := c.cfg.Routes.Head(shard, t.spec.Replicas)
	if !ok {
		return fmt.Errorf("%w: table %q shard %d: no live slave left", ErrShardLost, t.spec.Name, shard)
	}
	c.reqID++
	c.msg.From, c.msg.Repl, c.msg.Shard, c.msg.ReqID, c.msg.Hop, c.msg.Floor, c.msg.Epoch = c.cfg.Incarnation, true, int32(shard), c.reqID, 0, c.floor(), c.view.Epoch
	e := c.newRetained()
	e.data = AppendMessage(e.data[:0], &c.msg)
	e.reply = c.ackTo(t.spec.Name + "#" + strconv.Itoa(shard))
	e.units, e.shard, e.host, e.table = units, shard, host, t
	c.kept[c.reqID] = e
	t.unacked[shard]++
	c.inflight += units
	c.stats.Requests++
	c.stats.BytesSent += int64(len(e.data))
	// A send that fails is sent again once the view says who serves
	// the shard now (or after RetryAfter).
	_ = c.cfg.Transport.Send(host, e.reply, e.data)
	return nil
}

// publishClock sends c.msg (a clock or finish) to host and keeps it until
// acknowledged or host dies.
func (c *Client) publishClock(host string) error {
	for c.inflight >= c.window && c.err == nil {
		if err := c.receive(nil); err != nil {
			return err
		}
	}
	if c.err != nil {
		return c.err
	}
	c.reqID++
	c.msg.From, c.msg.Repl, c.msg.ReqID, c.msg.Epoch = c.cfg.Incarnation, true, c.reqID, c.view.Epoch
	e := c.newRetained()
	e.data = AppendMessage(e.data[:0], &c.msg)
	e.reply, e.units, e.shard, e.host, e.table = c.ackTo(host), 1, 0, host, nil
	c.kept[c.reqID] = e
	c.inflight++
	c.stats.Requests++
	_ = c.cfg.Transport.Send(host, e.reply, e.data) // re-sent like a write, or dropped with its host
	return nil
}

// floor is the client's lowest unacknowledged request id (the next one
// when none is): replicas forget the ids below it.
func (c *Client) floor() uint64 {
	if len(c.kept) == 0 {
		return c.reqID
	}
	if _, ok := c.kept[c.keptMin]; !ok || c.keptMin == 0 {
		c.keptMin = c.reqID
		for id := range c.kept {
			c.keptMin = min(c.keptMin, id)
		}
	}
	return c.keptMin
}

func (c *Client) newRetained() *retained {
	if n := len(c.spare); n > 0 {
		e := c.spare[n-1]
		c.spare = c.spare[:n-1]
		return e
	}
	return &retained{}
}

// acked settles the acknowledgement of request id.
func (c *Client) acked(id uint64) {
	e := c.kept[id]
	if e == nil {
		return // a second acknowledgement of a re-sent write
	}
	delete(c.kept, id)
	c.inflight -= e.units
	if e.table != nil {
		e.table.unacked[e.shard]--
		e.table = nil
	}
	if len(c.spare) < 256 {
		c.spare = append(c.spare, e)
	}
}

// reroute adopts the current membership view: clocks to dead hosts are
// dropped, unacknowledged writes go to their shards' heads again.
func (c *Client) reroute() error { return c.resend(false) }

// resend is reroute; with clocks, also the unacknowledged clocks (and
// finishes) to live hosts go again: after a data-plane connection broke
// under them (see Client.connLost). Sending one twice is harmless: a
// clock names the value it moves the worker's clock to.
func (c *Client) resend(clocks bool) error {
	r := c.cfg.Routes
	c.view = r.View()
	ids := make([]uint64, 0, len(c.kept))
	for id := range c.kept {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	n := len(r.Hosts())
	for _, id := range ids {
		e := c.kept[id]
		if e.table == nil {
			if !r.Alive(e.host) {
				c.acked(id)
			} else if clocks {
				_ = c.cfg.Transport.Send(e.host, e.reply, e.data)
			}
			continue
		}
		chain := Chain(n, c.view.Dead, e.shard, e.table.spec.Replicas)
		if len(chain) == 0 {
			return fmt.Errorf("%w: shard %d: no live slave left", ErrShardLost, e.shard)
		}
		e.host = r.Hosts()[chain[0]]
		_ = c.cfg.Transport.Send(e.host, e.reply, e.data) // a failure: sent again at the next change or retry
	}
	if c.scan != nil {
		return c.scan.reroute()
	}
	return nil
}

// readAffected reports whether read p waits for a host that is dead in
// the client's view.
func (c *Client) readAffected(p *pending) bool { return c.deadHost(p) != "" }

// deadHost is the first host read p waits for that is dead in the
// client's view ("" when none is): the one a read of several shards
// failed for, not merely its first part's.
func (c *Client) deadHost(p *pending) string {
	for _, h := range p.host {
		if !c.cfg.Routes.Alive(h) {
			return h
		}
	}
	return ""
}
