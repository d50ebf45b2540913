// Command failover measures what replication and failover cost and how
// fast they recover, on a master and three slave processes on 127.0.0.1:
//
//   - recovery: a probe stage on slave-0 and slave-2 reads (and adds to) a
//     key of shard 1 in a loop while slave-1, its head, is killed with
//     SIGKILL; the recovery time is from the kill to the end of the first
//     read that started after it (every read before returns from the dead
//     slave or waits for the failover). -kills rounds, each on a fresh
//     cluster; p50 and p99 over them.
//
//   - cost: logistic regression (ps kind, 3 slaves x 2 workers, SSP) with
//     its tables at replicas = 1 and replicas = 2, interleaved round by
//     round; samples/s of epochs 2+ and the ratio R1/R2 per round.
//
//   - checkpoint: the same job at replicas = 2 with a checkpoint every
//     epoch; the master's checkpoint log lines give MB written, MB/s and
//     the stall (the time workers wait at the clock boundary).
//
//     go run ./bench/failover [-kills 20] [-rounds 3] [-only recovery,cost,checkpoint]
//
// The slaves are this program (-role slave), so the probe is registered
// in them; the master is the flexps binary it builds.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flexps/flexps/internal/benchkit"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

const probeFunc = "bench.failover_probe"

func init() { tasks.Register(probeFunc, probe) }

// probe reads and adds to one key of the table in a loop for params.ms
// milliseconds and writes each read's start and end (Unix ns) to
// <params.out>/reads-<rank>.txt.
func probe(info *tasks.Info) error {
	t, err := info.Table("t")
	if err != nil {
		return err
	}
	key := uint64(info.Params.Int("key", 0))
	until := time.Now().Add(time.Duration(info.Params.Int("ms", 5000)) * time.Millisecond)
	var b strings.Builder
	out := make([]float64, 1)
	for time.Now().Before(until) {
		start := time.Now()
		if err := t.Get([]uint64{key}, out); err != nil {
			return fmt.Errorf("%s: get: %w", probeFunc, err)
		}
		fmt.Fprintf(&b, "%d %d\n", start.UnixNano(), time.Now().UnixNano())
		if err := t.Add([]uint64{key}, []float64{1}); err != nil {
			return fmt.Errorf("%s: add: %w", probeFunc, err)
		}
		time.Sleep(time.Millisecond)
	}
	return os.WriteFile(filepath.Join(info.Params.String("out", "."), fmt.Sprintf("reads-%d.txt", info.Rank)), []byte(b.String()), 0o644)
}

type opts struct {
	dir, flexps, only string
	kills, rounds     int
	rows              int
}

// slaveRole is the program's own slave mode (its stage functions registered).
var slaveRole *benchkit.SlaveRole

func main() {
	var o opts
	flag.StringVar(&o.dir, "dir", filepath.Join(os.TempDir(), "flexps-failover-bench"), "work directory (data, logs)")
	flag.StringVar(&o.flexps, "flexps", "", "flexps binary (default: built from ./cmd/flexps)")
	flag.StringVar(&o.only, "only", "", "comma-separated subset of recovery,cost,checkpoint")
	flag.IntVar(&o.kills, "kills", 20, "recovery: kills, each on a fresh cluster")
	flag.IntVar(&o.rounds, "rounds", 3, "cost: interleaved rounds of replicas 1 and 2")
	flag.IntVar(&o.rows, "rows", 200000, "cost, checkpoint: LR training rows")
	slaveRole = benchkit.RegisterSlaveRole()
	flag.Parse()
	slaveRole.Run("bench/failover")
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		benchkit.RunCleanups()
		os.Exit(130)
	}()
	if err := run(o); err != nil {
		benchkit.RunCleanups()
		fmt.Fprintln(os.Stderr, "bench/failover:", err)
		os.Exit(1)
	}
}

func (o opts) want(name string) bool {
	return o.only == "" || slices.Contains(strings.Split(o.only, ","), name)
}

