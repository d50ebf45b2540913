// Package mf is matrix factorization of a ratings matrix by mini-batch SGD
// on flexps tables: a rating r(u, i) is predicted as
//
//	mu + b_u + b_i + (p_u + z_u) . q_i
//
// with p_u a row of table "users" and q_i a row of table "items" (width =
// rank), the global mean mu (table "bias", size 1), the user and item
// biases (tables "user_bias" and "item_bias") and the implicit feedback
// z_u of SVD++ (implicit.go: from the items u rated, tables
// "users.implicit" and "items.implicit"). The stage adds the bias and
// implicit tables to the task itself (tasks.RegisterTables), so they are
// part of the saved model and the evaluator uses them; biases = false and
// implicit = false leave them out (p_u . q_i alone), unless another stage
// of the task trains them: then the stage predicts with them, fixed.
//
// Before the first epoch the workers count, in one pass over their share
// of the training input, the ratings of every user and item into the
// tables "users.count" and "items.count" (width 2: count and sum of
// ratings; the extra key Size holds the totals and marks the counts as
// gathered, so a later stage does not count again), and mu starts at the
// mean training rating. The counts make the regularization data-set
// independent: each rating of user u shrinks p_u by (l2/n_u), so over an
// epoch every row is shrunk by l2 whatever its number of ratings, which is
// SGD on the objective ALS minimizes:
//
//	sum (r - pred)^2 + l2 (|p_u|^2 + |q_i|^2) + l2_bias (b_u^2 + b_i^2)
//
// where per-rating L2 (without counts) punishes the heavy raters' rows
// hardest and barely touches the rows that overfit, the rare ones. The
// right strength depends on how noisy the ratings are (it is the noise
// variance over the factors' prior variance), so l2 and l2_bias are
// multiplied each epoch by the previous epoch's training MSE over the
// variance of the ratings (1 in the first epoch): on InstEval, where
// biases explain little and noise the rest, that keeps the factors from
// fitting noise; on a low-rank matrix the regularization fades as the fit
// improves. One set of defaults serves both.
//
// A batch reads the rows of its distinct users and items (one Get per
// table), runs SGD over its ratings in order on that local copy, adds the
// differences back (one Add per table) and ends the iteration (Clock), so
// any consistency model and worker kind applies. mu is shared by every
// rating, so each worker adds 1/workers of its change: summed over
// concurrent workers that is their average, where the plain sum would
// overshoot workers-fold. The learning rate of epoch e (from 1) is
// lr / (1 + decay (e-1)). A non-finite error or update stops the stage
// with an error naming the stage, epoch and learning rate, before it
// reaches the tables, so no model is written. Every epoch ends at a
// barrier before the test input is scored, so the last epoch's test RMSE
// is that of the model written.
//
// Stage functions registered here:
//
//	mf.sgd   params: rank (the tables' width), epochs (20), batch (500), lr (0.05),
//	         decay (0.1), l2 (25), l2_bias (12), biases (true), implicit (true),
//	         users ("users"), items ("items"), bias ("bias"), user_bias ("user_bias"),
//	         item_bias ("item_bias"), train ("train"), test ("test", optional input)
//
// Each epoch reports samples, sq_err_sum and abs_err_sum (training error,
// measured on each rating just before its update) and, with a test input,
// test_samples, test_sq_err_sum and test_abs_err_sum: the job table prints
// rmse, mae, test_rmse and test_mae. The model kind "mf" has an evaluator:
// RMSE and MAE on a ratings file.
//
// Ids are 0-based keys: a user or item id outside its table (a 1-based
// file read into a table sized for 0-based ids) is an error naming the
// input file, its line and the table.
package mf

import (
	"errors"
	"fmt"
	"math"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.Register("mf.sgd", SGD)
	tasks.RegisterTables("mf.sgd", AddTables)
	tasks.RegisterParams("mf.sgd", func(p tasks.Params) error { _, err := ConfigFrom(p); return err })
	tasks.RegisterEpochs("mf.sgd", func(p tasks.Params) int { c, _ := ConfigFrom(p); return c.Epochs })
	tasks.RegisterInputs("mf.sgd", tasks.InputParam{Param: "train", Required: true}, tasks.InputParam{Param: "test"})
	tasks.RegisterTaskParams("mf.sgd", tasks.AllOf(rankFits, tasks.DenseInMemory("mf.sgd", "users", "items", "bias", "user_bias", "item_bias"), tasks.FactorsStartRandom("mf.sgd", "users", "items")))
}

