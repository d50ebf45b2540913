package scheduler

import (
	"strings"
	"testing"
)

func slaves(free ...int) []Slave {
	out := make([]Slave, len(free))
	for i, f := range free {
		out[i] = Slave{ID: string(rune('a' + i)), Free: f, Total: 10, Alive: true}
	}
	return out
}

func TestPlace(t *testing.T) {
	dead := slaves(10, 10)
	dead[0].Alive = false
	for _, tc := range []struct {
		name   string
		r      Request
		slaves []Slave
		want   []Assignment
		ok     bool
	}{
		{"spreads evenly", Request{Workers: 6}, slaves(10, 10, 10), []Assignment{{"a", 2}, {"b", 2}, {"c", 2}}, true},
		{"water-fills most free first", Request{Workers: 6}, slaves(2, 8, 4), []Assignment{{"b", 5}, {"c", 1}}, true},
		{"uses every free slot", Request{Workers: 14}, slaves(2, 8, 4), []Assignment{{"b", 8}, {"c", 4}, {"a", 2}}, true},
		{"too big for free slots", Request{Workers: 15}, slaves(2, 8, 4), nil, false},
		{"max slaves", Request{Workers: 12, MaxSlaves: 2}, slaves(2, 8, 4), []Assignment{{"b", 8}, {"c", 4}}, true},
		{"max slaves too few", Request{Workers: 13, MaxSlaves: 2}, slaves(2, 8, 4), nil, false},
		{"one slave picks most free", Request{Workers: 3, OneSlave: true}, slaves(3, 8, 4), []Assignment{{"b", 3}}, true},
		{"one slave does not split", Request{Workers: 9, OneSlave: true}, slaves(8, 8, 8), nil, false},
		{"pinned", Request{Workers: 4, Pinned: []string{"a", "c"}}, slaves(2, 8, 4), []Assignment{{"c", 3}, {"a", 1}}, true},
		{"pinned too small", Request{Workers: 7, Pinned: []string{"a", "c"}}, slaves(2, 8, 4), nil, false},
		{"dead slave skipped", Request{Workers: 3}, dead, []Assignment{{"b", 3}}, true},
		{"ties by id", Request{Workers: 1}, slaves(5, 5), []Assignment{{"a", 1}}, true},
		{"zero workers", Request{Workers: 0}, slaves(5), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]Slave(nil), tc.slaves...)
			got, ok := Place(tc.r, tc.slaves)
			eq(t, ok, tc.ok, "ok")
			eq(t, got, tc.want, "assignments")
			eq(t, tc.slaves, before, "Place must not modify slaves")
		})
	}
}

func TestFits(t *testing.T) {
	busy := slaves(0, 0) // Total 10 each, nothing free
	check(t, Fits(Request{Workers: 20}, busy), "larger than free but within total must queue, not fail")
	check(t, !Fits(Request{Workers: 21}, busy), `want !Fits(Request{Workers: 21}, busy)`)
	check(t, !Fits(Request{Workers: 11, OneSlave: true}, busy), `want !Fits(Request{Workers: 11, OneSlave: true}, busy)`)
	check(t, Fits(Request{Workers: 10, OneSlave: true}, busy), "want Fits(Request{Workers: 10, OneSlave: true}, busy)")
	check(t, !Fits(Request{Workers: 11, Pinned: []string{"a"}}, busy), `want !Fits(Request{Workers: 11, Pinned: []string{"a"}}, busy)`)
	check(t, !Fits(Request{Workers: 11, MaxSlaves: 1}, busy), `want !Fits(Request{Workers: 11, MaxSlaves: 1}, busy)`)
	busy[1].Alive = false
	check(t, !Fits(Request{Workers: 11}, busy), "dead slaves do not count")
	_, ok := Place(Request{Workers: 20}, busy)
	check(t, !ok, "Place on busy slaves")
}

func TestNew(t *testing.T) {
	for _, n := range Names() {
		p, err := New(n, Options{})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, p.Name(), n, "name")
	}
	_, err := New("fifo", Options{})
	if err == nil || !strings.Contains(err.Error(), "sequential, greedy, prioritized") {
		t.Errorf("unknown policy error = %v, want the valid names", err)
	}
	_, err = New(Prioritized, Options{AgingPerSecond: -1})
	check(t, err != nil, "negative option accepted")
	_, err = New(Prioritized, Options{ReserveAfter: -1})
	check(t, err != nil, "negative option accepted")
}
