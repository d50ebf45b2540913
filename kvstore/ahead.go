package kvstore

import (
	"errors"
	"fmt"
)

// GetNext starts reading the values the worker's next iteration needs,
// before this iteration ends: the worker trains on this batch while the
// next batch's parameters travel (prefetch). Unlike GetAsync the read is
// gated at the clock the worker will have after its next Clock, so the
// values stay within the stage's staleness bound for the iteration that
// uses them: a shard answers once the slowest worker is close enough to
// that clock, and under BSP only after this worker's own Clock. Call Wait
// on the result after that Clock (Wait before it is an error).
//
// What the read sees: a remote shard answers as soon as the bound allows,
// so when it is already met the values lack the Adds this worker sends
// after GetNext (this iteration's own update), which SSP with a staleness
// of at least one permits. Keys in this slave's memory are read at Wait,
// gated then, and see everything applied by then. Tables whose keys move
// (relocation) and SparseSSP stages, whose gate tracks the keys of each
// worker's current iteration, read everything at Wait.
//
// keys may be reused once GetNext returns; out holds the values when Wait
// returns (do not read or write it before).
func (t *TableClient) GetNext(keys []uint64, out []float64) (Pending, error) {
	c := t.c
	if c.err != nil {
		return nil, c.err
	}
	if t.dyn() || c.cfg.Consistency.Kind == SparseSSP {
		// Read at Wait: bad keys are refused now, not then.
		if err := t.checkKeys(keys, out, "get"); err != nil {
			return nil, err
		}
		r := t.newAhead(out)
		r.whole(keys)
		return r, nil
	}
	return t.startAhead(keys, out, c.clock+1)
}

// startAhead issues a read gated at clock whose keys in this slave's
// memory are left to Wait (GetNext; GetAsync while the gate holds them).
func (t *TableClient) startAhead(keys []uint64, out []float64, clock int64) (Pending, error) {
	r := t.newAhead(out) // startGet checks the keys
	r.clock = clock
	if t.repl {
		// A slave's death while the read travels reads again, all of it.
		r.all = append(r.all, keys...)
	}
	p, _, err := t.startGet(keys, out, false, true, r, nil)
	if err != nil {
		t.freeAhead(r)
		return nil, err
	}
	r.p = p
	return r, nil
}

// aheadRead is GetNext's handle: the remote part in flight, the local
// part to read at Wait. GetAsync uses it too, at the current clock, when
// the gate holds the local part.
type aheadRead struct {
	t     *TableClient
	clock int64    // the clock Wait needs the worker at
	p     *pending // remote part, nil when none
	out   []float64
	keys  []uint64 // read at Wait
	pos   []int32  // their positions in out; unused with inOrder
	// inOrder: keys are out's keys in order (a whole read at Wait).
	inOrder bool
	all     []uint64 // a replicated table's keys, to read again after a failover
	buf     []float64
	done    bool
	err     error
}

// newAhead returns a handle for a read into out, with the buffers of an
// earlier one when the table has them spare.
func (t *TableClient) newAhead(out []float64) *aheadRead {
	r := t.spareAhead
	t.spareAhead = nil
	if r == nil {
		r = &aheadRead{}
	}
	*r = aheadRead{t: t, clock: t.c.clock + 1, out: out, keys: r.keys[:0], pos: r.pos[:0], all: r.all[:0], buf: r.buf}
	return r
}

// freeAhead keeps a waited handle's buffers for the table's next GetNext.
// The handle itself is not reused (Wait may be called again).
func (t *TableClient) freeAhead(r *aheadRead) {
	t.spareAhead = &aheadRead{keys: r.keys, pos: r.pos, all: r.all, buf: r.buf}
	r.keys, r.pos, r.all, r.buf, r.out = nil, nil, nil, nil, nil
}

// whole leaves all of keys to Wait.
func (r *aheadRead) whole(keys []uint64) {
	r.keys = append(r.keys[:0], keys...)
	r.inOrder = true
}

// local leaves a local shard's keys ks, at positions pos of out (or all of
// out in order with whole), to Wait.
func (r *aheadRead) local(ks []uint64, pos []int32, whole bool) {
	if whole {
		r.whole(ks)
		return
	}
	r.keys = append(r.keys, ks...)
	r.pos = append(r.pos, pos...)
}

// errWaitBeforeClock: GetNext's values are for the next iteration.
var errWaitBeforeClock = errors.New("kvstore: Wait on a GetNext read before the Clock that ends the iteration it was issued in")

// Wait returns when every value of the read is in place.
func (r *aheadRead) Wait() error {
	if r.done {
		return r.err
	}
	t := r.t
	if t.c.clock < r.clock {
		return fmt.Errorf("%w (table %q, worker clock %d)", errWaitBeforeClock, t.spec.Name, t.c.clock)
	}
	r.done = true
	r.err = r.finish()
	t.freeAhead(r)
	return r.err
}

func (r *aheadRead) finish() error {
	t := r.t
	if r.p != nil {
		err := t.wait(r.p)
		t.c.release(r.p)
		r.p = nil
		if errors.Is(err, errViewChanged) && r.all != nil {
			return t.Get(r.all, r.out) // from the new heads
		}
		if err != nil {
			return err
		}
	}
	if len(r.keys) == 0 {
		return nil
	}
	if r.inOrder {
		return t.Get(r.keys, r.out)
	}
	w := t.spec.Width
	r.buf = grow(r.buf, len(r.keys)*w)
	if err := t.Get(r.keys, r.buf); err != nil {
		return err
	}
	for i, p := range r.pos {
		copy(r.out[int(p)*w:int(p+1)*w], r.buf[i*w:(i+1)*w])
	}
	return nil
}
