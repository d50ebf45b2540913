package kvstore

import (
	"errors"
	"fmt"
)

// Range and chunk operations. Under a contiguous partitioning (range) a
// key range splits into one span per owner and travels as range messages
// (no keys on the wire); under hash partitioning it would split into
// single-key spans, so its keys are expanded and grouped by owner instead
// (TableClient.keyed).

// Chunk returns the key range of chunk id.
func (t *TableClient) Chunk(id uint64) (first uint64, n int, err error) {
	cs := t.spec.ChunkSize
	first = id * cs
	if id >= (t.spec.Size+cs-1)/cs {
		return 0, 0, fmt.Errorf("kvstore: table %q: chunk %d out of range (%d chunks of %d keys)", t.spec.Name, id, (t.spec.Size+cs-1)/cs, cs)
	}
	return first, int(min(cs, t.spec.Size-first)), nil
}

// ChunkValues is how many values GetChunk fills for chunks.
func (t *TableClient) ChunkValues(chunks []uint64) (int, error) {
	total := 0
	for _, id := range chunks {
		_, n, err := t.Chunk(id)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total * t.spec.Width, nil
}

// GetChunk reads whole chunks, concatenated in the order given, into out.
func (t *TableClient) GetChunk(chunks []uint64, out []float64) error {
	if t.keyed || t.dyn() {
		if err := t.chunkKeys(chunks, out); err != nil {
			return err
		}
		_, err := t.get(t.rk, out, false)
		return err
	}
	if err := t.chunkSpans(chunks, out); err != nil {
		return err
	}
	return t.getSpans(out)
}

// AddChunk adds to whole chunks; deltas are laid out as GetChunk's out.
func (t *TableClient) AddChunk(chunks []uint64, deltas []float64) error {
	if t.keyed || t.dyn() {
		if err := t.chunkKeys(chunks, deltas); err != nil {
			return err
		}
		return t.Add(t.rk, deltas)
	}
	if err := t.chunkSpans(chunks, deltas); err != nil {
		return err
	}
	return t.writeSpans(OpAddRange, deltas)
}

// GetRange reads keys first..first+n-1.
func (t *TableClient) GetRange(first uint64, n int, out []float64) error {
	if t.keyed || t.dyn() {
		if err := t.rangeKeys(first, n, out); err != nil {
			return err
		}
		_, err := t.get(t.rk, out, false)
		return err
	}
	if err := t.rangeSpans(first, n, out); err != nil {
		return err
	}
	return t.getSpans(out)
}

// AddRange adds to keys first..first+n-1.
func (t *TableClient) AddRange(first uint64, n int, deltas []float64) error {
	if t.keyed || t.dyn() {
		if err := t.rangeKeys(first, n, deltas); err != nil {
			return err
		}
		return t.Add(t.rk, deltas)
	}
	if err := t.rangeSpans(first, n, deltas); err != nil {
		return err
	}
	return t.writeSpans(OpAddRange, deltas)
}

// expandChunks puts the keys of chunks into t.rk.
func (t *TableClient) expandChunks(chunks []uint64) error {
	t.rk = t.rk[:0]
	for _, id := range chunks {
		first, n, err := t.Chunk(id)
		if err != nil {
			return err
		}
		for k := first; k < first+uint64(n); k++ {
			t.rk = append(t.rk, k)
		}
	}
	return nil
}

// chunkKeys expands chunks into t.rk.
func (t *TableClient) chunkKeys(chunks []uint64, vals []float64) error {
	if err := t.expandChunks(chunks); err != nil {
		return err
	}
	if len(t.rk)*t.spec.Width != len(vals) {
		return fmt.Errorf("kvstore: chunks of %q hold %d values, got a slice of %d", t.spec.Name, len(t.rk)*t.spec.Width, len(vals))
	}
	return nil
}

// rangeKeys expands [first, first+n) into t.rk.
func (t *TableClient) rangeKeys(first uint64, n int, vals []float64) error {
	if err := t.checkRange(first, n, vals); err != nil {
		return err
	}
	t.rk = t.rk[:0]
	for k := first; k < first+uint64(n); k++ {
		t.rk = append(t.rk, k)
	}
	return nil
}

func (t *TableClient) checkRange(first uint64, n int, vals []float64) error {
	if n < 0 || first+uint64(n) > t.spec.Size {
		return fmt.Errorf("kvstore: range [%d, %d) of %q is outside [0, %d)", first, first+uint64(n), t.spec.Name, t.spec.Size)
	}
	if n*t.spec.Width != len(vals) {
		return fmt.Errorf("kvstore: range of %d keys of %q needs %d values, got %d", n, t.spec.Name, n*t.spec.Width, len(vals))
	}
	return nil
}

func (t *TableClient) chunkSpans(chunks []uint64, vals []float64) error {
	t.spans = t.spans[:0]
	off := 0
	for _, id := range chunks {
		first, n, err := t.Chunk(id)
		if err != nil {
			return err
		}
		t.split(first, n, off)
		off += n
	}
	if off*t.spec.Width != len(vals) {
		return fmt.Errorf("kvstore: chunks of %q hold %d values, got a slice of %d", t.spec.Name, off*t.spec.Width, len(vals))
	}
	return nil
}

func (t *TableClient) rangeSpans(first uint64, n int, vals []float64) error {
	if err := t.checkRange(first, n, vals); err != nil {
		return err
	}
	t.spans = t.spans[:0]
	t.split(first, n, 0)
	return nil
}

// split appends the per-owner spans of [first, first+n).
func (t *TableClient) split(first uint64, n int, off int) {
	Spans(t.dir, first, n, func(shard int, f uint64, m int) {
		// Merge with the previous span when contiguous on one shard
		// (hash partitioning yields single keys).
		if k := len(t.spans); k > 0 {
			last := &t.spans[k-1]
			if last.shard == shard && last.first+uint64(last.n) == f && last.off+last.n == off+int(f-first) {
				last.n += m
				return
			}
		}
		t.spans = append(t.spans, span{shard: shard, first: f, n: m, off: off + int(f-first)})
	})
}

func (t *TableClient) getSpans(out []float64) error {
	for {
		err := t.getSpansOnce(out)
		if !errors.Is(err, errViewChanged) {
			return err
		}
		// A slave died: read again from the shards' new heads.
	}
}

func (t *TableClient) getSpansOnce(out []float64) error {
	c := t.c
	if c.err != nil {
		return c.err
	}
	if err := t.sendHeld(); err != nil { // the read sees them
		return err
	}
	w := t.spec.Width
	p := t.begin(out)
	defer c.release(p)
	for _, sp := range t.spans {
		if t.inMemory(sp.shard) {
			continue
		}
		for i := 0; i < sp.n; i += t.maxKeys {
			m := min(t.maxKeys, sp.n-i)
			c.msg = Message{Op: OpGetRange, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: c.clock,
				First: sp.first + uint64(i), N: uint32(m)}
			if err := t.request(p, sp.shard, part{off: (sp.off + i) * w, n: m * w}); err != nil {
				return err
			}
		}
		c.stats.RemoteKeys += int64(sp.n)
	}
	for _, sp := range t.spans {
		st := t.local[sp.shard]
		if !t.inMemory(sp.shard) {
			continue
		}
		if err := t.waitLocal(nil); err != nil {
			return err
		}
		if !t.readStatic(func() { st.GetRange(sp.first, sp.n, out[sp.off*w:(sp.off+sp.n)*w]) }) {
			// Keys started moving meanwhile: ask the home (this slave).
			for i := 0; i < sp.n; i += t.maxKeys {
				m := min(t.maxKeys, sp.n-i)
				c.msg = Message{Op: OpGetRange, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: c.clock,
					First: sp.first + uint64(i), N: uint32(m)}
				if err := t.request(p, sp.shard, part{off: (sp.off + i) * w, n: m * w}); err != nil {
					return err
				}
			}
			continue
		}
		c.stats.LocalKeys += int64(sp.n)
	}
	return t.wait(p)
}

// writeSpans applies vals to t.spans with op (OpAddRange or OpSetRange):
// local shards directly, remote ones in acknowledged messages.
func (t *TableClient) writeSpans(op Op, vals []float64) error {
	c := t.c
	if c.err != nil {
		return c.err
	}
	if op == OpSetRange {
		if err := t.sendHeld(); err != nil { // an overwrite comes after them
			return err
		}
	}
	w := t.spec.Width
	for _, sp := range t.spans {
		if st := t.local[sp.shard]; st != nil && !t.repl && t.readStatic(func() {
			v := vals[sp.off*w : (sp.off+sp.n)*w]
			if op == OpSetRange {
				st.SetRange(sp.first, sp.n, v)
			} else {
				st.AddRange(sp.first, sp.n, v)
			}
		}) {
			c.stats.LocalKeys += int64(sp.n)
			continue
		}
		for i := 0; i < sp.n; i += t.maxKeys {
			m := min(t.maxKeys, sp.n-i)
			c.msg = Message{Op: op, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: c.clock,
				First: sp.first + uint64(i), N: uint32(m), Width: uint16(w), DType: t.spec.DType, Vals: vals[(sp.off+i)*w : (sp.off+i+m)*w]}
			if err := t.publish(sp.shard, m); err != nil {
				return err
			}
		}
		c.stats.RemoteKeys += int64(sp.n)
	}
	return nil
}

// SetRange overwrites keys first..first+n-1 (a model written back after
// a direct transfer), asynchronously acknowledged like Add.
func (t *TableClient) SetRange(first uint64, n int, vals []float64) error {
	if t.keyed || t.dyn() {
		if err := t.rangeKeys(first, n, vals); err != nil {
			return err
		}
		return t.set(t.rk, vals)
	}
	if err := t.rangeSpans(first, n, vals); err != nil {
		return err
	}
	return t.writeSpans(OpSetRange, vals)
}
