// Package repro measures corruption: it drives concurrent tool-calling
// sessions against an OpenAI-compatible endpoint (the harness), classifies
// each session's outcome, and turns runs into statistics — corruption rates
// with Wilson intervals, Fisher's exact test between two runs, and the list of
// confounds that make an A/B comparison unfair.
//
// The statistics half, usable on its own:
//
//   - Summary is the shared JSON shape of `sim run --json`, `repro --json` and
//     each side of `ab --json`; SummaryOf builds one from outcome counts and
//     Headline prints the seeds' "CORRUPTION sessions: 14/80 = 18% (…)" line.
//   - RunStats accumulates a run from its events (manifest config, session
//     outcomes, scheduler observations, host and GPU facts); ReadRun and
//     RunStatsFromBundle fill one from a trace bundle.
//   - Compare turns two RunStats into an ABReport: per-class rates, Fisher's
//     two-sided p for corrupted vs not, confounds, and honest correlation notes
//     (retractions in a clean run are not causal evidence).
//   - Wilson and FisherExact are the underlying tests.
//
// A session is corrupted when its outcome is leak, no_tool or error;
// done, maxrounds and timeout are not corruption.
//
// Error contract: nothing here panics on input. Unknown outcome classes are
// counted (RunStats.UnknownOutcomes) rather than guessed; events of kinds this
// package does not use are ignored; bundle reading errors name the file and
// keep every event read before the damage (the traces package reports
// truncation). Statistics on empty runs return defined values (rate 0, Wilson
// [0, 1], Fisher p 1) rather than NaN.
package repro
