package lr_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// lr.sgd keeps one weight per feature. A table declared with a larger
// width failed the task on its first read, deep in the store ("kvstore:
// get on "w": 17 values for 17 keys of width 2"), naming neither the
// setting nor the stage's need; now the stage says so before it reads.
func TestSGDRefusesATableWiderThanOne(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, "%d 1:%d 2:1\n", i%2, i%5)
	}
	path := filepath.Join(dir, "train.libsvm")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	local, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 1, Slots: 1, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	for _, tc := range []struct {
		width  int
		params tasks.Params
		want   string // "" : trains
	}{
		{1, nil, ""},
		{2, nil, `table "w": width must be 1 (one weight per feature), got 2`},
		{3, tasks.Params{"standardize": false, "intercept": false}, `table "w": width must be 1 (one weight per feature), got 3`},
	} {
		t.Run(fmt.Sprintf("width %d", tc.width), func(t *testing.T) {
			params := tasks.Params{"epochs": 1, "batch": 10}
			for k, v := range tc.params {
				params[k] = v
			}
			task := tasks.NewTask("width").
				AddTable(kvstore.TableSpec{Name: "w", Size: 3, Width: tc.width}).
				SetInput("train", tasks.InputSpec{Path: path}).
				SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: 1, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: params})
			_, err := local.SubmitAndWait(ctx, task, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
