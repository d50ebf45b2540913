package kge_test

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/jobcheck"
)

// Every numeric param of kge.complex written outside its range is refused
// at submission, naming the job file, the param's line, the stage and the
// range; a 0 where 0 means something (no l2, no decay, seed 0) is taken.
// Before, dim = 0 was taken for the unset dim (half the tables' width)
// without a word.
func TestKGEParamRangesRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		param string
		want  string // "" : valid
	}{
		{"dim = 4", ""},
		{"dim = 0", "stage 0 (train): params: kge: dim must be >= 1 (unset: half the tables' width), got 0"},
		{"dim = -4", "kge: dim must be >= 1 (unset: half the tables' width), got -4"},
		{"epochs = 0", "stage 0 (train): params: kge: epochs must be >= 1, got 0"},
		{"batch = 0", "kge: batch must be >= 1, got 0"},
		{"neg = 0", "kge: neg must be >= 1, got 0"},
		{"lr = 0", "kge: lr must be > 0, got 0"},
		{"l2 = 0", ""},
		{"l2 = -1", "kge: l2 must be >= 0, got -1"},
		{"decay = 0", ""},
		{"decay = -1", "kge: decay must be >= 0, got -1"},
		{"seed = 0", ""},
	} {
		t.Run(tc.param, func(t *testing.T) {
			src := strings.NewReplacer("ENTS", "", "RELS", "", "KIND", "", "dim = 4", tc.param).Replace(setupJob)
			line := 0
			if tc.want != "" {
				line = 21
			}
			jobcheck.Expect(t, src, tc.want, line)
		})
	}
}
