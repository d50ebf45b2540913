// Package mfblock is matrix factorization with parameter blocking, the
// way Lapse trains it (DSGD-style, on dynamic parameter allocation): the
// item factors are split into as many blocks as the stage has workers; in
// sub-epoch s, worker r trains on its ratings whose item falls in block
// (r+s) mod workers, after localizing that block's item factors to its
// slave. At any time each item block is used by exactly one worker, so
// every access to an item factor is in the worker's memory, and the users
// a worker holds ratings of are localized once, at the start. With data
// grouped by user (rating exports usually are) the users of different
// workers hardly overlap, and almost every access is local.
//
// A rating r(u, i) is predicted as mu + p_u . q_i (table "users" and
// "items", width = rank; mu the training ratings' mean, in table "bias",
// which the stage adds, as mf.sgd's global bias: flexps eval reads it),
// trained by SGD with L2 over mini-batches: a batch reads the rows of its
// distinct users and items (in memory once localized), updates a local
// copy rating by rating and adds the change back. With mean = false mu is
// 0, as in Lapse's MF (p_u . q_i alone, which on 1-5 stars predicts worse
// than the mean for users with few ratings).
//
// Stage function registered here:
//
//	mf.blocked  params: rank (the tables' width), epochs (10), batch (1000),
//	            lr (0.01), l2 (0.05), decay (0: lr/(1+decay*(epoch-1))),
//	            localize (true: false runs the same schedule on the static
//	            directory, for comparison), mean (true), bias ("bias"),
//	            users ("users"), items ("items"), train ("train"),
//	            test ("test", optional input)
//
// Each worker reads its share of the training input once and keeps it in
// memory (the schedule needs the same ratings in every epoch). Sub-epochs
// end at a stage barrier. It reports what mf.sgd reports (samples,
// sq_err_sum and loss_sum: the job table prints RMSE),
// localize_seconds / localize_calls (time workers spent in Localize) and
// barrier_seconds (time they waited at the sub-epoch barriers for the
// slowest worker).
// The model kind is "mf": flexps eval prints its RMSE on a ratings file.
package mfblock

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// Func is the stage function's registered name.
const Func = "mf.blocked"

// Metric names mf.blocked reports besides the standard ones.
const (
	MetricLocalizeSeconds = "localize_seconds"
	MetricLocalizeCalls   = "localize_calls"
	// MetricBarrierSeconds is the time workers waited at the sub-epoch
	// barriers: DSGD's straggler cost (every sub-epoch waits for the
	// slowest worker's block).
	MetricBarrierSeconds = "barrier_seconds"
)

func init() {
	tasks.Register(Func, Blocked)
	tasks.RegisterParams(Func, func(p tasks.Params) error { _, err := configFrom(p); return err })
	tasks.RegisterEpochs(Func, func(p tasks.Params) int { c, _ := configFrom(p); return c.epochs })
	tasks.RegisterInputs(Func, tasks.InputParam{Param: "train", Required: true}, tasks.InputParam{Param: "test"})
	tasks.RegisterTables(Func, func(st tasks.Stage, declared []kvstore.TableSpec) []kvstore.TableSpec {
		c, err := configFrom(st.Params)
		if err != nil || !c.mean {
			return nil
		}
		// Kept as the user factors are (one copy when they are localized).
		replicas := 0
		for _, t := range declared {
			if t.Name == c.users {
				replicas = t.Replicas
			}
		}
		return []kvstore.TableSpec{{Name: c.bias, Size: 1, Replicas: replicas}, {Name: SumTable(c.bias, st.Name), Size: 2, Replicas: replicas}}
	})
	tasks.RegisterTaskParams(Func, tasks.AllOf(rankFits, tasks.DenseInMemory(Func, "users", "items"), tasks.FactorsStartRandom(Func, "users", "items")))
	tasks.RegisterRelocates(Func, func(s tasks.Stage) []string {
		if c, err := configFrom(s.Params); err == nil && c.localize {
			return []string{c.users, c.items}
		}
		return nil
	})
}

type config struct {
	rank, epochs, batch int
	lr, l2, decay       float64
	localize, mean      bool
	bias                string
	users, items        string
	train, test         string
}

// SumTable is the table in which the workers of stage (by name) sum their
// ratings and count them, for the mean in table bias.
func SumTable(bias, stage string) string { return bias + "." + stage + ".sum" }

