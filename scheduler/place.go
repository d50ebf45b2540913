package scheduler

import (
	"cmp"
	"slices"
)

// Place spreads r's workers over the slaves with the most free slots,
// respecting MaxSlaves, OneSlave, Pinned and Alive. ok is false if r does not
// fit the free slots now (or asks for no workers). Assignments are in order
// of the slaves' free slots, most first; slaves is not modified.
func Place(r Request, slaves []Slave) ([]Assignment, bool) {
	if r.Workers <= 0 {
		return nil, false
	}
	cand := candidates(r, slaves)
	if r.OneSlave {
		if len(cand) == 0 || cand[0].Free < r.Workers {
			return nil, false
		}
		return []Assignment{{Slave: cand[0].ID, Workers: r.Workers}}, true
	}
	if r.MaxSlaves > 0 && len(cand) > r.MaxSlaves {
		cand = cand[:r.MaxSlaves]
	}
	sum := 0
	for _, c := range cand {
		sum += c.Free
	}
	if sum < r.Workers {
		return nil, false
	}
	// Water-fill: each worker goes to the candidate with the most slots
	// left; cand stays sorted by descending left slots after each step if we
	// move the decremented entry right past entries with more left.
	got := make([]int, len(cand))
	left := make([]int, len(cand))
	idx := make([]int, len(cand)) // idx[k]: candidate at sorted position k
	for i, c := range cand {
		left[i] = c.Free
		idx[i] = i
	}
	for range r.Workers {
		top := idx[0]
		got[top]++
		left[top]--
		// Restore order: bubble the first entry right while it sorts after
		// its neighbour.
		for k := 0; k+1 < len(idx) && less(idx[k+1], idx[k], left, cand); k++ {
			idx[k], idx[k+1] = idx[k+1], idx[k]
		}
	}
	var out []Assignment
	for i, c := range cand {
		if got[i] > 0 {
			out = append(out, Assignment{Slave: c.ID, Workers: got[i]})
		}
	}
	return out, true
}

// less orders candidates by most slots left, then slave ID.
func less(a, b int, left []int, cand []Slave) bool {
	if left[a] != left[b] {
		return left[a] > left[b]
	}
	return cand[a].ID < cand[b].ID
}

// Fits reports whether r could ever fit the cluster: whether it would fit if
// every alive slave's slots were free. A request that fits the cluster but
// not the free slots must queue; one that does not fit the cluster is an
// error for the submitter. Dead slaves do not count.
func Fits(r Request, slaves []Slave) bool {
	idle := make([]Slave, len(slaves))
	for i, s := range slaves {
		s.Free = s.Total
		idle[i] = s
	}
	_, ok := Place(r, idle)
	return ok
}

// candidates are the alive slaves r may use with free slots, most free first,
// ties by ID.
func candidates(r Request, slaves []Slave) []Slave {
	var out []Slave
	for _, s := range slaves {
		if !s.Alive || s.Free <= 0 {
			continue
		}
		if len(r.Pinned) > 0 && !slices.Contains(r.Pinned, s.ID) {
			continue
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Slave) int {
		if c := cmp.Compare(b.Free, a.Free); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}
