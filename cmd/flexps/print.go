package main

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// Printer turns a task's events into live progress bars (on a terminal:
// one mpb bar per running stage with %, samples/s, ETA and loss) and a
// per-epoch table. Off a terminal there are no bars and no control
// characters: the table's one line per epoch is the progress.
type Printer struct {
	Out      io.Writer // tables and summaries
	Progress io.Writer // progress bars
	TTY      bool      // draw bars on Progress
	// ShareTerminal says Out and Progress are the same terminal: table
	// rows are then printed above the bars instead of through them.
	ShareTerminal bool
	// Metrics, if set, receives every epoch and stage summary.
	Metrics *metricsWriter
	// Logs, if set, is diverted above the bars while they are drawn.
	Logs *logSink
	// EndSummaries prints a task's summary as soon as it ends, not when
	// Summary is called (which then prints nothing for it): with several
	// tasks followed, a task that failed early was not reported until the
	// last one ended.
	EndSummaries bool
	// SharedTable prints the epochs of every followed task in one table
	// whose first column is the task's id (several job files): their rows
	// interleave, and a table per task printed its header again at every
	// switch (122 headers for 3 tasks).
	SharedTable bool

	mu         sync.Mutex
	bars       *stageBars
	lastHeader string              // task whose header was printed last
	columns    map[string][]string // per task: the metric columns of its table
	named      []string            // SharedTable: tasks whose id was introduced with their name
	resumed    map[string]string   // per task: the checkpoint its events said it was resumed from
	summarized map[string]bool     // tasks whose summary was printed
}

// newPrinter prints tables to out and progress to progress.
func newPrinter(out, progress io.Writer, tty bool) *Printer {
	return &Printer{Out: out, Progress: progress, TTY: tty}
}

// Event handles one task event.
func (p *Printer) Event(ev status.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := ev.Status
	p.noteResume(s)
	switch ev.Kind {
	case status.EventProgress, status.EventStatus:
		if s.State != status.Running || !p.TTY {
			return
		}
		if p.bars == nil {
			p.bars = newStageBars(p.Progress)
			if p.Logs != nil {
				p.Logs.divert(p.bars.write)
			}
		}
		p.bars.update(s)
	case status.EventEpoch:
		if ev.Epoch == nil {
			return
		}
		var b bytes.Buffer
		p.epochRow(&b, s, *ev.Epoch)
		p.emit(b.Bytes())
	case status.EventFailover:
		// A slave died and the stage goes on without it: say so between
		// the epoch rows, where it happened.
		if ev.Message != "" {
			p.emit([]byte("failover: " + ev.Message + "\n"))
		}
	case status.EventWaiting:
		if ev.Message != "" {
			p.emit([]byte("waiting: " + ev.Message + "\n"))
		}
	case status.EventDone, status.EventFailed:
		if p.bars != nil {
			p.bars.endTask(s.ID)
		}
		if p.EndSummaries && s.Ended() && !p.summarized[s.ID] {
			var b bytes.Buffer
			p.summary(&b, s)
			p.emit(b.Bytes())
			p.lastHeader = "" // the next epoch row names its task again
		}
	}
}

// noteResume says, between the epoch rows, that a followed task was
// resumed from a checkpoint while it was followed: a master killed and
// restarted on the same state_dir resumes it under its id, and the epochs
// after the checkpoint are run, and printed, again. Without the line the
// table showed those epochs twice with no word why.
func (p *Printer) noteResume(s status.Task) {
	if s.ID == "" {
		return
	}
	if p.resumed == nil {
		p.resumed = map[string]string{}
	}
	was, seen := p.resumed[s.ID]
	p.resumed[s.ID] = s.Resumed
	if !seen || s.Resumed == "" || s.Resumed == was {
		return
	}
	p.emit([]byte("resumed: the master resumed task " + s.ID + " from checkpoint " + s.Resumed +
		" (it restarted); the epochs after that checkpoint run again\n"))
}

// emit prints table text: above the bars when they share the terminal,
// so a row never glues onto a bar.
func (p *Printer) emit(b []byte) {
	if p.bars != nil && p.ShareTerminal && p.bars.write(b) == nil {
		return
	}
	if _, err := p.Out.Write(b); err != nil {
		fmt.Fprintf(p.Progress, "flexps: cannot print the epoch table: %v\n", err)
	}
}

// finishBars removes every bar and stops drawing.
func (p *Printer) finishBars() {
	if p.bars != nil {
		if p.Logs != nil {
			p.Logs.divert(nil)
		}
		p.bars.close()
		p.bars = nil
	}
}

