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
// Error contract: configuration and request errors are returned (naming the
// flag or request); nothing in the package panics on user input. Given the
// same Config and Workload, outcomes and the event stream (timestamps are
// simulated) are identical whatever GOMAXPROCS is.
package sim
