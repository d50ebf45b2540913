package datastore

import (
	"context"
	"fmt"
)

// Records are read-only once handed out: the BlockCache encodes a block's
// batches for later epochs after the consumer may have received them, so
// consumers must not modify them.

// Len returns the number of records.
func (r *Records) Len() int { return len(r.Labels) }

// Reset empties r and keeps its capacity.
func (r *Records) Reset() {
	clear(r.Lines) // let the strings be collected
	r.Labels = r.Labels[:0]
	r.Offsets = r.Offsets[:0]
	r.Keys = r.Keys[:0]
	r.Vals = r.Vals[:0]
	r.Lines = r.Lines[:0]
	r.LineNo = r.LineNo[:0]
	r.Origins = r.Origins[:0]
	r.cols = 0
}

// Where locates record i for an error message: "path line N", or "record
// i" for records without an origin. A record of a block that does not
// start its file gets the line in the file when the block's reader can
// count the lines before it (once per block, reading the file up to the
// block); else "path line N of the block at byte B".
func (r *Records) Where(i int) string {
	if i >= len(r.LineNo) || len(r.Origins) == 0 {
		return fmt.Sprintf("record %d", i+1)
	}
	o := r.Origins[0]
	for _, x := range r.Origins[1:] {
		if x.First > i {
			break
		}
		o = x
	}
	if o.Block > 0 {
		if o.before != nil {
			if n, err := o.before.get(context.Background()); err == nil {
				return fmt.Sprintf("%s line %d", o.Path, n+r.LineNo[i])
			}
		}
		return fmt.Sprintf("%s line %d of the block at byte %d", o.Path, r.LineNo[i], o.Block)
	}
	return fmt.Sprintf("%s line %d", o.Path, r.LineNo[i])
}

// Columns is the number of fields (the label's included) of the csv rows
// the records were parsed from, 0 for records of another format or built
// by hand.
func (r *Records) Columns() int { return r.cols }

// appendRows appends src's records, with their origins, to r.
func (r *Records) appendRows(src *Records) {
	if r.cols == 0 {
		r.cols = src.cols
	}
	located := len(src.LineNo) == src.Len() && len(src.Origins) > 0 && len(r.LineNo) == r.Len()
	base := r.Len()
	for i := 0; i < src.Len(); i++ {
		l, k, v := src.Row(i)
		r.Append(l, k, v)
	}
	if !located {
		return
	}
	r.LineNo = append(r.LineNo, src.LineNo...)
	for _, o := range src.Origins {
		o.First += base
		r.Origins = append(r.Origins, o)
	}
}

// Append adds a record. keys and vals must have the same length; a nil vals
// means every value is 1.
func (r *Records) Append(label float64, keys []uint64, vals []float64) {
	if vals != nil && len(vals) != len(keys) {
		panic(fmt.Sprintf("datastore: Records.Append: %d keys but %d vals", len(keys), len(vals)))
	}
	r.Keys = append(r.Keys, keys...)
	if vals == nil {
		for range keys {
			r.Vals = append(r.Vals, 1)
		}
	} else {
		r.Vals = append(r.Vals, vals...)
	}
	r.commit(label)
}

// AppendLine adds a text record: label 0, no features, the line in Lines.
func (r *Records) AppendLine(s string) {
	r.Lines = append(r.Lines, s)
	r.commit(0)
}

// commit closes the record whose features were appended to Keys and Vals
// since the previous commit.
func (r *Records) commit(label float64) {
	if len(r.Offsets) == 0 {
		r.Offsets = append(r.Offsets, 0)
	}
	r.Labels = append(r.Labels, label)
	r.Offsets = append(r.Offsets, len(r.Keys))
}

// rollback drops features appended after a failed parse began at keys.
func (r *Records) rollback(keys int) {
	r.Keys = r.Keys[:keys]
	r.Vals = r.Vals[:keys]
}

// Row returns record i. The slices alias r's arrays.
func (r *Records) Row(i int) (label float64, keys []uint64, vals []float64) {
	lo, hi := r.Offsets[i], r.Offsets[i+1]
	return r.Labels[i], r.Keys[lo:hi:hi], r.Vals[lo:hi:hi]
}

// Bytes approximates the memory r holds (capacities, not lengths).
func (r *Records) Bytes() int64 {
	n := int64(cap(r.Labels))*8 + int64(cap(r.Offsets))*8 + int64(cap(r.Keys))*8 +
		int64(cap(r.Vals))*8 + int64(cap(r.Lines))*16 + int64(cap(r.LineNo))*8
	for _, s := range r.Lines {
		n += int64(len(s))
	}
	return n + 120 // the struct itself
}

// newBatch allocates a batch sized like prev (so steady-state batches do not
// grow) for about n records.
func newBatch(n int, prev *Records, text bool) *Records {
	r := &Records{
		Labels:  make([]float64, 0, n),
		Offsets: make([]int, 0, n+1),
		LineNo:  make([]int64, 0, n),
	}
	if prev != nil {
		r.cols = prev.cols
	}
	if text {
		r.Lines = make([]string, 0, n)
		return r
	}
	k := n * 16
	if prev != nil && prev.Len() > 0 {
		k = len(prev.Keys)*n/prev.Len() + len(prev.Keys)/8 + 16
	}
	r.Keys = make([]uint64, 0, k)
	r.Vals = make([]float64, 0, k)
	return r
}
