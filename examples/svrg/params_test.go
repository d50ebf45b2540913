package svrg_test

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/jobcheck"
)

// Every numeric param of svrg.sgd written outside its range is refused at
// submission, naming the job file, the param's line, the stage and the
// range, and a 0 where 0 means something (min_steps: no minimum; l2: none)
// is taken: the contract the README's job reference states for every
// built-in function. lr = 0 is refused: only leaving lr out chooses it
// from the data.
func TestSVRGParamRangesRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		param string
		want  string // "" : valid
	}{
		{"epochs_inner = 2", ""},
		{"epochs_inner = 0", "stage 1 (sgd): params: svrg: epochs_inner must be >= 1, got 0"},
		{"min_steps = 0", ""},
		{"min_steps = -1", "svrg: min_steps must be >= 0, got -1"},
		{"batch = 0", "svrg: batch must be >= 1, got 0"},
		{"lr = 0", "stage 1 (sgd): params: svrg: lr must be > 0, got 0"},
		{"lr = -1", "svrg: lr must be > 0, got -1"},
		{"l2 = 0", ""},
		{"l2 = -1", "svrg: l2 must be >= 0, got -1"},
	} {
		t.Run(tc.param, func(t *testing.T) {
			src := strings.NewReplacer("STORAGE", "", "FULLKIND", "", "INNERKIND", "", "FULL", "", "INNER", tc.param).Replace(setupJob)
			line := 0
			if tc.want != "" {
				line = 24
			}
			jobcheck.Expect(t, src, tc.want, line)
		})
	}
}
