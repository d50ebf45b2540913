package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/testkit"
	"github.com/flexps/flexps/tasks"
)

// A file that is mostly garbage fails the stage under on_error = "skip"
// (instead of training on nothing and exiting 0); max_bad_fraction = 1
// accepts it.
func TestSkipFailsOnMostlyBadInput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "garbage.libsvm")
	var sb strings.Builder
	for range 300 {
		sb.WriteString("<html>not a data file</html>\n")
	}
	sb.WriteString("1 1:1\n")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	l := startLocal(t, 1, 2)
	for _, tc := range []struct {
		fraction float64
		wantErr  bool
	}{{0, true}, {1, false}} {
		task := tasks.NewTask("garbage").SetInput("train", tasks.InputSpec{Path: path, OnError: "skip", MaxBadFraction: tc.fraction}).
			SetStages(tasks.Stage{Func: testkit.Count, Workers: 1})
		st, err := l.SubmitAndWait(context.Background(), task, nil)
		if !tc.wantErr {
			if err != nil {
				t.Fatalf("max_bad_fraction 1: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "300 of 301 lines malformed") || !strings.Contains(err.Error(), "garbage.libsvm") {
			t.Fatalf("err = %v (state %s), want the bad-line count and the file", err, st.State)
		}
	}
}
