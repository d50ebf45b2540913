package datastore

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
)

// libsvmFormat parses "label [qid:q] id:val id:val ... # comment"; key =
// id - base; the query id is checked and dropped.
// Ids need not be ascending (a record's features are sorted by id, as
// training expects), but an id may appear only once per line: a duplicate
// is an error, since summing or keeping either value would be a guess.
type libsvmFormat struct{ base uint64 }

func (f *libsvmFormat) Name() string { return "libsvm" }

var errMissingLabel = errors.New("missing label")

var qidPrefix = []byte("qid:")

func (f *libsvmFormat) ParseLine(line []byte, out *Records) error {
	if c := bytes.IndexByte(line, '#'); c >= 0 {
		line = line[:c]
	}
	i := skipSpace(line, 0)
	if i == len(line) {
		return nil
	}
	j := nextSpace(line, i)
	label, ok := parseFloat(line[i:j])
	if !ok {
		if bytes.IndexByte(line[i:j], ':') >= 0 {
			return fmt.Errorf("%w: line starts with feature %s", errMissingLabel, quote(line[i:j]))
		}
		return fmt.Errorf("label %s is not a number", quote(line[i:j]))
	}
	if i = skipSpace(line, j); bytes.HasPrefix(line[i:], qidPrefix) {
		// SVMlight's query id (ranking files; scikit-learn's
		// dump_svmlight_file(query_id=...)): it groups records for
		// ranking, which no stage does; read and dropped.
		j = nextSpace(line, i)
		if _, ok := parseUint(line[i+len(qidPrefix) : j]); !ok {
			return fmt.Errorf("qid %s is not a non-negative integer", quote(line[i+len(qidPrefix):j]))
		}
	}
	start := len(out.Keys)
	sorted := true
	for i = skipSpace(line, j); i < len(line); i = skipSpace(line, j) {
		j = nextSpace(line, i)
		tok := line[i:j]
		c := bytes.IndexByte(tok, ':')
		if c < 0 {
			out.rollback(start)
			return fmt.Errorf("feature %s has no ':'", quote(tok))
		}
		id, ok := parseUint(tok[:c])
		if !ok {
			out.rollback(start)
			return fmt.Errorf("feature id %s is not a non-negative integer", quote(tok[:c]))
		}
		if id < f.base {
			out.rollback(start)
			return fmt.Errorf("feature id %d is below index_base %d (set index_base = 0 for 0-based files)", id, f.base)
		}
		v, ok := parseFloat(tok[c+1:])
		if !ok {
			out.rollback(start)
			return fmt.Errorf("feature value %s is not a number", quote(tok[c+1:]))
		}
		k := id - f.base
		if n := len(out.Keys); n > start {
			if prev := out.Keys[n-1]; k == prev {
				out.rollback(start)
				return fmt.Errorf("feature id %d appears twice", id)
			} else if k < prev {
				sorted = false
			}
		}
		out.Keys = append(out.Keys, k)
		out.Vals = append(out.Vals, v)
	}
	if !sorted {
		feats := featureSorter{out.Keys[start:], out.Vals[start:]}
		sort.Sort(feats)
		for x := 1; x < len(feats.k); x++ {
			if feats.k[x] == feats.k[x-1] {
				out.rollback(start)
				return fmt.Errorf("feature id %d appears twice", feats.k[x]+f.base)
			}
		}
	}
	out.commit(label)
	return nil
}

// featureSorter sorts one record's features by key, values alongside.
type featureSorter struct {
	k []uint64
	v []float64
}

func (s featureSorter) Len() int           { return len(s.k) }
func (s featureSorter) Less(i, j int) bool { return s.k[i] < s.k[j] }
func (s featureSorter) Swap(i, j int) {
	s.k[i], s.k[j] = s.k[j], s.k[i]
	s.v[i], s.v[j] = s.v[j], s.v[i]
}
