package tasks_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"pgregory.net/rapid"
)

func init() {
	tasks.Register("t.noop", func(*tasks.Info) error { return nil })
	tasks.Register("t.moves", func(*tasks.Info) error { return nil })
	tasks.Register("t.bsp", func(*tasks.Info) error { return nil })
	tasks.RegisterNeedsBSP("t.bsp")
	// t.noop checks two params as the built-in functions do: their types,
	// then their ranges, the message starting with the function, then
	// the param.
	tasks.RegisterParams("t.noop", func(p tasks.Params) error {
		if err := p.CheckInt("epochs"); err != nil {
			return err
		}
		if err := p.Check("lr"); err != nil {
			return err
		}
		if e := p.Int("epochs", 5); e < 1 {
			return fmt.Errorf("t.noop: epochs must be >= 1, got %d", e)
		}
		if lr := p.Float("lr", 0.5); !(lr > 0) {
			return fmt.Errorf("t.noop: lr must be > 0, got %v", lr)
		}
		return nil
	})
	tasks.RegisterRelocates("t.moves", func(s tasks.Stage) []string {
		if s.Params.Bool("localize", true) {
			return []string{s.Params.String("table", "w")}
		}
		return nil
	})
}

// A stage function that moves keys (RegisterRelocates) declares its
// tables Relocate, which makes their replicas default to 1; one that does
// not leaves them as declared.
func TestRelocatesHookDeclaresTables(t *testing.T) {
	for _, tc := range []struct {
		name, edit string
		want       bool
	}{
		{"moves", strings.Replace(base, "t.noop", "t.moves", 1), true},
		{"told not to", strings.Replace(base, "t.noop", "t.moves", 1) + "[stage.params]\nlocalize = false\n", false},
		{"another table", strings.Replace(base, "t.noop", "t.moves", 1) + "[stage.params]\ntable = \"v\"\n", false},
		{"plain", base, false},
		{"declared", strings.Replace(base, "size = 10", "size = 10\nrelocate = true", 1), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, task, err := tasks.ParseJob("j.toml", []byte(tc.edit))
			if err != nil {
				t.Fatal(err)
			}
			spec := task.Tables[0]
			if spec.Relocate != tc.want {
				t.Fatalf("table w: relocate %v, want %v", spec.Relocate, tc.want)
			}
			r, err := spec.ResolveReplicas(3, 2)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 2}[tc.want]; r != want {
				t.Fatalf("replicas resolved to %d, want %d", r, want)
			}
		})
	}
}

const base = `name = "job"
[[table]]
name = "w"
size = 10
[input.train]
path = "x.libsvm"
[[stage]]
name = "s"
func = "t.noop"
workers = 2
`

