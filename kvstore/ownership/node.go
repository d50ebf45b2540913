// Package ownership is the pure relocation protocol of the key-value store (Lapse-style dynamic
// parameter allocation). One Node is one node's view of one table: as home of its shard's keys
// it keeps the moved table (key -> owner, version) and is the serialization point of every
// routing change; as owner it serves the keys it holds; as requester it marks keys incoming and
// queues requests for them until Values installs them. A relocation takes at most three
// messages: Localize (requester -> home), Transfer (home -> old owner), Values (old owner ->
// requester); two when the home is the requester or the old owner.
//
// Routing rules (docs: /work/notes/ownership.md): a non-owner, non-home node forwards to the
// home, never to a guessed owner, so one node orders every route change (rules 1 and 4); the
// home sends Transfer after the requests it already forwarded to the old owner, so per-sender
// FIFO makes the old owner apply them before the value leaves (rule 2); a requester marks keys
// incoming before asking and queues requests, including a later Transfer, until the value
// arrives, so nothing overtakes the move (rule 3). The machine has no goroutines, clocks or I/O:
// Step returns Actions that the caller's store and transport carry out.
package ownership

// NodeID names a node of the table's shard map.
type NodeID int

// Kind is a message kind.
type Kind int

// Message kinds.
const (
	Get Kind = iota
	Add
	Set // routed like Add: applied by the owner of the moment
	Localize
	Transfer
	Values
)

// Msg is a protocol message. Positions index the keys in the client's original request so the
// final owner can answer the client directly.
type Msg struct {
	Kind      Kind
	Keys      []uint64
	Positions []int
	Vals      [][]float64
	Versions  []uint64
	Node      NodeID // Localize: requester; Transfer: destination
	Client    int
	Req       uint64
	// Ctx is the caller's context of a Get/Add/Set (where to answer, the
	// reader's clock); split and queued copies keep it.
	Ctx any
}

// ActionKind says what the caller must do.
type ActionKind int

// Action kinds.
const (
	Apply   ActionKind = iota // serve Msg (Get/Add) on local keys, then Reply to Msg.Client
	Send                      // send Msg to To
	Extract                   // remove Msg.Keys from the store; their values go into the Values message sent To
	Install                   // install Msg.Keys with Msg.Vals
	LocalizeDone
)

// Action is one effect for the caller. For Apply, Spawned is the number of sub-requests this
// node forwarded or queued for the same client request (for the client's ack accounting).
type Action struct {
	Kind    ActionKind
	To      NodeID
	Msg     Msg
	Spawned int
}

// Stats counts protocol events.
type Stats struct {
	Relocations, Forwards, Queued, RelocationMsgs int
}

type loc struct {
	owner   NodeID
	version uint64
}

// Node is one node's state for one table.
type Node struct {
	ID    NodeID
	Home  func(key uint64) NodeID
	Epoch uint64 // shard-map epoch; failover will bump it (not implemented)

	moved    map[uint64]loc    // home role: home keys owned elsewhere
	guests   map[uint64]uint64 // owner role: non-home keys owned here -> version
	incoming map[uint64][]Msg  // requester role: queued requests per incoming key
	// own, when the node was given the key space's size, is Owns as a
	// bitset over [0, size): the answer the maps give, kept in step with
	// them by note after every change of a key's entries. It turns the
	// per-key check of a worker's in-memory batch (up to three map
	// lookups) into one load and a mask.
	own   []uint64
	Stats Stats
}

// MaxIndexedKeys is the largest key space NewNodeSized keeps an
// ownership bitset for (16 MiB of bits); beyond it Owns asks the maps.
const MaxIndexedKeys = 1 << 27

// NewNode returns a node whose home keys all live at home.
func NewNode(id NodeID, home func(uint64) NodeID) *Node {
	return &Node{ID: id, Home: home, moved: map[uint64]loc{}, guests: map[uint64]uint64{}, incoming: map[uint64][]Msg{}}
}

// NewNodeSized is NewNode with the ownership bitset (EnableIndex).
func NewNodeSized(id NodeID, home func(uint64) NodeID, size uint64) *Node {
	n := NewNode(id, home)
	n.EnableIndex(size)
	return n
}

