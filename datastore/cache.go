package datastore

import (
	"context"
	"io"
	"sync"

	"github.com/rs/zerolog"
)

// Pass is one pass (epoch) over a worker's data. *AsyncReader implements it.
// Records a Pass returns are read-only: a Cache hands the same batches to
// every later pass.
type Pass interface {
	Next(ctx context.Context) (*Records, error)
	Close() error
	Stats() PassStats
}

// Cache keeps the parsed records of a pass for later epochs when they fit
// in a memory budget. The first pass streams through open and records its
// batches; if it reaches io.EOF within the budget, later passes replay the
// kept batches from memory without calling open. If the data exceed the
// budget, the kept batches are dropped and every later pass re-streams.
// A pass abandoned before io.EOF records nothing, and the next pass tries
// again. Cache is safe for concurrent use; only one pass records at a time.
type Cache struct {
	budget int64
	log    zerolog.Logger

	mu        sync.Mutex
	kept      []*Records
	keptBytes int64
	complete  bool // kept holds a whole pass
	tooBig    bool // the data do not fit: stream every pass
	recording bool // a pass is recording now
	logged    bool
}

// NewCache returns a cache holding at most budget bytes of parsed records
// (Records.Bytes); a budget <= 0 disables caching.
func NewCache(budget int64, log zerolog.Logger) *Cache {
	return &Cache{budget: budget, log: log}
}

// Cached reports whether later passes replay from memory.
func (c *Cache) Cached() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.complete
}

// Pass returns one pass over the data: a replay from memory if an earlier
// pass was kept, otherwise the pass open returns (recording it if it may
// still fit).
func (c *Cache) Pass(ctx context.Context, open func(ctx context.Context) (Pass, error)) (Pass, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.complete {
		p := &replayPass{recs: c.kept, bytes: c.keptBytes}
		c.mu.Unlock()
		return p, nil
	}
	record := c.budget > 0 && !c.tooBig && !c.recording
	if c.budget <= 0 && !c.logged {
		c.logged = true
		c.log.Info().Msg("datastore: epoch cache disabled (budget 0): every epoch re-streams its data")
	}
	if record {
		c.recording = true
	}
	c.mu.Unlock()

	p, err := open(ctx)
	if err != nil {
		if record {
			c.mu.Lock()
			c.recording = false
			c.mu.Unlock()
		}
		return nil, err
	}
	if !record {
		return p, nil
	}
	return &recordingPass{Pass: p, c: c}, nil
}

// recordingPass passes batches through and keeps them while they fit.
type recordingPass struct {
	Pass
	c       *Cache
	kept    []*Records
	bytes   int64
	dropped bool
	done    bool // recording finished (committed, dropped or closed)
}

func (p *recordingPass) Next(ctx context.Context) (*Records, error) {
	rec, err := p.Pass.Next(ctx)
	if p.done {
		return rec, err
	}
	if err == io.EOF {
		p.finish(true)
		return rec, err
	}
	if err != nil || rec == nil {
		return rec, err
	}
	p.bytes += rec.Bytes()
	if p.bytes > p.c.budget {
		p.kept = nil
		p.dropped = true
		p.finish(false)
		return rec, nil
	}
	p.kept = append(p.kept, rec)
	return rec, nil
}

// finish ends recording: complete=true commits the kept batches.
func (p *recordingPass) finish(complete bool) {
	p.done = true
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recording = false
	switch {
	case complete:
		c.kept, c.keptBytes, c.complete = p.kept, p.bytes, true
		c.log.Info().Int64("bytes", p.bytes).Int64("budget", c.budget).Int("batches", len(p.kept)).
			Msg("datastore: data fit in the cache budget: later epochs replay from memory")
	case p.dropped:
		c.tooBig = true
		c.log.Info().Int64("budget", c.budget).
			Msg("datastore: data do not fit in the cache budget: later epochs re-stream from the source")
	}
	p.kept = nil
}

func (p *recordingPass) Close() error {
	if !p.done {
		p.finish(false) // abandoned before the end: keep nothing
	}
	return p.Pass.Close()
}

// replayPass hands out kept batches.
type replayPass struct {
	mu    sync.Mutex
	recs  []*Records
	i     int
	bytes int64
	nrec  int64
}

func (p *replayPass) Next(ctx context.Context) (*Records, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.i >= len(p.recs) {
		return nil, io.EOF
	}
	r := p.recs[p.i]
	p.i++
	p.nrec += int64(r.Len())
	return r, nil
}

func (p *replayPass) Close() error { return nil }

func (p *replayPass) Stats() PassStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PassStats{Records: p.nrec, PeakBuffered: p.bytes, FromCache: true}
}

var _ Pass = (*AsyncReader)(nil)
