package membership

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// step is one input at a time (seconds after t0) and the actions it must
// return, written compactly: "admit a/i1 e1 #1", "dead a/i1 e2 #1",
// "refuse a/i1 first", "left a/i1 e3 #1", joined by "; ". A "view" step
// checks the view instead: "e3 a/i2#3,b/j1#2".
type step struct {
	op   string // join, beat, check, leave, tick, view
	id   string
	inst string
	at   float64
	want string
}

func show(acts []Action) string {
	var out []string
	for _, a := range acts {
		s := fmt.Sprintf("%s/%s", a.Slave, a.Instance)
		switch a.Kind {
		case Admit:
			s = fmt.Sprintf("admit %s e%d #%d", s, a.Epoch, a.Incarnation)
			if a.Rejoined {
				s += " rejoined"
			}
		case DeclareDead:
			s = fmt.Sprintf("dead %s e%d #%d", s, a.Epoch, a.Incarnation)
		case Left:
			s = fmt.Sprintf("left %s e%d #%d", s, a.Epoch, a.Incarnation)
		case Refuse:
			s = "refuse " + s
			if a.First {
				s += " first"
			}
		case SuspectSelf:
			s = fmt.Sprintf("suspect self e%d silent %v", a.Epoch, a.Silent)
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

func showView(v View) string {
	var ms []string
	for _, m := range v.Members {
		ms = append(ms, fmt.Sprintf("%s/%s#%d", m.ID, m.Instance, m.Incarnation))
	}
	return fmt.Sprintf("e%d %s", v.Epoch, strings.Join(ms, ","))
}

func run(t *testing.T, m *Machine, steps []step) {
	t.Helper()
	for i, s := range steps {
		var got string
		switch s.op {
		case "join":
			got = show(m.Join(s.id, s.inst, at(s.at)))
		case "beat":
			got = show(m.Heartbeat(s.id, s.inst, at(s.at)))
		case "check":
			got = show(m.Check(s.id, s.inst))
		case "leave":
			got = show(m.Leave(s.id, s.inst))
		case "tick":
			got = show(m.Tick(at(s.at)))
		case "view":
			got = strings.TrimSpace(showView(m.View()))
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
		if got != s.want {
			t.Fatalf("step %d %s(%s/%s) at %vs = %q, want %q", i, s.op, s.id, s.inst, s.at, got, s.want)
		}
	}
}

func TestMachine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"beats keep members alive", []step{
			{"join", "a", "i1", 0, "admit a/i1 e1 #1"}, {"join", "b", "j1", 0, "admit b/j1 e2 #2"},
			{"beat", "a", "i1", 2, ""}, {"beat", "b", "j1", 2, ""},
			{"tick", "", "", 4, ""},
			{"beat", "a", "i1", 4.5, ""}, {"beat", "b", "j1", 4.5, ""},
			{"tick", "", "", 7, ""},
			{"view", "", "", 0, "e2 a/i1#1,b/j1#2"},
		}},
		{"silence beyond the timeout kills once; exactly the timeout does not", []step{
			{"join", "a", "i1", 0, "admit a/i1 e1 #1"}, {"join", "b", "j1", 0, "admit b/j1 e2 #2"},
			{"beat", "b", "j1", 1, ""},
			{"tick", "", "", 3, ""},
			{"tick", "", "", 3.001, "dead a/i1 e3 #1"},
			{"tick", "", "", 3.5, ""},
			{"tick", "", "", 10, "dead b/j1 e4 #2"},
			{"view", "", "", 0, "e4"},
		}},
		{"deaths in id order, one epoch each", []step{
			{"join", "c", "k", 0, "admit c/k e1 #1"}, {"join", "a", "i", 0, "admit a/i e2 #2"}, {"join", "b", "j", 0, "admit b/j e3 #3"},
			// Everyone silent at once: the detector suspects itself first
			// and gives each one more timeout.
			{"tick", "", "", 5, "suspect self e3 silent 5s"},
			{"tick", "", "", 7, ""},
			{"tick", "", "", 8.5, "dead a/i e4 #2; dead b/j e5 #3; dead c/k e6 #1"},
		}},
		{"one member heard after a suspicion: the next silence of all is suspected again", []step{
			{"join", "a", "i", 0, "admit a/i e1 #1"}, {"join", "b", "j", 0, "admit b/j e2 #2"},
			{"tick", "", "", 4, "suspect self e2 silent 4s"},
			{"beat", "a", "i", 5, ""},
			{"tick", "", "", 7.5, "dead b/j e3 #2"}, // a was heard: only b's silence counts
			{"join", "c", "k", 8, "admit c/k e4 #4"},
			{"tick", "", "", 12, "suspect self e4 silent 7s"}, // the longest silence (a, heard at 5)
		}},
		{"a lone member's silence is its own", []step{
			{"join", "a", "i", 0, "admit a/i e1 #1"},
			{"tick", "", "", 4, "dead a/i e2 #1"},
		}},
		{"a dead incarnation is fenced and must rejoin fresh", []step{
			{"join", "a", "i1", 0, "admit a/i1 e1 #1"},
			{"tick", "", "", 4, "dead a/i1 e2 #1"},
			{"beat", "a", "i1", 4.1, "refuse a/i1 first"},
			{"beat", "a", "i1", 4.2, "refuse a/i1"},
			{"check", "a", "i1", 0, "refuse a/i1"},
			{"join", "a", "i1", 4.3, "refuse a/i1"},
			{"join", "a", "i2", 5, "admit a/i2 e3 #3 rejoined"},
			{"beat", "a", "i2", 6, ""},
			{"check", "a", "i2", 0, ""},
			{"beat", "a", "i1", 6.5, "refuse a/i1"},
			{"tick", "", "", 8, ""},
			{"view", "", "", 0, "e3 a/i2#3"},
			{"tick", "", "", 9.5, "dead a/i2 e4 #3"},
		}},
		{"a fresh instance may come back by heartbeat (master restarted or slave fenced)", []step{
			{"beat", "x", "n1", 0, "admit x/n1 e1 #1"},
			{"tick", "", "", 3.5, "dead x/n1 e2 #1"},
			{"beat", "x", "n2", 4, "admit x/n2 e3 #3 rejoined"},
		}},
		{"two processes with one id: the second is refused", []step{
			{"join", "a", "i1", 0, "admit a/i1 e1 #1"},
			{"join", "a", "i2", 1, "refuse a/i2 first"},
			// It asks again while the id may be freed: logged once.
			{"beat", "a", "i2", 1, "refuse a/i2"},
			{"join", "a", "i3", 1, "refuse a/i3 first"},
			{"check", "a", "i2", 0, "refuse a/i2 first"},
			{"view", "", "", 0, "e1 a/i1#1"},
		}},
		{"a retried join is the same admission", []step{
			{"join", "a", "i1", 0, "admit a/i1 e1 #1"},
			{"join", "a", "i1", 2, "admit a/i1 e1 #1"},
			{"tick", "", "", 4.5, ""},
			{"tick", "", "", 5.5, "dead a/i1 e2 #1"},
		}},
		{"leave is not death, and a left instance stays out", []step{
			{"join", "a", "i1", 0, "admit a/i1 e1 #1"}, {"join", "b", "j1", 0, "admit b/j1 e2 #2"},
			{"leave", "a", "i1", 1, "left a/i1 e3 #1"},
			{"leave", "a", "i1", 1, "refuse a/i1 first"},
			{"beat", "a", "i1", 1, "refuse a/i1"},
			{"tick", "", "", 10, "dead b/j1 e4 #2"},
			{"join", "a", "i3", 11, "admit a/i3 e5 #5 rejoined"},
			{"leave", "b", "j1", 11, "refuse b/j1 first"},
			{"view", "", "", 0, "e5 a/i3#5"},
		}},
		{"a late beat does not move last seen back", []step{
			{"join", "a", "i", 0, "admit a/i e1 #1"},
			{"beat", "a", "i", 2, ""},
			{"beat", "a", "i", 1, ""},
			{"tick", "", "", 5, ""},
			{"tick", "", "", 5.5, "dead a/i e2 #1"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { run(t, New(3*time.Second), tc.steps) })
	}
}

func TestRefusalsNameTheSlave(t *testing.T) {
	m := New(time.Second)
	m.Join("s1", "i1", at(0))
	m.Tick(at(2))
	acts := m.Heartbeat("s1", "i1", at(2))
	if len(acts) != 1 || !strings.Contains(acts[0].Reason, "s1") || !strings.Contains(acts[0].Reason, "declared dead") {
		t.Fatalf("refusal %+v does not say which slave was declared dead", acts)
	}
	if acts := m.Check("s2", "zz"); len(acts) != 1 || !strings.Contains(acts[0].Reason, "s2") {
		t.Fatalf("refusal of an unknown slave %+v", acts)
	}
}

func TestViewFenced(t *testing.T) {
	v := View{Epoch: 5, Members: []Member{{ID: "a", Instance: "i", Incarnation: 2}, {ID: "b", Instance: "j", Incarnation: 5}}}
	for _, tc := range []struct {
		inc  uint64
		want bool
	}{
		{0, false}, // no incarnation: in-process callers
		{2, false}, {5, false},
		{1, true}, {3, true}, {4, true}, // admitted at or before epoch 5, not live
		{6, false}, // newer than the view: not known yet
	} {
		if got := v.Fenced(tc.inc); got != tc.want {
			t.Errorf("Fenced(%d) = %v, want %v", tc.inc, got, tc.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	if got := New(0).Timeout(); got != DefaultTimeout || DefaultTimeout != 900*time.Millisecond {
		t.Fatalf("timeout %v, want %v (3 x 300ms)", got, DefaultTimeout)
	}
	m := New(time.Second)
	if _, ok := m.LastSeen("a"); ok {
		t.Fatal("unknown member has a last sighting")
	}
	m.Join("a", "i", at(0))
	m.Heartbeat("a", "i", at(0.5))
	if got, ok := m.LastSeen("a"); !ok || !got.Equal(at(0.5)) {
		t.Fatalf("LastSeen = %v, %v", got, ok)
	}
	if mem, ok := m.Live("a"); !ok || mem.Incarnation != 1 || mem.Instance != "i" {
		t.Fatalf("Live = %+v, %v", mem, ok)
	}
	if ActionKind(99).String() == "" || Refuse.String() != "refuse" {
		t.Fatal("action kind names")
	}
}
