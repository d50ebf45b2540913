package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/testkit"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var slowStarted atomic.Int64

func init() {
	// test.fill adds rank+1 to every key of table "t", once per iteration,
	// for params.iters iterations.
	tasks.Register("test.fill", func(info *tasks.Info) error {
		t, err := info.Table("t")
		if err != nil {
			return err
		}
		n := t.Spec().Size
		keys := make([]uint64, n)
		vals := make([]float64, n*uint64(t.Spec().Width))
		for i := range keys {
			keys[i] = uint64(i)
		}
		for i := range vals {
			vals[i] = float64(info.Rank + 1)
		}
		for it := 0; it < info.Params.Int("iters", 1); it++ {
			if err := t.Add(keys, vals); err != nil {
				return err
			}
			info.Report(1, 0)
			if err := info.Clock(); err != nil {
				return err
			}
		}
		info.ReportEpoch(1, map[string]float64{"samples": 1})
		return nil
	})
	// test.scale multiplies every value of "t" by params.factor; only rank
	// 0 writes (the others read and check they see the previous stage).
	tasks.Register("test.scale", func(info *tasks.Info) error {
		t, err := info.Table("t")
		if err != nil {
			return err
		}
		n := t.Spec().Size
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = uint64(i)
		}
		vals := make([]float64, n*uint64(t.Spec().Width))
		if err := t.Get(keys, vals); err != nil {
			return err
		}
		want := info.Params.Float("expect", -1)
		for k, v := range vals {
			// Only the writer checks: under ASP the others may read
			// before or after its scaling.
			if info.Rank == 0 && want >= 0 && v != want {
				return fmt.Errorf("rank %d: key %d = %v before scaling, want %v", info.Rank, k, v, want)
			}
		}
		if info.Rank == 0 {
			f := info.Params.Float("factor", 1)
			for i := range vals {
				vals[i] = vals[i] * (f - 1)
			}
			return t.Add(keys, vals)
		}
		return nil
	})
	tasks.Register("test.fail", func(info *tasks.Info) error {
		if info.Rank == 1 {
			return errors.New("boom from the stage function")
		}
		<-info.Ctx.Done()
		return info.Ctx.Err()
	})
	// Reports the epochs of params "epochs" (a list), one Clock after each.
	tasks.Register("test.epochs", func(info *tasks.Info) error {
		list, _ := info.Params["epochs"].([]any)
		for _, e := range list {
			info.ReportEpoch(int(e.(float64)), map[string]float64{tasks.MetricSamples: 1})
			if err := info.Clock(); err != nil {
				return err
			}
		}
		return nil
	})
	tasks.Register("test.panic", func(info *tasks.Info) error {
		panic("a bug in user code")
	})
	tasks.Register("test.slow", func(info *tasks.Info) error {
		slowStarted.Add(1)
		<-info.Ctx.Done()
		return info.Ctx.Err()
	})
	// A stage function that ignores its context: it returns only when
	// the test closes stubbornRelease.
	tasks.Register("test.stubborn", func(info *tasks.Info) error {
		stubbornStarted.Add(1)
		<-stubbornRelease
		return nil
	})
}

var (
	stubbornStarted atomic.Int64
	stubbornRelease = make(chan struct{})
)

