package proto

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// JSON has no NaN or infinity, and encoding/json refuses them: a worker
// whose model diverged would fail to encode its event, and the master would
// never hear of it (a lost WorkerDone stalls the stage for good). So a
// WorkerEvent carries its non-finite numbers beside the finite ones, as
// strings in "non_finite" (keys "loss_sum", "seconds" and "metric:<name>"),
// with 0 in their place; decoding puts them back, and the master fails the
// stage by name.

const metricKey = "metric:"

type plainWorkerEvent WorkerEvent

type wireWorkerEvent struct {
	plainWorkerEvent
	NonFinite map[string]string `json:"non_finite,omitempty"`
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func allFinite(m map[string]float64) bool {
	for _, v := range m {
		if !finite(v) {
			return false
		}
	}
	return true
}

// MarshalJSON encodes ev, its non-finite numbers as strings.
func (ev WorkerEvent) MarshalJSON() ([]byte, error) {
	w := wireWorkerEvent{plainWorkerEvent: plainWorkerEvent(ev)}
	put := func(key string, v float64) float64 {
		if finite(v) {
			return v
		}
		if w.NonFinite == nil {
			w.NonFinite = map[string]string{}
		}
		w.NonFinite[key] = strconv.FormatFloat(v, 'g', -1, 64)
		return 0
	}
	w.LossSum = put("loss_sum", w.LossSum)
	w.Seconds = put("seconds", w.Seconds)
	if !allFinite(ev.Metrics) {
		// A copy: the caller's map stays as it was.
		w.Metrics = make(map[string]float64, len(ev.Metrics))
		for k, v := range ev.Metrics {
			w.Metrics[k] = put(metricKey+k, v)
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes an event MarshalJSON encoded, non-finite numbers
// restored; a "non_finite" entry that is no number is an error.
func (ev *WorkerEvent) UnmarshalJSON(data []byte) error {
	var w wireWorkerEvent
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	for key, s := range w.NonFinite {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("worker event: non_finite %q: %q is not a number", key, s)
		}
		switch {
		case key == "loss_sum":
			w.LossSum = v
		case key == "seconds":
			w.Seconds = v
		case strings.HasPrefix(key, metricKey):
			if w.Metrics == nil {
				w.Metrics = map[string]float64{}
			}
			w.Metrics[strings.TrimPrefix(key, metricKey)] = v
		}
	}
	*ev = WorkerEvent(w.plainWorkerEvent)
	return nil
}