func (p *Printer) epochRow(w io.Writer, s status.Task, e status.Epoch) {
	m := e.Metrics
	p.Metrics.epoch(s, e)
	cols := deriveColumns(m)
	// One table per task: its columns are the metrics seen so far, a
	// stage without one shows "-" (SVRG's sgd stages have no objective),
	// and only a metric never seen before starts a new header.
	if p.columns == nil {
		p.columns = map[string][]string{}
	}
	table := s.ID // the task's own table, or with SharedTable every task's
	if p.SharedTable {
		table = ""
	}
	have := p.columns[table]
	grew := false
	for _, c := range cols {
		if !slices.Contains(have, c.Name) {
			have = append(have, c.Name)
			grew = true
		}
	}
	p.columns[table] = have
	header := grew || p.lastHeader != s.ID
	if p.SharedTable {
		header = grew || p.lastHeader == ""
	}
	if header {
		if p.SharedTable {
			p.lastHeader = "*" // every task's
			fmt.Fprintf(w, "\n%-13s %5s %-12s %6s", "task", "stage", "name", "epoch")
		} else {
			p.lastHeader = s.ID
			fmt.Fprintf(w, "\ntask %s (%s)\n%5s %-12s %6s", s.ID, s.Name, "stage", "name", "epoch")
		}
		for _, name := range have {
			fmt.Fprintf(w, " %12s", name)
		}
		fmt.Fprintf(w, " %12s %8s\n", "samples/s", "seconds")
	}
	rate := "-"
	if e.Seconds > 0 {
		rate = human(m[tasks.MetricSamples] / e.Seconds)
	}
	if p.SharedTable {
		if !slices.Contains(p.named, s.ID) {
			p.named = append(p.named, s.ID) // its id, named once
			fmt.Fprintf(w, "%-13s (task %q)\n", s.ID, s.Name)
		}
		fmt.Fprintf(w, "%-13s ", s.ID)
	}
	fmt.Fprintf(w, "%5d %-12s %6d", e.Stage, truncate(s.StageName, 12), e.Epoch)
	for _, name := range have {
		cell := "-"
		for _, c := range cols {
			if c.Name == name {
				cell = tasks.FormatMetric(c.Value)
			}
		}
		fmt.Fprintf(w, " %12s", cell)
	}
	fmt.Fprintf(w, " %12s %8.2f\n", rate, e.Seconds)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Summary prints a finished task's stages.
// printKV is a stage's key accesses and, when keys moved, relocation
// per slave.
func (p *Printer) printKV(out io.Writer, r status.StageResult) {
	local, remote := r.Metrics[tasks.MetricKVLocalKeys], r.Metrics[tasks.MetricKVRemoteKeys]
	if local+remote == 0 {
		return
	}
	fmt.Fprintf(out, "      kv: %.1f%% of %s key accesses in the slave's memory", 100*local/(local+remote), human(local+remote))
	moved := r.Metrics[tasks.MetricKVRelocated]
	if moved == 0 && r.Metrics[tasks.MetricKVLocalized] == 0 {
		fmt.Fprintln(out)
		return
	}
	rate := 0.0
	if r.Seconds > 0 {
		rate = moved / r.Seconds
	}
	fmt.Fprintf(out, "; %s keys relocated (%s/s), %s asked for\n", human(moved), human(rate), human(r.Metrics[tasks.MetricKVLocalized]))
	if n := r.Metrics[tasks.MetricKVLocalizes]; n > 0 {
		fmt.Fprintf(out, "      localize: %s calls, %.1f protocol messages each, latency p50 <= %s, p99 <= %s\n", human(n),
			r.Metrics[tasks.MetricKVRelocMsgs]/n, micros(tasks.LatencyQuantile(r.Metrics, 0.5)), micros(tasks.LatencyQuantile(r.Metrics, 0.99)))
	}
	for _, w := range r.WorkerStats {
		if w.OwnedKeys > 0 {
			fmt.Fprintf(out, "        %s holds %d keys, %d of them moved there\n", w.Slave, w.OwnedKeys, w.GuestKeys)
		}
	}
}

// micros formats microseconds.
func micros(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.1fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.1fms", us/1e3)
	}
	return fmt.Sprintf("%.0fµs", us)
}

func (p *Printer) Summary(s status.Task) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishBars()
	if p.summarized[s.ID] { // printed when it ended (EndSummaries)
		return
	}
	p.summary(p.Out, s)
}

