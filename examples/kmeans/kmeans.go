// Package kmeans is k-means clustering of LIBSVM or CSV feature vectors
// (labels ignored) as a two-stage flexps task, with k-means++ seeding and
// restarts like scikit-learn's KMeans(n_init).
//
// kmeans.init runs on one worker: it keeps an order-independent sample of
// the input (the rows with the smallest seeded hashes, so neither block
// order nor worker count changes it) and seeds `restarts` independent
// sets of k centers from it by greedy k-means++, writing them into the
// table "<centers>.runs" (restarts x k keys, width = dimensions, plus one
// control key) and the best seeding into "centers". kmeans.lloyd runs
// Lloyd iterations of every restart at once on any number of workers under
// BSP, a Barrier and a clock per iteration (a Barrier, because in a stage
// that survives a slave's death a worker starved at a pass's end ticks
// idle clocks, so clock counts do not line up after a pass):
//
//	before:     every worker reads all runs' centers, assigns each of its
//	            points to the nearest center of every restart, and adds
//	            per-cluster sums, counts and squared distances into
//	            "<centers>.acc" (restarts x k keys, width dims+2) and its
//	            farthest point per restart into "<centers>.far"
//	barrier:    worker 0 reads acc (every worker's Adds are applied
//	            before it passes the Barrier: acc holds exactly this iteration's sums),
//	            moves the centers to the means, moves a center that got no
//	            point to the farthest point of its restart not yet used
//	            (as scikit-learn does), clears the other half of acc and far
//	            (each holds two iterations' sums, by parity: the next
//	            iteration's half) by adding their negation, sets the control
//	            key once every restart's objective improved by less than tol
//	            (relative), and marks the iteration done in "<centers>.ctl"
//	            last; the others only clock. The next iteration's read, one
//	            clock past the Barrier, waits for worker 0's clock, so it sees
//	            the new centers and the stop signal, and nobody adds to acc
//	            before it was cleared. Worker 0 is the first live worker; if
//	            the mark is missing at that read, its slave died during the
//	            update, and the first survivor does it again from the same sums.
//
// After the last iteration worker 0 copies the restart with the lowest
// objective into "centers", the model. Each iteration reports the best
// restart's objective (sum of squared distances to the nearest center
// over the whole data set, measured with the iteration's centers before
// the update) and the samples; a non-finite feature value or center stops
// the stage with an error naming the input.
//
// standardize (default false, as in scikit-learn and Spark, which cluster
// the space they are given) measures distances in standardized units:
// kmeans.init computes each feature's variance over the whole input
// (zeros included) into "<centers>.scale", and every distance weighs
// feature f by 1/variance_f (a constant feature by 1). Since distances do
// not change under translation this is k-means on z-scored data, but the
// centers stay in raw units, and the objective is the standardized one;
// the evaluator reads the scale table from the model.
//
// The helper tables are added to the task automatically
// (tasks.RegisterTables): declare only "centers" (k keys, width = number
// of features).
//
// Stage functions registered here:
//
//	kmeans.init   params: k (the centers table's size), seed (1), sample (10000 rows), restarts (10),
//	              standardize (false), centers ("centers"), train ("train"); workers must be 1
//	kmeans.lloyd  params: k, restarts (10), iterations (100, at most), tol (1e-6; 0 runs every
//	              iteration), standardize, centers, acc ("<centers>.acc"), train;
//	              consistency must be bsp
//
// The model kind "kmeans" has an evaluator: mean squared distance of each
// record to its nearest center (mse) and their sum (objective).
package kmeans

import (
	"errors"
	"fmt"
	"math"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.Register("kmeans.init", Init)
	tasks.Register("kmeans.lloyd", Lloyd)
	tasks.RegisterNeedsBSP("kmeans.lloyd")
	tasks.RegisterEpochs("kmeans.lloyd", func(p tasks.Params) int { c, _ := ConfigFrom(p); return c.Iterations })
	for _, fn := range []string{"kmeans.init", "kmeans.lloyd"} {
		tasks.RegisterParams(fn, func(p tasks.Params) error { _, err := ConfigFrom(p); return err })
		tasks.RegisterInputs(fn, tasks.InputParam{Param: "train", Required: true})
		tasks.RegisterTaskParams(fn, tasks.AllOf(kFits(fn), tasks.DenseInMemory(fn, "centers")))
	}
	tasks.RegisterTables("kmeans.init", func(st tasks.Stage, declared []kvstore.TableSpec) []kvstore.TableSpec {
		return helperTables(st, declared, false)
	})
	tasks.RegisterTables("kmeans.lloyd", func(st tasks.Stage, declared []kvstore.TableSpec) []kvstore.TableSpec {
		return helperTables(st, declared, true)
	})
	tasks.RegisterEvaluator("kmeans", tasks.Evaluator{Format: "libsvm", Formats: []string{"libsvm", "csv"}, Eval: EvalModel})
}

