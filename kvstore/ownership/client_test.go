package ownership

import (
	"testing"

	"pgregory.net/rapid"
)

type op struct {
	client int
	seq    int
	add    float64
}

type delivery struct {
	client     int
	req        uint64
	keys       []uint64
	vals       []float64
	spawned    int
	from       NodeID
	isGet      bool
	sentToNode bool
}

// TestClientsProperty: N nodes, M clients per node with location caches and the flush rule,
// synchronous Gets, asynchronous Adds and Localizes, random FIFO-per-pair deliveries. Checks per
// key one applied order with each client's operations in program order, every Get equal to the
// sum of the Adds applied before it and never below the client's own adds or earlier reads, the
// final sums, one owner per key, bounded hops and completed Localizes.
func TestClientsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nn := rapid.IntRange(2, 4).Draw(t, "nodes")
		mpn := rapid.IntRange(1, 3).Draw(t, "clientsPerNode")
		const keys = 5
		home := func(k uint64) NodeID { return NodeID(int(k) % nn) }
		nodes := make([]*Node, nn)
		stores := make([]map[uint64]float64, nn)
		sized := rapid.Bool().Draw(t, "sized")
		for i := range nodes {
			nodes[i] = newTestNode(NodeID(i), home, sized, keys)
			stores[i] = map[uint64]float64{}
		}
		for k := uint64(0); k < keys; k++ {
			stores[home(k)][k] = 0
		}
		nc := nn * mpn
		clients := make([]*Client, nc)
		for i := range clients {
			clients[i] = NewClient(home, 2)
		}
		// queue ids: nodes 0..nn-1, clients nn..nn+nc-1
		queues := map[env][]any{}
		var pairs []env
		push := func(e env, x any) {
			if len(queues[e]) == 0 {
				pairs = append(pairs, e)
			}
			queues[e] = append(queues[e], x)
		}
		log := map[uint64][]op{}
		lastSeq := map[[2]int]int{}     // (client,key) -> last applied seq
		ownAdds := map[[2]int]float64{} // (client,key) -> adds applied
		lastRead := map[[2]int]float64{}
		want := map[uint64]float64{}
		seqs := make([]int, nc)
		blocked := make([]bool, nc) // waiting for a synchronous Get
		reqSeq := map[uint64]int{}
		getVals := map[uint64]map[int]float64{}
		getKeys := map[uint64][]uint64{}
		var nextReq uint64
		var run func(at NodeID, acts []Action)
		run = func(at NodeID, acts []Action) {
			for _, a := range acts {
				switch a.Kind {
				case Send:
					push(env{at, a.To}, a.Msg)
				case Apply:
					m := a.Msg
					d := delivery{client: m.Client, req: m.Req, spawned: a.Spawned, from: at, isGet: m.Kind == Get}
					for i, k := range m.Keys {
						v, ok := stores[at][k]
						if !ok {
							t.Fatalf("node %d applies key %d it does not hold", at, k)
						}
						ck := [2]int{m.Client, int(k)}
						s := reqSeq[m.Req]
						if s <= lastSeq[ck] {
							t.Fatalf("client %d key %d: op %d applied after op %d", m.Client, k, s, lastSeq[ck])
						}
						lastSeq[ck] = s
						var sum float64
						for _, o := range log[k] {
							sum += o.add
						}
						if sum != v {
							t.Fatalf("key %d holds %v, the sequential model says %v", k, v, sum)
						}
						o := op{client: m.Client, seq: s}
						if m.Kind == Add {
							o.add = m.Vals[i][0]
						}
						log[k] = append(log[k], o)
						if m.Kind == Add {
							stores[at][k] = v + m.Vals[i][0]
							ownAdds[ck] += m.Vals[i][0]
						} else {
							if v < ownAdds[ck] || v < lastRead[ck] {
								t.Fatalf("client %d key %d read %v below own adds %v / last read %v", m.Client, k, v, ownAdds[ck], lastRead[ck])
							}
							lastRead[ck] = v
							getVals[m.Req][m.Positions[i]] = v
						}
						d.keys = append(d.keys, k)
					}
					push(env{at, NodeID(nn + m.Client)}, d)
				case Extract:
					m := a.Msg
					for _, k := range m.Keys {
						v, ok := stores[at][k]
						if !ok {
							t.Fatalf("node %d extracts key %d it does not hold", at, k)
						}
						m.Vals = append(m.Vals, []float64{v})
						delete(stores[at], k)
					}
					push(env{at, a.To}, m)
				case Install:
					for i, k := range a.Msg.Keys {
						if _, ok := stores[at][k]; ok {
							t.Fatalf("node %d installs key %d twice", at, k)
						}
						stores[at][k] = a.Msg.Vals[i][0]
					}
				}
			}
		}
		request := func(c int, kind Kind, ks []uint64) {
			cl := clients[c]
			nextReq++
			seqs[c]++
			req := nextReq
			reqSeq[req] = seqs[c]
			byNode := map[NodeID]Msg{}
			var order []NodeID
			for i, k := range ks {
				to := cl.Route(k)
				m, ok := byNode[to]
				if !ok {
					order = append(order, to)
					m = Msg{Kind: kind, Client: c, Req: req}
				}
				m.Keys = append(m.Keys, k)
				m.Positions = append(m.Positions, i)
				if kind == Add {
					m.Vals = append(m.Vals, []float64{1})
					want[k]++
				}
				byNode[to] = m
			}
			cl.Sent(req, len(ks), len(order))
			if kind == Get {
				blocked[c] = true
				getVals[req] = map[int]float64{}
				getKeys[req] = ks
			}
			for _, to := range order {
				// clients sit on their node; a request to the own node is a local step
				push(env{NodeID(nn + c), to}, byNode[to])
			}
		}
		steps := rapid.IntRange(1, 150).Draw(t, "steps")
		hops := 0
		for s := 0; s < steps || len(pairs) > 0; s++ {
			c := 0
			if s < steps {
				c = rapid.IntRange(0, 3).Draw(t, "choice")
			}
			if c == 0 || s >= steps {
				if len(pairs) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(pairs)-1).Draw(t, "pair")
				e := pairs[i]
				x := queues[e][0]
				queues[e] = queues[e][1:]
				if len(queues[e]) == 0 {
					pairs = append(pairs[:i], pairs[i+1:]...)
				}
				if hops++; hops > 100000 {
					t.Fatal("messages do not settle")
				}
				switch x := x.(type) {
				case Msg:
					run(e.to, nodes[e.to].Step(x))
					checkOwned(t, nodes, stores, keys)
				case delivery:
					if clients[x.client].Reply(x.req, x.keys, x.spawned, x.from) && x.isGet {
						if len(getVals[x.req]) != len(getKeys[x.req]) {
							t.Fatalf("get %d complete with %d of %d positions", x.req, len(getVals[x.req]), len(getKeys[x.req]))
						}
						blocked[x.client] = false
					}
				}
				continue
			}
			cl := rapid.IntRange(0, nc-1).Draw(t, "client")
			ks := rapid.SliceOfNDistinct(rapid.Uint64Range(0, keys-1), 1, 3, rapid.ID[uint64]).Draw(t, "keys")
			switch {
			case c == 3:
				at := NodeID(cl / mpn)
				run(at, nodes[at].StartLocalize(ks))
				checkOwned(t, nodes, stores, keys)
			case blocked[cl]:
			case c == 1:
				request(cl, Add, ks)
			default:
				request(cl, Get, ks)
			}
		}
		checkFinal(t, nodes, stores, want, keys)
		for i, cl := range clients {
			if cl.InFlight() != 0 {
				t.Fatalf("client %d has %d requests in flight at quiescence", i, cl.InFlight())
			}
		}
	})
}
