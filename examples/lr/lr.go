// Package lr is binary logistic regression on sparse data, trained by
// mini-batch SGD on a flexps table: each batch reads the weights of the
// keys it touches (one Get), computes the logistic-loss gradient, adds
// -lr * gradient (one Add) and ends the iteration (Clock), so any
// consistency model and worker kind applies. Labels are 1 (positive) and 0
// or -1 (negative); any other label is an error.
//
// Real features come in very different magnitudes (frequencies in [0, 1]
// next to counts in the thousands), and plain SGD on them fails. So, like
// Spark MLlib's LogisticRegression, lr.sgd scales features and fits an
// intercept by default:
//
//   - standardize: a first pass over the training data (every worker its
//     share, summed into the table "<w>.scale") measures each feature's
//     sum, sum of squares and non-zero count. A feature non-zero in fewer
//     than half the rows is divided by the root mean square of its
//     non-zero values: zeros stay zeros, so sparse data stays sparse, and
//     a binary feature keeps the value 1 however rare it is. A feature
//     non-zero in at least half the rows (at most 1024 of them, the most
//     frequent) is, with the intercept on, centered and divided by its
//     standard deviation, as scikit-learn's StandardScaler does: a dense
//     feature with a large common offset (a radius of 14 +- 3.5) is
//     otherwise nearly collinear with the intercept, and SGD on it crawls
//     (10 shipped epochs ended 4-5 points below liblinear on scikit-learn's
//     breast cancer data). Centering is implicit: the centered features
//     join every batch (they are in nearly every one anyway) and the
//     intercept table holds the raw-space intercept, so the data stays
//     sparse and nothing else changes (see MiniBatch.Step). At the end of
//     the stage the weights are divided by the scales, so the saved model
//     works on raw data; a later lr.sgd stage on the same table reuses the
//     statistics. Dense tables only (a hashed, sparse feature space is
//     not scaled).
//   - intercept: a bias term in the table "<w>.bias" (not regularized).
//
// l2 (regularization l2/2 ||w||^2 of the weights the stage trains, the
// intercept excluded) decays every key at every step, applied lazily and
// exactly (see MiniBatch.Step): the table holds w / (1 - lr l2)^T within
// an epoch, and at its end the workers add their step counts into
// "<w>.steps" and, after a Barrier, multiply their share of the keys by
// the epoch's total decay. With one worker the result is dense SGD's bit
// for bit. With W workers, worker r's s-th step of an epoch is taken as
// step T = s W + r (the lockstep order) when it reads its keys (w = a^T v)
// and adds its gradient (in units of a^(T+1)), and the epoch ends with
// the exact decay a^N of all N steps. So every key gets exactly N steps'
// decay, and a gradient the table applies at true position P instead of
// T is decayed by a^(N-T-1) instead of a^(N-P-1): off by the factor
// a^(P-T). Under BSP with equal step counts |P - T| <= W - 1, under
// SSP(s) <= (s+1) W - 1, and a worker with k more batches than the others
// in an epoch shifts its last steps by up to k (W - 1) more; with lr l2 =
// 1e-3, 4 workers and BSP a step's size is off by at most 0.3%. The
// weights a step reads are off by the same factor. Measured on
// heart_scale against liblinear's minimum, every kind and consistency
// model ends as close as one worker does (TestL2ManyWorkers...).
//
// All helper tables are added to the task automatically (tasks.RegisterTables).
// The last epoch's test figures are measured after a barrier, on the
// weights as saved, so they equal what `flexps eval` reports for the
// model. A non-finite loss or gradient stops the stage with an error
// naming the epoch and the learning rate, and no model is written.
//
// Stage functions registered here:
//
//	lr.sgd   params: epochs (5), batch (100), lr (0.5), l2 (0), decay (0: lr/(1+decay*(epoch-1))),
//	         standardize (true for dense tables), intercept (true), read_ahead (false),
//	         table ("w"), train ("train"), test ("test", optional input)
//
// read_ahead (the ps kind): each step starts reading the next batch's
// weights before it computes its own, gated at the worker's next clock
// (kvstore.TableClient.GetNext), so the read stays within the staleness
// bound; under SSP or ASP it may miss the worker's own last update, under
// BSP it waits for it. The local kinds read in memory and ignore it.
package lr

