package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

type data struct {
	train string
	test  *datastore.Records
	dir   string
}

// trainResult is one lr.sgd run on the engine.
type trainResult struct {
	Section      string         `json:"section"` // train or cache
	Kind         string         `json:"kind"`
	Consistency  string         `json:"consistency"`
	Workers      int            `json:"workers"`
	Cache        string         `json:"cache,omitempty"`
	CacheSize    int            `json:"cache_size,omitempty"`
	Seconds      float64        `json:"seconds"` // the stage's Seconds (includes model load, epoch 1's parse)
	Samples      int64          `json:"samples"`
	SamplesPerS  float64        `json:"samples_per_s"`
	LaterPerS    float64        `json:"epoch2_samples_per_s,omitempty"` // epochs 2.. (parsed blocks cached)
	TestAccuracy float64        `json:"test_accuracy"`
	TestLogLoss  float64        `json:"test_logloss"`
	ModelLoad    float64        `json:"model_load_seconds,omitempty"`
	CacheHits    float64        `json:"cache_hits,omitempty"`
	CacheMisses  float64        `json:"cache_misses,omitempty"`
	HitRate      float64        `json:"cache_hit_rate,omitempty"`
	Placement    map[string]int `json:"placement"`
}

func consistencyOf(model string) (kvstore.Consistency, error) {
	switch model {
	case "bsp":
		return kvstore.Consistency{Kind: kvstore.BSP}, nil
	case "ssp":
		return kvstore.Consistency{Kind: kvstore.SSP, Staleness: 2}, nil
	case "asp":
		return kvstore.Consistency{Kind: kvstore.ASP}, nil
	case "sparse_ssp":
		return kvstore.Consistency{Kind: kvstore.SparseSSP, Staleness: 2, Speculation: 2}, nil
	}
	return kvstore.Consistency{}, fmt.Errorf("unknown consistency model %q (bsp, ssp, asp, sparse_ssp)", model)
}

func consName(c kvstore.Consistency) string {
	switch c.Kind {
	case kvstore.SSP:
		return fmt.Sprintf("ssp(%d)", c.Staleness)
	case kvstore.SparseSSP:
		return fmt.Sprintf("sparse_ssp(%d,%d)", c.Staleness, c.Speculation)
	}
	return string(c.Kind)
}

