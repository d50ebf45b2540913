package main

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// A format that does not match an input's files (format = "csv" on a
// LIBSVM file) stopped the first stage when its workers read the first
// line, after the task was queued and its tables made. checkFormats reads
// the first record line of each local input's first file at submission
// and refuses the job, naming the job file's line, when that line does not
// parse in the declared format but does in another: nothing is refused on
// a line that is merely malformed (the workers report it, or skip it with
// on_error = "skip"), or that parses in no format at all.

// sniffLines bounds the lines read past blanks and comments for a record.
const sniffLines = 1000

// checkFormats refuses a job (path, loaded as t) whose local input's
// first record line looks like another format than the input's.
func checkFormats(ctx context.Context, path string, t *tasks.MultiStageTask) error {
	if t == nil {
		return nil
	}
	src := datastore.NewSources()
	var data []byte
	for _, name := range slices.Sorted(maps.Keys(t.Inputs)) {
		in := t.Inputs[name]
		if s := datastore.Scheme(in.Path); s != "" && s != "file" {
			continue // HDFS: the workers read it, the submitter may not reach it
		}
		if in.OnError == datastore.OnErrorSkip {
			continue // a line the format refuses is skipped, not fatal
		}
		format := datastore.CanonicalFormat(cmp.Or(in.Format, "libsvm"))
		f, err := datastore.NewFormat(format, in.FormatOptions())
		if err != nil {
			continue // the job's own validation names it
		}
		files, err := src.Files(ctx, in.Path)
		if err != nil || len(files) == 0 {
			continue // the master says what is missing
		}
		file, lineNo, line, perr := firstRecordLine(files[0], f)
		if perr == nil {
			continue
		}
		if readsWithOtherOptions(line, format, in.FormatOptions()) {
			// "1 0:1" under index_base = 1, "1,2,3" under label_column =
			// 7: the format is right and a key of the input is wrong, and
			// a ratings line reads both; the workers name that key.
			continue
		}
		looks, _ := readAs(line, format)
		if looks == "" {
			continue
		}
		if data == nil {
			data, _ = os.ReadFile(path)
		}
		key := tasks.KeyLine(data, "input", name, "format")
		if key == 0 {
			key = tasks.KeyLine(data, "input", name, "path")
		}
		shown := line
		if len(shown) > 80 {
			shown = shown[:80] + "..."
		}
		return &tasks.ConfigError{File: path, Line: key,
			Msg: fmt.Sprintf("input %q is read as %s, but line %d of %s, %q, is not a %s record and reads as %s: set format = %q",
				name, format, lineNo, file, shown, format, looks, looks)}
	}
	return nil
}

// firstRecordLine finds the first line of file that f makes a record of
// or refuses (blank lines, comments and a header are passed over) and
// returns it with f's error. An unreadable file, or one with no such
// line among the first sniffLines, returns no error.
func firstRecordLine(file string, f datastore.Format) (string, int, string, error) {
	fh, err := os.Open(file)
	if err != nil {
		return file, 0, "", nil
	}
	defer fh.Close()
	var r io.Reader = fh
	if strings.HasSuffix(file, ".gz") {
		gz, err := gzip.NewReader(fh)
		if err != nil {
			return file, 0, "", nil
		}
		defer gz.Close()
		r = gz
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	skipHeader := false
	if h, ok := f.(datastore.HeaderSkipper); ok {
		skipHeader = h.SkipsHeader()
	}
	var recs datastore.Records
	for n := 1; n <= sniffLines && sc.Scan(); n++ {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
			if skipHeader {
				continue
			}
		}
		recs.Reset()
		if err := f.ParseLine(line, &recs); err != nil {
			if _, blank := readAs(string(line), f.Name()); blank {
				continue // a comment in another format ("#" in LIBSVM): look on
			}
			return file, n, string(line), err
		}
		if recs.Len() > 0 {
			return file, n, string(line), nil
		}
	}
	return file, 0, "", nil
}

// readsWithOtherOptions reports that line, refused as a record of format
// under opt, is one under other values of the format's keys: LIBSVM ids
// from 0, a CSV label in column 0 or ',' between the cells.
func readsWithOtherOptions(line, format string, opt datastore.FormatOptions) bool {
	def := datastore.DefaultFormatOptions()
	zero, col0, comma := opt, opt, opt
	zero.IndexBase, col0.LabelColumn, comma.Delimiter = 0, def.LabelColumn, def.Delimiter
	for _, o := range []datastore.FormatOptions{zero, col0, comma} {
		f, err := datastore.NewFormat(format, o)
		if err != nil {
			continue
		}
		var recs datastore.Records
		if f.ParseLine([]byte(line), &recs) == nil && recs.Len() > 0 {
			return true
		}
	}
	return false
}

// readAs names another format than declared, of those that are not free
// text, in which line is a record ("" if none); blank reports that one of
// them takes it for no record (a comment).
func readAs(line, declared string) (format string, blank bool) {
	for _, name := range []string{"libsvm", "csv", "ratings"} {
		if name == declared {
			continue
		}
		f, err := datastore.NewFormat(name, datastore.DefaultFormatOptions())
		if err != nil {
			continue
		}
		var recs datastore.Records
		if f.ParseLine([]byte(line), &recs) != nil {
			continue
		}
		if recs.Len() == 0 {
			blank = true
		} else if format == "" {
			format = name
		}
	}
	return format, blank
}