import (
	"errors"
	"fmt"
	"math"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.Register("lr.sgd", SGD)
	tasks.RegisterTables("lr.sgd", Tables)
	tasks.RegisterParams("lr.sgd", func(p tasks.Params) error { _, err := ConfigFrom(p); return err })
	tasks.RegisterEpochs("lr.sgd", func(p tasks.Params) int { c, _ := ConfigFrom(p); return c.Epochs })
	tasks.RegisterInputs("lr.sgd", tasks.InputParam{Param: "train", Required: true, Labeled: true}, tasks.InputParam{Param: "test", Labeled: true})
	tasks.RegisterTaskParams("lr.sgd", tasks.AllOf(tableSetup, readAheadOnPS))
}

// readAheadOnPS refuses read_ahead on a stage whose model is in the
// workers' memory (the local, hogwild and single kinds): there is no read
// to start early, and it was accepted and ignored.
func readAheadOnPS(t *tasks.MultiStageTask) (int, string, error) {
	for i, s := range t.Stages {
		if s.Func != "lr.sgd" || s.WorkerKind == "" || s.WorkerKind == tasks.KindPS || !s.Params.Bool("read_ahead", false) {
			continue
		}
		return i, "read_ahead", fmt.Errorf("lr.sgd: read_ahead = true reads the next batch's weights from the KV-store early, for ps workers; a %s stage holds the model in memory and reads it at once: remove it", s.WorkerKind)
	}
	return -1, "", nil
}

// BiasTable and ScaleTable name the tables lr.sgd adds for weight table w.
func BiasTable(w string) string  { return w + ".bias" }
func ScaleTable(w string) string { return w + ".scale" }

// FixedBias is the intercept a stage that fits none (intercept = false)
// predicts with: the one another stage of the task fits in w's intercept
// table, kept as it is, since it stays in the model written and flexps
// eval scores with it; 0 when the task has no such table. Before, such a
// stage (lr.sgd, svrg.*) trained and measured its test figures as if it
// were 0.
func FixedBias(info *tasks.Info, w string) (float64, error) {
	bt, err := info.Table(BiasTable(w))
	if err != nil {
		return 0, nil // the task has no intercept
	}
	var b [1]float64
	if err := bt.Get(biasKey, b[:]); err != nil {
		return 0, fmt.Errorf("intercept table %q: %w", BiasTable(w), err)
	}
	return b[0], nil
}

// StepsTable names the step counter lr.sgd adds with l2 > 0: the steps of
// all workers so far, so each epoch's lazy regularization is applied in
// full.
func StepsTable(w string) string { return w + ".steps" }

// Tables is lr.sgd's tasks.TablesFunc: the intercept and scale tables the
// stage's parameters ask for.
func Tables(st tasks.Stage, declared []kvstore.TableSpec) []kvstore.TableSpec {
	name := st.Params.String("table", "w")
	for _, w := range declared {
		if w.Name == name {
			out := AuxTables(w, st.Params.Bool("intercept", true), st.Params.Bool("standardize", StandardizeDefault(w)))
			if st.Params.Float("l2", 0) > 0 {
				out = append(out, kvstore.TableSpec{Name: StepsTable(name), Size: 1, Replicas: w.Replicas})
			}
			return out
		}
	}
	return nil
}

// StandardizeDefault is the default of the standardize parameter for
// weight table w: on for dense tables (a hashed, sparse feature space is
// not scaled).
func StandardizeDefault(w kvstore.TableSpec) bool { return w.WithDefaults().Storage == kvstore.Dense }

