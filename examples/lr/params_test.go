package lr_test

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/jobcheck"
)

// Every numeric param of lr.sgd written outside its range is refused at
// submission, naming the job file, the param's line, the stage and the
// range, and a 0 where 0 turns something off (l2, decay) is taken: the
// contract the README's job reference states for every built-in
// function.
func TestSGDParamRangesRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		param string
		want  string // "" : valid
	}{
		{"epochs = 1", ""},
		{"epochs = 0", "stage 1 (sgd): params: lr: epochs must be >= 1, got 0"},
		{"epochs = -2", "lr: epochs must be >= 1, got -2"},
		{"batch = 0", "stage 1 (sgd): params: lr: batch must be >= 1, got 0"},
		{"lr = 0", "lr: lr must be > 0, got 0"},
		{"lr = -0.5", "lr: lr must be > 0, got -0.5"},
		{"l2 = 0", ""},
		{"l2 = -1e-4", "lr: l2 must be >= 0, got -0.0001"},
		{"decay = 0", ""},
		{"decay = -1", "lr: decay must be >= 0, got -1"},
	} {
		t.Run(tc.param, func(t *testing.T) {
			src := strings.NewReplacer("TABLE", "", "STAGE", "", "PARAMS", tc.param).Replace(setupJob)
			line := 0
			if tc.want != "" {
				line = 16
			}
			jobcheck.Expect(t, src, tc.want, line)
		})
	}
}
