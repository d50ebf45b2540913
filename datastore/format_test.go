package datastore

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

type row struct {
	label float64
	keys  []uint64
	vals  []float64
}

func rowsOf(r *Records) []row {
	var out []row
	for i := range r.Len() {
		l, k, v := r.Row(i)
		out = append(out, row{l, slices.Clone(k), slices.Clone(v)})
	}
	return out
}

func sameRows(a, b []row) bool {
	return slices.EqualFunc(a, b, func(x, y row) bool {
		return x.label == y.label && slices.Equal(x.keys, y.keys) && slices.Equal(x.vals, y.vals)
	})
}

func mustFormat(t testing.TB, name string, opt FormatOptions) Format {
	t.Helper()
	f, err := NewFormat(name, opt)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestNewFormatUnknown(t *testing.T) {
	_, err := NewFormat("parquet", DefaultFormatOptions())
	if err == nil || !strings.Contains(err.Error(), "parquet") || !strings.Contains(err.Error(), "libsvm") {
		t.Fatalf("err = %v", err)
	}
	for _, n := range FormatNames() {
		f := mustFormat(t, n, DefaultFormatOptions())
		if f.Name() != n {
			t.Errorf("Name() = %q, want %q", f.Name(), n)
		}
	}
}

type formatCase struct {
	name    string
	line    string
	want    []row  // nil: no record
	wantErr string // substring
}

func runFormatCases(t *testing.T, f Format, cases []formatCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			var r Records
			r.Append(7, []uint64{1}, []float64{1}) // a record already there must survive errors
			err := f.ParseLine([]byte(tt.line), &r)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if r.Len() != 1 || len(r.Keys) != 1 || len(r.Vals) != 1 {
					t.Fatalf("failed parse left partial data: %+v", r)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := rowsOf(&r)[1:]
			if !sameRows(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLIBSVM(t *testing.T) {
	f := mustFormat(t, "libsvm", DefaultFormatOptions())
	runFormatCases(t, f, []formatCase{
		{"basic", "1 1:0.5 3:2", []row{{1, []uint64{0, 2}, []float64{0.5, 2}}}, ""},
		{"minus one label", "-1 2:1", []row{{-1, []uint64{1}, []float64{1}}}, ""},
		{"plus label", "+1 2:1e-3", []row{{1, []uint64{1}, []float64{0.001}}}, ""},
		{"float label", "0.25 5:-3", []row{{0.25, []uint64{4}, []float64{-3}}}, ""},
		{"unsorted ids are sorted", "0 9:1 2:3 5:4", []row{{0, []uint64{1, 4, 8}, []float64{3, 4, 1}}}, ""},
		{"duplicate id", "1 2:1 2:5", nil, "feature id 2 appears twice"},
		{"duplicate id unsorted", "1 7:1 2:1 7:5", nil, "feature id 7 appears twice"},
		{"no features", "1", []row{{1, []uint64{}, []float64{}}}, ""},
		{"tabs and spaces", "\t1  1:1\t\t2:2  ", []row{{1, []uint64{0, 1}, []float64{1, 2}}}, ""},
		{"crlf", "1 1:1\r", []row{{1, []uint64{0}, []float64{1}}}, ""},
		{"comment", "1 1:1 # note 2:2", []row{{1, []uint64{0}, []float64{1}}}, ""},
		{"blank", "", nil, ""},
		{"spaces", "  \t ", nil, ""},
		{"comment only", "# header", nil, ""},
		{"indented comment", "   # x", nil, ""},
		{"id zero", "1 0:1", nil, "index_base = 0"},
		{"missing colon", "1 3", nil, "no ':'"},
		{"non-numeric id", "1 a:1", nil, "not a non-negative integer"},
		{"negative id", "1 -3:1", nil, "not a non-negative integer"},
		{"non-numeric val", "1 3:x", nil, "not a number"},
		{"empty val", "1 3:", nil, "not a number"},
		{"nan val", "1 3:nan", nil, "not a number"},
		{"bad label", "yes 1:1", nil, "label"},
		{"missing label", "1:1 2:1", nil, "missing label"},
		{"qid dropped", "1 qid:3 1:1 4:2", []row{{1, []uint64{0, 3}, []float64{1, 2}}}, ""},
		{"qid only", "0 qid:12", []row{{0, []uint64{}, []float64{}}}, ""},
		{"qid not an integer", "1 qid:x 1:1", nil, `qid "x" is not a non-negative integer`},
		{"qid empty", "1 qid: 1:1", nil, `qid "" is not a non-negative integer`},
		{"qid after a feature", "1 1:1 qid:3", nil, `feature id "qid" is not a non-negative integer`},
	})
	zero := DefaultFormatOptions()
	zero.IndexBase = 0
	runFormatCases(t, mustFormat(t, "libsvm", zero), []formatCase{
		{"zero based", "1 0:1 4:2", []row{{1, []uint64{0, 4}, []float64{1, 2}}}, ""},
	})
}

func TestCSV(t *testing.T) {
	f := mustFormat(t, "csv", DefaultFormatOptions())
	runFormatCases(t, f, []formatCase{
		{"basic", "1,0.5,2,3", []row{{1, []uint64{0, 1, 2}, []float64{0.5, 2, 3}}}, ""},
		{"spaces quotes crlf", " 0 , \"1.5\" ,2\r", []row{{0, []uint64{0, 1}, []float64{1.5, 2}}}, ""},
		{"label only", "1", []row{{1, []uint64{}, []float64{}}}, ""},
		{"blank", "", nil, ""},
		{"blank cr", " \r", nil, ""},
		{"empty field", "1,,2", nil, "column 1"},
		{"text", "1,abc", nil, `"abc" is not a number`},
		{"trailing comma", "1,2,", nil, "column 2"},
		{"header line", `label,age,"income"`, nil, `column 0: "label" is not a number (set header = true if the file starts with a header line)`},
	})
	// The header hint only where no field is a number.
	for _, line := range []string{"1,abc", "abc,1", "x,,2"} {
		var r Records
		err := f.ParseLine([]byte(line), &r)
		if err == nil || strings.Contains(err.Error(), "header") {
			t.Errorf("%q: %v, want an error without the header hint", line, err)
		}
	}
	opt := DefaultFormatOptions()
	opt.LabelColumn = 2
	opt.Delimiter = '\t'
	runFormatCases(t, mustFormat(t, "csv", opt), []formatCase{
		{"label last tab", "4\t5\t1", []row{{1, []uint64{0, 1}, []float64{4, 5}}}, ""},
		{"too few columns", "4\t5", nil, "no label column 2"},
	})
	opt = DefaultFormatOptions()
	opt.LabelColumn = -1
	runFormatCases(t, mustFormat(t, "csv", opt), []formatCase{
		{"no label", "4,5", []row{{0, []uint64{0, 1}, []float64{4, 5}}}, ""},
	})
	opt.Header = true
	if !mustFormat(t, "csv", opt).(HeaderSkipper).SkipsHeader() {
		t.Fatal("csv with Header does not skip the header")
	}
	if _, err := NewFormat("csv", FormatOptions{Delimiter: '.'}); err == nil {
		t.Fatal("'.' accepted as a delimiter")
	}
}

func TestRatings(t *testing.T) {
	f := mustFormat(t, "ratings", DefaultFormatOptions())
	one := func(u, i uint64, r float64) []row { return []row{{r, []uint64{u, i}, []float64{1, 1}}} }
	runFormatCases(t, f, []formatCase{
		{"tab", "3\t7\t4.5", one(3, 7, 4.5), ""},
		{"comma", "3,7,4", one(3, 7, 4), ""},
		{"spaces", "3  7   4", one(3, 7, 4), ""},
		{"timestamp", "3\t7\t4\t881250949", one(3, 7, 4), ""},
		{"movielens", "1::1193::5::978300760", one(1, 1193, 5), ""},
		{"crlf", "3,7,4\r", one(3, 7, 4), ""},
		{"blank", "", nil, ""},
		{"comment", "# users", nil, ""},
		{"indented comment", "  # users", nil, ""},
		{"trailing comment", "3 7 4 # imported 2019", one(3, 7, 4), ""},
		{"trailing comment after timestamp", "3\t7\t4\t881250949\t# ml-100k", one(3, 7, 4), ""},
		{"comment after two fields", "3 7 # no rating", nil, "2 fields"},
		{"hash inside a field", "3 7 4#x", nil, `rating "4#x" is not a number`},
		{"header", "user\titem\trating", nil, "set header = true"},
		{"bad rating", "3\t7\tgood", nil, `rating "good" is not a number`},
		{"too few", "3\t7", nil, "2 fields"},
		{"too many", "1 2 3 4 5", nil, "more than 4"},
		{"negative user", "-1 2 3", nil, "user"},
	})
}

// A ratings line that fails to parse was always told "(set header =
// true if the file starts with a header line)", even on line 4 of
// "1.0,2.0,3.5" (ids written as floats) or "7 2 NA": the hint only for a
// line without a number, as csv gives it.
func TestRatingsHeaderHint(t *testing.T) {
	f := mustFormat(t, "ratings", DefaultFormatOptions())
	for _, tc := range []struct {
		line, want string
		hint       bool
	}{
		{"user\titem\trating", `user "user" is not a non-negative integer`, true},
		{"userId,movieId,rating,timestamp", `user "userId"`, true},
		{"1.0,2.0,3.5", `user "1.0" is not a non-negative integer`, false},
		{"7 -2 3.5", `item "-2" is not a non-negative integer`, false},
		{"7 2 NA", `rating "NA" is not a number`, false},
		{"u7 i2 4", `user "u7" is not a non-negative integer`, false},
	} {
		t.Run(tc.line, func(t *testing.T) {
			var r Records
			err := f.ParseLine([]byte(tc.line), &r)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), headerHint) != tc.hint {
				t.Fatalf("error %v, want one containing %q, header hint %v", err, tc.want, tc.hint)
			}
		})
	}
}

// An empty cell was reported as `column 1: "" is not a number`: the
// doubled delimiter (a space-aligned file read with delimiter " ") or
// the one ending the line is named now.
func TestCSVEmptyCell(t *testing.T) {
	for _, tc := range []struct {
		line  string
		delim byte
		want  string
	}{
		{"1,,2", ',', `column 1 is empty: two delimiters ',' in a row, or one at the line's start or end`},
		{"1  2.5   3", ' ', `column 1 is empty: two delimiters ' ' in a row`},
		{"1\t2.5\t3\t", '\t', `column 3 is empty: two delimiters '\t' in a row, or one at the line's start or end`},
		{",1,2", ',', "column 0 is empty"},
		{"1, ,2", ',', "column 1 is empty"},
		{"1,x,2", ',', `column 1: "x" is not a number`},
		// pandas' to_csv with its index: the header's first cell is empty.
		{",f0,f1", ',', "column 0 is empty: two delimiters ',' in a row, or one at the line's start or end (set header = true if the file starts with a header line)"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			opt := DefaultFormatOptions()
			opt.Delimiter = tc.delim
			var r Records
			err := mustFormat(t, "csv", opt).ParseLine([]byte(tc.line), &r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	f := mustFormat(t, "text", DefaultFormatOptions())
	var r Records
	for _, l := range []string{"hello world", "", "\r", "x\r"} {
		if err := f.ParseLine([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
	}
	if r.Len() != 2 || r.Lines[0] != "hello world" || r.Lines[1] != "x" || len(r.Offsets) != 3 {
		t.Fatalf("%+v", r)
	}
}

// checkRecords verifies the Records invariants.
func checkRecords(t *testing.T, r *Records) {
	t.Helper()
	if r.Len() == 0 {
		if len(r.Offsets) > 1 || len(r.Keys) != 0 {
			t.Fatalf("empty records hold data: %+v", r)
		}
		return
	}
	if len(r.Offsets) != r.Len()+1 || r.Offsets[0] != 0 || r.Offsets[r.Len()] != len(r.Keys) || len(r.Keys) != len(r.Vals) {
		t.Fatalf("broken invariants: labels %d offsets %v keys %d vals %d", r.Len(), r.Offsets, len(r.Keys), len(r.Vals))
	}
}

func fuzzFormat(f *testing.F, name string, opt FormatOptions, seeds []string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	fm, err := NewFormat(name, opt)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return // lines never hold a newline
		}
		var r Records
		r.Append(3, []uint64{1}, []float64{2})
		orig := slices.Clone(line)
		err := fm.ParseLine(line, &r)
		if !bytes.Equal(orig, line) {
			t.Fatal("ParseLine modified its input")
		}
		checkRecords(t, &r)
		if err != nil && (r.Len() != 1 || len(r.Keys) != 1) {
			t.Fatalf("error %v left partial data", err)
		}
		if r.Len() > 2 {
			t.Fatalf("one line produced %d records", r.Len()-1)
		}
		if name == "libsvm" && r.Len() == 2 {
			if _, k, _ := r.Row(1); !slices.IsSorted(k) || len(slices.Compact(slices.Clone(k))) != len(k) {
				t.Fatalf("features %v not strictly ascending", k)
			}
		}
	})
}

func FuzzLIBSVM(f *testing.F) {
	fuzzFormat(f, "libsvm", DefaultFormatOptions(), []string{"1 1:0.5 3:2", "-1 2:1e-3 # c", "", "#", "1 0:1", "1:1", "+1 18446744073709551616:1", "0 3:1e400", "1 9:1 2:1 9:2", "0 5:1 3:2 1:3"})
}

// FuzzLIBSVMRoundTrip checks that a parsed record, written back, parses the same.
func FuzzLIBSVMRoundTrip(f *testing.F) {
	f.Add([]byte("1 1:0.5 3:2"))
	fm := mustFormat(f, "libsvm", DefaultFormatOptions())
	f.Fuzz(func(t *testing.T, line []byte) {
		var a Records
		if bytes.IndexByte(line, '\n') >= 0 || fm.ParseLine(line, &a) != nil || a.Len() != 1 {
			return
		}
		var b Records
		if err := fm.ParseLine(bytes.TrimSuffix(formatLIBSVM(nil, &a, 0, 1), []byte("\n")), &b); err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if !sameRows(rowsOf(&a), rowsOf(&b)) {
			t.Fatalf("%v != %v", rowsOf(&a), rowsOf(&b))
		}
	})
}

func FuzzCSV(f *testing.F) {
	fuzzFormat(f, "csv", DefaultFormatOptions(), []string{"1,2,3", " 0 , \"1.5\" ,2\r", "", "1,,2", "a,b"})
}

func FuzzRatings(f *testing.F) {
	fuzzFormat(f, "ratings", DefaultFormatOptions(), []string{"3\t7\t4.5", "1::1193::5::978300760", "u,i,r", "1 2", ""})
}