func TestParseJobValidation(t *testing.T) {
	cases := []struct {
		name, edit string // appended to base, or replacing it when it starts with "!"
		want       string // substring of the error; "" = valid
		line       int    // the line the error names (0: none)
	}{
		{"valid", "", "", 0},
		{"auto workers", "!" + strings.Replace(base, "workers = 2", `workers = "auto"`+"\nmax_workers = 4", 1), "", 0},
		{"max_workers without auto", "max_workers = 4\n", `max_workers: applies only with workers = "auto" (workers is 2)`, 11},
		{"auto_trial_seconds without auto", "auto_trial_seconds = 5.0\n", `auto_trial_seconds: applies only with workers = "auto"`, 11},
		{"auto_trial_seconds with one worker", "!" + strings.Replace(base, "workers = 2", "auto_trial_seconds = 5.0", 1), `auto_trial_seconds: applies only with workers = "auto" (workers is 1)`, 10},
		{"negative max_workers", "!" + strings.Replace(base, "workers = 2", `workers = "auto"`+"\nmax_workers = -1", 1), "max_workers: must be >= 1", 11},
		{"auto trial length", "!" + strings.Replace(base, "workers = 2", `workers = "auto"`+"\nauto_trial_seconds = 0.5", 1), "", 0},
		{"bad workers string", "!" + strings.Replace(base, "workers = 2", `workers = "lots"`, 1), `"lots"`, 10},
		{"zero workers", "!" + strings.Replace(base, "workers = 2", "workers = 0", 1), "workers", 10},
		{"unknown top key", "!colour = 1\n" + base, `line 1: unknown key "colour"`, 1},
		{"unknown stage key", "staleness2 = 1\n", `line 11: unknown key "stage.staleness2"`, 11},
		{"wrong type", "!" + strings.Replace(base, "size = 10", `size = "ten"`, 1), "line 4", 4},
		{"syntax", "[[stage\n", "line", 12},
		{"no name", "!" + strings.Replace(base, `name = "job"`, "", 1), "needs a name", 0},
		{"empty name", "!" + "priority = 3\n" + strings.Replace(base, `name = "job"`, `name = ""`, 1), "needs a name", 2},
		{"no stages", "!" + base[:strings.Index(base, "[[stage]]")], "no stages", 0},
		{"unregistered func", "!" + strings.Replace(base, "t.noop", "t.nope", 1), `no stage function registered as "t.nope"`, 9},
		{"bad consistency", `consistency = "eventual"` + "\n", "consistency", 11},
		{"negative staleness", "consistency = \"ssp\"\nstaleness = -1\n", "staleness", 12},
		{"staleness with bsp", "consistency = \"bsp\"\nstaleness = 2\n", "staleness", 12},
		{"speculation without sparse", "consistency = \"ssp\"\nspeculation = 2\n", "speculation", 12},
		{"sparse ssp ok", "consistency = \"sparse_ssp\"\nstaleness = 1\nspeculation = 2\n", "", 0},
		{"local on two slaves", "worker_kind = \"local\"\nmax_slaves = 2\n", "max_slaves", 12},
		{"single with two workers", "worker_kind = \"single\"\n", "single stage", 10},
		{"cache without size", "cache = \"lru\"\n", "cache_size", 11},
		{"cache on local", "worker_kind = \"local\"\ncache = \"lru\"\ncache_size = 5\n", "ps workers", 12},
		{"cache with sparse ssp", "consistency = \"sparse_ssp\"\nstaleness = 1\ncache = \"lfu\"\ncache_size = 5\n", "sparse_ssp controller", 13},
		{"bad worker kind", "worker_kind = \"gpu\"\n", "worker_kind", 11},
		{"chunk_size on a ps stage", "chunk_size = 64\n", "chunk_size: keys per chunk lock of a stage that holds the model in one slave", 11},
		{"chunk_size on a local stage", "worker_kind = \"local\"\nchunk_size = 64\n", "", 0},
		{"chunk_size on a hogwild stage", "worker_kind = \"hogwild\"\nchunk_size = 64\n", "", 0},
		{"bsp function under asp", "!" + strings.Replace(base, "t.noop", "t.bsp", 1), `t.bsp relies on BSP barriers between its 2 workers; set consistency = "bsp" (got "asp")`, 7},
		{"bsp function under ssp", "!" + strings.Replace(base, "t.noop", "t.bsp", 1) + "consistency = \"ssp\"\n", `(got "ssp")`, 11},
		{"bsp function auto", "!" + strings.Replace(strings.Replace(base, "t.noop", "t.bsp", 1), "workers = 2", `workers = "auto"`, 1), "the workers auto parallelism may choose", 7},
		{"bsp function, one worker", "!" + strings.Replace(strings.Replace(base, "t.noop", "t.bsp", 1), "workers = 2", "workers = 1", 1), "", 0},
		{"bsp function under bsp", "!" + strings.Replace(base, "t.noop", "t.bsp", 1) + "consistency = \"bsp\"\n", "", 0},
		{"unknown input", "inputs = [\"nope\"]\n", `no input named "nope"`, 11},
		{"priority range", "!" + "priority = 101\n" + base, "priority", 1},
		{"bad transfer", "!" + "model_transfer = \"fax\"\n" + base, "model_transfer", 1},
		{"bad table dtype", "!" + strings.Replace(base, "size = 10", "size = 10\ndtype = \"int8\"", 1), "dtype", 5},
		// Status, metrics and errors name stages by name; an unnamed
		// stage is "stageN", which a named one may collide with.
		{"duplicate stage name", "[[stage]]\nname = \"s\"\nfunc = \"t.noop\"\n", `stage 1 (s): stage 0 is named "s" too`, 12},
		{"unnamed stage named as another", "!" + strings.Replace(base, `name = "s"`, `name = "stage1"`, 1) + "[[stage]]\nfunc = \"t.noop\"\n", `stage 1 (stage1): stage 0 is named "stage1" too`, 11},
		{"two unnamed stages", "!" + strings.Replace(base, `name = "s"`+"\n", "", 1) + "[[stage]]\nfunc = \"t.noop\"\n", "", 0},
		{"duplicate table", "!" + strings.Replace(base, "[input.train]", "[[table]]\nname = \"w\"\nsize = 3\n[input.train]", 1), "declared twice", 6},
		{"bad format", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"xml\"", 1), "format", 7},
		{"bad index base", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nindex_base = 2", 1), "index_base", 7},
		{"repeat", "!" + "repeat = 3\n" + base, "", 0},
		{"max_bad_fraction with skip", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\non_error = \"skip\"\nmax_bad_fraction = 0.05", 1), "", 0},
		{"max_bad_fraction without skip", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nmax_bad_fraction = 0.05", 1), `max_bad_fraction applies only with on_error = "skip"`, 7},
		{"max_bad_fraction with fail", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\non_error = \"fail\"\nmax_bad_fraction = 0.05", 1), "max_bad_fraction applies only", 8},
		{"csv delimiter tab", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"csv\"\ndelimiter = \"\\t\"", 1), "", 0},
		{"csv delimiter a word", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"csv\"\ndelimiter = \"tab\"", 1), `delimiter must be one character, got "tab"`, 8},
		{"csv delimiter escaped twice", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"csv\"\ndelimiter = '\\t'", 1), `delimiter must be one character, got "\\t"`, 8},
		{"csv delimiter a dot", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"csv\"\ndelimiter = \".\"", 1), `csv delimiter '.' cannot be used`, 8},
		{"csv label column below -1", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"csv\"\nlabel_column = -2", 1), "label_column -2", 8},
		{"label column on libsvm", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nlabel_column = 3", 1), `input "train": label_column applies only to format csv, not libsvm`, 7},
		{"delimiter on libsvm", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"libsvm\"\ndelimiter = \";\"", 1), "delimiter applies only to format csv", 8},
		{"header on libsvm", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nheader = true", 1), "header applies only to format csv or ratings, not libsvm", 7},
		{"header on ratings", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"ratings\"\nheader = true", 1), "", 0},
		{"header false on libsvm", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nheader = false", 1), "", 0},
		{"index base on csv", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"csv\"\nindex_base = 0", 1), "index_base applies only to format libsvm, not csv", 8},
		{"index base 0 on libsvm", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nindex_base = 0", 1), "", 0},
		{"csv no label column", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"csv\"\nlabel_column = -1", 1), "", 0},
		{"index_base on libsvm", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nindex_base = 0", 1), "", 0},
		{"index_base on csv", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"csv\"\nindex_base = 0", 1), `input "train": index_base applies only to format libsvm, not csv`, 8},
		{"delimiter on libsvm", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\ndelimiter = \";\"", 1), `delimiter applies only to format csv, not libsvm`, 7},
		{"delimiter on ratings", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"ratings\"\ndelimiter = \",\"", 1), `delimiter applies only to format csv, not ratings`, 8},
		{"header on ratings", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"ratings\"\nheader = true", 1), "", 0},
		{"header on libsvm", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nheader = true", 1), `header applies only to format csv or ratings, not libsvm`, 7},
		{"generate ok", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\n[input.train.generate]\nrows = 10\ndim = 5\nnnz = 2\nzipf = 1.1", 1), "", 0},
		{"generate zipf below 1", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\n[input.train.generate]\nrows = 10\ndim = 5\nnnz = 2\nzipf = 0.5", 1), `input "train": generate: zipf: want a finite exponent > 1`, 11},
		{"generate nnz past dim", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\n[input.train.generate]\nnnz = 9\ndim = 5", 1), "generate: nnz:", 8},
		{"generate bad kind", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\n[input.train.generate]\nkind = \"csv\"", 1), `generate: kind: want libsvm or ratings, got "csv"`, 8},
		{"generate ratings into ratings", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"ratings\"\n[input.train.generate]\nkind = \"ratings\"\nusers = 3\nitems = 3", 1), "", 0},
		{"generate libsvm into csv", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"csv\"\n[input.train.generate]\nkind = \"libsvm\"\ndim = 5\nnnz = 2", 1), `input "train": generate: kind = "libsvm" writes a libsvm file, but the input is read as csv: set format = "libsvm"`, 9},
		{"generate libsvm by default into csv", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"csv\"\n[input.train.generate]\ndim = 5\nnnz = 2", 1), `kind = "libsvm" writes a libsvm file, but the input is read as csv`, 7},
		{"generate ratings into libsvm", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\n[input.train.generate]\nkind = \"ratings\"\nusers = 3\nitems = 3", 1), `kind = "ratings" writes a ratings file, but the input is read as libsvm: set format = "ratings"`, 8},
		// Ignored until now: the file was written without them.
		{"generate dim on ratings", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"ratings\"\n[input.train.generate]\nkind = \"ratings\"\nusers = 3\nitems = 3\ndim = 50", 1), "generate: dim: a libsvm setting, not read by kind ratings", 12},
		{"generate users on libsvm", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\n[input.train.generate]\ndim = 5\nnnz = 2\nusers = 3", 1), "generate: users: a ratings setting, not read by kind libsvm", 10},
		// The held-out rows were written over the training rows: refused
		// only once the file was missing and written, naming no line, and
		// never when it existed.
		{"generate test_path the input's path", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"d/x\"\n[input.train.generate]\ndim = 5\nnnz = 2\ntest_path = \"./d//x\"", 1), `input "train": generate: test_path "./d//x" is the input's own file`, 10},
		// A ratings spec under a libsvm input: the first refusal was of the
		// ratings keys it lacks, not of the kind.
		{"generate ratings into libsvm without ratings keys", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\n[input.train.generate]\nkind = \"ratings\"", 1), `kind = "ratings" writes a ratings file, but the input is read as libsvm`, 8},
		{"generate negative rank", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nformat = \"ratings\"\n[input.train.generate]\nkind = \"ratings\"\nusers = 3\nitems = 3\nrank = -1", 1), "generate: rank:", 12},
		{"task name with a newline", "!" + strings.Replace(base, `name = "job"`, `name = "a\nb"`, 1), "holds a control character", 1},
		{"task name with a terminal escape", "!" + strings.Replace(base, `name = "job"`, `name = "a\u001b[2Jb"`, 1), `task name "a\x1b[2Jb": holds a control character`, 1},
		{"stage name with a terminal escape", "!" + strings.Replace(base, `name = "s"`, `name = "s\u001b[0m"`, 1), "stage name", 8},
		{"table name with a tab", "!" + strings.Replace(base, `name = "w"`, `name = "w\t"`, 1), `table name "w\t": holds a control character`, 3},
		// (The header's escaped name is not matched to its line.)
		{"input name with a newline", "!" + strings.Replace(base, "[input.train]", `[input."tr\nain"]`, 1), `input name "tr\nain": holds a control character`, 0},
		{"stage name with spaces and accents", "!" + strings.Replace(base, `name = "s"`, `name = "étape un"`, 1), "", 0},
		{"input without a name", "!" + strings.Replace(base, "[input.train]", "[input.\"\"]", 1), "an input needs a name", 6},
		{"negative block size", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nblock_size = -1", 1), "size -1 is negative", 7},
		// A job's block_size takes the sizes the cluster's [data] block_size
		// does: "64KiB" was refused as the wrong type.
		{"block size with a unit", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nblock_size = \"64KiB\"", 1), "", 0},
		{"block size not a size", "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\nblock_size = \"lots\"", 1), `bad size "lots"`, 7},
		{"negative table chunk size", "!" + strings.Replace(base, "size = 10", "size = 10\nchunk_size = -5", 1), "chunk_size", 5},
		{"negative local slots", "[local]\nslots = -1\n", "[local] slots", 12},
		{"too many local slots", "[local]\nslaves = 2\nslots = 2000\n", "[local] slots: must be in [1, 1024]", 13},
		{"too many local slaves", "[local]\nslaves = 257\n", "[local] slaves: must be in [1, 256]", 12},
		{"largest local cluster", "[local]\nslaves = 256\nslots = 1024\n", "", 0},
		{"relocate", "!" + strings.Replace(base, "size = 10", "size = 10\nrelocate = true", 1), "", 0},
		{"relocate with one replica", "!" + strings.Replace(base, "size = 10", "size = 10\nrelocate = true\nreplicas = 1", 1), "", 0},
		{"relocate replicated", "!" + strings.Replace(base, "size = 10", "size = 10\nrelocate = true\nreplicas = 2", 1), "relocate: the table's keys move", 5},
		{"relocate not a bool", "!" + strings.Replace(base, "size = 10", "size = 10\nrelocate = \"yes\"", 1), "line 5", 5},
		{"nan param", "[stage.params]\nx = 1\ny = nan\n", `param "y"`, 13},
		{"param out of range", "[stage.params]\nbatch = 3\nepochs = 0\n", "epochs must be >= 1", 13},
		{"param named like its function", "[stage.params]\nlr = -1.0\n", "lr must be > 0", 12},
		{"param check about a default", "[stage.params]\nx = 1\n", "", 0},
		{"repeated stage", "!" + "repeat = 2\n" + base + "[[stage]]\nname = \"t\"\nfunc = \"t.noop\"\nworker_kind = \"single\"\nworkers = 3\n", "single stage", 16},
		{"relocating func on a replicated table", "!" + strings.Replace(strings.Replace(base, "size = 10", "size = 10\nreplicas = 3", 1), "t.noop", "t.moves", 1), `table "w": relocate`, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := base + tc.edit
			if strings.HasPrefix(tc.edit, "!") {
				src = tc.edit[1:]
			}
			_, task, err := tasks.ParseJob("job.toml", []byte(src))
			if tc.name == "block size with a unit" && err == nil && task.Inputs["train"].BlockSize != 64<<10 {
				t.Fatalf("block_size = \"64KiB\" read as %d bytes", task.Inputs["train"].BlockSize)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("no error, want one containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q lacks %q", err, tc.want)
			case err != nil && !strings.HasPrefix(err.Error(), "job.toml"):
				t.Fatalf("error %q does not name the file", err)
			}
			var ce *tasks.ConfigError
			if err != nil && (!errors.As(err, &ce) || ce.Line != tc.line) {
				t.Fatalf("error %q: want it on line %d", err, tc.line)
			}
			if err == nil && task.Name != "job" {
				t.Fatalf("task %+v", task)
			}
		})
	}
}