func run(o opts) error {
	var err error
	if o.dir, o.flexps, err = benchkit.WorkDir(o.dir, o.flexps); err != nil {
		return err
	}
	fmt.Printf("# bench/failover on %d cores, load %s\n", runtime.NumCPU(), loadavg())
	if o.want("recovery") {
		if err := recovery(o); err != nil {
			return fmt.Errorf("recovery: %w", err)
		}
	}
	if o.want("cost") || o.want("checkpoint") {
		train, test, err := lrData(o)
		if err != nil {
			return err
		}
		if o.want("cost") {
			if err := cost(o, train, test); err != nil {
				return fmt.Errorf("cost: %w", err)
			}
		}
		if o.want("checkpoint") {
			if err := checkpointCost(o, train, test); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		}
	}
	return nil
}

func recovery(o opts) error {
	var times []time.Duration
	for k := range o.kills {
		dir := filepath.Join(o.dir, fmt.Sprintf("kill-%02d", k))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// The defaults a user gets: 300ms heartbeats, 900ms timeout.
		cl, err := benchkit.StartWith(o.flexps, dir, 3, 1, benchkit.Options{Heartbeat: "300ms", DeadAfter: "900ms"}, func(c *benchkit.Cluster, i int) []string {
			return slaveRole.Argv(c, fmt.Sprintf("slave-%d", i))
		})
		if err != nil {
			return err
		}
		d, err := killOnce(cl, dir)
		cl.Stop()
		if err != nil {
			return fmt.Errorf("kill %d: %w (logs in %s)", k+1, err, dir)
		}
		times = append(times, d)
		fmt.Printf("kill %2d: first read after the kill answered after %v\n", k+1, d.Round(time.Millisecond))
	}
	slices.Sort(times)
	fmt.Printf("\nrecovery (kill -9 of a shard's head -> first successful read of its key), %d kills:\n", len(times))
	fmt.Printf("| p50 | p99 (max of %d) | min |\n|---|---|---|\n| %v | %v | %v |\n", len(times),
		quantile(times, 0.5).Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), times[0].Round(time.Millisecond))
	return nil
}