// rankFits checks, at submission, that the factor tables of every mf.sgd
// stage are as wide as its rank (unset: the users table's width), as the
// stage does when it starts: there a mismatch came after the stages
// before it had run.
func rankFits(t *tasks.MultiStageTask) (int, string, error) {
	for i, s := range t.Stages {
		if s.Func != "mf.sgd" {
			continue
		}
		cfg, err := ConfigFrom(s.Params)
		if err != nil {
			continue // refused by the params check
		}
		rank, key := cfg.Rank, "rank"
		if rank == 0 {
			key = ""
		}
		for _, name := range []string{cfg.Users, cfg.Items} {
			spec, ok := t.TableSpec(name)
			if !ok {
				continue // a missing table is named when the stage opens it
			}
			if rank == 0 {
				rank = spec.Width
			}
			if spec.Width != rank {
				return i, key, fmt.Errorf("mf: table %q has width %d but rank = %d (the factor tables' width is the rank)", name, spec.Width, rank)
			}
		}
	}
	return -1, "", nil
}

// CountTable names the per-id rating counts mf.sgd keeps for factor table t.
func CountTable(t string) string { return t + ".count" }

// Config is mf.sgd's parameters.
type Config struct {
	Rank     int
	Epochs   int
	Batch    int
	LR       float64
	Decay    float64
	L2       float64 // factor rows, per row and epoch (divided among the row's ratings)
	L2Bias   float64 // user and item biases, likewise
	Biases   bool
	Implicit bool // SVD++'s implicit feedback (implicit.go)
	Users    string
	Items    string
	Bias     string
	UserBias string
	ItemBias string
	Train    string
	Test     string
}

// ConfigFrom reads and checks the stage parameters.
func ConfigFrom(p tasks.Params) (Config, error) {
	if err := p.Known("rank", "epochs", "batch", "lr", "l2", "l2_bias", "decay", "biases", "implicit", "users", "items", "bias", "user_bias", "item_bias", "train", "test"); err != nil {
		return Config{}, fmt.Errorf("mf.sgd: %w", err)
	}
	if err := p.CheckInt("rank", "epochs", "batch"); err != nil {
		return Config{}, err
	}
	if err := p.Check("rank", "epochs", "batch", "lr", "l2", "l2_bias", "decay"); err != nil {
		return Config{}, fmt.Errorf("mf: %w", err)
	}
	for _, k := range []string{"biases", "implicit"} {
		if v, ok := p[k]; ok {
			if _, isBool := v.(bool); !isBool {
				return Config{}, fmt.Errorf("mf: param %q: want true or false, got %v", k, v)
			}
		}
	}
	c := Config{Rank: p.Int("rank", 0), Epochs: p.Int("epochs", 20), Batch: p.Int("batch", 500), LR: p.Float("lr", 0.05),
		Decay: p.Float("decay", 0.1), L2: p.Float("l2", 25), Biases: p.Bool("biases", true),
		Implicit: p.Bool("implicit", true),
		Users:    p.String("users", "users"), Items: p.String("items", "items"), Bias: p.String("bias", "bias"),
		UserBias: p.String("user_bias", "user_bias"), ItemBias: p.String("item_bias", "item_bias"),
		Train: p.String("train", "train"), Test: p.String("test", "test")}
	c.L2Bias = p.Float("l2_bias", 12)
	_, rankSet := p["rank"]
	switch {
	case rankSet && c.Rank < 1:
		// 0 is the unset rank (the tables' width): written out, it
		// was taken for that without a word.
		return c, fmt.Errorf("mf: rank must be >= 1 (unset: the factor tables' width), got %d", c.Rank)
	case c.Epochs < 1:
		return c, fmt.Errorf("mf: epochs must be >= 1, got %d", c.Epochs)
	case c.Batch < 1:
		return c, fmt.Errorf("mf: batch must be >= 1, got %d", c.Batch)
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return c, fmt.Errorf("mf: lr must be a finite number > 0, got %v", c.LR)
	case c.L2 < 0:
		return c, fmt.Errorf("mf: l2 must be >= 0, got %v", c.L2)
	case c.L2Bias < 0:
		return c, fmt.Errorf("mf: l2_bias must be >= 0, got %v", c.L2Bias)
	case c.Decay < 0:
		return c, fmt.Errorf("mf: decay must be >= 0, got %v", c.Decay)
	}
	return c, nil
}

