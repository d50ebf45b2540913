package datastore

import "fmt"

// csvFormat parses dense numeric rows. Columns other than the label become
// keys 0..d-1 in order.
type csvFormat struct {
	delim  byte
	label  int // -1: no label
	header bool
}

func (f *csvFormat) Name() string      { return "csv" }
func (f *csvFormat) SkipsHeader() bool { return f.header }

func (f *csvFormat) trim(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || (b[0] == '\t' && f.delim != '\t')) {
		b = b[1:]
	}
	for n := len(b); n > 0 && (b[n-1] == ' ' || b[n-1] == '\r' || (b[n-1] == '\t' && f.delim != '\t')); n = len(b) {
		b = b[:n-1]
	}
	if n := len(b); n >= 2 && b[0] == '"' && b[n-1] == '"' {
		b = b[1 : n-1]
	}
	return b
}

func (f *csvFormat) ParseLine(line []byte, out *Records) error {
	if len(f.trim(line)) == 0 {
		return nil
	}
	start := len(out.Keys)
	var label float64
	hasLabel := false
	col := 0
	for i := 0; ; col++ {
		j := i
		for j < len(line) && line[j] != f.delim {
			j++
		}
		field := f.trim(line[i:j])
		v, ok := parseFloat(field)
		if !ok {
			out.rollback(start)
			hint := ""
			if f.noNumbers(line) { // "label,age,income": a header
				hint = headerHint
			}
			if len(field) == 0 {
				// `column 1: "" is not a number` left the user to
				// find the doubled separator (a space-aligned file
				// read with delimiter " ") or the one ending the line.
				return fmt.Errorf("column %d is empty: two delimiters %q in a row, or one at the line's start or end%s", col, f.delim, hint)
			}
			return fmt.Errorf("column %d: %s is not a number%s", col, quote(field), hint)
		}
		if col == f.label {
			label, hasLabel = v, true
		} else {
			out.Keys = append(out.Keys, uint64(len(out.Keys)-start))
			out.Vals = append(out.Vals, v)
		}
		if j == len(line) {
			break
		}
		i = j + 1
	}
	if f.label >= 0 && !hasLabel {
		out.rollback(start)
		return fmt.Errorf("no label column %d: the row has %d columns", f.label, col+1)
	}
	if out.cols == 0 {
		out.cols = col + 1
	} else if out.cols != col+1 {
		out.rollback(start)
		return fmt.Errorf("the row has %d columns, the rows above it %d (every row of a csv file needs the same columns)", col+1, out.cols)
	}
	out.commit(label)
	return nil
}

// noNumbers reports whether no field of line is a number.
func (f *csvFormat) noNumbers(line []byte) bool {
	for i := 0; i <= len(line); {
		j := i
		for j < len(line) && line[j] != f.delim {
			j++
		}
		if _, ok := parseFloat(f.trim(line[i:j])); ok {
			return false
		}
		i = j + 1
	}
	return true
}
