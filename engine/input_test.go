package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/testkit"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
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

// A malformed line skipped under on_error = "skip" is counted once however
// many passes parse its block again: with a data cache too small to keep
// it (and likewise when another slave's worker reads the block in a later
// epoch) every epoch parsed the block and counted its lines, so one bad
// line read "skipped 3 malformed lines" after 3 epochs.
func TestSkippedLinesCountedOnceAcrossPasses(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		cache  engine.Size // [data] cache; 0: the default (1 GiB)
		bad    []int       // malformed lines among 300
		epochs int
	}{
		{"cached, one bad line", 0, []int{7}, 3},
		{"cache too small, one bad line", 1, []int{7}, 3},
		{"cache too small, three bad lines", 1, []int{0, 150, 299}, 4},
		{"cache too small, one epoch", 1, []int{7}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".libsvm")
			var sb strings.Builder
			for i := range 300 {
				if slices.Contains(tc.bad, i) {
					sb.WriteString("1 3:x\n")
				} else {
					fmt.Fprintf(&sb, "1 %d:1\n", i+1)
				}
			}
			if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 1, Slots: 1, Log: zerolog.Nop(),
				Config: engine.ClusterConfig{Data: engine.DataSect{Cache: tc.cache}}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			task := tasks.NewTask("skip").SetInput("train", tasks.InputSpec{Path: path, OnError: "skip", MaxBadFraction: 1}).
				SetStages(tasks.Stage{Func: testkit.Count, Workers: 1, Params: tasks.Params{"epochs": tc.epochs}})
			st, err := l.SubmitAndWait(context.Background(), task, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Results[0].Metrics[tasks.MetricBadLines]; got != float64(len(tc.bad)) {
				t.Fatalf("%d epochs: %v malformed lines counted, want %d", tc.epochs, got, len(tc.bad))
			}
		})
	}
}
