package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInterruptExits130 interrupts a training run as Ctrl-C would and
// expects the documented exit code 130 and a one-line message.
func TestInterruptExits130(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 3000, 500)
	job := lrJob(t, dir, "long", train, test, "", 500, 2, 100000, "bsp")
	command, env := cli()
	cmd := exec.Command(command[0], append(command[1:], "run", job, "--log-level", "error")...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Wait for the first epoch row: the task is running.
	for !strings.Contains(stdout.String(), "test_acc") {
		select {
		case err := <-done:
			t.Fatalf("run ended before it was interrupted: %v\n%s\n%s", err, stdout.String(), stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("run still going a minute after SIGINT:\n%s", stderr.String())
	}
	if cmd.ProcessState.ExitCode() != 130 {
		t.Fatalf("exit %d (%v), want 130\nstderr:\n%s", cmd.ProcessState.ExitCode(), err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "flexps run: interrupted") {
		t.Fatalf("stderr:\n%s", stderr.String())
	}
}
