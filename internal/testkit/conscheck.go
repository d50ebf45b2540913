package testkit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// ConsCheck checks a stage's consistency model end to end. Table
// params.table ("t") of width 1 is laid out as params-free columns: key
// j*W + r (W the stage's workers) belongs to worker r, which adds 1 to
// each of its keys once per iteration, so the value of any of r's keys is
// the count of r's Adds a shard applied. Every iteration a worker first
// reads the whole table (params.read: "get", "async" (GetAsync, waited
// after the iteration's Add), "next" (GetNext of the next iteration,
// waited after the Clock), "chunk" (GetChunk/AddChunk)), then adds, then
// clocks; at every read it asserts what the model promises for a read at
// clock c, with s the staleness (BSP 0, SSP s, SparseSSP s+p; ASP: none):
// its own keys hold exactly its c Adds; another worker r's keys hold at
// least min(c-s, n_r) and at most min(c+s+1, n_r) Adds (n_r its
// iteration count), whole numbers, never fewer than this worker saw of r
// before. params.iters is one count for every rank or a comma list per
// rank ("20,3,0"); params.skew sleeps rank*skew microseconds per
// iteration; params.localize moves a random quarter of the keys to the
// worker's slave every that many iterations. With params.input the
// iterations are the records of that input (one per record, params.epochs
// passes) instead, and only the own-keys and never-fewer rules apply
// (idle clocks decouple other workers' clocks from their Adds); with
// params.epoch_records (the input's record count, in-process clusters
// only) a worker whose pass ends checks that the workers finished every
// record of the epoch before (no worker two epochs ahead of another), or
// with params.epoch_check = "settled" of that epoch itself.
// Every
// worker ends with a Barrier, after which rank 0 checks every key holds
// its worker's total and reports ConsChecked (reads checked, all ranks)
// and ConsTotal (the sum of every key / keys per worker, rank 0).
const ConsCheck = "testkit.cons_check"

// Metrics ConsCheck reports.
const (
	ConsChecked = "cons_checked"
	ConsTotal   = "cons_total"
)

func init() {
	tasks.Register(ConsCheck, consCheck)
	tasks.RegisterRelocates(ConsCheck, func(s tasks.Stage) []string {
		if s.Params.Int("localize", 0) > 0 {
			return []string{s.Params.String("table", "t")}
		}
		return nil
	})
}

// seenRecords counts, per task and epoch, the records every worker of
// the stage finished, in this process's memory: params.epoch_records
// (in-process clusters only) checks it when a worker's pass ends.
var seenRecords sync.Map // "task/epoch" -> *atomic.Int64

func epochSeen(task string, epoch int) *atomic.Int64 {
	c, _ := seenRecords.LoadOrStore(fmt.Sprintf("%s/%d", task, epoch), new(atomic.Int64))
	return c.(*atomic.Int64)
}

func consIters(p string, rank int) (int, error) {
	parts := strings.Split(p, ",")
	if len(parts) == 1 {
		return strconv.Atoi(strings.TrimSpace(parts[0]))
	}
	if rank >= len(parts) {
		return 0, fmt.Errorf("%s: iters %q names no count for rank %d", ConsCheck, p, rank)
	}
	return strconv.Atoi(strings.TrimSpace(parts[rank]))
}

