package engine

import (
	"errors"

	"github.com/flexps/flexps/master"
	"github.com/flexps/flexps/monitor"
	"github.com/flexps/flexps/slave"
	"github.com/rs/zerolog"
)

// Monitors are a process's HTTP servers: the status page (master) and
// /metrics. Either may be nil (off).
type Monitors struct {
	Page    *monitor.Server // [http] listen: status page, /metrics, /api/status
	Metrics *monitor.Server // [metrics] listen: /metrics
}

// Close stops the servers.
func (ms *Monitors) Close() error {
	if ms == nil {
		return nil
	}
	var errs []error
	for _, s := range []*monitor.Server{ms.Page, ms.Metrics} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// startMasterMonitors serves m's status page and metrics as cfg asks; the
// slaves of an in-process cluster add their counters to the same registry.
func (c *ClusterConfig) startMasterMonitors(m *master.Master, log zerolog.Logger, slaves ...*slave.Slave) (*Monitors, error) {
	ms := &Monitors{}
	if c.HTTP.Listen == "" && c.Metrics.Listen == "" {
		return ms, nil
	}
	reg := monitor.NewRegistry()
	reg.MustRegister(monitor.NewClusterCollector(m.Status))
	for _, s := range slaves {
		reg.MustRegister(s.Collector())
	}
	var err error
	if c.HTTP.Listen != "" {
		if ms.Page, err = monitor.Listen(c.HTTP.Listen, c.HTTP.setting("[http] listen"), monitor.MasterHandler(m.Status, reg)); err != nil {
			return nil, err
		}
		log.Info().Str("url", ms.Page.URL()).Msg("status page")
	}
	if c.Metrics.Listen != "" {
		if ms.Metrics, err = monitor.Listen(c.Metrics.Listen, c.Metrics.setting("[metrics] listen"), monitor.MetricsHandler(reg)); err != nil {
			ms.Close()
			return nil, err
		}
		log.Info().Str("url", ms.Metrics.URL()+"/metrics").Msg("metrics")
	}
	return ms, nil
}

// startSlaveMonitors serves a slave process's /metrics as cfg asks.
func (c *ClusterConfig) startSlaveMonitors(log zerolog.Logger, s *slave.Slave) (*Monitors, error) {
	ms := &Monitors{}
	if c.Metrics.Listen == "" {
		return ms, nil
	}
	reg := monitor.NewRegistry()
	reg.MustRegister(s.Collector())
	var err error
	if ms.Metrics, err = monitor.Listen(c.Metrics.Listen, c.Metrics.setting("[metrics] listen"), monitor.MetricsHandler(reg)); err != nil {
		return nil, err
	}
	log.Info().Str("url", ms.Metrics.URL()+"/metrics").Msg("metrics")
	return ms, nil
}
