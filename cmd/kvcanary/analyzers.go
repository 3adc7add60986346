package main

import (
	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// AnalyzerOptions are the knobs analyzers take from the command line.
type AnalyzerOptions struct {
	WarmupMaxSeqLen int // checksum: rooms at or below this seq_len are warmups
}

// newAnalyzers returns every analyzer, in report order. Commands that judge a
// stream of events (sim run, watch, reports over bundles) run all of them, so a
// new analyzer is one line here. Each entry's Name is its section key in
// `sim run --json`.
func newAnalyzers(opts AnalyzerOptions) []hook.Analyzer {
	return []hook.Analyzer{
		canary.NewAnalyzer(canary.Options{}),
		graphdiff.NewAnalyzer(graphdiff.Options{}),
		checksum.NewAnalyzer(checksum.Options{WarmupMaxSeqLen: opts.WarmupMaxSeqLen}),
		// One line per analyzer, e.g. checksum.NewAnalyzer(checksum.Options{...}),
	}
}
