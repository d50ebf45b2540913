package tasks_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexps/flexps/tasks"
)

// A table, stage, [local] or input count written as 0 (or below) where
// the Go API reads 0 as "the default" is refused, naming the file, the
// line, the table, stage or input and the range: it was taken for the
// default without a word ([[table]] width = 0 took 1, chunk_size = 0
// 1024, replicas = 0 the cluster's default; a stage's max_slaves = 0
// spread it over any number of slaves, chunk_size = 0 took 4096,
// max_workers = 0 all slots, auto_trial_seconds = 0 two seconds; [local]
// slots = 0 two slots; an input's max_bad_fraction = 0 allowed 1% of
// malformed lines, block_size = 0 took the cluster's). A key left out
// keeps its default, and a 0 that means something (staleness under ssp,
// speculation, priority, repeat and [checkpoint] keep, whose 0 the README
// documents) is taken.
func TestParseJobRefusesZeroCountsThatMeantTheDefault(t *testing.T) {
	auto := func(extra string) string {
		return "!" + strings.Replace(base, "workers = 2", "workers = \"auto\"\n"+extra, 1)
	}
	table := func(extra string) string {
		return "!" + strings.Replace(base, "size = 10", "size = 10\n"+extra, 1)
	}
	input := func(extra string) string {
		return "!" + strings.Replace(base, `path = "x.libsvm"`, "path = \"x\"\n"+extra, 1)
	}
	for _, tc := range []struct {
		name, edit string // appended to base, or replacing it when it starts with "!"
		want       string // "" : valid
		line       int
	}{
		{"max_slaves unset", "", "", 0},
		{"max_slaves 1", "max_slaves = 1\n", "", 0},
		{"max_slaves 0", "max_slaves = 0\n", "stage 0 (s): max_slaves: must be >= 1 (unset: any number), got 0", 11},
		{"max_slaves negative", "max_slaves = -1\n", "max_slaves: must be >= 1 (unset: any number), got -1", 11},
		{"chunk_size local", "worker_kind = \"local\"\nchunk_size = 64\n", "", 0},
		{"chunk_size 0 local", "worker_kind = \"local\"\nchunk_size = 0\n", "stage 0 (s): chunk_size: must be >= 1 (unset: 4096), got 0", 12},
		{"chunk_size 0 ps", "chunk_size = 0\n", "chunk_size: must be >= 1 (unset: 4096), got 0", 11},
		{"chunk_size negative", "worker_kind = \"hogwild\"\nchunk_size = -8\n", "chunk_size: must be >= 1 (unset: 4096), got -8", 12},
		{"max_workers auto", auto("max_workers = 3"), "", 0},
		{"max_workers 0", auto("max_workers = 0"), "stage 0 (s): max_workers: must be >= 1 (unset: all slots), got 0", 11},
		{"max_workers 0 without auto", "max_workers = 0\n", "max_workers: must be >= 1 (unset: all slots), got 0", 11},
		{"auto_trial_seconds auto", auto("auto_trial_seconds = 0.5"), "", 0},
		{"auto_trial_seconds 0", auto("auto_trial_seconds = 0"), "stage 0 (s): auto_trial_seconds: must be > 0 (unset: 2), got 0", 11},
		{"auto_trial_seconds 0.0", auto("auto_trial_seconds = 0.0"), "auto_trial_seconds: must be > 0 (unset: 2), got 0", 11},
		{"auto_trial_seconds negative", auto("auto_trial_seconds = -1.5"), "auto_trial_seconds: must be > 0 (unset: 2), got -1.5", 11},
		{"local slots 1", "[local]\nslaves = 1\nslots = 1\n", "", 0},
		{"local slaves 0", "[local]\nslaves = 0\n", "[local] slaves: must be in [1, 256] (unset: 2;", 12},
		{"local slots 0", "[local]\nslots = 0\n", "[local] slots: must be in [1, 1024] (unset: 2, or the --config file's [slave] slots), got 0", 12},
		{"max_bad_fraction", input("on_error = \"skip\"\nmax_bad_fraction = 0.05"), "", 0},
		{"max_bad_fraction 1", input("on_error = \"skip\"\nmax_bad_fraction = 1"), "", 0},
		{"max_bad_fraction 0", input("on_error = \"skip\"\nmax_bad_fraction = 0"), `input "train": max_bad_fraction must be in (0, 1] (unset: 0.01; to allow no malformed line, on_error = "fail"), got 0`, 8},
		{"max_bad_fraction 0 without skip", input("max_bad_fraction = 0.0"), "max_bad_fraction must be in (0, 1]", 7},
		{"max_bad_fraction negative", input("on_error = \"skip\"\nmax_bad_fraction = -0.5"), "max_bad_fraction must be in (0, 1] (unset: 0.01; to allow no malformed line, on_error = \"fail\"), got -0.5", 8},
		{"block_size", input("block_size = 4096"), "", 0},
		{"block_size 0", input("block_size = 0"), `input "train": block_size must be > 0 bytes (unset: the cluster's), got 0`, 7},
		{"block_size 0 with a unit", input(`block_size = "0KiB"`), "block_size must be > 0 bytes (unset: the cluster's), got 0", 7},
		{"table width", table("width = 2"), "", 0},
		{"table width 0", table("width = 0"), `table "w": width: must be in [1, 65535] (unset: 1), got 0`, 5},
		{"table chunk_size", table("chunk_size = 64"), "", 0},
		{"table chunk_size 0", table("chunk_size = 0"), `table "w": chunk_size: must be >= 1 (unset: 1024), got 0`, 5},
		{"table replicas", table("replicas = 1"), "", 0},
		{"table replicas 0", table("replicas = 0"), `table "w": replicas: must be in [1, 8] (unset: the cluster's default), got 0`, 5},
		{"second table width 0", "!" + strings.Replace(base, "[input.train]", "[[table]]\nname = \"v\"\nsize = 3\nwidth = 0\n[input.train]", 1), `table "v": width: must be in [1, 65535]`, 8},
		{"workers 0", "!" + strings.Replace(base, "workers = 2", "workers = 0", 1), "workers", 10},
		{"staleness 0 under ssp", "consistency = \"ssp\"\nstaleness = 0\n", "", 0},
		{"speculation 0", "consistency = \"sparse_ssp\"\nstaleness = 1\nspeculation = 0\n", "", 0},
		{"cache_size 0 without a cache", "cache_size = 0\n", "", 0},
		{"priority 0", "!priority = 0\n" + base, "", 0},
		{"repeat 0", "!repeat = 0\n" + base, "", 0},
		{"checkpoint keep 0", "[checkpoint]\ndir = \"ck\"\nkeep = 0\n", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := base + tc.edit
			if strings.HasPrefix(tc.edit, "!") {
				src = tc.edit[1:]
			}
			_, _, err := tasks.ParseJob("job.toml", []byte(src))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("no error, want one containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q lacks %q", err, tc.want)
			}
			var ce *tasks.ConfigError
			if err != nil && (!errors.As(err, &ce) || ce.File != "job.toml" || ce.Line != tc.line) {
				t.Fatalf("error %q: want it in job.toml on line %d", err, tc.line)
			}
		})
	}
}

// LocalSection.Size reads a key left out as 0, the caller's default.
func TestLocalSectionSize(t *testing.T) {
	jf, _, err := tasks.ParseJob("job.toml", []byte(base+"[local]\nslots = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if slaves, slots := jf.Local.Size(); slaves != 0 || slots != 3 {
		t.Fatalf("Size() = %d, %d, want 0, 3", slaves, slots)
	}
}
