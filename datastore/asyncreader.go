package datastore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// AsyncConfig configures an AsyncReader.
type AsyncConfig struct {
	Source Source
	Format Format
	Read   ReadOptions
	// BufferBytes bounds the parsed bytes (Records.Bytes) buffered between
	// producers and the consumer (default 4 MiB: a dozen batches of 1,024
	// records of 20 features, enough for parsing to run ahead of training;
	// more only holds memory during the first pass). A single batch larger
	// than the bound is still admitted when the buffer is empty.
	BufferBytes int64
	// Producers is the number of goroutines fetching and parsing blocks (default 1).
	Producers int
	// MaxAheadBlocks bounds the blocks taken from Next whose records the
	// consumer has not finished (default Producers+1). Without it a
	// producer would pull blocks as fast as it parses (instantly from the
	// BlockCache), not as fast as its worker trains, and a slow worker
	// would hoard blocks that faster ones should get.
	MaxAheadBlocks int
	// Next asks for the next block (the master's FileAssigner); ok=false
	// means there are no more. It must be safe for concurrent use when
	// Producers > 1.
	Next func(ctx context.Context) (blk Block, ok bool, err error)
	// IsLocal, optional, says whether a block is local, for PassStats.LocalBytes.
	IsLocal func(Block) bool
	// Done, optional, is told each block whose records the consumer has
	// all processed: it is called from Next, on the consumer's goroutine,
	// when the consumer asks for more after the block's last batch (the
	// readers run ahead, so a block parsed is not a block processed). An
	// error fails the pass. With several consumers sharing the reader,
	// "processed" only means "taken".
	Done func(Block) error
	// Cache, optional, keeps parsed blocks for later passes under
	// CacheScope; a cached block is replayed without reading the source,
	// decoded batch by batch (bit for bit the parsed records) into new
	// batches or ones the consumer released (Release).
	Cache      *BlockCache
	CacheScope string
}

// DefaultBufferBytes is the default AsyncConfig.BufferBytes.
const DefaultBufferBytes = 4 << 20

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("datastore: reader closed")

// AsyncReader prefetches blocks: producers ask cfg.Next for blocks, parse
// them with ReadBlock and queue the batches in a buffer bounded in bytes;
// when it is full they block, so parsing runs at most BufferBytes ahead of
// the consumer. Next hands batches to one consumer (it is safe to call from
// several goroutines, which then share the batches).
//
// The first error (a producer's, a failed Next of the assigner, or ctx's)
// stops all producers and is returned by Next at once, before batches still
// buffered: a failing pass fails fast.
type AsyncReader struct {
	cfg    AsyncConfig
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every state change
	queue     []*Records
	qbytes    []int64
	qreplay   []bool     // the batch was decoded from the BlockCache
	replayed  int        // queued batches decoded from the BlockCache
	free      []*Records // released batches, to decode into again
	buffered  int64
	producers int // still running
	// cols is the number of fields of the csv rows this reader handed
	// out first (0: none yet) and colsAt where; a block of rows with
	// another number fails the pass (see Next).
	cols    int
	colsAt  string
	err     error
	closed  bool
	stats   PassStats
	maxBad  int
	badFrac float64 // ReadOptions.MaxBadFraction, checked at the pass's end (skip mode)
	ahead   int     // blocks taken from Next whose end the consumer has not reached
	ends    []Block // the blocks of the end markers (nil batches) queued, in order
}

// NewAsyncReader starts cfg.Producers producers that run until the blocks
// run out, an error occurs, ctx is cancelled or Close is called.
func NewAsyncReader(ctx context.Context, cfg AsyncConfig) *AsyncReader {
	if cfg.BufferBytes <= 0 {
		cfg.BufferBytes = DefaultBufferBytes
	}
	if cfg.Producers <= 0 {
		cfg.Producers = 1
	}
	if cfg.MaxAheadBlocks <= 0 {
		cfg.MaxAheadBlocks = cfg.Producers + 1
	}
	ropt, optErr := cfg.Read.withDefaults()
	r := &AsyncReader{cfg: cfg, changed: make(chan struct{}), maxBad: ropt.MaxBadKept, badFrac: ropt.MaxBadFraction}
	r.ctx, r.cancel = context.WithCancel(ctx)
	switch {
	case optErr != nil:
		r.err = optErr
	case cfg.Source == nil || cfg.Format == nil || cfg.Next == nil:
		r.err = errors.New("datastore: AsyncConfig needs Source, Format and Next")
	default:
		r.producers = cfg.Producers
		r.wg.Add(cfg.Producers)
		for range cfg.Producers {
			go r.produce()
		}
	}
	return r
}

