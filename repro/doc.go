// Package repro is the session source: it drives concurrent tool-calling
// sessions against an OpenAI-compatible endpoint (the harness), observes each
// session's outcome with the rules of spec/outcome, and publishes the run as
// events. Judging runs — statistics, A/B, confounds, how a rate may be read —
// is the sessions analyzer's; repro imports only specs and runtime/hook.
//
// The harness half (kvcanary repro):
//
//   - RunHarness drives N multi-turn tool-calling sessions at a server's
//     /v1/chat/completions (JSON or server-sent events), at most Concurrency
//     at once, answering tool calls with deterministic ToolResults; each
//     session's first message (SessionTask) states its tool rounds
//     (ToolRoundsFor), so a round that must call a tool is known.
//   - outcome.Classifier.Judge classifies a response: leak (tool-call
//     markup, e.g. outcome.DefaultLeakMarkers, in content or
//     reasoning_content), no_tool, done, or "" to go on; transport failures,
//     non-200 answers, HTML, invalid JSON and cut streams are error, the
//     per-request timeout is timeout. outcome.HasLoop flags n-gram loops as
//     an extra signal.
//   - The harness publishes run.start, one session event per session and
//     run.end, so a recorded run is a bundle sessions.ReadRun and
//     sessions.Compare read like any other; HarnessOptions.Run stamps a
//     run id on each.
//   - Real workloads: HarnessOptions.APIKey and Headers go with every
//     request and are never published (reasons that echo them are
//     scrubbed); Sampling and MaxTokens go with every chat request;
//     Conversations (ReadConversations, LoadConversations: JSON Lines of
//     OpenAI messages + tools, format on Conversation) replace the
//     synthetic tasks with the same outcome classes. WorkloadExtra is what
//     all that adds to RunConfig.Extra: "workload.*" keys, which
//     sessions.Confounds reads as workload confounds, never as the engine
//     flag under test.
//   - Preflight checks, before any session, that a server can be measured
//     (GET /v1/models, the model, PreflightProbes concurrent probe requests
//     of which one must return a structured tool call) and returns a
//     *PreflightError with a Cause (unreachable, auth, no_tool_parser,
//     ignores_tools, …) and a Hint otherwise.
//   - FetchServerInfo and ApplyServerInfo record the settings a server
//     reports; SetSetting, ParseLabels and MergeSettings state the rest
//     (names and provenance: spec/runconfig).
//
// A session is corrupted when its outcome is leak, no_tool or error;
// done, maxrounds and timeout are not corruption.
//
// Error contract: nothing here panics on input; the harness turns every
// server misbehaviour into a session outcome and returns errors only for
// invalid options or a cancelled context (with the partial result).
package repro