// EnableIndex makes the node keep Owns as a bitset over keys [0, size)
// from now on (built here from the maps, in one pass over the key space),
// when size is at most MaxIndexedKeys; OwnsAt and Owns then read it
// instead of the maps, and keys >= size are owned by nobody. A caller
// enables it when the table starts to move, so tables that never do pay
// neither the pass nor the memory.
func (n *Node) EnableIndex(size uint64) {
	if n.own != nil || size == 0 || size > MaxIndexedKeys {
		return
	}
	own := make([]uint64, (size+63)/64)
	for k := range size {
		if n.ownsByMaps(k) {
			own[k>>6] |= 1 << (k & 63)
		}
	}
	n.own = own
}

// note brings k's ownership bit in line with the maps after a change of
// k's entries.
func (n *Node) note(k uint64) {
	if k>>6 >= uint64(len(n.own)) {
		return
	}
	if n.ownsByMaps(k) {
		n.own[k>>6] |= 1 << (k & 63)
	} else {
		n.own[k>>6] &^= 1 << (k & 63)
	}
}

// Indexed reports whether the node keeps the ownership bitset.
func (n *Node) Indexed() bool { return n.own != nil }

// Owns reports whether the key's value is in this node's store now.
func (n *Node) Owns(k uint64) bool {
	if n.own != nil {
		return k>>6 < uint64(len(n.own)) && n.own[k>>6]&(1<<(k&63)) != 0
	}
	return n.ownsByMaps(k)
}

// ownsByMaps is Owns computed from the role maps.
func (n *Node) ownsByMaps(k uint64) bool {
	if _, ok := n.incoming[k]; ok {
		return false
	}
	if n.Home(k) == n.ID {
		_, away := n.moved[k]
		return !away
	}
	_, ok := n.guests[k]
	return ok
}

// OwnsAt is Owns for a key whose home the caller already computed (the
// hot path of a worker's batch: one lookup, none on empty maps).
func (n *Node) OwnsAt(k uint64, home NodeID) bool {
	if n.own != nil {
		return k>>6 < uint64(len(n.own)) && n.own[k>>6]&(1<<(k&63)) != 0
	}
	if len(n.incoming) > 0 {
		if _, ok := n.incoming[k]; ok {
			return false
		}
	}
	if home == n.ID {
		if len(n.moved) == 0 {
			return true
		}
		_, away := n.moved[k]
		return !away
	}
	if len(n.guests) == 0 {
		return false
	}
	_, ok := n.guests[k]
	return ok
}

// Counts are the keys this node holds as a guest and its home keys owned elsewhere.
func (n *Node) Counts() (guests, away int) { return len(n.guests), len(n.moved) }

// Incoming reports whether the node waits for the key's value.
func (n *Node) Incoming(k uint64) bool { _, ok := n.incoming[k]; return ok }

// StartLocalize begins moving keys to this node (rule 3: mark incoming before asking).
func (n *Node) StartLocalize(keys []uint64) []Action {
	byHome := map[NodeID][]uint64{}
	var order []NodeID
	for _, k := range keys {
		if n.Owns(k) || n.Incoming(k) {
			continue
		}
		n.incoming[k] = nil
		n.note(k)
		h := n.Home(k)
		if _, ok := byHome[h]; !ok {
			order = append(order, h)
		}
		byHome[h] = append(byHome[h], k)
	}
	var acts []Action
	for _, h := range order {
		m := Msg{Kind: Localize, Keys: byHome[h], Node: n.ID}
		if h == n.ID {
			acts = append(acts, n.Step(m)...)
			continue
		}
		n.Stats.RelocationMsgs++
		acts = append(acts, Action{Kind: Send, To: h, Msg: m})
	}
	return acts
}

// Step handles one delivered message.
func (n *Node) Step(m Msg) []Action {
	switch m.Kind {
	case Get, Add, Set:
		return n.request(m)
	case Localize:
		return n.localize(m)
	case Transfer:
		return n.transfer(m)
	case Values:
		return n.values(m)
	}
	return nil
}

func sub(m Msg, idx []int) Msg {
	s := Msg{Kind: m.Kind, Client: m.Client, Req: m.Req, Node: m.Node, Ctx: m.Ctx}
	for _, i := range idx {
		s.Keys = append(s.Keys, m.Keys[i])
		s.Positions = append(s.Positions, m.Positions[i])
		if m.Vals != nil {
			s.Vals = append(s.Vals, m.Vals[i])
		}
		if m.Versions != nil {
			s.Versions = append(s.Versions, m.Versions[i])
		}
	}
	return s
}