// killOnce runs the probe on slave-0 and slave-2, kills slave-1 (the head
// of shard 1, whose key the probe reads) after 1.5 s, and returns the
// recovery time.
func killOnce(cl *benchkit.Cluster, dir string) (time.Duration, error) {
	client, err := cl.Dial()
	if err != nil {
		return 0, err
	}
	defer client.Close()
	out := filepath.Join(dir, "reads")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 0, err
	}
	const size = 3000 // range partition: keys 1000..1999 are shard 1, on slave-1
	task := tasks.NewTask("failover-probe").
		AddTable(kvstore.TableSpec{Name: "t", Size: size, Replicas: 2}).
		SetStages(tasks.Stage{Name: "probe", Func: probeFunc, Workers: 2, Slaves: []string{"slave-0", "slave-2"},
			Consistency: kvstore.Consistency{Kind: kvstore.ASP},
			Params:      tasks.Params{"key": 1500, "ms": 5000, "out": out}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		st, err := client.SubmitAndWait(ctx, task, nil)
		if err == nil && st.State != status.Done {
			err = fmt.Errorf("probe task %s: %s", st.State, st.Reason)
		}
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	kill := time.Now()
	victim := cl.Procs[2] // master, slave-0, slave-1, ...
	if err := syscall.Kill(-victim.Process.Pid, syscall.SIGKILL); err != nil {
		return 0, err
	}
	_ = victim.Wait()
	if err := <-done; err != nil {
		return 0, err
	}
	best := time.Duration(-1)
	for r := range 2 {
		f, err := os.Open(filepath.Join(out, fmt.Sprintf("reads-%d.txt", r)))
		if err != nil {
			return 0, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var s, e int64
			if _, err := fmt.Sscan(sc.Text(), &s, &e); err != nil {
				f.Close()
				return 0, fmt.Errorf("reads-%d.txt: %q: %w", r, sc.Text(), err)
			}
			if s >= kill.UnixNano() {
				if d := time.Duration(e - kill.UnixNano()); best < 0 || d < best {
					best = d
				}
			}
		}
		f.Close()
	}
	if best < 0 {
		return 0, errors.New("no read started after the kill")
	}
	return best, nil
}

func quantile(s []time.Duration, q float64) time.Duration {
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func lrData(o opts) (train, test string, err error) {
	train, test = filepath.Join(o.dir, "train.libsvm"), filepath.Join(o.dir, "test.libsvm")
	if _, err := os.Stat(train); err == nil {
		return train, test, nil
	}
	cmd := exec.Command(o.flexps, "gen", "libsvm", "--out", train, "--rows", strconv.Itoa(o.rows), "--dim", "1000000", "--nnz", "20",
		"--zipf", "1.1", "--seed", "1", "--test-out", test, "--test-rows", strconv.Itoa(o.rows/10))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("flexps gen: %v\n%s", err, out)
	}
	return train, test, nil
}

func lrJob(o opts, name, train, test string, replicas int, extra string) (string, error) {
	job := fmt.Sprintf(`name = %q
kind = "lr"
[[table]]
name = "w"
size = 1000000
dtype = "float32"
replicas = %d
[input.train]
path = %q
[input.test]
path = %q
[[stage]]
name = "sgd"
func = "lr.sgd"
workers = 6
consistency = "ssp"
staleness = 2
[stage.params]
epochs = 4
batch = 100
lr = 0.5
standardize = false
`, name, replicas, train, test) + extra
	path := filepath.Join(o.dir, name+".toml")
	return path, os.WriteFile(path, []byte(job), 0o644)
}

// rate is the samples/s of epochs 2+ (epoch 1 parses the input).
func rate(recs []benchkit.Record) (float64, error) {
	var n, s float64
	for _, r := range recs {
		if r.Type == "epoch" && r.Epoch >= 2 {
			n += r.Samples
			s += r.Seconds
		}
	}
	if s == 0 {
		return 0, errors.New("no epoch 2+ in the records")
	}
	return n / s, nil
}

func cost(o opts, train, test string) error {
	dir := filepath.Join(o.dir, "cost")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cl, err := benchkit.Start(o.flexps, dir, 3, 2, benchkit.Options{})
	if err != nil {
		return err
	}
	defer cl.Stop()
	fmt.Printf("\nLR (ps kind, 3 slaves x 2 workers, SSP(2), %d rows x 1M features, Zipf 1.1), samples/s of epochs 2+:\n", o.rows)
	fmt.Println("| round | replicas = 1 | replicas = 2 | R1 / R2 |\n|---|---|---|---|")
	var ratios []float64
	for r := 1; r <= o.rounds; r++ {
		var rates [2]float64
		for i, rep := range []int{1, 2} {
			job, err := lrJob(o, fmt.Sprintf("cost-r%d-%d", rep, r), train, test, rep, "")
			if err != nil {
				return err
			}
			recs, err := cl.Submit(job, job+".jsonl", job+".out")
			if err != nil {
				return err
			}
			if rates[i], err = rate(recs); err != nil {
				return err
			}
		}
		ratios = append(ratios, rates[0]/rates[1])
		fmt.Printf("| %d | %.0f | %.0f | %.2fx |\n", r, rates[0], rates[1], rates[0]/rates[1])
	}
	slices.Sort(ratios)
	fmt.Printf("median R1/R2: %.2fx (replicas = 2 is that much slower)\n", ratios[len(ratios)/2])
	return nil
}

func checkpointCost(o opts, train, test string) error {
	dir := filepath.Join(o.dir, "checkpoint")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cl, err := benchkit.Start(o.flexps, dir, 3, 2, benchkit.Options{LogLevel: "info"})
	if err != nil {
		return err
	}
	defer cl.Stop()
	ck := filepath.Join(dir, "ck")
	job, err := lrJob(o, "ckpt", train, test, 2, fmt.Sprintf("[checkpoint]\nevery = \"1 epoch\"\ndir = %q\nkeep = 2\n", ck))
	if err != nil {
		return err
	}
	if _, err := cl.Submit(job, job+".jsonl", job+".out"); err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(dir, "master.log"))
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Println("\ncheckpoints of the LR job (replicas = 2, every epoch; 1M float32 weights + helper tables):")
	fmt.Println("| MB | write MB/s | stall s |\n|---|---|---|")
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	n := 0
	for sc.Scan() {
		var l struct {
			Msg   string  `json:"message"`
			Bytes float64 `json:"bytes"`
			MBps  float64 `json:"write_mb_per_sec"`
			Stall float64 `json:"stall_seconds"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != "checkpoint written" {
			continue
		}
		n++
		fmt.Printf("| %.1f | %.0f | %.3f |\n", l.Bytes/1e6, l.MBps, l.Stall)
	}
	if n == 0 {
		return errors.New("no \"checkpoint written\" line in the master's log")
	}
	return sc.Err()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
