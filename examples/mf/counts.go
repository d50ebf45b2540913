package mf

import (
	"fmt"
	"math"
	"sort"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// chunkKeys bounds the keys of one Add when the counts are written.
const chunkKeys = 1 << 14

// countWidth is the width of the count tables: per id the number of
// training ratings, their sum, and the scratch column refitBiases sums
// residuals in (zero between refits); key Size holds the totals: ratings,
// their sum and their sum of squares.
const countWidth = 3

// prepareCounts counts the ratings of every user and item into the count
// tables (key Size: the totals, which also mark the counts as gathered)
// unless an earlier stage did, and then sets the global bias to the mean
// training rating and the biases to their first estimates (initBiases).
// Every id is checked against its table here, before
// any training.
func prepareCounts(info *tasks.Info, t Tables, train tasks.Input, cfg Config) (float64, error) {
	usize, isize := t.Users.Spec().Size, t.Items.Spec().Size
	marker := make([]float64, countWidth)
	if err := t.UserCount.Get([]uint64{usize}, marker); err != nil {
		return 0, fmt.Errorf("mf: counts: %w", err)
	}
	// Every worker has read the marker before anyone sets it.
	if err := info.Barrier(); err != nil {
		return 0, fmt.Errorf("mf: counts: %w", err)
	}
	if marker[0] > 0 {
		return ratingVariance(marker), nil
	}
	users, items := map[uint64]*[2]float64{}, map[uint64]*[2]float64{}
	var n, sum, sum2 float64
	add := func(m map[uint64]*[2]float64, k uint64, r float64) {
		a := m[k]
		if a == nil {
			a = new([2]float64)
			m[k] = a
		}
		a[0]++
		a[1] += r
	}
	// What each confirmed block counted reaches the tables at once (in a
	// stage that survives a slave's death; tasks.EachRecordsCommit).
	addCounts := func() error {
		if err := writeCounts(t.UserCount, users); err != nil {
			return err
		}
		if err := writeCounts(t.ItemCount, items); err != nil {
			return err
		}
		for _, x := range []struct {
			tab  tasks.Table
			size uint64
		}{{t.UserCount, usize}, {t.ItemCount, isize}} {
			if err := x.tab.Add([]uint64{x.size}, []float64{n, sum, sum2}); err != nil {
				return err
			}
		}
		clear(users)
		clear(items)
		n, sum, sum2 = 0, 0, 0
		return nil
	}
	commit := func() error {
		if err := addCounts(); err != nil {
			return fmt.Errorf("mf: counts: %w", err)
		}
		return t.UserCount.Flush()
	}
	err := tasks.EachRecordsCommit(info.Ctx, train, func(r *datastore.Records) error {
		for i := 0; i < r.Len(); i++ {
			u, it, err := ratingIDs(r, i, t)
			if err != nil {
				return err
			}
			y := r.Labels[i]
			if math.IsInf(y*y, 0) {
				// The variance and every error square it: the first
				// error to overflow failed the stage at another line,
				// blaming the learning rate.
				return fmt.Errorf("%s: rating %g: its square overflows a float64 (the errors are squared): rescale the ratings", r.Where(i), y)
			}
			add(users, u, y)
			add(items, it, y)
			n++
			sum += y
			sum2 += y * y
		}
		return nil
	}, commit)
	if err != nil {
		return 0, fmt.Errorf("mf: stage %q: input %q: %w", info.StageName, cfg.Train, err)
	}
	if err := addCounts(); err != nil {
		return 0, fmt.Errorf("mf: counts: %w", err)
	}
	if err := info.Barrier(); err != nil {
		return 0, fmt.Errorf("mf: counts: %w", err)
	}
	if t.Bias != nil && !t.FixedBiases {
		if err := initBiases(info, t, cfg); err != nil {
			return 0, fmt.Errorf("mf: stage %q: %w", info.StageName, err)
		}
	}
	// Nobody trains before the biases are in place.
	if err := info.Barrier(); err != nil {
		return 0, fmt.Errorf("mf: counts: %w", err)
	}
	if err := t.UserCount.Get([]uint64{usize}, marker); err != nil {
		return 0, fmt.Errorf("mf: counts: %w", err)
	}
	return ratingVariance(marker), nil
}

// ratingVariance is the variance of the training ratings from the count
// table's totals row.
func ratingVariance(tot []float64) float64 {
	if tot[0] == 0 {
		return 0
	}
	m := tot[1] / tot[0]
	return max(tot[2]/tot[0]-m*m, 0)
}

func writeCounts(tab tasks.Table, acc map[uint64]*[2]float64) error {
	keys := make([]uint64, 0, len(acc))
	for k := range acc {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	vals := make([]float64, 0, countWidth*min(len(keys), chunkKeys))
	for lo := 0; lo < len(keys); lo += chunkKeys {
		ks := keys[lo:min(lo+chunkKeys, len(keys))]
		vals = vals[:0]
		for _, k := range ks {
			vals = append(vals, acc[k][0], acc[k][1], 0)
		}
		if err := tab.Add(ks, vals); err != nil {
			return err
		}
	}
	return nil
}

// ratingIDs returns record i's user and item, or an error naming the
// record's file and line and the table an id is outside of.
func ratingIDs(r *datastore.Records, i int, t Tables) (uint64, uint64, error) {
	a := r.Offsets[i]
	if n := r.Offsets[i+1] - a; n != 2 {
		return 0, 0, fmt.Errorf("%s: record has %d ids, want user and item (format = \"ratings\")", r.Where(i), n)
	}
	u, it := r.Keys[a], r.Keys[a+1]
	if err := checkID(r, i, "user", u, t.Users); err != nil {
		return 0, 0, err
	}
	if err := checkID(r, i, "item", it, t.Items); err != nil {
		return 0, 0, err
	}
	return u, it, nil
}

func checkID(r *datastore.Records, i int, what string, id uint64, t tasks.Table) error {
	spec := t.Spec()
	if id < spec.Size {
		return nil
	}
	hint := ""
	if id == spec.Size {
		hint = fmt.Sprintf("; ids are 0-based keys: a file with 1-based ids needs size = %d (or ids shifted down by one)", spec.Size+1)
	}
	return fmt.Errorf("%s: %s id %d is outside table %q (size %d: ids 0..%d)%s", r.Where(i), what, id, spec.Name, spec.Size, spec.Size-1, hint)
}

// initBiases starts mu at the mean training rating and each user's and
// item's bias at its regularized mean deviation from it, sum(r - mu) /
// (n + l2_bias): the usual first estimate of a bias model, which SGD only
// refines, where from zero it would spend most epochs getting there.
// Worker w sets the w-th share of each table's keys.
func initBiases(info *tasks.Info, t Tables, cfg Config) error {
	l2 := cfg.L2Bias // the first epoch's, before any residual is measured
	usize := t.Users.Spec().Size
	tot := make([]float64, countWidth)
	if err := t.UserCount.Get([]uint64{usize}, tot); err != nil {
		return fmt.Errorf("counts: %w", err)
	}
	if tot[0] == 0 {
		return fmt.Errorf("input %q holds no ratings", cfg.Train)
	}
	mu := tot[1] / tot[0]
	idx, _ := info.Share() // the live workers as of the last Barrier
	if idx == 0 {
		cur := make([]float64, 1)
		if err := t.Bias.Get([]uint64{0}, cur); err != nil {
			return fmt.Errorf("global bias: %w", err)
		}
		if err := t.Bias.Add([]uint64{0}, []float64{mu - cur[0]}); err != nil {
			return fmt.Errorf("global bias: %w", err)
		}
	}
	for _, x := range []struct{ bias, count tasks.Table }{{t.UserBias, t.UserCount}, {t.ItemBias, t.ItemCount}} {
		size := x.bias.Spec().Size
		if cs := x.count.Spec().Size - 1; cs < size {
			size = cs
		}
		cnt := make([]float64, countWidth*chunkKeys)
		cur := make([]float64, chunkKeys)
		// The ids the count table holds: over sparse tables of hashed
		// ids, only those the data has.
		err := tasks.EachShareKeys(info, x.count, size, chunkKeys, func(keys []uint64) error {
			c, b := cnt[:countWidth*len(keys)], cur[:len(keys)]
			if err := x.count.Get(keys, c); err != nil {
				return fmt.Errorf("counts: %w", err)
			}
			if err := x.bias.Get(keys, b); err != nil {
				return fmt.Errorf("table %q: %w", x.bias.Spec().Name, err)
			}
			for i := range b {
				b[i] = (c[countWidth*i+1]-c[countWidth*i]*mu)/(c[countWidth*i]+l2) - b[i]
			}
			if err := x.bias.Add(keys, b); err != nil {
				return fmt.Errorf("table %q: %w", x.bias.Spec().Name, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
