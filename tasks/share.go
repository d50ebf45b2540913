package tasks

import (
	"fmt"
	"slices"

	"github.com/flexps/flexps/kvstore"
)

// KeyScanner is a table that can list the keys its shards hold (a ps
// stage's tables, with or without a process cache): see EachShareKeys.
type KeyScanner interface {
	Scan(fn func(keys []uint64, vals []float64) error) error
}

// EachShareKeys calls fn with this worker's share (Info.Share) of the keys
// of table t below limit (0: t's size), at most chunk keys a call, in
// ascending order: the keys a collective pass over a table visits (every
// worker rewrites its share after a Barrier).
//
// Over a dense table the share is the key range [limit*index/count,
// limit*(index+1)/count). Over a sparse table it is the keys its shards
// hold (Scan) whose key mod count is index: such a table is declared as
// large as its ids run (hashed ids of up to 2^63), and a pass over its
// whole key range sent a read per 16k keys of it, days of them, for the
// few keys it stores. Each worker lists the whole table's keys and keeps
// its own: a pass costs every worker one Scan. The keys are those written
// before the call (a Barrier first makes every worker's Adds count); a
// key never written reads as the table's Init and is not visited. keys is
// valid only during the call.
func EachShareKeys(info *Info, t Table, limit uint64, chunk int, fn func(keys []uint64) error) error {
	spec := t.Spec()
	if limit == 0 || limit > spec.Size {
		limit = spec.Size
	}
	chunk = max(chunk, 1)
	idx, live := info.Share()
	n := uint64(max(live, 1))
	if spec.Storage != kvstore.Sparse {
		lo, hi := limit*uint64(idx)/n, limit*uint64(idx+1)/n
		keys := make([]uint64, 0, chunk)
		for first := lo; first < hi; first += uint64(chunk) {
			keys = keys[:0]
			for k := first; k < min(first+uint64(chunk), hi); k++ {
				keys = append(keys, k)
			}
			if err := fn(keys); err != nil {
				return err
			}
		}
		return nil
	}
	sc, ok := t.(KeyScanner)
	if !ok {
		return fmt.Errorf("table %q is sparse, and this stage's copy of it cannot list its keys (%T)", spec.Name, t)
	}
	var mine []uint64
	err := sc.Scan(func(keys []uint64, _ []float64) error {
		for _, k := range keys {
			if k < limit && k%n == uint64(idx) {
				mine = append(mine, k)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("table %q: %w", spec.Name, err)
	}
	slices.Sort(mine)
	for lo := 0; lo < len(mine); lo += chunk {
		if err := fn(mine[lo:min(lo+chunk, len(mine))]); err != nil {
			return err
		}
	}
	return nil
}
