// Package kge is knowledge-graph embedding with ComplEx on flexps tables.
// Entity i is a complex vector e_i in C^dim (row i of table "entities",
// width 2*dim: dim real parts, then dim imaginary parts), relation j a
// complex vector w_j (table "relations", same layout), and a triple
// (h, r, t) scores Re(<e_h, w_r, conj(e_t)>). Training is mini-batch SGD
// on the softplus loss log(1+exp(-y*score)) with negative sampling: each
// positive triple (y = +1) gets neg corruptions (y = -1, weight 1/neg)
// whose head or tail is replaced by a uniform entity, plus L2 on every
// row a step touches.
//
// Each mini-batch is processed in two phases, like mf.sgd: first the
// negatives are drawn and batchKeys computes the batch's distinct entities
// and relations; then the worker reads those rows (one Get per table),
// runs SGD on its local copy, adds the differences (one Add per table) and
// ends the iteration (Clock), so any consistency model and worker kind
// applies. Because the key set is known before the rows are used, the
// next batch's keys can be computed while the current one trains: that is
// where a Localize/LocalizeAsync of the next batch's keys goes, so the
// parameters are local by the time the batch reads them (latency hiding).
//
// Input: the "ratings" format, one triple per line "head relation tail"
// (integer ids from 0, separated by tabs or spaces; scripts/kge-setup.sh
// converts named benchmark graphs and writes entities.tsv and
// relations.tsv, "id<TAB>name", next to them).
//
// Evaluation is the filtered link-prediction protocol: for each test
// triple, the tail is ranked against every entity given head and
// relation, and the head given relation and tail, skipping candidates that
// form another true triple (from the files of the stage's "filter"
// parameter: name train, valid and test there); ties count half. MRR is
// the mean of 1/rank, Hits@k the share of ranks <= k.
//
// Stage function registered here:
//
//	kge.complex  params: dim (the tables' width / 2), epochs (50), batch (256), neg (16),
//	             lr (0.1), l2 (0.0001), decay (0: lr/(1+decay*(epoch-1))), seed (1),
//	             entities ("entities"), relations ("relations"), train ("train"),
//	             test ("test", optional input), filter (paths of triple files whose
//	             triples are filtered from the test ranking, e.g. train and valid),
//	             localize (false: true moves each batch's entity rows to the worker's
//	             slave while the previous batch trains, Lapse's latency hiding)
//
// Each epoch reports samples and loss_sum (training) and, with a test
// input, test_samples (ranked heads and tails: two per test triple) and the
// sums MetricTestRRSum, MetricTestHits1, MetricTestHits3 and
// MetricTestHits10. The model kind "kge" has an evaluator: flexps eval
// prints mrr, hits1, hits3 and hits10 on a triple file, filtering the
// triples of that file only (it knows no training data).
package kge