// AddTables is mf.sgd's tasks.TablesFunc: the bias tables (unless biases
// = false) and the rating counts, sized after the declared factor tables
// and stored as they are (sparse factor tables of hashed ids get sparse
// biases and counts: dense ones of their size would not fit).
func AddTables(st tasks.Stage, declared []kvstore.TableSpec) []kvstore.TableSpec {
	users, items := st.Params.String("users", "users"), st.Params.String("items", "items")
	var out []kvstore.TableSpec
	if st.Params.Bool("biases", true) {
		// The global bias is replicated as the user factors are.
		replicas := 0
		for _, t := range declared {
			if t.Name == users {
				replicas = t.Replicas
			}
		}
		out = append(out, kvstore.TableSpec{Name: st.Params.String("bias", "bias"), Size: 1, Replicas: replicas})
	}
	for _, t := range declared {
		var bias string
		switch t.Name {
		case users:
			bias = st.Params.String("user_bias", "user_bias")
		case items:
			bias = st.Params.String("item_bias", "item_bias")
		default:
			continue
		}
		if st.Params.Bool("biases", true) {
			out = append(out, kvstore.TableSpec{Name: bias, Size: t.Size, Storage: t.Storage, Partition: t.Partition, Replicas: t.Replicas})
		}
		if st.Params.Bool("implicit", true) {
			// Zero-initialized: z_u = 0 until the first epoch's steps reach the y_j.
			rank := max(t.Width, 1)
			if t.Name == users {
				out = append(out, kvstore.TableSpec{Name: UserImplicitTable(t.Name), Size: t.Size, Width: 2 * rank, Storage: t.Storage, Partition: t.Partition, Replicas: t.Replicas})
			} else {
				out = append(out, kvstore.TableSpec{Name: ItemImplicitTable(t.Name), Size: t.Size, Width: rank, Storage: t.Storage, Partition: t.Partition, Replicas: t.Replicas})
			}
		}
		out = append(out, kvstore.TableSpec{Name: CountTable(t.Name), Size: t.Size + 1, Width: countWidth, Storage: t.Storage, Partition: t.Partition, Replicas: t.Replicas})
	}
	return out
}

// Tables are the model's tables as a worker holds them; the bias tables
// are nil with biases = false, the implicit ones with implicit = false,
// unless another stage of the task trains them: then this stage opens
// them fixed (FixedBiases, FixedImplicit), to predict with as they are,
// since they are in the model written and flexps eval scores with them.
type Tables struct {
	Users, Items, Bias, UserBias, ItemBias tasks.Table
	UserCount, ItemCount                   tasks.Table
	UserImplicit, ItemImplicit             tasks.Table // nil without implicit feedback
	FixedBiases, FixedImplicit             bool
}

