package tasks

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestCheckpointSchedule(t *testing.T) {
	cases := []struct {
		every  string
		epochs int
		period time.Duration
		err    string
	}{
		{"", 0, 5 * time.Minute, ""},
		{"30s", 0, 30 * time.Second, ""},
		{"1 epoch", 1, 0, ""},
		{"3 epochs", 3, 0, ""},
		{" 2 epochs ", 2, 0, ""},
		{"0 epochs", 0, 0, "integer >= 1"},
		{"x epochs", 0, 0, "integer >= 1"},
		{"2 weeks", 0, 0, "want a duration"},
		{"often", 0, 0, "want a duration"},
		{"100ms", 0, 0, "at least 1s"},
	}
	for _, c := range cases {
		e, p, err := Checkpoint{Every: c.every, Dir: "d"}.Schedule()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.every, err, c.err)
			}
			continue
		}
		if err != nil || e != c.epochs || p != c.period {
			t.Errorf("%q: %d, %v, %v; want %d, %v", c.every, e, p, err, c.epochs, c.period)
		}
	}
}

func TestCheckpointInJobFile(t *testing.T) {
	job := `name = "j"
[[table]]
name = "w"
size = 10
[[stage]]
func = "%s"
[checkpoint]
%s
`
	// t.noop is registered by this package's external tests.
	_, task, err := ParseJob("j.toml", []byte(strings.ReplaceAll(strings.Replace(job, "%s", "t.noop", 1), "%s", `every = "2 epochs"
dir = "hdfs://nn/ck"
keep = 3`)))
	if err != nil {
		t.Fatal(err)
	}
	if c := task.Checkpoint; c.Dir != "hdfs://nn/ck" || c.Every != "2 epochs" || c.KeepOrDefault() != 3 {
		t.Fatalf("checkpoint %+v", c)
	}
	for _, bad := range []struct{ body, want string }{
		{`every = "soon"` + "\n" + `dir = "d"`, "checkpoint every"},
		{`every = "1 epoch"`, "need a dir"},
		{`dir = "d"` + "\n" + `keep = -1`, "keep"},
		{`dirr = "d"`, "dirr"},
	} {
		_, _, err := ParseJob("j.toml", []byte(strings.ReplaceAll(strings.Replace(job, "%s", "t.noop", 1), "%s", bad.body)))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: err %v, want %q", bad.body, err, bad.want)
		}
	}
}

// A checkpoint dir that is the job's output, or that an input lists, is
// refused when the job is read, naming the line. Until now the output's
// submission made the dir and then refused the output as "is a
// directory"; an input of the dir read the checkpoints as records on the
// next run or the resume ("label \"Y?\x00...\" is not a number").
func TestCheckpointDirNotOutputNorInput(t *testing.T) {
	job := `name = "j"
output = "%s"
[[table]]
name = "w"
size = 10
[input.train]
path = "%s"
[[stage]]
func = "t.noop"
[checkpoint]
dir = "%s"
`
	for _, c := range []struct {
		output, input, dir string
		want               string // "" for accepted
	}{
		{"out/m.model", "data/train.libsvm", "out/ck", ""},
		{"out/ck/m.model", "data", "out/ck", ""},
		{"out/ck", "data", "out/ck", "j.toml line 2: invalid task: task \"j\": output out/ck is the checkpoint dir"},
		{"out/ck/", "data", "./out/ck", "output out/ck/ is the checkpoint dir"},
		{"hdfs://nn:8020/ck", "hdfs://nn:8020/data", "hdfs://nn:8020/ck/", "is the checkpoint dir"},
		{"hdfs://other:8020/ck", "hdfs://nn:8020/data", "hdfs://nn:8020/ck", ""},
		{"m.model", "data/m2", "data/m2", "j.toml line 7: invalid task: task \"j\": input \"train\" (data/m2) would read the checkpoints"},
		{"m.model", "hdfs://nn:8020/data/m2/", "hdfs://nn:8020/data//m2", "input \"train\" (hdfs://nn:8020/data/m2/) would read the checkpoints"},
		{"m.model", "hdfs://nn:8020/data/m2/*", "hdfs://nn:8020/data/m2", "would read the checkpoints"},
		{"m.model", "data/m2/ckpt-*", "data/m2", "would read the checkpoints"},
		{"m.model", "data/m2/*.libsvm", "data/m2", ""},
		{"m.model", "data/m2/train.libsvm", "data/m2", ""},
		{"m.model", "data/m2", "data/m2/ck", ""},
	} {
		src := fmt.Sprintf(job, c.output, c.input, c.dir)
		_, _, err := ParseJob("j.toml", []byte(src))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("output %s, input %s, dir %s: %v", c.output, c.input, c.dir, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("output %s, input %s, dir %s: err %v, want %q", c.output, c.input, c.dir, err, c.want)
		}
	}
}
