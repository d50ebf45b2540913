package ownership

import (
	"testing"

	"pgregory.net/rapid"
)

type env struct{ from, to NodeID }

// TestRelocationProperty runs nodes over per-pair FIFO queues with random deliveries, Adds and
// Localizes, and checks no Add is lost or doubled and each key has exactly one owner at the end.
func TestRelocationProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nn := rapid.IntRange(2, 4).Draw(t, "nodes")
		const keys = 6
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
		queues := map[env][]Msg{}
		var pairs []env
		want := map[uint64]float64{}
		var run func(at NodeID, acts []Action)
		run = func(at NodeID, acts []Action) {
			for _, a := range acts {
				switch a.Kind {
				case Send:
					e := env{at, a.To}
					if len(queues[e]) == 0 {
						pairs = append(pairs, e)
					}
					queues[e] = append(queues[e], a.Msg)
				case Apply:
					for i, k := range a.Msg.Keys {
						v, ok := stores[at][k]
						if !ok {
							t.Fatalf("node %d applies key %d it does not hold", at, k)
						}
						if a.Msg.Kind == Add {
							stores[at][k] = v + a.Msg.Vals[i][0]
						}
					}
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
					run(at, []Action{{Kind: Send, To: a.To, Msg: m}})
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
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		hops := 0
		for s := 0; s < steps || len(pairs) > 0; s++ {
			c := 0
			if s < steps {
				c = rapid.IntRange(0, 2).Draw(t, "choice")
			}
			at := NodeID(rapid.IntRange(0, nn-1).Draw(t, "node"))
			k := uint64(rapid.IntRange(0, keys-1).Draw(t, "key"))
			switch {
			case c == 0 && len(pairs) > 0 || s >= steps:
				i := rapid.IntRange(0, len(pairs)-1).Draw(t, "pair")
				e := pairs[i]
				m := queues[e][0]
				queues[e] = queues[e][1:]
				if len(queues[e]) == 0 {
					pairs = append(pairs[:i], pairs[i+1:]...)
				}
				hops++
				if hops > 100000 {
					t.Fatal("messages do not settle")
				}
				run(e.to, nodes[e.to].Step(m))
				checkOwned(t, nodes, stores, keys)
			case c == 1:
				want[k]++
				run(at, nodes[at].Step(Msg{Kind: Add, Keys: []uint64{k}, Positions: []int{0}, Vals: [][]float64{{1}}}))
			default:
				run(at, nodes[at].StartLocalize([]uint64{k}))
			}
			checkOwned(t, nodes, stores, keys)
		}
		checkFinal(t, nodes, stores, want, keys)
	})
}

// checkFinal checks the settled state: every key has exactly one owner,
// which holds the sequential model's value, and nothing is in flight.
func checkFinal(t *rapid.T, nodes []*Node, stores []map[uint64]float64, want map[uint64]float64, keys uint64) {
	for k := uint64(0); k < keys; k++ {
		owners := 0
		for i, nd := range nodes {
			if nd.Owns(k) {
				owners++
				if stores[i][k] != want[k] {
					t.Fatalf("key %d = %v, want %v", k, stores[i][k], want[k])
				}
			}
			if nd.Incoming(k) {
				t.Fatalf("key %d still incoming at %d", k, i)
			}
		}
		if owners != 1 {
			t.Fatalf("key %d has %d owners", k, owners)
		}
	}
}

// newTestNode is a node with (sized) or without the ownership bitset.
func newTestNode(id NodeID, home func(uint64) NodeID, sized bool, keys uint64) *Node {
	if sized {
		return NewNodeSized(id, home, keys)
	}
	return NewNode(id, home)
}

// checkOwned checks, between deliveries, that a node owns a key exactly
// when its store holds the key's value (an Extract leaves with the step
// that took the key away, an Install comes with the step that gives it),
// and that the ownership bitset agrees with the maps.
func checkOwned(t *rapid.T, nodes []*Node, stores []map[uint64]float64, keys uint64) {
	for i, nd := range nodes {
		for k := uint64(0); k < keys; k++ {
			_, held := stores[i][k]
			if own := nd.Owns(k); own != held || own != nd.ownsByMaps(k) || own != nd.OwnsAt(k, nd.Home(k)) {
				t.Fatalf("node %d key %d: Owns %v, maps %v, OwnsAt %v, value held %v", i, k, own, nd.ownsByMaps(k), nd.OwnsAt(k, nd.Home(k)), held)
			}
		}
	}
}
