package proto

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// sameFloat is equality that holds for NaN.
func sameFloat(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

func sameEvent(a, b WorkerEvent) bool {
	if !sameFloat(a.LossSum, b.LossSum) || !sameFloat(a.Seconds, b.Seconds) || len(a.Metrics) != len(b.Metrics) {
		return false
	}
	for k, v := range a.Metrics {
		if w, ok := b.Metrics[k]; !ok || !sameFloat(v, w) {
			return false
		}
	}
	a.LossSum, a.Seconds, a.Metrics, b.LossSum, b.Seconds, b.Metrics = 0, 0, nil, 0, 0, nil
	return reflect.DeepEqual(a, b)
}

func TestWorkerEventNonFiniteRoundTrip(t *testing.T) {
	cases := []WorkerEvent{
		{Task: "t", Kind: WorkerProgress, Samples: 3, LossSum: 1.5},
		{Task: "t", Kind: WorkerProgress, Samples: 3, LossSum: math.NaN()},
		{Task: "t", Kind: WorkerEpoch, Seconds: math.Inf(1), Metrics: map[string]float64{"loss": math.Inf(-1), "auc": 0.5}},
		{Task: "t", Kind: WorkerDone, Metrics: map[string]float64{"loss": math.NaN()}, BadLines: []string{"x"}},
	}
	for _, ev := range cases {
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("%+v: %v", ev, err)
		}
		var got WorkerEvent
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if !sameEvent(ev, got) {
			t.Fatalf("round trip of %+v gave %+v (wire %s)", ev, got, data)
		}
	}
	// The caller's metrics are not touched by encoding.
	m := map[string]float64{"loss": math.NaN()}
	if _, err := json.Marshal(WorkerEvent{Metrics: m}); err != nil || !math.IsNaN(m["loss"]) {
		t.Fatalf("encoding changed the caller's map: %v %v", m, err)
	}
}

func TestWorkerEventBadNonFinite(t *testing.T) {
	var ev WorkerEvent
	if err := json.Unmarshal([]byte(`{"task":"t","non_finite":{"loss_sum":"lots"}}`), &ev); err == nil {
		t.Fatalf("accepted a non-number: %+v", ev)
	}
}

func FuzzWorkerEventDecode(f *testing.F) {
	f.Add([]byte(`{"task":"t","kind":"progress","loss_sum":0,"non_finite":{"loss_sum":"NaN"}}`))
	f.Add([]byte(`{"task":"t","metrics":{"a":1},"non_finite":{"metric:b":"+Inf","seconds":"-Inf"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev WorkerEvent
		if json.Unmarshal(data, &ev) != nil {
			return
		}
		// Whatever decodes encodes again, and decodes to the same event.
		again, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", ev, err)
		}
		var back WorkerEvent
		if err := json.Unmarshal(again, &back); err != nil {
			t.Fatalf("decoding %s: %v", again, err)
		}
		if !sameEvent(ev, back) {
			t.Fatalf("%+v became %+v", ev, back)
		}
	})
}
