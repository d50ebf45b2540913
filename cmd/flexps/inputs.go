package main

import (
	"context"
	"errors"
	"fmt"
	"os"

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
