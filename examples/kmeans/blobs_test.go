package kmeans_test

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
)

var update = flag.Bool("update", false, "rewrite testdata/blobs.libsvm")

// blobs describes isotropic Gaussian clusters around seeded centers drawn
// uniformly in [-spread, spread]^dims, at least minSep apart.
type blobs struct {
	N, K, Dims    int
	Sigma, Spread float64
	MinSep        float64
	Seed          uint64
}

// write writes b.N LIBSVM rows (label = true cluster, 1-based feature ids,
// points assigned to clusters round-robin) and returns the true centers.
func (b blobs) write(w io.Writer) ([][]float64, error) {
	rng := rand.New(rand.NewPCG(b.Seed, 0xb10b5))
	var centers [][]float64
	for len(centers) < b.K {
		c := make([]float64, b.Dims)
		for f := range c {
			c[f] = (2*rng.Float64() - 1) * b.Spread
		}
		ok := true
		for _, o := range centers {
			if dist2(c, o) < b.MinSep*b.MinSep {
				ok = false
			}
		}
		if ok {
			centers = append(centers, c)
		}
	}
	bw := bufio.NewWriter(w)
	buf := make([]byte, 0, 256)
	for i := range b.N {
		j := i % b.K
		buf = strconv.AppendInt(buf[:0], int64(j), 10)
		for f, c := range centers[j] {
			buf = append(buf, ' ')
			buf = strconv.AppendInt(buf, int64(f+1), 10)
			buf = append(buf, ':')
			buf = strconv.AppendFloat(buf, c+b.Sigma*rng.NormFloat64(), 'f', 4, 64)
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return nil, err
		}
	}
	return centers, bw.Flush()
}

func (b blobs) writeFile(path string) ([][]float64, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	c, err := b.write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return c, err
}

func dist2(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		d := a[i] - b[i]
		s += d * d
	}
	return s
}

// matchCenters pairs every true center with the nearest found one and
// returns the largest such distance, failing if two share a found center.
func matchCenters(truth, found [][]float64) (float64, error) {
	used := map[int]int{}
	worst := 0.0
	for i, t := range truth {
		best, bestD := -1, math.Inf(1)
		for j, f := range found {
			if d := dist2(t, f); d < bestD {
				best, bestD = j, d
			}
		}
		if o, ok := used[best]; ok {
			return 0, fmt.Errorf("true centers %d and %d both nearest to found center %d", o, i, best)
		}
		used[best] = i
		worst = max(worst, math.Sqrt(bestD))
	}
	return worst, nil
}
