package main

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// syncBuffer is written by mpb's goroutine and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestBarsShowFractionEpochsAndEnd(t *testing.T) {
	var out bytes.Buffer
	var bars syncBuffer
	p := newPrinter(&out, &bars, true)
	task := status.Task{ID: "t1", Name: "lr", State: status.Running, Stages: 1, StageName: "sgd",
		Progress: status.Progress{Samples: 5000, SamplesPerSec: 2500, Loss: 0.4321, Epoch: 1, Epochs: 4, Fraction: 0.5}}
	// Progress reports keep coming until a frame shows them (mpb draws on
	// its refresh tick).
	for i := 0; !strings.Contains(bars.String(), "50%"); i++ {
		if i > 200 {
			t.Fatalf("no frame with the fraction after %d reports:\n%q", i, bars.String())
		}
		p.Event(status.Event{Kind: status.EventProgress, Status: task})
		time.Sleep(20 * time.Millisecond)
	}
	frame := bars.String()
	// (samples/s and loss follow, cut here by mpb to its default width
	// since a buffer has none.)
	for _, w := range []string{"lr 1/1 sgd", "50%", "epoch 2/4"} {
		if !strings.Contains(frame, w) {
			t.Errorf("bar lacks %q:\n%q", w, frame)
		}
	}
	m := map[string]float64{tasks.MetricSamples: 100, tasks.MetricLossSum: 40, tasks.MetricCorrect: 80}
	p.Event(status.Event{Kind: status.EventEpoch, Status: task, Epoch: &status.Epoch{Stage: 0, Epoch: 2, Seconds: 1, Metrics: m}})
	task.State = status.Done
	p.Event(status.Event{Kind: status.EventDone, Status: task})
	p.Summary(task) // returns only once the bars stopped (goleak checks their goroutines)
	if !strings.Contains(out.String(), "logloss") || !strings.Contains(out.String(), "t1 (lr): done") {
		t.Fatalf("table and summary:\n%s", out.String())
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Fatalf("control characters in the table output:\n%q", out.String())
	}
}

func TestNoBarsOffTerminal(t *testing.T) {
	var out, progress bytes.Buffer
	p := newPrinter(&out, &progress, false)
	task := status.Task{ID: "t1", Name: "lr", State: status.Running, Stages: 1, Progress: status.Progress{Samples: 10, Fraction: 0.1}}
	p.Event(status.Event{Kind: status.EventProgress, Status: task})
	p.Event(status.Event{Kind: status.EventStatus, Status: task})
	p.Summary(task)
	if progress.Len() != 0 {
		t.Fatalf("progress output off a terminal: %q", progress.String())
	}
}

func TestStatusShowsTheMembershipEpoch(t *testing.T) {
	var b bytes.Buffer
	printStatus(&b, status.Cluster{Policy: "greedy", Epoch: 7, Slaves: []status.Slave{
		{ID: "s1", Alive: true, Incarnation: 7}, {ID: "s2", Incarnation: 2}, {ID: "s3", Incarnation: 3, Left: true},
		{ID: "s4", Alive: true, Incarnation: 4, Lingering: 2},
	}})
	out := b.String()
	if !strings.Contains(out, "membership epoch: 7") || !regexp.MustCompile(`s1 .* 7 alive`).MatchString(out) || !regexp.MustCompile(`s2 .* 2 dead`).MatchString(out) ||
		!regexp.MustCompile(`s3 .* 3 left`).MatchString(out) || !regexp.MustCompile(`s4 .* 4 alive, 2 slot\(s\) held by workers of stopped`).MatchString(out) {
		t.Fatalf("status:\n%s", out)
	}
}

func TestStatusShowsDoneFraction(t *testing.T) {
	var b bytes.Buffer
	printStatus(&b, status.Cluster{Policy: "greedy", Tasks: []status.Task{
		{ID: "t1", Name: "lr", State: status.Running, Stages: 1, Progress: status.Progress{Samples: 10, Fraction: 0.42}},
		{ID: "t2", Name: "mf", State: status.Queued, Stages: 1},
	}})
	lines := strings.Split(b.String(), "\n")
	var t1, t2 string
	for _, l := range lines {
		if strings.Contains(l, " t1 ") {
			t1 = l
		}
		if strings.Contains(l, " t2 ") {
			t2 = l
		}
	}
	if !strings.Contains(t1, "42%") || strings.Contains(t2, "%") {
		t.Fatalf("status:\n%s", b.String())
	}
}

