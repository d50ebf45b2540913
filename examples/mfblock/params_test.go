package mfblock_test

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/jobcheck"
)

// Every numeric param of mf.blocked written outside its range is refused
// at submission, naming the job file, the param's line, the stage and the
// range; a 0 where 0 means something (no l2, no decay) is taken. Before,
// rank = 0 was taken for the unset rank (the tables' width) without a
// word, and a negative rank was refused only as a width mismatch.
func TestBlockedParamRangesRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		param string
		want  string // "" : valid
	}{
		{"rank = 4", ""},
		{"rank = 0", "stage 0 (b): params: mf.blocked: rank must be >= 1 (unset: the factor tables' width), got 0"},
		{"rank = -4", "mf.blocked: rank must be >= 1 (unset: the factor tables' width), got -4"},
		{"epochs = 0", "stage 0 (b): params: mf.blocked: epochs must be >= 1, got 0"},
		{"batch = 0", "mf.blocked: batch must be >= 1, got 0"},
		{"batch = -10", "mf.blocked: batch must be >= 1, got -10"},
		{"lr = 0", "mf.blocked: lr must be a positive number, got 0"},
		{"l2 = 0", ""},
		{"l2 = -1", "mf.blocked: l2 must be >= 0, got -1"},
		{"decay = 0", ""},
		{"decay = -1", "mf.blocked: decay must be >= 0, got -1"},
		{"mean = false", ""},
		{`mean = "yes"`, `mf.blocked: param "mean": want true or false, got yes`},
		{`localize = "no"`, `mf.blocked: param "localize": want true or false, got no`},
	} {
		t.Run(tc.param, func(t *testing.T) {
			src := strings.NewReplacer("USERS", "", "KIND", "", "rank = 4", tc.param).Replace(setupJob)
			line := 0
			if tc.want != "" {
				line = 20
			}
			jobcheck.Expect(t, src, tc.want, line)
		})
	}
}
