package kvstore

import "math/bits"

// Holding Adds until the clock. A worker that adds to a table several
// times within one iteration (a loop over records with one Add each, a
// model with several Add calls per batch) would send one message per call
// and owner, each summed into the shard separately. From the second Add
// call to a table within an iteration, the client holds the remote part
// of each Add instead and merges it by key into one buffer per owner
// (deltas of a key add up), and sends the buffers as one write per owner
// when the iteration ends (Clock, ClockTo), before anything that must see
// them (a read or overwrite of the table, Flush, Finish, Localize), or
// when a buffer reaches maxHeldVals. The first Add of an iteration goes
// out at once, so a worker with one Add per table and iteration (lr,
// k-means, svrg) pays nothing for this. Adds to this slave's own shards
// are applied in memory at once, as always.
//
// Nothing the consistency models promise changes: an Add of iteration c
// still reaches its shard before the worker's Clock ending c (the shard
// applies a sender's messages in order), and a worker's reads still see
// its own Adds (held ones are sent before its read, on the same path).
// Under ASP, where Clock sends nothing, the held Adds still leave at
// every Clock. A table whose keys move (Lapse relocation) sends its held
// Adds through the relocation-aware write path.

// maxHeldVals bounds one owner's held buffer (values, 8 MiB): past it
// the buffer is sent.
const maxHeldVals = 1 << 20

// heldAdds is one owner's Adds merged by key: an open-addressing index
// (linear probing) from key to its position in keys; vals holds Width
// deltas per key.
type heldAdds struct {
	keys  []uint64
	vals  []float64
	slots []int32 // position+1; 0 is empty
	shift uint8   // 64 - log2(len(slots))
}

// add merges keys' deltas (width values each) into h.
func (h *heldAdds) add(keys []uint64, deltas []float64, width int) {
keys:
	for i, k := range keys {
		if 2*(len(h.keys)+1) > len(h.slots) {
			h.grow()
		}
		mask := uint64(len(h.slots) - 1)
		j := (k * 0x9e3779b97f4a7c15) >> h.shift
		for ; h.slots[j] != 0; j = (j + 1) & mask {
			if p := int(h.slots[j] - 1); h.keys[p] == k {
				row := h.vals[p*width : (p+1)*width]
				for c, d := range deltas[i*width : (i+1)*width] {
					row[c] += d
				}
				continue keys
			}
		}
		h.slots[j] = int32(len(h.keys) + 1)
		h.keys = append(h.keys, k)
		h.vals = append(h.vals, deltas[i*width:(i+1)*width]...)
	}
}

// grow doubles the index and re-inserts the held keys.
func (h *heldAdds) grow() {
	n := max(64, 2*len(h.slots))
	h.slots = make([]int32, n)
	h.shift = uint8(64 - bits.TrailingZeros(uint(n)))
	mask := uint64(n - 1)
	for p, k := range h.keys {
		j := (k * 0x9e3779b97f4a7c15) >> h.shift
		for h.slots[j] != 0 {
			j = (j + 1) & mask
		}
		h.slots[j] = int32(p + 1)
	}
}

// reset empties h and keeps its buffers.
func (h *heldAdds) reset() {
	h.keys, h.vals = h.keys[:0], h.vals[:0]
	clear(h.slots)
}

// holding reports whether an Add to t should be held now: it is not the
// first Add to t in this iteration. It counts the call.
func (t *TableClient) holding() bool {
	if t.addClock != t.c.clock {
		t.addClock, t.adds = t.c.clock, 0
	}
	t.adds++
	return t.adds > 1
}

// hold merges ks' deltas into shard's held buffer, sending it when full.
func (t *TableClient) hold(shard int, ks []uint64, deltas []float64) error {
	if t.held == nil {
		t.held = make([]heldAdds, len(t.hosts))
	}
	h := &t.held[shard]
	if len(h.keys) == 0 && !t.holds {
		t.holds = true
		t.c.holders = append(t.c.holders, t)
	}
	h.add(ks, deltas, t.spec.Width)
	t.c.stats.HeldKeys += int64(len(ks))
	if len(h.vals) >= maxHeldVals {
		return t.sendHeldShard(shard)
	}
	return nil
}

// sendHeld sends every held Add of t.
func (t *TableClient) sendHeld() error {
	if !t.holds {
		return nil
	}
	t.holds = false
	for s := range t.held {
		if err := t.sendHeldShard(s); err != nil {
			return err
		}
	}
	return nil
}

// sendHeldShard sends shard's held Adds: one write per message's worth of
// keys, or through the relocation-aware path once keys move.
func (t *TableClient) sendHeldShard(shard int) error {
	h := &t.held[shard]
	if len(h.keys) == 0 {
		return nil
	}
	defer h.reset()
	if t.dyn() {
		return t.writeLive(h.keys, h.vals, OpAdd)
	}
	return t.sendAdd(shard, h.keys, h.vals)
}

// sendHeld sends the held Adds of every table of the client.
func (c *Client) sendHeld() error {
	for len(c.holders) > 0 {
		t := c.holders[len(c.holders)-1]
		c.holders = c.holders[:len(c.holders)-1]
		if err := t.sendHeld(); err != nil {
			return err
		}
	}
	return nil
}
