// Package otlp exports what kvcanary judges to an OpenTelemetry Collector
// over OTLP/HTTP, with the OpenTelemetry Go SDK's exporters: findings and
// session outcomes as log records, and the metrics package's families as
// OTLP metrics.
//
// A dead or slow endpoint never slows ingest: Publish only offers the event
// to a bounded queue and drops it, counted, when the queue is full; one
// goroutine batches the queue into export requests, which the SDK exporter
// retries with backoff. Every record is accounted for in Stats: exported,
// failed (an export that gave up) or dropped (queue full, or offered while
// Close ran). With Options.Tally, failed records are also counted in
// kvcanary_events_dropped_total{reason="otlp_failed"}.
//
// Errors: New refuses an endpoint that is not an http or https URL;
// export errors are counted, and the last one kept, never returned to the
// publisher.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/kvcanary/kvcanary/metrics"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Defaults of Options.
const (
	DefaultQueueSize      = 4096
	DefaultBatchSize      = 256
	DefaultFlushInterval  = time.Second
	DefaultMetricInterval = 10 * time.Second
	DefaultTimeout        = 10 * time.Second
	DefaultRetryMax       = 30 * time.Second
	// DefaultCloseTimeout bounds all of Close: a command that exports to an
	// endpoint that stopped answering ends within it (before: 10 s).
	DefaultCloseTimeout = time.Second
)

// Options configure a Sink. Zero values pick the defaults.
type Options struct {
	// Endpoint is the base URL of an OTLP/HTTP receiver
	// (http://otel-collector:4318); log records go to Endpoint/v1/logs,
	// metrics to Endpoint/v1/metrics. https uses the system's roots.
	Endpoint string
	// Tally, when set, is exported as OTLP metrics every MetricInterval.
	Tally *metrics.Tally
	// Version is kvcanary's version (service.version).
	Version string

	QueueSize      int           // log records waiting; more are dropped
	BatchSize      int           // records per export request
	FlushInterval  time.Duration // longest a record waits for its batch
	MetricInterval time.Duration
	Timeout        time.Duration // one export request
	RetryInitial   time.Duration // first backoff of a retried export (default 1s)
	RetryMax       time.Duration // give up an export after retrying this long
	CloseTimeout   time.Duration // Close returns within this long, flushed or not
}

// Stats account for every log record offered to the sink.
type Stats struct {
	Offered        uint64 `json:"offered"`  // sessions and findings published
	Exported       uint64 `json:"exported"` // accepted by the endpoint
	Failed         uint64 `json:"failed"`   // in an export that gave up
	Dropped        uint64 `json:"dropped"`  // queue full, or left when Close timed out
	MetricExports  uint64 `json:"metric_exports"`
	MetricFailures uint64 `json:"metric_failures"`
	LastError      string `json:"last_error,omitempty"`
}

// Sink is a hook.Publisher that exports sessions and findings as log
// records (and a Tally's families as metrics). Close flushes it.
type Sink struct {
	opts Options
	q    chan hook.Event
	stop chan struct{}
	done chan struct{}
	// exportCtx is cancelled when Close's flush time is up, cutting
	// retries short.
	exportCtx    context.Context
	cancelExport context.CancelFunc

	lp     *sdklog.LoggerProvider
	logger log.Logger
	proc   *batcher
	exp    sdklog.Exporter
	mp     *sdkmetric.MeterProvider

	offered, exported, failed, dropped atomic.Uint64
	metricExports, metricFailures      atomic.Uint64
	lastErr                            atomic.Value // string
	closed                             atomic.Bool
	drained                            atomic.Bool // Close's last drain is done
	closeOnce                          sync.Once
	closeErr                           error
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	def(&o.FlushInterval, DefaultFlushInterval)
	def(&o.MetricInterval, DefaultMetricInterval)
	def(&o.Timeout, DefaultTimeout)
	def(&o.RetryInitial, time.Second)
	def(&o.RetryMax, DefaultRetryMax)
	def(&o.CloseTimeout, DefaultCloseTimeout)
}

