package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
)

// column is one derived metric of an epoch, named after what the algorithm
// measures: a classifier reports logloss and acc, a regression rmse and
// mae, an algorithm with a global objective (k-means, SVRG) objective.
type column struct {
	Name  string
	Value float64
}

// deriveColumns turns an epoch's summed worker counters into the metrics
// that algorithm reports, in a fixed order; counters it did not report
// give no column, so k-means shows no accuracy and MF no log-loss.
func deriveColumns(m map[string]float64) []column {
	var cols []column
	ratio := func(name, num, den string) {
		v, ok := m[num]
		if d := m[den]; ok && d > 0 {
			cols = append(cols, column{name, v / d})
		}
	}
	root := func(name, num, den string) {
		v, ok := m[num]
		if d := m[den]; ok && d > 0 {
			cols = append(cols, column{name, math.Sqrt(v / d)})
		}
	}
	if v, ok := m[tasks.MetricObjective]; ok {
		cols = append(cols, column{"objective", v})
	}
	_, regression := m[tasks.MetricSqErrSum]
	_, testRegression := m[tasks.MetricTestSqErrSum]
	_, classifier := m[tasks.MetricCorrect]
	_, testClassifier := m[tasks.MetricTestCorrect]
	switch {
	case regression:
		// MF's loss_sum is its squared error: rmse says the same, better.
		root("rmse", tasks.MetricSqErrSum, tasks.MetricSamples)
		ratio("mae", tasks.MetricAbsErrSum, tasks.MetricSamples)
	case classifier:
		ratio("logloss", tasks.MetricLossSum, tasks.MetricSamples)
		ratio("acc", tasks.MetricCorrect, tasks.MetricSamples)
	default:
		ratio("loss", tasks.MetricLossSum, tasks.MetricSamples)
	}
	if _, ranking := m[tasks.MetricTestRRSum]; ranking {
		ratio("test_mrr", tasks.MetricTestRRSum, tasks.MetricTestSamples)
		ratio("test_hits10", tasks.MetricTestHits10, tasks.MetricTestSamples)
		return cols
	}
	switch {
	case testRegression:
		root("test_rmse", tasks.MetricTestSqErrSum, tasks.MetricTestSamples)
		ratio("test_mae", tasks.MetricTestAbsErrSum, tasks.MetricTestSamples)
	case testClassifier:
		ratio("test_logloss", tasks.MetricTestLossSum, tasks.MetricTestSamples)
		ratio("test_acc", tasks.MetricTestCorrect, tasks.MetricTestSamples)
	default:
		ratio("test_loss", tasks.MetricTestLossSum, tasks.MetricTestSamples)
	}
	return cols
}

// Record is one line of a --metrics-out file: an epoch of a stage
// (Type "epoch") or a finished stage's summary (Type "stage").
type Record struct {
	Type      string             `json:"type"`
	Time      time.Time          `json:"time"`
	TaskID    string             `json:"task_id"`
	Task      string             `json:"task"`
	Stage     int                `json:"stage"`
	StageName string             `json:"stage_name,omitempty"`
	Epoch     int                `json:"epoch,omitempty"`
	Workers   int                `json:"workers,omitempty"`
	Seconds   float64            `json:"seconds"`
	Samples   float64            `json:"samples"`
	Rate      float64            `json:"samples_per_sec,omitempty"`
	Values    map[string]float64 `json:"values,omitempty"`  // derived columns: logloss, acc, rmse, objective ...
	Metrics   map[string]float64 `json:"metrics,omitempty"` // the raw summed counters
	State     string             `json:"state,omitempty"`   // stage records: the task's final state
}

// metricsWriter appends Records to a JSON-lines file. A nil writer
// discards, so callers need not check whether --metrics-out was given.
type metricsWriter struct {
	mu   sync.Mutex
	path string
	f    *os.File
	w    *bufio.Writer
	err  error // first write error, reported by Close
}

func openMetricsOut(path string) (*metricsWriter, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--metrics-out: %w", err)
	}
	return &metricsWriter{path: path, f: f, w: bufio.NewWriter(f)}, nil
}

func (mw *metricsWriter) write(r Record) {
	if mw == nil {
		return
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.err != nil {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		mw.err = fmt.Errorf("--metrics-out %s: encode %s record: %w", mw.path, r.Type, err)
		return
	}
	b = append(b, '\n')
	if _, err := mw.w.Write(b); err != nil {
		mw.err = fmt.Errorf("--metrics-out %s: %w", mw.path, err)
		return
	}
	// Flush per record: a follower (tail -f, a plot during training)
	// sees complete lines while the task runs.
	if err := mw.w.Flush(); err != nil {
		mw.err = fmt.Errorf("--metrics-out %s: %w", mw.path, err)
	}
}

func (mw *metricsWriter) epoch(s status.Task, e status.Epoch) {
	if mw == nil {
		return
	}
	vals := map[string]float64{}
	for _, c := range deriveColumns(e.Metrics) {
		vals[c.Name] = c.Value
	}
	r := Record{Type: "epoch", Time: time.Now().UTC(), TaskID: s.ID, Task: s.Name, Stage: e.Stage, StageName: s.StageName,
		Epoch: e.Epoch, Workers: e.Workers, Seconds: e.Seconds, Samples: e.Metrics[tasks.MetricSamples], Values: vals, Metrics: e.Metrics}
	if e.Seconds > 0 {
		r.Rate = r.Samples / e.Seconds
	}
	mw.write(r)
}

func (mw *metricsWriter) stages(s status.Task) {
	if mw == nil {
		return
	}
	for _, res := range s.Results {
		r := Record{Type: "stage", Time: time.Now().UTC(), TaskID: s.ID, Task: s.Name, Stage: res.Index, StageName: res.Name,
			Workers: res.Workers, Seconds: res.Seconds, Samples: float64(res.Samples), Metrics: res.Metrics, State: s.State}
		if res.Seconds > 0 {
			r.Rate = r.Samples / res.Seconds
		}
		if n := len(res.Epochs); n > 0 {
			r.Values = map[string]float64{}
			for _, c := range deriveColumns(res.Epochs[n-1].Metrics) {
				r.Values[c.Name] = c.Value
			}
		}
		mw.write(r)
	}
}

// Close flushes and closes the file and reports the first write error.
func (mw *metricsWriter) Close() error {
	if mw == nil {
		return nil
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	err := mw.err
	if ferr := mw.w.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("--metrics-out %s: %w", mw.path, ferr)
	}
	if cerr := mw.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("--metrics-out %s: %w", mw.path, cerr)
	}
	return err
}
