package monitor

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/status"
)

// The page lists a running task's slots, and those it lost on slaves that
// died or left apart from them.
func TestPageShowsLostSlots(t *testing.T) {
	for _, tc := range []struct {
		name       string
		slots      map[string]int
		lost       map[string]int
		want, lack string
	}{
		{"none lost", map[string]int{"s1": 2, "s3": 1}, nil, "slots s1:2, s3:1</p>", "lost"},
		{"one lost", map[string]int{"s1": 2}, map[string]int{"s2": 1}, `slots s1:2 · <span class="lost">lost s2:1 (slave died or left)</span>`, "s2:1,"},
		{"all lost", nil, map[string]int{"s2": 2}, `slots none · <span class="lost">lost s2:2`, "slots s2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			renderPage(rec, status.Cluster{Policy: "greedy", Tasks: []status.Task{
				{ID: "t1", Name: "lr", State: status.Running, Stages: 1, Slots: tc.slots, Lost: tc.lost},
			}}, time.Now())
			if html := rec.Body.String(); !strings.Contains(html, tc.want) || strings.Contains(html, tc.lack) {
				t.Fatalf("page lacks %q or has %q:\n%s", tc.want, tc.lack, html)
			}
		})
	}
}

// A slave that died or left shows no slots in use, no load and how it
// went: it showed "2 − 1 free" and half a load bar, "dead" when it left.
func TestPageShowsGoneSlaves(t *testing.T) {
	for _, tc := range []struct {
		name       string
		slave      status.Slave
		want, lack string
	}{
		{"alive", status.Slave{ID: "s1", Slots: 2, Free: 1, Alive: true}, "<td>2 − 1 free</td>", "<td>–</td>"},
		{"dead", status.Slave{ID: "s2", Slots: 2, Free: 1}, "<td>–</td><td></td>\n  <td>dead</td>", "free"},
		{"left", status.Slave{ID: "s3", Slots: 2, Left: true}, "<td>–</td><td></td>\n  <td>left</td>", "free"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			renderPage(rec, status.Cluster{Policy: "greedy", Slaves: []status.Slave{tc.slave}}, time.Now())
			html := rec.Body.String()
			row := html[strings.Index(html, "<tbody>"):strings.Index(html, "</tbody>")]
			if !strings.Contains(row, tc.want) || strings.Contains(row, tc.lack) {
				t.Fatalf("slave row lacks %q or has %q:\n%s", tc.want, tc.lack, row)
			}
		})
	}
}

// A running or queued task's stage counts from 1, as flexps status's
// "1/2" does (the page said "stage 0 of 1"), and a queued stage that
// waits for slaves says why (the page said nothing).
func TestPageShowsStageAndWaiting(t *testing.T) {
	for _, tc := range []struct {
		name       string
		task       status.Task
		want, lack string
	}{
		{"first of one", status.Task{ID: "t1", State: status.Running, Stage: 0, Stages: 1, StageName: "sgd"}, "stage 1 of 1 (sgd)", "stage 0"},
		{"second of two", status.Task{ID: "t1", State: status.Running, Stage: 1, Stages: 2}, "stage 2 of 2", "stage 1 of"},
		{"waiting", status.Task{ID: "t1", State: status.Queued, Stages: 1, Waiting: "stage 0 asks for 4 workers but the cluster has 2 worker slots"},
			`<p class="reason">waiting: stage 0 asks for 4 workers but the cluster has 2 worker slots</p>`, "stage 0 of"},
		{"not waiting", status.Task{ID: "t1", State: status.Queued, Stages: 1}, "stage 1 of 1", "waiting:"},
		{"queued for busy slots", status.Task{ID: "t1", State: status.Queued, Stages: 1, Queued: "stage 0 asks for 2 workers; 1 slot free now; t0 (lr) holds 1"},
			`<p class="reason">queued: stage 0 asks for 2 workers; 1 slot free now; t0 (lr) holds 1</p>`, "waiting:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			renderPage(rec, status.Cluster{Policy: "greedy", Tasks: []status.Task{tc.task}}, time.Now())
			if html := rec.Body.String(); !strings.Contains(html, tc.want) || strings.Contains(html, tc.lack) {
				t.Fatalf("page lacks %q or has %q:\n%s", tc.want, tc.lack, html)
			}
		})
	}
}