// ParseEndpoint checks an --otlp-endpoint value: an http or https URL with
// a host, without query or fragment.
func ParseEndpoint(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("otlp endpoint %q: %w", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("otlp endpoint %q: want an http:// or https:// URL (OTLP/HTTP, port 4318 by default)", raw)
	case u.Host == "":
		return nil, fmt.Errorf("otlp endpoint %q: no host", raw)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("otlp endpoint %q: a query or fragment has no place in a base URL", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

// New starts a sink exporting to opts.Endpoint. It does not contact the
// endpoint: an endpoint that is down shows in Stats, not here.
func New(opts Options) (*Sink, error) {
	opts.defaults()
	routeSDKErrors()
	u, err := ParseEndpoint(opts.Endpoint)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	res := resource.NewSchemaless(
		attribute.String("service.name", "kvcanary"),
		attribute.String("service.version", opts.Version),
		attribute.String("host.name", host),
	)
	logsURL, metricsURL := *u, *u
	logsURL.Path += "/v1/logs"
	metricsURL.Path += "/v1/metrics"
	lexp, err := otlploghttp.New(context.Background(),
		otlploghttp.WithEndpointURL(logsURL.String()),
		otlploghttp.WithTimeout(opts.Timeout),
		otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: true, InitialInterval: opts.RetryInitial, MaxInterval: 4 * opts.RetryInitial, MaxElapsedTime: opts.RetryMax}))
	if err != nil {
		return nil, fmt.Errorf("otlp: log exporter: %w", err)
	}
	s := &Sink{opts: opts, q: make(chan hook.Event, opts.QueueSize), stop: make(chan struct{}), done: make(chan struct{}), exp: lexp}
	s.exportCtx, s.cancelExport = context.WithCancel(context.Background())
	s.proc = &batcher{}
	s.lp = sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(s.proc))
	s.logger = s.lp.Logger("github.com/kvcanary/kvcanary", log.WithInstrumentationVersion(opts.Version))

	if opts.Tally != nil {
		mexp, err := otlpmetrichttp.New(context.Background(),
			otlpmetrichttp.WithEndpointURL(metricsURL.String()),
			otlpmetrichttp.WithTimeout(opts.Timeout),
			otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: true, InitialInterval: opts.RetryInitial, MaxInterval: 4 * opts.RetryInitial, MaxElapsedTime: opts.RetryMax}))
		if err != nil {
			return nil, fmt.Errorf("otlp: metric exporter: %w", err)
		}
		s.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
			sdkmetric.WithReader(sdkmetric.NewPeriodicReader(&countingExporter{Exporter: mexp, s: s}, sdkmetric.WithInterval(opts.MetricInterval))))
		if err := registerFamilies(s.mp.Meter("github.com/kvcanary/kvcanary"), opts.Tally); err != nil {
			return nil, fmt.Errorf("otlp: metrics: %w", err)
		}
	}
	if opts.Tally != nil {
		// An export that gave up lost its records: the same counter as
		// every other loss, so KvcanaryEventsDropped fires for a dead
		// endpoint. (The caller registers otlp_queue with Dropped.)
		opts.Tally.AddDropCounter("otlp_failed", s.Failed)
	}
	go s.run()
	liveSinks.Store(s, struct{}{})
	return s, nil
}

// Publish implements hook.Publisher: sessions and findings are queued for
// export (or dropped and counted when the queue is full); other events are
// ignored. It never waits.
func (s *Sink) Publish(ev hook.Event) {
	if ev.Kind != hook.KindSession && ev.Kind != hook.KindFinding {
		return
	}
	s.offered.Add(1)
	if s.closed.Load() {
		s.dropped.Add(1)
		return
	}
	if testPublishGap != nil {
		testPublishGap(s)
	}
	// Close may have drained the queue since the check above: a record sent
	// now stays in the queue for good, and is counted dropped by Stats
	// (stranded) once Close has drained it.
	select {
	case s.q <- ev:
	default:
		s.dropped.Add(1)
	}
}

// testPublishGap, when set by a test, runs between Publish's closed check
// and its send.
var testPublishGap func(*Sink)

// Dropped is the number of records dropped so far (queue full, left
// unexported when Close timed out, or offered while Close ran).
func (s *Sink) Dropped() uint64 {
	n := s.dropped.Load()
	if s.drained.Load() {
		n += uint64(len(s.q)) // sent after Close's last drain: nobody will export them
	}
	return n
}

// Failed is the number of records lost in exports that gave up.
func (s *Sink) Failed() uint64 { return s.failed.Load() }

// Stats returns the sink's counters. Offered = Exported + Failed + Dropped
// once Close has returned and no Publish is running.
func (s *Sink) Stats() Stats {
	st := Stats{Offered: s.offered.Load(), Exported: s.exported.Load(), Failed: s.failed.Load(), Dropped: s.Dropped(),
		MetricExports: s.metricExports.Load(), MetricFailures: s.metricFailures.Load()}
	if e, ok := s.lastErr.Load().(string); ok {
		st.LastError = e
	}
	return st
}

