package main

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/flexps/flexps/kvstore"
	"github.com/nats-io/nats.go"
)

// msg is one request of a kvstore call as it travels: which shard it goes
// to, its payload size and the size of the answer it gets.
type msg struct {
	shard    int
	req, rep int
}

// messager works out the messages the kvstore client sends for a call, by
// encoding the very messages with the kvstore codec: same grouping by
// owner, same split below max_payload, same span merging.
type messager struct {
	task    string
	spec    kvstore.TableSpec
	dir     kvstore.Directory
	maxKeys int
	vals    []float64
}

var ackSize = len(kvstore.AppendMessage(nil, &kvstore.Message{Op: kvstore.OpReply}))

func (m *messager) values(n int) []float64 {
	if cap(m.vals) < n {
		m.vals = make([]float64, n)
	}
	return m.vals[:n]
}

func (m *messager) size(x *kvstore.Message) int { return len(kvstore.AppendMessage(nil, x)) }

func (m *messager) reply(n int) int {
	return m.size(&kvstore.Message{Op: kvstore.OpReply, Width: uint16(m.spec.Width), DType: m.spec.DType, Vals: m.values(n * m.spec.Width)})
}

// calls maps every batch to its messages.
func (m *messager) calls(batches [][]uint64, f func([]uint64) []msg) [][]msg {
	out := make([][]msg, len(batches))
	for i, b := range batches {
		out[i] = f(b)
	}
	return out
}

// byOwner groups keys by shard in input order and splits each group below
// max_payload, as TableClient.Get/Add do.
func (m *messager) byOwner(keys []uint64, fn func(shard int, ks []uint64)) {
	groups := make([][]uint64, m.dir.NumShards())
	for _, k := range keys {
		s := m.dir.Owner(k)
		groups[s] = append(groups[s], k)
	}
	for s, ks := range groups {
		for i := 0; i < len(ks); i += m.maxKeys {
			fn(s, ks[i:min(i+m.maxKeys, len(ks))])
		}
	}
}

func (m *messager) keyedGet(keys []uint64) []msg {
	var out []msg
	m.byOwner(keys, func(s int, ks []uint64) {
		req := m.size(&kvstore.Message{Op: kvstore.OpGet, Task: m.task, Table: m.spec.Name, Keys: ks})
		out = append(out, msg{shard: s, req: req, rep: m.reply(len(ks))})
	})
	return out
}

func (m *messager) keyedAdd(keys []uint64) []msg {
	var out []msg
	m.byOwner(keys, func(s int, ks []uint64) {
		req := m.size(&kvstore.Message{Op: kvstore.OpAdd, Task: m.task, Table: m.spec.Name, Keys: ks,
			Width: uint16(m.spec.Width), DType: m.spec.DType, Vals: m.values(len(ks) * m.spec.Width)})
		out = append(out, msg{shard: s, req: req, rep: ackSize})
	})
	return out
}

type span struct {
	shard int
	first uint64
	n     int
}

// spans merges the chunks' key ranges per owner as TableClient.split does
// and splits them below max_payload.
func (m *messager) spans(chunks []uint64) []span {
	var out []span
	cs := m.spec.ChunkSize
	for _, id := range chunks {
		first := id * cs
		n := int(min(cs, m.spec.Size-first))
		kvstore.Spans(m.dir, first, n, func(s int, f uint64, k int) {
			if l := len(out); l > 0 && out[l-1].shard == s && out[l-1].first+uint64(out[l-1].n) == f {
				out[l-1].n += k
				return
			}
			out = append(out, span{s, f, k})
		})
	}
	var split []span
	for _, sp := range out {
		for i := 0; i < sp.n; i += m.maxKeys {
			split = append(split, span{sp.shard, sp.first + uint64(i), min(m.maxKeys, sp.n-i)})
		}
	}
	return split
}

func (m *messager) chunkGet(chunks []uint64) []msg {
	var out []msg
	for _, sp := range m.spans(chunks) {
		req := m.size(&kvstore.Message{Op: kvstore.OpGetRange, Task: m.task, Table: m.spec.Name, First: sp.first, N: uint32(sp.n)})
		out = append(out, msg{shard: sp.shard, req: req, rep: m.reply(sp.n)})
	}
	return out
}

func (m *messager) chunkAdd(chunks []uint64) []msg {
	var out []msg
	for _, sp := range m.spans(chunks) {
		req := m.size(&kvstore.Message{Op: kvstore.OpAddRange, Task: m.task, Table: m.spec.Name, First: sp.first, N: uint32(sp.n),
			Width: uint16(m.spec.Width), DType: m.spec.DType, Vals: m.values(sp.n * m.spec.Width)})
		out = append(out, msg{shard: sp.shard, req: req, rep: ackSize})
	}
	return out
}

