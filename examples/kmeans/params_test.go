package kmeans_test

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/jobcheck"
)

// Every numeric param of kmeans.init and kmeans.lloyd written outside its
// range is refused at submission, naming the job file, the param's line,
// the stage and the range; a 0 where 0 means something (tol 0: every
// iteration runs; seed 0) is taken. Before, k = 0 was taken for the unset
// k (the centers table's size) without a word.
func TestKMeansParamRangesRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		param string
		want  string // "" : valid
	}{
		{"k = 3", ""},
		{"k = 0", "stage 0 (init): params: kmeans: k must be >= 1 (unset: the centers table's size), got 0"},
		{"k = -3", "kmeans: k must be >= 1 (unset: the centers table's size), got -3"},
		{"iterations = 0", "stage 0 (init): params: kmeans: iterations must be >= 1, got 0"},
		{"sample = 0", "kmeans: sample must be >= 1, got 0"},
		{"restarts = 0", "kmeans: restarts must be in [1, 1000], got 0"},
		{"tol = 0", ""},
		{"tol = -1e-6", "kmeans: tol must be >= 0, got -1e-06"},
		{"seed = 0", ""},
	} {
		t.Run(tc.param, func(t *testing.T) {
			// Both stages read the same params; the first names the line.
			src := strings.NewReplacer("STORAGE", "", "INITKIND", "", "LLOYDKIND", "", "k = 3", tc.param).Replace(setupJob)
			line := 0
			if tc.want != "" {
				line = 14
			}
			jobcheck.Expect(t, src, tc.want, line)
		})
	}
}
