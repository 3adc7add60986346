package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/metrics"
	"github.com/kvcanary/kvcanary/otlp"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
)

// twinWarmup is the seq_len of the twin's warmup rooms, for sinks that
// judge the twin's events themselves (sim serve).
const twinWarmup = sim.WarmupSeqLen

// exportOptions are the flags that send what a streaming command sees to a
// fleet's monitoring: --metrics-addr (Prometheus /metrics) and
// --otlp-endpoint (OTLP/HTTP logs and metrics). collect, watch, wrap and sim
// serve take them.
type exportOptions struct {
	MetricsAddr  string
	OTLPEndpoint string
	// MetricsRemote allows --metrics-addr on an address other hosts reach.
	MetricsRemote bool
}

// addExportFlags registers --metrics-addr and --otlp-endpoint on cmd.
func addExportFlags(cmd *cobra.Command, o *exportOptions) {
	fl := cmd.Flags()
	fl.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics on http://`HOST:PORT`/metrics (e.g. 127.0.0.1:9464; read-only)")
	fl.BoolVar(&o.MetricsRemote, "metrics-remote", false, "allow --metrics-addr on an address other hosts reach (no authentication: anyone who can reach it reads the counts; nothing can be sent through it)")
	fl.StringVar(&o.OTLPEndpoint, "otlp-endpoint", "", "send findings and session outcomes as OTLP log records, and the metrics, to this OTLP/HTTP `URL` (http://otel-collector:4318)")
}

// exportSource is what the export sinks need from the command.
type exportSource struct {
	// Run labels series judged across producers and events that carry no
	// run id.
	Run string
	// Collector, when the command runs one, adds connection and rejection
	// counters.
	Collector *hook.Collector
	// Analyzers are the command's own, which judge events before the sinks
	// see them (hook.WithAnalyzers(…sinks…, Analyzers...)): their summaries
	// are read at scrape time. Nil: the sinks judge with analyzers of their
	// own (analyzers.All with Warmup), so the command needs none.
	Analyzers []hook.Analyzer
	Warmup    int
}

// enabled reports whether any export flag was given.
func (o *exportOptions) enabled() bool { return o.MetricsAddr != "" || o.OTLPEndpoint != "" }

// check refuses malformed flag values (usage errors, before anything starts).
func (o *exportOptions) check() error {
	if o.MetricsAddr != "" {
		host, _, err := net.SplitHostPort(o.MetricsAddr)
		if err != nil {
			return cmdutil.UsageError("--metrics-addr %q: want HOST:PORT: %w", o.MetricsAddr, err)
		}
		// Nothing listens beyond loopback unless the user says so: the
		// counts are read-only, but they say what a fleet is seeing.
		if !isLoopbackHost(host) && !o.MetricsRemote {
			return cmdutil.UsageError("--metrics-addr %q is reachable from other hosts, without authentication: add --metrics-remote to serve it there anyway (or use 127.0.0.1 and let a local agent scrape it)", o.MetricsAddr)
		}
	}
	if o.OTLPEndpoint != "" {
		if _, err := otlp.ParseEndpoint(o.OTLPEndpoint); err != nil {
			return cmdutil.UsageError("--otlp-endpoint: %w", err)
		}
	}
	return nil
}

