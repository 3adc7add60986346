package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// promCollector exposes a Tally as a prometheus.Collector: const metrics
// built at scrape time from the Tally's counters.
type promCollector struct {
	t     *Tally
	descs map[*Family]*prometheus.Desc
}

func newPromCollector(t *Tally) *promCollector {
	c := &promCollector{t: t, descs: map[*Family]*prometheus.Desc{}}
	for _, f := range Families() {
		c.descs[f] = prometheus.NewDesc(f.Name, f.Help, f.Labels, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *promCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range Families() {
		ch <- c.descs[f]
	}
}

// Collect implements prometheus.Collector.
func (c *promCollector) Collect(ch chan<- prometheus.Metric) {
	c.t.Collect(func(f *Family, v float64, labels ...string) {
		vt := prometheus.CounterValue
		if f.Type == Gauge {
			vt = prometheus.GaugeValue
		}
		m, err := prometheus.NewConstMetric(c.descs[f], vt, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(c.descs[f], err)
		}
		ch <- m
	})
}

// Registry returns a Prometheus registry holding t's families plus the Go
// runtime's and the process's standard collectors.
func Registry(t *Tally) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newPromCollector(t),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves t's metrics in the Prometheus exposition formats.
func Handler(t *Tally) http.Handler {
	return promhttp.HandlerFor(Registry(t), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Server serves /metrics.
type Server struct {
	ln  net.Listener
	hs  *http.Server
	err chan error
}

// Serve listens on addr (HOST:PORT; port 0 picks one) and serves t's
// metrics on /metrics until Close.
func Serve(addr string, t *Tally) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(t))
	s := &Server{ln: ln, err: make(chan error, 1),
		hs: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { s.err <- s.hs.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, letting a scrape in flight finish (at most 2s).
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.hs.Shutdown(ctx)
	if serr := <-s.err; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
