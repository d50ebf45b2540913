package tasks

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/rs/zerolog"
)

// Table is a worker's handle on a table. Get and Add take keys in
// [0, Size) and values laid out key by key, Width values each. Chunk forms
// address whole chunks of ChunkSize consecutive keys (the last chunk may be
// shorter). Keys owned by the worker's own slave are served from memory;
// the rest are batched per owner into one binary message each. A Get waits
// as long as the stage's consistency model requires. A worker is one
// goroutine: its tables, like its Info, are not safe for concurrent use
// (a stage function that computes on several goroutines calls them from
// one at a time; go test -race reports the others).
type Table interface {
	Spec() kvstore.TableSpec
	Get(keys []uint64, out []float64) error
	Add(keys []uint64, deltas []float64) error
	GetChunk(chunks []uint64, out []float64) error
	AddChunk(chunks []uint64, deltas []float64) error
	// Localize moves keys to the worker's slave (Lapse-style dynamic
	// allocation) and returns when they are there: from then on the
	// slave's workers read and write them in memory, with no message,
	// until another slave localizes them. Every Add the worker made before
	// is applied first. A no-op for tables already in the worker's memory
	// (local, hogwild and single kinds, a one-slave stage).
	Localize(keys []uint64) error
	// LocalizeAsync starts the move and returns at once (latency hiding:
	// localize the next batch's keys while computing this one); Wait on
	// the result returns when they are here. Accesses in between are
	// correct wherever the keys are.
	LocalizeAsync(keys []uint64) (kvstore.Pending, error)
	// LocalizeChunks is Localize of whole chunks.
	LocalizeChunks(chunks []uint64) error
	// Flush returns when every Add the worker made (to any table) is
	// applied and acknowledged, by every replica of a replicated table.
	// Adds are asynchronous otherwise; Clock, Barrier and the end of the
	// stage wait for them anyway, so most stage functions never call it.
	Flush() error
	// GetAsync starts a Get and returns at once; out holds the values
	// when Wait on the result returns (latency hiding: read the next
	// batch's parameters while computing this one). The read is gated at
	// the worker's clock when issued, except for keys in the worker's
	// memory that the consistency model holds back then: those are read
	// at Wait, gated at the clock then. A read the process cache serves
	// whole (every remote key fresh in it) is done at once.
	GetAsync(keys []uint64, out []float64) (kvstore.Pending, error)
}

// Runtime is what the engine gives a worker; Info wraps it.
type Runtime interface {
	Table(name string) (Table, error)
	// Input opens the worker's share of a named input. Each call of Pass
	// on the result is one epoch over that share.
	Input(name string) (Input, error)
	// Clock finishes the worker's current iteration.
	Clock() error
	// Barrier waits until every worker of the stage called Barrier as many
	// times as this one, with every Add each of them made before its call
	// applied to the tables.
	Barrier() error
	// Report sends progress (samples and loss since the last report).
	Report(p Progress)
	// ReportEpoch sends an epoch's metrics; the master sums them over the
	// stage's workers.
	ReportEpoch(epoch int, metrics map[string]float64)
	// Live lists the stage's live ranks, in order, as the last Barrier's
	// release named them; nil while every worker lives.
	Live() []int
}

// Input is a worker's share of an input.
type Input interface {
	// Pass starts one pass (epoch) over this worker's share.
	Pass(ctx context.Context) (datastore.Pass, error)
}

// FormatNamer is implemented by inputs that know the format their lines
// are parsed in ("libsvm", "csv", "ratings", "text").
type FormatNamer interface {
	FormatName() string
}

// CheckFormat returns an error naming the input, its format and what fn
// reads unless in is read in one of formats. A text input gives every
// record label 0 and no features, so lr.sgd on one trained a bias on
// nothing, reported test accuracy 1.0 and wrote the model; k-means found
// objective 0. An input that does not name its format passes.
func CheckFormat(in Input, name, fn string, formats ...string) error {
	f, ok := in.(FormatNamer)
	if !ok || slices.Contains(formats, f.FormatName()) {
		return nil
	}
	return fmt.Errorf("%s: input %q is read as %s; %s reads %s (set the input's format)", fn, name, f.FormatName(), fn, strings.Join(formats, " or "))
}

// Progress is a worker's progress since its previous report.
type Progress struct {
	Samples int64   `json:"samples"`
	LossSum float64 `json:"loss_sum"`
}

