package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexps/flexps/tasks"
)

// An input whose format does not match its file is refused when the job
// is read, naming the job file's line, the input and the file's first
// record line; a line that is only malformed, or an input the check
// cannot or need not read, is left to the workers. Before, flexps run and
// flexps submit accepted the job and its first stage failed when it
// started.
func TestInputFormatMismatchRefusedAtSubmission(t *testing.T) {
	gz := func(s string) string {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.String()
	}
	cases := []struct {
		name   string
		file   string // the input's file name and content
		data   string
		format string // the input's extra keys
		wants  []string
	}{
		{"csv on a libsvm file", "train.libsvm", "# made by hand\n\n1 1:0.5 3:1\n0 2:1\n", `format = "csv"`,
			[]string{"job.toml line 11", `input "train" is read as csv`, "line 3 of", "train.libsvm", `"1 1:0.5 3:1"`, `set format = "libsvm"`}},
		{"libsvm (the default) on a csv file", "train.csv", "1,0.5,2\n0,1,3\n", "",
			[]string{"job.toml line 10", `input "train" is read as libsvm`, "line 1 of", `"1,0.5,2"`, `set format = "csv"`}},
		{"libsvm on a ratings file", "r.txt", "\xef\xbb\xbf1 2 3.5\n", `format = "libsvm"`,
			[]string{"job.toml line 11", `"1 2 3.5"`, `set format = "ratings"`}},
		{"csv on a gzipped libsvm file", "train.libsvm.gz", gz("1 1:0.5\n"), `format = "csv"`,
			[]string{"job.toml line 11", `"1 1:0.5"`, `set format = "libsvm"`}},
		{"csv header then rows", "h.csv", "label,a,b\n1,0.5,2\n", "format = \"csv\"\nheader = true", nil},
		{"a line malformed in every format", "bad.libsvm", "1 3:x\n", "", nil},
		// It said "reads as ratings: set format = \"ratings\"" of a 0-based LIBSVM file.
		{"libsvm with a feature id 0", "zero.libsvm", "1 0:1\n", "", nil},
		{"csv with a label column past the row", "c.csv", "1,2,3\n", "format = \"csv\"\nlabel_column = 7", nil},
		{"csv with another delimiter", "c.csv", "1,2,3\n", "format = \"csv\"\ndelimiter = \";\"", nil},
		{"an ambiguous line: a label only", "l.csv", "1\n1 1:2\n", `format = "csv"`, nil},
		{"skipped lines are not fatal", "s.libsvm", "1 1:0.5\n", "format = \"csv\"\non_error = \"skip\"", nil},
		{"text reads anything", "t.libsvm", "1 1:0.5\n", `format = "text"`, nil},
		{"the right format", "ok.libsvm", "1 1:0.5\n", `format = "libsvm"`, nil},
		{"comments only", "c.libsvm", "# nothing\n\n", `format = "csv"`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, tc.file)
			if err := os.WriteFile(data, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			job := strings.Replace(strings.ReplaceAll(goodJob, "TRAIN", data), "[input.train]\npath = \""+data+"\"\n",
				"[input.train]\npath = \""+data+"\"\n"+tc.format+"\n", 1)
			path := filepath.Join(dir, "job.toml")
			if err := os.WriteFile(path, []byte(job), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.wants == nil {
				_, task, err := tasks.LoadJob(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := checkFormats(context.Background(), path, task); err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var stderr bytes.Buffer
			code := run([]string{"run", "--log-level", "error", path}, &stderr)
			msg := stderr.String()
			if code == 0 {
				t.Fatalf("exit 0, want the job refused; stderr:\n%s", msg)
			}
			for _, w := range tc.wants {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}
