// Package benchkit runs flexps clusters as OS processes on 127.0.0.1 for
// the bench/ programs: a master and its slaves, job submission with the
// --metrics-out records, CPU and run-queue time of the processes, and
// cleanup of everything started when a benchmark is interrupted.
package benchkit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flexps/flexps/engine"
)

// Cluster is a flexps master and its slaves as OS processes on 127.0.0.1.
type Cluster struct {
	Flexps, Dir, Config, URL string
	// Procs are the processes: the master first, then slave i at i+1.
	Procs []*exec.Cmd
}

// Options tune a cluster's config.
type Options struct {
	Heartbeat   string // default "500ms"
	DeadAfter   string // default "10s"
	LogLevel    string // default "warn"
	ExtraConfig string // appended to the cluster TOML
}

// WorkDir makes dir (and its parents) and returns it absolute, with the
// flexps binary to run: flexps itself when given, else one built from
// ./cmd/flexps into dir (the program runs from the repository root).
func WorkDir(dir, flexps string) (absDir, binary string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	if absDir, err = filepath.Abs(dir); err != nil {
		return "", "", err
	}
	if flexps != "" {
		return absDir, flexps, nil
	}
	binary = filepath.Join(absDir, "flexps")
	if out, err := exec.Command("go", "build", "-o", binary, "./cmd/flexps").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build ./cmd/flexps (run from the repository root): %w\n%s", err, out)
	}
	return absDir, binary, nil
}

// FreePort is a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts `flexps master` and `slaves` x `flexps slave` (--slots in
// the config), and waits until the master lists every slave.
func Start(flexps, dir string, slaves, slots int, o Options) (*Cluster, error) {
	return StartWith(flexps, dir, slaves, slots, o, func(c *Cluster, i int) []string {
		return []string{c.Flexps, "slave", "--config", c.Config, "--nats", c.URL, "--id", fmt.Sprintf("slave-%d", i)}
	})
}

// StartWith is Start with slave i started by slaveArgv(c, i).
func StartWith(flexps, dir string, slaves, slots int, o Options, slaveArgv func(c *Cluster, i int) []string) (*Cluster, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	if o.Heartbeat == "" {
		o.Heartbeat = "500ms"
	}
	if o.DeadAfter == "" {
		o.DeadAfter = "10s"
	}
	if o.LogLevel == "" {
		o.LogLevel = "warn"
	}
	c := &Cluster{Flexps: flexps, Dir: dir, Config: filepath.Join(dir, "cluster.toml"), URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	cfg := fmt.Sprintf(`cluster = "bench%d"
[nats]
listen = "127.0.0.1:%d"
state_dir = %q
[master]
heartbeat = %q
dead_after = %q
request_timeout = "30s"
[slave]
slots = %d
join_timeout = "30s"
kv_timeout = "120s"
[log]
level = %q
format = "json"
`, port, port, filepath.Join(dir, "state"), o.Heartbeat, o.DeadAfter, slots, o.LogLevel) + o.ExtraConfig
	if err := os.WriteFile(c.Config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	if err := c.Spawn("master", c.Flexps, "master", "--config", c.Config); err != nil {
		return nil, err
	}
	for i := range slaves {
		if err := c.Spawn(fmt.Sprintf("slave-%d", i), slaveArgv(c, i)...); err != nil {
			c.Stop()
			return nil, err
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := c.AliveSlaves()
		if err == nil && n == slaves {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, fmt.Errorf("cluster: %d of %d slaves joined within 60s (last error: %v); logs in %s", n, slaves, err, dir)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// Spawn starts a process of the cluster, its output in Dir/name.log.
func (c *Cluster) Spawn(name string, argv ...string) error {
	f, err := os.Create(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	AtCleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	f.Close() // the child holds its own descriptor
	c.Procs = append(c.Procs, cmd)
	return nil
}

// AliveSlaves asks the master how many slaves are up.
func (c *Cluster) AliveSlaves() (int, error) {
	cfg, err := engine.LoadClusterConfig(c.Config)
	if err != nil {
		return 0, err
	}
	cfg.NATS.URL = c.URL
	cl, err := engine.Dial(*cfg)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	cl.Timeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cl.Status(ctx, "")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range st.Slaves {
		if s.Alive {
			n++
		}
	}
	return n, nil
}

// Stop ends the processes (SIGTERM, then SIGKILL after 5 s), slaves first.
func (c *Cluster) Stop() {
	for i := len(c.Procs) - 1; i >= 0; i-- {
		p := c.Procs[i]
		if p.ProcessState != nil {
			continue // reaped already (killed by the benchmark)
		}
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	c.Procs = nil
}

// CPUSeconds is the CPU time (user + system) the cluster's processes
// have used so far, from /proc/PID/stat (utime and stime, in USER_HZ =
// 100 ticks per second on Linux): a job's CPU cost is the difference
// around it, which a busy machine distorts far less than wall time.
func (c *Cluster) CPUSeconds() (float64, error) {
	var sum float64
	for _, p := range c.Procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Process.Pid))
		if err != nil {
			return 0, fmt.Errorf("cpu time: %w", err)
		}
		// Fields after the command name, which is in parentheses and may
		// contain spaces: state is field 3, utime 14 and stime 15.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			return 0, fmt.Errorf("cpu time: /proc/%d/stat: no command name", p.Process.Pid)
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			return 0, fmt.Errorf("cpu time: /proc/%d/stat: unexpected format", p.Process.Pid)
		}
		for _, s := range f[11:13] {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return 0, fmt.Errorf("cpu time: /proc/%d/stat: %w", p.Process.Pid, err)
			}
			sum += v / 100
		}
	}
	return sum, nil
}

// RunQueueSeconds is how long the threads of the cluster's processes have
// been runnable but waiting for a CPU (the second field of
// /proc/PID/task/TID/schedstat, in ns, summed over threads). Around a job
// it tells a busy machine (long waits) from a job that idles by itself
// (barriers, locks, the network: short waits, low CPU).
func (c *Cluster) RunQueueSeconds() (float64, error) {
	var sum float64
	for _, p := range c.Procs {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", p.Process.Pid))
		if err != nil {
			return 0, err
		}
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue // the thread ended meanwhile
			}
			f := strings.Fields(string(b))
			if len(f) < 2 {
				return 0, fmt.Errorf("%s: unexpected format %q", t, b)
			}
			ns, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", t, err)
			}
			sum += ns / 1e9
		}
	}
	return sum, nil
}

