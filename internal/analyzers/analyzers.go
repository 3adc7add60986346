// Package analyzers is the one list of kvcanary's stream analyzers, so every
// command that judges events (sim run, watch, demo, reports over bundles)
// runs the same set. A new analyzer is one line in All.
package analyzers

import (
	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Options are the knobs analyzers take from their caller.
type Options struct {
	WarmupMaxSeqLen int // checksum: rooms at or below this seq_len are warmups
}

// All returns a fresh instance of every analyzer, in report order. Each
// one's Name is its section key in `sim run --json` and the demo's report.
func All(opts Options) []hook.Analyzer {
	return []hook.Analyzer{
		canary.NewAnalyzer(canary.Options{}),
		graphdiff.NewAnalyzer(graphdiff.Options{}),
		checksum.NewAnalyzer(checksum.Options{WarmupMaxSeqLen: opts.WarmupMaxSeqLen}),
	}
}
