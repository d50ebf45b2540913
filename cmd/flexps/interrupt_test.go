package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
	"github.com/flexps/flexps/status"
)

// interruptRun starts `flexps run job`, sends SIGINT once its first
// epoch row is printed (the task is running), and checks that it exits
// 130 within wait; it returns the run's output.
func interruptRun(t *testing.T, job string, wait time.Duration) (stdout, stderr *syncBuffer) {
	t.Helper()
	command, env := cli()
	cmd := exec.Command(command[0], append(command[1:], "run", job, "--log-level", "error")...)
	cmd.Env = append(os.Environ(), env...)
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for !strings.Contains(stdout.String(), "test_acc") {
		select {
		case err := <-done:
			t.Fatalf("run ended before it was interrupted: %v\n%s\n%s", err, stdout.String(), stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(wait):
		cmd.Process.Kill()
		<-done
		t.Fatalf("run still going %v after SIGINT:\n%s", wait, stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d (%v), want 130\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	return stdout, stderr
}

// TestInterruptExits130 interrupts a training run as Ctrl-C would and
// expects the documented exit code 130 and a one-line message.
func TestInterruptExits130(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 3000, 500)
	job := lrJob(t, dir, "long", train, test, "", 500, 2, 100000, "bsp")
	_, stderr := interruptRun(t, job, time.Minute)
	if !strings.Contains(stderr.String(), "flexps run: interrupted") {
		t.Fatalf("stderr:\n%s", stderr.String())
	}
}

// TestSubmitInterruptCancelsTheTask: Ctrl-C in `flexps submit` cancels
// the task it follows on the cluster and exits 130, as README's "What
// survives a failure" says (it used to exit 1 with "context canceled" and
// leave the task running, unfollowed).
func TestSubmitInterruptCancelsTheTask(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 3000, 500)
	job := lrJob(t, dir, "long", train, test, "", 500, 2, 100000, "bsp")
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 1, Slots: 2})
	cmd := exec.Command(command[0], append(command[1:], "submit", "--config", c.Config, job, "--log-level", "error")...)
	cmd.Env = append(os.Environ(), env...)
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitUntil(t, "the first epoch row", time.Minute, func() bool { return strings.Contains(stdout.String(), "test_acc") })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("submit still going a minute after SIGINT:\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(stderr.String(), "cancelled") {
		t.Fatalf("exit %d, want 130 and the task cancelled\nstderr:\n%s", code, stderr.String())
	}
	cl := c.Client()
	waitUntil(t, "the task cancelled on the cluster", 30*time.Second, func() bool {
		rep, err := cl.Status(context.Background(), "")
		return err == nil && len(rep.Tasks) == 1 && rep.Tasks[0].State == status.Cancelled
	})
}
