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
// the record's file and line; seen checks that the data's negative labels
// are all 0 or all -1.
func labelOf(r *datastore.Records, i int, seen *Negatives) (float64, error) {
	y, err := binaryLabel(r.Labels[i])
	if err == nil {
		err = seen.Check(r, i)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", r.Where(i), err)
	}
	return y, nil
}

// Negatives remembers where one data set's first 0 and first -1 label
// were. Both in one data set are three classes (-1, 0, 1: negative,
// neutral, positive), which binary logistic regression, taking either as
// the negative label, trained silently as 1 against the rest. Each worker
// checks the records it reads (train and test apart), flexps eval the
// whole file.
type Negatives struct {
	zero, minus string // where the first 0 and -1 were; "" none yet
}

// Check records record i's label when it is 0 or -1 and returns an error
// (naming the line of the other one, not record i's) once both occurred.
func (n *Negatives) Check(r *datastore.Records, i int) error {
	var first, other *string
	switch r.Labels[i] {
	case 0:
		first, other = &n.zero, &n.minus
	case -1:
		first, other = &n.minus, &n.zero
	default:
		return nil
	}
	if *first == "" {
		*first = r.Where(i)
	}
	if *other == "" {
		return nil
	}
	return fmt.Errorf("label %v, and %s has label %v: labels 1, 0 and -1 are three classes, and binary logistic regression takes 1 (positive) against 0 or against -1 (negative), not both (make the labels binary, e.g. 1 for one class and 0 for the rest)",
		r.Labels[i], *other, -1-r.Labels[i])
}

// CSVWider returns an error naming the first of records lo..hi that is a
// csv row with more features than table spec has keys, or nil. A csv row
// holds every feature of its file's columns, so unlike a LIBSVM feature
// the training data never had (weight 0, as in liblinear's predict) such
// a row is a file of other columns than the training's: scored with the
// extra features at weight 0 and the others misaligned, one id column
// more gave accuracy 0.35 for a model at 0.99, exit 0.
func CSVWider(r *datastore.Records, lo, hi int, spec kvstore.TableSpec) error {
	if r.Columns() == 0 {
		return nil
	}
	for i := lo; i < hi; i++ {
		if n := r.Offsets[i+1] - r.Offsets[i]; uint64(n) > spec.Size {
			return fmt.Errorf("%s: the row has %d features (its csv columns less the label column), table %q has %d keys (the features trained on): score csv data of the training's columns", r.Where(i), n, spec.Name, spec.Size)
		}
	}
	return nil
}
