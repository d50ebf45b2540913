package tasks

import (
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
