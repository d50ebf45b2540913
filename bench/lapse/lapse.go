package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"

	"github.com/flexps/flexps/internal/benchkit"
)

// lapseResult is one run of Lapse's apps/matrix_factorization.
type lapseResult struct {
	epochSecs []float64 // "All workers finished epoch N (epoch: Xs" per epoch
	testRMSE  float64   // sqrt of the last "(Ep.N) Test loss" (a mean squared error)
	cpuSecs   float64   // user + system time of all processes
}

var (
	reLapseEpoch = regexp.MustCompile(`All workers finished epoch (\d+) \(epoch: ([0-9.eE+-]+)s`)
	reLapseTest  = regexp.MustCompile(`\(Ep\.(\d+)\) Test loss:\s+([0-9.eE+-]+|nan|inf)`)
)

// runLapse runs Lapse's DSGD matrix factorization as a scheduler and
// `procs` server processes (each also running `threads` worker threads,
// Lapse's co-located setup), the way its tracker launches them on one
// host: DMLC_* environment variables, loopback interface.
//
// Step size: Lapse's update (apps/mf/update.h) is w -= eps * (-2 (x - wh) h
// + 2 lambda w), flexps's p += lr (e q - l2 p), so eps = lr/2 and lambda =
// l2 make the same step; the bold driver (which changes eps between
// epochs) is off.
func runLapse(ctx context.Context, o opts, d dataset, dir string, round int) (lapseResult, error) {
	port, err := benchkit.FreePort()
	if err != nil {
		return lapseResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.lapseTimeout)
	defer cancel()
	args := []string{"--dataset", d.lapseDir, "--num_rows", strconv.Itoa(o.users), "--num_cols", strconv.Itoa(o.items),
		"--rank", strconv.Itoa(o.rank), "--epochs", strconv.Itoa(o.epochs), "--num_threads", strconv.Itoa(o.slots),
		"--algorithm", "dsgd", "--eps", strconv.FormatFloat(o.lr/2, 'g', -1, 64), "--lambda", strconv.FormatFloat(o.l2, 'g', -1, 64),
		"--bold_driver", "0", "--compute_loss", "1"}
	env := append(os.Environ(), fmt.Sprintf("DMLC_NUM_SERVER=%d", o.slaves), fmt.Sprintf("DMLC_NUM_WORKER=%d", o.slaves),
		"DMLC_PS_ROOT_URI=127.0.0.1", fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_INTERFACE=lo")
	var cmds []*exec.Cmd
	var logs []string
	start := func(role string, i int) error {
		log := filepath.Join(dir, fmt.Sprintf("lapse-r%d-%s%d.log", round, role, i))
		f, err := os.Create(log)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd := exec.CommandContext(ctx, o.lapse, args...)
		cmd.Env = append(env, "DMLC_ROLE="+role)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start lapse %s: %w", role, err)
		}
		benchkit.AtCleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		cmds, logs = append(cmds, cmd), append(logs, log)
		return nil
	}
	err = start("scheduler", 0)
	for i := 0; err == nil && i < o.slaves; i++ {
		err = start("server", i)
	}
	var firstErr error
	var cpu float64
	for i, c := range cmds {
		if werr := c.Wait(); werr != nil && firstErr == nil {
			firstErr = fmt.Errorf("lapse process %s: %w", logs[i], werr)
		}
		if c.ProcessState != nil {
			cpu += (c.ProcessState.UserTime() + c.ProcessState.SystemTime()).Seconds()
		}
	}
	if err != nil {
		return lapseResult{}, err
	}
	if ctx.Err() != nil {
		return lapseResult{}, fmt.Errorf("lapse did not finish within %v (logs %s)", o.lapseTimeout, dir)
	}
	if firstErr != nil {
		return lapseResult{}, firstErr
	}
	res := lapseResult{testRMSE: math.NaN(), cpuSecs: cpu}
	for _, log := range logs[1:] {
		b, err := os.ReadFile(log)
		if err != nil {
			return res, err
		}
		if err := res.parseLog(b); err != nil {
			return res, fmt.Errorf("%s: %w", log, err)
		}
	}
	if len(res.epochSecs) != o.epochs {
		return res, fmt.Errorf("lapse: found %d of %d epoch times in %v", len(res.epochSecs), o.epochs, logs[1:])
	}
	return res, nil
}

// lapseMissing says why Lapse cannot run, or "" when it can.
func lapseMissing(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Sprintf("%v (build it with bench/lapse/build_lapse.sh)", err)
	}
	if st.Mode()&0o111 == 0 {
		return path + " is not executable"
	}
	return ""
}

// parseLog takes the epoch times (the largest over processes) and the last
// test loss from one Lapse process's output.
func (res *lapseResult) parseLog(b []byte) error {
	for _, m := range reLapseEpoch.FindAllSubmatch(b, -1) {
		e, err := strconv.Atoi(string(m[1]))
		if err != nil || e < 1 || e > 1_000_000 {
			return fmt.Errorf("bad epoch number in %q", m[0])
		}
		s, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil {
			return fmt.Errorf("bad epoch time in %q: %w", m[0], err)
		}
		for len(res.epochSecs) < e {
			res.epochSecs = append(res.epochSecs, 0)
		}
		res.epochSecs[e-1] = max(res.epochSecs[e-1], s)
	}
	for _, m := range reLapseTest.FindAllSubmatch(b, -1) {
		v, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil {
			return fmt.Errorf("bad test loss in %q: %w", m[0], err)
		}
		res.testRMSE = math.Sqrt(v)
	}
	return nil
}