// A slave's death in a stage that survives it is news for whoever follows
// the task: the failover event is printed when it comes, and the stage's
// summary says which slave died and what became of its workers' blocks.
func TestFailoverIsPrinted(t *testing.T) {
	var out, progress bytes.Buffer
	p := newPrinter(&out, &progress, false)
	task := status.Task{ID: "t1", Name: "lr", State: status.Running, Stages: 1}
	msg := "stage 0 (sgd): slave s1 died; its 2 workers' 4 unfinished blocks go to the 4 survivors"
	p.Event(status.Event{Kind: status.EventFailover, Status: task, Message: msg})
	if !strings.Contains(out.String(), msg) {
		t.Fatalf("the failover event is not printed:\n%s", out.String())
	}
	out.Reset()
	task.State = status.Done
	task.Results = []status.StageResult{{Index: 0, Name: "sgd", Func: "lr.sgd", Workers: 6, Failovers: []status.Failover{
		{Slave: "s1", Ranks: []int{2, 3}, Blocks: 4, Survivors: 4},
		{Slave: "s3", Survivors: 4},
		{Slave: "s4", Survivors: 4, Left: true},
	}, Metrics: map[string]float64{tasks.MetricBadLines: 1}, BadLines: []string{"x.libsvm line 3: no label"}}}
	p.Summary(task)
	for _, want := range []string{"slave s1 died: its workers 2, 3 left 4 unfinished blocks to the 4 survivors", "slave s3 died (it held only shards)",
		"slave s4 left (it held only shards)", "skipped 1 malformed line, first:\n        x.libsvm line 3: no label"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// A queued stage the cluster shrank below is news for whoever follows or
// lists the task: the waiting event is printed, and status shows why.
func TestWaitingIsShown(t *testing.T) {
	why := "stage 0 asks for 4 workers but the cluster has 3 worker slots on 2 live slaves: lower workers or start more slaves; it waits until enough slaves are back (flexps cancel t2 stops it)"
	var out, progress bytes.Buffer
	p := newPrinter(&out, &progress, false)
	task := status.Task{ID: "t2", Name: "mf", State: status.Queued, Stages: 1, Waiting: why}
	p.Event(status.Event{Kind: status.EventWaiting, Status: task, Message: why})
	if !strings.Contains(out.String(), "waiting: "+why) {
		t.Fatalf("the waiting event is not printed:\n%s", out.String())
	}
	var b bytes.Buffer
	printStatus(&b, status.Cluster{Policy: "sequential", Tasks: []status.Task{task}})
	if !strings.Contains(b.String(), "waiting: stage 0 asks for 4 workers") {
		t.Fatalf("status:\n%s", b.String())
	}
}

// A queued stage that waits for busy slots says so in flexps status (it
// said nothing).
func TestQueuedIsShown(t *testing.T) {
	why := "stage 0 asks for 2 workers; 1 slot free now; t1 (lr) holds 1"
	var b bytes.Buffer
	printStatus(&b, status.Cluster{Policy: "greedy", Tasks: []status.Task{{ID: "t2", Name: "mf", State: status.Queued, Stages: 1, Queued: why}}})
	if !strings.Contains(b.String(), "queued: "+why) {
		t.Fatalf("status:\n%s", b.String())
	}
}

// The line under a status page that left out older tasks said "1 older
// tasks not shown" for one.
func TestPrintOmitted(t *testing.T) {
	page := []status.Task{{ID: "tA"}, {ID: "tB"}} // oldest first
	for _, tc := range []struct {
		name    string
		omitted int
		tasks   []status.Task
		limit   int
		want    string
	}{
		{"none left out", 0, page, 2, ""},
		{"one", 1, page, 2, "1 older task not shown: flexps status --limit 2 --before tA\n"},
		{"several, no --limit", 7, page, 0, "7 older tasks not shown: flexps status --limit 2 --before tA\n"},
		{"an empty page", 3, nil, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printOmitted(&b, status.Cluster{Tasks: tc.tasks, Omitted: tc.omitted}, tc.limit)
			if b.String() != tc.want {
				t.Fatalf("got %q, want %q", b.String(), tc.want)
			}
		})
	}
}

// A master killed and restarted mid-task resumes a task with a
// [checkpoint] dir under its id; `flexps submit` follows it on, and the
// epochs after the checkpoint come again. The printer says why, once,
// between the rows; a task followed from its resume on (submit --resume)
// gets no such line. Before, the table showed an epoch twice with no word.
func TestResumeByARestartedMasterIsPrinted(t *testing.T) {
	var out, progress bytes.Buffer
	p := newPrinter(&out, &progress, false)
	task := status.Task{ID: "t1", Name: "lr", State: status.Running, Stages: 1}
	row := func(epoch int) {
		p.Event(status.Event{Kind: status.EventEpoch, Status: task, Epoch: &status.Epoch{Stage: 0, Epoch: epoch, Metrics: map[string]float64{"logloss": 0.3}}})
	}
	row(25)
	row(26)
	task.Resumed = "out/lr.ckpt/ckpt-000005.flexps"
	row(26)
	row(27)
	if got := strings.Count(out.String(), "resumed: the master resumed task t1 from checkpoint out/lr.ckpt/ckpt-000005.flexps"); got != 1 {
		t.Fatalf("the resume is said %d times (want 1):\n%s", got, out.String())
	}
	out.Reset()
	q := newPrinter(&out, &progress, false)
	q.Event(status.Event{Kind: status.EventEpoch, Status: task, Epoch: &status.Epoch{Stage: 0, Epoch: 26}})
	if strings.Contains(out.String(), "resumed:") {
		t.Fatalf("a task followed from its resume on is said to be resumed:\n%s", out.String())
	}
}

// A running stage's slots on a slave that died are shown as lost, not
// among those held (status listed the dead slave's slots until the stage
// ended).
func TestStatusShowsLostSlots(t *testing.T) {
	for _, tc := range []struct {
		name       string
		slots      map[string]int
		lost       map[string]int
		want, lack string
	}{
		{"none lost", map[string]int{"s1": 2, "s3": 1}, nil, " s1:2,s3:1 ", "lost"},
		{"one lost", map[string]int{"s1": 2, "s3": 1}, map[string]int{"s2": 1}, " s1:2,s3:1 (lost s2:1) ", "s1:2,s2:1"},
		{"all lost", nil, map[string]int{"s1": 2, "s2": 2}, " (lost s1:2,s2:2) ", "s1:2,s2:2 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printStatus(&b, status.Cluster{Policy: "greedy", Tasks: []status.Task{
				{ID: "t1", Name: "lr", State: status.Running, Stages: 1, Slots: tc.slots, Lost: tc.lost},
			}})
			if out := b.String(); !strings.Contains(out, tc.want) || strings.Contains(out, tc.lack) {
				t.Fatalf("status lacks %q or has %q:\n%s", tc.want, tc.lack, out)
			}
		})
	}
}

