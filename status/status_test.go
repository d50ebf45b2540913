package status

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// A task that has not started or finished says nothing about when
// (encoding/json's omitempty never omits a time.Time: it wrote
// "0001-01-01T00:00:00Z" into /api/status and every status answer).
func TestUnsetTimesAreOmitted(t *testing.T) {
	b, err := json.Marshal(Task{ID: "t1", State: Queued, Submitted: time.Unix(1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); strings.Contains(s, `"started"`) || strings.Contains(s, `"finished"`) || !strings.Contains(s, `"submitted"`) {
		t.Fatalf("%s", s)
	}
	var back Task
	if err := json.Unmarshal(b, &back); err != nil || !back.Started.IsZero() || !back.Finished.IsZero() {
		t.Fatalf("%+v %v", back, err)
	}
}

// A failed or cancelled task's error says its state once (it read "task
// failed: task t1 (lr) failed: ..."), and still wraps ErrTaskFailed.
func TestTaskErrorSaysItsStateOnce(t *testing.T) {
	for _, tc := range []struct {
		state, want string
	}{
		{Failed, "task t1 (lr) failed: slave s2 died"},
		{Cancelled, "task t1 (lr) cancelled: slave s2 died"},
	} {
		err := Task{ID: "t1", Name: "lr", State: tc.state, Reason: "slave s2 died"}.Err()
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrTaskFailed) {
			t.Errorf("%s: %v, want %q wrapping ErrTaskFailed", tc.state, err, tc.want)
		}
	}
	if err := (Task{State: Done}).Err(); err != nil {
		t.Errorf("done: %v", err)
	}
}
