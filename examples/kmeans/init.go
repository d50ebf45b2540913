package kmeans

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/internal/tableops"
	"github.com/flexps/flexps/tasks"
)

// point is a sampled row, copied out of the reader's batch.
type point struct {
	hash uint64
	keys []uint64
	vals []float64
}

// sampleHeap is a max-heap on hash: the bottom-n sample keeps the n rows
// with the smallest hashes, evicting the root.
type sampleHeap []point

func (h sampleHeap) Len() int           { return len(h) }
func (h sampleHeap) Less(i, j int) bool { return h[i].hash > h[j].hash }
func (h sampleHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *sampleHeap) Push(x any)        { *h = append(*h, x.(point)) }
func (h *sampleHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	*h = old[:len(old)-1]
	return p
}

// rowHash mixes the seed and the row's features (not its label) into 64
// bits with splitmix64 steps: deterministic across processes and runs.
func rowHash(seed uint64, keys []uint64, vals []float64) uint64 {
	h := mix(seed ^ 0x9e3779b97f4a7c15)
	for t, k := range keys {
		h = mix(h ^ k)
		h = mix(h ^ math.Float64bits(vals[t]))
	}
	return h
}

func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Init is the kmeans.init stage function.
func Init(info *tasks.Info) error {
	cfg, err := ConfigFrom(info.Params)
	if err != nil {
		return err
	}
	if info.Workers != 1 {
		return fmt.Errorf("kmeans.init: run it with workers = 1 (it seeds from the whole input), got %d", info.Workers)
	}
	centers, dims, err := cfg.centersTable(info)
	if err != nil {
		return err
	}
	runs, err := info.Table(RunsTable(cfg.Centers))
	if err != nil {
		return fmt.Errorf("kmeans: %w", err)
	}
	if want := uint64(cfg.Restarts*cfg.K + 1); runs.Spec().Size < want || runs.Spec().Width != dims {
		return fmt.Errorf("kmeans: table %q is %d x %d, want %d x %d (k x restarts + 1 keys; leave it undeclared and the task adds it)",
			RunsTable(cfg.Centers), runs.Spec().Size, runs.Spec().Width, want, dims)
	}
	train, err := info.Input(cfg.Train)
	if err != nil {
		return fmt.Errorf("kmeans: %w", err)
	}
	if err := tasks.CheckFormat(train, cfg.Train, "kmeans.init", "libsvm", "csv"); err != nil {
		return err
	}
	// A csv row holds every feature, zeros too: a row of fewer than the
	// centers' width is a file whose first column was taken for a label
	// (label_column defaults to 0), and k-means ran on the others
	// (iris without its label column: objective 47.9 for scikit-learn's
	// 78.9, exit 0).
	csv := false
	if f, ok := train.(tasks.FormatNamer); ok {
		csv = f.FormatName() == "csv"
	}
	var h sampleHeap
	n := int64(0)
	var sum, sumSq []float64
	if cfg.Standardize {
		sum, sumSq = make([]float64, dims), make([]float64, dims)
	}
	err = tasks.EachRecords(info.Ctx, train, func(r *datastore.Records) error {
		for i := 0; i < r.Len(); i++ {
			_, keys, vals := r.Row(i)
			if csv && len(keys) < dims {
				return fmt.Errorf("kmeans.init: %s: the row has %d features (its csv columns less the label column), table %q has width %d (the number of features): a file without a label column needs label_column = -1 (the default, 0, reads column 0 as the label)", r.Where(i), len(keys), cfg.Centers, dims)
			}
			x2 := 0.0
			for t, k := range keys {
				if k >= uint64(dims) {
					return fmt.Errorf("kmeans.init: %s: %w: feature key %d, width %d (table %q's width must be the number of features)", r.Where(i), ErrDims, k, dims, cfg.Centers)
				}
				if v := vals[t]; math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("kmeans.init: %s: %w: feature key %d is %v", r.Where(i), ErrNotFinite, k, v)
				}
				// Distances square the values: a row whose squared
				// norm overflows made the seeding's objective
				// infinite, reported as "the learning rate is likely
				// too large", naming no line.
				if x2 += vals[t] * vals[t]; math.IsInf(x2, 0) {
					return fmt.Errorf("kmeans.init: %s: %w: feature key %d is %g, and the row's squared norm overflows a float64 (distances square the values): rescale the features", r.Where(i), ErrNotFinite, k, vals[t])
				}
				if sum != nil {
					sum[k] += vals[t]
					sumSq[k] += vals[t] * vals[t]
				}
			}
			n++
			hv := rowHash(uint64(cfg.Seed), keys, vals)
			if len(h) == cfg.Sample && hv >= h[0].hash {
				continue
			}
			p := point{hash: hv, keys: slices.Clone(keys), vals: slices.Clone(vals)}
			if len(h) == cfg.Sample {
				h[0] = p
				heap.Fix(&h, 0)
			} else {
				heap.Push(&h, p)
			}
		}
		info.Report(int64(r.Len()), 0)
		return nil
	})
	if err != nil {
		return fmt.Errorf("kmeans.init: input %q: %w", cfg.Train, err)
	}
	if len(h) < cfg.K {
		if n > int64(len(h)) {
			return fmt.Errorf("kmeans.init: sample = %d rows, fewer than k = %d (input %q has %d rows): raise sample", cfg.Sample, cfg.K, cfg.Train, n)
		}
		return fmt.Errorf("kmeans.init: input %q has %d rows, fewer than k = %d", cfg.Train, len(h), cfg.K)
	}
	var wt []float64
	if cfg.Standardize {
		if wt, err = writeScale(info, cfg, sum, sumSq, float64(n)); err != nil {
			return err
		}
	}
	pts := []point(h)
	slices.SortFunc(pts, func(a, b point) int {
		if a.hash < b.hash {
			return -1
		} else if a.hash > b.hash {
			return 1
		}
		return 0
	})
	all := make([]float64, (cfg.Restarts*cfg.K+1)*dims)
	best, bestPot := 0, math.Inf(1)
	for r := range cfg.Restarts {
		c, pot := SeedPlusPlus(pts, cfg.K, dims, uint64(cfg.Seed)+uint64(r)*0x9e3779b97f4a7c15, wt)
		copy(all[r*cfg.K*dims:], c)
		if pot < bestPot {
			best, bestPot = r, pot
		}
	}
	if err := tableops.Set(runs, seqKeys(cfg.Restarts*cfg.K+1), all); err != nil {
		return err
	}
	if err := tableops.Set(centers, seqKeys(cfg.K), all[best*cfg.K*dims:(best+1)*cfg.K*dims]); err != nil {
		return err
	}
	info.Log.Info().Int64("rows", n).Int("sample", len(pts)).Int("k", cfg.K).Int("restarts", cfg.Restarts).
		Float64("sample_objective", bestPot).Msg("kmeans++ seeded")
	info.ReportEpoch(1, map[string]float64{tasks.MetricSamples: float64(n), tasks.MetricObjective: bestPot})
	return nil
}

