// Package clustertest starts real flexps clusters for integration tests:
// a master and N slaves as separate OS processes on 127.0.0.1, each with its
// log in the test's temp dir (printed when the test fails), killed and
// reaped at cleanup. The command that plays flexps is given by the caller,
// usually the test binary itself re-executed as the CLI (see Reexec).
// Local starts the in-process kind (engine.StartLocal) for tests that need
// no separate processes.
package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
)

// ReexecEnv marks a re-executed test binary that must act as the flexps CLI.
const ReexecEnv = "FLEXPS_TEST_AS_CLI"

// Options describe the cluster.
type Options struct {
	// Command runs flexps: e.g. {os.Args[0]} with Env {ReexecEnv+"=1"}.
	Command []string
	Env     []string
	Slaves  int // default 2
	Slots   int // per slave, default 2
	// Extra cluster TOML appended to the generated config.
	ExtraConfig string
	// Policy is the master's [master] policy (default: the master's own,
	// sequential).
	Policy    string
	DeadAfter string // default "2s"
	Heartbeat string // default "200ms"
	// SlaveHosts, optional, gives slave i the locality host name
	// SlaveHosts[i] (flexps slave --host), e.g. a MiniHDFS datanode's
	// hostname so blocks on that datanode count as local to it.
	SlaveHosts []string
	// WorkDirs runs every process in its own working directory,
	// Dir/<name> (master, slave-0, ...), as on separate machines: a
	// relative path in a job resolves in each process's own directory.
	WorkDirs bool
	// NATSURL is an external NATS server every process uses ([nats] url;
	// see StartNATS); empty: the master embeds one.
	NATSURL string
}

// Cluster is a running multi-process cluster.
type Cluster struct {
	t      testing.TB
	opt    Options
	Dir    string
	Config string // path of the cluster TOML
	URL    string // nats://127.0.0.1:port
	Master *Proc
	Slaves []*Proc

	restarts int // of the master
}

// Proc is one process of the cluster.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string // path of its combined output
	done chan struct{}
	err  error
	once sync.Once
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start starts a master and the slaves and waits until every slave joined.
func Start(t testing.TB, opt Options) *Cluster {
	t.Helper()
	if opt.Slaves <= 0 {
		opt.Slaves = 2
	}
	if opt.Slots <= 0 {
		opt.Slots = 2
	}
	if opt.DeadAfter == "" {
		opt.DeadAfter = "2s"
	}
	if opt.Heartbeat == "" {
		opt.Heartbeat = "200ms"
	}
	c := &Cluster{t: t, opt: opt, Dir: t.TempDir()}
	port := FreePort(t)
	c.URL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	cluster := fmt.Sprintf("it%d", port)
	bus := fmt.Sprintf("listen = \"127.0.0.1:%d\"", port)
	if opt.NATSURL != "" {
		c.URL, bus = opt.NATSURL, fmt.Sprintf("url = %q", opt.NATSURL)
	}
	c.Config = filepath.Join(c.Dir, "cluster.toml")
	policy := ""
	if opt.Policy != "" {
		policy = fmt.Sprintf("policy = %q\n", opt.Policy)
	}
	// The cluster's generated credentials stay in the test's directory.
	cfg := fmt.Sprintf(`cluster = %q
[nats]
%s
state_dir = %q
[master]
%sheartbeat = %q
dead_after = %q
request_timeout = "10s"
[slave]
slots = %d
join_timeout = "20s"
kv_timeout = "20s"
[log]
level = "info"
format = "json"
%s
`, cluster, bus, filepath.Join(c.Dir, "state"), policy, opt.Heartbeat, opt.DeadAfter, opt.Slots, opt.ExtraConfig)
	if err := os.WriteFile(c.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	c.Master = c.spawn("master", "master", "--config", c.Config)
	for i := 0; i < opt.Slaves; i++ {
		args := []string{"slave", "--config", c.Config, "--nats", c.URL, "--id", fmt.Sprintf("slave-%d", i)}
		if i < len(opt.SlaveHosts) && opt.SlaveHosts[i] != "" {
			args = append(args, "--host", opt.SlaveHosts[i])
		}
		c.Slaves = append(c.Slaves, c.spawn(fmt.Sprintf("slave-%d", i), args...))
	}
	c.WaitSlaves(opt.Slaves, 30*time.Second)
	return c
}

func (c *Cluster) spawn(name string, args ...string) *Proc {
	c.t.Helper()
	wd := ""
	if c.opt.WorkDirs {
		wd = c.WorkDir(name)
	}
	return spawn(c.t, c.Dir, wd, c.opt.Command, c.opt.Env, name, args...)
}

// spawn starts command with args as a process named name, in its own
// process group and working directory wd ("": this one), its combined
// output in dir/<name>.log.
func spawn(t testing.TB, dir, wd string, command, env []string, name string, args ...string) *Proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append([]string(nil), command[1:]...), args...)
	cmd := exec.Command(command[0], argv...)
	cmd.Env = append(os.Environ(), env...)
	if wd != "" {
		cmd.Dir = wd
		if err := os.MkdirAll(cmd.Dir, 0o755); err != nil {
			f.Close()
			t.Fatal(err)
		}
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p
}

