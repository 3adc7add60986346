package analyzers

import (
	"fmt"
	"strconv"
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

// NoteAnalyzers maps one note of a producer's run.end error (the
// pyhook's run_end_report joins its notes with "; ") to the analyzers whose
// evidence it says is incomplete; "" stands for every analyzer. The pyhook
// writes:
//
//	"<feature> off: <why>"  feature checksum.*, canary.*, graphdiff.* or
//	                        replay.step (the replay events, which canary
//	                        and graphdiff both read)
//	"<feature> off: not applicable: <why>"   nothing lost: the engine has
//	                        nothing the feature observes (canary.between on
//	                        DeepSeek-V4, which has no IndexKeyCache.move)
//	"<feature> on: <why>"   nothing lost: an opt-in feature is on and what
//	                        that changes (graphdiff.topk's capturer)
//	"N instrument errors"   errors in any instrument's hooks
//	"N room checksums skipped (index-K on the host)"   checksum
//	"run.end report failed: …"   unknown
//
// A note it does not know (another producer's, a changed pyhook) counts
// against every analyzer: unknown is not clean.
func NoteAnalyzers(note string) []string {
	note = strings.TrimSpace(note)
	if note == "" {
		return nil
	}
	if feature, _, ok := strings.Cut(note, " on: "); ok && !strings.Contains(feature, " ") && strings.Contains(feature, ".") {
		return nil
	}
	if feature, why, ok := strings.Cut(note, " off: "); ok && !strings.Contains(feature, " ") {
		if strings.HasPrefix(why, "not applicable: ") {
			return nil
		}
		switch inst, _, _ := strings.Cut(feature, "."); inst {
		case "checksum":
			return []string{checksum.AnalyzerName}
		case "canary":
			return []string{canary.AnalyzerName}
		case "graphdiff":
			return []string{graphdiff.AnalyzerName}
		case "replay":
			return []string{canary.AnalyzerName, graphdiff.AnalyzerName}
		}
		return []string{""}
	}
	if n, rest, ok := strings.Cut(note, " "); ok && isCount(n) {
		switch rest {
		case "room checksums skipped (index-K on the host)":
			return []string{checksum.AnalyzerName}
		case "instrument errors":
			return []string{""}
		}
	}
	return []string{""}
}

func isCount(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// Lost lists what the producers said they lost that bears on analyzer's
// verdict (checksum.AnalyzerName, canary.AnalyzerName,
// graphdiff.AnalyzerName), one line per producer, e.g. "python3 pid 7909
// (decode rank 1): canary.replay off: 3 errors …". A note (each
// "; "-separated part of a run.end error) counts when NoteAnalyzers maps it
// to the analyzer or to every analyzer ("3 instrument errors", a note it
// does not know): what it lost is unknown, so it may be this layer's. Dropped events count for every layer. Empty: nothing reported
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
				for _, a := range NoteAnalyzers(part) {
					rel = rel || a == "" || a == analyzer
				}
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