// rawNATS is the baseline: one plain responder per shard server connection
// answering every request with a reply of the size written in the request's
// first 4 bytes, and a client on the worker's connection that sends the
// kvstore's messages (same sizes, same subjects layout) with no codec, no
// store and no bookkeeping.
type rawNATS struct {
	nc       *nats.Conn
	subs     []*nats.Subscription
	inbox    *nats.Subscription
	getSubj  string
	ackSubj  string
	window   int
	payload  []byte
	subjects []string
}

// newRawNATS answers on servers (nil: shard processes answer) and sends
// from client to shards responders.
func newRawNATS(client *nats.Conn, servers []*nats.Conn, shards, window int) (*rawNATS, error) {
	r := &rawNATS{nc: client, window: window, payload: make([]byte, 1<<20)}
	for i := range shards {
		r.subjects = append(r.subjects, rawSubject(i))
	}
	for i, nc := range servers {
		sub, err := rawResponder(nc, i)
		if err != nil {
			return nil, err
		}
		r.subs = append(r.subs, sub)
	}
	inbox := client.NewRespInbox()
	r.getSubj, r.ackSubj = inbox+".g", inbox+".a"
	sub, err := client.SubscribeSync(inbox + ".>")
	if err != nil {
		return nil, err
	}
	sub.SetPendingLimits(-1, -1)
	r.inbox = sub
	for _, nc := range append(servers, client) {
		if err := nc.Flush(); err != nil { // subscriptions are in place
			return nil, err
		}
	}
	return r, nil
}

func rawSubject(shard int) string { return fmt.Sprintf("bench.raw.%d", shard) }

// rawResponder answers every request on shard's raw subject with a reply
// of the size the request asks for.
func rawResponder(nc *nats.Conn, shard int) (*nats.Subscription, error) {
	reply := make([]byte, 1<<20)
	sub, err := nc.Subscribe(rawSubject(shard), func(m *nats.Msg) {
		n := binary.LittleEndian.Uint32(m.Data)
		nc.Publish(m.Reply, reply[:n])
	})
	if err != nil {
		return nil, err
	}
	sub.SetPendingLimits(-1, -1)
	return sub, nil
}

func (r *rawNATS) close() {
	for _, s := range r.subs {
		s.Unsubscribe()
	}
	r.inbox.Unsubscribe()
}

func (r *rawNATS) send(m msg, reply string) {
	p := r.payload[:max(m.req, 4)]
	binary.LittleEndian.PutUint32(p, uint32(m.rep))
	if err := r.nc.PublishRequest(r.subjects[m.shard], reply, p); err != nil {
		fatal(fmt.Errorf("raw NATS: %w", err))
	}
}

func (r *rawNATS) next() {
	if _, err := r.inbox.NextMsg(30 * time.Second); err != nil {
		fatal(fmt.Errorf("raw NATS: %w", err))
	}
}

// loop sends calls (the messages of each kvstore call in the benchmark's
// batches, in the same order): acked calls publish with an ack window as
// Adds do, others send all requests of a call and wait for all replies as
// reads do.
func (r *rawNATS) loop(calls [][]msg, acked bool) loop {
	inflight := 0
	one := func(c []msg) {
		for _, m := range c {
			if acked {
				for inflight >= r.window {
					r.next()
					inflight--
				}
				r.send(m, r.ackSubj)
				inflight++
			} else {
				r.send(m, r.getSubj)
			}
		}
		if !acked {
			for range c {
				r.next()
			}
		}
	}
	n := 0
	return func(d time.Duration) float64 {
		start := time.Now()
		k := 0
		for time.Since(start) < d {
			for i := 0; i < 16; i++ {
				one(calls[n%len(calls)])
				n++
				k++
			}
		}
		for ; inflight > 0; inflight-- {
			r.next()
		}
		return float64(k) / time.Since(start).Seconds()
	}
}

// withRaw completes a kvstore row with its raw NATS baseline.
func withRaw(kv row, rawCalls float64, calls [][]msg) row {
	wire := 0
	for _, c := range calls {
		for _, m := range c {
			wire += m.req + m.rep
		}
	}
	kv.WireBytes = float64(wire) / float64(len(calls))
	kv.RawMBPerS = kv.MBPerS * rawCalls / kv.CallsPerS
	kv.Ratio = kv.CallsPerS / rawCalls
	kv.Baseline = "of raw NATS"
	return kv
}
