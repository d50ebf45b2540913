package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/clustertest"
)

const goodJob = `name = "bad"
kind = "lr"
[local]
slaves = 1
slots = 1
[[table]]
name = "w"
size = 100
[input.train]
path = "TRAIN"
[[stage]]
name = "sgd"
func = "lr.sgd"
workers = 1
[stage.params]
epochs = 1
`

func TestBadInputGivesOneClearError(t *testing.T) {
	dir := t.TempDir()
	train := filepath.Join(dir, "train.libsvm")
	os.WriteFile(train, []byte("1 1:0.5 3:1\n0 2:1\n"), 0o644)
	badData := filepath.Join(dir, "bad.libsvm")
	os.WriteFile(badData, []byte("1 1:0.5\n0 2:1\n1 3:x\n"), 0o644)
	commentsOnly := filepath.Join(dir, "comments.libsvm")
	os.WriteFile(commentsOnly, []byte("# a header comment\n\n   \n# nothing else\n"), 0o644)
	zero := filepath.Join(dir, "zero.libsvm")
	os.WriteFile(zero, []byte("1 0:1\n"), 0o644)
	wide := filepath.Join(dir, "wide.libsvm")
	os.WriteFile(wide, []byte("1 1:0.5\n0 2:1 150:1\n"), 0o644)
	job := func(s string) string { return strings.ReplaceAll(s, "TRAIN", train) }
	closed := clustertest.FreePort(t)

	cases := []struct {
		name  string
		job   string   // job file content (for run)
		args  []string // instead of run JOB
		wants []string // substrings of stderr
	}{
		{name: "syntax error", job: "name = \"x\"\n[[stage]\nfunc = 1\n", wants: []string{"job.toml line", "expected end of table array"}},
		{name: "unknown key", job: job(strings.Replace(goodJob, "workers = 1", "workers = 1\nwrokers = 2", 1)),
			wants: []string{"job.toml line 15", `unknown key "stage.wrokers"`}},
		{name: "wrong type", job: job(strings.Replace(goodJob, `size = 100`, `size = "big"`, 1)), wants: []string{"job.toml line 8", `key "table.size"`, "incompatible types"}},
		// It ran with the default params: the decoder leaves a map unset for a value that is no table.
		{name: "params not a table", job: job(strings.Replace(goodJob, "[stage.params]\nepochs = 1", "params = 5", 1)),
			wants: []string{"job.toml line 15", `key "stage.params"`, "want a table, got integer"}},
		// Both ran as if unset: every input, any slave.
		{name: "empty inputs", job: job(strings.Replace(goodJob, "workers = 1", "workers = 1\ninputs = []", 1)),
			wants: []string{"job.toml line 15", "stage 0 (sgd): inputs: empty (unset: every input of the task)"}},
		{name: "empty slaves", job: job(strings.Replace(goodJob, "workers = 1", "workers = 1\nslaves = []", 1)),
			wants: []string{"job.toml line 15", "stage 0 (sgd): slaves: empty (unset: any slave)"}},
		{name: "workers not a number", job: job(strings.Replace(goodJob, "workers = 1", `workers = "many"`, 1)), wants: []string{"workers", `"many"`}},
		{name: "missing func", job: job(strings.Replace(goodJob, `func = "lr.sgd"`, "", 1)), wants: []string{"stage 0 (sgd)", "func"}},
		{name: "unregistered stage function", job: job(strings.Replace(goodJob, `"lr.sgd"`, `"lr.nope"`, 1)),
			wants: []string{`no stage function registered as "lr.nope"`}},
		{name: "negative staleness", job: job(strings.Replace(goodJob, "workers = 1", "workers = 1\nconsistency = \"ssp\"\nstaleness = -1", 1)),
			wants: []string{"stage 0 (sgd)", "staleness"}},
		{name: "speculation without sparse_ssp", job: job(strings.Replace(goodJob, "workers = 1", "workers = 1\nconsistency = \"ssp\"\nspeculation = 2", 1)),
			wants: []string{"stage 0 (sgd)", "speculation"}},
		{name: "missing data file", job: strings.ReplaceAll(goodJob, "TRAIN", filepath.Join(dir, "nope.libsvm")),
			wants: []string{"nope.libsvm", "no such file"}},
		{name: "malformed libsvm line", job: strings.ReplaceAll(goodJob, "TRAIN", badData), wants: []string{"bad.libsvm line 3", "3:x"}},
		{name: "input of comments and blank lines only", job: strings.ReplaceAll(goodJob, "TRAIN", commentsOnly),
			wants: []string{"stage 0 (sgd) epoch 1", "no worker trained on a record"}},
		{name: "feature id beyond the table", job: strings.ReplaceAll(goodJob, "TRAIN", wide),
			wants: []string{"wide.libsvm line 2", "feature key 149", `table "w" (size 100`}},
		// It said the line "reads as ratings: set format = \"ratings\"".
		{name: "feature id 0 in a 1-based file", job: strings.ReplaceAll(goodJob, "TRAIN", zero),
			wants: []string{"zero.libsvm line 1", "feature id 0 is below index_base 1", "set index_base = 0"}},
		{name: "typo in a param name", job: job(strings.Replace(goodJob, "epochs = 1", "epochs = 1\nlearning_rat = 0.1", 1)),
			wants: []string{"stage 0 (sgd)", `unknown param "learning_rat"`, "lr"}},
		{name: "fractional epochs", job: job(strings.Replace(goodJob, "epochs = 1", "epochs = 1.5", 1)),
			wants: []string{"stage 0 (sgd)", `param "epochs": want an integer, got 1.5`}},
		// It said "epochs must be >= 1, got -9223372036854775808".
		{name: "epochs beyond the integers", job: job(strings.Replace(goodJob, "epochs = 1", "epochs = 1e300", 1)),
			wants: []string{"job.toml line 16", `param "epochs": 1e+300 is beyond the integers`}},
		{name: "infinite learning rate", job: job(strings.Replace(goodJob, "epochs = 1", "epochs = 1\nlr = inf", 1)),
			wants: []string{"stage 0 (sgd)", `param "lr": want a finite number`}},
		{name: "bad lr parameter", job: job(strings.Replace(goodJob, "epochs = 1", "epochs = 1\nlr = -1", 1)), wants: []string{"lr must be > 0"}},
		// Checked at submission: the first stage never runs.
		{name: "bad param of a later stage", job: job(goodJob + "[[table]]\nname = \"entities\"\nsize = 4\nwidth = 4\n[[table]]\nname = \"relations\"\nsize = 2\nwidth = 4\n" +
			"[[stage]]\nname = \"emb\"\nfunc = \"kge.complex\"\nworkers = 1\n[stage.params]\nlr = \"fast\"\n"),
			wants: []string{"stage 1 (emb)", "params", "lr", "fast"}},
		{name: "negative local slots", job: job(strings.Replace(goodJob, "slots = 1", "slots = -3", 1)),
			wants: []string{"job.toml", "[local] slots", "-3"}},
		{name: "negative local slaves", job: job(strings.Replace(goodJob, "slaves = 1", "slaves = -1", 1)),
			wants: []string{"job.toml", "[local] slaves", "-1"}},
		{name: "negative --slaves", args: []string{"run", "--slaves", "-2", "x.toml"}, wants: []string{"--slaves", "-2"}},
		{name: "negative --slots", args: []string{"run", "--slots", "-1", "x.toml"}, wants: []string{"--slots", "-1"}},
		{name: "missing job file", args: []string{"run", filepath.Join(dir, "none.toml")}, wants: []string{"none.toml", "no such file"}},
		{name: "unreachable nats", args: []string{"submit", "--nats", fmt.Sprintf("nats://127.0.0.1:%d", closed), "x.toml"},
			wants: []string{fmt.Sprintf("127.0.0.1:%d", closed), "unreachable"}},
		{name: "unknown command", args: []string{"trian"}, wants: []string{`unknown command "trian"`}},
		{name: "eval a file that is no model", args: []string{"eval", "--model", train, "--data", train}, wants: []string{"train.libsvm", "not a flexps model file"}},
		{name: "gen without output", args: []string{"gen", "libsvm"}, wants: []string{"--out is required"}},
		// It wrote the file as if the flag were not there.
		{name: "gen ratings with a libsvm flag", args: []string{"gen", "ratings", "--rows", "10", "--dim", "50", "--out", filepath.Join(dir, "r.tsv")},
			wants: []string{"--dim: a libsvm setting, not read by kind ratings"}},
		{name: "gen libsvm with a ratings flag", args: []string{"gen", "libsvm", "--rows", "10", "--rank", "3", "--out", filepath.Join(dir, "l.libsvm")},
			wants: []string{"--rank: a ratings setting, not read by kind libsvm"}},
		// It used to write ./hdfs:/nn:8020/x.libsvm and say "wrote hdfs://nn:8020/x.libsvm".
		{name: "gen to an hdfs URL", args: []string{"gen", "libsvm", "--rows", "10", "--out", "hdfs://127.0.0.1:1/x.libsvm"},
			wants: []string{"hdfs://127.0.0.1:1/x.libsvm", "writes local files only"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if args == nil {
				path := filepath.Join(t.TempDir(), "job.toml")
				if err := os.WriteFile(path, []byte(tc.job), 0o644); err != nil {
					t.Fatal(err)
				}
				args = []string{"run", "--log-level", "error", path}
			}
			var stderr bytes.Buffer
			code := run(args, &stderr)
			msg := stderr.String()
			if code == 0 {
				t.Fatalf("exit 0, want an error; stderr:\n%s", msg)
			}
			for _, w := range tc.wants {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr lacks %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "goroutine ") || strings.Contains(msg, "panic") {
				t.Errorf("stack trace in stderr:\n%s", msg)
			}
			if n := strings.Count(strings.TrimSpace(msg), "\n"); n > 3 {
				t.Errorf("want one clear error, got %d lines:\n%s", n+1, msg)
			}
		})
	}
}