// rankFits checks, at submission, that the tables of every mf.blocked
// stage are as wide as its rank (unset: the users table's width), as the
// stage does when it starts: there a mismatch came after the stages
// before it had run.
func rankFits(t *tasks.MultiStageTask) (int, string, error) {
	for i, s := range t.Stages {
		if s.Func != Func {
			continue
		}
		cfg, err := configFrom(s.Params)
		if err != nil {
			continue // refused by the params check
		}
		u, uok := t.TableSpec(cfg.users)
		it, iok := t.TableSpec(cfg.items)
		if !uok || !iok {
			continue // a missing table is named when the stage opens it
		}
		rank, key := cfg.rank, "rank"
		if rank == 0 {
			rank, key = u.Width, ""
		}
		if u.Width != rank || it.Width != rank {
			return i, key, fmt.Errorf("%s: tables %q and %q must have width = rank = %d (got %d and %d)", Func, cfg.users, cfg.items, rank, u.Width, it.Width)
		}
	}
	return 0, "", nil
}

func configFrom(p tasks.Params) (config, error) {
	if err := p.Known("rank", "epochs", "batch", "lr", "l2", "decay", "localize", "mean", "bias", "users", "items", "train", "test"); err != nil {
		return config{}, fmt.Errorf("%s: %w", Func, err)
	}
	if err := p.CheckInt("rank", "epochs", "batch"); err != nil {
		return config{}, err
	}
	for _, k := range []string{"localize", "mean"} {
		if v, ok := p[k]; ok {
			if _, isBool := v.(bool); !isBool {
				// "yes" read as false: a mean or a relocation silently off.
				return config{}, fmt.Errorf("%s: param %q: want true or false, got %v", Func, k, v)
			}
		}
	}
	if err := p.Check("rank", "epochs", "batch", "lr", "l2", "decay"); err != nil {
		return config{}, fmt.Errorf("%s: %w", Func, err)
	}
	c := config{rank: p.Int("rank", 0), epochs: p.Int("epochs", 10), batch: p.Int("batch", 1000),
		lr: p.Float("lr", 0.01), l2: p.Float("l2", 0.05), decay: p.Float("decay", 0), localize: p.Bool("localize", true),
		mean: p.Bool("mean", true), bias: p.String("bias", "bias"),
		users: p.String("users", "users"), items: p.String("items", "items"), train: p.String("train", "train"), test: p.String("test", "test")}
	_, rankSet := p["rank"]
	switch {
	case rankSet && c.rank < 1:
		// 0 is the unset rank (the tables' width): written out, it
		// was taken for that without a word, and a negative one was
		// refused only as a width mismatch.
		return c, fmt.Errorf("%s: rank must be >= 1 (unset: the factor tables' width), got %d", Func, c.rank)
	case c.epochs < 1:
		return c, fmt.Errorf("%s: epochs must be >= 1, got %d", Func, c.epochs)
	case c.batch < 1:
		return c, fmt.Errorf("%s: batch must be >= 1, got %d", Func, c.batch)
	case !(c.lr > 0) || math.IsInf(c.lr, 0):
		return c, fmt.Errorf("%s: lr must be a positive number, got %v", Func, c.lr)
	case c.l2 < 0:
		return c, fmt.Errorf("%s: l2 must be >= 0, got %v", Func, c.l2)
	case c.decay < 0:
		return c, fmt.Errorf("%s: decay must be >= 0, got %v", Func, c.decay)
	}
	return c, nil
}

// rating is one training record.
type rating struct {
	u, i uint64
	r    float64
}