// writeScale stores each feature's weight 1/variance (1 for a constant
// feature) into the scale table and returns the weights.
func writeScale(info *tasks.Info, cfg Config, sum, sumSq []float64, n float64) ([]float64, error) {
	st, err := info.Table(ScaleTable(cfg.Centers))
	if err != nil {
		return nil, fmt.Errorf("kmeans: standardize: %w", err)
	}
	wt := make([]float64, len(sum))
	for f := range wt {
		mean := sum[f] / n
		v := sumSq[f]/n - mean*mean
		wt[f] = 1
		// Below this the feature is constant up to rounding.
		if v > 1e-12*max(sumSq[f]/n, 1e-300) {
			wt[f] = 1 / v
		}
	}
	return wt, tableops.Set(st, seqKeys(len(wt)), wt)
}

// SeedPlusPlus picks k centers from pts by greedy k-means++ (Arthur and
// Vassilvitskii; several candidates per step, keeping the one that lowers
// the potential most, as scikit-learn does) and returns them dense with
// the sample's final potential. Distances weigh feature f by wt[f] (nil:
// 1). The choice depends only on pts' order and seed.
func SeedPlusPlus(pts []point, k, dims int, seed uint64, wt []float64) ([]float64, float64) {
	weight := func(f uint64) float64 {
		if wt == nil {
			return 1
		}
		return wt[f]
	}
	rng := rand.New(rand.NewPCG(seed, 0x6b6d65616e732b2b))
	trials := 2 + int(math.Log(float64(k)))
	c := make([]float64, k*dims)
	place := func(j int, p point) {
		row := c[j*dims : (j+1)*dims]
		clear(row)
		for t, key := range p.keys {
			row[key] = p.vals[t]
		}
	}
	// distTo writes each point's squared distance to q into out:
	// ||q||^2 + sum over p's features of w (x^2 - 2 x q), with q spread
	// into a dense row, so a point costs its non-zeros (feature ids are
	// unique within a row: the parsers refuse repeats).
	dense := make([]float64, dims)
	distTo := func(q point, out []float64) float64 {
		qn := 0.0
		for t, key := range q.keys {
			dense[key] = q.vals[t]
			qn += weight(key) * q.vals[t] * q.vals[t]
		}
		sum := 0.0
		for i, p := range pts {
			s := qn
			for t, key := range p.keys {
				x := p.vals[t]
				s += weight(key) * x * (x - 2*dense[key])
			}
			out[i] = max(s, 0)
			sum += out[i]
		}
		for _, key := range q.keys {
			dense[key] = 0
		}
		return sum
	}
	d := make([]float64, len(pts))
	first := rng.IntN(len(pts))
	place(0, pts[first])
	pot := distTo(pts[first], d)
	cand := make([]float64, len(pts))
	best := make([]float64, len(pts))
	for j := 1; j < k; j++ {
		bestIdx, bestPot := -1, 0.0
		for range trials {
			idx := pick(rng, d, pot)
			distTo(pts[idx], cand)
			p := 0.0
			for i := range pts {
				cand[i] = min(d[i], cand[i])
				p += cand[i]
			}
			if bestIdx < 0 || p < bestPot {
				bestIdx, bestPot = idx, p
				copy(best, cand)
			}
		}
		place(j, pts[bestIdx])
		d, best = best, d
		pot = bestPot
	}
	return c, pot
}

// pick draws an index with probability d[i]/pot, uniformly when pot is 0
// (every point already sits on a center).
func pick(rng *rand.Rand, d []float64, pot float64) int {
	if !(pot > 0) {
		return rng.IntN(len(d))
	}
	r := rng.Float64() * pot
	for i, v := range d {
		if r < v {
			return i
		}
		r -= v
	}
	for i := len(d) - 1; i >= 0; i-- { // rounding left r past the end
		if d[i] > 0 {
			return i
		}
	}
	return len(d) - 1
}
