package monitor_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/monitor"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// epochs is a stage function: params.epochs epochs of params.ms
// milliseconds each, reporting a loss that halves every epoch.
func epochs(info *tasks.Info) error {
	t, err := info.Table("w")
	if err != nil {
		return err
	}
	loss := 8.0
	for e := 1; e <= info.Params.Int("epochs", 3); e++ {
		select {
		case <-time.After(time.Duration(info.Params.Int("ms", 10)) * time.Millisecond):
		case <-info.Ctx.Done():
			return info.Ctx.Err()
		}
		if err := t.Add([]uint64{0}, []float64{1}); err != nil {
			return err
		}
		info.Report(100, 100*loss)
		info.ReportEpoch(e, map[string]float64{tasks.MetricSamples: 100, tasks.MetricLossSum: 100 * loss})
		loss /= 2
	}
	return nil
}

func init() { tasks.Register("monitor.epochs", epochs) }

func startCluster(t *testing.T) *engine.Local {
	t.Helper()
	l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop(),
		Config: engine.ClusterConfig{HTTP: engine.ListenSect{Listen: "127.0.0.1:0"}, Metrics: engine.ListenSect{Listen: "127.0.0.1:0"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

func task(name string, epochs, ms int) *tasks.MultiStageTask {
	return tasks.NewTask(name).AddTable(kvstore.TableSpec{Name: "w", Size: 4}).
		SetStages(tasks.Stage{Name: "train", Func: "monitor.epochs", Workers: 2, Params: tasks.Params{"epochs": epochs, "ms": ms}})
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, b)
	}
	return string(b)
}

// scrape parses /metrics with Prometheus's own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(get(t, url)))
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

func gauge(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	return value(fams, name, labels, func(m *dto.Metric) float64 { return m.GetGauge().GetValue() })
}

func counter(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	return value(fams, name, labels, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
}

// value is the first series of name whose labels include labels.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string, get func(*dto.Metric) float64) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range labels {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return get(m), true
	}
	return 0, false
}

