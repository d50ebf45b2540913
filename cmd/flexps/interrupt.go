package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/status"
)

// cancelFollowed runs after the first Ctrl-C of a submit that follows its
// tasks: the tasks this submit started are cancelled on the master (they
// would run on with nobody following them), each is followed to its end
// and summarized, and the command exits 130 (context.Canceled) unless
// every task had finished anyway. A second Ctrl-C ends the process at once
// (runIO). A task with a [checkpoint] dir keeps its checkpoints:
// `flexps submit --resume DIR` continues it.
func cancelFollowed(c *engine.Client, p *Printer, ids []string) error {
	cancelled := 0
	for _, id := range ids {
		if id == "" {
			continue
		}
		ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.Cancel(ctx, id)
		stop()
		if err != nil {
			fmt.Fprintf(os.Stderr, "flexps submit: interrupted: task %s not cancelled: %v (flexps cancel %s)\n", id, err, id)
			cancelled++
			continue
		}
		ctx, stop = context.WithTimeout(context.Background(), 30*time.Second)
		st, _ := c.Follow(ctx, id, p.Event)
		stop()
		if st.ID != "" {
			p.Summary(st)
		}
		if st.State == status.Done {
			continue
		}
		cancelled++
		fmt.Fprintf(os.Stderr, "flexps submit: interrupted: task %s cancelled\n", id)
		if st.Checkpoint != "" {
			fmt.Fprintf(os.Stderr, "flexps submit: its last checkpoint is %s; continue it with flexps submit --resume DIR\n", st.Checkpoint)
		}
	}
	if cancelled == 0 {
		return nil
	}
	return context.Canceled
}

// interrupted reports whether err ended a follow because ctx (the
// command's, cancelled by Ctrl-C) ended.
func interrupted(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled))
}
