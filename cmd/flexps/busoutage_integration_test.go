package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/status"
)

// Drill: the cluster's external NATS server is killed (kill -9) mid-task
// and restarted on the same port after several failure timeouts. Nobody
// died: the master must not declare its slaves dead for a silence that was
// its own, the slaves must not give up on the master, the worker events
// reports and block requests sent around the outage must reach the master
// (each counted once), and flexps submit follows the task through it. Before: both slaves were
// declared dead within a failure timeout and the task failed naming them.
func TestDrillExternalNATSRestartMidTask(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 6000, 1000)
	command, env := cli()
	bus := clustertest.StartNATS(t, command, nil) // the test binary as a NATS server, not as the CLI
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2,
		Heartbeat: "100ms", DeadAfter: "600ms", NATSURL: bus.URL})
	cl := c.Client()
	model := dir + "/outage.model"
	const epochs = 30
	done := make(chan clustertest.Result, 1)
	go func() {
		done <- c.Run(3*time.Minute, "submit", lrJob(t, dir, "outage", train, test, model, 1000, 4, epochs, "bsp"))
	}()
	waitUntil(t, "task running its second epoch", time.Minute, runningAt(cl, 0, 1))
	bus.Kill()
	const outage = 4 * time.Second // more than six failure timeouts
	time.Sleep(outage)
	bus.Start()
	waitUntil(t, "the master answers again", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cl.Status(ctx, "")
		return err == nil
	})
	var r clustertest.Result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("submit still running 2 minutes after the bus came back")
	}
	out := r.Stdout + r.Stderr
	if r.Exit != 0 {
		t.Fatalf("submit through the outage: exit %d\n%s", r.Exit, out)
	}
	rep, err := cl.Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	tk := rep.Tasks[0]
	if tk.State != status.Done || tk.Progress.Epoch != epochs || len(tk.Results[0].Failovers) != 0 {
		t.Fatalf("task after the outage: %s at epoch %d, failovers %+v", tk.State, tk.Progress.Epoch, tk.Results[0].Failovers)
	}
	// Every epoch's report reached the master, once per worker.
	if got := tk.Results[0].Epochs; len(got) != epochs || got[len(got)-1].Workers != 4 {
		t.Fatalf("%d epochs reported (want %d): %+v", len(got), epochs, got)
	}
	if rep.Epoch != 2 {
		t.Fatalf("membership epoch %d after the outage, want 2 (two joins, no death)", rep.Epoch)
	}
	if a := accuracy(t, model, test); a < 0.75 {
		t.Fatalf("accuracy %.3f after the outage", a)
	}
	if m := c.Master.Output(); !strings.Contains(m, "the master lost the bus") || !strings.Contains(m, "hears the bus again") || strings.Contains(m, "died") {
		t.Fatalf("master log:\n%s", m)
	}
	for _, s := range c.Slaves {
		if o := s.Output(); strings.Contains(o, "no word from the master") || strings.Contains(o, "panic") || strings.Contains(o, "DATA RACE") {
			t.Fatalf("%s:\n%s", s.Name, o)
		}
	}
}