// AuxTables declares the tables a linear model on weight table w needs:
// BiasTable(w) (one key) with an intercept, ScaleTable(w) (per feature:
// sum of squares and count of non-zero values; key Size marks statistics
// as gathered) with standardization. They are replicated as w is: a
// `replicas = 1` model keeps its intercept unreplicated too (replicated,
// every intercept Add went through the head and its backup).
func AuxTables(w kvstore.TableSpec, intercept, standardize bool) []kvstore.TableSpec {
	var out []kvstore.TableSpec
	if intercept {
		out = append(out, kvstore.TableSpec{Name: BiasTable(w.Name), Size: 1, Replicas: w.Replicas})
	}
	if standardize {
		out = append(out, kvstore.TableSpec{Name: ScaleTable(w.Name), Size: w.Size + 1, Width: ScaleWidth, Partition: w.Partition, Replicas: w.Replicas})
	}
	return out
}

// BoolParams checks that params keys, when given, are true or false.
func BoolParams(p tasks.Params, keys ...string) error {
	for _, k := range keys {
		if v, ok := p[k]; ok {
			if _, isBool := v.(bool); !isBool {
				return fmt.Errorf("param %q: want true or false, got %v", k, v)
			}
		}
	}
	return nil
}

// Config is lr.sgd's parameters.
type Config struct {
	Epochs      int
	Batch       int
	LR          float64
	L2          float64
	Decay       float64
	Standardize bool
	Intercept   bool
	// ReadAhead: each step starts reading the next batch's weights
	// before it computes its own (MiniBatch.SetNext).
	ReadAhead bool
	Table     string
	Train     string
	Test      string
}

// ConfigFrom reads and checks the stage parameters.
func ConfigFrom(p tasks.Params) (Config, error) {
	if err := p.Known("epochs", "batch", "lr", "l2", "decay", "standardize", "intercept", "read_ahead", "table", "train", "test"); err != nil {
		return Config{}, fmt.Errorf("lr.sgd: %w", err)
	}
	if err := p.Check("epochs", "batch", "lr", "l2", "decay"); err != nil {
		return Config{}, err
	}
	if err := p.CheckInt("epochs", "batch"); err != nil {
		return Config{}, err
	}
	if err := BoolParams(p, "standardize", "intercept", "read_ahead"); err != nil {
		return Config{}, fmt.Errorf("lr: %w", err)
	}
	c := Config{Epochs: p.Int("epochs", 5), Batch: p.Int("batch", 100), LR: p.Float("lr", 0.5), L2: p.Float("l2", 0),
		Decay: p.Float("decay", 0), Intercept: p.Bool("intercept", true), ReadAhead: p.Bool("read_ahead", false),
		Table: p.String("table", "w"), Train: p.String("train", "train"), Test: p.String("test", "test")}
	switch {
	case c.Epochs < 1:
		return c, fmt.Errorf("lr: epochs must be >= 1, got %d", c.Epochs)
	case c.Batch < 1:
		return c, fmt.Errorf("lr: batch must be >= 1, got %d", c.Batch)
	case !(c.LR > 0):
		return c, fmt.Errorf("lr: lr must be > 0, got %v", c.LR)
	case c.L2 < 0:
		return c, fmt.Errorf("lr: l2 must be >= 0, got %v", c.L2)
	case c.Decay < 0:
		return c, fmt.Errorf("lr: decay must be >= 0, got %v (the learning rate is lr / (1 + decay (epoch - 1)))", c.Decay)
	}
	return c, nil
}

// divergedLoss is the mean log-loss of an epoch taken as divergence: the
// model gives the true label a probability below e^-1000 on average, which
// no training that converges passes through.
const divergedLoss = 1000