// An output that is a file of one of the task's inputs was refused by the
// master without a line number, unlike the job file's other mistakes;
// flexps run now refuses it before starting a cluster, naming the line
// of output.
func TestOutputOverAnInputNamesItsLine(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	train := filepath.Join(data, "train.libsvm")
	if err := os.WriteFile(train, []byte("1 1:0.5 3:1\n0 2:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, train)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, input, output string
	}{
		{"the train file", train, train},
		{"by a relative path", train, rel},
		{"a file of an input directory", data, train},
		{"a file of a glob", filepath.Join(data, "*.libsvm"), train},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := strings.Replace(strings.ReplaceAll(goodJob, "TRAIN", tc.input), "kind = \"lr\"\n", fmt.Sprintf("kind = \"lr\"\noutput = %q\n", tc.output), 1)
			path := filepath.Join(t.TempDir(), "job.toml")
			if err := os.WriteFile(path, []byte(job), 0o644); err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			code := run([]string{"run", "--log-level", "error", path}, &stderr)
			msg := stderr.String()
			want := fmt.Sprintf("%s line 3: task \"bad\": output %s is a file of its input \"train\"", path, tc.output)
			if code != 1 || !strings.Contains(msg, want) {
				t.Fatalf("exit %d, want 1 and %q; stderr:\n%s", code, want, msg)
			}
		})
	}
}
