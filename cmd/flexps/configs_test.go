package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// shippedJobs are the job files in configs/ (not the cluster's).
func shippedJobs(t *testing.T) []string {
	files, err := filepath.Glob("../../configs/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no configs: %v", err)
	}
	return slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "cluster.toml" })
}

// Every shipped job file parses and passes submission checks (tables,
// stages and each stage's params as its function reads them).
func TestShippedConfigsValidate(t *testing.T) {
	for _, f := range shippedJobs(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, task, err := tasks.LoadJob(f)
			if err != nil {
				t.Fatal(err)
			}
			task.Normalize()
			if err := task.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The tables a stage's algorithm adds (an intercept, scales, counts,
// accumulators) are replicated as the declared model tables they serve:
// a job that sets replicas = 1 (or 2) on its tables gets no table with
// another count, for every shipped job.
func TestAddedTablesFollowTheModelsReplicas(t *testing.T) {
	for _, f := range shippedJobs(t) {
		for _, replicas := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/replicas=%d", filepath.Base(f), replicas), func(t *testing.T) {
				_, task, err := tasks.LoadJob(f)
				if err != nil {
					t.Fatal(err)
				}
				// The file's own tables (the loaded task has the added
				// ones already), with the count set, then added again.
				var file struct{ Table []struct{ Name string } }
				if _, err := toml.DecodeFile(f, &file); err != nil {
					t.Fatal(err)
				}
				own := map[string]bool{}
				for _, tb := range file.Table {
					own[tb.Name] = true
				}
				task.Tables = slices.DeleteFunc(task.Tables, func(s kvstore.TableSpec) bool { return !own[s.Name] })
				declared := len(task.Tables)
				for i := range task.Tables {
					task.Tables[i].Replicas = replicas
				}
				task.Normalize()
				if len(task.Tables) == declared {
					t.Logf("%s adds no tables", filepath.Base(f))
				}
				for _, spec := range task.Tables[declared:] {
					if spec.Replicas != replicas {
						t.Errorf("added table %q: replicas = %d, want %d as the declared tables", spec.Name, spec.Replicas, replicas)
					}
				}
			})
		}
	}
}
