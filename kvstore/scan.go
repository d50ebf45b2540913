package kvstore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A scan reads a whole shard in pages by the shard's own key set, so a
// table of any partitioning is read at the cost of its size: a dense
// shard walks its array by local index (the key of each slot comes from
// the Directory), a sparse shard walks its hash slots stripe by stripe.
// The cursor is opaque to the reader; it sends back the one it was given
// for the next page. The reader asks for a page only after it consumed the
// previous one, which is the flow control: at most one page per shard is
// ever in flight, whatever the table's size.

// maxScanPage bounds a page, whatever the payload allows.
const maxScanPage = 1 << 16

// scanner is implemented by every Store: Scan appends up to max keys held
// from cursor on (and their values, Width each) to keys and vals, and
// returns the cursor of the next page and whether there is one.
type scanner interface {
	Scan(cursor uint64, max int, keys []uint64, vals []float64) ([]uint64, []float64, uint64, bool, error)
}

func (d *dense[T]) Scan(cursor uint64, max int, keys []uint64, vals []float64) ([]uint64, []float64, uint64, bool, error) {
	if cursor >= d.n {
		return keys, vals, d.n, false, nil
	}
	end := min(d.n, cursor+uint64(max))
	for l := cursor; l < end; l++ {
		keys = append(keys, d.keyAt(l))
	}
	// Under the stripe locks: a scan may run while Adds go on (a
	// checkpoint, a snapshot for a new replica).
	vals = d.appendRows(vals, cursor, end)
	return keys, vals, end, end < d.n, nil
}

// keyAt is the key at local index l.
func (d *dense[T]) keyAt(l uint64) uint64 {
	if d.contiguous {
		return d.lo + l
	}
	if ka, ok := d.dir.(keyAtter); ok {
		return ka.KeyAt(d.shard, l)
	}
	// A foreign directory: search the key space (slow, not a hot path).
	for k := range d.spec.Size {
		if d.dir.Owner(k) == d.shard && d.dir.LocalIndex(k) == l {
			return k
		}
	}
	return d.spec.Size
}

// scanStore reads a page of st (every Store is a scanner).
func scanStore(st Store, cursor uint64, max int, keys []uint64, vals []float64) ([]uint64, []float64, uint64, bool, error) {
	sc, ok := st.(scanner)
	if !ok {
		return keys, vals, 0, false, fmt.Errorf("kvstore: a %T store cannot be scanned", st)
	}
	return sc.Scan(cursor, max, keys, vals)
}

// scan is a TableClient.Scan under way: one page request outstanding per
// remote shard until that shard reports no next page.
type scan struct {
	t      *TableClient
	seq    uint64
	page   int
	open   []bool // a page request of the shard is outstanding
	cursor []uint64
	host   []string // where each outstanding page was asked
	left   int      // shards with a page outstanding
	fn     func(keys []uint64, vals []float64) error
	reply  Message
	prefix string // "s<seq>."
}

// Scan reads every key each shard holds, page by page, and calls fn with
// each page's keys (in no particular order) and their values (Width each);
// both are valid only during the call. Every shard is read at once, with
// at most one page of each in flight: the next page is asked for after fn
// consumed the previous one. Keys a sparse shard never stored are not
// visited. Scan is not gated by the stage's consistency model: it is for
// bulk reads after the writers are done (writing the model).
//
// An error names the table, the shard and the slave hosting it.
func (t *TableClient) Scan(fn func(keys []uint64, vals []float64) error) error {
	return t.scanShards(-1, fn)
}

// ScanInOrder is Scan one shard after the other, in shard order, each in
// its own page order: two scans of a table nobody writes to meanwhile, on
// the same slaves, visit the same keys in the same order (a failover in
// between may change a sparse shard's order). Slower than Scan, which
// reads every shard at once.
func (t *TableClient) ScanInOrder(fn func(keys []uint64, vals []float64) error) error {
	for sh := range t.hosts {
		if err := t.scanShards(sh, fn); err != nil {
			return err
		}
	}
	return nil
}

