package kmeans

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/internal/tableops"
	"github.com/flexps/flexps/tasks"
)

// Lloyd is the kmeans.lloyd stage function (see the package doc for the
// clock protocol).
func Lloyd(info *tasks.Info) error {
	if err := info.RequireBSP("kmeans.lloyd"); err != nil {
		return err
	}
	cfg, err := ConfigFrom(info.Params)
	if err != nil {
		return err
	}
	ct, dims, err := cfg.centersTable(info)
	if err != nil {
		return err
	}
	k, r, w := cfg.K, cfg.Restarts, dims+2
	kr := k * r
	open := func(name string) (tasks.Table, error) {
		t, err := info.Table(name)
		if err != nil {
			return nil, fmt.Errorf("kmeans: %w (the task adds it when kmeans.lloyd is registered)", err)
		}
		return t, nil
	}
	runs, err := open(RunsTable(cfg.Centers))
	if err != nil {
		return err
	}
	acc, err := open(cfg.Acc)
	if err != nil {
		return err
	}
	far, err := open(FarTable(cfg.Centers))
	if err != nil {
		return err
	}
	if runs.Spec().Size < uint64(kr+1) || runs.Spec().Width != dims {
		return fmt.Errorf("kmeans: table %q is %d x %d, want %d x %d: run kmeans.init with the same k and restarts first",
			RunsTable(cfg.Centers), runs.Spec().Size, runs.Spec().Width, kr+1, dims)
	}
	if err := checkDims(acc, cfg.Acc, kr, w); err != nil {
		return err
	}
	if far.Spec().Size < uint64(2*r*info.Workers) || far.Spec().Width != dims+1 {
		return fmt.Errorf("kmeans: table %q is %d x %d, want at least %d x %d (2 x restarts x workers)",
			FarTable(cfg.Centers), far.Spec().Size, far.Spec().Width, 2*r*info.Workers, dims+1)
	}
	ctl, err := open(CtlTable(cfg.Centers))
	if err != nil {
		return err
	}
	if ctl.Spec().Size < ctlKeys || ctl.Spec().Width != 1 {
		return fmt.Errorf("kmeans: table %q is %d x %d, want at least %d x 1", CtlTable(cfg.Centers), ctl.Spec().Size, ctl.Spec().Width, ctlKeys)
	}
	tb := tables{runs: runs, acc: acc, far: far, ctl: ctl}
	train, err := info.Input(cfg.Train)
	if err != nil {
		return fmt.Errorf("kmeans: %w", err)
	}
	if err := tasks.CheckFormat(train, cfg.Train, "kmeans.lloyd", "libsvm", "csv"); err != nil {
		return err
	}
	cs := NewCenters(kr+1, dims, make([]float64, (kr+1)*dims)) // the last row is the control key
	// The weights kmeans.init wrote, if it standardized: both stages must
	// agree, or the seeds and the model measure other distances.
	var wt []float64
	if st, err := info.Table(ScaleTable(cfg.Centers)); err == nil {
		wt = make([]float64, dims)
		if err := st.Get(seqKeys(dims), wt); err != nil {
			return err
		}
		if !slices.ContainsFunc(wt, func(v float64) bool { return v != 0 }) {
			wt = nil
		}
	}
	switch {
	case cfg.Standardize && wt == nil:
		return fmt.Errorf("kmeans.lloyd: standardize = true but kmeans.init did not standardize: set standardize the same in both stages")
	case !cfg.Standardize && wt != nil:
		return fmt.Errorf("kmeans.lloyd: standardize = false but kmeans.init standardized: set standardize the same in both stages")
	}
	cs.Wt = wt
	keys := seqKeys(kr + 1)
	sums := make([]float64, kr*w)
	// Iteration it sums into the half it%2 of acc and far (accKeys,
	// farKeys): the update of it reads that half and clears the other
	// for the next iteration, so the sums it read stay until the update
	// after it, and a survivor can do it again.
	var accKeys, farKeys [2][]uint64
	for p := range 2 {
		accKeys[p] = make([]uint64, kr)
		for j := range kr {
			accKeys[p][j] = uint64(p*kr + j)
		}
		// This worker's farthest point per restart: distance, then the point.
		farKeys[p] = make([]uint64, r)
		for i := range r {
			farKeys[p][i] = uint64(p*r*info.Workers + i*info.Workers + info.Rank)
		}
	}
	farVals := make([]float64, r*(dims+1))
	ctlv := make([]float64, ctlKeys)
	// The update after each pass's Barrier is the first live worker's
	// (Share index 0): worker 0 while it lives; when its slave dies in a
	// stage that survives it, the next survivor takes over with a fresh
	// updater (its state is rebuilt from the tables, but for the previous
	// objectives: the convergence test waits one more iteration). Before,
	// only rank 0 updated: after its death the survivors went on with the
	// centers as they were, and the stage "succeeded" without writing the
	// model's centers (the output held kmeans.init's seeds).
	//
	// The update marks itself done in ctl last, once its other writes are
	// on every replica. A survivor that finds the last iteration's update
	// unmarked knows that its worker died during it (the dead worker's
	// writes are settled by then: the read waited for the failover), and
	// the survivors do it again before they go on: the first live one
	// updates from the same sums (its writes set values, so what the dead
	// one wrote of them does not count twice), the others wait for its
	// Clock. Before, the survivors went on from a half-done update: acc
	// not cleared (the next iteration summed onto the last one's), or
	// centers half moved.
	var u *updater
	for it := info.StartEpoch + 1; ; it++ {
		// A BSP read one clock past the last Barrier waits for worker
		// 0's clock (the first live worker's) after its update of the last
		// iteration, so it sees it.
		if err := runs.Get(keys, cs.C); err != nil {
			return err
		}
		if err := ctl.Get(ctlAll, ctlv); err != nil {
			return err
		}
		// (!=, not <: an earlier run of the stage in the task, a repeat,
		// left its own last iteration there.)
		if prev := it - 1; prev > info.StartEpoch && int(ctlv[ctlDone]) != prev {
			info.Log.Warn().Int("iteration", prev).Msg("k-means: the centers' update of this iteration did not finish (its worker's slave died): the first survivor does it again")
			if err := info.Barrier(); err != nil {
				return err
			}
			if idx, _ := info.Share(); idx == 0 {
				u = newUpdater(cfg, dims, info.Workers)
				if _, err := u.update(tb, prev, keys, cs, prev == cfg.Iterations); err != nil {
					return fmt.Errorf("kmeans.lloyd: stage %q iteration %d: %w", info.StageName, prev, err)
				}
			}
			if err := info.Clock(); err != nil {
				return err
			}
			it-- // read again, past that Clock
			continue
		}
		if it > cfg.Iterations || cs.C[kr*dims] != 0 { // done, or worker 0 saw every restart converge
			break
		}
		acck, fark := accKeys[it%2], farKeys[it%2]
		cs.Update()
		clear(sums)
		clear(farVals)
		n := int64(0)
		// In a stage that survives a slave's death the sums of each block
		// reach acc once the block is confirmed (else a worker that
		// died took them with it, and the survivors did not re-run the
		// block: the iteration's centers and objective missed its points).
		commit := func() error {
			if err := acc.Add(acck, sums); err != nil {
				return err
			}
			clear(sums)
			return acc.Flush()
		}
		err := tasks.EachRecordsCommit(info.Ctx, train, func(rec *datastore.Records) error {
			for i := 0; i < rec.Len(); i++ {
				_, fk, fv := rec.Row(i)
				x2, err := cs.Norm2(fk, fv, true)
				if err != nil {
					return fmt.Errorf("%s: %w", rec.Where(i), err)
				}
				for run := range r {
					j, d := cs.NearestIn(run*k, (run+1)*k, fk, fv, x2)
					s := sums[j*w : (j+1)*w]
					for t, key := range fk {
						s[key] += fv[t]
					}
					s[dims]++
					s[dims+1] += d
					if fr := farVals[run*(dims+1) : (run+1)*(dims+1)]; d > fr[0] {
						clear(fr)
						fr[0] = d
						for t, key := range fk {
							fr[1+key] = fv[t]
						}
					}
				}
			}
			n += int64(rec.Len())
			info.Report(int64(rec.Len()), 0)
			return nil
		}, commit)
		if err != nil {
			if errors.Is(err, ErrDims) {
				return fmt.Errorf("kmeans.lloyd: input %q: %w (table %q)", cfg.Train, err, cfg.Centers)
			}
			return fmt.Errorf("kmeans.lloyd: input %q: %w", cfg.Train, err)
		}
		if err := acc.Add(acck, sums); err != nil {
			return err
		}
		if err := far.Add(fark, farVals); err != nil {
			return err
		}
		// A Barrier, not a Clock: in a stage that survives a slave's
		// death a worker starved at the pass's end ticks idle clocks, so
		// clock counts do not line up after a pass; after the Barrier
		// every worker's sums are in acc.
		if err := info.Barrier(); err != nil {
			return err
		}
		metrics := map[string]float64{tasks.MetricSamples: float64(n)}
		if idx, _ := info.Share(); idx == 0 && u == nil {
			u = newUpdater(cfg, dims, info.Workers)
		}
		if idx, _ := info.Share(); idx == 0 {
			obj, err := u.update(tb, it, keys, cs, it == cfg.Iterations)
			if err != nil {
				return fmt.Errorf("kmeans.lloyd: stage %q iteration %d: %w", info.StageName, it, err)
			}
			metrics[tasks.MetricObjective] = obj
		}
		if err := info.Clock(); err != nil {
			return err
		}
		info.ReportEpoch(it, metrics)
	}
	if u != nil {
		info.Log.Info().Int("restart", u.best).Float64("objective", u.prev[u.best]).Msg("k-means: best restart")
	}
	// The model: the best restart's centers, written by the first live
	// worker and marked in ctl; if its slave dies meanwhile, the next one
	// writes them (from the tables: every update is complete by now).
	// Before, only the last updater wrote them, and a death at that point
	// left kmeans.init's seeds as the model of a task reported done.
	for {
		if idx, _ := info.Share(); idx == 0 && ctlv[ctlModel] == 0 {
			best := int(ctlv[ctlBest])
			if best < 0 || best >= r {
				return fmt.Errorf("kmeans.lloyd: stage %q: table %q names restart %d of %d", info.StageName, CtlTable(cfg.Centers), best, r)
			}
			if err := tableops.Set(ct, keys[:k], cs.C[best*k*dims:(best+1)*k*dims]); err != nil {
				return err
			}
			if err := ct.Flush(); err != nil {
				return err
			}
			// Both halves of acc and far empty, for a later run of the
			// stage in the task (a repeat): its first iteration sums
			// into the half 1, where the last update left its own sums
			// when its iteration was odd. Before, that run's first
			// centers and objective counted them too. (A negation
			// again, after a death, adds 0.)
			if err := tableops.Negate(acc, seqKeys(2*kr), make([]float64, 2*kr*w)); err != nil {
				return err
			}
			if err := tableops.Negate(far, seqKeys(2*r*info.Workers), make([]float64, 2*r*info.Workers*(dims+1))); err != nil {
				return err
			}
			if err := acc.Flush(); err != nil {
				return err
			}
			if err := far.Flush(); err != nil {
				return err
			}
			if err := tableops.Set(ctl, ctlAll[ctlModel:ctlModel+1], []float64{1}); err != nil {
				return err
			}
			if err := ctl.Flush(); err != nil {
				return err
			}
		}
		if err := info.Barrier(); err != nil {
			return err
		}
		if err := ctl.Get(ctlAll, ctlv); err != nil {
			return err
		}
		if ctlv[ctlModel] != 0 {
			return nil
		}
		info.Log.Warn().Msg("k-means: the worker writing the model died: the first survivor writes it")
	}
}

