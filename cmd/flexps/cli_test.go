package main

import (
	"bytes"
	"fmt"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "g.libsvm")
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	emptyCkpt, otherCkpt := filepath.Join(dir, "ckpt-empty"), filepath.Join(dir, "ckpt-other")
	for _, d := range []string{emptyCkpt, otherCkpt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(otherCkpt, "notes.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		args      []string
		exit      int
		stdout    []string
		stderr    []string
		afterwith func(t *testing.T)
	}{
		{name: "no args prints usage", args: nil, exit: 2, stderr: []string{"Available Commands", "submit"}},
		{name: "version", args: []string{"--version"}, exit: 0, stdout: []string{"flexps version"}},
		{name: "help CMD", args: []string{"help", "run"}, exit: 0, stdout: []string{"--metrics-out", "--log-level", "run JOB.toml"}},
		{name: "CMD --help", args: []string{"gen", "--help"}, exit: 0, stdout: []string{"--out", "--zipf"}},
		{name: "eval --help names every model kind", args: []string{"eval", "--help"}, exit: 0, stdout: []string{"lr, kmeans, mf, kge"}},
		{name: "exit codes documented", args: []string{"--help"}, exit: 0, stdout: []string{"130 interrupted", "plot"}},
		{name: "completion", args: []string{"completion", "bash"}, exit: 0, stdout: []string{"__start_flexps"}},
		// A shell cobra has no script for, or none, printed the completion
		// command's help on stdout and exited 0: "source <(flexps
		// completion tcsh)" sourced a help text. So did a help topic that
		// names no command.
		{name: "completion of an unknown shell", args: []string{"completion", "tcsh"}, exit: 2, stderr: []string{`unknown command "tcsh" for "flexps completion"`}},
		{name: "completion without a shell", args: []string{"completion"}, exit: 2, stderr: []string{"want a shell: flexps completion bash|zsh|fish|powershell"}},
		{name: "help of an unknown command", args: []string{"help", "nosuch"}, exit: 2, stderr: []string{`no command "nosuch"`, `"flexps help" lists the commands`}},
		{name: "help of a subcommand", args: []string{"help", "completion", "zsh"}, exit: 0, stdout: []string{"zsh"}},
		// The held-out file went unnamed: "wrote g.libsvm" only.
		{name: "gen names both files it wrote", args: []string{"gen", "libsvm", "--rows", "20", "--dim", "50", "--out", filepath.Join(dir, "h.libsvm"), "--test-out", filepath.Join(dir, "h.test")}, exit: 0,
			stderr: []string{"wrote " + filepath.Join(dir, "h.libsvm") + " and " + filepath.Join(dir, "h.test") + " (held out)"}},
		{name: "flags after the argument", args: []string{"gen", "libsvm", "--rows", "20", "--dim", "50", "--out", out}, exit: 0,
			afterwith: func(t *testing.T) {
				b, err := os.ReadFile(out)
				if err != nil || strings.Count(string(b), "\n") != 20 {
					t.Fatalf("gen wrote %d lines, err %v", strings.Count(string(b), "\n"), err)
				}
				if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o644 {
					t.Errorf("mode %v, want 0644", fi.Mode().Perm())
				}
			}},
		{name: "unknown flag is a usage error", args: []string{"run", "--epochs", "3", "x.toml"}, exit: 2, stderr: []string{"unknown flag: --epochs", "flexps run --help"}},
		{name: "bad kind", args: []string{"gen", "csv", "--out", out}, exit: 2, stderr: []string{`unknown kind "csv"`}},
		{name: "too many args", args: []string{"run", "a.toml", "b.toml"}, exit: 2, stderr: []string{"exactly one job file"}},
		{name: "cancel without id", args: []string{"cancel"}, exit: 2, stderr: []string{"one task id"}},
		{name: "plot without -o", args: []string{"plot", "m.jsonl"}, exit: 2, stderr: []string{"-o/--out"}},
		{name: "plot unknown format", args: []string{"plot", "m.jsonl", "-o", "x.gif"}, exit: 2, stderr: []string{`"gif"`}},
		{name: "memprofile path checked first", args: []string{"run", "--memprofile", filepath.Join(dir, "no", "such", "dir", "h.prof"), "x.toml"}, exit: 1, stderr: []string{"memprofile"}},
		// An empty checkpoint dir started a cluster, then said there was
		// nothing to resume: now refused before anything starts.
		{name: "resume dir empty", args: []string{"run", "--resume", emptyCkpt}, exit: 1, stderr: []string{"--resume " + emptyCkpt + ": nothing to resume", "holds no checkpoint"}},
		{name: "resume dir of other files", args: []string{"run", "--resume", otherCkpt}, exit: 1, stderr: []string{"--resume " + otherCkpt + ": nothing to resume"}},
		{name: "resume dir missing", args: []string{"run", "--resume", filepath.Join(dir, "no-such-ckpt")}, exit: 1, stderr: []string{"--resume", "no-such-ckpt: no such directory"}},
		{name: "resume dir is a file", args: []string{"run", "--resume", filepath.Join(dir, "f.txt")}, exit: 1, stderr: []string{"neither a directory nor a checkpoint file"}},
		{name: "resume checkpoint file missing", args: []string{"run", "--resume", filepath.Join(emptyCkpt, "ckpt-000003.flexps")}, exit: 1, stderr: []string{"ckpt-000003.flexps: no such checkpoint file"}},
		{name: "cpuprofile path checked first", args: []string{"run", "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "c.prof"), "x.toml"}, exit: 1, stderr: []string{"cpu profile", "c.prof"}},
		{name: "slave cpuprofile path checked before joining", args: []string{"slave", "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "s.prof"), "--nats", "nats://127.0.0.1:1"}, exit: 1, stderr: []string{"cpu profile", "s.prof"}},
		{name: "bad log level", args: []string{"run", "--log-level", "loud", "x.toml"}, exit: 2, stderr: []string{`log level "loud"`}},
		// --log-level and --log-format work on every command, so every
		// command refuses a wrong one, also those that log nothing.
		{name: "bad log level on gen", args: []string{"gen", "libsvm", "--rows", "5", "--out", filepath.Join(dir, "l.libsvm"), "--log-level", "loud"}, exit: 2, stderr: []string{`log level "loud"`}},
		{name: "bad log format on status", args: []string{"status", "--log-format", "xml", "--nats", "nats://127.0.0.1:1"}, exit: 2, stderr: []string{`log format "xml"`}},
		{name: "bad log level on submit", args: []string{"--log-level", "verbose", "submit", "x.toml", "--nats", "nats://127.0.0.1:1"}, exit: 2, stderr: []string{`log level "verbose"`}},
		{name: "bad log format on plot", args: []string{"plot", "m.jsonl", "-o", filepath.Join(dir, "p.png"), "--log-format", "yaml"}, exit: 2, stderr: []string{`log format "yaml"`}},
		{name: "good log flags on gen", args: []string{"gen", "libsvm", "--rows", "5", "--out", filepath.Join(dir, "l.libsvm"), "--log-level", "debug", "--log-format", "json"}, exit: 0},
		{name: "eval --delimiter of two characters", args: []string{"eval", "--model", "m.model", "--data", "d.csv", "--delimiter", ";;"}, exit: 2, stderr: []string{`--delimiter ";;": want one character`}},
		{name: "eval --format unknown", args: []string{"eval", "--model", "m.model", "--data", "d.csv", "--format", "xml"}, exit: 2, stderr: []string{`--format "xml": want one of csv, libsvm, ratings, text`}},
		{name: "eval --kind unknown", args: []string{"eval", "--model", "m.model", "--data", "d.csv", "--kind", "xx"}, exit: 2, stderr: []string{`--kind "xx": want one of`, "lr"}},
		{name: "eval --label-column below -1", args: []string{"eval", "--model", "m.model", "--data", "d.csv", "--label-column", "-5"}, exit: 2, stderr: []string{"--label-column -5: want -1"}},
		{name: "eval --delimiter a word", args: []string{"eval", "--model", "m.model", "--data", "d.csv", "--delimiter", "tab"}, exit: 2, stderr: []string{`--delimiter "tab": want one character`}},
		{name: "gen negative --rows", args: []string{"gen", "libsvm", "--rows", "-5", "--out", filepath.Join(dir, "r.libsvm")}, exit: 2, stderr: []string{"--rows: want >= 0, got -5"}},
		{name: "gen NaN --zipf", args: []string{"gen", "libsvm", "--rows", "5", "--zipf", "NaN", "--out", filepath.Join(dir, "z.libsvm")}, exit: 2, stderr: []string{"--zipf:", "got NaN"}},
		{name: "gen negative --rank", args: []string{"gen", "ratings", "--rows", "5", "--rank", "-2", "--out", filepath.Join(dir, "k.ratings")}, exit: 2, stderr: []string{"--rank: want >= 1"}},
		// The held-out file named as the training file was a usage error
		// that exited 1, as if generating had failed.
		{name: "gen --test-out the same as --out", args: []string{"gen", "libsvm", "--rows", "5", "--out", filepath.Join(dir, "same.libsvm"), "--test-out", filepath.Join(dir, "same.libsvm")}, exit: 2, stderr: []string{"--test-out:", "is the training file"}},
		{name: "gen --test-out the same as --out, spelled otherwise", args: []string{"gen", "libsvm", "--rows", "5", "--out", filepath.Join(dir, "same.libsvm"), "--test-out", dir + "/./same.libsvm"}, exit: 2, stderr: []string{"is the training file"}},
		{name: "gen negative --test-rows", args: []string{"gen", "libsvm", "--rows", "5", "--test-rows", "-3", "--out", filepath.Join(dir, "t.libsvm"), "--test-out", filepath.Join(dir, "t.test")}, exit: 2, stderr: []string{"--test-rows: want >= 0"}},
		{name: "run --slots above the bound", args: []string{"run", "--slots", "2000", "x.toml"}, exit: 2, stderr: []string{"--slots 2000: at most 1024"}},
		{name: "run --slaves above the bound", args: []string{"run", "--slaves", "300", "x.toml"}, exit: 2, stderr: []string{"--slaves 300: at most 256"}},
		// Checked before the slave dials the bus: a negative one was
		// ignored and the slave joined with the config's.
		{name: "slave --master and --nats of two buses", args: []string{"slave", "--master", "nats://127.0.0.1:1", "--nats", "nats://127.0.0.1:2"}, exit: 2, stderr: []string{"--master nats://127.0.0.1:1 and --nats nats://127.0.0.1:2 name two buses"}},
		{name: "slave negative --slots", args: []string{"slave", "--slots", "-1", "--nats", "nats://127.0.0.1:1"}, exit: 2, stderr: []string{"--slots -1: want 1 to 1024"}},
		{name: "slave negative --procs", args: []string{"slave", "--procs", "-1", "--nats", "nats://127.0.0.1:1"}, exit: 2, stderr: []string{"--procs -1: want 1 to 1024"}},
		{name: "slave --slots above the bound", args: []string{"slave", "--slots", "2000", "--nats", "nats://127.0.0.1:1"}, exit: 2, stderr: []string{"--slots 2000: at most 1024"}},
		{name: "submit --detach with --metrics-out", args: []string{"submit", "x.toml", "--detach", "--metrics-out", filepath.Join(dir, "m.jsonl"), "--nats", "nats://127.0.0.1:1"}, exit: 2, stderr: []string{"--metrics-out", "--detach follows none"}},
		{name: "negative --limit is a usage error", args: []string{"status", "--limit", "-1", "--nats", "nats://127.0.0.1:1"}, exit: 2, stderr: []string{"--limit must be >= 0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runIO(tc.args, &stdout, &stderr)
			if code != tc.exit {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.exit, stdout.String(), stderr.String())
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout.String())
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if tc.afterwith != nil {
				tc.afterwith(t)
			}
		})
	}
}

func TestMasterNamesBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	var stderr bytes.Buffer
	code := runIO([]string{"master", "--listen", addr, "--log-level", "error"}, &bytes.Buffer{}, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
	}
	for _, w := range []string{addr, "address already in use", "--listen", "[nats] listen"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
		}
	}
}

func TestDeriveColumns(t *testing.T) {
	cases := []struct {
		name string
		m    map[string]float64
		want string
	}{
		{"lr", map[string]float64{tasks.MetricSamples: 100, tasks.MetricLossSum: 50, tasks.MetricCorrect: 80,
			tasks.MetricTestSamples: 10, tasks.MetricTestLossSum: 6, tasks.MetricTestCorrect: 7},
			"logloss=0.5000 acc=0.8000 test_logloss=0.6000 test_acc=0.7000"},
		{"mf", map[string]float64{tasks.MetricSamples: 4, tasks.MetricSqErrSum: 16, tasks.MetricLossSum: 16,
			tasks.MetricTestSamples: 1, tasks.MetricTestSqErrSum: 9, tasks.MetricTestLossSum: 9},
			"rmse=2.0000 test_rmse=3.0000"},
		{"mf with mae", map[string]float64{tasks.MetricSamples: 4, tasks.MetricSqErrSum: 4, tasks.MetricAbsErrSum: 2},
			"rmse=1.0000 mae=0.5000"},
		{"kmeans", map[string]float64{tasks.MetricObjective: 12.5, tasks.MetricSamples: 100}, "objective=12.5000"},
		{"svrg full", map[string]float64{tasks.MetricObjective: 0.4, tasks.MetricSamples: 10, tasks.MetricLossSum: 3, tasks.MetricCorrect: 9},
			"objective=0.4000 logloss=0.3000 acc=0.9000"},
		{"no samples", map[string]float64{tasks.MetricLossSum: 3}, ""},
		{"plain loss", map[string]float64{tasks.MetricSamples: 2, tasks.MetricLossSum: 3}, "loss=1.5000"},
		{"kge ranking", map[string]float64{tasks.MetricSamples: 10, tasks.MetricLossSum: 5,
			tasks.MetricTestSamples: 4, tasks.MetricTestRRSum: 3, tasks.MetricTestHits10: 2},
			"loss=0.5000 test_mrr=0.7500 test_hits10=0.5000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var parts []string
			for _, c := range deriveColumns(tc.m) {
				parts = append(parts, fmt.Sprintf("%s=%.4f", c.Name, c.Value))
			}
			if got := strings.Join(parts, " "); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// svrgEvents plays a task whose stages alternate between one that reports
// an objective and one that does not, as SVRG's do.
func svrgEvents(p *Printer, stages int) status.Task {
	task := status.Task{ID: "t1", Name: "svrg", State: status.Running, Stages: stages}
	for i := 0; i < stages; i++ {
		task.Stage = i
		m := map[string]float64{tasks.MetricSamples: 100, tasks.MetricLossSum: float64(60 - i), tasks.MetricCorrect: float64(70 + i)}
		task.StageName = fmt.Sprintf("sgd.%d", i/2)
		if i%2 == 0 {
			task.StageName = fmt.Sprintf("full.%d", i/2)
			m[tasks.MetricObjective] = 0.7 - float64(i)/100
		}
		p.Event(status.Event{Kind: status.EventEpoch, Status: task, Epoch: &status.Epoch{Stage: i, Epoch: 1, Workers: 2, Seconds: 0.5, Metrics: m}})
		task.Results = append(task.Results, status.StageResult{Index: i, Name: task.StageName, Func: "svrg", Workers: 2, Seconds: 0.5, Samples: 100,
			Epochs: []status.Epoch{{Stage: i, Epoch: 1, Metrics: m}}, Metrics: m})
	}
	task.State = status.Done
	p.Event(status.Event{Kind: status.EventDone, Status: task})
	p.Summary(task)
	return task
}

func TestEpochTableOnePerTask(t *testing.T) {
	var out, progress bytes.Buffer
	p := newPrinter(&out, &progress, false)
	svrgEvents(p, 6)
	s := out.String()
	if n := strings.Count(s, "samples/s  seconds"); n != 1 {
		t.Fatalf("want one epoch table, got %d headers:\n%s", n, s)
	}
	for _, w := range []string{"objective", "logloss", "acc", "full.2", "sgd.2"} {
		if !strings.Contains(s, w) {
			t.Errorf("table lacks %q:\n%s", w, s)
		}
	}
	for _, bad := range []string{"train_acc", "rmse", "test_"} {
		if strings.Contains(s, bad) {
			t.Errorf("table shows %q, a metric svrg does not report:\n%s", bad, s)
		}
	}
	// The sgd rows have no objective: a dash, not a zero.
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, "sgd.1") && !strings.Contains(line, "svrg") && !strings.Contains(line, " - ") {
			t.Errorf("sgd row without a dash for the objective: %q", line)
		}
	}
}

func TestMetricsOutAndPlot(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.jsonl")
	mw, err := openMetricsOut(path)
	if err != nil {
		t.Fatal(err)
	}
	p := newPrinter(&bytes.Buffer{}, &bytes.Buffer{}, false)
	p.Metrics = mw
	svrgEvents(p, 6)
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := readRecords(f, path)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var epochs, stages int
	for _, r := range recs {
		switch r.Type {
		case "epoch":
			epochs++
			if r.TaskID != "t1" || r.Values["acc"] <= 0 || r.Rate != 200 {
				t.Errorf("epoch record %+v", r)
			}
		case "stage":
			stages++
			if r.State != status.Done {
				t.Errorf("stage record state %q", r.State)
			}
		}
	}
	if epochs != 6 || stages != 6 {
		t.Fatalf("%d epoch and %d stage records, want 6 and 6", epochs, stages)
	}
	curves := collectCurves(recs, nil)
	var names []string
	for _, c := range curves {
		names = append(names, c.Metric)
	}
	if got := strings.Join(names, ","); got != "objective,logloss,acc" {
		t.Fatalf("panels %s", got)
	}
	// svrg's full.N stages form one line of 3 points, at x = 1, 3, 5.
	if s := curves[0].Series; len(s) != 1 || s[0].Name != "full" || len(s[0].XY) != 3 || s[0].XY[2].X != 5 {
		t.Fatalf("objective series %+v", s)
	}

	pngPath, svgPath := filepath.Join(dir, "c.png"), filepath.Join(dir, "c.svg")
	for _, target := range []string{pngPath, svgPath} {
		var stderr bytes.Buffer
		if code := runIO([]string{"plot", path, "-o", target}, &bytes.Buffer{}, &stderr); code != 0 {
			t.Fatalf("plot -o %s: exit %d: %s", target, code, stderr.String())
		}
	}
	f, err = os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("plot wrote no PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
		t.Fatalf("image %v", b)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("logloss")) {
		t.Fatalf("svg: %v\n%.300s", err, svg)
	}

	// Flags the file cannot satisfy are usage errors naming the flag: a
	// NaN or infinite size panicked in the image library, a huge one ran
	// out of memory, a misspelt metric was left out silently (or, alone,
	// "no epoch metrics to plot").
	for _, tc := range []struct {
		name string
		args []string
		exit int
		want string
	}{
		{"NaN width", []string{"--width", "NaN"}, 2, "--width NaN: want centimetres in [0, 100]"},
		{"infinite height", []string{"--height", "Inf"}, 2, "--height +Inf"},
		{"huge width", []string{"--width", "100000"}, 2, "--width 100000"},
		{"negative height", []string{"--height", "-3"}, 2, "--height -3"},
		{"unknown metric", []string{"--metric", "loss"}, 2, "--metric loss: " + path + " has no such metric (it has acc, logloss, objective)"},
		{"one of two metrics unknown", []string{"--metric", "logloss,accuracy"}, 2, "--metric accuracy"},
		{"known metric, sized", []string{"--metric", "logloss", "--width", "20", "--height", "10"}, 0, "(1 panels)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"plot", path, "-o", filepath.Join(dir, "f.png")}, tc.args...)
			if code := runIO(args, &bytes.Buffer{}, &stderr); code != tc.exit || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, want %d; stderr (want %q):\n%s", code, tc.exit, tc.want, stderr.String())
			}
		})
	}
}

func TestPlotRejectsBadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.jsonl")
	os.WriteFile(path, []byte(`{"type":"epoch","values":{"acc":0.5}}`+"\nnot json\n"), 0o644)
	var stderr bytes.Buffer
	if code := runIO([]string{"plot", path, "-o", path + ".png"}, &bytes.Buffer{}, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "m.jsonl line 2") {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	empty := filepath.Join(t.TempDir(), "e.jsonl")
	os.WriteFile(empty, nil, 0o644)
	stderr.Reset()
	if code := runIO([]string{"plot", empty, "-o", empty + ".png"}, &bytes.Buffer{}, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "no epoch metrics") {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
}

func FuzzReadRecords(f *testing.F) {
	f.Add([]byte(`{"type":"epoch","task_id":"t","stage":1,"epoch":2,"values":{"acc":0.5}}` + "\n"))
	f.Add([]byte("\n\n{}\n"))
	f.Add([]byte(`{"values":{"x":1e400}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := readRecords(bytes.NewReader(b), "fuzz")
		if err != nil {
			return
		}
		collectCurves(recs, nil)
	})
}

// A job file need not set kind; the model it writes records none, and
// eval scored it with nothing ("of kind "", which no evaluator knows",
// whatever the flags). Now --kind names the evaluator for such a model.
func TestEvalModelWithoutKind(t *testing.T) {
	dir := t.TempDir()
	train, test := lrData(t, dir, 500, 50)
	model := filepath.Join(dir, "m.model")
	job := strings.NewReplacer("TRAIN", train, `kind = "lr"`, `output = "`+model+`"`).Replace(goodJob)
	jobPath := filepath.Join(dir, "job.toml")
	if err := os.WriteFile(jobPath, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := runIO([]string{"run", "--log-level", "error", jobPath}, &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr.String())
	}
	for _, tc := range []struct {
		name   string
		args   []string
		exit   int
		stdout string
		stderr string
	}{
		{"no --kind", nil, 1, "", `records no kind (its job file set no "kind"): name one with --kind (known: kge, kmeans, lr, mf)`},
		{"--kind lr", []string{"--kind", "lr"}, 0, "kind=lr records=100", ""},
		{"--kind of no evaluator", []string{"--kind", "xx"}, 2, "", `--kind "xx": want one of kge, kmeans, lr, mf`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runIO(append([]string{"eval", "--model", model, "--data", test}, tc.args...), &stdout, &stderr)
			if code != tc.exit || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
				t.Fatalf("exit %d, want %d; stdout %q (want %q); stderr %q (want %q)", code, tc.exit, stdout.String(), tc.stdout, stderr.String(), tc.stderr)
			}
		})
	}
}

// flexps run takes its slots per slave from the job's [local], else from
// the --config file's [slave] slots (which it ignored: 2), else 2. Here a
// 3-worker local stage on one slave fits only with the config's 3 slots.
func TestRunTakesTheConfigsSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 300, 50)
	job := lrJob(t, dir, "slots", train, test, "", 50, 3, 1, "ssp")
	src, err := os.ReadFile(job)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(strings.Replace(string(src), "[local]\nslaves = 2\nslots = 2\n", "[local]\nslaves = 1\n", 1), "workers = 3\n", "workers = 3\nworker_kind = \"local\"\n", 1)
	if err := os.WriteFile(job, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		config string
		exit   int
		want   string
	}{
		{"", 1, "worker slots"},
		{"[slave]\nslots = 3\n", 0, ""},
	} {
		args := []string{"run", job}
		if tc.config != "" {
			c := filepath.Join(dir, "c.toml")
			if err := os.WriteFile(c, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			args = []string{"run", "--config", c, job}
		}
		_, stderr, code := runFlexps(t, args...)
		if code != tc.exit || !strings.Contains(stderr, tc.want) {
			t.Fatalf("config %q: exit %d, want %d with %q:\n%s", tc.config, code, tc.exit, tc.want, stderr)
		}
	}
}

// A busy status page or metrics port is named by what set it: the flag
// when a flag did (until now always by the TOML key, "[http] listen",
// which a user who typed --http never wrote), else the TOML key.
func TestBusyMonitorPortNamesItsSetting(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	config := func(section string) string {
		p := filepath.Join(t.TempDir(), "cluster.toml")
		if err := os.WriteFile(p, []byte(fmt.Sprintf("[%s]\nlisten = %q\n", section, addr)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name          string
		args          []string
		want, notWant string
	}{
		{"--http", []string{"--http", addr}, "--http " + addr, "[http] listen"},
		{"[http] listen", []string{"--config", config("http")}, "[http] listen " + addr, "--http"},
		{"--metrics-listen", []string{"--metrics-listen", addr}, "--metrics-listen " + addr, "[metrics] listen"},
		{"[metrics] listen", []string{"--config", config("metrics")}, "[metrics] listen " + addr, "--metrics-listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"master", "--listen", "127.0.0.1:0", "--log-level", "error"}, tc.args...)
			code := runIO(args, &bytes.Buffer{}, &stderr)
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), "address already in use") || strings.Contains(stderr.String(), tc.notWant) {
				t.Fatalf("stderr names the setting wrong: want %q, not %q:\n%s", tc.want, tc.notWant, stderr.String())
			}
		})
	}
}

// With several tasks followed (flexps submit of several job files) their
// interleaved epochs share one table whose first column is the task's id:
// a table per task printed its header again at every switch (122 headers
// for 3 tasks). A metric first seen, or a task's summary between the
// rows, prints the header again.
func TestSeveralTasksShareOneTable(t *testing.T) {
	var out, progress bytes.Buffer
	p := newPrinter(&out, &progress, false)
	p.SharedTable = true
	lr := status.Task{ID: "tLR", Name: "lr", State: status.Running, Stages: 1, StageName: "sgd"}
	km := status.Task{ID: "tKM", Name: "kmeans", State: status.Running, Stages: 1, StageName: "lloyd"}
	for e := 1; e <= 4; e++ {
		for _, s := range []status.Task{lr, km} {
			m := map[string]float64{tasks.MetricSamples: 100, tasks.MetricLossSum: 50}
			if s.ID == "tKM" {
				m = map[string]float64{tasks.MetricSamples: 100, tasks.MetricObjective: 3}
			}
			p.Event(status.Event{Kind: status.EventEpoch, Status: s, Epoch: &status.Epoch{Epoch: e, Seconds: 0.5, Metrics: m}})
		}
	}
	s := out.String()
	// The header of the first row, and again when kmeans' objective is
	// first seen; never at a switch of task.
	if n := strings.Count(s, "samples/s  seconds"); n != 2 {
		t.Fatalf("want 2 headers (the first row, a new metric), got %d:\n%s", n, s)
	}
	rows := 0
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "tLR ") || strings.HasPrefix(line, "tKM ") {
			rows++
		}
	}
	if rows != 10 {
		t.Fatalf("want 8 epoch rows each starting with its task's id, and a line naming each task, got %d:\n%s", rows, s)
	}
	for _, w := range []string{"tLR           (task \"lr\")\n", "tKM           (task \"kmeans\")\n"} {
		if strings.Count(s, w) != 1 {
			t.Errorf("want %q once:\n%s", w, s)
		}
	}
}