// scanShards is Scan of shard only, or of every shard (only < 0).
func (t *TableClient) scanShards(only int, fn func(keys []uint64, vals []float64) error) error {
	c := t.c
	if c.err != nil {
		return c.err
	}
	if err := t.sendHeld(); err != nil { // the scan sees them
		return err
	}
	page := min(t.maxKeys, maxScanPage)
	if page < 1 {
		return fmt.Errorf("kvstore: scan of table %q: a key of width %d does not fit in a %d-byte message", t.spec.Name, t.spec.Width, c.cfg.MaxPayload)
	}
	var keys []uint64
	var vals []float64
	// A slave through which keys moved is scanned through its server,
	// which knows which keys it owns.
	dyn := t.dyn()
	for sh, st := range t.local {
		if st == nil || dyn || (only >= 0 && sh != only) {
			continue
		}
		for cursor, more := uint64(0), true; more; {
			var err error
			keys, vals, cursor, more, err = scanStore(st, cursor, page, keys[:0], vals[:0])
			if err == nil {
				err = fn(keys, vals)
			}
			if err != nil {
				return t.scanErr(sh, err)
			}
			c.stats.LocalKeys += int64(len(keys))
		}
	}
	c.seq++
	sc := &scan{t: t, seq: c.seq, page: page, open: make([]bool, len(t.hosts)), cursor: make([]uint64, len(t.hosts)), host: make([]string, len(t.hosts)), fn: fn,
		prefix: "s" + strconv.FormatUint(c.seq, 10) + "."}
	c.scan = sc
	defer func() { c.scan = nil }()
	for sh := range t.hosts {
		if only >= 0 && sh != only {
			continue
		}
		if t.local[sh] == nil || dyn {
			if err := sc.request(sh, 0); err != nil {
				return err
			}
		}
	}
	for sc.left > 0 {
		if err := c.receive(nil); err != nil {
			if se := (*scanError)(nil); errors.As(err, &se) {
				return err
			}
			return sc.outstandingErr(err)
		}
	}
	return c.err
}

// scanError is a scan's failure at one shard.
type scanError struct {
	table, host string
	shard       int
	err         error
}

func (e *scanError) Error() string {
	return fmt.Sprintf("kvstore: scan of table %q shard %d on slave %s: %v", e.table, e.shard, e.host, e.err)
}

func (e *scanError) Unwrap() error { return e.err }

func (t *TableClient) scanErr(shard int, err error) error {
	return &scanError{table: t.spec.Name, host: t.hosts[shard], shard: shard, err: err}
}

// outstandingErr names the shards whose pages were awaited when err came.
func (sc *scan) outstandingErr(err error) error {
	var who []string
	for sh, open := range sc.open {
		if open {
			who = append(who, fmt.Sprintf("shard %d on slave %s", sh, sc.t.hosts[sh]))
		}
	}
	return fmt.Errorf("kvstore: scan of table %q (waiting for %s): %w", sc.t.spec.Name, strings.Join(who, ", "), err)
}

// request asks shard for the page at cursor.
func (sc *scan) request(shard int, cursor uint64) error {
	t, c := sc.t, sc.t.c
	c.msg = Message{Op: OpScan, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: -1, First: cursor, N: uint32(sc.page), From: c.cfg.Incarnation}
	host, err := t.hostFor(shard)
	if err != nil {
		return t.scanErr(shard, err)
	}
	if err := c.sendMsg(host, c.inbox+"."+sc.prefix+strconv.Itoa(shard)); err != nil {
		if !t.repl {
			return t.scanErr(shard, err)
		}
		// Asked again after the failover (scan.reroute).
	}
	if !sc.open[shard] {
		sc.left++
	}
	sc.cursor[shard], sc.host[shard] = cursor, host
	sc.open[shard] = true
	return nil
}

// reroute asks a replicated table's shards whose page was awaited from a
// slave that died for the page again, from their new heads.
func (sc *scan) reroute() error {
	if !sc.t.repl {
		return nil
	}
	for sh, open := range sc.open {
		if open && !sc.t.c.cfg.Routes.Alive(sc.host[sh]) {
			if err := sc.request(sh, sc.cursor[sh]); err != nil {
				return err
			}
		}
	}
	return nil
}