// Blocked is mf.blocked.
func Blocked(info *tasks.Info) error {
	cfg, err := configFrom(info.Params)
	if err != nil {
		return err
	}
	users, err := info.Table(cfg.users)
	if err != nil {
		return fmt.Errorf("%s: %w", Func, err)
	}
	items, err := info.Table(cfg.items)
	if err != nil {
		return fmt.Errorf("%s: %w", Func, err)
	}
	if cfg.rank == 0 {
		cfg.rank = users.Spec().Width
	}
	if users.Spec().Width != cfg.rank || items.Spec().Width != cfg.rank {
		return fmt.Errorf("%s: tables %q and %q must have width = rank = %d (got %d and %d)", Func, cfg.users, cfg.items,
			cfg.rank, users.Spec().Width, items.Spec().Width)
	}
	in, err := info.Input(cfg.train)
	if err != nil {
		return fmt.Errorf("%s: %w", Func, err)
	}
	test, err := info.OptionalInput("test", cfg.test)
	if err != nil {
		return fmt.Errorf("%s: %w", Func, err)
	}
	for name, src := range map[string]tasks.Input{cfg.train: in, cfg.test: test} {
		if src != nil {
			if err := tasks.CheckFormat(src, name, Func, "ratings"); err != nil {
				return err
			}
		}
	}
	data, err := readAll(info, in, users.Spec().Size, items.Spec().Size, cfg.train)
	if err != nil {
		return err
	}
	nItems := items.Spec().Size
	blocks := uint64(max(info.Workers, 1))
	blockOf := func(i uint64) int { return int(i * blocks / nItems) }
	// The worker's ratings by item block (sized first: millions of
	// ratings), the distinct items of each block and the distinct users.
	counts := make([]int, blocks)
	for _, r := range data {
		counts[blockOf(r.i)]++
	}
	byBlock := make([][]rating, blocks)
	for b := range byBlock {
		byBlock[b] = make([]rating, 0, counts[b])
	}
	blockItems := make([][]uint64, blocks)
	var myUsers []uint64
	seenU, seenI := tasks.NewKeyIndex(users.Spec().Size), tasks.NewKeyIndex(nItems)
	for _, r := range data {
		b := blockOf(r.i)
		byBlock[b] = append(byBlock[b], r)
		if _, ok := seenU.Get(r.u); !ok {
			seenU.Put(r.u, 0)
			myUsers = append(myUsers, r.u)
		}
		if _, ok := seenI.Get(r.i); !ok {
			seenI.Put(r.i, 0)
			blockItems[b] = append(blockItems[b], r.i)
		}
	}
	var locSecs, locCalls, barSecs float64
	localize := func(t tasks.Table, keys []uint64) error {
		if !cfg.localize || len(keys) == 0 {
			return nil
		}
		start := time.Now()
		err := t.Localize(keys)
		locSecs += time.Since(start).Seconds()
		locCalls++
		return err
	}
	if err := localize(users, myUsers); err != nil {
		return err
	}
	st := newStepper(users, items, cfg.rank)
	if cfg.mean {
		if st.mu, err = globalMean(info, cfg, data); err != nil {
			return err
		}
	}
	for epoch := info.StartEpoch + 1; epoch <= cfg.epochs; epoch++ {
		h := hyper{lr: cfg.lr / (1 + cfg.decay*float64(epoch-1)), l2: cfg.l2}
		var n int64
		var sq float64
		for s := range int(blocks) {
			b := (info.Rank + s) % int(blocks)
			// Only the item factors this worker's ratings of the block use.
			if err := localize(items, blockItems[b]); err != nil {
				return err
			}
			rs := byBlock[b]
			for a := 0; a < len(rs); a += cfg.batch {
				bn, bsq, err := st.step(rs[a:min(a+cfg.batch, len(rs))], h)
				if err != nil {
					return err
				}
				n += bn
				sq += bsq
				info.Report(bn, bsq)
				if err := info.Clock(); err != nil {
					return err
				}
			}
			bstart := time.Now()
			if err := info.Barrier(); err != nil {
				return err
			}
			barSecs += time.Since(bstart).Seconds()
			// Each worker read its share of the ratings once, at the start:
			// a worker whose slave died took its share with it, and the
			// survivors would train on without those ratings (their users'
			// factors frozen while the items move on: test RMSE 0.48 against
			// 0.41 undisturbed in a drill, the task "done"). Fail instead,
			// naming the loss; a checkpoint resumes the stage.
			if _, live := info.Share(); live < info.Workers {
				return fmt.Errorf("%s: stage %q epoch %d: %d of its %d workers died with their slave; each worker reads its share of the ratings once, at the stage's start, so theirs are lost and the stage cannot go on without them (resume from a checkpoint)",
					Func, info.StageName, epoch, info.Workers-live, info.Workers)
			}
		}
		if math.IsNaN(sq) || math.IsInf(sq, 0) {
			return fmt.Errorf("%s: stage %q epoch %d: the training error is not finite (lr %v too large?)", Func, info.StageName, epoch, h.lr)
		}
		m := map[string]float64{tasks.MetricSamples: float64(n), tasks.MetricSqErrSum: sq, tasks.MetricLossSum: sq,
			MetricLocalizeSeconds: locSecs, MetricLocalizeCalls: locCalls, MetricBarrierSeconds: barSecs}
		locSecs, locCalls, barSecs = 0, 0, 0
		if test != nil {
			tn, tsq, err := evaluate(info, test, st, cfg.test)
			if err != nil {
				return err
			}
			m[tasks.MetricTestSamples], m[tasks.MetricTestSqErrSum], m[tasks.MetricTestLossSum] = float64(tn), tsq, tsq
		}
		info.ReportEpoch(epoch, m)
	}
	return nil
}

