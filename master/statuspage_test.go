package master

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/status"
)

func TestStatusPage(t *testing.T) {
	var all []status.Task
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		all = append(all, status.Task{ID: id})
	}
	ids := func(ts []status.Task) string {
		var s []string
		for _, t := range ts {
			s = append(s, t.ID)
		}
		return strings.Join(s, "")
	}
	for _, tc := range []struct {
		before  string
		limit   int
		want    string
		omitted int
		err     string
	}{
		{"", 0, "abcde", 0, ""},
		{"", 2, "de", 3, ""},
		{"d", 2, "bc", 1, ""}, // the next page
		{"b", 2, "a", 0, ""},
		{"a", 2, "", 0, ""},
		{"zz", 0, "", 0, `no task "zz"`}, // unknown or pruned: an error, not the newest page
		{"zz", 2, "", 0, `no task "zz"`},
		{"", 9, "abcde", 0, ""},
	} {
		page, omitted, err := statusPage(all, tc.before, tc.limit)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("before %q limit %d: error %v, want %q", tc.before, tc.limit, err, tc.err)
		}
		if ids(page) != tc.want || omitted != tc.omitted {
			t.Errorf("before %q limit %d: %q (%d omitted), want %q (%d)", tc.before, tc.limit, ids(page), omitted, tc.want, tc.omitted)
		}
	}
}
