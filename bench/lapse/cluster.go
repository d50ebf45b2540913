package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flexps/flexps/engine"
)

// cluster is a flexps master and its slaves as OS processes on 127.0.0.1.
type cluster struct {
	flexps, dir, config, url string
	procs                    []*exec.Cmd
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startCluster starts `flexps master` and `slaves` x `flexps slave`
// (--slots in the config), and waits until the master lists every slave.
func startCluster(flexps, dir string, slaves, slots int) (*cluster, error) {
	return startClusterWith(flexps, dir, slaves, slots, func(c *cluster, i int) []string {
		return []string{c.flexps, "slave", "--config", c.config, "--nats", c.url, "--id", fmt.Sprintf("slave-%d", i)}
	})
}

// startClusterWith is startCluster with slave i started by slaveArgv(c, i).
func startClusterWith(flexps, dir string, slaves, slots int, slaveArgv func(c *cluster, i int) []string) (*cluster, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &cluster{flexps: flexps, dir: dir, config: filepath.Join(dir, "cluster.toml"), url: fmt.Sprintf("nats://127.0.0.1:%d", port)}
	cfg := fmt.Sprintf(`cluster = "lapsebench%d"
[nats]
listen = "127.0.0.1:%d"
state_dir = %q
[master]
heartbeat = "500ms"
dead_after = "10s"
request_timeout = "30s"
[slave]
slots = %d
join_timeout = "30s"
kv_timeout = "120s"
[log]
level = "warn"
format = "json"
`, port, port, filepath.Join(dir, "state"), slots)
	if err := os.WriteFile(c.config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	if err := c.spawn("master", c.flexps, "master", "--config", c.config); err != nil {
		return nil, err
	}
	for i := range slaves {
		if err := c.spawn(fmt.Sprintf("slave-%d", i), slaveArgv(c, i)...); err != nil {
			c.stop()
			return nil, err
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := c.aliveSlaves()
		if err == nil && n == slaves {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("cluster: %d of %d slaves joined within 60s (last error: %v); logs in %s", n, slaves, err, dir)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (c *cluster) spawn(name string, argv ...string) error {
	f, err := os.Create(filepath.Join(c.dir, name+".log"))
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
	atCleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	f.Close() // the child holds its own descriptor
	c.procs = append(c.procs, cmd)
	return nil
}

// aliveSlaves asks the master how many slaves are up.
func (c *cluster) aliveSlaves() (int, error) {
	cfg, err := engine.LoadClusterConfig(c.config)
	if err != nil {
		return 0, err
	}
	cfg.NATS.URL = c.url
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

// stop ends the processes (SIGTERM, then SIGKILL after 5 s), slaves first.
func (c *cluster) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
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
	c.procs = nil
}

// cpuSeconds is the CPU time (user + system) the cluster's processes
// have used so far, from /proc/PID/stat (utime and stime, in USER_HZ =
// 100 ticks per second on Linux): a job's CPU cost is the difference
// around it, which a busy machine distorts far less than wall time.
func (c *cluster) cpuSeconds() (float64, error) {
	var sum float64
	for _, p := range c.procs {
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

// runQueueSeconds is how long the threads of the cluster's processes have
// been runnable but waiting for a CPU (the second field of
// /proc/PID/task/TID/schedstat, in ns, summed over threads). Around a job
// it tells a busy machine (long waits) from a job that idles by itself
// (barriers, locks, the network: short waits, low CPU).
func (c *cluster) runQueueSeconds() (float64, error) {
	var sum float64
	for _, p := range c.procs {
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

// submit runs `flexps submit` on a job file and returns the records of
// its --metrics-out file.
func (c *cluster) submit(job, metrics, log string) ([]record, error) {
	_ = os.Remove(metrics)
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(c.flexps, "submit", "--config", c.config, "--nats", c.url, "--metrics-out", metrics, job)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("flexps submit %s: %w", job, err)
	}
	atCleanup(func() { _ = cmd.Process.Kill() }) // ErrProcessDone once reaped
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("flexps submit %s: %w (output in %s)", job, err, log)
	}
	return readRecords(metrics)
}

// record is one line of a --metrics-out file (cmd/flexps/metrics.go).
type record struct {
	Type    string             `json:"type"`
	Epoch   int                `json:"epoch"`
	Seconds float64            `json:"seconds"`
	Samples float64            `json:"samples"`
	Values  map[string]float64 `json:"values"`
	Metrics map[string]float64 `json:"metrics"`
	State   string             `json:"state"`
}

func readRecords(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r record
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