// broadcast wakes every waiter; r.mu must be held.
func (r *AsyncReader) broadcast() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *AsyncReader) produce() {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		r.producers--
		r.broadcast()
		r.mu.Unlock()
	}()
	for {
		if !r.reserveBlock() {
			return
		}
		blk, ok, err := r.cfg.Next(r.ctx)
		if err != nil {
			r.fail(err)
			return
		}
		if !ok {
			r.releaseBlock()
			return
		}
		if cb, hit := r.cfg.Cache.Get(r.cfg.CacheScope, blk); hit {
			// Decoding is some ten times faster than training on a
			// batch, so a few batches ahead keep the consumer busy;
			// decoding a block ahead would hold its records twice.
			for i := range cb.Batches() {
				into, ok := r.reserveReplay()
				if !ok {
					r.fail(r.ctx.Err())
					return
				}
				if err := r.enqueue(cb.Batch(i, into), true); err != nil {
					r.fail(err)
					return
				}
			}
			r.mu.Lock()
			r.stats.Blocks++
			r.stats.CachedBlocks++
			r.stats.Records += cb.Records()
			r.endBlock(blk)
			r.mu.Unlock()
			continue
		}
		emit := r.put
		var kept []*Records
		if r.cfg.Cache != nil {
			emit = func(rec *Records) error {
				kept = append(kept, rec)
				return r.put(rec)
			}
		}
		st, err := ReadBlock(r.ctx, r.cfg.Source, blk, r.cfg.Format, r.cfg.Read, emit)
		if err == nil {
			// A block's malformed lines are skipped alike at every
			// read, and counted once, here: a block that had some was
			// kept out of the cache, parsed again each epoch and its
			// lines counted again (one bad line in a file: "skipped 11
			// malformed lines" after 10 epochs, the line listed five
			// times).
			r.cfg.Cache.Put(r.cfg.CacheScope, blk, kept)
		}
		local := r.cfg.IsLocal != nil && r.cfg.IsLocal(blk)
		r.mu.Lock()
		if err == nil {
			r.endBlock(blk)
		}
		r.stats.Blocks++
		r.stats.Bytes += st.Bytes
		if local {
			r.stats.LocalBytes += st.Bytes
		}
		r.stats.Records += st.Records
		r.stats.BadLines += st.BadLines
		r.stats.ParseTime += st.ParseTime
		for _, s := range st.FirstBad {
			if len(r.stats.FirstBad) < r.maxBad {
				r.stats.FirstBad = append(r.stats.FirstBad, s)
			}
		}
		r.mu.Unlock()
		if err != nil {
			r.fail(err)
			return
		}
	}
}

// waitLocked releases r.mu until the reader's state changes or it stops;
// r.mu is held on entry and on return.
func (r *AsyncReader) waitLocked() {
	ch := r.changed
	r.mu.Unlock()
	select {
	case <-ch:
	case <-r.ctx.Done():
	}
	r.mu.Lock()
}

// reserveBlock waits until fewer than MaxAheadBlocks blocks are ahead of
// the consumer and counts one more; false when the reader is stopping.
func (r *AsyncReader) reserveBlock() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.ahead >= r.cfg.MaxAheadBlocks {
		if r.ctx.Err() != nil {
			return false
		}
		r.waitLocked()
	}
	if r.ctx.Err() != nil {
		return false
	}
	r.ahead++
	return true
}

// releaseBlock returns a reservation that got no block.
func (r *AsyncReader) releaseBlock() {
	r.mu.Lock()
	r.ahead--
	r.broadcast()
	r.mu.Unlock()
}

// endBlock queues the marker that ends blk's records: when the consumer
// reaches it the block no longer counts as ahead, and is done. r.mu held.
func (r *AsyncReader) endBlock(blk Block) {
	r.queue = append(r.queue, nil)
	r.qbytes = append(r.qbytes, 0)
	r.qreplay = append(r.qreplay, false)
	r.ends = append(r.ends, blk)
	r.broadcast()
}

// fail records the first error and stops the other producers.
func (r *AsyncReader) fail(err error) {
	r.mu.Lock()
	if r.err == nil && !r.closed {
		r.err = err
	}
	r.broadcast()
	r.mu.Unlock()
	r.cancel()
}

// maxReplayAhead bounds the batches decoded from the BlockCache that wait
// in the queue.
const maxReplayAhead = 4

// reserveReplay waits until fewer than maxReplayAhead decoded batches are
// queued or being decoded, counts one more and returns a released batch
// to decode into, if there is one; false when the reader is stopping.
func (r *AsyncReader) reserveReplay() (*Records, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.replayed >= maxReplayAhead && r.ctx.Err() == nil {
		r.waitLocked()
	}
	if r.ctx.Err() != nil {
		return nil, false
	}
	r.replayed++
	var into *Records
	if n := len(r.free); n > 0 {
		into = r.free[n-1]
		r.free[n-1] = nil
		r.free = r.free[:n-1]
	}
	return into, true
}

// Release implements Releaser: a batch the reader decoded from the
// BlockCache is decoded into again, so replayed epochs allocate almost
// nothing. Other batches (parsed ones, which the cache may still be
// encoding) are left to the collector. A batch is released at most once.
func (r *AsyncReader) Release(rec *Records) {
	if rec == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec.state != batchDecoded { // parsed: the cache may still encode it
		return
	}
	rec.state = batchFree
	if len(r.free) < maxReplayAhead+1 && !r.closed {
		r.free = append(r.free, rec)
	}
}

