// Package sim is the twin: a small, deterministic serving runtime with the
// anatomy of the seeds' SGLang stack (paged bf16/fp8 index-K arenas, PD
// disaggregation with a chunked transfer engine, continuous batching with
// retraction, captured decode graphs with a capture-time memory planner and
// multi-stream overlap, a sparse top-k indexer and a retrieval/copy model
// over DSML tool-call fragments). Corruption is never decided by a code
// path: it emerges from bytes (a planner that lets a main-stream temporary
// share the indexer's bf16 logits while the streams interleave, a chunk that
// lands after completion, a store to a freed out_loc, a baked length) and
// flows through top-k selection into the tokens a session receives.
//
// Engine is the runtime (Submit, Step); Run is the deterministic workload
// driver behind `kvcanary sim run`. Instruments publish hook events through
// a hook.Publisher; an instrument that is off costs nothing.
//
// The twin is a source: it observes and never judges. Run parses each reply
// the way the server's tool-call parser does (ParseDSML) and asks the
// caller's Workload.Judge — in kvcanary outcome.Classifier.Outcome, the
// classifier repro applies to a real server — whether the session ends and
// how; only an aborted request is classified error by the driver itself, as
// the HTTP harness classifies a failed request. Result holds the outcome
// counts; rates and intervals are the analyzers' (outcome.SummaryOf).
//
// Error contract: configuration and request errors are returned (naming the
// flag or request); Run without a judge is an error; nothing in the package
// panics on user input. Given the same Config, Workload and judge, outcomes
// and the event stream (timestamps are simulated) are identical whatever
// GOMAXPROCS is.
package sim
