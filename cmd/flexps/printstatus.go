package main

import (
	"fmt"
	"io"
	"time"

	"github.com/flexps/flexps/status"
)

// printStatus prints `flexps status`.
func printStatus(w io.Writer, rep status.Cluster) {
	fmt.Fprintf(w, "policy: %s\nmembership epoch: %d\n\nslaves:\n", rep.Policy, rep.Epoch)
	fmt.Fprintf(w, "  %-20s %-16s %7s %6s %6s %5s %s\n", "id", "host", "pid", "slots", "free", "inc", "state")
	for _, s := range rep.Slaves {
		state := "alive"
		if !s.Alive && s.Left {
			state = "left (at " + s.LastSeen.Format(time.TimeOnly) + ")"
		} else if !s.Alive {
			state = "dead (last seen " + s.LastSeen.Format(time.TimeOnly) + ")"
		} else if s.Lingering > 0 {
			state = fmt.Sprintf("alive, %d slot(s) held by workers of stopped or cancelled stages that have not returned", s.Lingering)
		}
		fmt.Fprintf(w, "  %-20s %-16s %7d %6d %6d %5d %s\n", s.ID, s.Host, s.PID, s.Slots, s.Free, s.Incarnation, state)
	}
	fmt.Fprintf(w, "\ntasks:\n")
	fmt.Fprintf(w, "  %-14s %-14s %-10s %-16s %8s %-22s %12s %6s %s\n", "id", "name", "state", "stage", "priority", "slots", "samples", "done", "reason")
	for _, t := range rep.Tasks {
		stage := fmt.Sprintf("%d/%d %s", t.Stage+1, t.Stages, t.StageName)
		done := "-" // the master did not know the stage's length
		if f := t.Progress.Fraction; f > 0 {
			done = fmt.Sprintf("%.0f%%", 100*min(f, 1))
		}
		reason := t.Reason
		if t.Waiting != "" { // a queued stage the cluster shrank below
			reason = "waiting: " + t.Waiting
		} else if t.Queued != "" { // one that waits for busy slots
			reason = "queued: " + t.Queued
		}
		fmt.Fprintf(w, "  %-14s %-14s %-10s %-16s %8d %-22s %12d %6s %s\n", t.ID, t.Name, t.State, stage, t.Priority, heldSlots(t), t.Progress.Samples, done, reason)
	}
}

// heldSlots is a task's slots column: the slots its stage holds, then
// those it lost on slaves that died or left since it started.
func heldSlots(t status.Task) string {
	s := placement(t.Slots)
	if len(t.Lost) > 0 {
		s += " (lost " + placement(t.Lost) + ")"
	}
	return s
}

// printOmitted says how many older tasks a status page left out, and the
// command that lists them (limit: the page's --limit, 0 for none).
func printOmitted(w io.Writer, rep status.Cluster, limit int) {
	if rep.Omitted > 0 && len(rep.Tasks) > 0 {
		fmt.Fprintf(w, "%d older %s not shown: flexps status --limit %d --before %s\n", rep.Omitted, plural(rep.Omitted, "task"), max(limit, len(rep.Tasks)), rep.Tasks[0].ID)
	}
}