func (n *Node) request(m Msg) []Action {
	var local []int
	fwd := map[NodeID][]int{}
	var order []NodeID
	spawned := 0
	for i, k := range m.Keys {
		switch {
		case n.Owns(k):
			local = append(local, i)
		case n.Incoming(k):
			n.incoming[k] = append(n.incoming[k], sub(m, []int{i}))
			n.Stats.Queued++
			spawned++
		default:
			to := n.Home(k) // rules 1 and 4
			if to == n.ID {
				to = n.moved[k].owner
			}
			if _, ok := fwd[to]; !ok {
				order = append(order, to)
			}
			fwd[to] = append(fwd[to], i)
		}
	}
	var acts []Action
	for _, to := range order {
		n.Stats.Forwards++
		spawned++
		acts = append(acts, Action{Kind: Send, To: to, Msg: sub(m, fwd[to])})
	}
	if len(local) > 0 || spawned == 0 {
		acts = append(acts, Action{Kind: Apply, Msg: sub(m, local), Spawned: spawned})
	} else {
		acts = append(acts, Action{Kind: Apply, Msg: sub(m, nil), Spawned: spawned})
	}
	return acts
}

func (n *Node) localize(m Msg) []Action {
	var acts []Action
	byOwner := map[NodeID]Msg{}
	var order []NodeID
	var here Msg
	for _, k := range m.Keys {
		l, away := n.moved[k]
		if !away {
			l = loc{owner: n.ID}
		}
		if l.owner == m.Node {
			continue // already there or on its way
		}
		l.version++
		n.Stats.Relocations++
		if m.Node == n.ID {
			delete(n.moved, k)
		} else {
			n.moved[k] = loc{owner: m.Node, version: l.version}
		}
		n.note(k)
		if l.owner == n.ID && n.Incoming(k) { // rule 3: the home's own move back is still on its way
			n.incoming[k] = append(n.incoming[k], Msg{Kind: Transfer, Keys: []uint64{k}, Versions: []uint64{l.version}, Node: m.Node, Positions: []int{0}})
			n.Stats.RelocationMsgs++
			continue
		}
		if l.owner == n.ID {
			here.Keys = append(here.Keys, k)
			here.Versions = append(here.Versions, l.version)
			continue
		}
		t, ok := byOwner[l.owner]
		if !ok {
			order = append(order, l.owner)
			t = Msg{Kind: Transfer, Node: m.Node}
		}
		t.Keys = append(t.Keys, k)
		t.Versions = append(t.Versions, l.version)
		byOwner[l.owner] = t
	}
	if len(here.Keys) > 0 {
		n.Stats.RelocationMsgs++
		acts = append(acts, Action{Kind: Extract, To: m.Node, Msg: Msg{Kind: Values, Keys: here.Keys, Versions: here.Versions}})
	}
	for _, o := range order {
		n.Stats.RelocationMsgs += 2
		acts = append(acts, Action{Kind: Send, To: o, Msg: byOwner[o]})
	}
	return acts
}

func (n *Node) transfer(m Msg) []Action {
	var acts []Action
	var out Msg
	out.Kind = Values
	for i, k := range m.Keys {
		if n.Incoming(k) {
			n.incoming[k] = append(n.incoming[k], sub(Msg{Kind: Transfer, Keys: m.Keys, Versions: m.Versions, Node: m.Node, Positions: make([]int, len(m.Keys))}, []int{i}))
			continue
		}
		delete(n.guests, k)
		n.note(k)
		out.Keys = append(out.Keys, k)
		out.Versions = append(out.Versions, m.Versions[i])
	}
	if len(out.Keys) > 0 {
		if m.Node == n.ID { // cannot happen: the requester never owns what it asks for
			return acts
		}
		acts = append(acts, Action{Kind: Extract, To: m.Node, Msg: out})
	}
	return acts
}

func (n *Node) values(m Msg) []Action {
	acts := []Action{{Kind: Install, Msg: m}}
	var queued []Msg
	for i, k := range m.Keys {
		if n.Home(k) != n.ID {
			n.guests[k] = m.Versions[i]
		}
		queued = append(queued, n.incoming[k]...)
		delete(n.incoming, k)
		n.note(k)
	}
	acts = append(acts, Action{Kind: LocalizeDone, Msg: Msg{Keys: m.Keys}})
	for _, q := range queued {
		acts = append(acts, n.Step(q)...)
	}
	return acts
}
