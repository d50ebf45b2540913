package monitor

import (
	"time"

	"github.com/flexps/flexps/status"
	"github.com/prometheus/client_golang/prometheus"
)

// clusterCollector turns the master's status into metrics at scrape time.
// Per-task series exist only for tasks that have not ended, so a master
// that ran thousands of tasks does not export thousands of stale series;
// ended tasks are counted by state.
type clusterCollector struct {
	f   StatusFunc
	now func() time.Time

	tasks, slaves, slots, free, seen, up                *prometheus.Desc
	stage, fraction, epoch, epochs, samples, rate, loss *prometheus.Desc
	membership                                          *prometheus.Desc
	scrapeErrors                                        prometheus.Counter
}

// NewClusterCollector exports the cluster's tasks and slaves as the
// master's status reports them.
func NewClusterCollector(f StatusFunc) prometheus.Collector {
	task := []string{"task", "name"}
	return &clusterCollector{
		f: f, now: time.Now,
		tasks:      prometheus.NewDesc("flexps_tasks", "Tasks the master knows, by state.", []string{"state"}, nil),
		slaves:     prometheus.NewDesc("flexps_slaves", "Slaves by liveness.", []string{"state"}, nil),
		slots:      prometheus.NewDesc("flexps_slave_slots", "Worker slots of a slave.", []string{"slave", "host"}, nil),
		free:       prometheus.NewDesc("flexps_slave_free_slots", "Free worker slots of a slave.", []string{"slave", "host"}, nil),
		seen:       prometheus.NewDesc("flexps_slave_heartbeat_age_seconds", "Time since the slave's last heartbeat.", []string{"slave"}, nil),
		up:         prometheus.NewDesc("flexps_slave_up", "1 when the slave is alive, 0 when declared dead.", []string{"slave"}, nil),
		membership: prometheus.NewDesc("flexps_membership_epoch", "The membership epoch: grows at every join, death and leave of a slave.", nil, nil),
		stage:      prometheus.NewDesc("flexps_task_stage", "Index of the stage a running task is in.", task, nil),
		fraction:   prometheus.NewDesc("flexps_task_stage_fraction", "Done fraction of the current stage (0 when unknown).", task, nil),
		epoch:      prometheus.NewDesc("flexps_task_epoch", "Last epoch every worker of the current stage finished.", task, nil),
		epochs:     prometheus.NewDesc("flexps_task_epochs", "Epochs the current stage plans (0 when unknown).", task, nil),
		samples:    prometheus.NewDesc("flexps_task_stage_samples", "Samples processed in the current stage.", task, nil),
		rate:       prometheus.NewDesc("flexps_task_samples_per_second", "Current training speed of a running task.", task, nil),
		loss:       prometheus.NewDesc("flexps_task_loss", "Mean training loss over the latest progress reports.", task, nil),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "flexps_status_scrape_errors_total",
			Help: "Scrapes in which the master's status could not be read."}),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.tasks, c.slaves, c.slots, c.free, c.seen, c.up, c.stage, c.fraction, c.epoch, c.epochs, c.samples, c.rate, c.loss, c.membership} {
		ch <- d
	}
	c.scrapeErrors.Describe(ch)
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	defer c.scrapeErrors.Collect(ch)
	st, err := c.f("")
	if err != nil {
		c.scrapeErrors.Inc()
		return
	}
	byState := map[string]int{status.Queued: 0, status.Running: 0, status.Done: 0, status.Failed: 0, status.Cancelled: 0}
	for _, t := range st.Tasks {
		byState[t.State]++
		if t.Ended() {
			continue
		}
		l := []string{t.ID, t.Name}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
		}
		gauge(c.stage, float64(t.Stage))
		gauge(c.fraction, t.Progress.Fraction)
		gauge(c.epoch, float64(t.Progress.Epoch))
		gauge(c.epochs, float64(t.Progress.Epochs))
		gauge(c.samples, float64(t.Progress.Samples))
		gauge(c.rate, t.Progress.SamplesPerSec)
		gauge(c.loss, t.Progress.Loss)
	}
	for state, n := range byState {
		ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(n), state)
	}
	alive, dead := 0, 0
	now := c.now()
	for _, s := range st.Slaves {
		up := 0.0
		if s.Alive {
			alive++
			up = 1
		} else {
			dead++
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, s.ID)
		ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(s.Slots), s.ID, s.Host)
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(s.Free), s.ID, s.Host)
		if !s.LastSeen.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.seen, prometheus.GaugeValue, now.Sub(s.LastSeen).Seconds(), s.ID)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.slaves, prometheus.GaugeValue, float64(alive), "alive")
	ch <- prometheus.MustNewConstMetric(c.slaves, prometheus.GaugeValue, float64(dead), "dead")
	ch <- prometheus.MustNewConstMetric(c.membership, prometheus.GaugeValue, float64(st.Epoch))
}
