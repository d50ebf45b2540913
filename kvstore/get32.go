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
	if err := CheckKeys(t.spec, keys, len(out), "get"); err != nil {
		return err
	}
	if t.spec.DType != Float32 || t.dyn() || t.allHere && len(t.local) == 1 {
		return t.narrowGet(keys, out)
	}
	for {
		p, _, err := t.startGet(keys, nil, false, false, nil, out)
		if err != nil || p == nil {
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

// narrowInto rounds rows of width w of vals into out32: in order when pos
// is nil (one shard owns every key), else row i to row pos[i].
func narrowInto(out32 []float32, vals []float64, pos []int32, w int) {
	if pos == nil {
		for i, v := range vals {
			out32[i] = float32(v)
		}
		return
	}
	for i, ps := range pos {
		for k, v := range vals[i*w : (i+1)*w] {
			out32[int(ps)*w+k] = float32(v)
		}
	}
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
