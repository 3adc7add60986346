// Package metrics is kvcanary's metrics sink: a hook.Publisher that counts
// what flows through a pipeline (events by kind, sessions by outcome,
// replays by mode, graph-vs-eager samples, findings, producer drops) and
// reads the analyzers' run summaries (room compares, canary pages by class,
// divergent samples) when it is scraped, and serves both as Prometheus
// metrics on /metrics. The OTLP exporter (package otlp) reads the same
// families, so the two never disagree.
//
// Counting is cheap and never blocks: Publish does a handful of atomic adds
// on counters resolved once per event source; everything else happens at
// scrape time. Labels are bounded: run, host, role and rank identify a
// source, and every other label takes values from a fixed set (kinds,
// outcomes, modes, classes, reasons). No request, room or session id is
// ever a label value; past MaxSources distinct sources, events count under
// one overflow source and the overflow is itself counted.
//
// Errors: Serve returns listen errors naming the address; nothing else in
// this package fails.
package metrics