// kFits checks, at submission, that k of every stage of function fn is at
// most its centers table's size, as the stage does when it starts: there a
// k too large failed after the stages before it had run.
func kFits(fn string) tasks.TaskParamsFunc {
	return func(t *tasks.MultiStageTask) (int, string, error) {
		for i, s := range t.Stages {
			if s.Func != fn {
				continue
			}
			cfg, err := ConfigFrom(s.Params)
			if err != nil || cfg.K == 0 {
				continue // refused by the params check, or k is the table's size
			}
			if spec, ok := t.TableSpec(cfg.Centers); ok && uint64(cfg.K) > spec.Size {
				return i, "k", fmt.Errorf("kmeans: k = %d but table %q has only %d keys (size must be >= k)", cfg.K, cfg.Centers, spec.Size)
			}
		}
		return 0, "", nil
	}
}

// Helper table names for centers table c.
func RunsTable(c string) string  { return c + ".runs" }
func AccTable(c string) string   { return c + ".acc" }
func FarTable(c string) string   { return c + ".far" }
func CtlTable(c string) string   { return c + ".ctl" }
func ScaleTable(c string) string { return c + ".scale" }

// maxAutoWorkers sizes the far table of a stage whose worker count the
// scheduler picks.
const maxAutoWorkers = 256

// helperTables declares the tables the stages need beside "centers".
func helperTables(st tasks.Stage, declared []kvstore.TableSpec, lloyd bool) []kvstore.TableSpec {
	cfg, err := ConfigFrom(st.Params)
	if err != nil {
		return nil // the stage reports it when it runs
	}
	for _, c := range declared {
		if c.Name != cfg.Centers {
			continue
		}
		c = c.WithDefaults()
		k := uint64(cfg.K)
		if k == 0 {
			k = c.Size
		}
		r := uint64(cfg.Restarts)
		// The stage's own tables are replicated as the centers are.
		out := []kvstore.TableSpec{{Name: RunsTable(c.Name), Size: r*k + 1, Width: c.Width, Replicas: c.Replicas}}
		if cfg.Standardize {
			out = append(out, kvstore.TableSpec{Name: ScaleTable(c.Name), Size: uint64(c.Width), Replicas: c.Replicas})
		}
		if lloyd {
			workers := uint64(st.Workers)
			if workers == 0 {
				workers = maxAutoWorkers
			}
			// acc and far hold two iterations' sums (by parity), so
			// that an update whose worker died can be done again.
			out = append(out, kvstore.TableSpec{Name: cfg.Acc, Size: 2 * r * k, Width: c.Width + 2, Replicas: c.Replicas},
				kvstore.TableSpec{Name: FarTable(c.Name), Size: 2 * r * workers, Width: c.Width + 1, Replicas: c.Replicas},
				kvstore.TableSpec{Name: CtlTable(c.Name), Size: ctlKeys, Width: 1, DType: kvstore.Float64, Replicas: c.Replicas})
		}
		return out
	}
	return nil
}

// Config is the parameters of both stages.
type Config struct {
	K           int
	Iterations  int
	Seed        int64
	Sample      int
	Restarts    int
	Tol         float64
	Standardize bool
	Centers     string
	Acc         string
	Train       string
}

