package slave

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// gateSpin is how long a read of a hogwild (or single) stage polls its
// gate before it parks (kvstore.Gate.SpinBeforePark): a few of the other
// workers' steps. LR, 2 hogwild workers under SSP(2) on 2 cores, 6
// interleaved rounds: 1.14x the samples/s of parking at once (50 us and
// 1 ms polled alike). Not for the local kind: its workers take the
// table's locks in turn, and polling made it 0.88x (8 rounds).
var gateSpin = 200 * time.Microsecond

// localModel is the model of a local, hogwild or single stage: every
// worker of the stage runs on this slave and shares one in-memory copy of
// each table it touches, loaded from the KV-store on first use and written
// back (as the difference to what was loaded) when the last worker ends.
// Consistency between the workers is enforced in-process by a Gate: no
// network at all. Chunk locks (local) serialize concurrent Adds to the
// same chunk; hogwild and single take no locks.
type localModel struct {
	s       *Slave
	req     proto.SlaveCtl
	stage   tasks.Stage
	gate    *kvstore.Gate // nil under ASP
	mode    kvstore.LockMode
	chunk   int
	workers int

	retain bool   // keep the model in memory for the next stage
	from   string // the slave holding the previous stage's model ("" = KV-store)
	prep   sync.Once
	perr   error

	loadSeconds, writebackSeconds float64

	mu     sync.Mutex
	tables map[string]*localEntry
	left   int           // workers still running
	done   chan struct{} // closed once written back
	err    error         // the write-back's error

	// returned holds, for each worker whose function returned, the
	// Barriers it had called; returnedCh is closed (and replaced) at each
	// return. A worker of a one-slave stage reports its end only once
	// every worker ended, so the master cannot see that a barrier waits
	// for one that returned: the slave does (abandoned).
	returned   map[int]int
	returnedCh chan struct{}
}

type localEntry struct {
	once   sync.Once
	err    error
	table  *kvstore.LocalTable
	loaded *kvstore.LocalTable // the values as loaded, for the write-back delta (nil: overwrite)
	place  kvstore.Placement
}

// DefaultChunkSize is the keys per chunk lock when a local stage names none.
const DefaultChunkSize = 4096

func newLocalModel(s *Slave, req proto.SlaveCtl, st tasks.Stage, workers int) *localModel {
	m := &localModel{s: s, req: req, stage: st, workers: workers, left: workers,
		tables: map[string]*localEntry{}, done: make(chan struct{}), chunk: st.ChunkSize,
		retain: req.Retain, from: req.TransferFrom, returned: map[int]int{}, returnedCh: make(chan struct{})}
	if m.chunk <= 0 {
		m.chunk = DefaultChunkSize
	}
	switch st.WorkerKind {
	case tasks.KindLocal:
		m.mode = kvstore.ChunkLocks
	default:
		m.mode = kvstore.NoLocks
	}
	if st.Consistency.Kind != kvstore.ASP {
		m.gate = kvstore.NewGate(st.Consistency, workers)
		if m.mode == kvstore.NoLocks {
			// Every worker a read waits for runs in this process, a
			// few microseconds from its next clock (see gateSpin).
			m.gate.SpinBeforePark(gateSpin)
		}
	}
	return m
}

// loader opens a consistency-free client for bulk reads and writes.
func (m *localModel) loader(ctx context.Context) (*kvstore.Client, error) {
	return kvstore.NewClient(kvstore.ClientConfig{
		Transport: m.s.tr, Task: m.req.Task, Stage: int32(m.req.Stage), Worker: -1,
		Self: m.s.cfg.ID, Server: m.s.kv, Hosts: m.req.Hosts, Consistency: kvstore.Consistency{Kind: kvstore.ASP},
		Timeout: m.s.cfg.KVTimeout, Ctx: ctx, Incarnation: m.s.Incarnation(),
		Routes: m.s.routes(m.req),
	})
}

const bulkKeys = 1 << 16

// table returns the shared copy of a table, loading it on first use.
func (m *localModel) table(ctx context.Context, name string) (*localEntry, error) {
	if m.from != "" {
		m.prep.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.perr = m.prepareFrom(ctx, m.from)
		})
		if m.perr != nil {
			return nil, m.perr
		}
	}
	m.mu.Lock()
	e := m.tables[name]
	if e == nil {
		e = &localEntry{}
		m.tables[name] = e
	}
	m.mu.Unlock()
	e.once.Do(func() { e.err = m.load(ctx, name, e) })
	return e, e.err
}

