package tasks

import (
	"context"
	"errors"
	"io"

	"github.com/flexps/flexps/datastore"
)

// EachRecords runs fn on every batch of records of one pass (epoch) over
// in, closing the pass at the end. Records are read-only (they may be
// replayed from the slave's cache in later epochs), and fn must not keep r
// or its slices after it returns: the pass may decode later records into
// them (datastore.Releaser).
func EachRecords(ctx context.Context, in Input, fn func(r *datastore.Records) error) error {
	return EachRecordsCommit(ctx, in, fn, nil)
}

// BlockCommitter is implemented by a pass whose worker confirms to the
// master each block the stage function finished (a ps worker of a stage
// that survives a slave's death): a confirmed block is not run again if
// the worker's slave dies, so what the function summed from it must reach
// the tables. OnConfirm sets f, called right after each confirmation on
// the function's goroutine (inside Next); an error fails the pass. A
// worker that dies between the confirmation and f's Adds loses that one
// block's sums (never counts a block twice).
type BlockCommitter interface {
	OnConfirm(f func() error)
}

// OrderedInput is an Input that can hand a pass's blocks whole, one after
// the other (a pass reads blocks with several parsers, whose batches
// interleave otherwise). EachRecordsCommit reads so: when a block is
// confirmed, what the function summed is that block and the ones before,
// no part of the next one (which, if the worker died before finishing it,
// the survivors would run again: counted twice, a drill's k-means
// failover iteration 1.5-2% high).
type OrderedInput interface {
	OrderedPass(ctx context.Context) (datastore.Pass, error)
}

// EachRecordsCommit is EachRecords for a function that sums over the pass
// in its own memory and adds the sums to tables after it (k-means'
// accumulators, a full gradient, rating counts): commit, when not nil, is
// called after each block the worker finished is confirmed (see
// BlockCommitter), and must add what was summed since its last call,
// clear it, and Flush. Outside a stage that survives a slave's death (a
// death fails the stage, so no confirmation is final) it is never
// called, and the function adds after the pass what it summed, as it would
// anyway (after commits, what is left). Before, a worker that died
// mid-pass took the sums of the blocks it had confirmed with it: the
// pass's totals missed them (a k-means objective 21% low, an SVRG full
// gradient short of some records); now at most one block per dead worker.
func EachRecordsCommit(ctx context.Context, in Input, fn func(r *datastore.Records) error, commit func() error) error {
	open := in.Pass
	if oi, ok := in.(OrderedInput); ok && commit != nil {
		open = oi.OrderedPass
	}
	pass, err := open(ctx)
	if err != nil {
		return err
	}
	defer pass.Close()
	if bc, ok := pass.(BlockCommitter); ok && commit != nil {
		bc.OnConfirm(commit)
	}
	rel, _ := pass.(datastore.Releaser)
	for {
		r, err := pass.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
		if rel != nil {
			rel.Release(r)
		}
	}
}

// EachBatch runs fn over one pass of in, batch records at a time: fn gets
// the records r and the half-open range [lo, hi) of the mini-batch.
func EachBatch(ctx context.Context, in Input, batch int, fn func(r *datastore.Records, lo, hi int) error) error {
	return EachBatchCommit(ctx, in, batch, fn, nil)
}

// EachBatchCommit is EachBatch with EachRecordsCommit's commit.
func EachBatchCommit(ctx context.Context, in Input, batch int, fn func(r *datastore.Records, lo, hi int) error, commit func() error) error {
	return EachRecordsCommit(ctx, in, func(r *datastore.Records) error {
		for lo := 0; lo < r.Len(); lo += batch {
			if err := fn(r, lo, min(lo+batch, r.Len())); err != nil {
				return err
			}
		}
		return nil
	}, commit)
}

// Batch is a mini-batch: records [Lo, Hi) of R. The zero Batch is none.
type Batch struct {
	R      *datastore.Records
	Lo, Hi int
}

// EachBatchAhead is EachBatch that also hands fn the batch after the
// current one (the zero Batch after the pass's last), so a worker can
// start reading the next batch's parameters while it trains on this one
// (kvstore.TableClient.GetNext). Both batches' records stay valid while
// fn runs; fn must not keep them after it returns.
func EachBatchAhead(ctx context.Context, in Input, batch int, fn func(cur, next Batch) error) error {
	if batch < 1 {
		return errors.New("tasks: batch size must be at least 1")
	}
	pass, err := in.Pass(ctx)
	if err != nil {
		return err
	}
	defer pass.Close()
	rel, _ := pass.(datastore.Releaser)
	release := func(r *datastore.Records) {
		if rel != nil {
			rel.Release(r)
		}
	}
	var cur Batch
	for {
		r, err := pass.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if r.Len() == 0 {
			release(r)
			continue
		}
		for lo := 0; lo < r.Len(); lo += batch {
			b := Batch{R: r, Lo: lo, Hi: min(lo+batch, r.Len())}
			if cur.R != nil {
				if err := fn(cur, b); err != nil {
					return err
				}
				if cur.R != r {
					release(cur.R) // its last batch is done
				}
			}
			cur = b
		}
	}
	if cur.R == nil {
		return nil
	}
	if err := fn(cur, Batch{}); err != nil {
		return err
	}
	release(cur.R)
	return nil
}

// KeyIndex maps the distinct keys of a mini-batch to their positions, to
// gather one Get per batch and scatter gradients back. For tables of up to
// 16M keys it is an array stamped with the batch number, so Reset costs
// nothing; beyond, a map.
type KeyIndex struct {
	slots []indexSlot // one array: a lookup costs one cache miss
	cur   uint32
	m     map[uint64]int32
}

type indexSlot struct {
	stamp uint32
	pos   int32
}

const denseIndexMax = 1 << 24

// NewKeyIndex returns an index for keys in [0, size).
func NewKeyIndex(size uint64) *KeyIndex {
	if size > 0 && size <= denseIndexMax {
		return &KeyIndex{slots: make([]indexSlot, size), cur: 1}
	}
	return &KeyIndex{m: map[uint64]int32{}}
}

// Reset forgets every key (start of a batch).
func (x *KeyIndex) Reset() {
	if x.m != nil {
		clear(x.m)
		return
	}
	x.cur++
	if x.cur == 0 { // wrapped: old stamps could collide
		clear(x.slots)
		x.cur = 1
	}
}

// Get returns k's position.
func (x *KeyIndex) Get(k uint64) (int32, bool) {
	if x.m != nil {
		p, ok := x.m[k]
		return p, ok
	}
	if k < uint64(len(x.slots)) {
		if s := x.slots[k]; s.stamp == x.cur {
			return s.pos, true
		}
	}
	return 0, false
}

// Put records k at position p. A key beyond the index's size is not
// recorded (the table Get that follows reports it as out of range).
func (x *KeyIndex) Put(k uint64, p int32) {
	if x.m != nil {
		x.m[k] = p
		return
	}
	if k < uint64(len(x.slots)) {
		x.slots[k] = indexSlot{x.cur, p}
	}
}