// SGD is the lr.sgd stage function.
func SGD(info *tasks.Info) error {
	cfg, err := ConfigFrom(info.Params)
	if err != nil {
		return err
	}
	w, err := info.Table(cfg.Table)
	if err != nil {
		return err
	}
	if wd := w.Spec().Width; wd != 1 {
		// A weight per feature: with more values per key every read
		// failed deep in the store ("17 values for 17 keys of width 2").
		return fmt.Errorf("lr: table %q: width must be 1 (one weight per feature), got %d", cfg.Table, wd)
	}
	cfg.Standardize = info.Params.Bool("standardize", w.Spec().Storage == kvstore.Dense)
	if cfg.Standardize && w.Spec().Storage != kvstore.Dense {
		return fmt.Errorf("lr: standardize needs a dense table; table %q is %s (set standardize = false)", cfg.Table, w.Spec().Storage)
	}
	train, err := info.Input(cfg.Train)
	if err != nil {
		return err
	}
	test, err := info.OptionalInput("test", cfg.Test)
	if err != nil {
		return fmt.Errorf("lr: %w", err)
	}
	if err := tasks.CheckFormat(train, cfg.Train, "lr.sgd", "libsvm", "csv"); err != nil {
		return err
	}
	if test != nil {
		if err := tasks.CheckFormat(test, cfg.Test, "lr.sgd", "libsvm", "csv"); err != nil {
			return err
		}
	}
	m := NewMiniBatch(w)
	m.Occurrences = info.WorkerKind == tasks.KindLocal || info.WorkerKind == tasks.KindSingle
	m.Merge = info.WorkerKind == tasks.KindHogwild
	if cfg.Intercept {
		if m.bias, err = info.Table(BiasTable(cfg.Table)); err != nil {
			return fmt.Errorf("lr: intercept: %w (the task adds it when lr.sgd is registered; or set intercept = false)", err)
		}
	} else if m.FixedBias, err = FixedBias(info, cfg.Table); err != nil {
		return err
	}
	if cfg.Standardize {
		st, err := info.Table(ScaleTable(cfg.Table))
		if err != nil {
			return fmt.Errorf("lr: standardize: %w (or set standardize = false)", err)
		}
		if m.scale, err = PrepareScale(info, st, w.Spec().Size, train); err != nil {
			return err
		}
		if cfg.Intercept {
			// Without an intercept centering would change the model.
			m.cent = m.scale.Center()
		}
		// The table holds raw-space weights between stages; train on
		// scaled features with scaled weights. A stage resumed from a
		// checkpoint taken mid-stage holds scaled weights already.
		if info.StartEpoch == 0 {
			if err := rescale(info, w, m.scale, true); err != nil {
				return err
			}
		}
	}
	var steps tasks.Table
	if cfg.L2 > 0 {
		if steps, err = info.Table(StepsTable(cfg.Table)); err != nil {
			return fmt.Errorf("lr: l2: %w (the task adds it when lr.sgd is registered)", err)
		}
	}
	stepsBefore := 0.0 // all workers' steps before this epoch
	if steps != nil && info.StartEpoch > 0 {
		// Resumed: the restored counter holds the earlier epochs' steps.
		var total [1]float64
		if err := steps.Get(biasKey, total[:]); err != nil {
			return fmt.Errorf("lr: l2: %w", err)
		}
		stepsBefore = total[0]
	}
	for epoch := info.StartEpoch + 1; epoch <= cfg.Epochs; epoch++ {
		lr := cfg.LR / (1 + cfg.Decay*float64(epoch-1))
		var st Stats
		mine := 0 // this worker's steps in the epoch
		step := func(r *datastore.Records, lo, hi int) error {
			// The lockstep order of the epoch's steps: exact for one worker.
			m.T = float64(mine*info.Workers + info.Rank)
			mine++
			bs, err := m.Step(r, lo, hi, lr, cfg.L2)
			if err != nil {
				// A key outside the table is the data's fault: say where.
				if e := KeyOutside(r, lo, hi, w.Spec()); e != nil {
					return e
				}
				return err
			}
			if math.IsNaN(bs.LossSum) || math.IsInf(bs.LossSum, 0) || !m.finite {
				// Wrapped below with the stage and epoch.
				return fmt.Errorf("the training loss became %v: the learning rate (lr = %g) is likely too large", bs.LossSum/float64(bs.N), lr)
			}
			st.Add(bs)
			info.Report(int64(hi-lo), bs.LossSum)
			return info.Clock()
		}
		if cfg.ReadAhead {
			err = tasks.EachBatchAhead(info.Ctx, train, cfg.Batch, func(cur, next tasks.Batch) error {
				if next.R != nil {
					m.SetNext(next.R, next.Lo, next.Hi)
				}
				err := step(cur.R, cur.Lo, cur.Hi)
				if err != nil && next.R != nil {
					// The failed read may be the next batch's.
					if e := KeyOutside(next.R, next.Lo, next.Hi, w.Spec()); e != nil {
						return e
					}
				}
				return err
			})
		} else {
			err = tasks.EachBatch(info.Ctx, train, cfg.Batch, step)
		}
		if err != nil {
			return fmt.Errorf("lr.sgd: stage %q epoch %d: %w", info.StageName, epoch, err)
		}
		if steps != nil {
			if stepsBefore, err = applyDecay(info, w, steps, stepsBefore, mine, 1-lr*cfg.L2); err != nil {
				return err
			}
		}
		if st.N > 0 && st.LossSum/float64(st.N) > divergedLoss {
			return fmt.Errorf("lr.sgd: stage %q epoch %d: mean training loss %.3g: training diverged; the learning rate (lr = %g) is likely too large", info.StageName, epoch, st.LossSum/float64(st.N), lr)
		}
		metrics := map[string]float64{tasks.MetricSamples: float64(st.N), tasks.MetricLossSum: st.LossSum, tasks.MetricCorrect: float64(st.Correct)}
		if epoch == cfg.Epochs {
			// The last epoch's test figures are the saved model's: every
			// worker's last Add applied, the weights back in raw space.
			if err := info.Barrier(); err != nil {
				return err
			}
			if m.scale != nil {
				if err := rescale(info, w, m.scale, false); err != nil {
					return err
				}
				m.scale = nil
			}
		}
		if test != nil {
			var ts Stats
			var within datastore.Records
			err := tasks.EachBatch(info.Ctx, test, 1000, func(r *datastore.Records, lo, hi int) error {
				if err := CSVWider(r, lo, hi, w.Spec()); err != nil {
					return err
				}
				r, lo, hi = withinTable(r, lo, hi, w.Spec().Size, &within)
				bs, err := m.Eval(r, lo, hi)
				ts.Add(bs)
				if err != nil {
					if e := KeyOutside(r, lo, hi, w.Spec()); e != nil {
						return e
					}
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("lr: test input: %w", err)
			}
			metrics[tasks.MetricTestSamples], metrics[tasks.MetricTestLossSum], metrics[tasks.MetricTestCorrect] = float64(ts.N), ts.LossSum, float64(ts.Correct)
		}
		info.ReportEpoch(epoch, metrics)
	}
	return nil
}

// withinTable returns records lo..hi of r without the features whose keys
// are outside a table of size keys (into buf, when there are any): a test
// file may hold features the training data never had, and the model gives
// them weight 0, as EvalModel (flexps eval) and liblinear's predict do.
func withinTable(r *datastore.Records, lo, hi int, size uint64, buf *datastore.Records) (*datastore.Records, int, int) {
	outside := false
	for _, k := range r.Keys[r.Offsets[lo]:r.Offsets[hi]] {
		outside = outside || k >= size
	}
	if !outside {
		return r, lo, hi
	}
	buf.Reset()
	var keys []uint64
	var vals []float64
	for i := lo; i < hi; i++ {
		label, ks, vs := r.Row(i)
		keys, vals = keys[:0], vals[:0]
		for j, k := range ks {
			if k < size {
				keys, vals = append(keys, k), append(vals, vs[j])
			}
		}
		buf.Append(label, keys, vals)
	}
	return buf, 0, buf.Len()
}

// minDecay bounds a^T within an epoch, so v = w / a^T keeps w's precision.
const minDecay = 1e-200

// applyDecay ends an epoch's lazy l2: every worker adds its steps to the
// counter, and after a Barrier (all Adds applied) each multiplies its share
// of the keys by a^(steps of all workers this epoch), so the table holds w
// again. It returns the counter's new total.
func applyDecay(info *tasks.Info, w, steps tasks.Table, before float64, mine int, a float64) (float64, error) {
	if err := steps.Add(biasKey, []float64{float64(mine)}); err != nil {
		return 0, err
	}
	if err := info.Barrier(); err != nil {
		return 0, err
	}
	var total [1]float64
	if err := steps.Get(biasKey, total[:]); err != nil {
		return 0, err
	}
	f := math.Pow(a, total[0]-before)
	return total[0], mulShare(info, w, func(_ []uint64, v []float64) error {
		for i := range v {
			v[i] *= f
		}
		return nil
	})
}

func init() {
	tasks.RegisterEvaluator("lr", tasks.Evaluator{Format: "libsvm", Formats: []string{"libsvm", "csv"}, Labeled: true, Eval: EvalModel})
}

// EvalModel scores a saved LR model (table "w", or the one its task's
// table param named, and its intercept "w.bias" when the model has one)
// on records.
func EvalModel(model *tasks.Model, data *datastore.Records) (map[string]float64, error) {
	name := model.TableName("table", "w")
	t, ok := model.Table(name)
	if !ok {
		return nil, fmt.Errorf("lr model has no table %q", name)
	}
	if t.Spec.Width != 1 {
		return nil, fmt.Errorf("lr model: table %q has %d values per key, want 1", name, t.Spec.Width)
	}
	// A dense table is read in place; a keyed (sparse, hashed) one by
	// lookup: its key space may be far too large for an array.
	var w []float64
	if t.Keys == nil {
		w = t.Vals
	}
	if cfg, scaled, err := scaledStage(model, name); err != nil {
		return nil, err
	} else if scaled {
		st, ok := model.Table(ScaleTable(name))
		if !ok {
			return nil, fmt.Errorf("lr model: a checkpoint of a standardizing stage without table %q", ScaleTable(name))
		}
		if w, err = rawWeights(t.DenseValues(), st, cfg.Intercept); err != nil {
			return nil, err
		}
	}
	var buf [1]float64
	b := 0.0
	if bt, ok := model.Table(BiasTable(name)); ok && bt.Spec.Size > 0 {
		b = bt.Lookup(0, buf[:])[0]
	}
	if err := CSVWider(data, 0, data.Len(), t.Spec); err != nil {
		return nil, err
	}
	var st Stats
	var seen Negatives
	for i := 0; i < data.Len(); i++ {
		_, keys, vals := data.Row(i)
		z := b
		for j, k := range keys {
			switch {
			case w != nil:
				if k < uint64(len(w)) {
					z += w[k] * vals[j]
				}
			case k < t.Spec.Size:
				z += t.Lookup(k, buf[:])[0] * vals[j]
			}
		}
		y, err := labelOf(data, i, &seen)
		if err != nil {
			return nil, err
		}
		st.N++
		st.LossSum += LogLoss(z, y)
		if (z > 0) == (y == 1) {
			st.Correct++
		}
	}
	if st.N == 0 {
		return nil, errors.New("no records")
	}
	return map[string]float64{"accuracy": float64(st.Correct) / float64(st.N), "logloss": st.LossSum / float64(st.N)}, nil
}
