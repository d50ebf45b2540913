package ownership

import "testing"

func kinds(acts []Action) []ActionKind {
	var out []ActionKind
	for _, a := range acts {
		out = append(out, a.Kind)
	}
	return out
}

func TestStepBasics(t *testing.T) {
	home := func(k uint64) NodeID { return NodeID(k % 3) }
	tests := []struct {
		name string
		run  func(t *testing.T, n []*Node)
	}{
		{"localize from home: two messages", func(t *testing.T, n []*Node) {
			acts := n[1].StartLocalize([]uint64{0})
			if len(acts) != 1 || acts[0].Kind != Send || acts[0].To != 0 || !n[1].Incoming(0) {
				t.Fatalf("requester: %+v", acts)
			}
			acts = n[0].Step(acts[0].Msg)
			if len(acts) != 1 || acts[0].Kind != Extract || acts[0].To != 1 || n[0].Owns(0) {
				t.Fatalf("home: %+v", acts)
			}
			acts = n[1].Step(Msg{Kind: Values, Keys: []uint64{0}, Vals: [][]float64{{5}}, Versions: acts[0].Msg.Versions})
			if got := kinds(acts); len(got) != 2 || got[0] != Install || got[1] != LocalizeDone || !n[1].Owns(0) {
				t.Fatalf("install: %v", got)
			}
		}},
		{"localize from guest owner: transfer via home", func(t *testing.T, n []*Node) {
			move(t, n, 0, 1)
			acts := n[2].StartLocalize([]uint64{0})
			acts = n[0].Step(acts[0].Msg)
			if len(acts) != 1 || acts[0].Kind != Send || acts[0].To != 1 || acts[0].Msg.Kind != Transfer {
				t.Fatalf("home: %+v", acts)
			}
			acts = n[1].Step(acts[0].Msg)
			if len(acts) != 1 || acts[0].Kind != Extract || acts[0].To != 2 || n[1].Owns(0) {
				t.Fatalf("old owner: %+v", acts)
			}
		}},
		{"stale request forwarded to home, then to owner", func(t *testing.T, n []*Node) {
			move(t, n, 0, 1)
			acts := n[2].Step(Msg{Kind: Get, Keys: []uint64{0}, Positions: []int{0}})
			if acts[0].Kind != Send || acts[0].To != 0 || acts[1].Spawned != 1 {
				t.Fatalf("stale node: %+v", acts)
			}
			acts = n[0].Step(acts[0].Msg)
			if acts[0].Kind != Send || acts[0].To != 1 {
				t.Fatalf("home: %+v", acts)
			}
		}},
		{"request queued while incoming", func(t *testing.T, n []*Node) {
			n[1].StartLocalize([]uint64{0})
			acts := n[1].Step(Msg{Kind: Add, Keys: []uint64{0}, Positions: []int{0}, Vals: [][]float64{{1}}})
			if len(acts) != 1 || acts[0].Kind != Apply || len(acts[0].Msg.Keys) != 0 || acts[0].Spawned != 1 || n[1].Stats.Queued != 1 {
				t.Fatalf("queue: %+v", acts)
			}
			acts = n[1].Step(Msg{Kind: Values, Keys: []uint64{0}, Vals: [][]float64{{0}}, Versions: []uint64{1}})
			if got := kinds(acts); len(got) != 3 || got[2] != Apply {
				t.Fatalf("replay: %v", got)
			}
		}},
		{"transfer of an incoming key waits for its values", func(t *testing.T, n []*Node) {
			n[1].StartLocalize([]uint64{0})
			n[0].Step(Msg{Kind: Localize, Keys: []uint64{0}, Node: 1})
			acts := n[0].Step(Msg{Kind: Localize, Keys: []uint64{0}, Node: 2})
			acts = n[1].Step(acts[0].Msg) // Transfer overtakes nothing: queued
			if len(acts) != 0 {
				t.Fatalf("transfer ran early: %+v", acts)
			}
			acts = n[1].Step(Msg{Kind: Values, Keys: []uint64{0}, Vals: [][]float64{{0}}, Versions: []uint64{1}})
			if got := kinds(acts); len(got) != 3 || got[2] != Extract || acts[2].To != 2 {
				t.Fatalf("forwarded transfer: %+v", acts)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := []*Node{NewNode(0, home), NewNode(1, home), NewNode(2, home)}
			tc.run(t, n)
		})
	}
}

func move(t *testing.T, n []*Node, k uint64, to NodeID) {
	t.Helper()
	acts := n[to].StartLocalize([]uint64{k})
	acts = n[0].Step(acts[0].Msg)
	n[to].Step(Msg{Kind: Values, Keys: []uint64{k}, Vals: [][]float64{{0}}, Versions: acts[0].Msg.Versions})
}
