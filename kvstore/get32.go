package kvstore

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// GetFloat32 is Get into float32 values, as models that hold their
// weights in float32 read them (ps-lite's KVWorker<float> pulls the same;
// AddFloat32 is its write). From a float32 table the shards' answers are
// copied into out as they come off the wire, with no float64 copy, and
// keys in this slave's memory are read and narrowed (exactly: a float32
// table holds float32 values). A float64 table, or keys that move, are
// read as Get reads them and rounded to float32.
func (t *TableClient) GetFloat32(keys []uint64, out []float32) error {
	c := t.c
	if c.cfg.Observer != nil {
		defer t.observe(OpGet, time.Now(), c.stats.Requests)
	}
	if c.err != nil {
		return c.err
	}
	if err := checkKeysN(t.spec, keys, len(out), "get"); err != nil {
		return err
	}
	if t.spec.DType != Float32 || t.dyn() || t.allHere && len(t.local) == 1 {
		return t.narrowGet(keys, out)
	}
	for {
		p, err := t.startGet32(keys, out)
		if err != nil {
			return err
		}
		err = t.wait(p)
		c.release(p)
		if errors.Is(err, errViewChanged) {
			continue // a slave died: read again from the new heads
		}
		return err
	}
}

// narrowGet is GetFloat32 through Get and a float64 buffer of t's.
func (t *TableClient) narrowGet(keys []uint64, out []float32) error {
	t.wide = grow(t.wide, len(out))
	if err := t.Get(keys, t.wide); err != nil {
		return err
	}
	for i, v := range t.wide[:len(out)] {
		out[i] = float32(v)
	}
	return nil
}

// startGet32 is startGet into float32 values for a static table's read
// (not stamped, not kept, not ahead): requests for remote keys are sent,
// keys in this slave's memory are read now.
func (t *TableClient) startGet32(keys []uint64, out []float32) (*pending, error) {
	c := t.c
	if err := t.sendHeld(); err != nil { // the read sees them
		return nil, err
	}
	w := t.spec.Width
	t.g.Group(t.dir, keys)
	p := t.begin(nil)
	p.out32 = out
	fail := func(err error) (*pending, error) {
		c.release(p)
		return nil, err
	}
	partOf := func(s, i, j int) part {
		if t.g.Whole() { // the answers fill out in order
			return part{off: i * w, n: (j - i) * w}
		}
		return part{pos: t.g.Pos(s)[i:j]}
	}
	ask := func(s int, ks []uint64) error {
		for i := 0; i < len(ks); i += t.maxKeys {
			j := min(i+t.maxKeys, len(ks))
			c.msg = Message{Op: OpGet, Task: c.cfg.Task, Table: t.spec.Name, Stage: c.cfg.Stage, Worker: c.cfg.Worker, Clock: c.clock, Keys: ks[i:j]}
			if err := t.request(p, s, partOf(s, i, j)); err != nil {
				return err
			}
		}
		return nil
	}
	for s := range t.hosts {
		ks := t.g.Keys(s)
		if len(ks) == 0 || t.inMemory(s) {
			continue
		}
		if err := ask(s, ks); err != nil {
			return fail(err)
		}
		c.stats.RemoteKeys += int64(len(ks))
	}
	// Serve local keys while remote replies travel.
	for s, st := range t.local {
		ks := t.g.Keys(s)
		if !t.inMemory(s) || len(ks) == 0 {
			continue
		}
		if err := t.waitLocal(ks); err != nil {
			return fail(err)
		}
		t.buf = grow(t.buf, len(ks)*w)
		if !t.readStatic(func() { st.Get(ks, t.buf) }) {
			// Keys started moving meanwhile: the home knows where they are.
			if err := ask(s, ks); err != nil {
				return fail(err)
			}
			continue
		}
		if t.g.Whole() {
			for i, v := range t.buf[:len(ks)*w] {
				out[i] = float32(v)
			}
		} else {
			for i, ps := range t.g.Pos(s) {
				for k, v := range t.buf[i*w : (i+1)*w] {
					out[int(ps)*w+k] = float32(v)
				}
			}
		}
		c.stats.LocalKeys += int64(len(ks))
	}
	return p, nil
}

// raw32Into decodes a reply's values into float32s: float32 bytes are
// copied as they are (on a little-endian machine, one memmove), float64
// ones rounded.
func raw32Into(out []float32, raw []byte, dtype DType) {
	if dtype == Float32 {
		raw = raw[:4*len(out)]
		if littleEndian {
			copy(float32Bytes(out), raw)
			return
		}
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return
	}
	raw = raw[:8*len(out)]
	for i := range out {
		out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:])))
	}
}
