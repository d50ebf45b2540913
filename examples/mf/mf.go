// Package mf is matrix factorization of a ratings matrix by mini-batch SGD
// on flexps tables: a rating r(u, i) is predicted as
//
//	mu + b_u + b_i + p_u . q_i
//
// with p_u a row of table "users" and q_i a row of table "items" (width =
// rank); the global bias mu (table "bias", size 1), the user biases (table
// "user_bias", size = users) and the item biases (table "item_bias", size =
// items) are each used when the task declares the table. A batch reads the
// rows of its distinct users and items (one Get per table), runs SGD with
// L2 over its ratings in order on that local copy, adds the differences
// back (one Add per table) and ends the iteration (Clock), so any
// consistency model and worker kind applies. The global bias is shared by
// every rating, so each worker adds 1/workers of its change: summed over
// concurrent workers that is their average, where the plain sum would
// overshoot workers-fold.
//
// Stage functions registered here:
//
//	mf.sgd   params: rank (the tables' width), epochs (10), batch (1000), lr (0.01),
//	         l2 (0.05), l2_bias (l2), decay (0: lr/(1+decay*epoch)),
//	         users ("users"), items ("items"), bias ("bias"), user_bias ("user_bias"),
//	         item_bias ("item_bias"), train ("train"), test ("test", optional input)
//
// Each epoch reports samples and sq_err_sum (training error, measured on
// each rating just before its update) and, with a test input,
// test_samples and test_sq_err_sum: the job table prints their RMSE (and
// their MSE as the loss, through loss_sum and test_loss_sum). The
// model kind "mf" has an evaluator: RMSE and MAE on a ratings file.
package mf

import (
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.Register("mf.sgd", SGD)
}

// Config is mf.sgd's parameters.
type Config struct {
	Rank     int
	Epochs   int
	Batch    int
	LR       float64
	L2       float64
	L2Bias   float64
	Decay    float64
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
	if err := p.Check("rank", "epochs", "batch", "lr", "l2", "l2_bias", "decay"); err != nil {
		return Config{}, fmt.Errorf("mf: %w", err)
	}
	c := Config{Rank: p.Int("rank", 0), Epochs: p.Int("epochs", 10), Batch: p.Int("batch", 1000), LR: p.Float("lr", 0.01),
		L2: p.Float("l2", 0.05), Decay: p.Float("decay", 0),
		Users: p.String("users", "users"), Items: p.String("items", "items"), Bias: p.String("bias", "bias"),
		UserBias: p.String("user_bias", "user_bias"), ItemBias: p.String("item_bias", "item_bias"),
		Train: p.String("train", "train"), Test: p.String("test", "test")}
	c.L2Bias = p.Float("l2_bias", c.L2)
	switch {
	case c.Rank < 0:
		return c, fmt.Errorf("mf: rank must be >= 1, got %d", c.Rank)
	case c.Epochs < 1:
		return c, fmt.Errorf("mf: epochs must be >= 1, got %d", c.Epochs)
	case c.Batch < 1:
		return c, fmt.Errorf("mf: batch must be >= 1, got %d", c.Batch)
	case !(c.LR > 0):
		return c, fmt.Errorf("mf: lr must be > 0, got %v", c.LR)
	case c.L2 < 0 || c.L2Bias < 0:
		return c, fmt.Errorf("mf: l2 and l2_bias must be >= 0, got %v and %v", c.L2, c.L2Bias)
	case c.Decay < 0:
		return c, fmt.Errorf("mf: decay must be >= 0, got %v", c.Decay)
	}
	return c, nil
}

// Tables are the model's tables as a worker holds them; the bias tables
// are nil when the task does not declare them.
type Tables struct {
	Users, Items, Bias, UserBias, ItemBias tasks.Table
}

// openTables opens and checks the tables: the factor tables must have
// width rank (rank 0 takes the users table's width), the bias tables width
// 1 and the per-user/per-item ones at least the factor tables' sizes.
// A bias table named by an explicit parameter must exist.
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
	opt := func(param, name string, size uint64) (tasks.Table, error) {
		tab, err := info.Table(name)
		if err != nil {
			if _, explicit := info.Params[param]; explicit {
				return nil, fmt.Errorf("mf: %s: %w", param, err)
			}
			return nil, nil
		}
		spec := tab.Spec()
		if spec.Width != 1 || spec.Size < size {
			return nil, fmt.Errorf("mf: table %q has size %d width %d, want width 1 and size >= %d", name, spec.Size, spec.Width, size)
		}
		return tab, nil
	}
	if t.Bias, err = opt("bias", cfg.Bias, 1); err != nil {
		return t, err
	}
	if t.UserBias, err = opt("user_bias", cfg.UserBias, t.Users.Spec().Size); err != nil {
		return t, err
	}
	if t.ItemBias, err = opt("item_bias", cfg.ItemBias, t.Items.Spec().Size); err != nil {
		return t, err
	}
	return t, nil
}

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
	test, _ := info.Input(cfg.Test) // optional
	m := NewMiniBatch(tabs, cfg.Rank)
	m.BiasShare = 1 / float64(max(info.Workers, 1))
	for epoch := info.StartEpoch + 1; epoch <= cfg.Epochs; epoch++ {
		h := Hyper{LR: cfg.LR / (1 + cfg.Decay*float64(epoch-1)), L2: cfg.L2, L2Bias: cfg.L2Bias}
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
		if err != nil {
			return fmt.Errorf("mf: input %q: %w", cfg.Train, err)
		}
		// loss_sum is the squared error too, so the loss columns show MSE.
		metrics := map[string]float64{tasks.MetricSamples: float64(st.N), tasks.MetricSqErrSum: st.SqErr, tasks.MetricLossSum: st.SqErr}
		if test != nil {
			var ts Stats
			err := tasks.EachBatch(info.Ctx, test, 4096, func(r *datastore.Records, lo, hi int) error {
				bs, err := m.Eval(r, lo, hi)
				ts.Add(bs)
				return err
			})
			if err != nil {
				return fmt.Errorf("mf: input %q: %w", cfg.Test, err)
			}
			metrics[tasks.MetricTestSamples], metrics[tasks.MetricTestSqErrSum], metrics[tasks.MetricTestLossSum] = float64(ts.N), ts.SqErr, ts.SqErr
		}
		info.ReportEpoch(epoch, metrics)
	}
	return nil
}

// Stats are a batch's or an epoch's counts.
type Stats struct {
	N     int64
	SqErr float64
}

// Add accumulates o.
func (s *Stats) Add(o Stats) { s.N += o.N; s.SqErr += o.SqErr }
