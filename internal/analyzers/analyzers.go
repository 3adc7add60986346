// Package analyzers is the one list of kvcanary's stream analyzers, so every
// command that judges events (sim run, watch, demo, reports over bundles)
// runs the same set, and the one place their run-level summaries are typed.
// A new analyzer is one field in Set (and its case in NewSet, All and SetOf)
// and one pointer field in Summaries (and its case in Set.Summaries and
// Sections).
//
// The bus knows analyzers only as hook.Analyzer (Name and Observe); what
// each one concluded over the run is read from the concrete analyzer
// (Result) through Set.Summaries, never through an untyped value.
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

// Set holds kvcanary's analyzers, each with its concrete type, so a caller
// reads typed results. A nil member is an analyzer the caller does not run:
// its summary is absent (not measured), never a zero.
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

// SetOf picks kvcanary's analyzers out of as (the first of each type);
// analyzers of other types are not in the set, and a type as lacks is a
// nil member. It is how a sink handed a caller's list of bus analyzers
// reads their summaries. It matches the concrete types only: a wrapper
// around one of them (a type embedding *canary.Analyzer) is not found, so
// its summary is absent; pass the wrapped analyzer instead.
func SetOf(as ...hook.Analyzer) Set {
	var s Set
	for _, a := range as {
		switch x := a.(type) {
		case *canary.Analyzer:
			if s.Canary == nil {
				s.Canary = x
			}
		case *graphdiff.Analyzer:
			if s.Graphdiff == nil {
				s.Graphdiff = x
			}
		case *checksum.Analyzer:
			if s.Checksum == nil {
				s.Checksum = x
			}
		}
	}
	return s
}

// All returns the set's analyzers as bus analyzers, in report order,
// leaving out nil members. Each one's Name is its section key in `sim run
// --json` and the demo's report.
func (s Set) All() []hook.Analyzer {
	as := make([]hook.Analyzer, 0, 3)
	if s.Canary != nil {
		as = append(as, s.Canary)
	}
	if s.Graphdiff != nil {
		as = append(as, s.Graphdiff)
	}
	if s.Checksum != nil {
		as = append(as, s.Checksum)
	}
	return as
}

// All returns a fresh instance of every analyzer, in report order.
func All(opts Options) []hook.Analyzer { return NewSet(opts).All() }

// Summaries are the analyzers' run-level aggregates, typed. A nil field is
// an analyzer that did not run. Its JSON form is the report's analyzer
// sections keyed by analyzer name, byte for byte the map of analyzer name
// to summary that commands wrote before (an absent analyzer has no key).
type Summaries struct {
	Canary    *canary.Summary    `json:"canary,omitempty"`
	Checksum  *checksum.Summary  `json:"checksum,omitempty"`
	Graphdiff *graphdiff.Summary `json:"graphdiff,omitempty"`
}

// Summaries returns every present analyzer's aggregate so far. Each call
// returns fresh values; it is safe while the analyzers observe events.
func (s Set) Summaries() Summaries {
	var out Summaries
	if s.Canary != nil {
		r := s.Canary.Result()
		out.Canary = &r
	}
	if s.Checksum != nil {
		r := s.Checksum.Result()
		out.Checksum = &r
	}
	if s.Graphdiff != nil {
		r := s.Graphdiff.Result()
		out.Graphdiff = &r
	}
	return out
}

// Sections returns the present summaries by analyzer name, as values (a
// canary.Summary, not a pointer): the sections of output that lists them by
// name, such as `sim run`'s JSON object and its text report.
func (s Summaries) Sections() map[string]any {
	m := make(map[string]any, 3)
	if s.Canary != nil {
		m[canary.AnalyzerName] = *s.Canary
	}
	if s.Checksum != nil {
		m[checksum.AnalyzerName] = *s.Checksum
	}
	if s.Graphdiff != nil {
		m[graphdiff.AnalyzerName] = *s.Graphdiff
	}
	return m
}