// The keys of the ctl table.
const (
	ctlDone  = iota // the last iteration whose update is complete
	ctlBest         // the best restart as of that update
	ctlModel        // 1 once the model's centers are written
	ctlKeys
)

var ctlAll = seqKeys(ctlKeys)

// getAdder is the part of a table the updates use.
type getAdder = tableops.GetAdder

// tables are the tables an update reads and writes.
type tables struct {
	runs, acc, far, ctl interface {
		getAdder
		Flush() error
	}
}

// updater is the first live worker's half-iteration after the iteration's
// Barrier.
type updater struct {
	cfg        Config
	dims       int
	read, far  []float64
	delta      []float64 // (k*restarts+1)*dims: the centers' change, then the control key
	next       []float64 // the centers after the update
	prev, objs []float64 // per restart: the previous and this iteration's objective
	best       int       // the restart with the lowest objective so far
	accKeys    []uint64  // the half of acc an update reads or clears
	farKeys    []uint64  // the half of far
}

func newUpdater(cfg Config, dims, workers int) *updater {
	kr := cfg.K * cfg.Restarts
	return &updater{cfg: cfg, dims: dims, read: make([]float64, kr*(dims+2)), far: make([]float64, cfg.Restarts*workers*(dims+1)),
		delta: make([]float64, (kr+1)*dims), next: make([]float64, kr*dims), objs: make([]float64, cfg.Restarts),
		accKeys: make([]uint64, kr), farKeys: make([]uint64, cfg.Restarts*workers)}
}

