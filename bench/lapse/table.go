package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

func printTable(w io.Writer, o opts, d dataset, rows []row, lapseWhy string) {
	fmt.Fprintf(w, "bench/lapse, %s, %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), machine())
	fmt.Fprintf(w, "command: %s\n", command())
	fmt.Fprintf(w, "data: %d training / %d test ratings, %d users x %d items (hidden rank %d, sorted by user); rank %d, %d epochs, batch %d, lr %v, l2 %v; %d slaves x %d workers\n\n",
		d.rows, d.testRows, o.users, o.items, o.hiddenRank, o.rank, o.epochs, o.batch, o.lr, o.l2, o.slaves, o.slots)
	fmt.Fprintln(w, "| round | run | epoch s (2..N) | epoch 1 s | local accesses | relocated keys/s | Localize calls | Localize ms/call (all / items) | barrier wait s | test RMSE | job CPU s | run-queue wait s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		loc := "-"
		if r.locCalls > 0 {
			loc = fmt.Sprintf("%.1f / %.1f", 1e3*r.locSecs/r.locCalls, 1e3*safeDiv(r.locSecsN, r.locCallsN))
		}
		rq := "-"
		if !math.IsNaN(r.runQueue) {
			rq = fmt.Sprintf("%.1f", r.runQueue)
		}
		bar := "-"
		if n := len(r.epochSecs) - 1; n > 0 && r.workers > 0 && r.barSecsN > 0 {
			bar = fmt.Sprintf("%.2f", r.barSecsN/float64(n*r.workers))
		}
		fmt.Fprintf(w, "| %d | %s | %.2f | %.2f | %s | %s | %.0f | %s | %s | %.4f | %.1f | %s |\n", r.round, r.label, r.steady(), first(r.epochSecs),
			pct(r.localShare), num(r.relocPerSec), r.locCalls, loc, bar, r.testRMSE, r.cpuSecs, rq)
	}
	fmt.Fprintln(w)
	ratio := func(name, num, den string, target float64) {
		var rs []float64
		for _, a := range rows {
			if a.name != num {
				continue
			}
			for _, b := range rows {
				if b.name == den && b.round == a.round && b.steady() > 0 {
					rs = append(rs, a.steady()/b.steady())
				}
			}
		}
		if len(rs) == 0 {
			return
		}
		t := ""
		if target > 0 {
			t = fmt.Sprintf(" (target >= %.0f)", target)
		}
		fmt.Fprintf(w, "- %s: %.2fx median of %d rounds %s%s\n", name, median(rs), len(rs), fmtList(rs), t)
	}
	ratio("epoch time (a) static / (b) Localize", "static", "localize", targetRatio)
	cpuRatio := func(name, num, den string) {
		var rs []float64
		for _, a := range rows {
			for _, b := range rows {
				if a.name == num && b.name == den && a.round == b.round && b.cpuSecs > 0 {
					rs = append(rs, a.cpuSecs/b.cpuSecs)
				}
			}
		}
		if len(rs) > 0 {
			fmt.Fprintf(w, "- %s: %.2fx median of %d rounds %s\n", name, median(rs), len(rs), fmtList(rs))
		}
	}
	cpuRatio("job CPU time (a) static / (b) Localize", "static", "localize")
	ratio("epoch time (c) local kind / (b) Localize", "local", "localize", 0)
	ratio("epoch time (b) flexps Localize / (d) Lapse", "localize", "lapse", 0)
	if lapseWhy != "" {
		fmt.Fprintf(w, "- Lapse: not measured: %s\n", lapseWhy)
	}
	cpuRatio("job CPU time (b) flexps Localize / (d) Lapse", "localize", "lapse")
	fmt.Fprintln(w, "- job CPU s: user + system time of all the run's processes (flexps: master with the embedded NATS server and the slaves; Lapse: scheduler and servers) over the whole job, data loading included; less distorted by a busy machine than wall time")
	fmt.Fprintln(w, "- run-queue wait s: seconds the flexps processes' threads were runnable but waiting for a CPU during the job (/proc/PID/task/*/schedstat): high on a busy machine")
	fmt.Fprintln(w, "- barrier wait s: per worker and epoch (2..N), time mf.blocked waited at its sub-epoch barriers for the slowest worker (DSGD's straggler cost); - where the run did not report it")
	fmt.Fprintln(w, "- Localize latency: mean per call from the summed localize_seconds / localize_calls (p50/p99 are not in the summed metrics: see the probe below); \"items\" = epochs 2..N, the per-sub-epoch item blocks only (epoch 1 also localizes each worker's users once)")
}

func printLatency(w io.Writer, o opts, lat []latency) {
	if len(lat) == 0 {
		return
	}
	fmt.Fprintf(w, "\nLocalize latency (probe: %d workers on %d slave processes, items table %d x %d; a block per sub-epoch as mf.blocked does, then single random keys):\n\n",
		o.slaves*o.slots, o.slaves, o.items, o.rank)
	fmt.Fprintln(w, "| call | keys/call | calls | p50 | p99 | mean | p50 per key |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, l := range lat {
		fmt.Fprintf(w, "| %s | %.0f | %d | %s | %s | %s | %s |\n", l.kind, l.keys, l.calls, dur(l.p50), dur(l.p99), dur(l.avg),
			dur(time.Duration(float64(l.p50)/l.keys)))
	}
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

func first(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return v[0]
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func fmtList(v []float64) string {
	var b strings.Builder
	b.WriteString("[")
	for i, x := range v {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.2f", x)
	}
	b.WriteString("]")
	return b.String()
}

// command is how this program was started, with ROUNDS when set.
func command() string {
	c := "go run ./bench/lapse"
	if len(os.Args) > 1 {
		c += " " + strings.Join(os.Args[1:], " ")
	}
	if r := os.Getenv("ROUNDS"); r != "" {
		c = "ROUNDS=" + r + " " + c
	}
	return c
}

// machine names the CPU and core count (the figures depend on both).
func machine() string {
	cpu := runtime.GOARCH
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return fmt.Sprintf("%s, %d cores", cpu, runtime.NumCPU())
}