// RestartMaster kills the master with SIGKILL (its embedded NATS server
// goes with it) and starts a new one on the same configuration, port and
// state directory; its log is master-N.log.
func (c *Cluster) RestartMaster() {
	c.t.Helper()
	c.Master.Kill()
	c.restarts++
	c.Master = c.spawn(fmt.Sprintf("master-%d", c.restarts+1), "master", "--config", c.Config)
}

// WorkDir is the working directory of the process name ("master",
// "slave-0", ...) when Options.WorkDirs is set.
func (c *Cluster) WorkDir(name string) string {
	return filepath.Join(c.Dir, "wd", name)
}

// AddSlave starts one more slave process with the given id (also its
// log's name; id-2, id-3, ... when a process with that id ran before)
// and waits until the master counts alive slaves.
func (c *Cluster) AddSlave(id string, alive int) *Proc {
	c.t.Helper()
	name := id
	for n := 2; ; n++ {
		if _, err := os.Stat(filepath.Join(c.Dir, name+".log")); err != nil {
			break
		}
		name = fmt.Sprintf("%s-%d", id, n)
	}
	wd := ""
	if c.opt.WorkDirs {
		wd = c.WorkDir(id)
	}
	p := spawn(c.t, c.Dir, wd, c.opt.Command, c.opt.Env, name, "slave", "--config", c.Config, "--nats", c.URL, "--id", id)
	c.Slaves = append(c.Slaves, p)
	c.WaitSlaves(alive, 30*time.Second)
	return p
}

// Signal sends sig to the process group (SIGSTOP, SIGCONT, ...).
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("%s has exited", p.Name)
	}
	return syscall.Kill(-p.Cmd.Process.Pid, sig)
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL to the process group and waits for it.
func (p *Proc) Kill() {
	p.once.Do(func() {
		if !p.Exited() {
			syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		}
		<-p.done
	})
}

// Stop ends a process gracefully (SIGTERM), then by force after 5s.
func (p *Proc) Stop() {
	if p.Exited() {
		return
	}
	syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	p.Kill()
}

// Output is what the process logged so far.
func (p *Proc) Output() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// Stop stops every process; on failure their logs go to the test log.
func (c *Cluster) Stop() {
	procs := append([]*Proc{}, c.Slaves...)
	if c.Master != nil {
		procs = append(procs, c.Master)
	}
	for _, p := range procs {
		p.Stop()
	}
	if c.t.Failed() {
		for _, p := range procs {
			c.t.Logf("---- %s log ----\n%s", p.Name, tail(p.Output(), 6000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// Client connects to the cluster's master.
func (c *Cluster) Client() *engine.Client {
	c.t.Helper()
	cfg, err := engine.LoadClusterConfig(c.Config)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.NATS.URL = c.URL
	cl, err := engine.Dial(*cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// WaitSlaves waits until n slaves are alive.
func (c *Cluster) WaitSlaves(n int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if c.Master.Exited() {
			c.t.Fatalf("master exited: %v\n%s", c.Master.err, c.Master.Output())
		}
		cl, err := c.dialQuiet()
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			rep, err := cl.Status(ctx, "")
			cancel()
			cl.Close()
			if err == nil {
				alive := 0
				for _, s := range rep.Slaves {
					if s.Alive {
						alive++
					}
				}
				if alive >= n {
					return
				}
				last = fmt.Errorf("%d of %d slaves alive", alive, n)
			} else {
				last = err
			}
		} else {
			last = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("cluster not ready after %v: %v", timeout, last)
}

func (c *Cluster) dialQuiet() (*engine.Client, error) {
	cfg, err := engine.LoadClusterConfig(c.Config)
	if err != nil {
		return nil, err
	}
	cfg.NATS.URL = c.URL
	cl, err := engine.Dial(*cfg)
	if err != nil {
		return nil, err
	}
	cl.Timeout = time.Second
	return cl, nil
}

// Result is a finished CLI command.
type Result struct {
	Stdout, Stderr string
	Exit           int
	Took           time.Duration
}

// Run runs a flexps command against the cluster (--config is added) and
// waits for it, at most timeout.
func (c *Cluster) Run(timeout time.Duration, args ...string) Result {
	c.t.Helper()
	full := append([]string{args[0], "--config", c.Config, "--nats", c.URL}, args[1:]...)
	return RunCLI(c.t, c.opt.Command, c.opt.Env, timeout, full...)
}

// RunCLI runs one flexps command as a process.
func RunCLI(t testing.TB, command, env []string, timeout time.Duration, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := append(append([]string(nil), command[1:]...), args...)
	cmd := exec.CommandContext(ctx, command[0], argv...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String(), Took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("flexps %s did not finish within %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, r.Stdout, tail(r.Stderr, 4000))
	case errors.As(err, &ee):
		r.Exit = ee.ExitCode()
	default:
		t.Fatalf("flexps %s: %v", strings.Join(args, " "), err)
	}
	return r
}
