// Package pipeline is the one wiring of a kvcanary run:
//
//	source ─▶ (middleware) ─▶ analyzers ─▶ bus ─┬─▶ lossless recorder (traces bundle)
//	                                            ├─▶ live view (drops, counts)
//	                                            └─▶ extra sinks ([]hook.Publisher)
//
// A command chooses a Source (a collector, a bundle replay, the twin, the
// repro harness, a probe, a wrapped engine) and its sinks in Options, then
// calls New and Run. The pipeline owns everything between them, so no
// command wires a bus, a recorder goroutine, a status line or a drain by
// hand:
//
//   - the input: Publish is serialised, so a source may publish from several
//     goroutines (the harness and a log tail); events pass Middleware, then
//     the analyzers (hook.WithAnalyzers: findings follow the event that
//     caused them), then StampRun, then the bus and the extra sinks;
//   - the recorder: one lossless bus subscription drained by traces.Record
//     into the bundle; a slow disk slows the source, never loses an event;
//     after an I/O error the recorder keeps draining and counts what it could
//     not keep. A source's ingest rejections (Rejecter) and losses (Lossy)
//     go into the bundle's footer before it closes;
//   - the live view: a bounded bus subscription that drops its oldest event
//     when the view falls behind and counts the drop (Result.ViewDropped);
//     the view runs on Run's goroutine, learns the source's end through a
//     channel, and quitting it cancels the source;
//   - extra sinks: metrics or OTLP exporters are hook.Publishers in
//     Options.Sinks (one line in a command); they see every event and
//     finding after the analyzers and must not block for long; an io.Closer
//     is closed at the end and its error reported;
//   - the status line: one StatusLine per command, drawn in place on a
//     terminal and silent in a pipe, redrawn from a Statuser source's Status
//     or set by a source's progress callback;
//   - cancellation and drain: ctx (the first SIGINT or SIGTERM) cancels the
//     source, which returns; the bus closes, the recorder writes what is
//     queued and closes the bundle, the sinks close, and only then does Run
//     return. No sleeps: every step waits for the one before it;
//   - the error merge and the accounting: Result holds each part's error
//     (Err merges them: view, source, recorder, sink) and the counts the
//     end-of-run report prints: published, emitted, recorded, rejected,
//     dropped by the view, reported dropped by producers.
//
// Sources never import this package's sinks, and sinks never hold sources:
// the bundle replay (ReplayBundle, Paced) lives here, not in the dashboard,
// and moves the dashboard's cursor through the Position interface.
//
// Errors: New fails only when the bundle cannot be created (the error is
// traces' "create bundle: …"). Run returns no error of its own; each part's
// is in Result, and a panicking source becomes SourceErr ("source
// panicked: …") so a dashboard can restore the terminal.
package pipeline
