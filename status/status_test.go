package status

import (
	"encoding/json"
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
