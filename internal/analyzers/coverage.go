package analyzers

import (
	"fmt"
	"strings"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// MaxCoverageProducers bounds the producers a Coverage lists; the totals
// count all of them.
const MaxCoverageProducers = 64

// maxNoteLen bounds one producer's error note as a Coverage keeps it.
const maxNoteLen = 512

// ProducerEnd is one producer's run.end: who it was and what it said it lost.
type ProducerEnd struct {
	Node    string `json:"node,omitempty"`
	Proc    string `json:"proc,omitempty"`
	PID     int32  `json:"pid,omitempty"`
	Role    string `json:"role,omitempty"`
	Rank    int32  `json:"rank,omitempty"`
	Dropped uint64 `json:"dropped,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Who names the producer, e.g. "python3 pid 7909 (decode rank 1)".
func (p ProducerEnd) Who() string {
	s := p.Proc
	if s == "" {
		s = "producer"
	}
	if p.PID != 0 {
		s += fmt.Sprintf(" pid %d", p.PID)
	}
	if p.Node != "" {
		s += " on " + p.Node
	}
	if p.Role != "" {
		s += fmt.Sprintf(" (%s rank %d)", p.Role, p.Rank)
	}
	return s
}

// Coverage is what a bundle's producers said, in their run.end events, about
// the evidence they did not deliver: events dropped and error notes
// ("canary.replay off: 3 errors", "4 room checksums skipped (index-K on the
// host)"). A verdict over a bundle whose producers lost evidence relevant to
// its layer is partial, never clean: what was not observed is unknown.
type Coverage struct {
	Ends      int           `json:"run_ends"`            // run.end events read
	Dropped   uint64        `json:"dropped"`             // events the producers dropped, all of them
	Producers []ProducerEnd `json:"producers,omitempty"` // those that dropped or reported an error, first MaxCoverageProducers
	Lossy     int           `json:"lossy_producers"`     // producers that dropped or reported an error, all of them
}

// CoverageCollector builds a Coverage from the run.end events it observes.
// Reading the same bundle twice adds nothing: a run.end is counted once per
// producer and timestamp.
type CoverageCollector struct {
	seen map[coverageKey]bool
	c    Coverage
}

type coverageKey struct {
	src hook.Source
	ts  int64
}

// NewCoverageCollector returns an empty collector.
func NewCoverageCollector() *CoverageCollector {
	return &CoverageCollector{seen: map[coverageKey]bool{}}
}

// Observe takes one event; only run.end events count.
func (cc *CoverageCollector) Observe(ev hook.Event) {
	b, ok := ev.Body.(*hook.RunEnd)
	if !ok || b == nil {
		return
	}
	k := coverageKey{ev.Src, ev.TS}
	if cc.seen[k] {
		return
	}
	cc.seen[k] = true
	cc.c.Ends++
	if b.Dropped == 0 && b.Error == "" {
		return
	}
	cc.c.Dropped += b.Dropped
	cc.c.Lossy++
	if len(cc.c.Producers) < MaxCoverageProducers {
		e := b.Error
		if len(e) > maxNoteLen {
			e = e[:maxNoteLen] + "…"
		}
		cc.c.Producers = append(cc.c.Producers, ProducerEnd{Node: ev.Src.Node, Proc: ev.Src.Proc, PID: ev.Src.PID,
			Role: ev.Src.Role, Rank: ev.Src.Rank, Dropped: b.Dropped, Error: e})
	}
}

// Result returns the coverage so far.
func (cc *CoverageCollector) Result() Coverage {
	c := cc.c
	c.Producers = append([]ProducerEnd(nil), c.Producers...)
	return c
}

// Merge adds o's producers and counts to c (several bundles judged together).
func (c *Coverage) Merge(o Coverage) {
	c.Ends += o.Ends
	c.Dropped += o.Dropped
	c.Lossy += o.Lossy
	for _, p := range o.Producers {
		if len(c.Producers) < MaxCoverageProducers {
			c.Producers = append(c.Producers, p)
		}
	}
}

// layerWords are the words by which a producer's note names an analyzer's
// instrument ("canary.replay off", "room checksums skipped").
var layerWords = map[string][]string{
	checksum.AnalyzerName:  {"checksum"},
	canary.AnalyzerName:    {"canary"},
	graphdiff.AnalyzerName: {"graphdiff", "graph-vs-eager", "graph vs eager"},
}

// names reports whether part names any analyzer's instrument, and whether
// it names analyzer's.
func names(part, analyzer string) (any, mine bool) {
	p := strings.ToLower(part)
	for a, ws := range layerWords {
		for _, w := range ws {
			if strings.Contains(p, w) {
				any = true
				mine = mine || a == analyzer
			}
		}
	}
	return any, mine
}

// Lost lists what the producers said they lost that bears on analyzer's
// verdict (checksum.AnalyzerName, canary.AnalyzerName,
// graphdiff.AnalyzerName), one line per producer, e.g. "python3 pid 7909
// (decode rank 1): canary.replay off: 3 errors …". A note (each
// "; "-separated part of a run.end error) that names the analyzer's
// instrument counts; so does one that names no instrument at all ("3
// instrument errors", a crash): what it lost is unknown, so it may be this
// layer's. Dropped events count for every layer. Empty: nothing reported
// lost. When more producers lost evidence than a Coverage keeps, the last
// line says how many more.
func (c Coverage) Lost(analyzer string) []string {
	var out []string
	for _, p := range c.Producers {
		var why []string
		if p.Dropped > 0 {
			why = append(why, fmt.Sprintf("dropped %d events", p.Dropped))
		}
		if p.Error != "" {
			rel := false
			for _, part := range strings.Split(p.Error, "; ") {
				any, mine := names(part, analyzer)
				rel = rel || mine || !any
			}
			if rel {
				why = append(why, p.Error)
			}
		}
		if len(why) > 0 {
			out = append(out, p.Who()+": "+strings.Join(why, "; "))
		}
	}
	if n := c.Lossy - len(c.Producers); n > 0 {
		out = append(out, fmt.Sprintf("%d more producers reported losses (not listed)", n))
	} else if c.Dropped > 0 && len(out) == 0 {
		out = append(out, fmt.Sprintf("producers dropped %d events", c.Dropped))
	}
	return out
}

// Partial is the one-line reason a verdict over analyzer's evidence is
// partial, or "" when the producers reported nothing lost that bears on it.
func (c Coverage) Partial(analyzer string) string {
	l := c.Lost(analyzer)
	if len(l) == 0 {
		return ""
	}
	return "producers reported lost evidence: " + strings.Join(l, " | ")
}
