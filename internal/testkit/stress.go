package testkit

import (
	"fmt"
	"math/rand/v2"

	"github.com/flexps/flexps/tasks"
)

// LocalizeStress is the stress test of Lapse's repository as a stage: every
// worker runs params.ops operations on table params.table ("w"): Adds of its rank+1 to
// random keys, reads of random keys (a read must reflect every Add the
// worker made to the key itself), and every params.every operations a
// Localize of params.keys random keys (synchronous or asynchronous in turn,
// so moves overlap accesses). After a Barrier rank 0 reads the whole table
// and checks every key against the exact sum of all workers' Adds (the
// operation sequences are replayed from params.seed), and reports
// KeysChecked; a mismatch fails the stage naming the key.
const LocalizeStress = "testkit.localize_stress"

// KeysChecked is the metric LocalizeStress reports (rank 0).
const KeysChecked = "keys_checked"

func init() {
	tasks.Register(LocalizeStress, localizeStress)
	tasks.RegisterRelocates(LocalizeStress, func(s tasks.Stage) []string { return []string{s.Params.String("table", "w")} })
}

type stressOp struct {
	kind  int // 0 add, 1 get, 2 localize, 3 localize async
	keys  []uint64
	value float64
}

// stressOps replays rank's operation sequence.
func stressOps(seed uint64, rank, ops, every, nkeys int, size uint64, fn func(stressOp) error) error {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)))
	for i := 1; i <= ops; i++ {
		var op stressOp
		switch {
		case every > 0 && i%every == 0:
			op.kind = 2 + (i/every)%2
			op.keys = make([]uint64, nkeys)
			for j := range op.keys {
				op.keys[j] = rng.Uint64N(size)
			}
		case rng.IntN(4) == 0:
			op.kind, op.keys = 1, []uint64{rng.Uint64N(size)}
		default:
			op.kind, op.keys, op.value = 0, []uint64{rng.Uint64N(size)}, float64(rank+1)
		}
		if err := fn(op); err != nil {
			return err
		}
	}
	return nil
}

func localizeStress(info *tasks.Info) error {
	name := info.Params.String("table", "w")
	t, err := info.Table(name)
	if err != nil {
		return err
	}
	size := t.Spec().Size
	if t.Spec().Width != 1 {
		return fmt.Errorf("%s wants table %s of width 1", LocalizeStress, name)
	}
	seed := uint64(info.Params.Int("seed", 1))
	ops, every, nkeys := info.Params.Int("ops", 10000), info.Params.Int("every", 1000), info.Params.Int("keys", 16)
	mine := make([]float64, size)
	got := make([]float64, 1)
	n := 0
	err = stressOps(seed, info.Rank, ops, every, nkeys, size, func(op stressOp) error {
		n++
		if n%100 == 0 {
			info.Report(100, 0)
			// Iterations for the stage's consistency gates.
			if err := info.Clock(); err != nil {
				return err
			}
		}
		switch op.kind {
		case 0:
			mine[op.keys[0]] += op.value
			return t.Add(op.keys, []float64{op.value})
		case 1:
			if err := t.Get(op.keys, got); err != nil {
				return err
			}
			if got[0] < mine[op.keys[0]] {
				return fmt.Errorf("worker %d read key %d = %v after adding %v to it itself", info.Rank, op.keys[0], got[0], mine[op.keys[0]])
			}
			return nil
		case 2:
			return t.Localize(op.keys)
		default:
			_, err := t.LocalizeAsync(op.keys)
			return err
		}
	})
	if err != nil {
		return err
	}
	if err := info.Barrier(); err != nil {
		return err
	}
	m := map[string]float64{tasks.MetricSamples: float64(ops)}
	if info.Rank == 0 {
		want := StressSums(seed, info.Workers, ops, every, nkeys, size)
		keys := make([]uint64, size)
		for i := range keys {
			keys[i] = uint64(i)
		}
		all := make([]float64, size)
		if err := t.Get(keys, all); err != nil {
			return err
		}
		for k := range all {
			if all[k] != want[k] {
				return fmt.Errorf("key %d = %v after the stage, want the exact sum %v", k, all[k], want[k])
			}
		}
		m[KeysChecked] = float64(size)
	}
	info.ReportEpoch(1, m)
	return nil
}

// StressSums is what every key of the table holds after a LocalizeStress
// stage of workers workers with these params (on a table that started at 0).
func StressSums(seed uint64, workers, ops, every, nkeys int, size uint64) []float64 {
	want := make([]float64, size)
	for r := range workers {
		stressOps(seed, r, ops, every, nkeys, size, func(op stressOp) error {
			if op.kind == 0 {
				want[op.keys[0]] += op.value
			}
			return nil
		})
	}
	return want
}

// CheckStress reads table params.table whole (on any worker kind: a
// local stage loads it from wherever its keys live) and fails unless it
// holds StressSums of params.seed, params.workers, params.ops,
// params.every and params.keys. It reports KeysChecked.
const CheckStress = "testkit.check_stress"

func init() { tasks.Register(CheckStress, checkStress) }

func checkStress(info *tasks.Info) error {
	name := info.Params.String("table", "w")
	t, err := info.Table(name)
	if err != nil {
		return err
	}
	size := t.Spec().Size
	want := StressSums(uint64(info.Params.Int("seed", 1)), info.Params.Int("workers", 1), info.Params.Int("ops", 10000),
		info.Params.Int("every", 1000), info.Params.Int("keys", 16), size)
	keys := make([]uint64, size)
	for i := range keys {
		keys[i] = uint64(i)
	}
	got := make([]float64, size)
	if err := t.Get(keys, got); err != nil {
		return err
	}
	for k := range got {
		if got[k] != want[k] {
			return fmt.Errorf("table %s key %d = %v, want %v", name, k, got[k], want[k])
		}
	}
	info.ReportEpoch(1, map[string]float64{tasks.MetricSamples: float64(size), KeysChecked: float64(size)})
	return nil
}