// openTables opens and checks the tables: the factor tables must have
// width rank (rank 0 takes the users table's width), the bias tables width
// 1 and the per-user/per-item ones at least the factor tables' sizes.
func openTables(info *tasks.Info, cfg *Config) (Tables, error) {
	var t Tables
	var err error
	if t.Users, err = info.Table(cfg.Users); err != nil {
		return t, fmt.Errorf("mf: %w", err)
	}
	if t.Items, err = info.Table(cfg.Items); err != nil {
		return t, fmt.Errorf("mf: %w", err)
	}
	if cfg.Rank == 0 {
		cfg.Rank = t.Users.Spec().Width
	}
	for _, x := range []struct {
		name string
		tab  tasks.Table
	}{{cfg.Users, t.Users}, {cfg.Items, t.Items}} {
		if w := x.tab.Spec().Width; w != cfg.Rank {
			return t, fmt.Errorf("mf: table %q has width %d but rank = %d (the factor tables' width is the rank)", x.name, w, cfg.Rank)
		}
	}
	open := func(name string, width int, size uint64) (tasks.Table, error) {
		tab, err := info.Table(name)
		if err != nil {
			return nil, fmt.Errorf("mf: %w", err)
		}
		spec := tab.Spec()
		if spec.Width != width || spec.Size < size {
			return nil, fmt.Errorf("mf: table %q has size %d width %d, want width %d and size >= %d", name, spec.Size, spec.Width, width, size)
		}
		return tab, nil
	}
	if t.UserCount, err = open(CountTable(cfg.Users), countWidth, t.Users.Spec().Size+1); err != nil {
		return t, err
	}
	if t.ItemCount, err = open(CountTable(cfg.Items), countWidth, t.Items.Spec().Size+1); err != nil {
		return t, err
	}
	// A table this stage does not train but another stage of the task
	// does (the task has it) is opened fixed. Before, the stage predicted
	// without it while the model written kept it: biases = false after a
	// stage with biases printed a test RMSE of 0.90, flexps eval 3.05.
	_, err = info.Table(UserImplicitTable(cfg.Users))
	t.FixedImplicit = !cfg.Implicit && err == nil
	if cfg.Implicit || t.FixedImplicit {
		if t.UserImplicit, err = open(UserImplicitTable(cfg.Users), 2*cfg.Rank, t.Users.Spec().Size); err != nil {
			return t, err
		}
		if t.ItemImplicit, err = open(ItemImplicitTable(cfg.Items), cfg.Rank, t.Items.Spec().Size); err != nil {
			return t, err
		}
	}
	_, err = info.Table(cfg.Bias)
	t.FixedBiases = !cfg.Biases && err == nil
	if !cfg.Biases && !t.FixedBiases {
		return t, nil
	}
	if t.Bias, err = open(cfg.Bias, 1, 1); err != nil {
		return t, err
	}
	if t.UserBias, err = open(cfg.UserBias, 1, t.Users.Spec().Size); err != nil {
		return t, err
	}
	if t.ItemBias, err = open(cfg.ItemBias, 1, t.Items.Spec().Size); err != nil {
		return t, err
	}
	return t, nil
}

// minNoise bounds the L2 scaling from below: a model that fits its
// training ratings exactly keeps some regularization.
const minNoise = 1e-3

// ErrDiverged marks a stage stopped by a non-finite error or update.
var ErrDiverged = errors.New("diverged")