// ConfigFrom reads and checks the stage parameters.
func ConfigFrom(p tasks.Params) (Config, error) {
	if err := p.Known("k", "iterations", "seed", "sample", "restarts", "tol", "standardize", "centers", "train", "acc"); err != nil {
		return Config{}, fmt.Errorf("kmeans: %w", err)
	}
	if err := p.CheckInt("k", "iterations", "seed", "sample", "restarts"); err != nil {
		return Config{}, err
	}
	if err := p.Check("k", "iterations", "seed", "sample", "restarts", "tol"); err != nil {
		return Config{}, fmt.Errorf("kmeans: %w", err)
	}
	if v, ok := p["standardize"]; ok {
		if _, isBool := v.(bool); !isBool {
			return Config{}, fmt.Errorf("kmeans: param \"standardize\": want true or false, got %v", v)
		}
	}
	c := Config{K: p.Int("k", 0), Iterations: p.Int("iterations", 100), Seed: int64(p.Int("seed", 1)), Sample: p.Int("sample", 10000),
		Restarts: p.Int("restarts", 10), Tol: p.Float("tol", 1e-6), Standardize: p.Bool("standardize", false),
		Centers: p.String("centers", "centers"), Train: p.String("train", "train")}
	c.Acc = p.String("acc", AccTable(c.Centers))
	_, hasSample := p["sample"]
	_, hasK := p["k"]
	switch {
	case hasK && c.K < 1:
		// 0 is the unset k (the centers table's size): written
		// out, it was taken for that without a word.
		return c, fmt.Errorf("kmeans: k must be >= 1 (unset: the centers table's size), got %d", c.K)
	case c.Iterations < 1:
		return c, fmt.Errorf("kmeans: iterations must be >= 1, got %d", c.Iterations)
	case c.Sample < 1:
		return c, fmt.Errorf("kmeans: sample must be >= 1, got %d", c.Sample)
	case hasSample && c.K > 0 && c.Sample < c.K:
		return c, fmt.Errorf("kmeans: sample must be >= k (k-means++ seeds the k centers from the sample), got sample = %d, k = %d", c.Sample, c.K)
	case c.Restarts < 1 || c.Restarts > 1000:
		return c, fmt.Errorf("kmeans: restarts must be in [1, 1000], got %d", c.Restarts)
	case !(c.Tol >= 0):
		return c, fmt.Errorf("kmeans: tol must be >= 0, got %v", c.Tol)
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

// Centers are K dense centers of Dims coordinates with their squared
// norms, for the distance ||x||^2 - 2 x.c + ||c||^2 of a sparse point x:
// its cost is the point's non-zeros, not the dimensions. With weights Wt
// every term weighs feature f by Wt[f] (standardized distances).
type Centers struct {
	K, Dims int
	C       []float64 // K*Dims
	Wt      []float64 // per-feature weights, nil for plain Euclidean
	norm2   []float64
}

// NewCenters wraps c (k*dims values) and computes the norms.
func NewCenters(k, dims int, c []float64) *Centers {
	cs := &Centers{K: k, Dims: dims, C: c, norm2: make([]float64, k)}
	cs.Update()
	return cs
}

// Update recomputes the norms after C or Wt changed.
func (cs *Centers) Update() {
	for j := range cs.K {
		s := 0.0
		for f, v := range cs.C[j*cs.Dims : (j+1)*cs.Dims] {
			s += cs.weight(uint64(f)) * v * v
		}
		cs.norm2[j] = s
	}
}

func (cs *Centers) weight(f uint64) float64 {
	if cs.Wt == nil || f >= uint64(len(cs.Wt)) {
		return 1
	}
	return cs.Wt[f]
}

// ErrDims is wrapped when a point has a feature beyond the centers' width.
var ErrDims = errors.New("feature beyond the table width")

// ErrNotFinite is wrapped when a point has a NaN or infinite value.
var ErrNotFinite = errors.New("feature value is not finite")

// Norm2 is the point's (weighted) squared norm; strict reports features
// beyond Dims and non-finite values.
func (cs *Centers) Norm2(keys []uint64, vals []float64, strict bool) (float64, error) {
	x2 := 0.0
	for t, k := range keys {
		x2 += cs.weight(k) * vals[t] * vals[t]
		if strict && k >= uint64(cs.Dims) {
			return 0, fmt.Errorf("%w: feature key %d, width %d (table width must be the number of features)", ErrDims, k, cs.Dims)
		}
	}
	if strict && (math.IsNaN(x2) || math.IsInf(x2, 0)) {
		return 0, fmt.Errorf("%w: a record's squared norm is %v", ErrNotFinite, x2)
	}
	return x2, nil
}

// NearestIn returns the nearest of centers lo..hi-1 to the sparse point
// (keys, vals) of squared norm x2 (Norm2), and the squared distance.
// Features at or beyond Dims count against every center alike.
func (cs *Centers) NearestIn(lo, hi int, keys []uint64, vals []float64, x2 float64) (int, float64) {
	best, bestD := lo, 0.0
	for j := lo; j < hi; j++ {
		c := cs.C[j*cs.Dims : (j+1)*cs.Dims]
		dot := 0.0
		for t, k := range keys {
			if k < uint64(len(c)) {
				dot += cs.weight(k) * vals[t] * c[k]
			}
		}
		d := max(x2-2*dot+cs.norm2[j], 0)
		if j == lo || d < bestD {
			best, bestD = j, d
		}
	}
	return best, bestD
}

// Nearest returns the nearest center to the sparse point (keys, vals) and
// the squared distance; strict reports features beyond Dims and
// non-finite values.
func (cs *Centers) Nearest(keys []uint64, vals []float64, strict bool) (int, float64, error) {
	x2, err := cs.Norm2(keys, vals, strict)
	if err != nil {
		return 0, 0, err
	}
	j, d := cs.NearestIn(0, cs.K, keys, vals, x2)
	return j, d, nil
}

// checkDims reports a table whose width does not fit the centers.
func checkDims(t tasks.Table, name string, k, width int) error {
	spec := t.Spec()
	if spec.Width != width {
		return fmt.Errorf("kmeans: table %q has width %d, want %d (the centers' width + 2: sums, the count, the squared distances; leave it undeclared and the task adds it)", name, spec.Width, width)
	}
	if spec.Size < uint64(2*k) {
		return fmt.Errorf("kmeans: table %q has size %d, want >= %d (2 x k x restarts: two iterations' sums)", name, spec.Size, 2*k)
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