// Close exports what is queued, pushes the metrics once more, and stops,
// all within CloseTimeout. What it could not export is counted.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		deadline := time.Now().Add(s.opts.CloseTimeout)
		// The queue's drain gets half of the time, the exporters' shutdown
		// (the metrics' last push) the rest.
		timer := time.AfterFunc(s.opts.CloseTimeout/2, s.cancelExport)
		defer timer.Stop()
		s.closed.Store(true)
		close(s.stop)
		<-s.done
		// Offered while the drain ran: nobody will export them.
		for n := len(s.q); n > 0; n-- {
			<-s.q
			s.dropped.Add(1)
		}
		// From here on the queue is never read: what a Publish that passed
		// the closed check before it was set still sends is counted by
		// Dropped as it lies there.
		s.drained.Store(true)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		var errs []error
		if s.mp != nil {
			errs = append(errs, s.mp.Shutdown(ctx))
		}
		errs = append(errs, s.lp.Shutdown(ctx), s.exp.Shutdown(ctx))
		s.cancelExport()
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("otlp: close: %w", err)
		}
		liveSinks.Delete(s)
	})
	return s.closeErr
}

func (s *Sink) setErr(err error) { s.lastErr.Store(err.Error()) }

// sdkErrors are the OpenTelemetry SDK's own errors (a metric push that
// failed in the background, a shutdown past its deadline), which its
// default handler prints as raw Go log lines on stderr, under the
// command's output. They go to the live sinks' LastError instead.
var (
	sdkErrorsOnce sync.Once
	liveSinks     sync.Map // *Sink -> struct{}
)

func routeSDKErrors() {
	sdkErrorsOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			liveSinks.Range(func(k, _ any) bool {
				k.(*Sink).setErr(fmt.Errorf("otlp: %w", err))
				return true
			})
		}))
	})
}

// run batches the queue into export requests until Close.
func (s *Sink) run() {
	defer close(s.done)
	tick := time.NewTicker(s.opts.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case ev := <-s.q:
			s.emit(ev)
			if len(s.proc.batch) >= s.opts.BatchSize {
				s.flush()
			}
		case <-tick.C:
			s.flush()
		case <-s.stop:
		drain:
			for {
				select {
				case ev := <-s.q:
					s.emit(ev)
					if len(s.proc.batch) >= s.opts.BatchSize {
						s.flush()
					}
				default:
					break drain
				}
			}
			s.flush()
			return
		}
	}
}

func (s *Sink) flush() {
	b := s.proc.batch
	if len(b) == 0 {
		return
	}
	s.proc.batch = nil
	if s.exportCtx.Err() != nil {
		s.dropped.Add(uint64(len(b)))
		return
	}
	if err := s.exp.Export(s.exportCtx, b); err != nil {
		if s.exportCtx.Err() != nil {
			s.dropped.Add(uint64(len(b)))
		} else {
			s.failed.Add(uint64(len(b)))
		}
		s.setErr(err)
		return
	}
	s.exported.Add(uint64(len(b)))
}

// emit turns one event into a log record; the batcher keeps it.
func (s *Sink) emit(ev hook.Event) {
	var r log.Record
	ts := time.Unix(0, ev.TS)
	if ev.TS == 0 {
		ts = time.Now()
	}
	r.SetTimestamp(ts)
	r.SetObservedTimestamp(time.Now())
	r.AddAttributes(sourceAttrs(ev)...)
	switch b := ev.Body.(type) {
	case *hook.Finding:
		r.SetEventName("kvcanary.finding")
		r.SetBody(attribute.StringValue(b.Summary))
		sev, text := severity(b.Severity)
		r.SetSeverity(sev)
		r.SetSeverityText(text)
		r.AddAttributes(attribute.String("kvcanary.analyzer", b.Analyzer), attribute.String("kvcanary.severity", string(b.Severity)))
		for _, k := range slices.Sorted(maps.Keys(b.Evidence)) {
			r.AddAttributes(attribute.String("kvcanary.evidence."+k, b.Evidence[k]))
		}
	case *hook.Session:
		corrupted := b.Outcome == hook.OutcomeLeak || b.Outcome == hook.OutcomeNoTool || b.Outcome == hook.OutcomeError
		r.SetEventName("kvcanary.session")
		r.SetBody(attribute.StringValue("session " + strconv.Quote(b.ID) + " ended " + b.Outcome))
		if corrupted {
			r.SetSeverity(log.SeverityWarn)
			r.SetSeverityText("WARN")
		} else {
			r.SetSeverity(log.SeverityInfo)
			r.SetSeverityText("INFO")
		}
		r.AddAttributes(attribute.String("kvcanary.session.id", b.ID), attribute.String("kvcanary.session.outcome", b.Outcome),
			attribute.Bool("kvcanary.session.corrupted", corrupted), attribute.Int("kvcanary.session.rounds", b.Rounds))
		if b.Reason != "" {
			r.AddAttributes(attribute.String("kvcanary.session.reason", b.Reason))
		}
		if b.Round > 0 {
			r.AddAttributes(attribute.Int("kvcanary.session.bad_round", b.Round))
		}
	default:
		return
	}
	s.logger.Emit(context.Background(), r)
}