// SGD is the mf.sgd stage function.
func SGD(info *tasks.Info) error {
	cfg, err := ConfigFrom(info.Params)
	if err != nil {
		return err
	}
	tabs, err := openTables(info, &cfg)
	if err != nil {
		return err
	}
	train, err := info.Input(cfg.Train)
	if err != nil {
		return fmt.Errorf("mf: %w", err)
	}
	test, err := info.OptionalInput("test", cfg.Test)
	if err != nil {
		return fmt.Errorf("mf: %w", err)
	}
	for name, in := range map[string]tasks.Input{cfg.Train: train, cfg.Test: test} {
		if in != nil {
			if err := tasks.CheckFormat(in, name, "mf.sgd", "ratings"); err != nil {
				return err
			}
		}
	}
	variance, err := prepareCounts(info, tabs, train, cfg)
	if err != nil {
		return err
	}
	m := NewMiniBatch(tabs, cfg.Rank)
	m.BiasShare = 1 / float64(max(info.Workers, 1))
	m.trainName = cfg.Train
	for _, s := range []*side{m.users, m.items} {
		if err := s.loadCounts(); err != nil {
			return fmt.Errorf("mf: counts: %w", err)
		}
	}
	noise := 1.0 // residual variance / rating variance, measured each epoch
	if info.StartEpoch > 0 && variance > 0 {
		// Resumed from a checkpoint: the last epoch's training error went
		// with the run that measured it. Measure it on the restored model
		// (after that epoch's steps, where the run measured it as they
		// went: a little lower). Before, the resumed epoch took 1 and
		// regularized several times too hard (test RMSE 0.54 against 0.35
		// in the epoch after a resume: TestMFResumeKeepsTheRegularization).
		var st Stats
		err := tasks.EachBatch(info.Ctx, train, 4096, func(r *datastore.Records, lo, hi int) error {
			bs, err := m.Eval(r, lo, hi)
			st.Add(bs)
			return err
		})
		if err != nil {
			return fmt.Errorf("mf: stage %q: measuring the restored model's training error: input %q: %w", info.StageName, cfg.Train, err)
		}
		if st.N > 0 {
			noise = min(max(st.SqErr/float64(st.N)/variance, minNoise), 1)
		}
	}
	for epoch := info.StartEpoch + 1; epoch <= cfg.Epochs; epoch++ {
		h := Hyper{LR: cfg.LR / (1 + cfg.Decay*float64(epoch-1)), L2: cfg.L2 * noise, L2Bias: cfg.L2Bias * noise}
		var st Stats
		err := tasks.EachBatch(info.Ctx, train, cfg.Batch, func(r *datastore.Records, lo, hi int) error {
			bs, err := m.Step(r, lo, hi, h)
			if err != nil {
				return err
			}
			st.Add(bs)
			info.Report(bs.N, bs.SqErr)
			return info.Clock()
		})
		if errors.Is(err, ErrDiverged) {
			return fmt.Errorf("mf: stage %q epoch %d: %w at lr %g: lower lr (or raise l2)", info.StageName, epoch, err, h.LR)
		}
		if err != nil {
			return fmt.Errorf("mf: stage %q epoch %d: input %q: %w", info.StageName, epoch, cfg.Train, err)
		}
		if st.N > 0 && variance > 0 {
			noise = min(max(st.SqErr/float64(st.N)/variance, minNoise), 1)
		}
		metrics := map[string]float64{tasks.MetricSamples: float64(st.N), tasks.MetricSqErrSum: st.SqErr, tasks.MetricAbsErrSum: st.AbsErr}
		if cfg.Biases || cfg.Implicit {
			if err := info.Barrier(); err != nil {
				return fmt.Errorf("mf: stage %q epoch %d: %w", info.StageName, epoch, err)
			}
		}
		if cfg.Biases {
			if err := refitBiases(info, m, train, cfg, h.L2Bias); err != nil {
				return fmt.Errorf("mf: stage %q epoch %d: bias refit: %w", info.StageName, epoch, err)
			}
		}
		if cfg.Implicit {
			err := m.imp.endEpoch(info, m, train, h.LR, h.L2)
			if errors.Is(err, ErrDiverged) {
				return fmt.Errorf("mf: stage %q epoch %d: implicit feedback: %w at lr %g: lower lr (or raise l2)", info.StageName, epoch, err, h.LR)
			}
			if err != nil {
				return fmt.Errorf("mf: stage %q epoch %d: implicit feedback: %w", info.StageName, epoch, err)
			}
		}
		// Every worker's Adds of this epoch are applied before the test
		// input is scored: the last epoch's figure is the written model's.
		if err := info.Barrier(); err != nil {
			return fmt.Errorf("mf: stage %q epoch %d: %w", info.StageName, epoch, err)
		}
		if test != nil {
			var ts Stats
			err := tasks.EachBatch(info.Ctx, test, 4096, func(r *datastore.Records, lo, hi int) error {
				bs, err := m.Eval(r, lo, hi)
				ts.Add(bs)
				return err
			})
			if err != nil {
				return fmt.Errorf("mf: stage %q epoch %d: input %q: %w", info.StageName, epoch, cfg.Test, err)
			}
			metrics[tasks.MetricTestSamples], metrics[tasks.MetricTestSqErrSum], metrics[tasks.MetricTestAbsErrSum] = float64(ts.N), ts.SqErr, ts.AbsErr
		}
		info.ReportEpoch(epoch, metrics)
	}
	return nil
}

// Stats are a batch's or an epoch's counts.
type Stats struct {
	N      int64
	SqErr  float64
	AbsErr float64
}

// Add accumulates o.
func (s *Stats) Add(o Stats) { s.N += o.N; s.SqErr += o.SqErr; s.AbsErr += o.AbsErr }
