package slave

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/flexps/flexps/tasks"
	"github.com/prometheus/client_golang/prometheus"
)

// counted are the worker metrics a slave sums over every worker that ended
// on it and exports to Prometheus as counters (name: flexps_slave_<metric>_total).
var counted = map[string]string{
	tasks.MetricReadBytes:        "Input bytes read.",
	tasks.MetricReadLocalBytes:   "Input bytes read from a replica on the slave's host.",
	tasks.MetricReadWaitSeconds:  "Seconds workers waited for parsed input.",
	tasks.MetricReadRecords:      "Input records parsed.",
	tasks.MetricReadBlocks:       "Input blocks read.",
	tasks.MetricReadCachedBlocks: "Input blocks replayed from the parsed-data cache.",
	tasks.MetricBadLines:         "Malformed input lines skipped.",
	tasks.MetricConsistencyReads: "Reads the consistency gates checked.",
	tasks.MetricConsistencyWaits: "Reads that waited for slower workers.",
	tasks.MetricBlockedSeconds:   "Seconds reads waited for slower workers.",
	tasks.MetricCacheHits:        "Process cache hits.",
	tasks.MetricCacheMisses:      "Process cache misses.",
	tasks.MetricCacheEvictions:   "Process cache evictions.",
	tasks.MetricCacheStale:       "Process cache entries too stale for the consistency bound.",
	tasks.MetricCacheBypassed:    "Reads sent past the process cache because it measured slower than the table.",
	tasks.MetricCacheRefreshed:   "Cached keys a read fetched ahead beside its own (a cached working set kept fresh).",
	tasks.MetricKVLocalKeys:      "Keys read or written in this slave's memory.",
	tasks.MetricKVRemoteKeys:     "Keys read or written on other slaves.",
	tasks.MetricKVRequests:       "KV data-plane messages sent.",
	tasks.MetricKVBytesSent:      "KV data-plane bytes sent by workers.",
	tasks.MetricKVLocalized:      "Keys workers asked to move to this slave (Localize).",
	tasks.MetricKVRelocated:      "Keys that moved to this slave.",
}

// metrics is a slave's Prometheus collector. Worker counters are added when
// a worker ends (done or failed); heartbeats and tasks are live.
type metrics struct {
	mu     sync.Mutex
	totals map[string]float64
	ended  map[string]float64 // workers by outcome

	heartbeats atomic.Int64
	samples    atomic.Int64 // reported by workers as they go
	tasks      func() int
	dataplane  func() (transport.TCPStats, bool) // the direct data plane's counters, when there is one

	kv *prometheus.HistogramVec // Get/Add call latency by table, op, local/remote

	descs   map[string]*prometheus.Desc
	workers *prometheus.Desc
	beats   *prometheus.Desc
	running *prometheus.Desc
	done    *prometheus.Desc
	dpSends *prometheus.Desc
	dpDials *prometheus.Desc
	dpConns *prometheus.Desc
	dpRefus *prometheus.Desc
}

func newMetrics(slave string, tasksNow func() int) *metrics {
	labels := prometheus.Labels{"slave": slave}
	m := &metrics{totals: map[string]float64{}, ended: map[string]float64{}, tasks: tasksNow, descs: map[string]*prometheus.Desc{},
		workers: prometheus.NewDesc("flexps_slave_workers_ended_total", "Workers that ended on this slave, by outcome.", []string{"outcome"}, labels),
		beats:   prometheus.NewDesc("flexps_slave_heartbeats_total", "Heartbeats sent to the master.", nil, labels),
		running: prometheus.NewDesc("flexps_slave_tasks", "Tasks this slave holds (workers, shards or both).", nil, labels),
		done:    prometheus.NewDesc("flexps_slave_samples_total", "Training records processed by this slave's workers (as they report progress).", nil, labels),
		dpSends: prometheus.NewDesc("flexps_slave_kv_sends_total", "KV requests sent, by path: direct (TCP data plane to another slave), bus (NATS) or self (to this slave's own shards, in memory).", []string{"path"}, labels),
		dpDials: prometheus.NewDesc("flexps_slave_kv_dials_total", "Direct data-plane connections this slave opened.", nil, labels),
		dpConns: prometheus.NewDesc("flexps_slave_kv_connections", "Direct data-plane connections open, both directions.", nil, labels),
		dpRefus: prometheus.NewDesc("flexps_slave_kv_refused_total", "Incoming data-plane connections closed before or during the handshake (strangers, wrong keys, handshakes evicted by newer ones).", nil, labels),
	}
	for name, help := range counted {
		m.descs[name] = prometheus.NewDesc("flexps_slave_"+name+"_total", help, nil, labels)
	}
	m.kv = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flexps_slave_kv_call_seconds",
		Help:        "Duration of workers' Get and Add calls by table, op and where the keys were (local: all in this slave's memory).",
		ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)}, []string{"table", "op", "where"})
	return m
}