// globalMean sums every worker's training ratings into the stage's sum
// table and returns their mean, which worker 0 also writes to the bias
// table (the model's mu, as flexps eval reads it). A resumed stage finds
// the sums restored and adds nothing.
func globalMean(info *tasks.Info, cfg config, data []rating) (float64, error) {
	sums, err := info.Table(SumTable(cfg.bias, info.StageName))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", Func, err)
	}
	bias, err := info.Table(cfg.bias)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", Func, err)
	}
	if info.StartEpoch == 0 {
		var sum float64
		for _, r := range data {
			sum += r.r
		}
		if err := sums.Add([]uint64{0, 1}, []float64{sum, float64(len(data))}); err != nil {
			return 0, fmt.Errorf("%s: mean rating: %w", Func, err)
		}
		if err := info.Barrier(); err != nil {
			return 0, err
		}
	}
	v := make([]float64, 2)
	if err := sums.Get([]uint64{0, 1}, v); err != nil {
		return 0, fmt.Errorf("%s: mean rating: %w", Func, err)
	}
	mu := 0.0
	if v[1] > 0 {
		mu = v[0] / v[1]
	}
	if idx, _ := info.Share(); idx == 0 && info.StartEpoch == 0 {
		cur := make([]float64, 1)
		if err := bias.Get([]uint64{0}, cur); err != nil {
			return 0, fmt.Errorf("%s: %w", Func, err)
		}
		if err := bias.Add([]uint64{0}, []float64{mu - cur[0]}); err != nil {
			return 0, fmt.Errorf("%s: %w", Func, err)
		}
	}
	return mu, nil
}

// readAll reads the worker's share of the ratings once.
func readAll(info *tasks.Info, in tasks.Input, nUsers, nItems uint64, name string) ([]rating, error) {
	var out []rating
	err := tasks.EachRecords(info.Ctx, in, func(r *datastore.Records) error {
		for i := 0; i < r.Len(); i++ {
			if err := checkRating(r, i, nUsers, nItems); err != nil {
				return err
			}
			a := r.Offsets[i]
			out = append(out, rating{u: r.Keys[a], i: r.Keys[a+1], r: r.Labels[i]})
		}
		return nil
	})
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: input %q: %w", Func, name, err)
	}
	return out, nil
}

// checkRating refuses record i of r unless it is a rating of a user and
// an item within the tables, naming its file and line: "rating (259, 46)
// is beyond the tables' sizes" named neither, in a file of 20,000 lines.
func checkRating(r *datastore.Records, i int, nUsers, nItems uint64) error {
	a := r.Offsets[i]
	if n := r.Offsets[i+1] - a; n != 2 {
		return fmt.Errorf("%s: record has %d ids, want user and item (format = \"ratings\")", r.Where(i), n)
	}
	if u, it := r.Keys[a], r.Keys[a+1]; u >= nUsers || it >= nItems {
		return fmt.Errorf("%s: rating (%d, %d) is beyond the tables' sizes (%d users, %d items; ids are 0-based keys)", r.Where(i), u, it, nUsers, nItems)
	}
	return nil
}

// evaluate sums the squared error of the worker's share of test.
func evaluate(info *tasks.Info, test tasks.Input, st *stepper, name string) (int64, float64, error) {
	var n int64
	var sq float64
	var rs []rating
	err := tasks.EachBatch(info.Ctx, test, 4096, func(r *datastore.Records, lo, hi int) error {
		rs = rs[:0]
		for i := lo; i < hi; i++ {
			if err := checkRating(r, i, st.users.t.Spec().Size, st.items.t.Spec().Size); err != nil {
				return err
			}
			a := r.Offsets[i]
			rs = append(rs, rating{u: r.Keys[a], i: r.Keys[a+1], r: r.Labels[i]})
		}
		bn, bsq, err := st.eval(rs)
		n += bn
		sq += bsq
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("%s: input %q: %w", Func, name, err)
	}
	return n, sq, nil
}
