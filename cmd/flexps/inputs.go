package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// ensureInputs generates every input of a job file that has a generate
// table and whose path does not exist yet. An input without one must exist:
// the master reports it when the task is submitted.
func ensureInputs(ctx context.Context, jf *tasks.JobFile, log zerolog.Logger) error {
	for name, in := range jf.Inputs {
		if in.Generate == nil {
			continue
		}
		if s := datastore.Scheme(in.Path); s != "" && s != "file" {
			// Generated files are local; an input on HDFS must exist,
			// and the master says so when it does not.
			continue
		}
		_, err := os.Stat(in.Path)
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("input %q: %w", name, err)
		}
		log.Info().Str("input", name).Str("path", in.Path).Int("rows", in.Generate.Rows).Msg("generating input data (seeded)")
		if err := synth.GenerateContext(ctx, in.Path, *in.Generate); err != nil {
			return fmt.Errorf("input %q: %w", name, err)
		}
	}
	return nil
}

// generateHint is a hint for a job the master refused (err) for a missing
// input that the job would have flexps run generate: flexps submit writes
// no data, and the master's "no such file" said nothing of the generate
// table. The file may also be a generate table's test_path, read by
// another input (the shipped configs' test inputs): the master may name
// that input first. "" when err is about no such input.
func generateHint(jf *tasks.JobFile, err error) string {
	if jf == nil || err == nil {
		return ""
	}
	names := slices.Sorted(maps.Keys(jf.Inputs))
	for _, name := range names {
		in := jf.Inputs[name]
		if in.Generate == nil {
			continue
		}
		// A generate table writes local files only, and so does flexps
		// gen: a file on HDFS is written locally, then copied there (the
		// hint said "flexps gen --out hdfs://...", which gen refuses, and
		// flexps run gave none).
		follows, copyTo := "only flexps run follows", ""
		out, testOut := in.Path, in.Generate.TestPath
		if sc := datastore.Scheme(in.Path); sc != "" && sc != "file" {
			follows, copyTo = "writes local files only", in.Path
			out = path.Base(in.Path)
		}
		if sc := datastore.Scheme(testOut); sc != "" && sc != "file" {
			follows, copyTo = "writes local files only", strings.TrimPrefix(copyTo+" and "+testOut, " and ")
			testOut = path.Base(testOut)
		}
		cmd := fmt.Sprintf("flexps gen %s --out %s", cmp.Or(in.Generate.Kind, "libsvm"), out)
		what := "file"
		if testOut != "" {
			cmd += " --test-out " + testOut
			what = "files"
		}
		if copyTo != "" {
			cmd += ", then copy them to " + copyTo
			if what == "file" {
				cmd = strings.Replace(cmd, "copy them to", "copy it to", 1)
			}
		}
		if strings.Contains(err.Error(), in.Path) {
			return fmt.Sprintf(" (input %q has a [input.%s.generate] table, which %s: write the %s first, e.g. with %s)",
				name, name, follows, what, cmd)
		}
		if tp := in.Generate.TestPath; tp != "" && strings.Contains(err.Error(), tp) {
			reader := "the file " + tp
			for _, other := range names {
				if jf.Inputs[other].Path == tp {
					reader = fmt.Sprintf("the file of input %q", other)
					break
				}
			}
			return fmt.Sprintf(" (%s is the test_path of [input.%s.generate], which %s: write the files first, e.g. with %s)",
				reader, name, follows, cmd)
		}
	}
	return ""
}

// hinted appends hint to err's text (a nil err or "" hint: err as is).
func hinted(err error, hint string) error {
	if err == nil || hint == "" {
		return err
	}
	return fmt.Errorf("%w%s", err, hint)
}

// checkOutput refuses a job whose output is a file of one of its local
// inputs (by any path) before it is submitted, naming the line of
// output: the master refuses it too, but its error cannot name a line
// of a file it never saw. Inputs on another filesystem (hdfs://) are
// left to the master.
func checkOutput(ctx context.Context, path string, t *tasks.MultiStageTask) error {
	if t == nil || t.Output == "" {
		return nil
	}
	src := datastore.NewSources()
	files := map[string][]string{}
	for name, in := range t.Inputs {
		if s := datastore.Scheme(in.Path); s != "" && s != "file" {
			continue
		}
		if fs, err := src.Files(ctx, in.Path); err == nil {
			files[name] = fs
		}
	}
	name := tasks.OverwrittenInput(t.Output, files)
	if name == "" {
		return nil
	}
	line := 0
	if data, err := os.ReadFile(path); err == nil {
		line = tasks.KeyLine(data, "output")
	}
	return &tasks.ConfigError{File: path, Line: line,
		Msg: fmt.Sprintf("task %q: output %s is a file of its input %q: the model would be written over it; name another output", t.Name, t.Output, name)}
}
