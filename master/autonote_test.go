package master

import "testing"

// An auto stage's note said "1 workers" for its first trial (every auto
// stage has one), and "1 workers finished the stage during the trial".
func TestTrialNote(t *testing.T) {
	for _, tc := range []struct {
		w        int
		rate     float64
		finished bool
		want     string
	}{
		{1, 1234.4, false, "1 worker 1234 samples/s"},
		{2, 99.6, false, "2 workers 100 samples/s"},
		{1, 0, true, "1 worker finished the stage during the trial"},
		{4, 0, true, "4 workers finished the stage during the trial"},
	} {
		if got := trialNote(tc.w, tc.rate, tc.finished); got != tc.want {
			t.Errorf("trialNote(%d, %v, %v) = %q, want %q", tc.w, tc.rate, tc.finished, got, tc.want)
		}
	}
}
