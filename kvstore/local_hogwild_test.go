//go:build !race

package kvstore

import "testing"

// Hogwild updates race by design; only run without the race detector. It
// checks the table stays usable, not that sums are exact.
func TestLocalTableHogwild(t *testing.T) {
	lt := newLocal(t, TableSpec{Name: "w", Size: 64}, NoLocks, 1)
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			keys := []uint64{1, 2, 3, 4}
			d := []float64{1, 1, 1, 1}
			for range 10000 {
				lt.Add(keys, d)
			}
		}()
	}
	for range 4 {
		<-done
	}
	v := lt.Values()
	check(t, v[1] > 0 && v[1] <= 40000, "hogwild sum %v within bounds", v[1])
}
