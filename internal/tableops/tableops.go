// Package tableops holds the writes that stage functions build from a
// table's Get and Add: a parameter table only adds, so setting or
// clearing keys is a read and the difference added.
package tableops

// GetAdder is the part of a table (tasks.Table, a kvstore client, a test
// double) the writes use.
type GetAdder interface {
	Get(keys []uint64, out []float64) error
	Add(keys []uint64, deltas []float64) error
}

// Set makes t[keys] hold vals (len(vals) = len(keys) x the table's
// width) by adding the difference from what t holds.
func Set(t GetAdder, keys []uint64, vals []float64) error {
	d := make([]float64, len(vals))
	if err := t.Get(keys, d); err != nil {
		return err
	}
	for i := range d {
		d[i] = vals[i] - d[i]
	}
	return t.Add(keys, d)
}

// Negate adds the negation of t's values of keys to t, which clears them
// unless another Add lands between its read and its write; buf (as long
// as those values) is its scratch.
func Negate(t GetAdder, keys []uint64, buf []float64) error {
	if err := t.Get(keys, buf); err != nil {
		return err
	}
	for i := range buf {
		buf[i] = -buf[i]
	}
	return t.Add(keys, buf)
}