func consCheck(info *tasks.Info) error {
	t, err := info.Table(info.Params.String("table", "t"))
	if err != nil {
		return err
	}
	spec := t.Spec()
	if spec.Width != 1 {
		return fmt.Errorf("%s wants a table of width 1", ConsCheck)
	}
	W := info.Workers
	size := int(spec.Size)
	if size < W {
		return fmt.Errorf("%s: table of %d keys for %d workers", ConsCheck, size, W)
	}
	per := size / W
	all := make([]uint64, per*W)
	for i := range all {
		all[i] = uint64(i)
	}
	mine := make([]uint64, per)
	for j := range mine {
		mine[j] = uint64(j*W + info.Rank)
	}
	ones := make([]float64, per)
	for j := range ones {
		ones[j] = 1
	}
	n := make([]int, W)
	input := info.Params.String("input", "")
	if input == "" {
		for r := range n {
			if n[r], err = consIters(info.Params.String("iters", "20"), r); err != nil {
				return err
			}
		}
	}
	s, bounded := int64(0), true
	switch info.Consistency.Kind {
	case kvstore.ASP:
		bounded = false
	case kvstore.SSP:
		s = int64(info.Consistency.Staleness)
	case kvstore.SparseSSP:
		s = int64(info.Consistency.Staleness + info.Consistency.Speculation)
	}
	if info.WorkerKind == tasks.KindSingle || W == 1 {
		bounded = true
	}
	mode := info.Params.String("read", "get")
	slack := int64(0)
	if mode == "async" {
		slack = 1
	}
	skew := time.Duration(info.Params.Int("skew", 0)*info.Rank) * time.Microsecond
	every := info.Params.Int("localize", 0)
	rng := rand.New(rand.NewPCG(uint64(info.Rank), 7))
	seen := make([]float64, W) // the least count of each worker's keys last read
	out := make([]float64, len(all))
	chunks := make([]uint64, (size+int(spec.ChunkSize)-1)/int(spec.ChunkSize))
	for i := range chunks {
		chunks[i] = uint64(i)
	}
	var chunkOut, chunkAdd []float64
	if mode == "chunk" {
		chunkOut = make([]float64, size)
		chunkAdd = make([]float64, size)
		for _, k := range mine {
			chunkAdd[k] = 1
		}
	}
	checked := 0
	// check asserts a read at clock c (own: the own Adds it may hold).
	check := func(c int64, ownLo, ownHi int64, vals []float64, what string) error {
		checked++
		lo := make([]float64, W)
		for r := range lo {
			lo[r] = math.Inf(1)
		}
		for i, v := range vals {
			r := i % W
			if v != math.Trunc(v) || v < 0 {
				return fmt.Errorf("%s rank %d clock %d: key %d = %v, not a count of Adds", what, info.Rank, c, i, v)
			}
			if v < seen[r] {
				return fmt.Errorf("%s rank %d clock %d: key %d of rank %d = %v, but an earlier read saw %v of rank %d's Adds (an Add lost)", what, info.Rank, c, i, r, v, seen[r], r)
			}
			if r == info.Rank {
				if int64(v) < ownLo || int64(v) > ownHi {
					return fmt.Errorf("%s rank %d clock %d: own key %d = %v, want [%d, %d] (own Adds)", what, info.Rank, c, i, v, ownLo, ownHi)
				}
			} else if input == "" {
				nr := int64(n[r])
				hi := nr
				if bounded {
					// A worker adds at clock x once a read at x passed
					// (min >= x-s); with GetAsync, once its read at
					// x-1 was waited for.
					hi = min(c+s+1+slack, nr)
				}
				if int64(v) > hi {
					return fmt.Errorf("%s rank %d clock %d: key %d of rank %d = %v, more than the %d Adds rank %d may have made (%s)", what, info.Rank, c, i, r, v, hi, r, info.Consistency.Kind)
				}
				if bounded && int64(v) < min(c-s, nr) {
					return fmt.Errorf("%s rank %d clock %d: key %d of rank %d = %v, want at least %d (%s: every Add of clocks < %d)", what, info.Rank, c, i, r, v, min(c-s, nr), info.Consistency.Kind, c-s)
				}
			}
			lo[r] = min(lo[r], v)
		}
		copy(seen, lo)
		return nil
	}
	var c int64
	read := func() error {
		switch mode {
		case "chunk":
			if err := t.GetChunk(chunks, chunkOut); err != nil {
				return err
			}
			return check(c, c, c, chunkOut[:len(all)], "GetChunk")
		default:
			if err := t.Get(all, out); err != nil {
				return err
			}
			return check(c, c, c, out, "Get")
		}
	}
	var next kvstore.Pending
	iteration := func() error {
		if skew > 0 {
			time.Sleep(skew)
		}
		if every > 0 && c > 0 && c%int64(every) == 0 {
			ks := make([]uint64, 0, len(all)/4)
			for range cap(ks) {
				ks = append(ks, all[rng.IntN(len(all))])
			}
			if err := t.Localize(ks); err != nil {
				return err
			}
		}
		var async kvstore.Pending
		switch mode {
		case "async":
			if async, err = t.GetAsync(all, out); err != nil {
				return err
			}
		case "next":
			tc, ok := t.(interface {
				GetNext([]uint64, []float64) (kvstore.Pending, error)
			})
			if !ok {
				if err := read(); err != nil {
					return err
				}
				break
			}
			if next == nil { // the first iteration reads now
				if err := t.Get(all, out); err != nil {
					return err
				}
				if err := check(c, c, c, out, "Get"); err != nil {
					return err
				}
			}
			if next, err = tc.GetNext(all, out); err != nil {
				return err
			}
		default:
			if err := read(); err != nil {
				return err
			}
		}
		if mode == "chunk" {
			err = t.AddChunk(chunks, chunkAdd)
		} else {
			err = t.Add(mine, ones)
		}
		if err != nil {
			return err
		}
		if async != nil {
			if err := async.Wait(); err != nil {
				return err
			}
			if err := check(c, c, c+1, out, "GetAsync"); err != nil {
				return err
			}
		}
		if err := info.Clock(); err != nil {
			return err
		}
		c++
		if next != nil {
			if err := next.Wait(); err != nil {
				return err
			}
			ownLo := c - 1 // SSP/ASP: may miss this iteration's own Add
			if info.Consistency.Kind == kvstore.BSP {
				ownLo = c
			}
			if err := check(c, ownLo, c, out, "GetNext"); err != nil {
				return err
			}
		}
		info.Report(1, 0)
		return nil
	}
	if input == "" {
		for range n[info.Rank] {
			if err := iteration(); err != nil {
				return err
			}
		}
	} else {
		in, err := info.Input(input)
		if err != nil {
			return err
		}
		want := int64(info.Params.Int("epoch_records", 0))
		settled := info.Params.String("epoch_check", "") == "settled"
		for e := range info.Params.Int("epochs", 1) {
			seen := epochSeen(info.Task, e)
			if err := tasks.EachRecords(info.Ctx, in, func(recs *datastore.Records) error {
				for range recs.Len() {
					if err := iteration(); err != nil {
						return err
					}
					seen.Add(1)
				}
				return nil
			}); err != nil {
				return err
			}
			// "settled": this epoch is done; otherwise the one before.
			done := e - 1
			if settled {
				done = e
			}
			if want > 0 && done >= 0 {
				if got := epochSeen(info.Task, done).Load(); got != want {
					return fmt.Errorf("rank %d: epoch %d ended when the workers had done %d of epoch %d's %d records", info.Rank, e+1, got, done+1, want)
				}
			}
		}
	}
	if next != nil {
		// A GetNext issued in the last iteration was already waited for.
		next = nil
	}
	if err := info.Barrier(); err != nil {
		return err
	}
	metrics := map[string]float64{ConsChecked: float64(checked)}
	if info.Rank == 0 {
		if err := t.Get(all, out); err != nil {
			return err
		}
		total := 0.0
		for r := range W {
			want := -1.0
			for j := range per {
				v := out[j*W+r]
				if input == "" && v != float64(n[r]) {
					return fmt.Errorf("after the barrier: key %d of rank %d = %v, want %d", j*W+r, r, v, n[r])
				}
				if want >= 0 && v != want {
					return fmt.Errorf("after the barrier: rank %d's keys differ: %v and %v", r, want, v)
				}
				want = v
			}
			total += want
		}
		metrics[ConsTotal] = total
	}
	info.ReportEpoch(1, metrics)
	return nil
}