func TestRepeatStages(t *testing.T) {
	_, task, err := tasks.ParseJob("j.toml", []byte("repeat = 3\n"+base))
	if err != nil {
		t.Fatal(err)
	}
	if len(task.Stages) != 3 || task.Stages[2].Name != "s.2" || task.Stages[2].Params.Int("round", -1) != 2 {
		t.Fatalf("stages %+v", task.Stages)
	}
}

func TestDefaults(t *testing.T) {
	_, task, err := tasks.ParseJob("j.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	s := task.Stages[0]
	in := task.Inputs["train"]
	if s.WorkerKind != tasks.KindPS || s.Consistency.Kind != kvstore.ASP || in.Format != "libsvm" || *in.IndexBase != 1 ||
		task.Tables[0].Width != 1 || task.ModelTransfer != tasks.TransferKVStore {
		t.Fatalf("defaults: %+v %+v %+v", s, in, task.Tables[0])
	}
}

func TestParams(t *testing.T) {
	p := tasks.Params{"i": int64(3), "f": 0.5, "s": "x", "b": true, "n": "2.5", "bad": []int{1}}
	if p.Int("i", 0) != 3 || p.Float("f", 0) != 0.5 || p.String("s", "") != "x" || !p.Bool("b", false) || p.Float("n", 0) != 2.5 {
		t.Fatal("getters")
	}
	if p.Int("f", 7) != 7 || p.Int("missing", 9) != 9 {
		t.Fatal("defaults")
	}
	if err := p.Check("i", "f"); err != nil {
		t.Fatal(err)
	}
	if err := p.Check("bad"); err == nil {
		t.Fatal("a list passed as a number")
	}
	p["lr"] = "fast"
	if err := p.Check("lr"); err == nil || !strings.Contains(err.Error(), `param "lr"`) || !strings.Contains(err.Error(), `"fast"`) {
		t.Fatalf("a word passed as a number: %v", err)
	}
}

// A typo'd param name, a fraction where an integer is read and a
// non-finite number are errors, not silent defaults.
func TestParamsRefuseWhatWouldBeIgnored(t *testing.T) {
	p := tasks.Params{"epochs": int64(3), "lr": 0.5, "round": float64(2)}
	if err := p.Known("epochs", "lr", "batch"); err != nil {
		t.Fatalf("known params (and round, which repeat sets): %v", err)
	}
	p["learning_rat"] = 0.1
	err := p.Known("epochs", "lr", "batch")
	if err == nil || !strings.Contains(err.Error(), `unknown param "learning_rat"`) || !strings.Contains(err.Error(), "batch, epochs, lr") {
		t.Fatalf("unknown param: %v", err)
	}
	p["epocs"] = int64(2)
	if err := p.Known("epochs", "lr"); err == nil || !strings.Contains(err.Error(), `"epocs"`) || !strings.Contains(err.Error(), `did you mean "epochs"`) {
		t.Fatalf("near miss: %v", err)
	}
	for _, tc := range []struct {
		v    any
		want string
	}{{2.5, "want an integer, got 2.5"}, {"2.5", "want an integer"}, {math.Inf(1), "want a finite number"}, {math.NaN(), "want a finite number"},
		{1e300, "1e+300 is beyond the integers"}, {int64(math.MaxInt64), "is beyond the integers"}} {
		q := tasks.Params{"epochs": tc.v}
		if err := q.CheckInt("epochs"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckInt(%v): %v, want %q", tc.v, err, tc.want)
		}
	}
	if err := (tasks.Params{"epochs": int64(4), "b": float64(3)}).CheckInt("epochs", "b", "missing"); err != nil {
		t.Errorf("integers: %v", err)
	}
	if err := (tasks.Params{"lr": math.Inf(1)}).Check("lr"); err == nil || !strings.Contains(err.Error(), `param "lr": want a finite number`) {
		t.Errorf("Check(+Inf): %v", err)
	}
}

func TestModelRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		width := rapid.IntRange(1, 4).Draw(t, "width")
		size := rapid.IntRange(1, 50).Draw(t, "size")
		dense := rapid.Float64().Draw(t, "x")
		vals := make([]float64, size*width)
		for i := range vals {
			vals[i] = rapid.Float64().Draw(t, "v")
		}
		m := &tasks.Model{Kind: "k", Task: "t1", Name: "n", Tables: []tasks.ModelTable{{Spec: kvstore.TableSpec{Name: "a", Size: uint64(size), Width: width}, Vals: vals}}}
		if math.IsNaN(dense) || dense > 0 {
			// a sparse table: every other key
			var keys []uint64
			var sv []float64
			for k := 0; k < size; k += 2 {
				keys = append(keys, uint64(k))
				sv = append(sv, vals[k*width:(k+1)*width]...)
			}
			m.Tables = append(m.Tables, tasks.ModelTable{Spec: kvstore.TableSpec{Name: "b", Size: uint64(size), Width: width}, Keys: keys, Vals: sv})
		}
		var buf bytes.Buffer
		if _, err := m.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		got, err := tasks.ReadModel(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if got.Kind != "k" || len(got.Tables) != len(m.Tables) {
			t.Fatalf("header %+v", got)
		}
		for i, tab := range m.Tables {
			a, b := tab.DenseValues(), got.Tables[i].DenseValues()
			for j := range a {
				if math.Float64bits(a[j]) != math.Float64bits(b[j]) {
					t.Fatalf("table %d value %d: %v vs %v", i, j, a[j], b[j])
				}
			}
		}
	})
}