func startLocal(t *testing.T, slaves, slots int) *engine.Local {
	t.Helper()
	l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: slaves, Slots: slots, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// startLogged is startLocal with the cluster's logs, from info level up,
// in the buffer it returns.
func startLogged(t *testing.T, slaves, slots int) (*engine.Local, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: slaves, Slots: slots,
		Log: zerolog.New(logs).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l, logs
}

// submissionLogs runs a one-iteration task over input "train" on a
// cluster of one slot and returns what the cluster logged.
func submissionLogs(t *testing.T, name string, in tasks.InputSpec) string {
	t.Helper()
	l, logs := startLogged(t, 1, 1)
	task := tasks.NewTask(name).SetInput("train", in).
		SetStages(tasks.Stage{Name: "spin", Func: "test.spin", Params: tasks.Params{"iters": 1}})
	if _, err := l.SubmitAndWait(context.Background(), task, nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	return logs.String()
}

func readModel(t *testing.T, path string) *tasks.Model {
	t.Helper()
	m, err := tasks.LoadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMultiStageDifferentParallelismAndKinds(t *testing.T) {
	l := startLocal(t, 2, 4)
	for _, c := range []struct {
		kind  string
		dtype kvstore.DType
	}{
		{tasks.KindPS, kvstore.Float64}, {tasks.KindLocal, kvstore.Float64}, {tasks.KindHogwild, kvstore.Float64},
		// Local kinds hold a float32 table as float32 and write back
		// the difference to what they loaded.
		{tasks.KindLocal, kvstore.Float32}, {tasks.KindHogwild, kvstore.Float32},
	} {
		kind := c.kind
		t.Run(kind+"/"+string(c.dtype), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m")
			// Stage 0: 4 ps workers each add (rank+1) x 3 -> every key 30.
			// Stage 1 (kind): 1 worker checks 30 and scales by 2 -> 60.
			// Stage 2: 2 ps workers check 60.
			second := tasks.Stage{Name: "scale", Func: "test.scale", Workers: 1, WorkerKind: kind,
				Params: tasks.Params{"expect": 30.0, "factor": 2.0}}
			if kind != tasks.KindPS {
				second.Workers = 2
			}
			task := tasks.NewTask("multi").AddTable(kvstore.TableSpec{Name: "t", Size: 1000, Width: 2, DType: c.dtype}).SetStages(
				tasks.Stage{Name: "fill", Func: "test.fill", Workers: 4, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: tasks.Params{"iters": 3}},
				second,
				tasks.Stage{Name: "check", Func: "test.scale", Workers: 2, Params: tasks.Params{"expect": 60.0, "factor": 1.0}},
			)
			task.Output, task.Kind = out, "test"
			st, err := l.SubmitAndWait(context.Background(), task, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Results) != 3 || st.Results[0].Workers != 4 || st.Results[2].Workers != 2 {
				t.Fatalf("results: %+v", st.Results)
			}
			if kind != tasks.KindPS && len(st.Results[1].Placement) != 1 {
				t.Fatalf("a %s stage ran on several slaves: %v", kind, st.Results[1].Placement)
			}
			m := readModel(t, out)
			tab, _ := m.Table("t")
			for i, v := range tab.DenseValues() {
				if v != 60 {
					t.Fatalf("value %d = %v, want 60", i, v)
				}
			}
		})
	}
}

func TestWorkerErrorFailsTaskWithReason(t *testing.T) {
	l := startLocal(t, 2, 2)
	task := tasks.NewTask("fails").SetStages(tasks.Stage{Name: "s", Func: "test.fail", Workers: 3})
	st, err := l.SubmitAndWait(context.Background(), task, nil)
	if !errors.Is(err, engine.ErrTaskFailed) || st.State != status.Failed {
		t.Fatalf("err %v state %s", err, st.State)
	}
	if !strings.Contains(st.Reason, "boom from the stage function") || !strings.Contains(st.Reason, "worker 1") {
		t.Fatalf("reason %q does not say what failed where", st.Reason)
	}
	// The cluster is usable afterwards: slots were released.
	ok := tasks.NewTask("after").AddTable(kvstore.TableSpec{Name: "t", Size: 10}).SetStages(tasks.Stage{Func: "test.fill", Workers: 4})
	if _, err := l.SubmitAndWait(context.Background(), ok, nil); err != nil {
		t.Fatal(err)
	}
}

// TestMisreportedEpochFailsTheStage: an epoch below 1, or below the one
// reported before, fails the worker at its next Clock, naming the epoch,
// for ps and local stages; until now epoch 0 was shown and summed as an
// epoch. Epochs in order (a repeat included) pass.
func TestMisreportedEpochFailsTheStage(t *testing.T) {
	l := startLocal(t, 1, 2)
	for _, tc := range []struct {
		name   string
		epochs []any
		want   string
	}{
		{"zero", []any{0.0, 1.0}, "reported epoch 0: epochs count from 1"},
		{"negative", []any{-1.0}, "reported epoch -1: epochs count from 1"},
		{"backwards", []any{1.0, 2.0, 1.0}, "reported epoch 1 after epoch 2: epochs are reported in order"},
		{"in order", []any{1.0, 2.0, 2.0, 3.0}, ""},
	} {
		for _, kind := range []string{tasks.KindPS, tasks.KindLocal} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				task := tasks.NewTask("ep").AddTable(kvstore.TableSpec{Name: "t", Size: 4}).SetStages(tasks.Stage{Name: "count", Func: "test.epochs", Workers: 2, WorkerKind: kind,
					Consistency: kvstore.Consistency{Kind: kvstore.SSP, Staleness: 1}, Params: map[string]any{"epochs": tc.epochs}})
				st, err := l.SubmitAndWait(context.Background(), task, nil)
				if tc.want == "" {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				if !errors.Is(err, engine.ErrTaskFailed) || !strings.Contains(st.Reason, tc.want) || !strings.Contains(st.Reason, "count") {
					t.Fatalf("err %v, reason %q: want a failed task naming the stage and %q", err, st.Reason, tc.want)
				}
			})
		}
	}
}

func TestPanicInStageFunctionIsAnError(t *testing.T) {
	l := startLocal(t, 1, 1)
	st, err := l.SubmitAndWait(context.Background(), tasks.NewTask("p").SetStages(tasks.Stage{Func: "test.panic", Workers: 1}), nil)
	if err == nil || !strings.Contains(st.Reason, "panicked") {
		t.Fatalf("err %v reason %q", err, st.Reason)
	}
}

