package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const lapseLog = `mf. server: 2 epochs on /d/
(Ep.0) Train loss: 2.64861
(Ep.0) Test loss:  2.61165
(Ep.1) Worker 1 finished epoch 1 (0.312s: 0.000s comm, 0.217s comp, 0.092s barrier, updates: 125534)
All workers finished epoch 1 (epoch: 0.310s, total: 0.310s).
(Ep.1) Test loss:  0.985252
All workers finished epoch 2 (epoch: 0.413s, total: 0.723s).
(Ep.2) Train loss: 0.873075
(Ep.2) Test loss:  0.962724
`

func TestParseLapseLog(t *testing.T) {
	tests := []struct {
		name    string
		logs    []string
		epochs  []float64
		rmse    float64
		wantErr string
	}{
		{name: "one process", logs: []string{lapseLog}, epochs: []float64{0.310, 0.413}, rmse: math.Sqrt(0.962724)},
		{name: "slowest process per epoch", logs: []string{lapseLog, "All workers finished epoch 1 (epoch: 0.5s, total: 0.5s).\n"},
			epochs: []float64{0.5, 0.413}, rmse: math.Sqrt(0.962724)},
		{name: "no epochs", logs: []string{"nothing here\n"}, rmse: math.NaN()},
		{name: "epoch 0", logs: []string{"All workers finished epoch 0 (epoch: 1s"}, wantErr: "bad epoch number"},
		{name: "bad time", logs: []string{"All workers finished epoch 1 (epoch: 1e+s"}, wantErr: "bad epoch time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := lapseResult{testRMSE: math.NaN()}
			var err error
			for _, l := range tt.logs {
				if err = res.parseLog([]byte(l)); err != nil {
					break
				}
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.epochSecs, tt.epochs) {
				t.Errorf("epochs %v, want %v", res.epochSecs, tt.epochs)
			}
			if !(math.IsNaN(tt.rmse) && math.IsNaN(res.testRMSE)) && math.Abs(res.testRMSE-tt.rmse) > 1e-12 {
				t.Errorf("rmse %v, want %v", res.testRMSE, tt.rmse)
			}
		})
	}
}

func FuzzParseLapseLog(f *testing.F) {
	f.Add([]byte(lapseLog))
	f.Add([]byte("All workers finished epoch 999999 (epoch: 1s"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var res lapseResult
		if err := res.parseLog(b); err != nil {
			return
		}
		if len(res.epochSecs) > 1_000_000 {
			t.Fatalf("%d epochs from %d bytes", len(res.epochSecs), len(b))
		}
	})
}

func TestToMMC(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "r.tsv"), filepath.Join(dir, "r.mmc")
	if err := os.WriteFile(in, []byte("0\t3\t4.5\n2\t0\t1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := toMMC(in, out, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "%%MatrixMarket matrix coordinate real general\n% flexps bench/lapse, from r.tsv\n3 4 2\n1 4 4.5\n3 1 1\n"
	if n != 2 || string(b) != want {
		t.Fatalf("toMMC = %d,\n%s\nwant 2,\n%s", n, b, want)
	}
	// An existing conversion is reused; its count comes from its header.
	if n, err := toMMC(in, out, 3, 4); err != nil || n != 2 {
		t.Fatalf("second toMMC = %d, %v", n, err)
	}

	bad := filepath.Join(dir, "bad.tsv")
	if err := os.WriteFile(bad, []byte("0\t1\t2\n7 8 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := toMMC(bad, filepath.Join(dir, "bad.mmc"), 9, 9); err == nil || !strings.Contains(err.Error(), "bad.tsv:2") {
		t.Fatalf("error %v, want one naming bad.tsv:2", err)
	}
}

func TestReadLatencies(t *testing.T) {
	dir := t.TempDir()
	var w0, w1 strings.Builder
	for i := 1; i <= 100; i++ { // single: 1..200 µs over the two workers
		w0.WriteString("single 1 " + itoa(int64(i)*1000) + "\n")
		w1.WriteString("single 1 " + itoa(int64(100+i)*1000) + "\n")
	}
	w0.WriteString("block 500 2000000\n")
	w1.WriteString("block 300 4000000\n")
	for r, s := range []string{w0.String(), w1.String()} {
		if err := os.WriteFile(filepath.Join(dir, "lat-"+itoa(int64(r))+".txt"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lat, err := readLatencies(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []latency{
		{kind: "block", keys: 400, calls: 2, p50: 4 * time.Millisecond, p99: 4 * time.Millisecond, avg: 3 * time.Millisecond},
		{kind: "single", keys: 1, calls: 200, p50: 101 * time.Microsecond, p99: 199 * time.Microsecond, avg: 100500 * time.Nanosecond},
	}
	if !slices.Equal(lat, want) {
		t.Fatalf("latencies\n%+v\nwant\n%+v", lat, want)
	}
	if _, err := readLatencies(dir, 3); err == nil {
		t.Fatal("a missing worker file gave no error")
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestSteadyEpoch(t *testing.T) {
	for _, tt := range []struct {
		epochs []float64
		want   float64
	}{{[]float64{9, 2, 4}, 3}, {[]float64{5}, 5}} {
		if got := (row{epochSecs: tt.epochs}).steady(); got != tt.want {
			t.Errorf("steady(%v) = %v, want %v", tt.epochs, got, tt.want)
		}
	}
}
