package tasks

import "testing"

func TestLatencyQuantile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       map[string]float64
		q, want float64
	}{
		{"empty", map[string]float64{"samples": 3}, 0.5, 0},
		{"one bucket", map[string]float64{MetricKVLocalizeLatency + "07": 10}, 0.99, 256},
		{"median low, tail high", map[string]float64{MetricKVLocalizeLatency + "03": 98, MetricKVLocalizeLatency + "12": 2}, 0.5, 16},
		{"p99 in the tail", map[string]float64{MetricKVLocalizeLatency + "03": 98, MetricKVLocalizeLatency + "12": 2}, 0.99, 8192},
		{"foreign keys ignored", map[string]float64{MetricKVLocalizeLatency + "x1": 5, MetricKVLocalizeLatency + "01": 1}, 1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LatencyQuantile(tc.m, tc.q); got != tc.want {
				t.Fatalf("LatencyQuantile(%v, %v) = %v, want %v", tc.m, tc.q, got, tc.want)
			}
		})
	}
}