import (
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// Metric names kge.complex reports per epoch, next to tasks' names.
const (
	MetricTestRRSum  = tasks.MetricTestRRSum
	MetricTestHits1  = tasks.MetricTestHits1
	MetricTestHits3  = tasks.MetricTestHits3
	MetricTestHits10 = tasks.MetricTestHits10
)

func init() {
	tasks.Register("kge.complex", ComplEx)
	tasks.RegisterParams("kge.complex", func(p tasks.Params) error { _, err := ConfigFrom(p); return err })
	tasks.RegisterEpochs("kge.complex", func(p tasks.Params) int { c, _ := ConfigFrom(p); return c.Epochs })
	tasks.RegisterInputs("kge.complex", tasks.InputParam{Param: "train", Required: true}, tasks.InputParam{Param: "test"})
	tasks.RegisterTaskParams("kge.complex", tasks.AllOf(dimFits, tasks.DenseInMemory("kge.complex", "entities", "relations"), tasks.FactorsStartRandom("kge.complex", "entities")))
	tasks.RegisterRelocates("kge.complex", func(s tasks.Stage) []string {
		if c, err := ConfigFrom(s.Params); err == nil && c.Localize {
			return []string{c.Entities}
		}
		return nil
	})
}

// Config is kge.complex's parameters.
type Config struct {
	Dim       int
	Epochs    int
	Batch     int
	Neg       int
	LR        float64
	L2        float64
	Decay     float64
	Seed      int
	Entities  string
	Relations string
	Train     string
	Test      string
	Filter    []string
	Localize  bool // move each batch's entities to the worker's slave ahead of use
}

// ConfigFrom reads and checks the stage parameters.
func ConfigFrom(p tasks.Params) (Config, error) {
	if err := p.Known("dim", "epochs", "batch", "neg", "lr", "l2", "decay", "seed", "entities", "relations", "train", "test", "localize", "filter"); err != nil {
		return Config{}, fmt.Errorf("kge.complex: %w", err)
	}
	if err := p.CheckInt("dim", "epochs", "batch", "neg", "seed"); err != nil {
		return Config{}, err
	}
	if err := p.Check("dim", "epochs", "batch", "neg", "lr", "l2", "decay", "seed"); err != nil {
		return Config{}, fmt.Errorf("kge: %w", err)
	}
	c := Config{Dim: p.Int("dim", 0), Epochs: p.Int("epochs", 50), Batch: p.Int("batch", 256), Neg: p.Int("neg", 16),
		LR: p.Float("lr", 0.1), L2: p.Float("l2", 0.0001), Decay: p.Float("decay", 0), Seed: p.Int("seed", 1),
		Entities: p.String("entities", "entities"), Relations: p.String("relations", "relations"),
		Train: p.String("train", "train"), Test: p.String("test", "test"), Localize: p.Bool("localize", false)}
	if f, ok := p["filter"]; ok {
		paths, err := stringList(f)
		if err != nil {
			return c, fmt.Errorf("kge: filter: %w", err)
		}
		c.Filter = paths
	}
	_, dimSet := p["dim"]
	switch {
	case dimSet && c.Dim < 1:
		// 0 is the unset dim (half the tables' width): written out,
		// it was taken for that without a word.
		return c, fmt.Errorf("kge: dim must be >= 1 (unset: half the tables' width), got %d", c.Dim)
	case c.Epochs < 1:
		return c, fmt.Errorf("kge: epochs must be >= 1, got %d", c.Epochs)
	case c.Batch < 1:
		return c, fmt.Errorf("kge: batch must be >= 1, got %d", c.Batch)
	case c.Neg < 1:
		return c, fmt.Errorf("kge: neg must be >= 1, got %d", c.Neg)
	case !(c.LR > 0):
		return c, fmt.Errorf("kge: lr must be > 0, got %v", c.LR)
	case c.L2 < 0:
		return c, fmt.Errorf("kge: l2 must be >= 0, got %v", c.L2)
	case c.Decay < 0:
		return c, fmt.Errorf("kge: decay must be >= 0, got %v", c.Decay)
	}
	return c, nil
}

// dimFits checks, at submission, that the tables of every kge.complex
// stage are 2*dim wide (dim unset: half the entities table's width), as
// the stage does when it starts: there a mismatch came after the stages
// before it had run.
func dimFits(t *tasks.MultiStageTask) (int, string, error) {
	for i, s := range t.Stages {
		if s.Func != "kge.complex" {
			continue
		}
		c, err := ConfigFrom(s.Params)
		if err != nil {
			continue // refused by the params check
		}
		dim, key := c.Dim, "dim"
		if dim == 0 {
			key = ""
		}
		for _, name := range []string{c.Entities, c.Relations} {
			spec, ok := t.TableSpec(name)
			if !ok {
				continue // a missing table is named when the stage opens it
			}
			if dim == 0 {
				dim = spec.Width / 2
			}
			if spec.Width != 2*dim || spec.Width == 0 {
				return i, key, fmt.Errorf("kge: table %q has width %d but dim = %d (the tables' width is 2*dim: real and imaginary parts)", name, spec.Width, dim)
			}
		}
	}
	return -1, "", nil
}

// stringList accepts a TOML array of strings or one string.
func stringList(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case []string:
		return x, nil
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("element %d is %T, want a path string", i, e)
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("got %T, want a list of paths", v)
}

// openTables opens the tables and checks both have width 2*dim (dim 0
// takes half the entities table's width).
func openTables(info *tasks.Info, cfg *Config) (ents, rels tasks.Table, err error) {
	if ents, err = info.Table(cfg.Entities); err != nil {
		return nil, nil, fmt.Errorf("kge: %w", err)
	}
	if rels, err = info.Table(cfg.Relations); err != nil {
		return nil, nil, fmt.Errorf("kge: %w", err)
	}
	if cfg.Dim == 0 {
		cfg.Dim = ents.Spec().Width / 2
	}
	for _, t := range []tasks.Table{ents, rels} {
		if w := t.Spec().Width; w != 2*cfg.Dim || w == 0 {
			return nil, nil, fmt.Errorf("kge: table %q has width %d but dim = %d (the tables' width is 2*dim: real and imaginary parts)", t.Spec().Name, w, cfg.Dim)
		}
	}
	return ents, rels, nil
}

// ComplEx is the kge.complex stage function.
func ComplEx(info *tasks.Info) error {
	cfg, err := ConfigFrom(info.Params)
	if err != nil {
		return err
	}
	ents, rels, err := openTables(info, &cfg)
	if err != nil {
		return err
	}
	train, err := info.Input(cfg.Train)
	if err != nil {
		return fmt.Errorf("kge: %w", err)
	}
	test, err := info.OptionalInput("test", cfg.Test)
	if err != nil {
		return fmt.Errorf("kge: %w", err)
	}
	for name, in := range map[string]tasks.Input{cfg.Train: train, cfg.Test: test} {
		if in != nil {
			if err := tasks.CheckFormat(in, name, "kge.complex", "ratings"); err != nil {
				return err
			}
		}
	}
	var known Known
	if test != nil {
		known = Known{}
		for _, p := range cfg.Filter {
			recs, err := datastore.ReadAll(info.Ctx, p, "ratings")
			if err != nil {
				return fmt.Errorf("kge: filter %s: %w", p, err)
			}
			if err := known.AddRecords(recs); err != nil {
				return fmt.Errorf("kge: filter %s: %w", p, err)
			}
		}
	}
	m := NewMiniBatch(ents, rels, cfg.Dim, cfg.Neg, uint64(cfg.Seed)*1000003+uint64(info.Rank))
	for epoch := info.StartEpoch + 1; epoch <= cfg.Epochs; epoch++ {
		h := Hyper{LR: cfg.LR / (1 + cfg.Decay*float64(epoch-1)), L2: cfg.L2}
		var st Stats
		step := func(bs Stats, err error) error {
			if err != nil {
				return err
			}
			st.Add(bs)
			info.Report(bs.N, bs.LossSum)
			return info.Clock()
		}
		var next *Prepared // localize=true: the batch whose rows are moving here
		err := tasks.EachBatch(info.Ctx, train, cfg.Batch, func(r *datastore.Records, lo, hi int) error {
			if !cfg.Localize {
				return step(m.Step(r, lo, hi, h))
			}
			p, err := m.Prepare(r, lo, hi)
			if err != nil {
				return err
			}
			cur := next
			next = p
			if cur == nil {
				return nil
			}
			return step(m.Train(cur, h))
		})
		if err == nil && next != nil {
			err = step(m.Train(next, h))
		}
		if err != nil {
			return fmt.Errorf("kge: input %q: %w", cfg.Train, err)
		}
		metrics := map[string]float64{tasks.MetricSamples: float64(st.N), tasks.MetricLossSum: st.LossSum}
		if test != nil {
			rs, err := evalShare(info, test, ents, rels, cfg.Dim, known)
			if err != nil {
				return fmt.Errorf("kge: input %q: %w", cfg.Test, err)
			}
			metrics[tasks.MetricTestSamples] = float64(rs.N)
			metrics[MetricTestRRSum] = rs.RRSum
			metrics[MetricTestHits1], metrics[MetricTestHits3], metrics[MetricTestHits10] = float64(rs.Hits1), float64(rs.Hits3), float64(rs.Hits10)
		}
		info.ReportEpoch(epoch, metrics)
	}
	return nil
}

// evalShare ranks this worker's share of the test triples against every
// entity: it reads the whole entity table and the relation table once.
// A worker sees only its share of the test input, so the other test
// triples are filtered only when the filter parameter names the test file.
func evalShare(info *tasks.Info, test tasks.Input, ents, rels tasks.Table, dim int, known Known) (RankStats, error) {
	emb := Embeddings{Dim: dim}
	for _, x := range []struct {
		t   tasks.Table
		dst *[]float64
	}{{ents, &emb.Ent}, {rels, &emb.Rel}} {
		n := x.t.Spec().Size
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = uint64(i)
		}
		*x.dst = make([]float64, int(n)*2*dim)
		if err := x.t.Get(keys, *x.dst); err != nil {
			return RankStats{}, err
		}
	}
	var st RankStats
	err := tasks.EachRecords(info.Ctx, test, func(r *datastore.Records) error {
		rs, err := emb.RankAll(r, 0, r.Len(), known)
		st.Add(rs)
		return err
	})
	return st, err
}
