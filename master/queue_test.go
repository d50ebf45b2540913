package master

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/scheduler"
)

func TestFitErrorNamesWhatIsMissing(t *testing.T) {
	cluster := []scheduler.Slave{
		{ID: "s1", Total: 2, Free: 2, Alive: true},
		{ID: "s2", Total: 2, Free: 2, Alive: true},
		{ID: "s3", Total: 2, Free: 0, Alive: false},
	}
	cases := []struct {
		name string
		req  scheduler.Request
		want []string
	}{
		{"too many workers", scheduler.Request{Stage: 1, Workers: 9},
			[]string{"asks for 9 workers", "4 worker slots on 2 live slaves", "lower workers or start more slaves"}},
		{"an unknown slave", scheduler.Request{Stage: 2, Workers: 2, Pinned: []string{"nobody"}},
			[]string{"asks for 2 workers", "its slaves [nobody] have 0 worker slots", "no slave is called [nobody]", "[s1 s2 s3]"}},
		{"a dead slave", scheduler.Request{Stage: 1, Workers: 3, Pinned: []string{"s1", "s3"}},
			[]string{"its slaves [s1 s3] have 2 worker slots", "[s3] not alive"}},
		{"too few slots on max_slaves slaves", scheduler.Request{Stage: 1, Workers: 3, MaxSlaves: 1},
			[]string{"asks for 3 workers on at most 1 slave (max_slaves)", "the 1 largest of its live slaves have 2 worker slots", "raise max_slaves"}},
		{"too few slots on max_slaves of its slaves", scheduler.Request{Stage: 1, Workers: 4, MaxSlaves: 1, Pinned: []string{"s1", "s2"}},
			[]string{"4 workers on at most 1 slave (max_slaves)", "have 2 worker slots", "raise max_slaves"}},
		{"too many workers for every slave", scheduler.Request{Stage: 1, Workers: 5, MaxSlaves: 1},
			[]string{"4 worker slots on 2 live slaves", "start more slaves"}},
		{"one slave too small", scheduler.Request{Stage: 1, Workers: 3, OneSlave: true},
			[]string{"3 workers on one slave", "the largest live slave has 2 worker slots", "start a slave with more slots (flexps run: --slots)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if scheduler.Fits(c.req, cluster) {
				t.Fatalf("%+v fits", c.req)
			}
			msg := fitError(c.req, cluster).Error()
			if !strings.HasPrefix(msg, "asks for ") {
				t.Errorf("error %q names its stage: its callers do (a task's error read 'stage 0 (sgd): stage 0 asks for ...')", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}
