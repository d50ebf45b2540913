package hdfstest

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a child whose stdin we hold. It is reaped by polling rather
// than by a goroutine blocked in Wait, so a cluster shared for a whole test
// binary leaves no goroutine behind for leak checkers.
type process struct {
	pid    int
	stdin  *os.File // write end of the child's stdin
	done   bool
	status syscall.WaitStatus
}

func startProcess(out *os.File, name string, args ...string) (*process, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(name, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, out, out
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &process{pid: cmd.Process.Pid, stdin: w}, nil
}

// exited reports whether the child has exited, reaping it if so.
func (p *process) exited() (string, bool) {
	if !p.done {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
		if pid == p.pid || err == syscall.ECHILD {
			p.done, p.status = true, ws
		}
	}
	if !p.done {
		return "", false
	}
	if p.status.Signaled() {
		return fmt.Sprintf("signal %v", p.status.Signal()), true
	}
	return fmt.Sprintf("exit status %d", p.status.ExitStatus()), true
}

// stop closes the child's stdin (MiniHDFS shuts down on EOF), waits up to
// grace, then kills it.
func (p *process) stop(grace time.Duration) {
	p.stdin.Close()
	for deadline := time.Now().Add(grace); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, ok := p.exited(); ok {
			return
		}
	}
	syscall.Kill(p.pid, syscall.SIGKILL)
	for {
		if _, ok := p.exited(); ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
