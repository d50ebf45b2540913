package kvstore

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
	"pgregory.net/rapid"
)

// stepNet is a transport whose deliveries the test chooses: every sender
// (a node, or a client) has a FIFO queue per destination, and a step hands
// the head of one queue to its node's handler on the test's goroutine. So
// rapid explores the interleavings of the replication protocol (chain
// writes, snapshots, failover notes, clients' re-sends) against the real
// Server code.
type stepNet struct {
	handlers map[string]transport.Handler
	queues   map[[2]string][]stepMsg // (from, to) -> FIFO
	order    [][2]string             // queue keys in creation order (deterministic picks)
	inbox    map[string][]stepMsg    // client -> answers
	dead     map[string]bool
}

type stepMsg struct {
	data  []byte
	reply string
}

func newStepNet() *stepNet {
	return &stepNet{handlers: map[string]transport.Handler{}, queues: map[[2]string][]stepMsg{}, inbox: map[string][]stepMsg{}, dead: map[string]bool{}}
}

// as is the transport of one sender.
func (n *stepNet) as(from string) transport.Transport { return &stepPort{n: n, from: from} }

func (n *stepNet) send(from, to, reply string, data []byte) {
	k := [2]string{from, to}
	if _, ok := n.queues[k]; !ok {
		n.order = append(n.order, k)
	}
	n.queues[k] = append(n.queues[k], stepMsg{data: slices.Clone(data), reply: reply})
}

// ready lists the queues with a message for a live node.
func (n *stepNet) ready() [][2]string {
	var out [][2]string
	for _, k := range n.order {
		if len(n.queues[k]) > 0 {
			out = append(out, k)
		}
	}
	return out
}

// deliver hands the head of queue k to its node (dropped if it is dead).
func (n *stepNet) deliver(k [2]string) {
	m := n.queues[k][0]
	n.queues[k] = n.queues[k][1:]
	if n.dead[k[1]] {
		return
	}
	if h := n.handlers[k[1]]; h != nil {
		h(m.data, m.reply)
	}
}

type stepPort struct {
	n    *stepNet
	from string
}

func (p *stepPort) Serve(node string, h transport.Handler) (io.Closer, error) {
	p.n.handlers[node] = h
	return io.NopCloser(nil), nil
}
func (p *stepPort) Send(node, reply string, data []byte) error {
	p.n.send(p.from, node, reply, data)
	return nil
}
func (p *stepPort) Reply(addr string, data []byte) error {
	client, _, _ := strings.Cut(addr, ".")
	p.n.inbox[client] = append(p.n.inbox[client], stepMsg{data: slices.Clone(data), reply: addr})
	return nil
}
func (p *stepPort) Listen() (transport.Inbox, error) { return nil, fmt.Errorf("not used") }
func (p *stepPort) MaxPayload() int                  { return 4096 }

// stepClient is a worker writing +v to keys as the real client does:
// request ids, kept until acknowledged, re-sent to new heads.
type stepClient struct {
	name  string
	node  int // the slave it runs on: it dies with it
	seq   uint64
	dead  []bool // its view
	kept  map[uint64]keptWrite
	acked map[uint64]int64 // key -> acknowledged sum
	sent  map[uint64]int64 // key -> every value sent
}

type keptWrite struct {
	shard int
	key   uint64
	v     int64
	data  []byte
	reply string
}

func TestReplicationProtocolProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		R := rapid.IntRange(2, 3).Draw(rt, "replicas")
		n := R + 2
		deathsLeft := R - 1 // fewer than R: some copy of every shard survives
		hosts := make([]string, n)
		for i := range hosts {
			hosts[i] = "n" + strconv.Itoa(i)
		}
		spec := TableSpec{Name: "w", Size: 16, Replicas: R}
		net := newStepNet()
		servers := make([]*Server, n)
		for i, h := range hosts {
			s, err := NewServer(net.as(h), h, zerolog.Nop())
			if err != nil {
				rt.Fatal(err)
			}
			s.spawn = func(f func()) { f() } // snapshot pages queue at once
			if err := s.CreateTables("t", h, []Placement{{Spec: spec, Hosts: hosts}}); err != nil {
				rt.Fatal(err)
			}
			servers[i] = s
		}
		dir, _ := NewDirectory(spec.WithDefaults(), n)
		clients := make([]*stepClient, rapid.IntRange(1, 4).Draw(rt, "clients"))
		for i := range clients {
			clients[i] = &stepClient{name: "c" + strconv.Itoa(i), node: rapid.IntRange(0, n-1).Draw(rt, "node"),
				dead: make([]bool, n), kept: map[uint64]keptWrite{}, acked: map[uint64]int64{}, sent: map[uint64]int64{}}
		}
		truth := make([]bool, n)  // who is really dead
		var deaths []int          // in the order the membership declares them
		learned := make([]int, n) // deaths each node has heard of, in order
		sendTo := func(c *stepClient, w keptWrite) {
			chain := Chain(n, c.dead, w.shard, R)
			net.send(c.name, hosts[chain[0]], w.reply, w.data)
		}
		readAcks := func(c *stepClient) {
			for _, m := range net.inbox[c.name] {
				var a Message
				if err := DecodeMessage(m.data, &a); err != nil {
					rt.Fatalf("bad answer: %v", err)
				}
				if a.Op == OpError {
					rt.Fatalf("client %s got an error: %s", c.name, a.Err)
				}
				if w, ok := c.kept[a.ReqID]; ok && a.Repl {
					c.acked[w.key] += w.v
					delete(c.kept, a.ReqID)
				}
			}
			net.inbox[c.name] = nil
		}
		steps := rapid.IntRange(10, 200).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1, 2: // a write
				c := clients[rapid.IntRange(0, len(clients)-1).Draw(rt, "client")]
				if truth[c.node] {
					continue
				}
				key := uint64(rapid.IntRange(0, int(spec.Size)-1).Draw(rt, "key"))
				v := int64(rapid.IntRange(1, 9).Draw(rt, "v"))
				c.seq++
				floor := c.seq
				if ids := sortedIDs(c.kept); len(ids) > 0 {
					floor = ids[0]
				}
				shard := dir.Owner(key)
				data := AppendMessage(nil, &Message{Op: OpAdd, Task: "t", Table: "w", Keys: []uint64{key}, Vals: []float64{float64(v)},
					Width: 1, Repl: true, Shard: int32(shard), ReqID: c.seq, Floor: floor, Epoch: uint64(c.learned())})
				w := keptWrite{shard: shard, key: key, v: v, data: data, reply: c.name + ".a" + strconv.Itoa(shard)}
				c.kept[c.seq] = w
				c.sent[key] += v
				sendTo(c, w)
			case 3, 4, 5, 6: // a delivery
				if r := net.ready(); len(r) > 0 {
					net.deliver(r[rapid.IntRange(0, len(r)-1).Draw(rt, "queue")])
				}
			case 7: // a death
				if deathsLeft == 0 {
					continue
				}
				x := rapid.IntRange(0, n-1).Draw(rt, "victim")
				if truth[x] {
					continue
				}
				truth[x] = true
				deaths = append(deaths, x)
				gone := []string{hosts[x]}
				for _, c := range clients {
					if c.node == x {
						gone = append(gone, c.name)
					}
				}
				// What the dead process had sent is either lost or still
				// arrives (bytes already in the kernel's socket buffers).
				lose := rapid.Bool().Draw(rt, "lose in-flight")
				for _, g := range gone {
					net.dead[g] = true
					for k := range net.queues {
						if k[0] == g && lose {
							net.queues[k] = nil
						}
					}
				}
				deathsLeft--
			case 8: // a node hears the next membership view
				i := rapid.IntRange(0, n-1).Draw(rt, "learner")
				if !truth[i] && learned[i] < len(deaths) {
					servers[i].PeerDead(hosts[deaths[learned[i]]])
					learned[i]++
				}
			case 9: // a client hears of a death and re-sends
				c := clients[rapid.IntRange(0, len(clients)-1).Draw(rt, "client")]
				if k := c.learned(); !truth[c.node] && k < len(deaths) {
					c.dead[deaths[k]] = true
					readAcks(c)
					for _, id := range sortedIDs(c.kept) {
						sendTo(c, c.kept[id])
					}
				}
			}
			for _, c := range clients {
				readAcks(c)
			}
		}
		// Settle: everyone learns every death, clients re-send, until
		// every live client's writes are acknowledged.
		for i := range n {
			for ; !truth[i] && learned[i] < len(deaths); learned[i]++ {
				servers[i].PeerDead(hosts[deaths[learned[i]]])
			}
		}
		for _, c := range clients {
			if truth[c.node] {
				continue
			}
			resend := false
			for x := range n {
				if truth[x] && !c.dead[x] {
					c.dead[x], resend = true, true
				}
			}
			readAcks(c)
			if resend {
				for _, id := range sortedIDs(c.kept) {
					sendTo(c, c.kept[id])
				}
			}
		}
		// The network settles; a client with writes still unanswered sends
		// them again (its RetryAfter timer), until all are acknowledged.
		for retries := 0; retries < 5; retries++ {
			for rounds := 0; ; rounds++ {
				r := net.ready()
				if len(r) == 0 {
					break
				}
				if rounds > 100000 {
					rt.Fatal("the network never settles")
				}
				net.deliver(r[0])
				for _, c := range clients {
					readAcks(c)
				}
			}
			for _, c := range clients {
				if !truth[c.node] {
					for _, id := range sortedIDs(c.kept) {
						sendTo(c, c.kept[id])
					}
				}
			}
		}
		for _, c := range clients {
			if !truth[c.node] && len(c.kept) > 0 {
				rt.Fatalf("client %s: %d writes never acknowledged", c.name, len(c.kept))
			}
		}
		// Every live copy of every shard holds every acknowledged write,
		// and at most the dead clients' unacknowledged ones besides.
		for key := uint64(0); key < spec.Size; key++ {
			var lo, hi int64
			for _, c := range clients {
				lo += c.acked[key]
				if truth[c.node] {
					hi += c.sent[key]
				} else {
					hi += c.acked[key]
				}
			}
			shard := dir.Owner(key)
			first := int64(-1)
			for _, h := range Chain(n, truth, shard, R) {
				ht := servers[h].hosted("t", "w")
				rep := ht.repl.shards[shard]
				if rep == nil || !rep.ready {
					rt.Fatalf("shard %d has no complete copy on %s, which is in its chain", shard, hosts[h])
				}
				out := make([]float64, 1)
				rep.store.Get([]uint64{key}, out)
				got := int64(out[0])
				if got < lo || got > hi {
					rt.Fatalf("key %d on %s (chain of shard %d: %v) = %d, want in [%d, %d]", key, hosts[h], shard, Chain(n, truth, shard, R), got, lo, hi)
				}
				// Copies agree but for Adds of a client that died with them
				// unacknowledged: one may have reached some copies only.
				if first >= 0 && got != first && hi == lo {
					rt.Fatalf("key %d: copies of shard %d differ: %d and %d", key, shard, first, got)
				}
				first = got
			}
		}
	})
}

// learned counts the deaths c has heard of.
func (c *stepClient) learned() int {
	k := 0
	for _, d := range c.dead {
		if d {
			k++
		}
	}
	return k
}

func sortedIDs(m map[uint64]keptWrite) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// FuzzDecodeApplied: the applied ids a snapshot's end carries never panic
// the decoder, and what encodes decodes to the same sets.
func FuzzDecodeApplied(f *testing.F) {
	f.Add(encodeApplied(map[string]*appliedIDs{"c.a0": {floor: 3, ids: map[uint64]struct{}{4: {}, 9: {}}}, "d.a1": {ids: map[uint64]struct{}{}}}))
	f.Add([]byte{})
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeApplied(b)
		if err != nil {
			return
		}
		again, err := decodeApplied(encodeApplied(a))
		if err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if len(again) != len(a) {
			t.Fatalf("%d clients, then %d", len(a), len(again))
		}
		for k, v := range a {
			w := again[k]
			if w == nil || w.floor != v.floor || len(w.ids) != len(v.ids) {
				t.Fatalf("client %q: %+v, then %+v", k, v, w)
			}
		}
	})
}
