package lr

import (
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
)

// KeyOutside returns an error naming the file and line of the first of
// records lo..hi with a feature key outside table spec, or nil. The hot
// path does not check keys (the table refuses them); a stage calls this
// when a read fails, to say which line of the data is at fault.
func KeyOutside(r *datastore.Records, lo, hi int, spec kvstore.TableSpec) error {
	for i := lo; i < hi; i++ {
		for _, k := range r.Keys[r.Offsets[i]:r.Offsets[i+1]] {
			if k >= spec.Size {
				return fmt.Errorf("%s: feature key %d is outside table %q (size %d: keys 0..%d; a LIBSVM feature id is its key + index_base, 1 by default): the table's size must exceed the largest key",
					r.Where(i), k, spec.Name, spec.Size, spec.Size-1)
			}
		}
	}
	return nil
}

// labelOf is record i's label as binaryLabel maps it, or an error naming
// the record's file and line.
func labelOf(r *datastore.Records, i int) (float64, error) {
	y, err := binaryLabel(r.Labels[i])
	if err != nil {
		return 0, fmt.Errorf("%s: %w", r.Where(i), err)
	}
	return y, nil
}