func (m *localModel) load(ctx context.Context, name string, e *localEntry) error {
	start := time.Now()
	defer func() {
		m.mu.Lock()
		m.loadSeconds += time.Since(start).Seconds()
		m.mu.Unlock()
	}()
	var place *kvstore.Placement
	for i := range m.req.Tables {
		if m.req.Tables[i].Spec.Name == name {
			place = &m.req.Tables[i]
		}
	}
	if place == nil {
		return fmt.Errorf("task %s declares no table %q", m.req.Spec.Name, name)
	}
	spec := place.Spec.WithDefaults()
	if spec.Storage == kvstore.Sparse {
		return fmt.Errorf("table %q: %s stages hold the model in memory and need dense tables (sparse storage is for ps stages)", name, m.stage.WorkerKind)
	}
	if spec.Size*uint64(spec.Width) > 1<<31 {
		return fmt.Errorf("table %q: %d values do not fit one slave's memory for a %s stage", name, spec.Size*uint64(spec.Width), m.stage.WorkerKind)
	}
	lt, err := kvstore.NewLocalTable(spec, m.mode, m.chunk)
	if err != nil {
		return err
	}
	c, err := m.loader(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	tc, err := c.Table(*place)
	if err != nil {
		return err
	}
	// The write-back's baseline: the values as loaded, in the table's
	// dtype (a float32 table keeps 8 bytes per parameter in all).
	base := spec
	base.Init = "" // overwritten below: no need to draw the initial values twice
	loaded, err := kvstore.NewLocalTable(base, kvstore.NoLocks, 1)
	if err != nil {
		return err
	}
	buf := make([]float64, min(bulkKeys, spec.Size)*uint64(spec.Width))
	for first := uint64(0); first < spec.Size; first += bulkKeys {
		n := int(min(bulkKeys, spec.Size-first))
		b := buf[:n*spec.Width]
		if err := tc.GetRange(first, n, b); err != nil {
			return fmt.Errorf("loading table %q for a %s stage: %w", name, m.stage.WorkerKind, err)
		}
		lt.SetRange(first, n, b)
		loaded.SetRange(first, n, b)
	}
	e.table, e.place, e.loaded = lt, *place, loaded
	return nil
}

// finish is called by each worker when its function returned (err nil)
// or failed. The last worker writes the model back; every worker waits for
// that so none reports done before the KV-store holds the result.
func (m *localModel) finish(ctx context.Context, rank int, failed bool, barriers int) error {
	if m.gate != nil {
		m.gate.Finish(rank)
	}
	m.mu.Lock()
	if !failed {
		m.returned[rank] = barriers
		close(m.returnedCh)
		m.returnedCh = make(chan struct{})
	}
	m.left--
	last := m.left == 0
	m.mu.Unlock()
	if last {
		if !failed {
			if m.retain {
				m.s.retain(m.req.Task, m.tables)
			} else {
				start := time.Now()
				m.err = m.writeBack(ctx)
				m.writebackSeconds = time.Since(start).Seconds()
			}
		}
		close(m.done)
	}
	if failed {
		return nil
	}
	select {
	case <-m.done:
		return m.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watchBarrier cancels ctx, a worker's wait at its barrier seq, with why
// the barrier can never be released as soon as a worker of the stage
// returned before calling it (its other workers waited for good). It
// returns when ctx ends.
func (m *localModel) watchBarrier(ctx context.Context, seq int, cancel context.CancelCauseFunc) {
	for {
		m.mu.Lock()
		ch := m.returnedCh
		for _, rank := range slices.Sorted(maps.Keys(m.returned)) {
			if m.returned[rank] < seq {
				m.mu.Unlock()
				cancel(fmt.Errorf("worker %d returned before its barrier %d, where this worker waits for it: "+
					"every worker of a stage must call Barrier as often as the others", rank, seq))
				return
			}
		}
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

func (m *localModel) writeBack(ctx context.Context) error {
	c, err := m.loader(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	for name, e := range m.tables {
		if e.table == nil {
			continue
		}
		tc, err := c.Table(e.place)
		if err != nil {
			return err
		}
		w := tc.Spec().Width
		size := tc.Spec().Size
		cur := make([]float64, min(bulkKeys, size)*uint64(w))
		var base []float64
		if e.loaded != nil {
			base = make([]float64, len(cur))
		}
		for first := uint64(0); first < size; first += bulkKeys {
			n := int(min(bulkKeys, size-first))
			v, b := cur[:n*w], base[:min(len(base), n*w)]
			e.table.GetRange(first, n, v)
			if e.loaded == nil {
				// Transferred from another slave: the KV-store's copy is
				// older; overwrite it.
				if err := tc.SetRange(first, n, v); err != nil {
					return fmt.Errorf("writing table %q back: %w", name, err)
				}
				continue
			}
			e.loaded.GetRange(first, n, b)
			for i := range v {
				v[i] -= b[i]
			}
			if err := tc.AddRange(first, n, v); err != nil {
				return fmt.Errorf("writing table %q back: %w", name, err)
			}
		}
	}
	return c.Flush()
}

// localTable is a worker's handle on a local model's table.
type localTable struct {
	w *worker
	e *localEntry
}

func (t *localTable) Spec() kvstore.TableSpec { return t.e.table.Spec() }

func (t *localTable) check(keys []uint64, vals []float64, what string) error {
	if err := t.open(); err != nil {
		return err
	}
	return kvstore.CheckKeys(t.e.table.Spec(), keys, len(vals), what)
}

// open refuses a call made after the worker's stage function returned (a
// goroutine it started outlived it): an Add was applied to a model
// already written back, or to the next stage's, without a word.
func (t *localTable) open() error {
	if t.w.returned.Load() {
		return fmt.Errorf("table %q: %w", t.e.table.Spec().Name, kvstore.ErrClosed)
	}
	return nil
}

func (t *localTable) wait(keys []uint64) error {
	if g := t.w.local.gate; g != nil {
		return g.Wait(t.w.ctx, t.w.rank, t.w.localClock, keys)
	}
	return nil
}

func (t *localTable) Get(keys []uint64, out []float64) error {
	if err := t.check(keys, out, "get"); err != nil {
		return err
	}
	if err := t.wait(keys); err != nil {
		return err
	}
	t.e.table.Get(keys, out)
	return nil
}

func (t *localTable) Add(keys []uint64, deltas []float64) error {
	if err := t.check(keys, deltas, "add"); err != nil {
		return err
	}
	t.e.table.Add(keys, deltas)
	return nil
}

func (t *localTable) chunk(id uint64) (uint64, int, error) {
	spec := t.e.table.Spec()
	first := id * spec.ChunkSize
	if first >= spec.Size {
		return 0, 0, fmt.Errorf("table %q: chunk %d out of range", spec.Name, id)
	}
	return first, int(min(spec.ChunkSize, spec.Size-first)), nil
}

func (t *localTable) GetChunk(chunks []uint64, out []float64) error {
	if err := t.wait(nil); err != nil {
		return err
	}
	return t.chunks(chunks, out, t.e.table.GetRange)
}

func (t *localTable) AddChunk(chunks []uint64, deltas []float64) error {
	return t.chunks(chunks, deltas, t.e.table.AddRange)
}

func (t *localTable) chunks(chunks []uint64, vals []float64, op func(uint64, int, []float64)) error {
	if err := t.open(); err != nil {
		return err
	}
	w := t.e.table.Spec().Width
	off := 0
	for _, id := range chunks {
		first, n, err := t.chunk(id)
		if err != nil {
			return err
		}
		if (off+n)*w > len(vals) {
			return fmt.Errorf("table %q: chunks hold more values than the %d given", t.e.table.Spec().Name, len(vals))
		}
		op(first, n, vals[off*w:(off+n)*w])
		off += n
	}
	if off*w != len(vals) {
		return fmt.Errorf("table %q: chunks hold %d values, got %d", t.e.table.Spec().Name, off*w, len(vals))
	}
	return nil
}

// Localize is a no-op: a local table is in the worker's memory already.
func (t *localTable) Localize([]uint64) error { return nil }

// LocalizeAsync is a no-op (see Localize).
func (t *localTable) LocalizeAsync([]uint64) (kvstore.Pending, error) { return kvstore.Done{}, nil }

// LocalizeChunks is a no-op (see Localize).
func (t *localTable) LocalizeChunks([]uint64) error { return nil }

// Flush has nothing to wait for: Adds apply in memory at once.
func (t *localTable) Flush() error { return nil }

// GetAsync reads at once: the table is in the worker's memory.
func (t *localTable) GetAsync(keys []uint64, out []float64) (kvstore.Pending, error) {
	if err := t.Get(keys, out); err != nil {
		return nil, err
	}
	return kvstore.Done{}, nil
}