// ObserveKV implements kvstore.Observer.
func (m *metrics) ObserveKV(table string, op kvstore.Op, remote bool, d time.Duration) {
	where := "local"
	if remote {
		where = "remote"
	}
	m.kv.WithLabelValues(table, op.String(), where).Observe(d.Seconds())
}

// workerEnded adds a worker's final counters.
func (m *metrics) workerEnded(metrics map[string]float64, outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, v := range metrics {
		if _, ok := counted[name]; ok {
			m.totals[name] += v
		}
	}
	m.ended[outcome]++
}

// How a worker ended, the outcome label of flexps_slave_workers_ended_total:
// its stage function returned nil, returned an error of its own, or was
// stopped from outside (an auto trial's end, a cancel, another worker's
// failure), which is no failure of the worker's.
const (
	outcomeDone    = "done"
	outcomeFailed  = "failed"
	outcomeStopped = "stopped"
)

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
	ch <- m.workers
	ch <- m.beats
	ch <- m.running
	ch <- m.done
	m.kv.Describe(ch)
	ch <- m.dpSends
	ch <- m.dpDials
	ch <- m.dpConns
	ch <- m.dpRefus
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	names := make([]string, 0, len(m.descs))
	for name := range m.descs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ch <- prometheus.MustNewConstMetric(m.descs[name], prometheus.CounterValue, m.totals[name])
	}
	for _, outcome := range []string{outcomeDone, outcomeFailed, outcomeStopped} {
		ch <- prometheus.MustNewConstMetric(m.workers, prometheus.CounterValue, m.ended[outcome], outcome)
	}
	m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(m.beats, prometheus.CounterValue, float64(m.heartbeats.Load()))
	ch <- prometheus.MustNewConstMetric(m.running, prometheus.GaugeValue, float64(m.tasks()))
	ch <- prometheus.MustNewConstMetric(m.done, prometheus.CounterValue, float64(m.samples.Load()))
	m.kv.Collect(ch)
	if m.dataplane == nil {
		return
	}
	if st, ok := m.dataplane(); ok {
		ch <- prometheus.MustNewConstMetric(m.dpSends, prometheus.CounterValue, float64(st.DirectSends), "direct")
		ch <- prometheus.MustNewConstMetric(m.dpSends, prometheus.CounterValue, float64(st.BusSends), "bus")
		ch <- prometheus.MustNewConstMetric(m.dpSends, prometheus.CounterValue, float64(st.SelfSends), "self")
		ch <- prometheus.MustNewConstMetric(m.dpDials, prometheus.CounterValue, float64(st.Dials))
		ch <- prometheus.MustNewConstMetric(m.dpConns, prometheus.GaugeValue, float64(st.Conns))
		ch <- prometheus.MustNewConstMetric(m.dpRefus, prometheus.CounterValue, float64(st.Refused))
	}
}

// Collector exports the slave's counters to Prometheus, labelled with its id.
func (s *Slave) Collector() prometheus.Collector { return s.metrics }