func TestReadModelRejectsOtherFiles(t *testing.T) {
	for _, in := range []string{"", "hello\n", `{"magic":"flexps-model/1","tables":[{"spec":{"name":"a","size":4,"width":1},"count":4,"dense":true}]}` + "\n\x00\x00"} {
		if _, err := tasks.ReadModel(strings.NewReader(in)); !errors.Is(err, tasks.ErrModelFormat) {
			t.Fatalf("%q: %v", in, err)
		}
	}
}

type sliceInput []*datastore.Records

func (s sliceInput) Pass(context.Context) (datastore.Pass, error) { return &slicePass{recs: s}, nil }

type slicePass struct{ recs []*datastore.Records }

func (p *slicePass) Next(context.Context) (*datastore.Records, error) {
	if len(p.recs) == 0 {
		return nil, io.EOF
	}
	r := p.recs[0]
	p.recs = p.recs[1:]
	return r, nil
}
func (p *slicePass) Close() error               { return nil }
func (p *slicePass) Stats() datastore.PassStats { return datastore.PassStats{} }

func TestEachBatchAndKeyIndex(t *testing.T) {
	var a, b datastore.Records
	for i := 0; i < 7; i++ {
		a.Append(float64(i), []uint64{uint64(i % 3), 5}, nil)
	}
	b.Append(7, []uint64{9}, nil)
	var sizes []int
	total := 0.0
	err := tasks.EachBatch(context.Background(), sliceInput{&a, &b}, 3, func(r *datastore.Records, lo, hi int) error {
		sizes = append(sizes, hi-lo)
		for i := lo; i < hi; i++ {
			total += r.Labels[i]
		}
		return nil
	})
	if err != nil || len(sizes) != 4 || sizes[2] != 1 || total != 28 {
		t.Fatalf("batches %v total %v err %v", sizes, total, err)
	}
	for _, x := range []*tasks.KeyIndex{tasks.NewKeyIndex(10), tasks.NewKeyIndex(1 << 30)} {
		x.Put(3, 0)
		x.Put(7, 1)
		if p, ok := x.Get(7); !ok || p != 1 {
			t.Fatal("get")
		}
		x.Reset()
		if _, ok := x.Get(7); ok {
			t.Fatal("reset kept a key")
		}
	}
}

