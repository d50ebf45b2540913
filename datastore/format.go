package datastore

import (
	"fmt"
	"sort"
	"strings"
)

// NewFormat returns the line parser named name: "libsvm", "csv", "ratings"
// or "text". Formats hold no per-call state and are safe for concurrent use.
func NewFormat(name string, opt FormatOptions) (Format, error) {
	switch strings.ToLower(name) {
	case "libsvm", "svmlight":
		if opt.IndexBase < 0 {
			return nil, fmt.Errorf("datastore: libsvm index_base %d: want 0 or 1", opt.IndexBase)
		}
		return &libsvmFormat{base: uint64(opt.IndexBase)}, nil
	case "csv":
		d := opt.Delimiter
		if d == 0 {
			d = ','
		}
		if d == '\n' || d == '\r' || d == '"' || d == '.' || d == '-' || (d >= '0' && d <= '9') {
			return nil, fmt.Errorf("datastore: csv delimiter %q cannot be used", d)
		}
		if opt.LabelColumn < -1 {
			return nil, fmt.Errorf("datastore: csv label_column %d: want -1 (no label) or a column index", opt.LabelColumn)
		}
		return &csvFormat{delim: d, label: opt.LabelColumn, header: opt.Header}, nil
	case "ratings":
		return &ratingsFormat{header: opt.Header}, nil
	case "text":
		return textFormat{}, nil
	}
	return nil, fmt.Errorf("datastore: unknown format %q (known: %s)", name, strings.Join(FormatNames(), ", "))
}

// CanonicalFormat is the name NewFormat knows format name by: lower case,
// "svmlight" as "libsvm" (a name it does not know is returned lower-cased).
func CanonicalFormat(name string) string {
	name = strings.ToLower(name)
	if name == "svmlight" {
		return "libsvm"
	}
	return name
}

// FormatNames lists the formats NewFormat knows.
func FormatNames() []string {
	n := []string{"libsvm", "csv", "ratings", "text"}
	sort.Strings(n)
	return n
}

// isSpace reports the separators LIBSVM and ratings lines use.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func nextSpace(b []byte, i int) int {
	for i < len(b) && !isSpace(b[i]) {
		i++
	}
	return i
}

// textFormat keeps each non-empty line.
type textFormat struct{}

func (textFormat) Name() string { return "text" }

func (textFormat) ParseLine(line []byte, out *Records) error {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) == 0 {
		return nil
	}
	out.AppendLine(string(line))
	return nil
}