// trainAll runs every (kind, model, workers) the options ask for. The
// single kind has one worker and no coordination: it runs once.
func trainAll(ctx context.Context, o options, d data) ([]trainResult, error) {
	var out []trainResult
	for _, kind := range o.kinds {
		switch kind {
		case tasks.KindPS, tasks.KindLocal, tasks.KindHogwild, tasks.KindSingle:
		default:
			return nil, fmt.Errorf("unknown worker kind %q", kind)
		}
		if kind == tasks.KindSingle {
			r, err := engineLR(ctx, o, d, "train", kind, kvstore.Consistency{Kind: kvstore.ASP}, 1, "", 0)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
			continue
		}
		for _, model := range o.models {
			if kind == tasks.KindHogwild && model == "sparse_ssp" {
				continue
			}
			c, err := consistencyOf(model)
			if err != nil {
				return nil, err
			}
			for _, w := range o.workers {
				r, err := engineLR(ctx, o, d, "train", kind, c, w, "", 0)
				if err != nil {
					return nil, err
				}
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// cacheAll runs lr.sgd under SSP(2), ps across 2 slaves, 2 workers, with
// no cache and with LRU caches of the given fractions of dim.
func cacheAll(ctx context.Context, o options, d data) ([]trainResult, error) {
	c := kvstore.Consistency{Kind: kvstore.SSP, Staleness: 2}
	r, err := engineLR(ctx, o, d, "cache", tasks.KindPS, c, 2, "", 0)
	if err != nil {
		return nil, err
	}
	out := []trainResult{r}
	for _, f := range o.cacheFracs {
		size := max(int(f*float64(o.dim)), 1)
		r, err := engineLR(ctx, o, d, "cache", tasks.KindPS, c, 2, "lru", size)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// engineLR runs engineOnce o.rounds times and keeps the fastest run.
func engineLR(ctx context.Context, o options, d data, section, kind string, c kvstore.Consistency, workers int, cache string, cacheSize int) (trainResult, error) {
	var best trainResult
	for r := 0; r < max(o.rounds, 1); r++ {
		res, err := engineOnce(ctx, o, d, section, kind, c, workers, cache, cacheSize)
		if err != nil {
			return res, err
		}
		if r == 0 || res.rate() > best.rate() {
			best = res
		}
	}
	return best, nil
}

// engineOnce trains lr.sgd on a fresh in-process cluster of 2 slaves with 2
// slots each: ps stages spread over both slaves (the table is sharded over
// both), one-slave kinds run on one of them.
func engineOnce(ctx context.Context, o options, d data, section, kind string, c kvstore.Consistency, workers int, cache string, cacheSize int) (trainResult, error) {
	res := trainResult{Section: section, Kind: kind, Consistency: consName(c), Workers: workers, Cache: cache, CacheSize: cacheSize}
	if kind == tasks.KindSingle {
		res.Consistency = "-"
	}
	fmt.Fprintf(os.Stderr, "  running %s %s %d worker(s) %s...\n", kind, res.Consistency, workers, cache)
	l, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
	if err != nil {
		return res, err
	}
	defer l.Close()
	output := filepath.Join(d.dir, "model")
	os.Remove(output)
	t := tasks.NewTask("bench-consistency")
	t.Kind, t.Output = "lr", output
	t.AddTable(kvstore.TableSpec{Name: "w", Size: uint64(o.dim), DType: kvstore.Float32, Storage: kvstore.Dense})
	t.SetInput("train", tasks.InputSpec{Path: d.train, Format: "libsvm", BlockSize: o.blockSize})
	st := tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: workers, WorkerKind: kind, Consistency: c,
		Params: tasks.Params{"epochs": o.epochs, "batch": o.batch, "lr": o.lr, "standardize": false, "intercept": false}}
	if cache != "" {
		st.Cache, st.CacheSize = cache, cacheSize
	}
	t.SetStages(st)
	status, err := l.SubmitAndWait(ctx, t, nil)
	if err != nil {
		return res, fmt.Errorf("%s %s %d workers: %w", kind, res.Consistency, workers, err)
	}
	if len(status.Results) != 1 {
		return res, fmt.Errorf("task ended with %d stage results, want 1", len(status.Results))
	}
	sr := status.Results[0]
	res.Seconds, res.Samples, res.Placement = sr.Seconds, sr.Samples, sr.Placement
	res.SamplesPerS = float64(sr.Samples) / sr.Seconds
	var laterN, laterS float64
	for _, e := range sr.Epochs {
		if e.Epoch >= 2 {
			laterN += e.Metrics["samples"]
			laterS += e.Seconds
		}
	}
	if laterS > 0 {
		res.LaterPerS = laterN / laterS
	}
	res.ModelLoad = sr.Metrics["model_load_seconds"]
	res.CacheHits, res.CacheMisses = sr.Metrics["cache_hits"], sr.Metrics["cache_misses"]
	if n := res.CacheHits + res.CacheMisses; n > 0 {
		res.HitRate = res.CacheHits / n
	}
	m, err := tasks.LoadModel(output)
	if err != nil {
		return res, err
	}
	ev, err := lr.EvalModel(m, d.test)
	if err != nil {
		return res, err
	}
	res.TestAccuracy, res.TestLogLoss = ev["accuracy"], ev["logloss"]
	return res, nil
}

// reference is FlexPS's figure for a row, as the issue states it.
func reference(r trainResult) string {
	switch {
	case r.Kind == tasks.KindPS && r.Workers == 1:
		return "365k (PS)"
	case r.Kind == tasks.KindPS && r.Workers == 2:
		return "400k (PS)"
	case r.Kind == tasks.KindLocal && strings.HasPrefix(r.Consistency, "ssp") && r.Workers == 2:
		return "785k (SPMT SSP)"
	case r.Kind == tasks.KindHogwild && r.Workers == 2:
		return "1.34M (Hogwild)"
	}
	return ""
}

func target(r trainResult) float64 {
	switch {
	case r.Kind == tasks.KindLocal && strings.HasPrefix(r.Consistency, "ssp") && r.Workers == 2:
		return targetLocalSSP
	case r.Kind == tasks.KindPS && r.Workers == 2:
		return targetPS
	}
	return 0
}

func reportTrain(o options, rs []trainResult) {
	var single *trainResult
	for i := range rs {
		if rs[i].Kind == tasks.KindSingle {
			single = &rs[i]
		}
	}
	fmt.Println()
	fmt.Println("## train: lr.sgd per worker kind and consistency model (ps: 2 in-process slaves, 1 worker per slave; others: one slave)")
	fmt.Printf("%-8s %-17s %3s %9s %12s %12s %9s %9s %8s  %-16s %s\n", "kind", "consistency", "w", "seconds", "samples/s", "epoch2+ /s", "test acc", "load s", "vs 1w", "FlexPS (issue)", "note")
	one := map[string]float64{}
	for _, r := range rs {
		if r.Workers == 1 {
			one[r.Kind+"/"+r.Consistency] = r.rate()
		}
	}
	for _, r := range rs {
		later := "-"
		if r.LaterPerS > 0 {
			later = fmt.Sprintf("%.0f", r.LaterPerS)
		}
		speed := "-"
		if b := one[r.Kind+"/"+r.Consistency]; b > 0 && r.Workers > 1 {
			speed = fmt.Sprintf("%.2fx", r.rate()/b)
		}
		var notes []string
		if single != nil && r.TestAccuracy < single.TestAccuracy-accuracySlack {
			notes = append(notes, fmt.Sprintf("ACCURACY %.1f points below single", 100*(single.TestAccuracy-r.TestAccuracy)))
		}
		if t := target(r); t > 0 {
			mark := "ok"
			if r.rate() < t {
				mark = "BELOW"
			}
			notes = append(notes, fmt.Sprintf("target >= %.0fk: %s", t/1e3, mark))
		}
		fmt.Printf("%-8s %-17s %3d %9.2f %12.0f %12s %9.4f %9.3f %8s  %-16s %s\n", r.Kind, r.Consistency, r.Workers, r.Seconds, r.SamplesPerS,
			later, r.TestAccuracy, r.ModelLoad, speed, reference(r), strings.Join(notes, "; "))
	}
	fmt.Println()
	fmt.Println("samples/s = samples / stage seconds (includes the model load of one-slave kinds and epoch 1's parse);")
	fmt.Println("epoch2+ /s = epochs 2.. only (parsed blocks come from the slave's data cache), slowest worker's epoch time;")
	fmt.Println("'vs 1w' and the targets use epoch2+ /s when there is more than one epoch. ps runs use in-process slaves")
	fmt.Println("(one process, one embedded NATS server, no TCP), not the 2 slave processes of the target.")
	if single != nil {
		fmt.Printf("single-worker reference accuracy %.4f; a mode more than %.0f point below it is flagged.\n", single.TestAccuracy, 100*accuracySlack)
	}
	fmt.Printf("FlexPS reference (issue): PS %0.fk (1 worker) / %.0fk (2 workers); SPMT SSP %.0fk; Hogwild %.2fM. Targets: local SSP 2 workers >= %.1fM, ps >= %.0fk.\n",
		flexpsPS1/1e3, flexpsPS2/1e3, flexpsLocalSSP/1e3, flexpsHogwild/1e6, targetLocalSSP/1e6, targetPS/1e3)
}

// rate is the throughput the comparisons use: epochs 2.. when measured.
func (r trainResult) rate() float64 {
	if r.LaterPerS > 0 {
		return r.LaterPerS
	}
	return r.SamplesPerS
}

func reportCache(o options, rs []trainResult) {
	fmt.Println()
	fmt.Println("## cache: lr.sgd, ssp(2), ps, 2 workers across 2 slaves, with and without the process cache")
	fmt.Printf("%-6s %10s %9s %12s %12s %9s %12s %12s %9s\n", "cache", "size", "seconds", "samples/s", "epoch2+ /s", "test acc", "hits", "misses", "hit rate")
	base := rs[0].rate()
	for _, r := range rs {
		name, size := "none", "-"
		if r.Cache != "" {
			name, size = r.Cache, fmt.Sprintf("%d", r.CacheSize)
		}
		later := "-"
		if r.LaterPerS > 0 {
			later = fmt.Sprintf("%.0f", r.LaterPerS)
		}
		fmt.Printf("%-6s %10s %9.2f %12.0f %12s %9.4f %12.0f %12.0f %9.3f   x%.2f vs none\n", name, size, r.Seconds, r.SamplesPerS, later,
			r.TestAccuracy, r.CacheHits, r.CacheMisses, r.HitRate, r.rate()/base)
	}
	fmt.Println("hits/misses count remote keys only (keys of the worker's own slave are served from memory, never cached).")
}