func TestCancelStopsTask(t *testing.T) {
	l := startLocal(t, 1, 2)
	slowStarted.Store(0)
	task := tasks.NewTask("slow").SetStages(tasks.Stage{Func: "test.slow", Workers: 2})
	done := make(chan error, 1)
	var st status.Task
	go func() {
		var err error
		st, err = l.SubmitAndWait(context.Background(), task, nil)
		done <- err
	}()
	for slowStarted.Load() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := l.Cancel(context.Background(), task.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || st.State != status.Cancelled {
			t.Fatalf("err %v state %s", err, st.State)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not stop the task")
	}
}

func TestQueuesWhenLargerThanFreeSlots(t *testing.T) {
	l := startLocal(t, 1, 2)
	slowStarted.Store(0)
	hog := tasks.NewTask("hog").SetStages(tasks.Stage{Func: "test.slow", Workers: 2})
	go l.SubmitAndWait(context.Background(), hog, nil)
	for slowStarted.Load() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	small := tasks.NewTask("small").AddTable(kvstore.TableSpec{Name: "t", Size: 10}).SetStages(tasks.Stage{Func: "test.fill", Workers: 2})
	id, err := l.Submit(context.Background(), small)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	rep, err := l.Status(context.Background(), id)
	if err != nil || rep.Tasks[0].State != status.Queued {
		t.Fatalf("want the second task queued: %+v %v", rep.Tasks, err)
	}
	l.Cancel(context.Background(), hog.ID)
	if _, err := l.Follow(context.Background(), id, nil); err != nil {
		t.Fatal(err)
	}
	// A stage larger than the whole cluster is rejected, not queued forever.
	huge := tasks.NewTask("huge").SetStages(tasks.Stage{Func: "test.slow", Workers: 3})
	st, err := l.SubmitAndWait(context.Background(), huge, nil)
	if err == nil || !strings.Contains(st.Reason, "worker slots") {
		t.Fatalf("err %v reason %q", err, st.Reason)
	}
}

func TestEveryRecordReadExactlyOncePerEpoch(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	const rows = 5000
	want := 0.0
	for i := 0; i < rows; i++ {
		fmt.Fprintf(&b, "%d 1:%d 2:0.5\n", i, i%7+1)
		want += float64(i)
	}
	path := filepath.Join(dir, "d.libsvm")
	os.WriteFile(path, []byte(b.String()), 0o644)
	l := startLocal(t, 2, 2)
	task := tasks.NewTask("count").SetInput("train", tasks.InputSpec{Path: path, BlockSize: 1000}).
		SetStages(tasks.Stage{Func: testkit.Count, Workers: 4, Params: tasks.Params{"epochs": 3, "sleep_ms": 2}})
	st, err := l.SubmitAndWait(context.Background(), task, nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := st.Results[0].Epochs
	if len(eps) != 3 {
		t.Fatalf("epochs: %+v", eps)
	}
	for _, e := range eps {
		if e.Metrics["samples"] != rows || math.Abs(e.Metrics["label_sum"]-want) > 0 {
			t.Fatalf("epoch %d: %v records with label sum %v, want %d and %v", e.Epoch, e.Metrics["samples"], e.Metrics["label_sum"], rows, want)
		}
	}
}

func TestDirectTransferGivesTheSameModel(t *testing.T) {
	l := startLocal(t, 2, 2)
	run := func(transfer string, pin1, pin2 []string) ([]float64, status.Task) {
		out := filepath.Join(t.TempDir(), "m")
		task := tasks.NewTask("xfer").AddTable(kvstore.TableSpec{Name: "t", Size: 3000, Width: 3, Init: "uniform:1"}).
			AddTable(kvstore.TableSpec{Name: "untouched", Size: 10, Init: "uniform:1"}).SetStages(
			tasks.Stage{Name: "fill", Func: "test.fill", Workers: 4, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: tasks.Params{"iters": 2}},
			tasks.Stage{Name: "scale", Func: "test.scale", Workers: 1, WorkerKind: tasks.KindSingle, Slaves: pin1, Params: tasks.Params{"factor": 2.0}},
			tasks.Stage{Name: "scale2", Func: "test.scale", Workers: 2, WorkerKind: tasks.KindLocal, Slaves: pin2, Params: tasks.Params{"factor": 1.5}},
		)
		task.Output, task.Kind, task.ModelTransfer = out, "test", transfer
		st, err := l.SubmitAndWait(context.Background(), task, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := readModel(t, out)
		tab, _ := m.Table("t")
		u, _ := m.Table("untouched")
		return append(tab.DenseValues(), u.DenseValues()...), st
	}
	ref, _ := run(tasks.TransferKVStore, nil, nil)
	for _, tc := range []struct {
		name       string
		pin1, pin2 []string
	}{
		{"same slave", nil, nil},
		{"across slaves", []string{"slave-0"}, []string{"slave-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, st := run(tasks.TransferDirect, tc.pin1, tc.pin2)
			for i := range ref {
				if math.Float64bits(got[i]) != math.Float64bits(ref[i]) {
					t.Fatalf("value %d: direct %v, kvstore %v", i, got[i], ref[i])
				}
			}
			if note := st.Results[2].Note; !strings.Contains(note, "directly from slave") {
				t.Fatalf("stage 2 did not take the model directly: %+v", st.Results[2])
			}
		})
	}
}

func init() {
	// test.spin does params.iters iterations of 2ms each, one sample per
	// iteration: throughput grows with the number of workers.
	tasks.Register("test.spin", func(info *tasks.Info) error {
		for i := 0; i < info.Params.Int("iters", 100); i++ {
			select {
			case <-info.Ctx.Done():
				return info.Ctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
			info.Report(1, 0)
		}
		return nil
	})
}

func TestAutoParallelismMeasuresAndChooses(t *testing.T) {
	l := startLocal(t, 2, 2)
	task := tasks.NewTask("auto").SetStages(tasks.Stage{Name: "spin", Func: "test.spin", Auto: true, AutoTrialSeconds: 0.6,
		Params: tasks.Params{"iters": 1000}})
	st, err := l.SubmitAndWait(context.Background(), task, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := st.Results[0]
	t.Logf("note: %s", res.Note)
	if res.Workers != 4 || !strings.Contains(res.Note, "1 worker ") || !strings.Contains(res.Note, "chose 4 workers") {
		t.Fatalf("auto chose %d workers: %s", res.Workers, res.Note)
	}
	if res.Samples != 4*1000 {
		t.Fatalf("the final run did %d samples, want %d", res.Samples, 4*1000)
	}
	// A stage short enough to finish inside the first trial is done there.
	quick := tasks.NewTask("quick").SetStages(tasks.Stage{Name: "spin", Func: "test.spin", Auto: true, AutoTrialSeconds: 5,
		Params: tasks.Params{"iters": 5}})
	st, err = l.SubmitAndWait(context.Background(), quick, nil)
	if err != nil || !strings.Contains(st.Results[0].Note, "finished the stage during the trial") {
		t.Fatalf("%v %+v", err, st.Results)
	}
}

// A stage function that loops on Add and Clock without looking at its
// context stops when its task is cancelled: its Adds to keys in the
// slave's memory never fail, so only Clock can tell it (it ran on, and
// Close waited for it for minutes).
func TestCancelStopsALoopOnLocalKeys(t *testing.T) {
	tasks.Register("test.loopForever", func(info *tasks.Info) error {
		tb, err := info.Table("t")
		if err != nil {
			return err
		}
		for {
			if err := tb.Add([]uint64{1}, []float64{1}); err != nil {
				return err
			}
			info.Report(1, 0)
			if err := info.Clock(); err != nil {
				return err
			}
		}
	})
	workers := map[string]int{tasks.KindPS: 4, tasks.KindLocal: 2}
	for _, kind := range []string{tasks.KindPS, tasks.KindLocal} {
		t.Run(kind, func(t *testing.T) {
			l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			task := tasks.NewTask("loop").AddTable(kvstore.TableSpec{Name: "t", Size: 10}).
				SetStages(tasks.Stage{Name: "a", Func: "test.loopForever", Workers: workers[kind], WorkerKind: kind,
					Consistency: kvstore.Consistency{Kind: kvstore.SSP, Staleness: 1}})
			id, err := l.Submit(context.Background(), task)
			if err != nil {
				t.Fatal(err)
			}
			waitState(t, l, id, status.Running)
			if err := l.Cancel(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			l.Close()
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("Close took %v: the cancelled workers ran on", took)
			}
		})
	}
}

// Following a task that has ended returns its status at once (it took the
// 2 s of the follower's fallback poll).
func TestFollowOfEndedTaskReturnsAtOnce(t *testing.T) {
	l := startLocal(t, 1, 1)
	task := tasks.NewTask("quick").SetStages(tasks.Stage{Name: "spin", Func: "test.spin", Workers: 1, Params: tasks.Params{"iters": 1}})
	if _, err := l.SubmitAndWait(context.Background(), task, nil); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	start := time.Now()
	st, err := l.Follow(context.Background(), task.ID, func(ev status.Event) { kinds = append(kinds, ev.Kind) })
	if err != nil || st.State != status.Done {
		t.Fatalf("%+v %v", st, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Follow of an ended task took %v", took)
	}
	if len(kinds) != 1 || kinds[0] != status.EventDone {
		t.Fatalf("events %v, want one %q", kinds, status.EventDone)
	}
}

// The workers an auto trial stops at its end did nothing wrong: a
// successful run logs no "worker failed" error for them (it logged one per
// worker and trial).
func TestAutoTrialStopsAreNotLoggedAsErrors(t *testing.T) {
	l, logs := startLogged(t, 2, 2)
	task := tasks.NewTask("auto").SetStages(tasks.Stage{Name: "spin", Func: "test.spin", Auto: true, AutoTrialSeconds: 0.3,
		Params: tasks.Params{"iters": 400}})
	if _, err := l.SubmitAndWait(context.Background(), task, nil); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "worker stopped") {
		t.Fatalf("no trial's workers were stopped:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"level":"error"`) {
			t.Errorf("error logged in a successful auto run: %s", line)
		}
	}
	// Nor are they counted as failed workers.
	outcomes := workerOutcomes(t, l)
	if outcomes["failed"] != 0 || outcomes["stopped"] == 0 || outcomes["done"] == 0 {
		t.Fatalf("workers ended by outcome %v: want the trials' workers stopped, none failed", outcomes)
	}
}

// workerOutcomes sums flexps_slave_workers_ended_total over the local
// cluster's slaves, by outcome.
func workerOutcomes(t *testing.T, l *engine.Local) map[string]float64 {
	t.Helper()
	outcomes := map[string]float64{}
	for _, s := range l.Slaves() {
		reg := prometheus.NewRegistry()
		reg.MustRegister(s.Collector())
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != "flexps_slave_workers_ended_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "outcome" {
						outcomes[lp.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return outcomes
}

// syncBuffer is a bytes.Buffer safe for the cluster's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestPoliciesSequentialVersusGreedy(t *testing.T) {
	for _, policy := range []string{"sequential", "greedy"} {
		t.Run(policy, func(t *testing.T) {
			l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop(),
				Config: engine.ClusterConfig{Master: engine.MasterSect{Policy: policy}}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			slowStarted.Store(0)
			a := tasks.NewTask("a").SetStages(tasks.Stage{Func: "test.slow", Workers: 1})
			b := tasks.NewTask("b").SetStages(tasks.Stage{Func: "test.slow", Workers: 1})
			ida, err := l.Submit(context.Background(), a)
			if err != nil {
				t.Fatal(err)
			}
			idb, err := l.Submit(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			// Both stages were queued at submission, in submission order: a
			// runs at once; b runs beside it (greedy) or waits for it
			// (sequential). Poll, never sleep a guessed time.
			waitState(t, l, ida, status.Running)
			if policy == "greedy" {
				waitState(t, l, idb, status.Running)
			} else {
				rep, err := l.Status(context.Background(), idb)
				if err != nil {
					t.Fatal(err)
				}
				if got := rep.Tasks[0].State; got != status.Queued {
					t.Fatalf("%s: second task is %s while the first runs, want %s", policy, got, status.Queued)
				}
			}
			l.Cancel(context.Background(), ida)
			if policy == "sequential" { // b starts once a has ended
				deadline := time.Now().Add(5 * time.Second)
				for {
					rep, _ := l.Status(context.Background(), idb)
					if rep.Tasks[0].State == status.Running {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("second task never started after the first ended")
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			l.Cancel(context.Background(), idb)
			l.Follow(context.Background(), idb, nil)
		})
	}
}

// waitState polls task id's status until it reaches state (5s deadline).
func waitState(t *testing.T, l *engine.Local, id, state string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rep, err := l.Status(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.Tasks[0].State; got == state {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("task %s is %s, want %s", id, got, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func init() {
	// test.barrier: each worker adds rank+1 to key rank+round*workers...
	// then passes a barrier and checks it sees every worker's Add of that
	// round; rank 0 of a straggling stage sleeps first.
	tasks.Register("test.barrier", func(info *tasks.Info) error {
		t, err := info.Table("t")
		if err != nil {
			return err
		}
		for round := 0; round < info.Params.Int("rounds", 3); round++ {
			if info.Rank == 0 {
				time.Sleep(50 * time.Millisecond) // the others reach the barrier first
			}
			if err := t.Add([]uint64{uint64(info.Rank)}, []float64{1}); err != nil {
				return err
			}
			if err := info.Barrier(); err != nil {
				return err
			}
			keys := make([]uint64, info.Workers)
			for i := range keys {
				keys[i] = uint64(i)
			}
			out := make([]float64, info.Workers)
			if err := t.Get(keys, out); err != nil {
				return err
			}
			for i, v := range out {
				if v != float64(round+1) {
					return fmt.Errorf("rank %d round %d: key %d is %v after the barrier, want %d", info.Rank, round, i, v, round+1)
				}
			}
			// Nobody adds the next round before everyone read this one.
			if err := info.Barrier(); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestBarrierSeesEveryWorkersAdds(t *testing.T) {
	l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, kind := range []string{tasks.KindPS, tasks.KindLocal, tasks.KindHogwild} {
		t.Run(kind, func(t *testing.T) {
			task := tasks.NewTask("barrier-" + kind).AddTable(kvstore.TableSpec{Name: "t", Size: 16}).
				SetStages(tasks.Stage{Func: "test.barrier", Workers: 2, WorkerKind: kind, Params: tasks.Params{"rounds": 3}})
			if _, err := l.SubmitAndWait(context.Background(), task, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A failing worker releases the others' barrier with an error.
	task := tasks.NewTask("barrier-fail").AddTable(kvstore.TableSpec{Name: "t", Size: 16}).
		SetStages(tasks.Stage{Func: "test.barrier", Workers: 3})
	task.Tables[0].Size = 2 // rank 2's Add is out of range: it fails before the barrier
	_, err = l.SubmitAndWait(context.Background(), task, nil)
	if err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("want the out-of-range worker's error, got %v", err)
	}
}

func init() {
	// test.returns-early: rank 0 returns at once, the others call Barrier.
	tasks.Register("test.returns-early", func(info *tasks.Info) error {
		if info.Rank == 0 {
			return nil
		}
		return info.Barrier()
	})
}

// A worker that returns while the others wait at a Barrier it never calls
// fails the stage, naming it; the others waited for good, and the task
// hung until cancelled.
func TestWorkerReturningBeforeABarrierFailsTheStage(t *testing.T) {
	l := startLocal(t, 2, 2)
	for _, kind := range []string{tasks.KindPS, tasks.KindLocal, tasks.KindHogwild} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			task := tasks.NewTask("early-" + kind).AddTable(kvstore.TableSpec{Name: "t", Size: 4}).
				SetStages(tasks.Stage{Name: "gather", Func: "test.returns-early", Workers: 2, WorkerKind: kind})
			st, err := l.SubmitAndWait(ctx, task, nil)
			if !errors.Is(err, engine.ErrTaskFailed) || st.State != status.Failed {
				t.Fatalf("err %v, state %q: want the task failed", err, st.State)
			}
			for _, want := range []string{"stage 0 (gather)", "worker 0 returned before its barrier 1", "every worker of a stage must call Barrier"} {
				if !strings.Contains(st.Reason, want) {
					t.Fatalf("reason %q does not say %q", st.Reason, want)
				}
			}
		})
	}
}

func TestStartLocalBadStartNoPanic(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		o    engine.LocalOptions
		want string
	}{
		{"too many slaves", context.Background(), engine.LocalOptions{Slaves: 50000}, "at most"},
		{"too many slots", context.Background(), engine.LocalOptions{Slots: 1 << 20}, "at most"},
		{"negative slaves", context.Background(), engine.LocalOptions{Slaves: -1, Slots: 2}, "local cluster: -1 slaves of 2 slots each: both must be at least 1"},
		{"negative slots", context.Background(), engine.LocalOptions{Slots: -4}, "local cluster: 0 slaves of -4 slots each: both must be at least 1"},
		{"canceled during start-up", canceled, engine.LocalOptions{Slaves: 8}, "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Log = zerolog.Nop()
			l, err := engine.StartLocal(tc.ctx, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if l != nil {
				t.Fatal("a failed start returned a cluster")
			}
			l.Close() // nil-safe, like the deferred cleanup of a caller
		})
	}
}

// A master that stopped says why: its start context ended (StartLocal's
// ctx is the cluster's life), or Close. It said "master is shutting down"
// to a submission, and "context canceled" of the task Close interrupted.
func TestStoppedMasterSaysWhy(t *testing.T) {
	for _, c := range []struct {
		name string
		stop func(l *engine.Local, cancel context.CancelFunc)
		want string
	}{
		{"start context ended", func(_ *engine.Local, cancel context.CancelFunc) { cancel() },
			"the context the master was started with ended: context canceled"},
		{"closed", func(l *engine.Local, _ context.CancelFunc) { l.Close() }, "the master was closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 1, Slots: 1, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			task := tasks.NewTask("interrupted").SetStages(tasks.Stage{Func: "test.slow", Workers: 1})
			before := slowStarted.Load()
			res := make(chan error, 1)
			go func() {
				wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer wcancel()
				_, err := l.SubmitAndWait(wctx, task, nil)
				res <- err
			}()
			for slowStarted.Load() == before {
				time.Sleep(5 * time.Millisecond)
			}
			c.stop(l, cancel)
			if err := <-res; err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("the running task: %v, want it to say %q", err, c.want)
			}
			if c.name == "closed" {
				return // its client is closed too
			}
			_, err = l.Submit(context.Background(), tasks.NewTask("late").SetStages(tasks.Stage{Func: "test.slow", Workers: 1}))
			if err == nil || !strings.Contains(err.Error(), "master is shutting down: "+c.want) {
				t.Fatalf("a later submission: %v, want it to say %q", err, c.want)
			}
		})
	}
}

// A cancelled task's workers whose function ignores its context keep
// their slots until they return: the next task that needs those slots
// waits (the slave reports them lingering), and runs once they return.
func TestCancelledWorkersKeepTheirSlotsUntilTheyReturn(t *testing.T) {
	l := startLocal(t, 1, 2)
	released := false
	release := func() {
		if !released {
			released = true
			close(stubbornRelease)
		}
	}
	defer release()
	stub := tasks.NewTask("stubborn").SetStages(tasks.Stage{Func: "test.stubborn", Workers: 2})
	done := make(chan error, 1)
	go func() {
		_, err := l.SubmitAndWait(context.Background(), stub, nil)
		done <- err
	}()
	for stubbornStarted.Load() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := l.Cancel(context.Background(), stub.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the cancelled task reports no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not end the task")
	}
	small := tasks.NewTask("small").AddTable(kvstore.TableSpec{Name: "t", Size: 10}).SetStages(tasks.Stage{Func: "test.fill", Workers: 2})
	id, err := l.Submit(context.Background(), small)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond) // two heartbeats
	rep, err := l.Status(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tasks[0].State != status.Queued {
		t.Fatalf("the next task is %s while the cancelled workers still run, want queued", rep.Tasks[0].State)
	}
	if len(rep.Slaves) != 1 || rep.Slaves[0].Lingering != 2 || rep.Slaves[0].Free != 0 {
		t.Fatalf("slaves %+v, want 2 lingering and none free", rep.Slaves)
	}
	release()
	st, err := l.Follow(context.Background(), id, nil)
	if err != nil || st.State != status.Done {
		t.Fatalf("the next task after the workers returned: %v %+v", err, st)
	}
}

// An input whose own block_size splits it into a great many tiny blocks
// reads for a very long time (a round trip to the master per block):
// submitting it is warned about, naming the input and what reads at full
// speed; a sane block_size is not.
func TestTinyBlocksAreWarnedAbout(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.libsvm")
	if err := os.WriteFile(p, []byte(strings.Repeat("1 1:1\n", 4000)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		bs   int64
		warn bool
	}{{1, true}, {64 << 10, false}, {0, false}} {
		logs := submissionLogs(t, "tiny", tasks.InputSpec{Path: p, BlockSize: tc.bs})
		got := strings.Contains(logs, `input \"train\": block_size = 1 bytes splits it into 24000 blocks`)
		if got != tc.warn {
			t.Errorf("block_size %d: warned %v, want %v:\n%s", tc.bs, got, tc.warn, logs)
		}
	}
}

// A directory input reads only the files directly in it: submitting one
// that holds subdirectories beside its files is warned about, naming the
// input, how many and the glob that reads their files, which were left
// out of training without a word.
func TestSubdirectoriesOfADirectoryInputAreWarnedAbout(t *testing.T) {
	for _, tc := range []struct {
		files []string
		warn  string
	}{
		{[]string{"a.libsvm", "sub/b.libsvm"}, "the files in 1 subdirectory of "},
		{[]string{"a.libsvm", "sub/b.libsvm", "sub2/c.libsvm"}, "the files in 2 subdirectories of "},
		{[]string{"a.libsvm", "_tmp/b.libsvm"}, ""},
		{[]string{"a.libsvm"}, ""},
	} {
		dir := t.TempDir()
		for _, f := range tc.files {
			p := filepath.Join(dir, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("1 1:1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got := submissionLogs(t, "dirs", tasks.InputSpec{Path: dir})
		warned := strings.Contains(got, `the files in`)
		if tc.warn == "" && warned || tc.warn != "" && !strings.Contains(got, `input \"train\": `+tc.warn+dir+` are not read`) {
			t.Errorf("%v: want warning %q:\n%s", tc.files, tc.warn, got)
		}
	}
}

// A task whose stages do not fit one bus message (a one-stage job
// repeated thousands of times) is refused at Submit, naming the task, its
// stage count and repeat. Before, the error was NATS's bare "nats:
// maximum payload exceeded".
func TestSubmitOfATaskTooLargeForTheBus(t *testing.T) {
	l := startLocal(t, 1, 1)
	for _, tc := range []struct {
		repeat int
		want   string // "" = submitted
	}{
		{10, ""},
		{10000, `task "many": its 10000 stages do not fit one bus message (max_payload, 1048576 bytes): lower repeat`},
	} {
		t.Run(fmt.Sprint(tc.repeat), func(t *testing.T) {
			task := tasks.NewTask("many").SetStages(tasks.Stage{Name: "spin", Func: "test.spin", Workers: 1, Params: tasks.Params{"iters": 1}}).RepeatStages(tc.repeat)
			id, err := l.Submit(context.Background(), task)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Cancel(context.Background(), id); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error with %q", err, tc.want)
			}
		})
	}
}

// Close may be called from several goroutines at once (a signal handler's
// and a deferred one): it raced on the master's subscriptions and the
// slaves' state, and every call returns once the cluster is stopped.
func TestConcurrentCloses(t *testing.T) {
	state := t.TempDir()
	if err := os.Chmod(state, 0o700); err != nil { // the role keys' dir
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		start func(t *testing.T) (closers []func())
	}{
		{"Local", func(t *testing.T) []func() {
			l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 2, Slots: 1, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			return []func(){l.Close}
		}},
		{"MasterNode and SlaveNode", func(t *testing.T) []func() {
			cfg := engine.ClusterConfig{Cluster: "closes", NATS: engine.NATSConfig{Listen: "127.0.0.1:0", StateDir: state}}
			m, err := engine.StartMaster(context.Background(), cfg, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			cfg.NATS.URL = m.URL
			s, err := engine.StartSlave(context.Background(), cfg, zerolog.Nop())
			if err != nil {
				m.Close()
				t.Fatal(err)
			}
			return []func(){s.Close, m.Close}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, closeIt := range c.start(t) {
				var wg sync.WaitGroup
				for range 3 {
					wg.Go(closeIt)
				}
				wg.Wait()
				closeIt() // and once more after
			}
		})
	}
}

var (
	outliveGo   = make(chan struct{})
	outliveErrs = make(chan error, 16)
)

func init() {
	// test.outlives starts a goroutine that uses the worker's table after
	// the function returned, once the test says so.
	tasks.Register("test.outlives", func(info *tasks.Info) error {
		t, err := info.Table("t")
		if err != nil {
			return err
		}
		go func() {
			<-outliveGo
			outliveErrs <- t.Add([]uint64{0}, []float64{1})
			outliveErrs <- t.Get([]uint64{0}, make([]float64, 1))
			outliveErrs <- t.AddChunk([]uint64{0}, make([]float64, 4))
		}()
		return nil
	})
}

// A goroutine a stage function started that uses the worker's tables after
// the function returned gets kvstore.ErrClosed: its Adds were applied (to a
// model already written back, or a shard the next stage reads) or dropped,
// and its Gets answered, without a word.
func TestTablesRefuseCallsAfterTheFunctionReturned(t *testing.T) {
	l := startLocal(t, 2, 1)
	kinds := []string{tasks.KindPS, tasks.KindLocal, tasks.KindHogwild, tasks.KindSingle}
	for _, kind := range kinds {
		task := tasks.NewTask("outlives-" + kind).AddTable(kvstore.TableSpec{Name: "t", Size: 4, ChunkSize: 4}).
			SetStages(tasks.Stage{Func: "test.outlives", Workers: 1, WorkerKind: kind})
		if _, err := l.SubmitAndWait(context.Background(), task, nil); err != nil {
			t.Fatal(err)
		}
	}
	close(outliveGo)
	for range 3 * len(kinds) {
		if err := <-outliveErrs; !errors.Is(err, kvstore.ErrClosed) || !strings.Contains(err.Error(), "stage function returns") {
			t.Errorf("a call after the stage function returned: %v, want kvstore.ErrClosed", err)
		}
	}
}

func init() {
	// Rank 1 fails once the others wait at a barrier (or are on their way).
	tasks.Register("test.failAtBarrier", func(info *tasks.Info) error {
		if info.Rank == 1 {
			time.Sleep(100 * time.Millisecond)
			return errors.New("boom from the stage function")
		}
		return info.Barrier()
	})
}

// The workers a failing worker takes down with its stage are stopped, not
// failed: no "worker failed" error is logged for them, nor are they counted
// as failed. Workers waiting at a barrier were ("barrier 1: stage 0 (x)
// ended before every worker reached the barrier", or the task's error
// twice), on every slave.
func TestOnlyTheFailingWorkerIsCountedFailed(t *testing.T) {
	for _, fn := range []string{"test.fail", "test.failAtBarrier"} {
		t.Run(fn, func(t *testing.T) {
			l, logs := startLogged(t, 2, 2)
			task := tasks.NewTask("fail").SetStages(tasks.Stage{Name: "x", Func: fn, Workers: 4})
			if _, err := l.SubmitAndWait(context.Background(), task, nil); err == nil || !strings.Contains(err.Error(), "boom") {
				t.Fatalf("task error %v, want rank 1's", err)
			}
			outcomes := map[string]float64{}
			deadline := time.Now().Add(5 * time.Second)
			for outcomes["failed"]+outcomes["stopped"] < 4 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				outcomes = workerOutcomes(t, l)
			}
			if outcomes["failed"] != 1 || outcomes["stopped"] != 3 {
				t.Errorf("workers ended by outcome %v, want rank 1 failed and the 3 others stopped", outcomes)
			}
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "worker failed") && !strings.Contains(line, "boom from the stage function") {
					t.Errorf("a worker stopped by rank 1's failure logged as failed: %s", line)
				}
			}
		})
	}
}
