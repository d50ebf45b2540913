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
	}{
		{"", 0, "abcde", 0},
		{"", 2, "de", 3},
		{"d", 2, "bc", 1}, // the next page
		{"b", 2, "a", 0},
		{"a", 2, "", 0},
		{"zz", 0, "abcde", 0}, // an unknown (pruned) cursor: from the newest
		{"", 9, "abcde", 0},
	} {
		page, omitted := statusPage(all, tc.before, tc.limit)
		if ids(page) != tc.want || omitted != tc.omitted {
			t.Errorf("before %q limit %d: %q (%d omitted), want %q (%d)", tc.before, tc.limit, ids(page), omitted, tc.want, tc.omitted)
		}
	}
}
