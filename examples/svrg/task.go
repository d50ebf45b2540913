package svrg

import (
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// Config describes an SVRG task for Task. Zero fields take the defaults
// noted beside them.
type Config struct {
	Name      string // task name ("svrg")
	Train     string // LIBSVM training data (required)
	BlockSize int64  // input block size in bytes (0: the cluster default)
	Dim       uint64 // feature dimensions: the size of w, snap and mu (required)
	DType     kvstore.DType

	Rounds      int    // rounds of [full, sgd] (10)
	FullWorkers int    // svrg.full workers, BSP (4)
	FullKind    string // svrg.full worker kind (ps)
	SGDWorkers  int    // svrg.sgd workers (1)
	SGDKind     string
	// SGDConsistency of the sgd stage (BSP).
	SGDConsistency kvstore.Consistency
	// SGDMaxSlaves spreads a ps sgd stage over at most this many slaves
	// (0: any).
	SGDMaxSlaves int

	EpochsInner int     // passes of the sgd stage per round (1)
	MinSteps    int     // fewest sgd steps per round (0: the stage's default, 1000)
	Batch       int     // sgd mini-batch (100)
	LR          float64 // sgd learning rate (0: chosen from the data)
	L2          float64 // l2 regularization (0)
	// NoIntercept fits no intercept; NoStandardize trains on raw feature
	// values (the stages' intercept and standardize params, default on).
	NoIntercept   bool
	NoStandardize bool

	// FinalObjective appends one more svrg.full stage, named "final",
	// whose "objective" metric is the objective of the trained model.
	FinalObjective bool
	Output         string // model path ("": not written)
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "svrg"
	}
	if c.DType == "" {
		c.DType = kvstore.Float64
	}
	if c.Rounds == 0 {
		c.Rounds = 10
	}
	if c.FullWorkers == 0 {
		c.FullWorkers = 4
	}
	if c.FullKind == "" {
		c.FullKind = tasks.KindPS
	}
	if c.SGDWorkers == 0 {
		c.SGDWorkers = 1
	}
	if c.SGDKind == "" {
		c.SGDKind = tasks.KindLocal
		if c.SGDWorkers == 1 {
			c.SGDKind = tasks.KindSingle
		}
	}
	if c.SGDConsistency.Kind == "" {
		c.SGDConsistency.Kind = kvstore.BSP
	}
	if c.EpochsInner == 0 {
		c.EpochsInner = 1
	}
	if c.Batch == 0 {
		c.Batch = 100
	}
	return c
}

// Tables declares the tables svrg's stages use for dimension dim.
func Tables(t *tasks.MultiStageTask, dim uint64, dtype kvstore.DType) *tasks.MultiStageTask {
	for _, name := range []string{TableW, TableSnap, TableMu} {
		t.AddTable(kvstore.TableSpec{Name: name, Size: dim, DType: dtype})
	}
	return t.AddTable(kvstore.TableSpec{Name: TableN, Size: 1, DType: kvstore.Float64})
}

// FullStage is a svrg.full stage with workers ps workers under BSP.
func FullStage(name string, workers int, l2 float64) tasks.Stage {
	return tasks.Stage{Name: name, Func: "svrg.full", Workers: workers, WorkerKind: tasks.KindPS,
		Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: tasks.Params{"l2": l2}}
}

// Task builds cfg.Rounds x [svrg.full, svrg.sgd] on input "train", model
// kind "lr". The stages are named "full.<round>" and "sgd.<round>".
func Task(cfg Config) *tasks.MultiStageTask {
	c := cfg.withDefaults()
	t := tasks.NewTask(c.Name)
	t.Kind, t.Output = "lr", c.Output
	Tables(t, c.Dim, c.DType)
	t.SetInput("train", tasks.InputSpec{Path: c.Train, BlockSize: c.BlockSize})
	sgd := tasks.Stage{Name: "sgd", Func: "svrg.sgd", Workers: c.SGDWorkers, WorkerKind: c.SGDKind, MaxSlaves: c.SGDMaxSlaves,
		Consistency: c.SGDConsistency,
		Params:      tasks.Params{"epochs_inner": float64(c.EpochsInner), "batch": float64(c.Batch), "l2": c.L2}}
	if c.LR != 0 {
		sgd.Params["lr"] = c.LR
	}
	if c.MinSteps != 0 {
		sgd.Params["min_steps"] = float64(c.MinSteps)
	}
	full := FullStage("full", c.FullWorkers, c.L2)
	full.WorkerKind = c.FullKind
	for _, p := range []tasks.Params{sgd.Params, full.Params} {
		p["intercept"], p["standardize"] = !c.NoIntercept, !c.NoStandardize
	}
	t.SetStages(full, sgd)
	if c.Rounds > 1 {
		t.RepeatStages(c.Rounds)
	} else {
		t.Stages[0].Name, t.Stages[1].Name = "full.0", "sgd.0"
	}
	if c.FinalObjective {
		full.Name = "final"
		t.Stages = append(t.Stages, full)
	}
	return t
}