func severity(s hook.Severity) (log.Severity, string) {
	switch s {
	case hook.SevError:
		return log.SeverityError, "ERROR"
	case hook.SevWarn:
		return log.SeverityWarn, "WARN"
	case hook.SevInfo:
		return log.SeverityInfo, "INFO"
	}
	return log.SeverityUndefined, string(s)
}

// sourceAttrs are the event's source: run, host, process.
//
// sourceAttrs are a record's source attributes: run, host, process, pid,
// and an engine's role and rank (rank only with a role).
func sourceAttrs(ev hook.Event) []attribute.KeyValue {
	kv := []attribute.KeyValue{attribute.String("kvcanary.run", ev.Run)}
	if ev.Src.Node != "" {
		kv = append(kv, attribute.String("kvcanary.host", ev.Src.Node))
	}
	if ev.Src.Proc != "" {
		kv = append(kv, attribute.String("kvcanary.proc", ev.Src.Proc))
	}
	if ev.Src.PID != 0 {
		kv = append(kv, attribute.Int("kvcanary.pid", int(ev.Src.PID)))
	}
	if ev.Src.Role != "" {
		kv = append(kv, attribute.String("kvcanary.role", ev.Src.Role), attribute.Int("kvcanary.rank", int(ev.Src.Rank)))
	}
	return kv
}

// batcher is the log pipeline's processor: it keeps each emitted record
// for run to export. Only run's goroutine emits, so it needs no lock.
type batcher struct{ batch []sdklog.Record }

func (b *batcher) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (b *batcher) OnEmit(_ context.Context, r *sdklog.Record) error {
	b.batch = append(b.batch, r.Clone())
	return nil
}
func (b *batcher) Shutdown(context.Context) error   { return nil }
func (b *batcher) ForceFlush(context.Context) error { return nil }

// countingExporter counts metric exports and their failures.
type countingExporter struct {
	sdkmetric.Exporter
	s *Sink
}

func (c *countingExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	err := c.Exporter.Export(ctx, rm)
	if err != nil {
		c.s.metricFailures.Add(1)
		c.s.setErr(err)
	} else {
		c.s.metricExports.Add(1)
	}
	return err
}

// registerFamilies makes every metrics family an observable instrument
// read from t at each collection.
func registerFamilies(m metric.Meter, t *metrics.Tally) error {
	insts := map[*metrics.Family]metric.Float64Observable{}
	var all []metric.Observable
	for _, f := range metrics.Families() {
		name := f.OTelName
		var (
			inst metric.Float64Observable
			err  error
		)
		if f.Type == metrics.Counter {
			inst, err = m.Float64ObservableCounter(name, metric.WithDescription(f.Help), metric.WithUnit(f.Unit))
		} else {
			inst, err = m.Float64ObservableGauge(name, metric.WithDescription(f.Help), metric.WithUnit(f.Unit))
		}
		if err != nil {
			return fmt.Errorf("instrument %s: %w", name, err)
		}
		insts[f] = inst
		all = append(all, inst)
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.Collect(func(f *metrics.Family, v float64, labels ...string) {
			attrs := make([]attribute.KeyValue, 0, len(labels))
			for i, l := range labels {
				if l != "" {
					attrs = append(attrs, attribute.String(f.Labels[i], l))
				}
			}
			o.ObserveFloat64(insts[f], v, metric.WithAttributes(attrs...))
		})
		return nil
	}, all...)
	return err
}
