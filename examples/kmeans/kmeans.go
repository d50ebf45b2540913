// Package kmeans is k-means clustering of LIBSVM or CSV feature vectors
// (labels ignored) as a two-stage flexps task. kmeans.init runs on one
// worker: it keeps an order-independent sample of the input (the rows with
// the smallest seeded hashes, so neither block order nor worker count
// changes it) and seeds k centers from it by greedy k-means++, writing them
// into table "centers" (k keys, width = dimensions). kmeans.lloyd runs on
// any number of workers under BSP, two clocks per iteration:
//
//	clock 2t:   every worker reads all centers, assigns its share of the
//	            points to the nearest, and adds per-cluster sums and counts
//	            into table "acc" (k keys, width dims+1: sums, then count)
//	clock 2t+1: worker 0 reads acc (the BSP read waits until every worker
//	            has clocked, so it holds exactly this iteration's sums),
//	            moves the centers to the means and adds -acc to reset it;
//	            the others only clock. The next iteration's center read at
//	            clock 2t+2 waits for worker 0's clock, so it sees the new
//	            centers, and nobody adds to acc before worker 0 has reset it.
//
// kmeans.init reports the rows it read and the seeds' objective on its
// sample (the whole input's when sample >= rows). In kmeans.lloyd every
// worker reports its share's objective (sum of squared distances to
// the nearest center, measured with the iteration's centers before the
// update) and samples; the master sums them, so the printed objective is
// the whole data set's. A cluster that gets no point keeps its center.
//
// Stage functions registered here:
//
//	kmeans.init   params: k (the centers table's size), seed (1), sample (10000 rows),
//	              centers ("centers"), train ("train"); workers must be 1
//	kmeans.lloyd  params: k, iterations (10), centers ("centers"), acc ("acc"), train ("train");
//	              consistency must be bsp
//
// The model kind "kmeans" has an evaluator: mean squared distance of each
// record to its nearest center.
package kmeans

import (
	"errors"
	"fmt"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.Register("kmeans.init", Init)
	tasks.Register("kmeans.lloyd", Lloyd)
	tasks.RegisterEvaluator("kmeans", tasks.Evaluator{Format: "libsvm", Eval: EvalModel})
}

// Config is the parameters of both stages.
type Config struct {
	K          int
	Iterations int
	Seed       int64
	Sample     int
	Centers    string
	Acc        string
	Train      string
}

// ConfigFrom reads and checks the stage parameters.
func ConfigFrom(p tasks.Params) (Config, error) {
	if err := p.Check("k", "iterations", "seed", "sample"); err != nil {
		return Config{}, fmt.Errorf("kmeans: %w", err)
	}
	c := Config{K: p.Int("k", 0), Iterations: p.Int("iterations", 10), Seed: int64(p.Int("seed", 1)), Sample: p.Int("sample", 10000),
		Centers: p.String("centers", "centers"), Acc: p.String("acc", "acc"), Train: p.String("train", "train")}
	switch {
	case c.K < 0:
		return c, fmt.Errorf("kmeans: k must be >= 1, got %d", c.K)
	case c.Iterations < 1:
		return c, fmt.Errorf("kmeans: iterations must be >= 1, got %d", c.Iterations)
	case c.Sample < 1:
		return c, fmt.Errorf("kmeans: sample must be >= 1, got %d", c.Sample)
	}
	return c, nil
}

// centersTable opens the centers table and settles k and the dimensions
// from its spec: k defaults to the table's size and may not exceed it.
func (c *Config) centersTable(info *tasks.Info) (tasks.Table, int, error) {
	t, err := info.Table(c.Centers)
	if err != nil {
		return nil, 0, fmt.Errorf("kmeans: %w", err)
	}
	spec := t.Spec()
	if c.K == 0 {
		c.K = int(spec.Size)
	}
	if uint64(c.K) > spec.Size {
		return nil, 0, fmt.Errorf("kmeans: k = %d but table %q has only %d keys (size must be >= k)", c.K, c.Centers, spec.Size)
	}
	return t, spec.Width, nil
}

// Centers are k dense centers of dims coordinates with their squared norms,
// for the distance ||x||^2 - 2 x.c + ||c||^2 of a sparse point x: its cost
// is the point's non-zeros, not the dimensions.
type Centers struct {
	K, Dims int
	C       []float64 // K*Dims
	norm2   []float64
}

// NewCenters wraps c (k*dims values) and computes the norms.
func NewCenters(k, dims int, c []float64) *Centers {
	cs := &Centers{K: k, Dims: dims, C: c, norm2: make([]float64, k)}
	cs.Update()
	return cs
}

// Update recomputes the norms after C changed.
func (cs *Centers) Update() {
	for j := range cs.K {
		s := 0.0
		for _, v := range cs.C[j*cs.Dims : (j+1)*cs.Dims] {
			s += v * v
		}
		cs.norm2[j] = s
	}
}

// ErrDims is wrapped when a point has a feature beyond the centers' width.
var ErrDims = errors.New("feature beyond the table width")

// Nearest returns the nearest center to the sparse point (keys, vals) and
// the squared distance. Features at or beyond Dims count against every
// center alike (their center coordinate is 0); strict reports them.
func (cs *Centers) Nearest(keys []uint64, vals []float64, strict bool) (int, float64, error) {
	x2 := 0.0
	for t, k := range keys {
		x2 += vals[t] * vals[t]
		if strict && k >= uint64(cs.Dims) {
			return 0, 0, fmt.Errorf("%w: feature %d, width %d (table width must be the number of features)", ErrDims, k, cs.Dims)
		}
	}
	best, bestD := 0, 0.0
	for j := range cs.K {
		c := cs.C[j*cs.Dims : (j+1)*cs.Dims]
		dot := 0.0
		for t, k := range keys {
			if k < uint64(len(c)) {
				dot += vals[t] * c[k]
			}
		}
		d := max(x2-2*dot+cs.norm2[j], 0)
		if j == 0 || d < bestD {
			best, bestD = j, d
		}
	}
	return best, bestD, nil
}

// checkDims reports a table whose width does not fit the centers.
func checkDims(t tasks.Table, name string, k, width int) error {
	spec := t.Spec()
	if spec.Width != width {
		return fmt.Errorf("kmeans: table %q has width %d, want %d (the centers' width + 1: sums, then the count)", name, spec.Width, width)
	}
	if spec.Size < uint64(k) {
		return fmt.Errorf("kmeans: table %q has size %d, want >= k = %d", name, spec.Size, k)
	}
	if spec.DType == kvstore.Float32 {
		return fmt.Errorf("kmeans: table %q is float32; sums of many points need dtype = \"float64\"", name)
	}
	return nil
}

func seqKeys(k int) []uint64 {
	keys := make([]uint64, k)
	for i := range keys {
		keys[i] = uint64(i)
	}
	return keys
}
