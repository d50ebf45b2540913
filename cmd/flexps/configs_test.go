package main

import (
	"path/filepath"
	"testing"

	"github.com/flexps/flexps/tasks"
)

// Every shipped job file parses and passes submission checks (tables,
// stages and each stage's params as its function reads them).
func TestShippedConfigsValidate(t *testing.T) {
	files, err := filepath.Glob("../../configs/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no configs: %v", err)
	}
	for _, f := range files {
		if filepath.Base(f) == "cluster.toml" {
			continue
		}
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