// With several tasks followed, one that ends is reported when it ends, not
// when the last one does (a task that failed in its first second was not
// reported until the others, maybe hours later, ended), once, and the
// next epoch row names its task again.
func TestSummaryOfAnEndedTaskComesWhenItEnds(t *testing.T) {
	row := func(id, name string, epoch int) status.Event {
		return status.Event{Kind: status.EventEpoch, Status: status.Task{ID: id, Name: name, State: status.Running, Stages: 1, StageName: "sgd"},
			Epoch: &status.Epoch{Epoch: epoch, Workers: 1, Seconds: 1, Metrics: map[string]float64{tasks.MetricSamples: 10}}}
	}
	failed := status.Task{ID: "t1", Name: "a", State: status.Failed, Reason: "boom", Stages: 1}
	done := status.Task{ID: "t2", Name: "b", State: status.Done, Stages: 1}
	for _, tc := range []struct {
		name string
		end  bool
		want string // the output, with rows and headers abbreviated
	}{
		{"several tasks", true, "header t1|row 1|header t2|row 1|failed t1|header t2|row 2|done t2|"},
		{"one task", false, "header t1|row 1|header t2|row 1|row 2|failed t1|done t2|"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, progress bytes.Buffer
			p := newPrinter(&out, &progress, false)
			p.EndSummaries = tc.end
			p.Event(row("t1", "a", 1))
			p.Event(row("t2", "b", 1))
			p.Event(status.Event{Kind: status.EventFailed, Status: failed})
			p.Event(row("t2", "b", 2))
			p.Event(status.Event{Kind: status.EventDone, Status: done})
			p.Summary(failed)
			p.Summary(done)
			var got strings.Builder
			for _, l := range strings.Split(out.String(), "\n") {
				switch f := strings.Fields(l); {
				case len(f) == 3 && f[0] == "task":
					got.WriteString("header " + f[1] + "|")
				case len(f) > 2 && f[0] == "0" && f[1] == "sgd":
					got.WriteString("row " + f[2] + "|")
				case strings.HasPrefix(l, "task t1 (a): failed: boom"):
					got.WriteString("failed t1|")
				case strings.HasPrefix(l, "task t2 (b): done"):
					got.WriteString("done t2|")
				}
			}
			if got.String() != tc.want {
				t.Fatalf("got  %s\nwant %s\noutput:\n%s", got.String(), tc.want, out.String())
			}
		})
	}
}