func TestMetricsOfARunningAndAFinishedTask(t *testing.T) {
	l := startCluster(t)
	if _, err := l.SubmitAndWait(context.Background(), task("quick", 3, 5), nil); err != nil {
		t.Fatal(err)
	}
	id, err := l.Submit(context.Background(), task("slow", 1000, 20))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Cancel(context.Background(), id)
	url := l.Monitors.Metrics.URL() + "/metrics"
	deadline := time.Now().Add(30 * time.Second)
	for {
		fams := scrape(t, url)
		done, _ := gauge(fams, "flexps_tasks", map[string]string{"state": status.Done})
		running, _ := gauge(fams, "flexps_tasks", map[string]string{"state": status.Running})
		rate, hasRate := gauge(fams, "flexps_task_samples_per_second", map[string]string{"task": id, "name": "slow"})
		alive, _ := gauge(fams, "flexps_slaves", map[string]string{"state": "alive"})
		if done == 1 && running == 1 && hasRate && rate > 0 && alive == 2 {
			if e, ok := gauge(fams, "flexps_membership_epoch", nil); !ok || e != 2 {
				t.Fatalf("flexps_membership_epoch %v (present %v), want 2 after two joins", e, ok)
			}
			if _, ok := fams["go_goroutines"]; !ok {
				t.Fatal("no Go runtime metrics")
			}
			if _, ok := gauge(fams, "flexps_task_loss", map[string]string{"name": "quick"}); ok {
				t.Fatal("an ended task still has per-task series")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never showed one done and one running task: done=%v running=%v rate=%v alive=%v", done, running, rate, alive)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The slaves' counters: heartbeats, and what the finished task's
	// workers processed.
	fams := scrape(t, url)
	var samples, beats float64
	for _, sl := range []string{"slave-0", "slave-1"} {
		v, _ := counter(fams, "flexps_slave_samples_total", map[string]string{"slave": sl})
		samples += v
		b, _ := counter(fams, "flexps_slave_heartbeats_total", map[string]string{"slave": sl})
		beats += b
	}
	if samples < 2*3*100 || beats == 0 {
		t.Fatalf("slave counters: samples %v (want >= 600: 2 workers x 3 epochs x 100), heartbeats %v", samples, beats)
	}
	if done, _ := counter(fams, "flexps_slave_workers_ended_total", map[string]string{"outcome": "done", "slave": "slave-0"}); done == 0 {
		if done1, _ := counter(fams, "flexps_slave_workers_ended_total", map[string]string{"outcome": "done", "slave": "slave-1"}); done1 == 0 {
			t.Fatal("no ended worker counted")
		}
	}
	// The status page serves the same metrics, and JSON.
	if _, ok := scrape(t, l.Monitors.Page.URL()+"/metrics")["flexps_tasks"]; !ok {
		t.Fatal("no flexps_tasks on the status page's /metrics")
	}
	if js := get(t, l.Monitors.Page.URL()+"/api/status?task="+id); !strings.Contains(js, `"name":"slow"`) {
		t.Fatalf("api/status: %s", js)
	}
}

func TestStatusPageShowsTasksAndCurves(t *testing.T) {
	l := startCluster(t)
	if _, err := l.SubmitAndWait(context.Background(), task("finished-task", 4, 5), nil); err != nil {
		t.Fatal(err)
	}
	id, err := l.Submit(context.Background(), task("running-task", 1000, 20))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Cancel(context.Background(), id)
	deadline := time.Now().Add(30 * time.Second)
	var html string
	for {
		html = get(t, l.Monitors.Page.URL()+"/")
		if strings.Contains(html, `data-task="`+id+`"`) && strings.Contains(html, "samples/s") && !strings.Contains(html, "0 samples/s") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed the running task with progress:\n%s", html)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{"running-task", "finished-task", `<polyline points="`, "loss over 4 epochs, last 1 (min 1, max 8)", "slave-0", "slave-1", `http-equiv="refresh"`} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if css := get(t, l.Monitors.Page.URL()+"/static/style.css"); !strings.Contains(css, "polyline") {
		t.Error("stylesheet not served")
	}
	if strings.Contains(html, "http://") || strings.Contains(html, "https://") {
		t.Error("the page refers to an external resource")
	}
}

func TestListenAddressInUse(t *testing.T) {
	s, err := monitor.Listen("127.0.0.1:0", "[http] listen", http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = monitor.Listen(s.Addr(), "[http] listen", http.NotFoundHandler())
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), s.Addr()) || !strings.Contains(err.Error(), "[http] listen") {
		t.Fatalf("err = %v", err)
	}
}

// A slave started on its own (as `flexps slave` does) serves its counters
// on its own /metrics.
func TestSlaveProcessMetrics(t *testing.T) {
	cfg := engine.ClusterConfig{Cluster: "slavemetrics", NATS: engine.NATSConfig{Listen: "127.0.0.1:-1", Auth: "none"}}
	m, err := engine.StartMaster(context.Background(), cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg.NATS.URL = m.URL
	cfg.Metrics.Listen = "127.0.0.1:0"
	s, err := engine.StartSlave(context.Background(), cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := engine.Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.SubmitAndWait(context.Background(), task("one", 2, 1), nil); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, s.Monitors.Metrics.URL()+"/metrics")
	id := s.Slave.ID()
	for _, tc := range []struct {
		name string
		min  float64
	}{
		{"flexps_slave_samples_total", 2 * 2 * 100},
		{"flexps_slave_kv_local_keys_total", 2 * 2}, // one slave: every key is local
	} {
		if v, ok := counter(fams, tc.name, map[string]string{"slave": id}); !ok || v < tc.min {
			t.Errorf("%s{slave=%q} = %v (present %v), want >= %v", tc.name, id, v, ok, tc.min)
		}
	}
	h, ok := fams["flexps_slave_kv_call_seconds"]
	if !ok || len(h.GetMetric()) == 0 || h.GetMetric()[0].GetHistogram().GetSampleCount() == 0 {
		t.Errorf("no KV call latency histogram on the slave: %v", h)
	} else {
		for _, m := range h.GetMetric() {
			t.Logf("kv calls %v: %d", m.GetLabel(), m.GetHistogram().GetSampleCount())
		}
	}
	if v, _ := counter(fams, "flexps_slave_workers_ended_total", map[string]string{"slave": id, "outcome": "done"}); v != 2 {
		t.Errorf("workers ended done = %v, want 2", v)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics on the slave")
	}
}
