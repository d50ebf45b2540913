package membership

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// model is the sequential specification the Machine is checked against:
// which instance of each id is live and when it was last heard from, which
// instances were ever retired, and the epoch.
type model struct {
	epoch   uint64
	deaf    bool
	live    map[string]modelMember
	retired map[[2]string]bool
	// suspect: a tick found every member (two or more) silent and gave
	// each one more timeout; cleared when a live member is heard.
	suspect bool
}

type modelMember struct {
	instance string
	inc      uint64
	last     time.Time
}

// TestMachineMatchesModel drives the Machine with random joins, beats,
// checks, leaves and ticks over a few ids and instances, and checks after
// every input:
//   - every change of membership increments the epoch by exactly one, and
//     nothing else changes it (so epochs strictly increase);
//   - a retired (dead or left) instance is never admitted again;
//   - a live member heard from within the timeout is never declared dead,
//     and one silent for longer is, at the first tick while the detector
//     hears (not Deaf); after Hearing every member's silence counts anew;
//   - but when every member, two or more, is silent at one tick, the
//     first such tick since a member was last heard suspects the detector
//     (SuspectSelf) and gives each one more timeout;
//   - the view lists exactly the model's live members, and fences exactly
//     the incarnations that are no longer live.
func TestMachineMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		timeout := time.Duration(rapid.IntRange(1, 5).Draw(t, "timeout")) * 100 * time.Millisecond
		m := New(timeout)
		md := model{live: map[string]modelMember{}, retired: map[[2]string]bool{}}
		now := t0
		instances := 0
		fresh := func() string { instances++; return fmt.Sprintf("n%d", instances) }
		var seen []string // instances used so far, to replay old ones
		pick := func() string {
			if len(seen) == 0 || rapid.Bool().Draw(t, "freshInstance") {
				s := fresh()
				seen = append(seen, s)
				return s
			}
			return rapid.SampledFrom(seen).Draw(t, "oldInstance")
		}
		lastEpoch := uint64(0)
		for i := range rapid.IntRange(1, 60).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 400).Draw(t, "advance")) * time.Millisecond)
			id := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "id")
			var acts []Action
			op := rapid.IntRange(0, 6).Draw(t, "op")
			switch op {
			case 0, 1: // join (or a heartbeat of an unknown id)
				inst := pick()
				if op == 0 {
					acts = m.Join(id, inst, now)
				} else {
					acts = m.Heartbeat(id, inst, now)
				}
				cur, isLive := md.live[id]
				switch {
				case md.retired[[2]string{id, inst}]:
					want(t, i, acts, Refuse)
				case isLive && cur.instance == inst:
					if op == 0 {
						want(t, i, acts, Admit)
						if acts[0].Incarnation != cur.inc || acts[0].Epoch != md.epoch {
							t.Fatalf("step %d: retried join changed the incarnation: %+v", i, acts[0])
						}
					} else {
						want(t, i, acts)
					}
					if now.After(cur.last) {
						cur.last = now
						md.live[id] = cur
					}
					md.suspect = false
				case isLive:
					want(t, i, acts, Refuse)
				default:
					want(t, i, acts, Admit)
					md.epoch++
					md.live[id] = modelMember{instance: inst, inc: md.epoch, last: now}
					md.suspect = false
				}
			case 2: // the live instance beats
				if cur, ok := md.live[id]; ok {
					want(t, i, m.Heartbeat(id, cur.instance, now))
					if now.After(cur.last) {
						cur.last = now
						md.live[id] = cur
					}
					md.suspect = false
				}
			case 3: // check a message
				inst := pick()
				acts = m.Check(id, inst)
				if cur, ok := md.live[id]; ok && cur.instance == inst {
					want(t, i, acts)
				} else {
					want(t, i, acts, Refuse)
				}
			case 4: // leave
				inst := pick()
				if cur, ok := md.live[id]; ok && rapid.Bool().Draw(t, "leaveLive") {
					inst = cur.instance
				}
				acts = m.Leave(id, inst)
				if cur, ok := md.live[id]; ok && cur.instance == inst {
					want(t, i, acts, Left)
					md.epoch++
					delete(md.live, id)
					md.retired[[2]string{id, inst}] = true
				} else {
					want(t, i, acts, Refuse)
				}
			case 6: // the detector's link goes down, or comes back
				if rapid.Bool().Draw(t, "deaf") {
					m.Deaf()
					md.deaf = true
				} else {
					m.Hearing(now)
					if md.deaf {
						for mid, cur := range md.live {
							if now.After(cur.last) {
								cur.last = now
								md.live[mid] = cur
							}
						}
					}
					md.deaf = false
				}
			case 5: // tick
				acts = m.Tick(now)
				silent := 0
				for _, cur := range md.live {
					if now.Sub(cur.last) > timeout {
						silent++
					}
				}
				if !md.deaf && silent >= 2 && silent == len(md.live) && !md.suspect {
					want(t, i, acts, SuspectSelf)
					md.suspect = true
					for mid, cur := range md.live {
						cur.last = now
						md.live[mid] = cur
					}
					break
				}
				var kinds []ActionKind
				for _, mid := range []string{"a", "b", "c"} {
					cur, ok := md.live[mid]
					if !ok || md.deaf || now.Sub(cur.last) <= timeout {
						continue
					}
					kinds = append(kinds, DeclareDead)
					md.epoch++
					delete(md.live, mid)
					md.retired[[2]string{mid, cur.instance}] = true
				}
				want(t, i, acts, kinds...)
			}
			for _, a := range acts {
				if a.Kind == DeclareDead {
					if _, still := md.live[a.Slave]; still {
						t.Fatalf("step %d: %s declared dead but the model has it alive", i, a.Slave)
					}
				}
				if a.Kind == Admit && md.retired[[2]string{a.Slave, a.Instance}] {
					t.Fatalf("step %d: retired instance %s admitted", i, a.Instance)
				}
				if a.Kind != Refuse && a.Epoch < lastEpoch {
					t.Fatalf("step %d: epoch went back from %d to %d", i, lastEpoch, a.Epoch)
				}
				lastEpoch = max(lastEpoch, a.Epoch)
			}
			if m.Epoch() != md.epoch {
				t.Fatalf("step %d: epoch %d, model %d", i, m.Epoch(), md.epoch)
			}
			v := m.View()
			if len(v.Members) != len(md.live) {
				t.Fatalf("step %d: view %+v, model %+v", i, v, md.live)
			}
			for _, mem := range v.Members {
				cur := md.live[mem.ID]
				if cur.instance != mem.Instance || cur.inc != mem.Incarnation {
					t.Fatalf("step %d: view member %+v, model %+v", i, mem, cur)
				}
			}
			for inc := uint64(1); inc <= md.epoch; inc++ {
				isLive := false
				for _, cur := range md.live {
					isLive = isLive || cur.inc == inc
				}
				if v.Fenced(inc) == isLive {
					t.Fatalf("step %d: Fenced(%d) = %v with the incarnation live=%v", i, inc, v.Fenced(inc), isLive)
				}
			}
		}
	})
}

func want(t *rapid.T, step int, acts []Action, kinds ...ActionKind) {
	t.Helper()
	if len(acts) != len(kinds) {
		t.Fatalf("step %d: actions %+v, want kinds %v", step, acts, kinds)
	}
	for i, k := range kinds {
		if acts[i].Kind != k {
			t.Fatalf("step %d: action %d is %v, want %v: %+v", step, i, acts[i].Kind, k, acts[i])
		}
	}
}