// put queues a parsed batch, blocking while the buffer is full.
func (r *AsyncReader) put(rec *Records) error { return r.enqueue(rec, false) }

// enqueue queues a batch, blocking while the buffer is full; a replayed
// batch holds a reserveReplay reservation, given back when it is taken
// (or when it cannot be queued).
func (r *AsyncReader) enqueue(rec *Records, replayed bool) error {
	size := rec.Bytes()
	r.mu.Lock()
	for {
		if err := r.ctx.Err(); err != nil {
			if replayed {
				r.replayed--
			}
			r.mu.Unlock()
			return err
		}
		if r.buffered == 0 || r.buffered+size <= r.cfg.BufferBytes {
			if replayed {
				rec.state = batchDecoded
			}
			r.queue = append(r.queue, rec)
			r.qbytes = append(r.qbytes, size)
			r.qreplay = append(r.qreplay, replayed)
			r.buffered += size
			r.stats.PeakBuffered = max(r.stats.PeakBuffered, r.buffered)
			r.broadcast()
			r.mu.Unlock()
			return nil
		}
		r.waitLocked()
	}
}

// Next returns the next batch, io.EOF after the last one, or the first
// error. The batch is read-only (the BlockCache may encode it); it stays
// valid until the caller passes it to Release, if ever.
func (r *AsyncReader) Next(ctx context.Context) (*Records, error) {
	var waited time.Duration
	r.mu.Lock()
	defer func() {
		r.stats.WaitTime += waited
		r.mu.Unlock()
	}()
	for {
		switch {
		case r.closed:
			return nil, ErrClosed
		case r.err != nil:
			return nil, r.err
		case len(r.queue) > 0:
			rec := r.queue[0]
			r.queue[0] = nil
			r.queue = r.queue[1:]
			r.buffered -= r.qbytes[0]
			r.qbytes = r.qbytes[1:]
			if r.qreplay[0] {
				r.replayed--
			}
			r.qreplay = r.qreplay[1:]
			if len(r.queue) == 0 { // reuse the backing arrays
				r.queue = r.queue[:0:0]
				r.qbytes = r.qbytes[:0:0]
				r.qreplay = r.qreplay[:0:0]
			}
			r.broadcast()
			if rec == nil { // a block's end: one fewer block ahead
				r.ahead--
				blk := r.ends[0]
				r.ends[0] = Block{}
				r.ends = r.ends[1:]
				if r.cfg.Done != nil {
					r.mu.Unlock()
					err := r.cfg.Done(blk)
					r.mu.Lock()
					if err != nil && r.err == nil && !r.closed {
						r.err = err
						r.broadcast()
						r.cancel()
					}
				}
				continue
			}
			if err := r.sameCols(rec); err != nil {
				return nil, err
			}
			return rec, nil
		case r.producers == 0:
			if bad, n := r.stats.BadLines, r.stats.Records; bad > 0 && float64(bad) > r.badFrac*float64(bad+n) {
				r.err = &TooManyBadLinesError{BadLines: bad, Records: n, MaxFraction: r.badFrac,
					FirstBad: append([]string(nil), r.stats.FirstBad...)}
				return nil, r.err
			}
			return nil, io.EOF
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ch := r.changed
		r.mu.Unlock()
		t := time.Now()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		waited += time.Since(t)
		r.mu.Lock()
	}
}

// sameCols fails the pass when rec's csv rows have another number of
// fields than the rows handed out before: each block checks its own rows,
// but the files of a directory or glob input that differ by a column were
// read with every feature after the missing one shifted, without a word.
// A worker sees the blocks it reads, which are most of an input's when it
// is one of a few. Called with r.mu held.
func (r *AsyncReader) sameCols(rec *Records) error {
	if rec.cols == 0 || rec.Len() == 0 {
		return nil
	}
	if r.cols == 0 {
		// The file, not the line: Where counts the lines before a block
		// that does not start its file, which is for errors only.
		r.cols, r.colsAt = rec.cols, "earlier rows"
		if len(rec.Origins) > 0 {
			r.colsAt = "the rows of " + rec.Origins[0].Path
		}
		return nil
	}
	if rec.cols == r.cols {
		return nil
	}
	r.err = fmt.Errorf("%s: the row has %d columns, %s %d (every csv file of an input needs the same columns)", rec.Where(0), rec.cols, r.colsAt, r.cols)
	r.broadcast()
	r.cancel()
	return r.err
}

// Close stops the producers and waits for them. It is idempotent.
func (r *AsyncReader) Close() error {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		r.queue, r.qbytes, r.qreplay, r.buffered, r.ends = nil, nil, nil, 0, nil
		r.free = nil
		r.broadcast()
	}
	r.mu.Unlock()
	return nil
}

// Stats returns the counters so far.
func (r *AsyncReader) Stats() PassStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.FirstBad = append([]string(nil), r.stats.FirstBad...)
	return s
}
