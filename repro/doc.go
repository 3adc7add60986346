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
//     outcomes, scheduler observations, host and GPU facts); ReadRun fills
//     one from any event reader, e.g. a trace bundle (the CLI opens it:
//     repro reads events, not files).
//   - Compare turns two RunStats into an ABReport: per-class rates, Fisher's
//     two-sided p for corrupted vs not, confounds, and honest correlation notes
//     (retractions in a clean run are not causal evidence).
//   - Wilson and FisherExact are the underlying tests.
//
// The harness half (kvcanary repro):
//
//   - RunHarness drives N multi-turn tool-calling sessions at a server's
//     /v1/chat/completions (JSON or server-sent events), at most Concurrency
//     at once, answering tool calls with deterministic ToolResults; each
//     session's first message (SessionTask) states its tool rounds
//     (ToolRoundsFor), so a round that must call a tool is known.
//   - Classifier.Judge classifies a response: leak (tool-call markup, e.g.
//     DefaultLeakMarkers, in content or reasoning_content), no_tool, done, or
//     "" to go on; transport failures, non-200 answers, HTML, invalid JSON and
//     cut streams are error, the per-request timeout is timeout. HasLoop flags
//     n-gram loops as an extra signal.
//   - The harness publishes run.start, one session event per session and
//     run.end, so a recorded run is a bundle ReadRun and Compare read like
//     any other; HarnessOptions.Run stamps a run id on each.
//   - Real workloads: HarnessOptions.APIKey and Headers go with every
//     request and are never published (reasons that echo them are
//     scrubbed); Sampling and MaxTokens go with every chat request;
//     Conversations (ReadConversations, LoadConversations: JSON Lines of
//     OpenAI messages + tools, format on Conversation) replace the
//     synthetic tasks with the same outcome classes. WorkloadExtra is what
//     all that adds to RunConfig.Extra: "workload.*" keys, which Confounds
//     reads as workload confounds, never as the engine flag under test.
//   - Preflight checks, before any session, that a server can be measured
//     (GET /v1/models, the model, PreflightProbes concurrent probe requests
//     of which one must return a structured tool call) and returns a
//     *PreflightError with a Cause (unreachable, auth, no_tool_parser,
//     ignores_tools, …) and a Hint otherwise.
//   - Assess says how a run's outcomes may be read: server_failed when
//     every session ended in error or timeout, needs_control when no_tool
//     reaches NoToolControlShare (25%) of the sessions, else measured.
//
// A session is corrupted when its outcome is leak, no_tool or error;
// done, maxrounds and timeout are not corruption.
//
// Error contract: nothing here panics on input; the harness turns every
// server misbehaviour into a session outcome and returns errors only for
// invalid options or a cancelled context (with the partial result). Unknown outcome classes are
// counted (RunStats.UnknownOutcomes) rather than guessed; events of kinds this
// package does not use are ignored; bundle reading errors name the file and
// keep every event read before the damage (the traces package reports
// truncation). Statistics on empty runs return defined values (rate 0, Wilson
// [0, 1], Fisher p 1) rather than NaN.
package repro