// shardOf parses a page's reply address tail.
func (sc *scan) shardOf(tail string) (int, bool) {
	rest, ok := strings.CutPrefix(tail, sc.prefix)
	if !ok {
		return 0, false
	}
	sh, err := strconv.Atoi(rest)
	if err != nil || sh < 0 || sh >= len(sc.open) || !sc.open[sh] {
		return 0, false
	}
	return sh, true
}

// deliver hands a page to fn and asks for the next one.
func (sc *scan) deliver(tail string, data []byte) error {
	sh, ok := sc.shardOf(tail)
	if !ok {
		return nil // a page of an earlier scan
	}
	sc.open[sh] = false
	sc.left--
	r := &sc.reply
	if err := DecodeMessage(data, r); err != nil {
		return sc.t.scanErr(sh, err)
	}
	if r.Op == OpError {
		return sc.t.scanErr(sh, errors.New(r.Err))
	}
	w := sc.t.spec.Width
	if r.Op != OpReply || len(r.Vals) != len(r.Keys)*w || len(r.Keys) > sc.page {
		return sc.t.scanErr(sh, fmt.Errorf("malformed page: %d values for %d keys of width %d", len(r.Vals), len(r.Keys), w))
	}
	for _, k := range r.Keys {
		// A shard's page holds the keys its slave owns now: its home keys
		// that stayed and the guests that moved there (relocation).
		if k >= sc.t.spec.Size {
			return sc.t.scanErr(sh, fmt.Errorf("page holds key %d, beyond the table's size %d", k, sc.t.spec.Size))
		}
	}
	sc.t.c.stats.RemoteKeys += int64(len(r.Keys))
	if err := sc.fn(r.Keys, r.Vals); err != nil {
		return sc.t.scanErr(sh, err)
	}
	if r.N == 1 {
		return sc.request(sh, r.First)
	}
	return nil
}

// ReadAll reads the whole table by Scan for writing the model. A table of
// at most maxVals values comes back dense (keys nil, vals over [0, Size),
// keys a sparse shard never stored at their Init value, as Get reads
// them); a larger sparse table comes back as its stored keys in ascending
// order and their values. A larger dense table is an error.
func (t *TableClient) ReadAll(maxVals uint64) (keys []uint64, vals []float64, err error) {
	spec := t.spec
	w := spec.Width
	if total := spec.Size * uint64(w); total <= maxVals && spec.Size <= maxVals {
		vals = make([]float64, total)
		if spec.Storage == Sparse {
			fillInit(spec, vals)
		}
		err = t.Scan(func(ks []uint64, vs []float64) error {
			for i, k := range ks {
				copy(vals[k*uint64(w):(k+1)*uint64(w)], vs[i*w:(i+1)*w])
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		return nil, vals, nil
	}
	if spec.Storage != Sparse {
		return nil, nil, fmt.Errorf("kvstore: table %q has %d values, more than the %d a model holds", spec.Name, spec.Size*uint64(w), maxVals)
	}
	err = t.Scan(func(ks []uint64, vs []float64) error {
		if uint64(len(vals)+len(vs)) > maxVals {
			return fmt.Errorf("table %q holds more than the %d values a model holds", spec.Name, maxVals)
		}
		keys = append(keys, ks...)
		vals = append(vals, vs...)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	sortRows(keys, vals, w)
	return keys, vals, nil
}

// fillInit sets vals (a dense table) to the values keys start with, as a
// shard stores them.
func fillInit(spec TableSpec, vals []float64) {
	in, _ := parseInit(spec.Init)
	if in.IsZero() {
		return
	}
	w := spec.Width
	for k := range spec.Size {
		for c := range w {
			v := in.Value(k, c)
			if spec.DType == Float32 {
				v = float64(float32(v))
			}
			vals[int(k)*w+c] = v
		}
	}
}

// sortRows sorts keys ascending, moving each key's w values with it.
func sortRows(keys []uint64, vals []float64, w int) {
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(keys[a], keys[b]) })
	ks := make([]uint64, len(keys))
	vs := make([]float64, len(vals))
	for j, i := range idx {
		ks[j] = keys[i]
		copy(vs[j*w:(j+1)*w], vals[i*w:(i+1)*w])
	}
	copy(keys, ks)
	copy(vals, vs)
}