// update is the update of iteration it: it reads the summed partials
// (the half it%2 of acc and far), moves each center to its points' mean
// (a center without points to its restart's farthest unused point, or
// nowhere if none is left), clears the other half of acc and far for the
// next iteration (adding its negation: x + -x is exactly 0 in floating
// point), signals the workers to stop once every restart converged, marks
// the iteration done in ctl once all that is on every replica, and
// returns the best restart's objective. Every write sets a value from
// what the tables hold, so an update done again after its first worker
// died half-way ends where the whole first one would have.
func (u *updater) update(tb tables, it int, keys []uint64, cs *Centers, last bool) (float64, error) {
	k, r, dims, w := u.cfg.K, u.cfg.Restarts, u.dims, u.dims+2
	kr := k * r
	workers := len(u.farKeys) / r
	half := func(keys []uint64, p, n int) []uint64 {
		for j := range keys {
			keys[j] = uint64(p*n + j)
		}
		return keys
	}
	accKeys, farKeys := half(u.accKeys, it%2, kr), half(u.farKeys, it%2, r*workers)
	if err := tb.acc.Get(accKeys, u.read); err != nil {
		return 0, err
	}
	if err := tb.far.Get(farKeys, u.far); err != nil {
		return 0, err
	}
	clear(u.delta)
	for run := range r {
		// Candidates for empty clusters: the workers' farthest points,
		// farthest first.
		cands := make([]int, 0, workers)
		for i := range workers {
			if u.far[(run*workers+i)*(dims+1)] > 0 {
				cands = append(cands, run*workers+i)
			}
		}
		slices.SortFunc(cands, func(a, b int) int {
			da, db := u.far[a*(dims+1)], u.far[b*(dims+1)]
			switch {
			case da > db:
				return -1
			case da < db:
				return 1
			}
			return a - b
		})
		obj := 0.0
		for j := run * k; j < (run+1)*k; j++ {
			s := u.read[j*w : (j+1)*w]
			c, dl, nx := cs.C[j*dims:(j+1)*dims], u.delta[j*dims:(j+1)*dims], u.next[j*dims:(j+1)*dims]
			obj += s[dims+1]
			copy(nx, c)
			switch n := s[dims]; {
			case n > 0:
				for f := range dims {
					nx[f] = s[f] / n
				}
			case len(cands) > 0:
				copy(nx, u.far[cands[0]*(dims+1)+1:(cands[0]+1)*(dims+1)])
				cands = cands[1:]
			}
			for f := range dims {
				if math.IsNaN(nx[f]) || math.IsInf(nx[f], 0) {
					return 0, fmt.Errorf("center %d of restart %d became %v: the input has values too large to sum", j-run*k, run, nx[f])
				}
				dl[f] = nx[f] - c[f]
			}
		}
		if math.IsNaN(obj) || math.IsInf(obj, 0) {
			return 0, fmt.Errorf("restart %d: the objective is %v: the input has values too large to square", run, obj)
		}
		u.objs[run] = obj
	}
	converged := u.prev != nil && !last
	for run := range r {
		if u.objs[run] < u.objs[u.best] {
			u.best = run
		}
		if converged && !(u.cfg.Tol > 0 && u.prev[run]-u.objs[run] <= u.cfg.Tol*u.prev[run]) {
			converged = false
		}
	}
	if u.prev == nil {
		u.prev = make([]float64, r)
	}
	copy(u.prev, u.objs)
	stop := 0.0
	if converged {
		stop = 1
	}
	u.delta[kr*dims] = stop - cs.C[kr*dims] // as read: an update done again finds it set
	if err := tb.runs.Add(keys, u.delta); err != nil {
		return 0, err
	}
	// The next iteration's half, holding the sums of the one before
	// (read by its update already).
	accKeys, farKeys = half(accKeys, (it+1)%2, kr), half(farKeys, (it+1)%2, r*workers)
	if err := tableops.Negate(tb.acc, accKeys, u.read); err != nil {
		return 0, err
	}
	if err := tableops.Negate(tb.far, farKeys, u.far); err != nil {
		return 0, err
	}
	// Everything above on every replica before the mark: the Adds of a
	// worker that dies with them unacknowledged may be on one copy and
	// not the next, and no one sends them again (a drill killed the
	// updater's slave right after an update, and the backup that took
	// over acc lacked its reset: the next iteration summed onto the last
	// one's sums, objective 2% high). And the mark on every replica before
	// the Clock lets the others read.
	if err := tb.runs.Flush(); err != nil {
		return 0, err
	}
	// The best restart (and the model not written: a task's next round
	// of the stage writes it again), then the mark alone: the ctl keys
	// may live on different slaves, so one Add of all could land half.
	if err := tableops.Set(tb.ctl, ctlAll[ctlBest:ctlModel+1], []float64{float64(u.best), 0}); err != nil {
		return 0, err
	}
	if err := tb.ctl.Flush(); err != nil {
		return 0, err
	}
	if err := tableops.Set(tb.ctl, ctlAll[ctlDone:ctlDone+1], []float64{float64(it)}); err != nil {
		return 0, err
	}
	return u.objs[u.best], tb.ctl.Flush()
}
