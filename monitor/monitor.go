// Package monitor exposes a cluster to people and to Prometheus: the
// master's status page (tasks, stages with progress, slaves with load, a
// loss curve per stage, refreshing by itself; server-rendered HTML with
// embedded assets, no external requests) and a /metrics endpoint on every
// process. The page and the cluster metrics are drawn from the master's
// status (the same data `flexps status` shows) at request time, so they
// add nothing to the training path; per-process metrics (KV traffic,
// readers) are registered by the rooms that count them.
package monitor

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/flexps/flexps/status"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// StatusFunc returns the cluster's status: every task for id "", else the
// one task.
type StatusFunc func(id string) (status.Cluster, error)

// NewRegistry is a registry with the Go runtime and process collectors,
// which every flexps process exposes.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MetricsHandler serves reg in the Prometheus text format.
func MetricsHandler(reg prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// MasterHandler serves the status page at "/", the status as JSON at
// "/api/status" (optionally ?task=ID), the metrics at "/metrics" and the
// page's assets under "/static/".
func MasterHandler(f StatusFunc, reg prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(reg))
	mux.Handle("GET /static/", http.FileServerFS(staticFS))
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) {
		st, err := f(r.URL.Query().Get("task"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(st); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		st, err := f("")
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		renderPage(w, st, time.Now())
	})
	return mux
}

// Server is an HTTP server of one process.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
	once sync.Once
}

// Listen serves h on addr. setting names the configuration key that chose
// addr, for the error when the address is taken.
func Listen(addr, setting string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%s %s: address already in use: another process listens there; choose another port with %s", setting, addr, setting)
		}
		return nil, fmt.Errorf("%s %s: %w", setting, addr, err)
	}
	s := &Server{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on (with the port chosen when
// addr asked for port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is http://Addr().
func (s *Server) URL() string { return "http://" + s.Addr() }

// Close stops the server and waits for it.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		err = s.srv.Close()
		if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
	})
	return err
}
