package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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

// The flexps eval commands the shipped configs' comments give are
// accepted by the command line: with no model to read they fail, but not
// as usage errors. Before, kmeans.toml and
// mf.toml said "flexps eval out/mf.model data/mf/test.tsv", which eval
// refuses (it takes --model and --data).
func TestShippedConfigsCommandsParse(t *testing.T) {
	files, err := filepath.Glob("../../configs/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no configs: %v", err)
	}
	cmdRe := regexp.MustCompile(`#\s*(flexps eval [^#\n]*?)(?:\s+prints.*)?$`)
	found := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			m := cmdRe.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			found++
			// Placeholders name a file; none of them exists here.
			args := strings.Fields(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], "no-such-file"))[1:]
			for j, a := range args[1:] {
				if !strings.HasPrefix(a, "-") {
					args[j+1] = filepath.Join(t.TempDir(), filepath.Base(a))
				}
			}
			var stderr bytes.Buffer
			if code := runIO(args, &bytes.Buffer{}, &stderr); code == 2 {
				t.Errorf("%s line %d: %q is a usage error: %s", filepath.Base(f), i+1, m[1], stderr.String())
			}
		}
	}
	if found < 2 {
		t.Fatalf("found %d commands in the configs' comments, want the eval commands of kmeans.toml and mf.toml at least", found)
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
