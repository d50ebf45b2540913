package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/logging"
	"github.com/flexps/flexps/status"
)

// finalCheckpoint runs after the first Ctrl-C of a run with checkpoints:
// the task stops at its next epoch or stage end after writing a
// checkpoint there, and the command to resume it is printed. A second
// Ctrl-C ends the process at once (runIO). It returns context.Canceled
// (exit 130) unless the task finished in the meantime.
func finalCheckpoint(c *engine.Client, id string, p *Printer, resumeCmd string) error {
	fmt.Fprintln(os.Stderr, "flexps run: interrupted: writing a checkpoint at the next epoch end before stopping (Ctrl-C again to exit at once)")
	bg := context.Background()
	if err := c.StopAtCheckpoint(bg, id); err != nil {
		return fmt.Errorf("stopping at a checkpoint: %w", err)
	}
	st, err := c.Follow(bg, id, p.Event)
	if st.ID != "" {
		p.Summary(st)
	}
	if st.State == status.Done {
		fmt.Fprintln(os.Stderr, "flexps run: the task finished before it could be stopped")
		return err
	}
	if st.Checkpoint == "" {
		fmt.Fprintln(os.Stderr, "flexps run: no checkpoint was written")
		return errors.Join(context.Canceled, err)
	}
	fmt.Fprintf(os.Stderr, "flexps run: checkpoint %s written; resume with:\n  %s\n", st.Checkpoint, resumeCmd)
	return context.Canceled
}

// resumeCommand is the command line that resumes a run from dir on a
// local cluster of the same size.
func resumeCommand(dir string, slaves, slots int, config string) string {
	cmd := "flexps run --resume " + shellQuote(dir)
	if slaves > 0 {
		cmd += fmt.Sprintf(" --slaves %d", slaves)
	}
	if slots > 0 {
		cmd += fmt.Sprintf(" --slots %d", slots)
	}
	if config != "" {
		cmd += " --config " + shellQuote(config)
	}
	return cmd
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// submitResume resumes a task on a running master from its checkpoint
// directory and follows it.
func submitResume(ctx context.Context, c *engine.Client, g *globals, dir, metricsOut string) error {
	mw, err := openMetricsOut(metricsOut)
	if err != nil {
		return err
	}
	p := newPrinter(os.Stdout, os.Stderr, logging.IsTerminal(os.Stderr))
	p.ShareTerminal = logging.IsTerminal(os.Stdout)
	p.Logs = &g.logs
	p.Metrics = mw
	id := engine.NewTaskID()
	st, err := c.ResumeAndWait(ctx, dir, id, func(w string) { fmt.Fprintln(os.Stderr, "flexps submit: warning: "+w) }, p.Event)
	if interrupted(ctx, err) {
		return errors.Join(cancelFollowed(c, p, []string{id}), mw.Close())
	}
	if st.ID != "" {
		p.Summary(st)
	}
	return errors.Join(err, mw.Close())
}
