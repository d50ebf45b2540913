package kvstore

import (
	"encoding/binary"
	"time"
	"unsafe"
)

// AddFloat32 is Add for float32 deltas, as models that compute their
// gradients in float32 hold them (ps-lite's KVWorker<float> pushes the
// same). On a float32 table the first Add of an iteration travels as the
// caller's bytes: copied once into the connection, added by the shard in
// float32 as they come off the wire, and added in place to a shard in this
// slave's memory, with no float64 copy anywhere. Elsewhere (a float64
// table, a later Add of the iteration that is held and merged, a
// replicated table, keys that move) the deltas are converted to float64
// and added as Add does. The table ends the same either way: a float32
// table adds float32(delta) in float32 arithmetic on every path.
func (t *TableClient) AddFloat32(keys []uint64, deltas []float32) error {
	c := t.c
	if c.cfg.Observer != nil {
		defer t.observe(OpAdd, time.Now(), c.stats.Requests)
	}
	if c.err != nil {
		return c.err
	}
	if err := CheckKeys(t.spec, keys, len(deltas), "add"); err != nil {
		return err
	}
	if t.spec.DType != Float32 || !littleEndian || t.dyn() || t.repl || t.wouldHold() {
		return t.Add(keys, t.widen(deltas))
	}
	t.holding() // the iteration's first Add: counted, not held
	// Large deltas are lent to the connection, not copied (sendMsg):
	// they must stay as they are until written, so the call waits for
	// that before it returns, and before t.buf32 is refilled.
	c.lendRaw = true
	defer func() {
		c.lendRaw = false
		c.lent.Wait()
	}()
	w := t.spec.Width
	t.g.Group(t.dir, keys)
	for s := range t.hosts {
		ks := t.g.Keys(s)
		if len(ks) == 0 {
			continue
		}
		vals := deltas[:len(keys)*w]
		if len(ks) != len(keys) {
			c.lent.Wait()
			t.buf32 = t.buf32[:0]
			for _, p := range t.g.Pos(s) {
				t.buf32 = append(t.buf32, deltas[int(p)*w:int(p+1)*w]...)
			}
			vals = t.buf32
		}
		raw := float32Bytes(vals)
		if st := t.local[s]; st != nil && t.readStatic(func() { addFloat32To(st, ks, raw, vals, t) }) {
			c.stats.LocalKeys += int64(len(ks))
			continue
		}
		c.stats.RemoteKeys += int64(len(ks))
		if err := t.sendAdds(s, ks, nil, raw); err != nil {
			return err
		}
	}
	return nil
}

// addFloat32To adds float32 deltas (raw is vals' bytes) to a shard in
// memory: in place when the store takes raw float32 rows, else converted.
func addFloat32To(st Store, ks []uint64, raw []byte, vals []float32, t *TableClient) {
	if ra, ok := st.(rawAdder); ok && ra.AddRaw(ks, raw, Float32) {
		return
	}
	st.Add(ks, t.widen(vals))
}

// wouldHold reports whether an Add now would be held (see holding),
// without counting it.
func (t *TableClient) wouldHold() bool { return t.addClock == t.c.clock && t.adds > 0 }

// widen converts deltas to float64 in a buffer of t's.
func (t *TableClient) widen(deltas []float32) []float64 {
	t.wide = t.wide[:0]
	for _, d := range deltas {
		t.wide = append(t.wide, float64(d))
	}
	return t.wide
}

// littleEndian: float32 values in memory are their wire encoding.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// float32Bytes is vals' memory as bytes (little-endian machines only).
func float32Bytes(vals []float32) []byte {
	if len(vals) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(vals))), 4*len(vals))
}
