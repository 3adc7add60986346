// Package graphdiff judges graph-vs-eager differentials: what a captured CUDA
// graph replay computed against what an eager rerun computed from the same
// inputs (the seeds' GE_DIFF test). It owns the metrics (max/mean abs diff,
// relative RMSE, cosine, argmax agreement, top-k Jaccard and first differing
// rank, softmax KL, selection set differences), the tolerance policy that
// separates legitimate rounding from divergence (SPEC.md), and the analyzer
// that turns graphdiff.sample events into findings and a run summary.
//
// Error contract: nothing here returns an error or panics on any input. NaN,
// ±Inf, empty vectors, vectors of different lengths, out-of-range or duplicate
// selection positions are all judged (a length mismatch or a NaN on one side
// is a divergence), never rejected. Every float in a Result or Summary is
// finite, so they always encode as JSON.
package graphdiff