// Info is everything a worker knows about its job.
type Info struct {
	Ctx        context.Context
	Task       string // task id
	TaskName   string
	Stage      int // stage index
	StageName  string
	Rank       int // worker rank within the stage, 0..Workers-1
	Workers    int
	LocalRank  int // rank among this stage's workers on this slave
	LocalCount int
	Slave      string
	// Consistency and WorkerKind are the stage's, so a stage function
	// whose correctness depends on them (BSP barriers) can refuse others.
	Consistency kvstore.Consistency
	WorkerKind  string
	Params      Params
	// StartEpoch is how many epochs of this stage are already done: 0 on
	// a fresh run, the checkpoint's epoch when the task was resumed. A
	// stage function that counts epochs starts at StartEpoch+1 (its
	// tables already hold the model after StartEpoch epochs).
	StartEpoch int
	Log        zerolog.Logger
	Runtime    Runtime
}

// RequireBSP returns an error unless the stage runs under BSP or has a
// single worker: for algorithms that use clocks as barriers.
func (i *Info) RequireBSP(what string) error {
	if i.Workers > 1 && i.Consistency.Kind != kvstore.BSP {
		return fmt.Errorf("%s relies on BSP barriers between its %d workers; set consistency = \"bsp\" (got %q)", what, i.Workers, i.Consistency.Kind)
	}
	return nil
}

// Table returns the named table.
func (i *Info) Table(name string) (Table, error) { return i.Runtime.Table(name) }

// Input returns the named input's share for this worker.
func (i *Info) Input(name string) (Input, error) { return i.Runtime.Input(name) }

// OptionalInput returns input name, chosen by the stage param named param
// (or the param's default), for a role the stage can do without, such as
// a test set: nil when the param is not set and the stage cannot read
// input name. A param that is set must name an input the stage reads: a
// misspelt test = "vaild" is an error, not a silently skipped evaluation.
func (i *Info) OptionalInput(param, name string) (Input, error) {
	in, err := i.Input(name)
	if err != nil {
		if _, set := i.Params[param]; set {
			return nil, fmt.Errorf("param %s = %q: %w", param, name, err)
		}
		return nil, nil
	}
	return in, nil
}

// Clock ends the worker's current iteration: consistency models count
// iterations by it.
func (i *Info) Clock() error { return i.Runtime.Clock() }

// Barrier waits until every worker of the stage has reached the same
// barrier (the n-th call of each worker meets the n-th call of the others)
// and every Add made before it, by any worker, is applied. After it, every
// worker reads the same model until one writes again: use it before
// measuring the model a stage leaves behind (a final test evaluation),
// or between the phases of an algorithm. A worker that fails or a stage
// that ends makes the others' Barrier return an error, and so does one
// that returns before a Barrier the others wait at (it fails the stage,
// naming that worker). Costs one round trip to the master.
func (i *Info) Barrier() error { return i.Runtime.Barrier() }

// Share is this worker's part of collective work among the stage's live
// workers as of its last Barrier: index in [0, count), count the live
// workers. While every worker lives it is (Rank, Workers). When a slave
// dies in a stage that survives it, its workers are counted out and the
// next Barrier's release tells each survivor who is left, so work split
// "by rank" after a Barrier (each worker rewrites keys
// [size*index/count, size*(index+1)/count) of a table) still covers every
// key: split by Share, not by Rank and Workers, and call it after the
// Barrier that starts the collective step.
func (i *Info) Share() (index, count int) {
	live := i.Runtime.Live()
	if live == nil {
		return i.Rank, i.Workers
	}
	for k, r := range live {
		if r == i.Rank {
			return k, len(live)
		}
	}
	// Not among the living: this worker's slave was declared dead, and
	// its next Barrier fails. Until then it keeps its own share.
	return i.Rank, i.Workers
}

// Report sends progress to the master (cheap; call it every batch).
func (i *Info) Report(samples int64, lossSum float64) {
	i.Runtime.Report(Progress{Samples: samples, LossSum: lossSum})
}

// ReportEpoch sends metrics for an epoch; they are summed over workers.
// When the task takes checkpoints and the stage is a ps stage, it is
// also a barrier: it returns once every worker of the stage reported the
// epoch and the master, if a checkpoint is due, has snapshot the tables.
// So every worker must report every epoch, after its last Add of it.
// Epochs count from 1 (a resumed stage's first is StartEpoch+1) and go up:
// an epoch below 1, or below the one reported before, is not sent, and
// the worker fails with an error naming it at its next Clock or Barrier,
// or when the stage function returns. Conventional keys: samples, loss_sum, correct, test_samples,
// test_correct, test_loss_sum, sq_err_sum, test_sq_err_sum, objective.
func (i *Info) ReportEpoch(epoch int, metrics map[string]float64) {
	i.Runtime.ReportEpoch(epoch, metrics)
}
