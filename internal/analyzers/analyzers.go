// Package analyzers is the one list of kvcanary's stream analyzers, so every
// command that judges events (sim run, watch, demo, reports over bundles)
// runs the same set. A new analyzer is one field in Set, one line in All and
// one field in Summaries.
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

// Set is one fresh instance of every analyzer, each with its concrete type,
// so a caller reads typed results instead of asserting on Summary() any.
type Set struct {
	Canary    *canary.Analyzer
	Graphdiff *graphdiff.Analyzer
	Checksum  *checksum.Analyzer
}

// NewSet returns fresh instances of every analyzer.
func NewSet(opts Options) Set {
	return Set{
		Canary:    canary.NewAnalyzer(canary.Options{}),
		Graphdiff: graphdiff.NewAnalyzer(graphdiff.Options{}),
		Checksum:  checksum.NewAnalyzer(checksum.Options{WarmupMaxSeqLen: opts.WarmupMaxSeqLen}),
	}
}

// All returns the set as bus analyzers, in report order. Each one's Name is
// its section key in `sim run --json` and the demo's report.
func (s Set) All() []hook.Analyzer {
	return []hook.Analyzer{s.Canary, s.Graphdiff, s.Checksum}
}

// All returns a fresh instance of every analyzer, in report order.
func All(opts Options) []hook.Analyzer { return NewSet(opts).All() }

// Summaries are the analyzers' run-level aggregates, typed. Its JSON form is
// the report's analyzer sections keyed by analyzer name, byte for byte the
// map of Name() to Summary() that commands wrote before.
type Summaries struct {
	Canary    canary.Summary    `json:"canary"`
	Checksum  checksum.Summary  `json:"checksum"`
	Graphdiff graphdiff.Summary `json:"graphdiff"`
}

// Summaries returns every analyzer's aggregate so far.
func (s Set) Summaries() Summaries {
	return Summaries{Canary: s.Canary.Result(), Checksum: s.Checksum.Result(), Graphdiff: s.Graphdiff.Result()}
}