// FuzzParseJob: any bytes give a task or an error naming the file, never a
// panic.
func FuzzParseJob(f *testing.F) {
	f.Add([]byte(base))
	f.Add([]byte("repeat = 2\n" + base))
	f.Add([]byte("[[stage]]\nworkers = \"auto\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, task, err := tasks.ParseJob("f.toml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if task.Name == "" || len(task.Stages) == 0 {
			t.Fatalf("invalid task accepted: %+v", task)
		}
	})
}

func TestModelChecksum(t *testing.T) {
	m := &tasks.Model{Kind: "lr", Task: "t1", Tables: []tasks.ModelTable{
		{Spec: kvstore.TableSpec{Name: "w", Size: 4, Width: 1}, Vals: []float64{1, 2, 3, 4}},
		{Spec: kvstore.TableSpec{Name: "s", Size: 1 << 40, Width: 2}, Keys: []uint64{7, 1 << 39}, Vals: []float64{1, 2, 3, 4}},
	}}
	var b bytes.Buffer
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	good := b.Bytes()
	if got, err := tasks.ReadModel(bytes.NewReader(good)); err != nil || got.Tables[1].Keys[1] != 1<<39 || got.Tables[0].Vals[3] != 4 {
		t.Fatalf("round trip: %v %+v", err, got)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"truncated in the values", good[:len(good)-40], "truncated"},
		{"trailer cut", good[:len(good)-3], "trailer"},
		{"extra data", append(append([]byte(nil), good...), 'x'), "trailer"},
		{"flipped bit", flip(good, len(good)-30), "checksum mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tasks.ReadModel(bytes.NewReader(tc.data))
			if !errors.Is(err, tasks.ErrModelFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// A format-1 file (no trailer) still loads.
	v1 := bytes.Replace(good[:len(good)-4-len("\nflexps-end\n")], []byte("flexps-model/2"), []byte("flexps-model/1"), 1)
	if _, err := tasks.ReadModel(bytes.NewReader(v1)); err != nil {
		t.Fatalf("format 1: %v", err)
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x10
	return c
}

// FuzzReadModel: any input is a model or an ErrModelFormat error, never a
// panic or a huge allocation.
func FuzzReadModel(f *testing.F) {
	m := &tasks.Model{Kind: "lr", Tables: []tasks.ModelTable{{Spec: kvstore.TableSpec{Name: "w", Size: 3, Width: 1}, Vals: []float64{1, 2, 3}}}}
	var b bytes.Buffer
	m.WriteTo(&b)
	f.Add(b.Bytes())
	f.Add([]byte(`{"magic":"flexps-model/2","tables":[{"spec":{"name":"w","size":1099511627776,"width":1},"count":1099511627776,"dense":true}]}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := tasks.ReadModel(bytes.NewReader(data))
		if err != nil && !errors.Is(err, tasks.ErrModelFormat) {
			t.Fatalf("error without ErrModelFormat: %v", err)
		}
	})
}

// liveRuntime answers Live only; the rest of Runtime is not used.
type liveRuntime struct {
	tasks.Runtime
	live []int
}

func (r liveRuntime) Live() []int { return r.live }

func TestShareAmongTheLiving(t *testing.T) {
	for _, c := range []struct {
		name       string
		rank, n    int
		live       []int
		idx, count int
	}{
		{"everyone lives", 2, 4, nil, 2, 4},
		{"a slave died", 3, 6, []int{0, 1, 3, 5}, 2, 4},
		{"first survivor", 0, 6, []int{0, 1, 3, 5}, 0, 4},
		{"counted out itself", 4, 6, []int{0, 1, 3, 5}, 4, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			info := &tasks.Info{Rank: c.rank, Workers: c.n, Runtime: liveRuntime{live: c.live}}
			if idx, count := info.Share(); idx != c.idx || count != c.count {
				t.Fatalf("Share() = %d, %d; want %d, %d", idx, count, c.idx, c.count)
			}
		})
	}
	// The survivors' shares of [0, size) cover every key once.
	const size = 1000
	live := []int{0, 2, 3, 7}
	covered := make([]int, size)
	for _, r := range live {
		idx, n := (&tasks.Info{Rank: r, Workers: 8, Runtime: liveRuntime{live: live}}).Share()
		for k := size * idx / n; k < size*(idx+1)/n; k++ {
			covered[k]++
		}
	}
	for k, n := range covered {
		if n != 1 {
			t.Fatalf("key %d covered %d times", k, n)
		}
	}
}

// releasingInput's passes record which records were released.
type releasingInput struct {
	recs     []*datastore.Records
	released map[*datastore.Records]bool
}

func (s *releasingInput) Pass(context.Context) (datastore.Pass, error) {
	return &releasingPass{slicePass{recs: s.recs}, s}, nil
}

type releasingPass struct {
	slicePass
	in *releasingInput
}

func (p *releasingPass) Release(r *datastore.Records) {
	if p.in.released[r] {
		panic("released twice")
	}
	p.in.released[r] = true
}

// TestEachBatchAhead: each batch comes with the one after it, in
// EachBatch's order, across records (empty ones skipped) and batch sizes;
// records are released once, only after fn saw their last batch.
func TestEachBatchAhead(t *testing.T) {
	mk := func(n, from int) *datastore.Records {
		var r datastore.Records
		for i := range n {
			r.Append(float64(from+i), []uint64{uint64(i)}, nil)
		}
		return &r
	}
	for _, c := range []struct {
		name  string
		sizes []int
		batch int
	}{
		{"none", nil, 3},
		{"empty records", []int{0, 0}, 3},
		{"one batch", []int{2}, 3},
		{"across records", []int{7, 0, 1, 5}, 3},
		{"batch of one", []int{3, 2}, 1},
		{"batch larger than records", []int{2, 2, 2}, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := &releasingInput{released: map[*datastore.Records]bool{}}
			from := 0
			for _, n := range c.sizes {
				in.recs = append(in.recs, mk(n, from))
				from += n
			}
			var want []tasks.Batch
			err := tasks.EachBatch(context.Background(), sliceInput(in.recs), c.batch, func(r *datastore.Records, lo, hi int) error {
				want = append(want, tasks.Batch{R: r, Lo: lo, Hi: hi})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			i := 0
			err = tasks.EachBatchAhead(context.Background(), in, c.batch, func(cur, next tasks.Batch) error {
				if i >= len(want) || cur != want[i] {
					t.Fatalf("call %d: batch %+v, want %+v", i, cur, want[min(i, len(want)-1)])
				}
				if i+1 < len(want) && next != want[i+1] || i+1 == len(want) && next != (tasks.Batch{}) {
					t.Fatalf("call %d: next %+v", i, next)
				}
				if in.released[cur.R] || next.R != nil && in.released[next.R] {
					t.Fatalf("call %d: records released while in use", i)
				}
				i++
				return nil
			})
			if err != nil || i != len(want) {
				t.Fatalf("%d calls of %d, err %v", i, len(want), err)
			}
			for _, r := range in.recs {
				if !in.released[r] {
					t.Fatalf("records of %d not released", r.Len())
				}
			}
		})
	}
	if err := tasks.EachBatchAhead(context.Background(), sliceInput(nil), 0, nil); err == nil {
		t.Fatal("batch 0 accepted")
	}
}

// TestModelFill: a dense table written through Fill, a window at a time,
// is the same file, byte for byte, as the same table written from Vals,
// for widths that split the window unevenly and sizes across several
// windows; Fill is asked for every key once, in order; its error stops
// the write and names the table and keys.
func TestModelFill(t *testing.T) {
	for _, tc := range []struct {
		size  uint64
		width int
	}{{1, 1}, {65536, 1}, {65537, 1}, {150000, 3}, {40000, 5}, {3, 70000}} {
		t.Run(fmt.Sprintf("%dx%d", tc.size, tc.width), func(t *testing.T) {
			vals := make([]float64, int(tc.size)*tc.width)
			for i := range vals {
				vals[i] = float64(i)*0.5 - 7
			}
			spec := kvstore.TableSpec{Name: "w", Size: tc.size, Width: tc.width}
			bias := tasks.ModelTable{Spec: kvstore.TableSpec{Name: "b", Size: 1}, Vals: []float64{2}}
			whole := &tasks.Model{Kind: "lr", Task: "t", Tables: []tasks.ModelTable{{Spec: spec, Vals: vals}, bias}}
			next := uint64(0)
			streamed := &tasks.Model{Kind: "lr", Task: "t", Tables: []tasks.ModelTable{{Spec: spec, Fill: func(first uint64, out []float64) error {
				if first != next || len(out)%tc.width != 0 || len(out) == 0 {
					return fmt.Errorf("asked for %d values from key %d, want from key %d in whole keys", len(out), first, next)
				}
				next += uint64(len(out) / tc.width)
				copy(out, vals[int(first)*tc.width:])
				return nil
			}}, bias}}
			var a, b bytes.Buffer
			if _, err := whole.WriteTo(&a); err != nil {
				t.Fatal(err)
			}
			if _, err := streamed.WriteTo(&b); err != nil {
				t.Fatal(err)
			}
			if next != tc.size {
				t.Fatalf("Fill covered %d keys of %d", next, tc.size)
			}
			if !bytes.Equal(a.Bytes(), b.Bytes()) {
				t.Fatalf("streamed file differs (%d vs %d bytes)", b.Len(), a.Len())
			}
		})
	}
	t.Run("error", func(t *testing.T) {
		boom := errors.New("shard gone")
		m := &tasks.Model{Kind: "lr", Tables: []tasks.ModelTable{{Spec: kvstore.TableSpec{Name: "w", Size: 200000}, Fill: func(first uint64, out []float64) error {
			if first > 0 {
				return boom
			}
			return nil
		}}}}
		_, err := m.WriteTo(io.Discard)
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), `model table "w" keys 65536..131071`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("fill with values", func(t *testing.T) {
		m := &tasks.Model{Tables: []tasks.ModelTable{{Spec: kvstore.TableSpec{Name: "w", Size: 1}, Vals: []float64{1}, Fill: func(uint64, []float64) error { return nil }}}}
		if _, err := m.WriteTo(io.Discard); err == nil {
			t.Fatal("a table with both Fill and Vals was written")
		}
	})
}

// A number written as a string in [stage.params] (epochs = "3") was
// accepted: Check and CheckInt parsed the string. It is refused at
// submission now, naming the file, the line, the stage and the key;
// params that are strings (table names) stay strings.
func TestParseJobRefusesANumberWrittenAsAString(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		want         string // "" = valid
		line         int
	}{
		{"integer", "epochs = 3\nlr = 0.5\n", "", 0},
		{"string table name", "table = \"w\"\nepochs = 3\n", "", 0},
		{"quoted integer", "lr = 0.5\nepochs = \"3\"\n", `param "epochs": want an integer, got the string "3"`, 13},
		{"quoted float", "lr = \"0.5\"\n", `param "lr": want a number, got the string "0.5"`, 12},
		{"word", "epochs = \"three\"\n", `param "epochs": want an integer, got the string "three"`, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := base + "[stage.params]\n" + tc.params
			_, _, err := tasks.ParseJob("job.toml", []byte(src))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", tc.want)
			}
			for _, w := range []string{tc.want, fmt.Sprintf("job.toml line %d:", tc.line), "stage 0 (s)"} {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// Register refuses what no stage could run: a nil function was taken, and
// every worker of a stage running it failed with "stage function
// panicked: invalid memory address"; an empty name no stage can name.
func TestRegisterRefusesProgrammingErrors(t *testing.T) {
	noop := func(*tasks.Info) error { return nil }
	for _, c := range []struct {
		name, fn string
		f        tasks.StageFunc
		want     string
	}{
		{"nil function", "t.register-nil", nil, `tasks: Register("t.register-nil", nil): the stage function is nil`},
		{"empty name", "", noop, "tasks: Register of a stage function with an empty name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.HasPrefix(msg, c.want) {
					t.Fatalf("panic %v, want %q", r, c.want)
				}
				if _, ok := tasks.Lookup(c.fn); ok {
					t.Fatalf("%q registered anyway", c.fn)
				}
			}()
			tasks.Register(c.fn, c.f)
		})
	}
}

// A param that JSON cannot carry is refused naming the stage and the
// param; Submit failed with the bare "json: unsupported type: func()".
func TestParamsThatDoNotTravelAsJSON(t *testing.T) {
	for _, c := range []struct {
		name  string
		value any
		want  string
	}{
		{"function", func() {}, `stage 0 (fit): params: param "p": json: unsupported type: func(): a task travels as JSON`},
		{"channel", make(chan int), `param "p": json: unsupported type: chan int`},
		{"float32 NaN", float32(math.NaN()), `param "p": json: unsupported value: NaN`},
		{"map with a function", map[string]any{"f": func() {}}, `param "p": json: unsupported type: func()`},
	} {
		t.Run(c.name, func(t *testing.T) {
			task := tasks.NewTask("j").SetStages(tasks.Stage{Name: "fit", Func: "t.noop", Params: tasks.Params{"p": c.value}})
			task.Normalize()
			err := task.Validate()
			if !errors.Is(err, tasks.ErrInvalid) || err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate: %v, want an invalid task saying %q", err, c.want)
			}
		})
	}
	ok := tasks.NewTask("j").SetStages(tasks.Stage{Func: "t.noop", Params: tasks.Params{"s": []int{1}, "m": map[string]float64{"a": 1}, "b": true}})
	ok.Normalize()
	if err := ok.Validate(); err != nil {
		t.Fatalf("JSON-able params refused: %v", err)
	}
}

// A bad table spec is a validation error like the others: it wraps
// ErrInvalid (as the doc says every one does) and kvstore.ErrBadSpec; it
// wrapped only the latter.
func TestBadTableSpecIsErrInvalid(t *testing.T) {
	for _, c := range []struct {
		name string
		spec kvstore.TableSpec
		want string
	}{
		{"size 0", kvstore.TableSpec{Name: "w"}, `invalid task: task "j": invalid table spec: table "w": size: must be > 0`},
		{"dtype", kvstore.TableSpec{Name: "w", Size: 2, DType: "float16"}, `table "w": dtype: must be float32 or float64, got "float16"`},
		{"no name", kvstore.TableSpec{Size: 2}, "invalid task: task \"j\": invalid table spec: a table needs a name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			task := tasks.NewTask("j").AddTable(c.spec).SetStages(tasks.Stage{Func: "t.noop"})
			task.Normalize()
			err := task.Validate()
			if !errors.Is(err, tasks.ErrInvalid) || !errors.Is(err, kvstore.ErrBadSpec) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate: %v, want ErrInvalid and ErrBadSpec saying %q", err, c.want)
			}
		})
	}
}
