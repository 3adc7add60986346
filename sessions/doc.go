// Package sessions judges runs of sessions: it turns session outcomes into
// statistics and compares two runs. A source (the repro harness, the twin's
// driver) observes each session's outcome with the rules of spec/outcome and
// publishes it; this package reads those events.
//
//   - RunStats accumulates a run from its events (manifest config, session
//     outcomes, scheduler observations, host and GPU facts); ReadRun fills
//     one from any event reader, e.g. a trace bundle (the CLI opens it:
//     sessions reads events, not files). RunStats.Summary is the Summary
//     contract of spec/outcome.
//   - Compare turns two RunStats into an ABReport: per-class rates, Fisher's
//     two-sided p for corrupted vs not, confounds, and honest correlation
//     notes (retractions in a clean run are not causal evidence).
//   - Confounds lists what makes an A/B comparison unfair: other differing
//     engine flags (EngineFlagDiffs; unknown is not a value), workload,
//     model, scheduler pressure, hardware and tool version.
//   - Assess says how a run's outcomes may be read: server_failed when
//     every session ended in error or timeout, needs_control when no_tool
//     reaches NoToolControlShare (25%) of the sessions, else measured.
//   - FisherExact is the underlying test (Wilson is spec/outcome's).
//
// It is an analyzer: it imports only specs and runtime/hook.
//
// Error contract: nothing here panics on input. Unknown outcome classes are
// counted (RunStats.UnknownOutcomes) rather than guessed; events of kinds
// this package does not use are ignored; bundle reading errors name the file
// and keep every event read before the damage (the traces package reports
// truncation). Statistics on empty runs return defined values (rate 0,
// Wilson [0, 1], Fisher p 1) rather than NaN.
package sessions
