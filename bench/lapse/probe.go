package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/benchkit"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// The latency probe: the summed metrics of a stage give Localize's mean
// time per call but no distribution, so a stage function of this program
// times every call and writes the durations to a file per worker (all
// processes run on this machine), from which the bench takes p50 and p99.
// It runs on its own cluster: the `flexps master` binary and slaves that
// are this program (-role slave), so the function is registered in them.

// probeFunc is the probe's stage function name.
const probeFunc = "bench.localize_probe"

func init() { tasks.Register(probeFunc, probe) }

// probe localizes, like mf.blocked, one block of the items table per
// sub-epoch (block (rank+s) mod workers: at any time each block is wanted
// by one worker, and its keys sit on the slave of the worker that had it
// the sub-epoch before), then `single` random keys one call each: the
// latency of one relocation (requester -> home -> old owner -> requester).
// Params: subepochs, single, out (directory of the per-worker files).
func probe(info *tasks.Info) error {
	items, err := info.Table("items")
	if err != nil {
		return err
	}
	out := info.Params.String("out", "")
	if out == "" {
		return errors.New(probeFunc + ": param out (a directory) is required")
	}
	n, w := items.Spec().Size, uint64(max(info.Workers, 1))
	var lines []string
	timed := func(kind string, keys []uint64) error {
		start := time.Now()
		if err := items.Localize(keys); err != nil {
			return fmt.Errorf("%s: localize %d keys: %w", probeFunc, len(keys), err)
		}
		lines = append(lines, fmt.Sprintf("%s %d %d", kind, len(keys), time.Since(start).Nanoseconds()))
		return nil
	}
	for s := range info.Params.Int("subepochs", 2*int(w)) {
		b := (uint64(info.Rank) + uint64(s)) % w
		lo, hi := b*n/w, (b+1)*n/w
		keys := make([]uint64, 0, hi-lo)
		for k := lo; k < hi; k++ {
			keys = append(keys, k)
		}
		if err := timed("block", keys); err != nil {
			return err
		}
		if err := info.Barrier(); err != nil {
			return err
		}
	}
	rng := rand.New(rand.NewPCG(uint64(info.Rank), 7))
	for range info.Params.Int("single", 200) {
		if err := timed("single", []uint64{rng.Uint64N(n)}); err != nil {
			return err
		}
	}
	path := filepath.Join(out, fmt.Sprintf("lat-%d.txt", info.Rank))
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("%s: %w", probeFunc, err)
	}
	return nil
}

// latency is the probe's result: per kind of call, its size and the
// distribution of its duration.
type latency struct {
	kind          string
	keys          float64 // mean keys per call
	calls         int
	p50, p99, avg time.Duration
}

func runProbe(o opts, dir string) ([]latency, error) {
	cl, err := benchkit.StartWith(o.flexps, dir, o.slaves, o.slots, benchkit.Options{}, func(c *benchkit.Cluster, i int) []string {
		return slaveRole.Argv(c, fmt.Sprintf("probe-%d", i))
	})
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	cfg, err := engine.LoadClusterConfig(cl.Config)
	if err != nil {
		return nil, err
	}
	cfg.NATS.URL = cl.URL
	client, err := engine.Dial(*cfg)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	out := filepath.Join(dir, "latency")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	task := tasks.NewTask("localize-probe").
		AddTable(kvstore.TableSpec{Name: "items", Size: uint64(o.items), Width: o.rank, Init: "uniform:0.1", Replicas: 1}).
		SetStages(tasks.Stage{Name: "probe", Func: probeFunc, Workers: o.slaves * o.slots,
			Consistency: kvstore.Consistency{Kind: kvstore.ASP},
			Params:      tasks.Params{"subepochs": 4 * o.slaves * o.slots, "single": 300, "out": out}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st, err := client.SubmitAndWait(ctx, task, nil)
	if err != nil {
		return nil, err
	}
	if st.State != status.Done {
		return nil, fmt.Errorf("probe task %s: %s", st.State, st.Reason)
	}
	return readLatencies(out, o.slaves*o.slots)
}

func readLatencies(dir string, workers int) ([]latency, error) {
	type acc struct {
		keys float64
		durs []time.Duration
	}
	by := map[string]*acc{}
	for r := range workers {
		path := filepath.Join(dir, fmt.Sprintf("lat-%d.txt", r))
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for line := 1; sc.Scan(); line++ {
			fs := strings.Fields(sc.Text())
			if len(fs) != 3 {
				continue
			}
			k, err1 := strconv.ParseFloat(fs[1], 64)
			ns, err2 := strconv.ParseInt(fs[2], 10, 64)
			if err1 != nil || err2 != nil {
				f.Close()
				return nil, fmt.Errorf("%s:%d: bad line %q", path, line, sc.Text())
			}
			a := by[fs[0]]
			if a == nil {
				a = &acc{}
				by[fs[0]] = a
			}
			a.keys += k
			a.durs = append(a.durs, time.Duration(ns))
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	var out []latency
	for _, kind := range []string{"block", "single"} {
		a := by[kind]
		if a == nil || len(a.durs) == 0 {
			continue
		}
		slices.Sort(a.durs)
		var sum time.Duration
		for _, d := range a.durs {
			sum += d
		}
		q := func(p float64) time.Duration { return a.durs[min(len(a.durs)-1, int(p*float64(len(a.durs))))] }
		out = append(out, latency{kind: kind, keys: a.keys / float64(len(a.durs)), calls: len(a.durs),
			p50: q(0.5), p99: q(0.99), avg: sum / time.Duration(len(a.durs))})
	}
	return out, nil
}
