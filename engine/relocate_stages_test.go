package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	// test.localize moves every key of table "t" to the worker's slave
	// (no Add, no Clock); its function declares nothing
	// (tasks.RegisterRelocates), so only [[table]] relocate does.
	tasks.Register("test.localize", func(info *tasks.Info) error {
		t, err := info.Table("t")
		if err != nil {
			return err
		}
		keys := make([]uint64, t.Spec().Size)
		for i := range keys {
			keys[i] = uint64(i)
		}
		return t.Localize(keys)
	})
}

// Keys a stage moves stay moved for the task's later stages. A worker of
// a later stage that counts clocks, adding to a moved key from a slave
// that took no part in the move, sends its Add through the key's home
// while its Clock goes to the owner directly: unless the table is
// declared relocate = true (every Clock then waits for the worker's Adds)
// the Clock can overtake the Add, and a BSP read at clock c misses an Add
// of clock c-1 (seen on 3 slave processes: an ASP stage localized keys of
// an undeclared table, the next BSP stage read stale sums). So Localize
// on an undeclared table is refused under ASP too when a later ps stage
// counts clocks, naming that stage; tasks without one are unchanged.
func TestLocalizeUnderASPBeforeAClockedStage(t *testing.T) {
	l := startLocal(t, 2, 1)
	localize := tasks.Stage{Name: "move", Func: "test.localize", Workers: 1}
	later := func(kind kvstore.ConsistencyKind, name string) tasks.Stage {
		return tasks.Stage{Name: name, Func: "test.fill", Workers: 2,
			Consistency: kvstore.Consistency{Kind: kind}, Params: tasks.Params{"iters": 3}}
	}
	for _, tc := range []struct {
		name     string
		relocate bool
		stages   []tasks.Stage
		want     string // "" = done
	}{
		{"then bsp", false, []tasks.Stage{localize, later(kvstore.BSP, "train")}, `stage 1 (train, bsp) counts clocks`},
		{"then ssp", false, []tasks.Stage{localize, later(kvstore.SSP, "train")}, `stage 1 (train, ssp) counts clocks`},
		{"bsp two stages later", false, []tasks.Stage{localize, later(kvstore.ASP, "warm"), later(kvstore.BSP, "train")}, `stage 2 (train, bsp) counts clocks`},
		{"then bsp, declared", true, []tasks.Stage{localize, later(kvstore.BSP, "train")}, ""},
		{"then asp", false, []tasks.Stage{localize, later(kvstore.ASP, "train")}, ""},
		{"bsp before only", false, []tasks.Stage{later(kvstore.BSP, "train"), localize}, ""},
		{"then a local bsp stage", false, []tasks.Stage{localize, {Name: "local", Func: "test.fill", Workers: 1,
			WorkerKind: tasks.KindLocal, Consistency: kvstore.Consistency{Kind: kvstore.BSP}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := tasks.NewTask("moves").
				AddTable(kvstore.TableSpec{Name: "t", Size: 64, Replicas: 1, Relocate: tc.relocate}).
				SetStages(tc.stages...)
			_, err := l.SubmitAndWait(context.Background(), task, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("task: %v, want done", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `localize on "t"`) ||
				!strings.Contains(err.Error(), "relocate = true") {
				t.Fatalf("task: %v, want the localize on t refused naming %q and relocate = true", err, tc.want)
			}
		})
	}
}