// summary writes a finished task's stages to out and records them in the
// metrics file.
func (p *Printer) summary(out io.Writer, s status.Task) {
	if p.summarized == nil {
		p.summarized = map[string]bool{}
	}
	p.summarized[s.ID] = true
	p.Metrics.stages(s)
	fmt.Fprintf(out, "\ntask %s (%s): %s", s.ID, s.Name, s.State)
	if s.Reason != "" {
		fmt.Fprintf(out, ": %s", s.Reason)
	}
	fmt.Fprintln(out)
	if len(s.Results) > 0 {
		fmt.Fprintf(out, "%5s %-12s %-10s %7s %-24s %9s %11s %12s %12s\n", "stage", "name", "func", "workers", "placement", "seconds", "worker-sec", "samples", "samples/s")
	}
	if s.ResultsOmitted > 0 {
		fmt.Fprintf(out, "      (the first %d stages' results are left out: the task's status must fit one bus message)\n", s.ResultsOmitted)
	}
	for _, r := range s.Results {
		rate := 0.0
		if r.Seconds > 0 {
			rate = float64(r.Samples) / r.Seconds
		}
		fmt.Fprintf(out, "%5d %-12s %-10s %7d %-24s %9.2f %11.2f %12d %12s\n", r.Index, r.Name, r.Func, r.Workers, placement(r.Placement),
			r.Seconds, r.WorkerSeconds, r.Samples, human(rate))
		if rb := r.Metrics[tasks.MetricReadBytes]; rb > 0 {
			fmt.Fprintf(out, "      read %s (%.0f%% local), workers waited %.2fs for data\n", bytesHuman(rb), 100*r.Metrics[tasks.MetricReadLocalBytes]/rb, r.Metrics[tasks.MetricReadWaitSeconds])
		}
		if cb := r.Metrics[tasks.MetricReadCachedBlocks]; cb > 0 {
			fmt.Fprintf(out, "      %.0f of %.0f blocks replayed from the slaves' parsed-data cache\n", cb, r.Metrics[tasks.MetricReadBlocks])
		}
		if n := r.Metrics[tasks.MetricBadLines]; n > 0 {
			fmt.Fprintf(out, "      skipped %.0f malformed %s, first:\n", n, plural(int(n), "line"))
			for _, l := range r.BadLines {
				fmt.Fprintf(out, "        %s\n", l)
			}
		}
		if len(r.WorkerStats) > 1 && r.Metrics[tasks.MetricReadBytes] > 0 {
			for _, w := range r.WorkerStats {
				fmt.Fprintf(out, "      worker %d on %s: read %s (%s local) in %d blocks (%d cached), waited %.2fs for data\n",
					w.Rank, w.Slave, bytesHuman(float64(w.ReadBytes)), bytesHuman(float64(w.LocalBytes)), w.Blocks, w.Cached, w.WaitSecs)
			}
		}
		if reads := r.Metrics[tasks.MetricConsistencyReads]; reads > 0 {
			fmt.Fprintf(out, "      consistency: %.0f of %.0f gated reads waited, %.2fs blocked in total\n",
				r.Metrics[tasks.MetricConsistencyWaits], reads, r.Metrics[tasks.MetricBlockedSeconds])
		}
		if h, ms := r.Metrics[tasks.MetricCacheHits], r.Metrics[tasks.MetricCacheMisses]; h+ms > 0 {
			fmt.Fprintf(out, "      process cache: %.1f%% hits (%.0f hits, %.0f misses of which %.0f stale, %.0f evictions), %.0f reads past it, %.0f keys refreshed ahead\n",
				100*h/(h+ms), h, ms, r.Metrics[tasks.MetricCacheStale], r.Metrics[tasks.MetricCacheEvictions], r.Metrics[tasks.MetricCacheBypassed], r.Metrics[tasks.MetricCacheRefreshed])
		}
		p.printKV(out, r)
		for _, f := range r.Failovers {
			if len(f.Ranks) == 0 {
				fmt.Fprintf(out, "      slave %s %s (it held only shards); the stage went on\n", f.Slave, f.Went())
				continue
			}
			ranks := make([]string, len(f.Ranks))
			for i, r := range f.Ranks {
				ranks[i] = fmt.Sprint(r)
			}
			fmt.Fprintf(out, "      slave %s %s: its %s %s left %d unfinished %s to the %d %s\n", f.Slave, f.Went(),
				plural(len(f.Ranks), "worker"), strings.Join(ranks, ", "), f.Blocks, plural(f.Blocks, "block"), f.Survivors, plural(f.Survivors, "survivor"))
		}
		if r.Note != "" {
			fmt.Fprintf(out, "      %s\n", r.Note)
		}
	}
	if s.State == status.Done && s.Output != "" {
		fmt.Fprintf(out, "model written to %s\n", s.Output)
	}
	if s.Resumed != "" {
		fmt.Fprintf(out, "resumed from checkpoint %s\n", s.Resumed)
	}
	if s.Checkpoint != "" {
		fmt.Fprintf(out, "last checkpoint %s\n", s.Checkpoint)
	}
}

func placement(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return strings.Join(parts, ",")
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func bytesHuman(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// plural is word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
