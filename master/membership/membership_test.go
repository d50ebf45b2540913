package membership

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// step is one call on the Detector at a time (seconds after t0) and what it
// must return: want is a bool for Join/Beat, a comma-separated sorted list
// for Tick/Alive/Dead, and ignored for Leave.
type step struct {
	op   string // join, beat, leave, tick, alive, dead
	id   string
	at   float64
	want string
}

func run(t *testing.T, d *Detector, steps []step) {
	t.Helper()
	for i, s := range steps {
		var got string
		switch s.op {
		case "join":
			got = fmt.Sprint(d.Join(s.id, at(s.at)))
		case "beat":
			got = fmt.Sprint(d.Beat(s.id, at(s.at)))
		case "leave":
			d.Leave(s.id)
			got = s.want
		case "tick":
			got = strings.Join(d.Tick(at(s.at)), ",")
		case "alive":
			got = strings.Join(d.Alive(), ",")
		case "dead":
			got = strings.Join(d.Dead(), ",")
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
		if got != s.want {
			t.Fatalf("step %d %s(%s) at %vs = %q, want %q", i, s.op, s.id, s.at, got, s.want)
		}
	}
}

func TestDetector(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"beats keep members alive", []step{
			{"join", "a", 0, "false"}, {"join", "b", 0, "false"},
			{"beat", "a", 2, "true"}, {"beat", "b", 2, "true"},
			{"tick", "", 4, ""},
			{"beat", "a", 4.5, "true"}, {"beat", "b", 4.5, "true"},
			{"tick", "", 7, ""},
			{"alive", "", 0, "a,b"},
		}},
		{"silence beyond the timeout kills; exactly the timeout does not", []step{
			{"join", "a", 0, "false"}, {"join", "b", 0, "false"},
			{"beat", "b", 1, "true"},
			{"tick", "", 3, ""}, // a silent exactly 3s
			{"tick", "", 3.001, "a"},
			{"tick", "", 3.5, ""}, // reported once
			{"tick", "", 10, "b"},
			{"alive", "", 0, ""}, {"dead", "", 0, "a,b"},
		}},
		{"deaths are sorted", []step{
			{"join", "c", 0, "false"}, {"join", "a", 0, "false"}, {"join", "b", 0, "false"},
			{"tick", "", 5, "a,b,c"},
		}},
		{"dead member must rejoin", []step{
			{"join", "a", 0, "false"},
			{"tick", "", 4, "a"},
			{"beat", "a", 4.1, "false"},
			{"join", "a", 5, "true"},
			{"beat", "a", 6, "true"},
			{"tick", "", 8, ""},
			{"alive", "", 0, "a"}, {"dead", "", 0, ""},
			{"tick", "", 9.5, "a"},
		}},
		{"unknown members are refused", []step{
			{"beat", "x", 0, "false"},
			{"alive", "", 0, ""},
		}},
		{"leave is not death", []step{
			{"join", "a", 0, "false"}, {"join", "b", 0, "false"},
			{"leave", "a", 1, ""},
			{"beat", "a", 1, "false"},
			{"tick", "", 10, "b"},
			{"join", "a", 11, "false"},
			{"leave", "b", 11, ""},
			{"dead", "", 0, ""}, {"alive", "", 0, "a"},
		}},
		{"rejoin while alive (restart before timeout)", []step{
			{"join", "a", 0, "false"},
			{"join", "a", 1, "true"},
			{"tick", "", 3.5, ""},
			{"tick", "", 4.5, "a"},
		}},
		{"late beat does not move last seen back", []step{
			{"join", "a", 0, "false"},
			{"beat", "a", 2, "true"},
			{"beat", "a", 1, "true"},
			{"tick", "", 5, ""},
			{"tick", "", 5.5, "a"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { run(t, NewDetector(3*time.Second), tc.steps) })
	}
}

func TestLastSeen(t *testing.T) {
	d := NewDetector(time.Second)
	if _, ok := d.LastSeen("a"); ok {
		t.Fatal("unknown member has a last sighting")
	}
	d.Join("a", at(0))
	d.Beat("a", at(0.5))
	d.Tick(at(2))
	if got, ok := d.LastSeen("a"); !ok || !got.Equal(at(0.5)) {
		t.Fatalf("LastSeen = %v, %v; want %v for a dead member", got, ok, at(0.5))
	}
	d.Leave("a")
	if _, ok := d.LastSeen("a"); ok {
		t.Fatal("left member still seen")
	}
}

func TestDefaultTimeout(t *testing.T) {
	if got := NewDetector(0).Timeout(); got != DefaultTimeout {
		t.Fatalf("timeout %v, want %v", got, DefaultTimeout)
	}
}