// Submit runs `flexps submit` on a job file and returns the records of
// its --metrics-out file.
func (c *Cluster) Submit(job, metrics, log string) ([]Record, error) {
	_ = os.Remove(metrics)
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(c.Flexps, "submit", "--config", c.Config, "--nats", c.URL, "--metrics-out", metrics, job)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("flexps submit %s: %w", job, err)
	}
	AtCleanup(func() { _ = cmd.Process.Kill() }) // ErrProcessDone once reaped
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("flexps submit %s: %w (output in %s)", job, err, log)
	}
	return ReadRecords(metrics)
}

// Record is one line of a --metrics-out file (cmd/flexps/metrics.go).
type Record struct {
	Type    string             `json:"type"`
	Epoch   int                `json:"epoch"`
	Seconds float64            `json:"seconds"`
	Samples float64            `json:"samples"`
	Values  map[string]float64 `json:"values"`
	Metrics map[string]float64 `json:"metrics"`
	State   string             `json:"state"`
}

// ReadRecords reads a --metrics-out file.
func ReadRecords(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New(path + ": no records")
	}
	return out, nil
}

var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

// AtCleanup registers fn to run on an interrupt or a failed run
// (RunCleanups).
func AtCleanup(fn func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups = append(cleanups, fn)
}

// RunCleanups runs the registered functions, last first, once.
func RunCleanups() {
	cleanupMu.Lock()
	fns := cleanups
	cleanups = nil
	cleanupMu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// SlaveRole is a bench program's own slave mode: RegisterSlaveRole adds
// the flags (-role slave, -config, -nats, -id) that StartWith's slaveArgv
// passes when the program re-executes itself as a slave.
type SlaveRole struct{ role, config, url, id *string }

// RegisterSlaveRole registers the slave-mode flags on flag.CommandLine;
// call Run after flag.Parse.
func RegisterSlaveRole() *SlaveRole {
	return &SlaveRole{
		role:   flag.String("role", "", "internal: \"slave\" runs a flexps slave with this program's stage functions registered (with -config, -nats, -id)"),
		config: flag.String("config", "", "internal (-role slave): cluster TOML"),
		url:    flag.String("nats", "", "internal (-role slave): NATS URL"),
		id:     flag.String("id", "", "internal (-role slave): slave id"),
	}
}

// Argv is the command line that starts this program as slave id of c.
func (r *SlaveRole) Argv(c *Cluster, id string) []string {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	return []string{self, "-role", "slave", "-config", c.Config, "-nats", c.URL, "-id", id}
}

// Run runs the slave and exits when the flags ask for the slave mode;
// otherwise it returns.
func (r *SlaveRole) Run(name string) {
	if *r.role != "slave" {
		return
	}
	if err := RunSlave(*r.config, *r.url, *r.id); err != nil {
		fmt.Fprintf(os.Stderr, "%s slave: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// RunSlave runs a flexps slave in this process (the same engine.StartSlave
// as `flexps slave`) until SIGTERM or SIGINT: a bench program re-executes
// itself with it as a cluster's slave, so the stage functions it
// registers exist on the slaves.
func RunSlave(config, url, id string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := engine.LoadClusterConfig(config)
	if err != nil {
		return err
	}
	cfg.NATS.URL, cfg.Slave.ID = url, id
	log, err := engine.NewLogger(os.Stderr, "warn", "json")
	if err != nil {
		return err
	}
	n, err := engine.StartSlave(ctx, *cfg, log)
	if err != nil {
		return err
	}
	defer n.Close()
	<-ctx.Done()
	return nil
}

// Dial connects a client to the cluster's master.
func (c *Cluster) Dial() (*engine.Client, error) {
	cfg, err := engine.LoadClusterConfig(c.Config)
	if err != nil {
		return nil, err
	}
	cfg.NATS.URL = c.URL
	return engine.Dial(*cfg)
}
