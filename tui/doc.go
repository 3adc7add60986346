// Package tui is kvcanary's live dashboard: a bubbletea program that shows
// what a hook.Bus carries — run configuration, session outcomes and the
// corruption rate, room checksums, replay canaries, graph-vs-eager samples,
// the scheduler, GPU telemetry, CUDA calls and the findings log — for
// `kvcanary watch` (a collector, a bundle replay or the twin, live), for
// `kvcanary repro --watch` and for `kvcanary demo` on a terminal.
//
// A corrupted session is a finding of its own (analyzer "session": kind,
// session, round, request id and the reply's excerpt); enter on the sessions
// panel opens the sessions table, sortable, with each session's excerpt. A
// panel whose instrument sent nothing says "not measured — needs …" (what
// would produce the data), never a zero. The GPU and CUDA panels, whose feeds
// run beside the engine (kvcanary gpu --emit, kvcanary probe cuda --emit),
// leave the grid until their first event and collapse to one line naming that
// command. At the 80×24 minimum a header item that does not fit is left out
// whole and counted ("+2 more"), and the help overlay lists it.
//
// The dashboard is a sink. It reads a Live bus subscription in batches on a
// frame tick (at most ~10 frames a second), so the producer never waits for
// it: when the view falls behind, the bus drops the oldest events and the
// header shows how many. Analyzers run on the producer's side; the dashboard
// polls their typed summaries through Options.Summaries and keeps its own small,
// bounded aggregates (counts, sparkline buckets, the last findings, a window
// of recent events for snapshots).
//
// Entry points: Run shows a dashboard on the terminal (Options: a Live
// subscription, analyzer summaries from an analyzers.Set, an optional
// replay Cursor, demo Steps, the source's Done and SourceStatus); New builds
// the bare model for tests and other programs. The paced bundle replay behind
// `watch --bundle` is a source and lives in package pipeline; it moves the
// Cursor through pipeline.Position.
//
// Components follow one shape: a pointer type with SetSize(w, h), an Update
// that returns the concrete type, and View. Keys live in one KeyMap, styles in
// one Styles struct with semantic names; NO_COLOR (or a terminal without
// colours) gives the ASCII profile.
//
// bubbletea, bubbles and lipgloss enter kvcanary through this package only.
//
// Error contract: nothing here panics on input. Event text that came from
// outside (finding summaries and evidence, request ids, run labels, session
// reasons and excerpts) is quoted
// with safetext.Quote before it reaches the terminal. Run returns the first
// error of the program or of a source (a bundle that cannot be read names the
// file); bubbletea restores the terminal on panics and signals, and sources
// started here recover their own panics into that error.
package tui
