//go:build !race

package kvstore

import (
	"fmt"
	"sync"
	"testing"
)

// Hogwild adds race by design: without the race detector they are plain
// loads and stores of the word (addHogwild32/64), which the race detector
// would report, so this runs only without it (scripts/test.sh runs the
// kvstore LocalTable tests a second time without -race). Each goroutine
// adds 1 to its own keys and, with the others, to shared keys 1..4: its
// own keys' sums are exact; a shared key may lose adds that met another
// goroutine's, but holds a whole number some add wrote (never torn).
func TestLocalTableHogwild(t *testing.T) {
	const G, N = 4, 20000
	for _, dt := range []DType{Float32, Float64} {
		t.Run(fmt.Sprint(dt), func(t *testing.T) {
			lt := newLocal(t, TableSpec{Name: "w", Size: 64, DType: dt}, NoLocks, 1)
			var wg sync.WaitGroup
			for g := range G {
				wg.Go(func() {
					keys := []uint64{1, 2, 3, 4, uint64(10 + g)}
					d := []float64{1, 1, 1, 1, 1}
					for range N {
						lt.Add(keys, d)
						lt.AddRange(uint64(20+g), 1, d[:1]) // width-1 range path
					}
				})
			}
			wg.Wait()
			v := lt.Values()
			for g := range G {
				equal(t, float64(N), v[10+g])
				equal(t, float64(N), v[20+g])
			}
			for k := 1; k <= 4; k++ {
				x := v[k]
				check(t, x >= 1 && x <= G*N && x == float64(int64(x)), "shared key %d: %v not in [1, %d] or not whole", k, x, G*N)
			}
		})
	}
}
