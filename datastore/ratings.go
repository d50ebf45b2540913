package datastore

import "fmt"

// ratingsFormat parses "user item rating [timestamp]" separated by tabs,
// commas, spaces, semicolons or "::" (MovieLens); a field starting with
// '#' starts a comment that runs to the end of the line. A record has Label =
// rating, Keys = [user, item], Vals = [1, 1].
type ratingsFormat struct{ header bool }

func (f *ratingsFormat) Name() string      { return "ratings" }
func (f *ratingsFormat) SkipsHeader() bool { return f.header }

const headerHint = " (set header = true if the file starts with a header line)"

func isRatingSep(c byte) bool {
	return c == ' ' || c == '\t' || c == ',' || c == ';' || c == ':' || c == '\r'
}

func (f *ratingsFormat) ParseLine(line []byte, out *Records) error {
	var fields [4][]byte
	n := 0
	i := 0
	for {
		for i < len(line) && isRatingSep(line[i]) {
			i++
		}
		if i == len(line) {
			break
		}
		if line[i] == '#' {
			// A comment: the whole line, or the rest of it (as in
			// LIBSVM; "3 7 4 # imported 2019" was refused as a
			// fourth and fifth field).
			break
		}
		j := i
		for j < len(line) && !isRatingSep(line[j]) {
			j++
		}
		if n == len(fields) {
			return fmt.Errorf("more than 4 fields; want user item rating [timestamp]")
		}
		fields[n] = line[i:j]
		n++
		i = j
	}
	if n == 0 {
		return nil
	}
	if n < 3 {
		return fmt.Errorf("%d fields; want user item rating [timestamp]", n)
	}
	// The header hint only for a line without a number ("user item
	// rating"): on "1.0,2.0,3.5" (ids a tool wrote as floats), "7 -2 3"
	// or "7 2 NA" far down a file it sent the user after a header.
	hint := headerHint
	for _, fl := range fields[:n] {
		if _, ok := parseFloat(fl); ok {
			hint = ""
			break
		}
	}
	user, ok := parseUint(fields[0])
	if !ok {
		return fmt.Errorf("user %s is not a non-negative integer%s", quote(fields[0]), hint)
	}
	item, ok := parseUint(fields[1])
	if !ok {
		return fmt.Errorf("item %s is not a non-negative integer%s", quote(fields[1]), hint)
	}
	r, ok := parseFloat(fields[2])
	if !ok {
		return fmt.Errorf("rating %s is not a number%s", quote(fields[2]), hint)
	}
	out.Keys = append(out.Keys, user, item)
	out.Vals = append(out.Vals, 1, 1)
	out.commit(r)
	return nil
}
