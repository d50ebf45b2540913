package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"
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
	return interruptCmd(t, wait, "run", job, "--log-level", "error")
}

// interruptCmd is interruptRun for any flexps command line that prints
// epoch rows.
func interruptCmd(t *testing.T, wait time.Duration, args ...string) (stdout, stderr *syncBuffer) {
	t.Helper()
	command, env := cli()
	cmd := exec.Command(command[0], append(command[1:], args...)...)
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

// TestInterruptSubmitCancelsItsTasks: Ctrl-C of `flexps submit` cancels
// the tasks it follows on the master (they ran on, unfollowed) and exits
// 130 (it exited 1).
func TestInterruptSubmitCancelsItsTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 3000, 500)
	job := lrJob(t, dir, "long", train, test, "", 500, 2, 100000, "bsp")
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2})
	stdout, stderr := interruptCmd(t, time.Minute, "submit", "--config", c.Config, "--nats", c.URL, job, "--log-level", "error")
	m := regexp.MustCompile(`task (t\w+) \(long\)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no task id in the output:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "task "+m[1]+" cancelled") {
		t.Fatalf("stderr does not say the task was cancelled:\n%s", stderr.String())
	}
	rep, err := c.Client().Status(context.Background(), m[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tasks) != 1 || rep.Tasks[0].State != status.Cancelled {
		t.Fatalf("task after the interrupted submit: %+v", rep.Tasks)
	}
}

// A second signal ends the process even when it comes before the first
// was handled (both queued at once): with signal.NotifyContext the second
// was dropped while the clean stop was set up, and the process went on to
// its next epoch end instead of exiting at once.
func TestWatchSignals(t *testing.T) {
	for _, tc := range []struct {
		name              string
		signals           int
		cancelled, exited bool
	}{
		{"none", 0, false, false},
		{"one: a clean stop", 1, true, false},
		{"two at once: exit", 2, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sigs := make(chan os.Signal, 2)
			for range tc.signals {
				sigs <- os.Interrupt
			}
			finished := make(chan struct{})
			cancelled, exited := make(chan struct{}), make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				watchSignals(sigs, finished, func() { close(cancelled) }, func() { close(exited) })
			}()
			wait := func(c chan struct{}) bool {
				select {
				case <-c:
					return true
				case <-time.After(200 * time.Millisecond):
					return false
				}
			}
			if got := wait(cancelled); got != tc.cancelled {
				t.Errorf("cancelled %v, want %v", got, tc.cancelled)
			}
			if got := wait(exited); got != tc.exited {
				t.Errorf("exited %v, want %v", got, tc.exited)
			}
			close(finished)
			<-done
		})
	}
}
