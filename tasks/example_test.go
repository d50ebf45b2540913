package tasks_test

import (
	"fmt"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// A task is built with the fluent methods; Normalize fills the defaults
// (consistency asp, worker kind ps, one worker) and Validate names the stage
// and the field at fault. Submit does both, so a user program only calls
// them to check a task before it reaches a cluster.
func ExampleMultiStageTask_Validate() {
	t := tasks.NewTask("train").
		AddTable(kvstore.TableSpec{Name: "w", Size: 1000}).
		SetStages(
			tasks.Stage{Name: "warmup", Func: "t.noop", Workers: 2},
			tasks.Stage{Name: "train", Func: "no.such.function", Workers: 4},
		)
	t.Normalize()
	fmt.Println(t.Validate())
	// Output: invalid task: task "train": stage 1 (train): func: no stage function registered as "no.such.function" (registered: t.bsp, t.moves, t.noop)
}