// start serves /metrics and starts the OTLP exporter as the flags ask.
// sinks is what the command publishes its events to, beside its bus (see
// withSinks); empty when no flag was given. stop reports what the sinks
// lost on stderr and shuts them down; call it once ingest has ended.
func (o *exportOptions) start(_ context.Context, stderr io.Writer, src exportSource) (sinks []hook.Publisher, stop func() error, err error) {
	stop = func() error { return nil }
	if !o.enabled() {
		return nil, stop, nil
	}
	if err := o.check(); err != nil {
		return nil, stop, err
	}
	judge := src.Analyzers == nil
	as := src.Analyzers
	if judge {
		as = analyzers.All(analyzers.Options{WarmupMaxSeqLen: src.Warmup})
	}
	tally := metrics.NewTally(metrics.Options{Run: src.Run, Analyzers: as})
	if src.Collector != nil {
		tally.SetCollector(src.Collector.Stats)
	}
	out := []hook.Publisher{tally}
	var (
		srv  *metrics.Server
		sink *otlp.Sink
	)
	if o.OTLPEndpoint != "" {
		sink, err = otlp.New(otlp.Options{Endpoint: o.OTLPEndpoint, Tally: tally, Version: buildinfo.String()})
		if err != nil {
			return nil, stop, cmdutil.UsageError("--otlp-endpoint: %w", err)
		}
		tally.AddDropCounter("otlp_queue", sink.Dropped)
		out = append(out, sink)
		fmt.Fprintf(stderr, "otlp: exporting findings and sessions to %s\n", cmdutil.Quote(o.OTLPEndpoint))
	}
	if o.MetricsAddr != "" {
		srv, err = metrics.Serve(o.MetricsAddr, tally)
		if err != nil {
			if sink != nil {
				sink.Close()
			}
			return nil, stop, cmdutil.InputError(err)
		}
		fmt.Fprintf(stderr, "metrics: serving http://%s/metrics\n", srv.Addr())
		if host, _, _ := net.SplitHostPort(srv.Addr()); !isLoopbackHost(host) {
			fmt.Fprintf(stderr, "metrics: %s is reachable from other hosts: anyone who can reach it reads the counts (no events can be sent through it)\n", srv.Addr())
		}
	}
	var pub hook.Publisher = fanOut(out)
	if judge {
		pub = hook.WithAnalyzers(pub, as...)
	}
	stop = func() error { return stopExport(stderr, sink, srv) }
	return []hook.Publisher{hook.WithRun(pub, src.Run)}, stop, nil
}

// newPipeline starts the sinks the flags ask for (see start), builds the
// pipeline of po with them, and returns stop, to call once the pipeline has
// run. A start error is returned as it is; a pipeline error (the bundle
// cannot be created) is an input error, prefixed with "label: " when label is
// set. On an error nothing is left running.
func (o *exportOptions) newPipeline(ctx context.Context, stderr io.Writer, src exportSource, po pipeline.Options, label string) (p *pipeline.Pipeline, stop func() error, err error) {
	po.Sinks, stop, err = o.start(ctx, stderr, src)
	if err != nil {
		return nil, nil, err
	}
	if p, err = pipeline.New(po); err != nil {
		stop()
		if label != "" {
			err = fmt.Errorf("%s: %w", label, err)
		}
		return nil, nil, cmdutil.InputError(err)
	}
	return p, stop, nil
}

// stopExport flushes and closes the OTLP sink and the metrics server (each
// may be nil) and reports on stderr what the export did.
func stopExport(stderr io.Writer, sink *otlp.Sink, srv *metrics.Server) error {
	var errs []error
	if sink != nil {
		errs = append(errs, sink.Close())
		st := sink.Stats()
		fmt.Fprintf(stderr, "otlp: %d records exported, %d failed, %d dropped; %d metric exports (%d failed)\n",
			st.Exported, st.Failed, st.Dropped, st.MetricExports, st.MetricFailures)
		if st.LastError != "" {
			fmt.Fprintf(stderr, "otlp: last error: %s\n", cmdutil.Quote(st.LastError))
		}
	}
	if srv != nil {
		errs = append(errs, srv.Close())
	}
	return errors.Join(errs...)
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// fanOut publishes every event to each of ps in order.
func fanOut(ps []hook.Publisher) hook.Publisher {
	if len(ps) == 1 {
		return ps[0]
	}
	return hook.PublishFunc(func(ev hook.Event) {
		for _, p := range ps {
			p.Publish(ev)
		}
	})
}

// withSinks returns next followed by sinks (next alone when there are
// none). next may be nil.
func withSinks(next hook.Publisher, sinks []hook.Publisher) hook.Publisher {
	if len(sinks) == 0 {
		return next
	}
	if next == nil {
		return fanOut(sinks)
	}
	return fanOut(append([]hook.Publisher{next}, sinks...))
}
