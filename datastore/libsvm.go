package datastore

import (
	"bytes"
	"errors"
	"fmt"
)

// libsvmFormat parses "label id:val id:val ... # comment". Ids need not be
// sorted; key = id - base.
type libsvmFormat struct{ base uint64 }

func (f *libsvmFormat) Name() string { return "libsvm" }

var errMissingLabel = errors.New("missing label")

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
	start := len(out.Keys)
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
		out.Keys = append(out.Keys, id-f.base)
		out.Vals = append(out.Vals, v)
	}
	out.commit(label)
	return nil
}
