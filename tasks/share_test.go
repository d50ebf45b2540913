package tasks_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// keyTable is a tasks.Table whose sparse shards hold keys (Scan lists
// them in pages, in no order); only Spec and Scan are used.
type keyTable struct {
	tasks.Table
	spec kvstore.TableSpec
	keys []uint64
}

func (k keyTable) Spec() kvstore.TableSpec { return k.spec }

func (k keyTable) Scan(fn func(keys []uint64, vals []float64) error) error {
	for lo := 0; lo < len(k.keys); lo += 3 {
		page := k.keys[lo:min(lo+3, len(k.keys))]
		if err := fn(page, make([]float64, len(page))); err != nil {
			return err
		}
	}
	return nil
}

// noScan is a sparse table that cannot list its keys.
type noScan struct{ tasks.Table }

func (noScan) Spec() kvstore.TableSpec {
	return kvstore.TableSpec{Name: "s", Size: 1 << 40, Storage: kvstore.Sparse}
}

// TestEachShareKeys: a dense table's share is its key range (below the
// limit), a sparse table's the keys it holds whose key mod count is the
// share's index, ascending, in chunks; the shares of all workers cover
// every key once. A sparse table that cannot list its keys is an error.
func TestEachShareKeys(t *testing.T) {
	sparse := keyTable{spec: kvstore.TableSpec{Name: "s", Size: 1 << 40, Storage: kvstore.Sparse},
		keys: []uint64{1 << 39, 5, 1<<40 - 1, 2, 77, 1 << 20, 3}}
	dense := keyTable{spec: kvstore.TableSpec{Name: "d", Size: 10}}
	for _, tc := range []struct {
		name    string
		table   tasks.Table
		limit   uint64
		workers int
		want    [][]uint64 // per worker, all its keys in order
	}{
		{"dense, 3 workers", dense, 0, 3, [][]uint64{{0, 1, 2}, {3, 4, 5}, {6, 7, 8, 9}}},
		{"dense below a limit", dense, 7, 2, [][]uint64{{0, 1, 2}, {3, 4, 5, 6}}},
		{"sparse, 2 workers", sparse, 0, 2, [][]uint64{{2, 1 << 20, 1 << 39}, {3, 5, 77, 1<<40 - 1}}},
		{"sparse below a limit", sparse, 1 << 39, 1, [][]uint64{{2, 3, 5, 77, 1 << 20}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[uint64]int{}
			for w := range tc.workers {
				info := &tasks.Info{Rank: w, Workers: tc.workers, Runtime: liveRuntime{}}
				var got []uint64
				err := tasks.EachShareKeys(info, tc.table, tc.limit, 2, func(keys []uint64) error {
					if len(keys) == 0 || len(keys) > 2 {
						t.Fatalf("a chunk of %d keys (want 1..2)", len(keys))
					}
					got = append(got, keys...)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tc.want[w]) {
					t.Fatalf("worker %d: keys %v, want %v", w, got, tc.want[w])
				}
				for _, k := range got {
					seen[k]++
				}
			}
			for k, n := range seen {
				if n != 1 {
					t.Fatalf("key %d visited %d times", k, n)
				}
			}
		})
	}
	info := &tasks.Info{Rank: 0, Workers: 1, Runtime: liveRuntime{}}
	err := tasks.EachShareKeys(info, noScan{}, 0, 2, func([]uint64) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `table "s" is sparse`) {
		t.Fatalf("a sparse table without Scan: %v", err)
	}
	stop := errors.New("stop")
	if err := tasks.EachShareKeys(info, sparse, 0, 2, func([]uint64) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
}
