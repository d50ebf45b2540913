package mf

import (
	"fmt"
	"math"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// Implicit feedback (SVD++, Koren 2008): which items a user rated says
// something about the user beyond the ratings themselves (on InstEval,
// the lecturers a student rates place the student in a department and a
// year). With implicit = true a user's factor row is
//
//	p_u + z_u,  z_u = |N(u)|^-1/2 sum over j in N(u) of y_j
//
// with N(u) the items u rated in training and y_j a row of the item-side
// table "<items>.implicit". Users with few ratings then borrow strength
// from the users who rated the same items, where a free p_u only has its
// own few ratings and the prior.
//
// SGD on y, as SVD++ does it, moves every y_j of N(u) with each rating of
// u: it needs N(u) at the worker that holds the rating, and a user's
// ratings are spread over workers. flexps keeps the sum instead: the
// user-side table "<users>.implicit" holds, per user, z_u (rank values)
// and G_u (rank values), the user's summed gradient step lr e q_i of the
// epoch. In a batch z_u moves with each rating as SGD on the y_j would
// move it (by lr e q_i exactly), and G_u collects the step. At the end of
// the epoch the steps reach the y_j in one pass over the ratings,
//
//	y_j += 1/n_j sum over ratings (u, j) of |N(u)|^-1/2 G_u
//
// (n_j the item's rating count: a diagonal preconditioner, with which the
// y_j of a user's items together move z_u by about G_u, where the plain
// sum SGD takes over an epoch, applied at once from values one epoch old,
// moves it n_j-fold and diverges within a few epochs on InstEval); then
// the y_j are shrunk by their L2 (l2/n_j per epoch, the same
// preconditioner) and the z_u are recomputed from them in a second pass.
// Three barriers an epoch; the passes only read and add rows. The fixed
// point is SVD++'s: the summed gradient of every y_j is zero.

// UserImplicitTable and ItemImplicitTable name the implicit-feedback
// tables of factor tables users and items.
func UserImplicitTable(users string) string { return users + ".implicit" }

// ItemImplicitTable is the item side's table of y_j rows.
func ItemImplicitTable(items string) string { return items + ".implicit" }

// implicit is a worker's view of the implicit-feedback tables and its
// batch buffers for the user side.
type implicit struct {
	rank   int
	users  tasks.Table // z_u then G_u: 2 rank values per user
	items  tasks.Table // y_j: rank values per item
	v, v0  []float64   // the batch users' rows, as read and as updated
	deltas []float64
}

// read fetches the rows of the batch's users.
func (im *implicit) read(keys []uint64) error {
	im.v = grow(im.v, 2*im.rank*len(keys))
	return im.users.Get(keys, im.v)
}

// z returns batch user u's z row.
func (im *implicit) z(u int) []float64 { return im.v[2*u*im.rank : (2*u+1)*im.rank] }

// g returns batch user u's gradient accumulator.
func (im *implicit) g(u int) []float64 { return im.v[(2*u+1)*im.rank : (2*u+2)*im.rank] }

func (im *implicit) snapshot() { im.v0 = append(im.v0[:0], im.v...) }

func (im *implicit) diff() error {
	var err error
	im.deltas, err = finiteDiff(im.deltas, im.v, im.v0, im.users)
	return err
}

// endEpoch moves the epoch's gradient steps into the y_j, shrinks them by
// the epoch's L2 (lr l2 / n_j), and recomputes every z_u, with barriers
// between the phases so each reads complete sums.
func (im *implicit) endEpoch(info *tasks.Info, m *MiniBatch, train tasks.Input, lr, l2 float64) error {
	// y_j += 1/n_j sum over ratings (u, j) of |N(u)|^-1/2 G_u.
	acc := map[uint64][]float64{}
	// Each confirmed block's sums reach the table at once (in a stage that
	// survives a slave's death; tasks.EachRecordsCommit).
	commitTo := func(tab tasks.Table, width int) func() error {
		return func() error {
			if err := addRows(tab, acc, width, 0, im.rank); err != nil {
				return err
			}
			clear(acc)
			return tab.Flush()
		}
	}
	err := tasks.EachBatchCommit(info.Ctx, train, 4096, func(r *datastore.Records, lo, hi int) error {
		if err := m.gatherIDs(r, lo, hi); err != nil {
			return err
		}
		if err := im.read(m.users.keys); err != nil {
			return err
		}
		for i := lo; i < hi; i++ {
			u, v := m.positions(r, i)
			spread(acc, m.items.keys[v], im.g(u), math.Sqrt(m.users.inv[u])*m.items.inv[v], im.rank)
		}
		return nil
	}, commitTo(im.items, im.rank))
	if err != nil {
		return fmt.Errorf("input %q: %w", m.trainName, err)
	}
	if err := addRows(im.items, acc, im.rank, 0, im.rank); err != nil {
		return err
	}
	if err := info.Barrier(); err != nil {
		return err
	}
	// Shrink this worker's share of the y_j; clear its share of z and G.
	if err := scaleShare(info, im.items, im.rank, m.items.count, func(n float64) float64 { return math.Expm1(-lr * l2 / max(n, 1)) }); err != nil {
		return err
	}
	if err := scaleShare(info, im.users, 2*im.rank, nil, func(float64) float64 { return -1 }); err != nil {
		return err
	}
	if err := info.Barrier(); err != nil {
		return err
	}
	// z_u = |N(u)|^-1/2 sum over j in N(u) of y_j.
	clear(acc)
	y := make([]float64, 0, im.rank*4096)
	err = tasks.EachBatchCommit(info.Ctx, train, 4096, func(r *datastore.Records, lo, hi int) error {
		if err := m.gatherIDs(r, lo, hi); err != nil {
			return err
		}
		y = grow(y, im.rank*len(m.items.keys))
		if err := im.items.Get(m.items.keys, y); err != nil {
			return err
		}
		for i := lo; i < hi; i++ {
			u, v := m.positions(r, i)
			spread(acc, m.users.keys[u], y[v*im.rank:(v+1)*im.rank], math.Sqrt(m.users.inv[u]), im.rank)
		}
		return nil
	}, commitTo(im.users, 2*im.rank))
	if err != nil {
		return fmt.Errorf("input %q: %w", m.trainName, err)
	}
	if err := addRows(im.users, acc, 2*im.rank, 0, im.rank); err != nil {
		return err
	}
	return info.Barrier()
}

// spread adds scale * row into acc[k].
func spread(acc map[uint64][]float64, k uint64, row []float64, scale float64, rank int) {
	a := acc[k]
	if a == nil {
		a = make([]float64, rank)
		acc[k] = a
	}
	for i, x := range row {
		a[i] += scale * x
	}
}

// addRows adds acc's rows (rank values each) into columns from..from+rank
// of tab (width values per key), in chunks.
func addRows(tab tasks.Table, acc map[uint64][]float64, width, from, rank int) error {
	keys := make([]uint64, 0, min(len(acc), chunkKeys))
	vals := make([]float64, 0, width*min(len(acc), chunkKeys))
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		err := tab.Add(keys, vals)
		keys, vals = keys[:0], vals[:0]
		return err
	}
	// A diverged step must never reach the table, not even in part.
	for _, row := range acc {
		for _, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%w: non-finite update of table %q", ErrDiverged, tab.Spec().Name)
			}
		}
	}
	for k, row := range acc {
		keys = append(keys, k)
		n := len(vals)
		vals = append(vals, make([]float64, width)...)
		copy(vals[n+from:n+from+rank], row)
		if len(keys) == chunkKeys {
			if err := flush(); err != nil {
				return fmt.Errorf("table %q: %w", tab.Spec().Name, err)
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("table %q: %w", tab.Spec().Name, err)
	}
	return nil
}

// scaleShare adds factor(n) times the current value to every value of
// this worker's share of tab's keys, n the key's rating count from
// counts (0 with counts nil); factor -1 clears them.
func scaleShare(info *tasks.Info, tab tasks.Table, width int, counts tasks.Table, factor func(n float64) float64) error {
	// Split by Share, not Rank: after a slave's death the survivors'
	// shares still cover every key (before, the dead workers' keys were
	// skipped: their biases not refit, their y_j not shrunk, their z not
	// recomputed). Over a sparse table, the keys it holds (a key never
	// written is 0, and stays 0 scaled).
	buf := make([]float64, width*chunkKeys)
	cnt := make([]float64, countWidth*chunkKeys)
	return tasks.EachShareKeys(info, tab, 0, chunkKeys, func(keys []uint64) error {
		b, c := buf[:width*len(keys)], cnt[:countWidth*len(keys)]
		if err := tab.Get(keys, b); err != nil {
			return fmt.Errorf("table %q: %w", tab.Spec().Name, err)
		}
		if counts != nil {
			if err := counts.Get(keys, c); err != nil {
				return fmt.Errorf("table %q: %w", counts.Spec().Name, err)
			}
		}
		for i := range keys {
			f := factor(c[countWidth*i])
			for j := range width {
				b[width*i+j] *= f
			}
		}
		if err := tab.Add(keys, b); err != nil {
			return fmt.Errorf("table %q: %w", tab.Spec().Name, err)
		}
		return nil
	})
}
