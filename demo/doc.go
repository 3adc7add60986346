// Package demo runs the seeds' investigation on the twin, step by step, and
// derives its verdict from the evidence each step produces:
//
//  1. baseline: the corruption rate of the seeds' configuration (bf16 index-K,
//     captured decode with multi-stream overlap, PD);
//  2. transfer: per-room index-K checksums, prefill side vs decode side;
//  3. buffer: the replay canary's live-page overwrites;
//  4. compute: graph-vs-eager divergence of the captured replay;
//  5. A/B toggles (index-K fp8, --disable-cuda-graph, --cuda-graph-max-bs 64,
//     --multi-stream-overlap=false), each against the baseline with Fisher's
//     exact p and the confounds of sessions.Compare;
//  6. the verdict (Decide): the layer the decisive tests leave, and within
//     captured compute the narrowest unconfounded toggle that removes the
//     corruption.
//
// Run publishes an Update per step as it starts and finishes, so a plain
// printer (kvcanary demo) and a TUI can both show it. Every run is recorded to
// a bundle in Options.Out.
//
// The package sits above sources and analyzers (like cmd): it drives the twin
// with sim.Run and judges with checksum, canary, graphdiff and repro.
//
// Error contract: option errors and bundle I/O errors are returned, naming
// the option or file; a cancelled context stops the runs and returns its
// error. Nothing here panics on input.
package demo
