package mf_test

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/jobcheck"
)

// Every numeric param of mf.sgd written outside its range is refused at
// submission, naming the job file, the param's line, the stage and the
// range; a 0 where 0 means something (no l2, no decay) is taken. Before,
// rank = 0 was taken for the unset rank (the tables' width) without a
// word.
func TestMFParamRangesRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		param string
		want  string // "" : valid
	}{
		{"rank = 4", ""},
		{"rank = 0", "stage 0 (sgd): params: mf: rank must be >= 1 (unset: the factor tables' width), got 0"},
		{"rank = -4", "mf: rank must be >= 1 (unset: the factor tables' width), got -4"},
		{"epochs = 0", "stage 0 (sgd): params: mf: epochs must be >= 1, got 0"},
		{"epochs = -1", "mf: epochs must be >= 1, got -1"},
		{"batch = 0", "mf: batch must be >= 1, got 0"},
		{"lr = 0", "mf: lr must be a finite number > 0, got 0"},
		{"lr = -0.1", "mf: lr must be a finite number > 0, got -0.1"},
		{"l2 = 0", ""},
		{"l2 = -1", "mf: l2 must be >= 0, got -1"},
		{"l2_bias = 0", ""},
		{"l2_bias = -1", "mf: l2_bias must be >= 0, got -1"},
		{"decay = 0", ""},
		{"decay = -0.5", "mf: decay must be >= 0, got -0.5"},
	} {
		t.Run(tc.param, func(t *testing.T) {
			src := strings.NewReplacer("USERS", "", "ITEMS", "", "KIND", "", "rank = 4", tc.param).Replace(setupJob)
			line := 0
			if tc.want != "" {
				line = 21
			}
			jobcheck.Expect(t, src, tc.want, line)
		})
	}
}
