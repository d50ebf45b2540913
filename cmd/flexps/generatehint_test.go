package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/tasks"
)

// flexps submit of a job whose missing input has a generate table: the
// master's refusal ("no such file") said nothing of the table, which only
// flexps run follows. The refusal now carries a hint naming the input.
func TestGenerateHint(t *testing.T) {
	jf := &tasks.JobFile{Inputs: map[string]tasks.InputFile{
		"train":   {Path: "/data/train.libsvm", Generate: &synth.Spec{Rows: 10}},
		"test":    {Path: "/data/test.libsvm"},
		"gen":     {Path: "/data/gen.tsv", Format: "ratings", Generate: &synth.Spec{Kind: "ratings", Rows: 10, TestPath: "/data/gen.test"}},
		"gentest": {Path: "/data/gen.test", Format: "ratings"},
		// On HDFS: the table writes local files only, and so does flexps
		// gen (the hint said "flexps gen --out hdfs://...", which gen
		// refuses; flexps run gave none).
		"hdfs":     {Path: "hdfs://nn:8020/d/train.libsvm", Generate: &synth.Spec{Rows: 10}},
		"hdfsgen":  {Path: "hdfs://nn:8020/d/r.tsv", Format: "ratings", Generate: &synth.Spec{Kind: "ratings", Rows: 10, TestPath: "hdfs://nn:8020/d/r.test"}},
		"hdfstest": {Path: "hdfs://nn:8020/d/r.test", Format: "ratings"},
	}}
	for _, tc := range []struct {
		name string
		err  error
		want string // "" : no hint
	}{
		{"the generated input is missing", errors.New(`task "x": input "train": datastore: input stat /data/train.libsvm: no such file or directory`),
			`(input "train" has a [input.train.generate] table, which only flexps run follows: write the file first, e.g. with flexps gen libsvm --out /data/train.libsvm)`},
		{"an input without a generate table is missing", errors.New(`task "x": input "test": datastore: input stat /data/test.libsvm: no such file or directory`), ""},
		// The shipped configs write their test file through the train
		// input's test_path: the master refused the missing test input
		// first, and with no hint.
		{"a generated test_path is missing", errors.New(`task "x": input "gentest": datastore: input stat /data/gen.test: no such file or directory`),
			`(the file of input "gentest" is the test_path of [input.gen.generate], which only flexps run follows: write the files first, e.g. with flexps gen ratings --out /data/gen.tsv --test-out /data/gen.test)`},
		{"a generated train file with a test_path is missing", errors.New(`task "x": input "gen": datastore: input stat /data/gen.tsv: no such file or directory`),
			`(input "gen" has a [input.gen.generate] table, which only flexps run follows: write the files first, e.g. with flexps gen ratings --out /data/gen.tsv --test-out /data/gen.test)`},
		{"a generated input on HDFS is missing", errors.New(`task "x": input "hdfs": datastore: hdfs stat hdfs://nn:8020/d/train.libsvm: file does not exist`),
			`(input "hdfs" has a [input.hdfs.generate] table, which writes local files only: write the file first, e.g. with flexps gen libsvm --out train.libsvm, then copy it to hdfs://nn:8020/d/train.libsvm)`},
		{"a generated test_path on HDFS is missing", errors.New(`task "x": input "hdfstest": datastore: hdfs stat hdfs://nn:8020/d/r.test: file does not exist`),
			`(the file of input "hdfstest" is the test_path of [input.hdfsgen.generate], which writes local files only: write the files first, e.g. with flexps gen ratings --out r.tsv --test-out r.test, then copy them to hdfs://nn:8020/d/r.tsv and hdfs://nn:8020/d/r.test)`},
		{"another refusal", errors.New(`task "x": stage 0: no stage function registered as "t.nope"`), ""},
		{"no error", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := generateHint(jf, tc.err)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("hint %q, want %q", got, tc.want)
			}
		})
	}
}
